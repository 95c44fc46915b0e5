"""A session's sub-agent children, as its facade shows them (see ``runtime/subagents.py``).

``Session.children()`` lists the sub-agent calls of a session with where each child's task
stands (read from the child's own folds, so it is current even before the parent recorded the
end); ``Session.pending()`` adds the open requests of its children (recursively, each with the
path of agents it came through); ``Session.respond()`` routes an answer to the child that
asked and wakes the session at once (the same wake-up the child's driver would put in); the
receipt it returns is that wake-up's, so it observes the run of the calling session that
goes on with the answer (or, when the wake-up starts none, its latest run as it stands).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from agentnb import states
from agentnb.errors import AgentnbError, InvalidAnswer
from agentnb.events import Event
from agentnb.holders import lease_alive
from agentnb.ids import SessionKey
from agentnb.log import Inbox
from agentnb.projections.state import SessionState
from agentnb.projections.subagents import (
    child_progress,
    key_of,
    wake_data,
    wake_key,
)
from agentnb.records import Child, Interaction, Receipt, UsageTotals
from agentnb.stores.base import SessionStore

__all__ = ["ChildSession", "children_of", "descendant_requests", "route_answers", "wake"]


class ChildSession(Protocol):
    """What the parent's facade uses of a child's ``Session``."""

    key: SessionKey

    def pending(self) -> dict[str, Interaction]: ...

    def respond(self, request_id: str | Mapping[str, object], answer: object = ...) -> Receipt: ...


OpenChild = Callable[[SessionKey], ChildSession | None]
"""key -> the child's session handle (None: it is gone or not this runtime's)."""


def children_of(store: SessionStore, calls: Iterable[Mapping[str, Any]]) -> list[Child]:
    """``Child`` records of sub-agent calls (``SessionState.children`` values), each with its
    child's task as it stands now (from the child's shared folds, ``agentnb.states``)."""
    out: list[Child] = []
    for call in calls:
        key = key_of(call["child"])
        progress = None
        try:
            before = lease_alive(store, key)  # and after: see ``SubagentCalls._look``
            with states.read(store, key) as (state, inbox):
                executing = before or lease_alive(store, key)
                progress = child_progress(state, inbox, call["call_id"], executing=executing)
        except AgentnbError:  # not made yet (the call was just spawned), deleted, or
            pass  # unreadable: the parent's record is what is known
        if progress is None:
            status = call.get("status", "running")
            turn = None
            output, error, usage = call.get("output"), call.get("error"), None
        else:
            status, turn = progress.status, progress.turn_id
            output, error = progress.output, progress.error
            usage = UsageTotals.of(progress.usage)
        out.append(
            Child(
                call["call_id"],
                call["turn_id"],
                key,
                call["agent_id"],
                call.get("name"),
                call.get("task", ""),
                status,
                output,
                error,
                usage,
                turn,
            )
        )
    return out


def _open_calls(state: SessionState) -> list[Mapping[str, Any]]:
    """Sub-agent calls whose result the session has not recorded yet."""
    return [c for c in state.children.values() if c.get("status") == "running"]


def descendant_requests(state: SessionState, open_child: OpenChild) -> dict[str, Interaction]:
    """The open requests of the session's children (theirs recursively), keyed by request
    id, each with ``path`` (the agents from the child down to the one asking) and
    ``session`` (where it lives). A request id a nearer session also uses is left out."""
    out: dict[str, Interaction] = {}
    for call in _open_calls(state):
        child = open_child(key_of(call["child"]))
        if child is None:
            continue
        for rid, request in child.pending().items():
            if rid in out or rid in state.pending:
                continue
            out[rid] = Interaction(
                request.request_id,
                request.kind,
                request.turn_id,
                request.call_id,
                request.tool_name,
                request.arguments,
                request.prompt,
                (call["agent_id"], *request.path),
                request.session or child.key,
            )
    return out


def route_answers(
    store: SessionStore,
    key: SessionKey,
    state: SessionState,
    answers: Mapping[str, object],
    open_child: OpenChild,
) -> tuple[Receipt, Event]:
    """Answer a child's requests through its parent: the child's ``respond``, then the
    parent's wake-up for it (its inbox record is returned to make the parent's receipt).

    ``InvalidAnswer`` when an id is nobody's request, or the answers belong to requests of
    more than one child.
    """
    targets: dict[str, Mapping[str, Any]] = {}
    handles: dict[str, ChildSession] = {}
    for call in _open_calls(state):
        child = open_child(key_of(call["child"]))
        if child is None:
            continue
        for rid in child.pending():
            targets.setdefault(rid, call)
            handles.setdefault(rid, child)
    unknown = [rid for rid in answers if rid not in targets]
    if unknown:
        raise InvalidAnswer(
            f"there is no request {unknown[0]!r} in session {key} or its sub-agents; see "
            "session.pending()"
        )
    calls = {targets[rid]["call_id"] for rid in answers}
    if len(calls) > 1:
        raise InvalidAnswer(
            "the answers belong to requests of different sub-agents; answer one sub-agent at a time"
        )
    call = targets[next(iter(answers))]
    receipt = handles[next(iter(answers))].respond(dict(answers))
    return receipt, wake(store, key, call["turn_id"], call["call_id"], receipt.command_id)


def wake(
    store: SessionStore, key: SessionKey, turn_id: str, call_id: str, command_id: str
) -> Event:
    """Put in ``key``'s inbox the wake-up of its turn ``turn_id`` for the child command
    ``command_id`` (of the call ``call_id``): the same record however often, and whoever
    asks (the child's driver, or an answer routed through the parent)."""
    event, _ = Inbox(store, key).accept(
        "resume",
        key=wake_key(command_id),
        turn_id=turn_id,
        data=wake_data(call_id, command_id),
    )
    return event
