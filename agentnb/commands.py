"""One command client below the doors: the verbs that only write a session's inbox.

``Commands`` is ``submit``, ``send``, ``steer``, ``inject``, ``respond``, ``interrupt``,
``resume`` and ``cancel`` of one session. Each reads the session's folds through its host,
decides with the pure rules of ``projections/decisions.py`` whether the command may be
written (nothing is written when it may not), writes it to the inbox, and asks the host to
dispatch it. It needs no agent: a ``Session`` handle is one host (its agent's tools and
checks, its runtime's dispatch and waiting); ``StoreHost`` is the host of a door that has a
store and nothing else (the command line), where what the log recorded stands in for the
agent and the worker that carries a command out checks it again with its own.

Why it is long: each verb's checks and races are written once here, for every door
(``if_busy``'s four policies, a steer that arrives after its turn finished, answers routed
to a sub-agent's child, a cancel that meets a start).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import threading
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from agentnb import states
from agentnb.answers import stored_answers
from agentnb.children import route_answers
from agentnb.errors import CannotResume, IdempotencyConflict, InvalidInput, NotRunning, SessionBusy
from agentnb.events import Event, canonical_json
from agentnb.holders import lease_alive
from agentnb.ids import SessionKey, check_id, check_seconds, new_id
from agentnb.limits import check_text
from agentnb.log import Inbox
from agentnb.projections.decisions import (
    ToolLookup,
    check_cancel,
    check_respond,
    check_resume,
    check_unanswered,
    check_uncertain,
    latest_unfinished,
)
from agentnb.projections.outcomes import refused
from agentnb.projections.queue import blocking_turn
from agentnb.projections.state import InboxState, SessionState
from agentnb.records import InputReceipt, Receipt, Waiter
from agentnb.stores import SessionStore

__all__ = [
    "IF_BUSY",
    "CommandHost",
    "Commands",
    "StoreHost",
    "accept_cancel",
    "check_if_busy",
]

IF_BUSY = ("queue", "reject", "interrupt", "steer")
"""The double-texting policies of ``submit(..., if_busy=)``."""

_STARTING = frozenset({"submit", "resume", "respond"})
"""Commands that start a run when the runtime carries them out."""


class CommandHost(Protocol):
    """What the command client reads and asks of the door it writes for.

    ``Session`` has one (its folds, its agent, its runtime); ``StoreHost`` is the other.
    """

    @property
    def store(self) -> SessionStore:
        """The session's store."""

    @property
    def key(self) -> SessionKey:
        """The session the commands are for."""

    @property
    def inbox(self) -> Inbox:
        """Its inbox: where the commands are written."""

    @property
    def lock(self) -> contextlib.AbstractContextManager[Any]:
        """Held (re-entrantly) from a verb's read to its write: the checks and the accept of
        one handle do not interleave with another verb's."""

    @property
    def waiter(self) -> Waiter | None:
        """What the receipts wait with (None: they are not bound to a session)."""

    def refresh(self) -> tuple[SessionState, InboxState]:
        """Both folds at the logs' heads."""

    def catch_up(self) -> tuple[SessionState, InboxState]:
        """``refresh``, which may skip the store when this process wrote all there is."""

    def whole(self) -> tuple[SessionState, InboxState]:
        """Both folds over the whole history, nothing retired."""

    def executing(self) -> bool:
        """Whether some runtime holds the session's lease and executes it now."""

    def tools(self, state: SessionState) -> ToolLookup:
        """The tools the checks look calls up by (``idempotent``, ``confirm``...)."""

    def admit(
        self,
        state: SessionState,
        inbox: InboxState,
        *,
        queued: bool = False,
        steering: str | None = None,
    ) -> None:
        """Refuse new work before anything is written (agent, workspace, room, queues)."""

    def fingerprint(self) -> Any:
        """The fingerprint of the agent a task is submitted for (it travels with it)."""

    def check_open(self) -> None:
        """Raise ``StorageError`` if the door no longer accepts commands."""

    def dispatch(self, accepted: Event | None = None) -> None:
        """Make sure accepted work gets carried out (``accepted``: the record just
        accepted, handed over so that it need not be read back)."""

    def accepted(self, event: Event) -> None:
        """An inbox record this client just accepted (the host's fold may take it)."""

    def open_child(self, key: SessionKey) -> Any:
        """The handle of a sub-agent's child session, or None (``route_answers``)."""


