"""Whether a resume, respond, cancel or reconcile may happen: pure functions of the state.

The Session facade calls them before accepting a command (so the caller gets a typed error
and nothing is written), and the runtime calls them again when it dispatches the command
(the state may have moved in between); both make the same decision from the same fold.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from agentnb.answers import ToolOutcome, answer_payload
from agentnb.errors import CannotResume, InvalidAnswer, InvalidInput, UncertainToolCalls
from agentnb.limits import check_text
from agentnb.projections.state import InboxState, SessionState, ToolCallState, TurnState
from agentnb.records import ToolCallRef

__all__ = [
    "check_cancel",
    "check_reconcile",
    "check_respond",
    "check_resume",
    "check_unanswered",
    "check_uncertain",
    "effective_status",
    "latest_unfinished",
    "open_calls",
    "uncertain_to_settle",
    "waits_for_person",
]

ToolLookup = Callable[[str], Any]
"""name -> Tool (or None): what the agent offers."""

_UNFINISHED = frozenset({"running", "suspended", "interrupted", "failed"})


def effective_status(state: SessionState, turn: TurnState, *, executing: bool) -> str:
    """The turn's status, counting a run cut off by a crash as ``interrupted`` (or
    ``suspended`` when it only waited for a person: ``waits_for_person``).

    ``executing`` says whether some runtime holds the session's lease right now.
    """
    if turn.status == "running" and not executing:
        return "suspended" if waits_for_person(state, turn.turn_id) else "interrupted"
    return turn.status


def waits_for_person(state: SessionState, turn_id: str) -> bool:
    """Whether the turn's open run only waits for a person: it has pending requests and
    every open call of it waits on one (none was cut off mid-execution), as a run waiting
    in place does (``Agent(wait_inline=)``). Cut off so, it is suspended, not interrupted:
    the answer continues it."""
    pending = {r["request_id"] for r in state.pending_of(turn_id)}
    return bool(pending) and all(
        c.call_id in pending or (c.asking is not None and c.asking in pending)
        for c in state.open_calls(turn_id)
    )


def open_calls(
    state: SessionState, *, executing: bool
) -> tuple[list[ToolCallState], list[ToolCallState]]:
    """(running, uncertain): dispatched calls without a result, split by whether a live
    executor runs them.

    A call of the active run is *running* while some runtime holds the session's lease
    (``executing``); a sub-agent call there is running too (its run waits for the child).
    With no live executor a call is *uncertain*: what it did is unknown until someone
    reconciles it (or, for an idempotent tool, runs it again). Neither are a sub-agent call
    outside a live run (its child session says where it stands: ``children()``) nor a call
    stopped at a person's question (``ctx.ask``: the answer runs it again).
    """
    live = state.active_run if executing else None
    running = [
        c
        for c in state.tool_calls.values()
        if live is not None
        and c.run_id == live
        and c.dispatched
        and c.result is None
        and c.asking is None
    ]
    uncertain = [c for c in state.uncertain_calls() if live is None or c.run_id != live]
    return running, uncertain


def latest_unfinished(state: SessionState) -> TurnState | None:
    latest = state.latest_turn
    return latest if latest is not None and latest.status in _UNFINISHED else None


def _refs(
    state: SessionState, turn_id: str, blocking_only: bool, idempotent: Callable[[str], bool]
) -> list[ToolCallRef]:
    return [
        ToolCallRef(c.call_id, c.name, dict(c.arguments), c.turn_id, c.run_id)
        for c in state.uncertain_calls(turn_id)
        if not (blocking_only and idempotent(c.name))
    ]


UNCERTAIN_CHOICES = ("refuse", "unknown")
"""What ``resume(uncertain=...)`` does with calls whose outcome is unknown."""


def check_uncertain(value: object) -> str:
    """``value`` if it is one of ``UNCERTAIN_CHOICES``, else ``InvalidInput``."""
    if value not in UNCERTAIN_CHOICES:
        raise InvalidInput(
            f"uncertain must be 'refuse' (reconcile first) or 'unknown' (record each such "
            f"call's outcome as unknown and go on), got {value!r}"
        )
    return str(value)


def check_resume(
    state: SessionState,
    turn_id: str,
    *,
    executing: bool,
    tool: ToolLookup,
    uncertain: str = "refuse",
) -> TurnState:
    """The turn to resume, or ``CannotResume`` / ``UncertainToolCalls`` saying why not.

    ``uncertain="unknown"``: calls whose outcome is unknown do not stop the resume; the run
    that resumes records each as ``unknown`` (``uncertain_to_settle``) and tells the model.
    """
    turn = state.turns.get(turn_id)
    if turn is None:
        raise CannotResume(
            f"turn {turn_id} has not started (or does not exist); a queued "
            "task runs when its turn comes - call start()"
        )
    status = effective_status(state, turn, executing=executing)
    if status in {"completed", "cancelled"}:
        raise CannotResume(f"turn {turn_id} is {status}; submit a new task instead")
    if status == "running":
        raise CannotResume(f"turn {turn_id} is running; interrupt() it first if you must")
    latest = latest_unfinished(state)
    if latest is None or latest.turn_id != turn_id:
        raise CannotResume(
            f"turn {turn_id} is not the latest unfinished turn; only "
            f"{latest.turn_id if latest else 'none'} can be resumed"
        )
    pending = state.pending_of(turn_id)
    if pending:
        ids = ", ".join(r["request_id"] for r in pending)
        raise CannotResume(
            f"turn {turn_id} waits for answers ({ids}); answer them with "
            "respond() - that continues the turn"
        )

    def idempotent(name: str) -> bool:
        t = tool(name)
        return bool(t is not None and t.idempotent)

    blocking = _refs(state, turn_id, True, idempotent)
    if blocking and uncertain != "unknown":
        names = ", ".join(f"{r.tool_name} ({r.call_id})" for r in blocking)
        raise UncertainToolCalls(
            f"turn {turn_id} has tool calls whose outcome is unknown: {names}. Check what "
            "happened, then record it with reconcile({call_id: nb.ToolOutcome...}, reason) "
            "before resuming, or resume it with uncertain='unknown' to record their "
            "outcomes as unknown and go on",
            blocking,
        )
    return turn


def uncertain_to_settle(
    state: SessionState, turn_id: str, *, tool: ToolLookup
) -> list[ToolCallRef]:
    """The uncertain calls of ``turn_id`` a resume with ``uncertain="unknown"`` records as
    unknown: those that cannot safely run again (calls of ``idempotent`` tools simply run
    again)."""

    def idempotent(name: str) -> bool:
        t = tool(name)
        return bool(t is not None and t.idempotent)

    return _refs(state, turn_id, True, idempotent)


def check_respond(
    state: SessionState,
    answers: Mapping[str, object],
    *,
    tool: ToolLookup,
    normalized: bool = False,
) -> tuple[str, dict[str, dict[str, Any]]]:
    """(turn_id, JSON answers by request id), or ``InvalidAnswer`` saying what is wrong.

    ``normalized`` answers are already in their JSON form (as stored in the inbox).
    """
    if not isinstance(answers, Mapping) or not answers:
        raise InvalidAnswer(
            "respond() needs at least one answer: respond(request_id, answer) "
            "or respond({request_id: answer, ...})"
        )
    turns: set[str] = set()
    out: dict[str, dict[str, Any]] = {}
    for request_id, answer in answers.items():
        if not isinstance(request_id, str):
            raise InvalidAnswer(f"request ids are strings, got {type(request_id).__name__}")
        request = state.interactions.get(request_id)
        if request is None:
            raise InvalidAnswer(f"there is no request {request_id!r}; see session.pending()")
        if request_id in state.resolved:
            raise InvalidAnswer(f"request {request_id} was already answered or closed")
        if normalized and isinstance(answer, Mapping):
            payload = dict(answer)
        else:
            payload = answer_payload(request_id, request["kind"], answer)
        edited = payload.get("edited_args")
        if edited is not None:
            t = tool(request["tool_name"])
            try:
                if t is not None:
                    t.validate(edited)
            except InvalidInput as exc:
                raise InvalidAnswer(
                    f"edited arguments for {request_id} do not fit {request['tool_name']}: {exc}"
                ) from None
            payload["edited_args"] = dict(edited)
        remember = payload.get("remember")
        if remember and not normalized:
            t = tool(request["tool_name"])
            known = set((t.parameters.get("properties") or {}) if t is not None else ())
            unknown = sorted(set(remember.get("match") or {}) - known)
            if unknown:
                raise InvalidAnswer(
                    f"the rule for {request_id} constrains argument(s) {unknown} that "
                    f"{request['tool_name']} does not take; it takes {sorted(known)}"
                )
        turns.add(request["turn_id"])
        out[request_id] = payload
    if len(turns) > 1:
        raise InvalidAnswer(
            f"the answers belong to different turns ({', '.join(sorted(turns))}); "
            "answer one turn at a time"
        )
    return turns.pop(), out


def check_unanswered(state: SessionState, inbox: InboxState, key: str, request_ids: Any) -> None:
    """``InvalidAnswer`` ("already answered") when an answer to one of ``request_ids`` was
    accepted and is not applied yet, unless it is this very respond again (the same ``key``:
    a retried request gets its receipt back). Together with ``check_respond`` (which refuses
    resolved requests) a request takes one answer: a second click cannot queue a second one.
    """
    wanted = set(request_ids)
    for command in inbox.commands.values():
        if (
            command.kind != "respond"
            or command.key == key
            or command.command_id in state.handled
            or command.command_id in inbox.rejected
        ):
            continue
        both = sorted(wanted & set((command.data.get("answers") or {}).keys()))
        if both:
            raise InvalidAnswer(
                f"request {both[0]} is already answered: that answer was accepted and the "
                "turn goes on with it; see session.pending() for what still waits"
            )


def check_cancel(state: SessionState, inbox: InboxState, turn_id: str, *, executing: bool) -> str:
    """How to cancel: ``queued`` (inbox only), ``parked`` (runtime closes it), ``running``
    (interrupt first, then close it as parked) or ``done``."""
    turn = state.turns.get(turn_id)
    if turn is None:
        submit = next(
            (c for c in inbox.commands.values() if c.kind == "submit" and c.turn_id == turn_id),
            None,
        )
        if submit is None:
            raise InvalidInput(f"there is no turn {turn_id!r} in session; see session.tasks()")
        return "done" if submit.command_id in inbox.rejected else "queued"
    status = effective_status(state, turn, executing=executing)
    if status == "cancelled":
        return "done"
    if status == "completed":
        raise InvalidInput(f"turn {turn_id} already completed; there is nothing to cancel")
    if status == "running":
        return "running"
    return "parked"


def check_reconcile(
    state: SessionState, outcomes: Mapping[str, object], reason: object, *, executing: bool = False
) -> dict[str, dict[str, Any]]:
    """The outcomes as JSON, or ``InvalidInput`` unless they cover exactly the uncertain set.

    Calls a live executor runs now (``executing``: some runtime holds the lease) are not
    uncertain: naming one is refused, saying it runs.
    """
    if not isinstance(reason, str) or not reason.strip():
        raise InvalidInput(
            "reconcile needs a reason (who checked what), e.g. "
            "reason='checked the order system: order 42 exists'"
        )
    check_text(reason, "the reconcile reason")
    if not isinstance(outcomes, Mapping):
        raise InvalidInput("outcomes must be a mapping {call_id: nb.ToolOutcome...}")
    running, open_ = open_calls(state, executing=executing)
    busy = sorted(c.call_id for c in running if c.call_id in outcomes)
    if busy:
        raise InvalidInput(
            f"tool call(s) {busy} are running (a live runtime executes their run), not "
            "uncertain: wait for their results, or interrupt the run first"
        )
    uncertain = {c.call_id: c for c in open_}
    if not uncertain and not outcomes:
        raise InvalidInput(
            "there are no uncertain tool calls to reconcile (inspect().uncertain_tool_calls "
            "is empty); an interrupted turn can be resumed as it is"
        )
    if set(outcomes) != set(uncertain):
        missing = sorted(set(uncertain) - set(outcomes))
        extra = sorted(set(outcomes) - set(uncertain))
        raise InvalidInput(
            f"reconcile must cover exactly the uncertain calls "
            f"{sorted(uncertain)}; missing {missing}, not uncertain {extra}"
        )
    out: dict[str, dict[str, Any]] = {}
    for call_id, outcome in outcomes.items():
        if not isinstance(outcome, ToolOutcome):
            raise InvalidInput(
                f"outcome for {call_id} must be nb.ToolOutcome.success(...), "
                ".error(...) or .unknown()"
            )
        call = uncertain[call_id]
        out[call_id] = {
            "status": outcome.status,
            "output": check_text(outcome.text, f"the outcome of {call_id}", allow_empty=True),
            "name": call.name,
            "turn_id": call.turn_id,
        }
    return out
