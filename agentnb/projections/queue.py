"""Why queued work does not move: the turn the queue is parked behind, and the ways out.

The queue parks behind a suspended, interrupted or failed turn (``next_command``): later
tasks wait until that turn is answered, resumed or cancelled. These pure functions name that
turn for ``wait()`` (which raises ``Parked``), ``inspect()``, the command line and the view.
``queued_commands`` and ``pending_steers`` count what waits, for the queue limits (``Limits``).
"""

from __future__ import annotations

from agentnb.errors import Parked
from agentnb.projections.decisions import effective_status
from agentnb.projections.state import PARKING, InboxState, SessionState, TurnState

__all__ = [
    "blocking_turn",
    "parked_error",
    "pending_steers",
    "queued_commands",
    "ways_out",
    "will_move",
]

_UNPARKING = frozenset({"resume", "respond", "cancel", "reconcile"})


def blocking_turn(
    state: SessionState, inbox: InboxState, *, executing: bool
) -> tuple[TurnState, str] | None:
    """(turn, effective status) the queue waits behind, or None if the queue can move.

    None too when a command that can move it (resume, respond, cancel, reconcile of that
    turn) is accepted and not yet carried out.
    """
    latest = state.latest_turn
    if latest is None:
        return None
    status = effective_status(state, latest, executing=executing)
    if status not in PARKING or will_move(state, inbox, latest.turn_id):
        return None
    return latest, status


def will_move(state: SessionState, inbox: InboxState, turn_id: str) -> bool:
    """Whether a command that continues or ends ``turn_id`` is accepted and not yet done."""
    return any(
        command.turn_id == turn_id
        and command.kind in _UNPARKING
        and command.command_id not in state.handled
        and command.command_id not in inbox.rejected
        for command in inbox.commands.values()
    )


def ways_out(state: SessionState, turn: TurnState, status: str) -> str:
    """What a person can do so the turn stops blocking the queue, in one sentence."""
    t = turn.turn_id
    cancel = f"session.cancel({t!r}) drops it"
    if (
        status == "suspended"
        and not state.pending_of(t)
        and any(c.get("status") == "running" for c in state.children_of(t))
    ):
        return (
            "its sub-agents wait for a person: answer them with session.respond(...) (see "
            f"session.pending() and session.children()), or {cancel}"
        )
    if status == "suspended":
        ids = ", ".join(r["request_id"] for r in state.pending_of(t)) or "its requests"
        return (
            f"it waits for answers ({ids}): session.respond(...) continues it "
            f"(see session.pending()), or {cancel}"
        )
    if status == "failed":
        why = f" ({turn.error})" if turn.error else ""
        return f"it failed{why}: session.resume({t!r}) tries it again, or {cancel}"
    if state.uncertain_calls(t):
        return (
            "it was interrupted with tool calls of unknown outcome: reconcile them "
            f"(see session.inspect()), then session.resume({t!r}); or {cancel}"
        )
    return f"it was interrupted: session.resume({t!r}) continues it, or {cancel}"


def parked_error(state: SessionState, turn_id: str, blocking: TurnState, status: str) -> Parked:
    """The ``Parked`` error for a task ``turn_id`` queued behind ``blocking``."""
    return Parked(
        f"task {turn_id} is queued behind turn {blocking.turn_id}, which is {status}; "
        f"{ways_out(state, blocking, status)}",
        turn_id=turn_id,
        blocking_turn=blocking.turn_id,
        blocking_status=status,
    )


_QUEUED = frozenset(
    {"submit", "resume", "respond", "cancel", "reconcile", "compact", "revoke", "feedback"}
)
"""The commands that wait in the queue until the runtime carries them out."""


def queued_commands(state: SessionState, inbox: InboxState) -> int:
    """Commands accepted and not yet carried out or refused (what ``Limits`` bounds).

    Interrupts are not counted: one that comes after its run ended is never carried out.
    """
    return sum(
        1
        for c in inbox.commands.values()
        if c.kind in _QUEUED
        and c.command_id not in state.handled
        and c.command_id not in inbox.rejected
    )


def pending_steers(state: SessionState, inbox: InboxState, turn_id: str) -> int:
    """Steering inputs of ``turn_id`` accepted and not yet applied (nor discarded)."""
    return sum(
        1
        for c in inbox.steers_for(turn_id)
        if c.command_id not in state.applied_inputs and c.command_id not in state.discarded_inputs
    )