def check_if_busy(value: object) -> str:
    """A ``submit``'s ``if_busy`` policy, or ``InvalidInput`` naming the four."""
    if not isinstance(value, str) or value not in IF_BUSY:
        raise InvalidInput(
            f"if_busy must be one of {', '.join(repr(p) for p in IF_BUSY)}, got {value!r}"
        )
    return value


def _preempted_by(inbox: InboxState, turn_id: str) -> str | None:
    """The task submitted with ``if_busy="interrupt"`` that stopped turn ``turn_id``."""
    return next(
        (
            c.turn_id
            for c in inbox.commands.values()
            if c.kind == "submit"
            and c.data.get("preempts") == turn_id
            and c.command_id not in inbox.rejected
        ),
        None,
    )


def _answers_key(checked: Mapping[str, Any]) -> str:
    """The idempotency key of a respond: the same answers give the same key."""
    return "respond:" + hashlib.sha256(canonical_json(checked).encode()).hexdigest()[:40]


def _has_pending(state: SessionState, inbox: InboxState) -> bool:
    latest = state.latest_turn
    if latest is not None and latest.status in {"suspended", "interrupted", "failed"}:
        return True
    return any(
        c.kind == "submit"
        and c.command_id not in state.handled
        and c.command_id not in inbox.rejected
        for c in inbox.commands.values()
    )


def accept_cancel(
    log: Inbox,
    state: SessionState,
    inbox: InboxState,
    turn_id: str,
    how: str,
    refresh: Callable[[], tuple[SessionState, InboxState]] | None = None,
) -> Event | None:
    """The inbox writes of a cancel decided as ``how`` (``check_cancel``), for every door
    (``Session.cancel``, the command line): a queued task's submit is rejected at once
    (``NotRunning`` if a runtime started it meanwhile); a running turn gets an interrupt
    (unless one waits) and the cancel command; a parked one the cancel command. Returns
    the cancel command for a runtime to carry out, or None when it is already done.
    ``refresh`` folds the log again (default: fresh folds of the store)."""
    if how == "done":
        return None
    if how == "queued":
        submit = next(
            c for c in inbox.commands.values() if c.kind == "submit" and c.turn_id == turn_id
        )
        log.record(
            "inbox/rejected",
            {
                "command_id": submit.command_id,
                "reason": "cancelled by the user",
                "kind": "submit",
                "cancelled": True,  # withdrawn, not refused: its outcome reads cancelled
            },
            turn_id=turn_id,
        )
        # A runtime that picked the turn before this commits its start only if the inbox
        # did not move; if it did start first, say so.
        if refresh is not None:
            started = turn_id in refresh()[0].turns
        else:
            with states.read(log.store, log.key) as (now, _):
                started = turn_id in now.turns
        if started:
            raise NotRunning(
                f"turn {turn_id} started before the cancel arrived; interrupt() it, then cancel it"
            )
        return None
    run_id = state.active_run
    interrupting = any(
        c.kind == "interrupt" and c.run_id == run_id for c in inbox.commands.values()
    )
    if how == "running" and run_id and not interrupting:
        log.accept("interrupt", turn_id=turn_id, run_id=run_id)
    event, _ = log.accept("cancel", turn_id=turn_id)
    return event


