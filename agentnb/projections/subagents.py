"""Sub-agent decisions, as pure functions of folded state: no I/O here.

A sub-agent call is carried out in a child session (see ``agentnb/runtime/subagents.py``
for the whole design). What the parts that do the I/O decide from is here, once:

- ``child_key``: the child's key, derived from the parent's key and the call id (DESIGN §11:
  ``<parent session>/<call id>``), so a parent that runs the call again finds the same child;
  ``submit_key`` and ``context_key`` the idempotency keys of what the call puts in the child's
  inbox, so it finds the same child *turn*;
- ``child_progress``: where the child's task stands, from the child's folds: ``moving``
  (queued, running, or an answer / resume / cancel is on its way), ``waiting`` (suspended or
  interrupted: only a person moves it) or ``settled`` (completed, failed, cancelled);
- the wake-up of a parent that waits for a person-blocked child: ``wake_key`` / ``wake_data``
  (the ``resume`` command a moving child puts in the parent's inbox), ``is_wake`` and
  ``wake_applies`` (whether it continues the parent's turn, or is a no-op);
- ``shared_context``: what of the parent's conversation a child sees (``share_context``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from agentnb.events import Message
from agentnb.ids import MAX_ID_LENGTH, SessionKey
from agentnb.limits import MAX_INPUT_CHARS
from agentnb.projections.decisions import effective_status
from agentnb.projections.queue import will_move
from agentnb.projections.state import Command, InboxState, SessionState

__all__ = [
    "ChildProgress",
    "child_key",
    "child_progress",
    "context_key",
    "is_wake",
    "key_of",
    "key_ref",
    "shared_context",
    "submit_key",
    "wake_applies",
    "wake_data",
    "wake_key",
]

SETTLED = frozenset({"completed", "failed", "cancelled"})
"""Child statuses after which the call has its result."""


def key_ref(key: SessionKey) -> dict[str, str]:
    """A key as data (an event's ``SessionRef``)."""
    return {
        "namespace": key.namespace,
        "user_id": key.user_id,
        "agent_id": key.agent_id,
        "session_id": key.session_id,
    }


def key_of(ref: Mapping[str, Any]) -> SessionKey:
    """The key a ``SessionRef`` holds."""
    return SessionKey(ref["namespace"], ref["user_id"], ref["agent_id"], ref["session_id"])


def child_key(parent: SessionKey, agent_id: str, call_id: str) -> SessionKey:
    """The key of the child session a call makes: ``<parent session id>/<call id>``, of the
    child's agent, for the parent's user and namespace (cut with a digest of both when that
    would pass ``MAX_ID_LENGTH``)."""
    session_id = f"{parent.session_id}/{call_id}"
    if len(session_id) > MAX_ID_LENGTH:
        digest = hashlib.sha256(f"{parent}\x1f{call_id}".encode()).hexdigest()[:32]
        session_id = f"{parent.session_id[:150]}/{call_id[:60]}~{digest}"
    return SessionKey(parent.namespace, parent.user_id, agent_id, session_id)


def submit_key(call_id: str) -> str:
    """The idempotency key of the child's task: the same call submits it once."""
    return f"subagent:{call_id}"


def context_key(call_id: str) -> str:
    """The idempotency key of the shared context injected into the child."""
    return f"subagent-context:{call_id}"


@dataclass(frozen=True, slots=True)
class ChildProgress:
    """Where a child's task stands (``child_progress``)."""

    state: Literal["absent", "moving", "waiting", "settled"]
    """``absent``: the task was never accepted; ``moving``: queued, running, or an answer,
    resume or cancel of it is on its way; ``waiting``: only a person moves it (suspended
    for an answer, or interrupted); ``settled``: it ended."""
    status: str
    """The task's effective status (``queued`` before it started)."""
    turn_id: str | None = None
    output: str | None = None
    error: str | None = None
    usage: dict[str, int] = field(default_factory=dict)


def child_progress(
    state: SessionState, inbox: InboxState, call_id: str, *, executing: bool
) -> ChildProgress:
    """Where the task the call ``call_id`` gave its child stands, from the child's folds.

    ``executing``: whether some runtime holds the child's lease now (a run open with nobody
    executing it was cut off: interrupted).
    """
    key = submit_key(call_id)
    submit = next((c for c in inbox.commands.values() if c.key == key), None)
    if submit is None or submit.turn_id is None:
        return ChildProgress("absent", "queued")
    turn_id = submit.turn_id
    turn = state.turns.get(turn_id)
    if turn is None:
        if submit.command_id in inbox.rejected:
            reason = inbox.rejected[submit.command_id]
            return ChildProgress("settled", "cancelled", turn_id, error=reason)
        return ChildProgress("moving", "queued", turn_id)
    status = effective_status(state, turn, executing=executing)
    used = dict(turn.usage)
    if status in SETTLED:
        output = turn.output if status == "completed" else None
        error = turn.error if status != "completed" else None
        return ChildProgress("settled", status, turn_id, output, error, used)
    if status == "running" or will_move(state, inbox, turn_id):
        return ChildProgress("moving", status, turn_id, usage=used)
    return ChildProgress("waiting", status, turn_id, error=turn.error, usage=used)


# -- waking a parent ---------------------------------------------------------------------


def wake_key(command_id: str) -> str:
    """The idempotency key of the parent's wake-up for a child command ``command_id``: the
    child's driver and a routed answer put in the same one."""
    return f"subagent-wake:{command_id}"


def wake_data(call_id: str, command_id: str) -> dict[str, Any]:
    """The ``data`` of a wake-up ``resume`` command (a child's command moves its task)."""
    return {"wake": {"call_id": call_id, "command_id": command_id}}


def is_wake(command: Command) -> bool:
    """Whether a ``resume`` command is a child's wake-up (not a person's resume)."""
    return command.kind == "resume" and "wake" in command.data


def wake_applies(state: SessionState, turn_id: str) -> bool:
    """Whether a wake-up continues ``turn_id``: it is suspended waiting for its sub-agents
    only (no request of its own is open) and is the latest unfinished turn. Otherwise it is
    carried out as a no-op: a running turn sees its children itself, an interrupted one was
    stopped by a person, and one with its own requests goes on when they are answered."""
    turn = state.turns.get(turn_id)
    latest = state.latest_turn
    if turn is None or latest is None or latest.turn_id != turn_id:
        return False
    if turn.status != "suspended" or state.pending_of(turn_id):
        return False
    return any(
        c["status"] == "running" and c["call_id"] in {o.call_id for o in state.open_calls(turn_id)}
        for c in state.children_of(turn_id)
    )


# -- what a child sees of its parent's conversation --------------------------------------

_PER_MESSAGE = 4_000
"""Characters of one shared message at most (the rest is cut)."""


def shared_context(
    messages: Sequence[Message], mode: str, last_n: int, *, parent_agent: str
) -> str | None:
    """The parent's conversation as material for the child (None: nothing to share).

    ``mode`` ``all`` shares every message, ``last_n`` the last ``last_n``, ``none`` nothing.
    User and assistant text and tool results are shared as plain text (tool calls by name
    and arguments); system messages are not. The whole is cut from the front to fit one
    input.
    """
    if mode == "none":
        return None
    chosen = [m for m in messages if m.role != "system"]
    if mode == "last_n":
        chosen = chosen[-last_n:]
    lines = []
    for m in chosen:
        if m.role == "tool":
            text = f"[tool {m.name or ''} result] {m.text}"
        elif m.role == "assistant" and m.tool_calls:
            calls = ", ".join(f"{c.name}({dict(c.arguments)})" for c in m.tool_calls)
            text = f"[{parent_agent}] {m.text}\n[{parent_agent} called] {calls}".strip()
        elif m.role == "assistant":
            text = f"[{parent_agent}] {m.text}"
        else:
            text = f"[user] {m.text}"
        if len(text) > _PER_MESSAGE:
            text = text[: _PER_MESSAGE - 1] + "\u2026"
        lines.append(text)
    if not lines:
        return None
    head = f"The conversation of {parent_agent}, which delegated this task to you:\n"
    body = "\n".join(lines)
    room = MAX_INPUT_CHARS - len(head) - 1
    if len(body) > room:
        body = "\u2026" + body[-(room - 1) :]
    return head + body
