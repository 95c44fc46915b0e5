"""How a run, a command's receipt and a whole turn stand: pure functions of the two folds.

A ``Receipt`` observes the run its command started (the seed: "``respond`` and ``resume``
return new receipts to observe"; "原提交的 await(task) 观察的是挂起前的那次执行" — the original
``await(task)`` observes the run before the suspension). A continuation has its own receipt.
A ``Task`` gives the turn's outcome: its latest run, once nothing accepted for the turn
(an answer, a resume, a cancel) is still to move it.

Each function returns None while what it observes is not settled (queued, or running with a
live executor). ``executing`` says whether some runtime holds the session's lease: a run
left open without one was cut off, and reads as ``interrupted``.
"""

from __future__ import annotations

from agentnb.projections.decisions import waits_for_person
from agentnb.projections.queue import will_move
from agentnb.projections.state import PARKING, InboxState, SessionState
from agentnb.records import Outcome, UsageTotals

__all__ = ["CUT_OFF", "receipt_outcome", "refused", "run_outcome", "turn_outcome"]

CUT_OFF = "the process executing it stopped; resume() continues it"
"""The error of a run that was cut off (no live executor, no end committed)."""


def refused(inbox: InboxState, command_id: str, turn_id: str) -> Outcome | None:
    """The outcome of a command the inbox refused before it started a run, if it was:
    ``cancelled`` (a queued task withdrawn by ``cancel``) or ``rejected`` (the runtime
    refused it: another agent, a resume already queued, ...), with the reason."""
    reason = inbox.rejected.get(command_id)
    if reason is None:
        return None
    status = "cancelled" if command_id in inbox.cancelled else "rejected"
    return Outcome(status, turn_id, None, None, reason, stop_reason=status)


def run_outcome(
    state: SessionState,
    inbox: InboxState,
    run_id: str,
    *,
    executing: bool,
    whole_turn: bool = False,
) -> Outcome | None:
    """How run ``run_id`` ended, or None while it runs with a live executor.

    A run stopped for a cancel that is not carried out yet is reported once the turn is
    cancelled (the cancel ended it); a run whose turn was cancelled after it, with no run
    in between, reads ``cancelled``. ``usage`` is the run's own, or with ``whole_turn``
    the turn's over all its runs.
    """
    run = state.runs.get(run_id)
    if run is None:
        return None
    turn = state.turns.get(run.turn_id)
    last = turn is not None and turn.run_ids and turn.run_ids[-1] == run_id
    status = run.status
    error = run.error
    stop_reason = run.stop_reason
    if status == "running":
        if executing:
            return None
        if waits_for_person(state, run.turn_id):  # cut off while waiting in place
            status, error, stop_reason = "suspended", None, "crash"
        else:
            status, error, stop_reason = "interrupted", CUT_OFF, "crash"
    if last and turn is not None:
        if turn.status == "cancelled":
            status, stop_reason = "cancelled", "cancelled"
            error = error or turn.error
        elif status == "interrupted" and _cancel_pending(state, inbox, run.turn_id):
            return None  # stopped for a cancel not recorded yet: report the cancel
    if status == "failed":
        error = error or (turn.error if turn is not None else None)
    output = turn.output if status == "completed" and turn is not None else None
    usage = UsageTotals.of(turn.usage if whole_turn and turn is not None else run.usage)
    return Outcome(status, run.turn_id, run_id, output, error, usage, stop_reason)


def receipt_outcome(
    state: SessionState,
    inbox: InboxState,
    command_id: str,
    turn_id: str,
    run_id: str | None,
    *,
    executing: bool,
) -> Outcome | None:
    """How the run of a receipt stands: the run its command started (``run_id`` for a
    steered ``send``, which names the run it steered), or the refusal of its command.

    A command carried out without starting a run (answers that leave other requests of
    the turn open) reports the turn's latest run as it stands then.
    """
    if run_id is None:
        run_id = state.run_of_command.get(command_id)
        if run_id is None:
            early = refused(inbox, command_id, turn_id)
            if early is not None or command_id not in state.handled:
                return early  # refused, or still queued
            turn = state.turns.get(turn_id)
            if turn is None or not turn.run_ids:
                return None
            run_id = turn.run_ids[-1]
    return run_outcome(state, inbox, run_id, executing=executing)


def turn_outcome(
    state: SessionState,
    inbox: InboxState,
    turn_id: str,
    command_id: str | None = None,
    *,
    executing: bool,
) -> Outcome | None:
    """The whole turn's outcome: its latest run, once settled and not about to move on.

    None while the turn is queued, runs, or waits for an accepted answer, resume or cancel
    to be carried out; ``command_id`` (the submit) reports a task refused before it ran.
    """
    turn = state.turns.get(turn_id)
    if turn is None or not turn.run_ids:
        return refused(inbox, command_id, turn_id) if command_id else None
    outcome = run_outcome(state, inbox, turn.run_ids[-1], executing=executing, whole_turn=True)
    if outcome is None:
        return None
    if outcome.status in PARKING and will_move(state, inbox, turn_id):
        return None  # answered, resumed or cancelled meanwhile: it goes on
    return outcome


def _cancel_pending(state: SessionState, inbox: InboxState, turn_id: str) -> bool:
    return any(
        c.kind == "cancel"
        and c.turn_id == turn_id
        and c.command_id not in state.handled
        and c.command_id not in inbox.rejected
        for c in inbox.commands.values()
    )