class Commands:
    """The inbox verbs of one session, for every door (``Session``'s are these).

    What each verb promises is documented on ``Session``, the public door; here is how
    it is written. Nothing is written when a check refuses.
    """

    def __init__(self, host: CommandHost) -> None:
        self.host = host

    # -- tasks -------------------------------------------------------------------------------

    def submit(
        self,
        input: str,
        key: str | None = None,
        *,
        timeout: float | None = None,
        if_busy: str = "queue",
    ) -> Receipt:
        """``Session.submit``."""
        text = check_text(input, "input")
        if key is not None:
            check_id(key, "key")
        policy = check_if_busy(if_busy)
        if policy != "queue":
            return self._submit_if_busy(text, key, timeout, policy)
        return self._submit(text, key, timeout)

    def _submit(
        self, text: str, key: str | None, timeout: float | None, preempts: str | None = None
    ) -> Receipt:
        """``submit`` of checked input; ``preempts``: the turn this task was let go ahead of
        (``if_busy="interrupt"``, see ``next_command``)."""
        host = self.host
        data: dict[str, Any] = (
            {} if timeout is None else {"timeout": check_seconds(timeout, "timeout")}
        )
        if preempts is not None:
            data["preempts"] = preempts
        data["agent"] = host.fingerprint()
        host.check_open()
        with host.lock:
            # The admission checks read what this process knows (see ``Limits``); a re-send
            # under a key reads the inbox, so it finds its receipt, full queue or not.
            state, inbox = host.catch_up() if key is None else host.refresh()
            if key is None or all(c.key != key for c in inbox.commands.values()):
                host.admit(state, inbox, queued=True)
            event, created = host.inbox.accept(
                "submit", key=key, turn_id=new_id("turn"), input=text, data=data
            )
            if not created:
                return self._existing_receipt(event)
            host.accepted(event)  # this process's readers need not read it back
        host.dispatch(event)
        return Receipt(
            event.payload["command_id"], event.payload["turn_id"], None, "queued", None, host.waiter
        )

    def _existing_receipt(self, accepted: Event) -> Receipt:
        """The receipt of a submit accepted before (a retry with its key), as it stands now:
        the run it started and that run's status (``queued`` before it started, or
        ``cancelled`` / ``rejected`` if it never will)."""
        host = self.host
        command_id = accepted.payload["command_id"]
        turn_id = accepted.payload["turn_id"]
        state, inbox = host.refresh()
        if command_id not in inbox.commands and state.retired_turns:
            state, inbox = host.whole()  # a turn retired from the folds
        run_id = state.run_of_command.get(command_id)
        early = refused(inbox, command_id, turn_id)
        if run_id is None:
            status = "queued" if early is None else early.status
        else:
            run = state.runs[run_id]
            status = run.status
            if status == "running" and not host.executing():
                status = "interrupted"  # cut off: its process stopped
            turn = state.turns.get(turn_id)
            if turn is not None and turn.status == "cancelled" and turn.run_ids[-1] == run_id:
                status = "cancelled"
        if run_id is None and early is None:
            host.dispatch()  # the first try may have been accepted by a runtime now gone
        return Receipt(command_id, turn_id, run_id, status, None, host.waiter)

    def send(self, input: str) -> Receipt:
        """``Session.send``."""
        host = self.host
        text = check_text(input, "input")
        with host.lock:
            state, inbox = host.refresh()
            steered = self._steer_current(text, state, inbox)
            if steered is not None:
                return steered
            state, inbox = host.refresh()
            busy = state.active_run is not None or _has_pending(state, inbox)
        receipt = self.submit(text)
        return Receipt(
            receipt.command_id,
            receipt.turn_id,
            None,
            "queued",
            "queued" if busy else "started",
            host.waiter,
        )

    def _current_turn(
        self, state: SessionState, inbox: InboxState
    ) -> tuple[str, str | None] | None:
        """(turn_id, run_id) of the turn a message would steer: the running one (run_id set;
        only with a live executor), or the task that starts next (run_id None) when it is the
        only work waiting and nothing parks the queue. None when neither is there."""
        host = self.host
        if state.active_run is not None:
            run = state.runs[state.active_run]
            return (run.turn_id, run.run_id) if host.executing() else None
        if blocking_turn(state, inbox, executing=host.executing()) is not None:
            return None
        waiting = [
            c
            for c in inbox.commands.values()
            if c.kind in _STARTING
            and c.command_id not in state.handled
            and c.command_id not in inbox.rejected
        ]
        if len(waiting) != 1 or waiting[0].kind != "submit" or waiting[0].turn_id is None:
            return None
        return waiting[0].turn_id, None

    def _steer_current(
        self, text: str, state: SessionState, inbox: InboxState, key: str | None = None
    ) -> Receipt | None:
        """Steer the current turn (``_current_turn``) with ``text``: its ``steered``
        receipt, or None when there is none or it finished first (nothing is left then)."""
        host = self.host
        current = self._current_turn(state, inbox)
        if current is None:
            return None
        turn_id, run_id = current
        if run_id is not None and key is None:
            try:
                steered = self.steer(text, task=turn_id)
            except NotRunning:
                return None
            return Receipt(steered.input_id, turn_id, run_id, "running", "steered", host.waiter)
        host.admit(state, inbox, steering=turn_id)
        event, _ = host.inbox.accept("steer", key=key, turn_id=turn_id, run_id=run_id, input=text)
        command_id = event.payload["command_id"]
        state, inbox = host.refresh()
        submit = next(
            (c for c in inbox.commands.values() if c.kind == "submit" and c.turn_id == turn_id),
            None,
        )
        turn = state.turns.get(turn_id)
        last = state.runs[turn.run_ids[-1]] if turn is not None and turn.run_ids else None
        too_late = (
            (submit is not None and submit.command_id in inbox.rejected)
            or (turn is not None and turn.status == "cancelled")
            or (
                turn is not None
                and turn.status == "completed"
                and last is not None
                and (last.inbox_seq or 0) < event.seq
            )
        )
        if too_late:
            host.inbox.record(
                "inbox/rejected",
                {"command_id": command_id, "reason": "the turn finished first", "kind": "steer"},
                turn_id=turn_id,
            )
            return None
        run_id = run_id or (last.run_id if last is not None and turn is not None else None)
        status = "running" if run_id is not None else "queued"
        return Receipt(command_id, turn_id, run_id, status, "steered", host.waiter)

    def _busy(self, state: SessionState, inbox: InboxState) -> tuple[str | None, str] | None:
        """(turn_id, status) of what a new task would wait for, or None if it starts now."""
        host = self.host
        if state.active_run is not None and host.executing():
            return state.runs[state.active_run].turn_id, "running"
        blocking = blocking_turn(state, inbox, executing=host.executing())
        if blocking is not None:
            return blocking[0].turn_id, blocking[1]
        for c in inbox.commands.values():
            if (
                c.kind in _STARTING
                and c.command_id not in state.handled
                and c.command_id not in inbox.rejected
            ):
                return c.turn_id, "queued"
        return None

    def _submit_if_busy(
        self, text: str, key: str | None, timeout: float | None, policy: str
    ) -> Receipt:
        """``submit`` with ``if_busy`` other than ``"queue"`` (see ``Session.submit``)."""
        host = self.host
        host.check_open()
        with host.lock:
            state, inbox = host.refresh()
            earlier = next((c for c in inbox.commands.values() if key and c.key == key), None)
            if earlier is not None and earlier.kind == "steer":  # a retry of a steered one
                if earlier.input != text:
                    raise IdempotencyConflict(
                        f"key {key!r} was used for other input; use a new key for new input"
                    )
                return Receipt(
                    earlier.command_id,
                    earlier.turn_id or "",
                    None,
                    "queued",
                    "steered",
                    host.waiter,
                )
            busy = None if earlier is not None else self._busy(state, inbox)
            if busy is None:
                receipt = self._submit(text, key, timeout)
                return dataclasses.replace(receipt, disposition="started")
            turn_id, status = busy
            if policy == "reject":
                raise SessionBusy(
                    f"session {host.key} is busy: turn {turn_id} is {status}, and "
                    "if_busy='reject' refuses a task that would wait; nothing was written. "
                    "Submit it with if_busy='queue' (wait its turn), 'steer' (guide the "
                    "running turn) or 'interrupt' (stop it and start this one)",
                    turn_id=turn_id,
                    status=status,
                )
            if policy == "steer":
                steered = self._steer_current(text, state, inbox, key)
                if steered is not None:
                    return steered
                receipt = self._submit(text, key, timeout)
                return dataclasses.replace(receipt, disposition="queued")
            # "interrupt": stop the running turn and go ahead of it.
            run_id = state.active_run if status == "running" else None
            if run_id is None:
                receipt = self._submit(text, key, timeout)
                return dataclasses.replace(receipt, disposition="queued")
            host.inbox.accept("interrupt", turn_id=turn_id, run_id=run_id)
            receipt = self._submit(text, key, timeout, preempts=turn_id)
            return dataclasses.replace(receipt, disposition="started")

    # -- input for a run ---------------------------------------------------------------------

    def steer(self, input: str, task: str | None = None) -> InputReceipt:
        """``Session.steer``."""
        host = self.host
        text = check_text(input, "input")
        if task is not None:
            check_id(task, "task")
        with host.lock:
            state, inbox = host.refresh()
            run = state.runs.get(state.active_run or "")
            if run is None or (task is not None and run.turn_id != task):
                what = f"task {task!r} is not the running one" if task else "nothing is running"
                raise NotRunning(f"cannot steer: {what}; submit a new task instead")
            turn_id = run.turn_id
            if not host.executing():
                raise NotRunning(
                    f"cannot steer: turn {turn_id} is not running - the process executing "
                    f"it stopped (no live runtime holds the session); session.resume("
                    f"{turn_id!r}) continues it, then steer it, or submit a new task"
                )
            host.admit(state, inbox, steering=turn_id)
            event, _ = host.inbox.accept("steer", turn_id=turn_id, run_id=run.run_id, input=text)
            command_id = event.payload["command_id"]
            # The turn may have committed its completion between our read and our accept.
            # It records the inbox head it had read; guidance after that was not seen, and
            # is refused here rather than silently dropped.
            state, _ = host.refresh()
            turn = state.turns[turn_id]
            last = state.runs[turn.run_ids[-1]]
            too_late = turn.status == "cancelled" or (
                turn.status == "completed" and (last.inbox_seq or 0) < event.seq
            )
            if too_late:
                host.inbox.record(
                    "inbox/rejected",
                    {
                        "command_id": command_id,
                        "reason": "the turn finished first",
                        "kind": "steer",
                    },
                    turn_id=turn_id,
                )
                raise NotRunning(
                    "cannot steer: the task finished before the guidance "
                    "arrived; submit it as a new task"
                )
            return InputReceipt(command_id, turn_id)

    def inject(self, material: str) -> InputReceipt:
        """``Session.inject``."""
        host = self.host
        text = check_text(material, "material")
        with host.lock:
            host.admit(*host.refresh())
        event, _ = host.inbox.accept("inject", input=text)
        return InputReceipt(event.payload["command_id"], None)

    def respond(self, answers: dict[str, object]) -> Receipt:
        """``Session.respond`` of ``{request_id: answer}``."""
        host = self.host
        host.check_open()
        with host.lock:
            state, inbox = host.refresh()
            if any(rid in state.interactions for rid in answers) or not any(
                c.get("status") == "running" for c in state.children.values()
            ):
                turn_id, checked = check_respond(state, answers, tool=host.tools(state))
                checked = stored_answers(checked, host.store.put_blob)
                key = _answers_key(checked)
                check_unanswered(state, inbox, key, checked)
                host.admit(state, inbox)
                event, _ = host.inbox.accept(
                    "respond",
                    key=key,
                    turn_id=turn_id,
                    data={"answers": checked},
                )
            else:  # a sub-agent's request: routed to it, and this turn woken for it
                _, event = route_answers(host.store, host.key, state, answers, host.open_child)
                turn_id = event.payload["turn_id"]
        host.dispatch()
        return Receipt(event.payload["command_id"], turn_id, None, "queued", None, host.waiter)

    # -- stopping and continuing -------------------------------------------------------------

    def interrupt(self, run_id: str | None = None) -> bool:
        """``Session.interrupt``."""
        host = self.host
        if run_id is not None:
            check_id(run_id, "run_id")
        with host.lock:
            state, _ = host.refresh()
            active = state.active_run if host.executing() else None
            if run_id is not None and run_id != active:
                raise NotRunning(
                    f"run {run_id} is not running (the page may be stale); "
                    f"running now: {active or 'nothing'}"
                )
            if active is None:
                return False
            turn_id = state.runs[active].turn_id
            host.inbox.accept("interrupt", turn_id=turn_id, run_id=active)
            return True

    def resume(self, turn_id: str, *, uncertain: str = "refuse") -> Receipt:
        """``Session.resume``."""
        host = self.host
        check_id(turn_id, "turn_id")
        uncertain = check_uncertain(uncertain)
        host.check_open()
        with host.lock:
            state, inbox = host.refresh()
            preempting = _preempted_by(inbox, turn_id)
            if preempting is not None:
                raise CannotResume(
                    f"turn {turn_id} was stopped for task {preempting} (submitted with "
                    "if_busy='interrupt'), which went ahead of it; its work so far stays in "
                    f"the conversation. Submit what is left as a new task; "
                    f"session.cancel({turn_id!r}) closes it"
                )
            check_resume(
                state,
                turn_id,
                executing=host.executing(),
                tool=host.tools(state),
                uncertain=uncertain,
            )
            queued = next(
                (
                    c
                    for c in inbox.commands.values()
                    if c.kind == "resume"
                    and c.turn_id == turn_id
                    and c.command_id not in state.handled
                    and c.command_id not in inbox.rejected
                ),
                None,
            )
            if queued is not None:
                raise CannotResume(
                    f"a continuation of turn {turn_id} is already queued (command "
                    f"{queued.command_id}); wait on the receipt that resume() returned"
                )
            host.admit(state, inbox)
            data = {"uncertain": uncertain} if uncertain != "refuse" else None
            event, _ = host.inbox.accept("resume", turn_id=turn_id, data=data)
        host.dispatch()
        return Receipt(event.payload["command_id"], turn_id, None, "queued", None, host.waiter)

    def cancel(self, turn_id: str) -> str | None:
        """``Session.cancel`` up to the wait: the id of the cancel command a runtime carries
        out, or None when the cancel is already done (a queued task is withdrawn at once)."""
        host = self.host
        check_id(turn_id, "turn_id")
        with host.lock:
            state, inbox = host.refresh()
            how = check_cancel(state, inbox, turn_id, executing=host.executing())
            if how in ("done", "queued"):
                accept_cancel(host.inbox, state, inbox, turn_id, how, host.refresh)
                return None
            host.check_open()
            event = accept_cancel(host.inbox, state, inbox, turn_id, how)
        host.dispatch()
        return None if event is None else str(event.payload["command_id"])


