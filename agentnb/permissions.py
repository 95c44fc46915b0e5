"""Permission rules: what a person allowed once, so later matching calls need no approval.

A person approving a call may remember the approval as a rule (``Answer.approve(remember=
"session" | "agent", match={...})``). The runtime records it as ``permission/changed`` in
the session's log, with the call's tool, the argument constraints and a digest of the
agent's fingerprint. A later call of a ``confirm=True`` tool that a rule in force matches
runs without asking; its ``tool/decision`` and ``action/end`` cite the rule.

Which rules are in force for a session:

- the rules granted in it (its fold), less those a ``revoke`` command accepted for it names
  (a revoke holds from the moment it is accepted; the runtime records it when it next
  dispatches the session);
- ``agent``-scoped rules granted in the other sessions of the same namespace, user and
  agent id. Those sessions carry the label ``PERMISSIONS_LABEL`` (how they are found,
  through the catalogue's index);
- in both cases only rules granted under the agent the caller runs now (same fingerprint).

A rule never outlives its session's deletion (it is in that session's log) or an agent
change (``agent/changed`` ends every rule of the session, and a rule of another fingerprint
never matches).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

from agentnb import states
from agentnb.events import canonical_json
from agentnb.ids import SessionKey
from agentnb.projections.state import InboxState, SessionState
from agentnb.stores.base import MAX_LIST_LIMIT, SessionRecord, SessionStore

__all__ = [
    "PERMISSIONS_LABEL",
    "agent_digest",
    "find_rule",
    "matching_rule",
    "rules_in_force",
    "shared_rules",
]

PERMISSIONS_LABEL = "agentnb.permissions"
"""The catalogue label (value ``agent``) of a session holding agent-scoped rules."""


def agent_digest(fingerprint: Mapping[str, Any]) -> str:
    """A short, stable digest of an agent fingerprint (what a rule is bound to)."""
    return hashlib.sha256(canonical_json(dict(fingerprint)).encode()).hexdigest()[:32]


def rules_in_force(state: SessionState, inbox: InboxState) -> dict[str, dict[str, Any]]:
    """The rules granted in a session, less those an accepted ``revoke`` names."""
    revoked = {
        c.data.get("rule_id")
        for c in inbox.commands.values()
        if c.kind == "revoke" and c.command_id not in inbox.rejected
    }
    return {rid: rule for rid, rule in state.permissions.items() if rid not in revoked}


def matching_rule(
    rules: Iterable[Mapping[str, Any]], tool: str, arguments: Mapping[str, Any], digest: str
) -> Mapping[str, Any] | None:
    """The first rule that allows a call of ``tool`` with ``arguments`` under the agent
    whose fingerprint digest is ``digest``, or None."""
    for rule in rules:
        if (
            rule["tool"] == tool
            and rule["agent"] == digest
            and all(
                k in arguments and canonical_json(arguments[k]) == canonical_json(v)
                for k, v in (rule.get("match") or {}).items()
            )
        ):
            return rule
    return None


def _rule_holders(store: SessionStore, key: SessionKey) -> list[SessionRecord]:
    """The other sessions of ``key``'s namespace, user and agent that hold agent-scoped rules
    (the label marks them; the catalogue's index finds them)."""
    records = store.find_sessions(
        namespace=key.namespace,
        user_id=key.user_id,
        agent_id=key.agent_id,
        labels={PERMISSIONS_LABEL: "agent"},
        limit=MAX_LIST_LIMIT,
        archived=None,
    )
    return [record for record in records if record.key != key]


def shared_rules(
    store: SessionStore, key: SessionKey, digest: str
) -> list[tuple[SessionKey, dict[str, Any]]]:
    """(session, rule) for the agent-scoped rules in force that other sessions of ``key``'s
    namespace, user and agent granted under the agent ``digest`` (read from their shared
    folds, ``agentnb.states``: a later look folds only what was committed since)."""
    found: list[tuple[SessionKey, dict[str, Any]]] = []
    for record in _rule_holders(store, key):
        with states.read(store, record.key) as (state, inbox):
            rules = list(rules_in_force(state, inbox).values())
        for rule in rules:
            if rule["scope"] == "agent" and rule["agent"] == digest:
                found.append((record.key, rule))
    return found


def find_rule(
    store: SessionStore, key: SessionKey, state: SessionState, inbox: InboxState, rule_id: str
) -> SessionKey | None:
    """The session that holds rule ``rule_id`` among those in force for ``key`` (its own,
    or an agent-scoped one of another session of the agent, of any fingerprint), or None."""
    if rule_id in rules_in_force(state, inbox):
        return key
    for record in _rule_holders(store, key):
        with states.read(store, record.key) as (held, held_inbox):
            if rule_id in rules_in_force(held, held_inbox):
                return record.key
    return None