@dataclasses.dataclass(frozen=True, slots=True)
class _Recorded:
    """A tool as the log recorded it, for a door without the agent (``StoreHost.tools``)."""

    idempotent: bool


class StoreHost:
    """The host of a door that has a store and nothing else (the command line).

    It reads the session's one state of this process (``agentnb.states``); a live holder of
    the lease is what counts as executing. Without the agent, what the log recorded stands
    in for it: a call may run again if every uncertain call of that tool was dispatched as
    idempotent. It admits everything and dispatches nothing: the worker that carries the
    command out checks the agent, the limits and the calls again with its own, and refuses
    in the inbox what it cannot do. Receipts are not bound to a session.
    """

    def __init__(self, store: SessionStore, key: SessionKey) -> None:
        self.store = store
        self.key = key
        self.inbox = Inbox(store, key)
        self.lock = threading.RLock()
        self.waiter = None

    def refresh(self) -> tuple[SessionState, InboxState]:
        with states.read(self.store, self.key) as folded:
            return folded

    def catch_up(self) -> tuple[SessionState, InboxState]:
        return self.refresh()

    def whole(self) -> tuple[SessionState, InboxState]:
        return self.refresh()

    def executing(self) -> bool:
        return lease_alive(self.store, self.key)

    def tools(self, state: SessionState) -> ToolLookup:
        latest = latest_unfinished(state)  # the only turn a resume may continue
        uncertain = [] if latest is None else state.uncertain_calls(latest.turn_id)

        def recorded(name: str) -> _Recorded:
            calls = [c for c in uncertain if c.name == name]
            return _Recorded(bool(calls) and all(c.idempotent for c in calls))

        return recorded

    def admit(
        self,
        state: SessionState,
        inbox: InboxState,
        *,
        queued: bool = False,
        steering: str | None = None,
    ) -> None:
        return None

    def fingerprint(self) -> Any:
        return None

    def check_open(self) -> None:
        return None

    def dispatch(self, accepted: Event | None = None) -> None:
        return None

    def accepted(self, event: Event) -> None:
        return None

    def open_child(self, key: SessionKey) -> Any:
        return None
