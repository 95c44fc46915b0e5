"""The turn -> run -> step engine: executes one session's accepted commands under its lease.

A ``SessionDriver`` lives on the runtime's loop while its session has work. It takes the
session's lease, folds the log, and runs accepted commands in order (``next_command``). Each
run is a loop of steps: build context -> model call -> tool calls -> checkpoint.

Commit rules (DESIGN §4): events are buffered in a ``LogWriter`` (``runtime/writer.py``) and
committed in one batch right before every side effect (``model/dispatch``, ``tool/dispatch``)
and at the end of a run; everything between two side effects shares one commit. Streamed
chunks are grouped into ``model/chunk`` events and committed at most every
``CHUNK_COMMIT_INTERVAL`` seconds. What runs around one tool call (its bounded reports, its
containment) is in ``runtime/tool_call.py``.

Why this module is still long: the lease loop, the fault path, each command's recipe, the
model call and the tool call still share the driver's stop, guard and writer state; splitting
them into collaborators that receive what they need is the next step (each recipe already
writes its event pairs once).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
import time
from collections.abc import Mapping
from typing import Any, Protocol

from agentnb.agent import Agent
from agentnb.compaction import SummaryCompactor, replacement_message
from agentnb.errors import (
    AgentnbError,
    CannotResume,
    Fenced,
    InboxChanged,
    InvalidInput,
    LeaseHeld,
    StorageError,
    describe,
)
from agentnb.events import Event, Message, ToolCallData
from agentnb.folds import ChatFolds, Folds
from agentnb.holders import holder_alive
from agentnb.ids import SessionKey, new_id
from agentnb.live import LiveEvent
from agentnb.log import Inbox
from agentnb.models.base import (
    Model,
    ModelError,
    ModelRequest,
    StreamCollector,
    TextDelta,
    ToolCallDelta,
)
from agentnb.projections.decisions import check_cancel, check_respond, check_resume
from agentnb.projections.state import (
    Command,
    InboxState,
    SessionState,
    build_context,
    next_command,
)
from agentnb.records import UsageTotals
from agentnb.runtime.tool_call import (
    Reports,
    ToolExit,
    contained,
    ignore_result,
    interaction_kind,
    prompt,
)
from agentnb.runtime.writer import FATAL, ChunkGroup, LogWriter
from agentnb.stores.base import Lease, SessionStore
from agentnb.tools import InvalidToolArguments, ToolContext

__all__ = ["DriverHost", "LogWriter", "SessionDriver", "build_context"]

log = logging.getLogger("agentnb.runtime")

CHUNK_COMMIT_INTERVAL = 0.1
"""Seconds at least between two commits of streamed chunks."""
MODEL_RETRIES = 3
LINGER = 0.5
"""Seconds an idle driver keeps the lease, waiting for more work, before releasing it."""
FAULT_RETRIES = 3
"""Attempts to commit the end of a run that failed before the session is given up."""


class _Stop(Exception):
    """The run was asked to stop (interrupt) at a chunk or step boundary."""


class _Cancelled(Exception):
    """The turn was cancelled after it was picked, before its first commit."""


class _Broken(Exception):
    """A failure could not be recorded even by the fault path: stop executing the session."""


class DriverHost(Protocol):
    """What a ``SessionDriver`` needs from the runtime that runs it."""

    store: SessionStore
    agent: Agent
    owner: str
    lease_ttl: float
    auto_resume: bool

    def publish(self, event: LiveEvent) -> None:
        """Tell live observers (never blocks)."""

    def committed(self, key: SessionKey, events: list[Event]) -> None:
        """Called after each commit of ``key`` with the events committed."""

    def chat_folds(self, key: SessionKey) -> ChatFolds:
        """The process's one chat fold of ``key`` (the driver keeps its snapshot current)."""


class SessionDriver:
    """Executes one session's accepted commands while this process holds its lease."""

    def __init__(self, runtime: DriverHost, key: SessionKey) -> None:
        self.runtime = runtime
        self.key = key
        self.store = runtime.store
        self.agent = runtime.agent
        self.inbox_log = Inbox(self.store, key)
        self.wake = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.folds = Folds(self.store, key)
        self.chat_folds = runtime.chat_folds(key)
        self.writer = LogWriter(self.store, key, self.state)
        self.writer.on_commit = self._committed
        self._renewer: asyncio.Task[None] | None = None
        self._bad_arguments: dict[str, str] = {}
        """Tool calls of the last model reply whose arguments were not a JSON object."""
        self._stop = asyncio.Event()
        self._stop_command: str | None = None
        self._stop_reason: str | None = None
        self._stop_code = "interrupted"
        """The ``stop_reason`` code of a stop that no interrupt command asked for."""
        """Why the run stops when no interrupt command asked (close, time limit)."""
        self._abandon = asyncio.Event()
        """Set by ``close`` when a sync tool ignores the stop: the run ends without it."""
        self._guard: tuple[str, int] | None = None
        self._tool_task: asyncio.Future[str] | None = None
        self._tool_is_async = False
        self._tool_name = ""
        self._inbox_lock = threading.Lock()
        self._background: set[asyncio.Future[None]] = set()
        self.stopping = False
        self.given_up: str | None = None
        """Why this driver stopped executing the session after a failure it could not record."""

    # -- lifecycle ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Take the lease, run every dispatchable command, release the lease when idle."""
        while not self.stopping:
            self.wake.clear()
            if not await self._has_work():
                if self.wake.is_set():
                    continue  # work was accepted while this looked: look again
                return
            if await self._acquire() is None:
                return
            try:
                while not self.stopping:
                    await self._execute_all()
                    self.wake.clear()
                    if await self._has_work():
                        continue
                    if self.stopping:
                        break
                    # Keep the lease a moment: back-to-back tasks then cost no lease commits.
                    try:
                        await asyncio.wait_for(self.wake.wait(), LINGER)
                    except TimeoutError:
                        break
            except FATAL as exc:
                log.warning("session %s: execution stopped: %s", self.key, exc)
                self.writer.pending.clear()
                with contextlib.suppress(Exception):
                    await asyncio.to_thread(self._reload)
            except _Broken as exc:
                # Even the fault path could not commit (the store keeps failing). Give the
                # session up; a later driver closes the open run as a crash would be.
                log.error("session %s: execution given up: %s", self.key, exc)
                self.writer.pending.clear()
                self.given_up = str(exc)
                return
            finally:
                await self._release()
            if not self.wake.is_set():
                return

    async def _has_work(self) -> bool:
        await asyncio.to_thread(self._refresh)
        # A run without an end that nobody executes was cut off by a crash: recover it.
        return next_command(self.inbox, self.state) is not None or self.state.active_run is not None

    @property
    def state(self) -> SessionState:
        return self.folds.state

    @property
    def inbox(self) -> InboxState:
        return self.folds.inbox

    def _refresh(self) -> None:
        """Bring both folds up to the committed heads (from a snapshot the first time)."""
        if self.writer.pending:
            raise RuntimeError("refresh with uncommitted events")
        with self._inbox_lock:
            self.folds.refresh()
        self.writer.state = self.state
        self.writer.head = self.state.seq

    def _reload(self) -> None:
        """Throw away the in-memory folds (after a failed commit) and refold from the log.

        The new writer keeps the lease: the fault path commits under the lease that is held.
        """
        lease = self.writer.lease
        self.folds = Folds(self.store, self.key)
        self.writer = LogWriter(self.store, self.key, self.state)
        self.writer.lease = lease
        self.writer.on_commit = self._committed
        self._refresh()

    def _save_snapshots(self, due: list[tuple[str, int, bytes]], seq: int) -> None:
        """In a worker thread: write the due snapshots, and bring the chat fold's along."""
        self.folds.put_snapshots(due)
        try:
            self.chat_folds.refresh(through=seq)
        except Exception as exc:  # noqa: BLE001 - a cache: a failure only makes reads slower
            log.info("session %s: chat snapshot not refreshed: %s", self.key, describe(exc))

    def _committed(self, events: list[Event]) -> None:
        """After each commit: tell live observers, and now and then snapshot the folds."""
        self.runtime.committed(self.key, events)
        if self.writer.pending:
            return  # the state is ahead of the log; snapshot a committed one later
        due = self.folds.due_snapshots()
        if due:
            task = asyncio.get_running_loop().run_in_executor(
                None, self._save_snapshots, due, self.state.seq
            )
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def _acquire(self) -> Lease | None:
        ttl = self.runtime.lease_ttl
        while not self.stopping:
            try:
                lease = await asyncio.to_thread(
                    self.store.acquire_lease, self.key, self.runtime.owner, ttl
                )
            except LeaseHeld:
                if await asyncio.to_thread(self._take_over_dead_holder):
                    continue
                # Another process executes this session; it may crash, so look again later.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.wake.wait(), timeout=min(1.0, ttl / 4))
                self.wake.clear()
                if not await self._has_work():
                    return None
                continue
            await asyncio.to_thread(self._refresh)  # another process may have written
            self.writer.lease = lease
            self._renewer = asyncio.create_task(self._renew(lease))
            if self.state.active_run is not None:
                await self._recover()
            return lease
        return None

    def _take_over_dead_holder(self) -> bool:
        """Release a lease whose holder is known dead (same host, process gone): True if so.

        Its epoch is released exactly (a holder that took over meanwhile is not touched), so
        the next acquire gets the session at once instead of after the lease's expiry.
        """
        current = self.store.current_lease(self.key)
        if current is None or holder_alive(current.owner) is not False:
            return False
        log.info("session %s: taking over from dead holder %s", self.key, current.owner)
        with contextlib.suppress(Fenced):
            self.store.release_lease(current)
        return True

    async def _renew(self, lease: Lease) -> None:
        ttl = self.runtime.lease_ttl
        while True:
            await asyncio.sleep(ttl / 3)
            try:
                lease = await asyncio.to_thread(self.store.renew_lease, lease, ttl)
                self.writer.lease = lease
            except Fenced:
                log.warning("session %s: lost its lease; stopping execution", self.key)
                self.stopping = True
                return
            except StorageError as exc:  # transient: try again on the next beat
                log.warning("session %s: lease renewal failed: %s", self.key, exc)

    async def _release(self) -> None:
        if self._renewer is not None:
            self._renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewer
            self._renewer = None
        lease, self.writer.lease = self.writer.lease, None
        if lease is not None:
            with contextlib.suppress(StorageError):
                await asyncio.to_thread(self.store.release_lease, lease)

    async def _execute_all(self) -> None:
        while not self.stopping:
            await asyncio.to_thread(self._refresh)
            if self.state.active_run is not None:
                # Every command ends the run it starts, so an open run here was left by a
                # failure nobody could record: close it as a crash is closed, and go on.
                await self._recover("an error left the run open", auto_resume=False)
                continue
            command = next_command(self.inbox, self.state)
            if command is None:
                return
            try:
                await self._execute(command)
            except FATAL:
                raise
            except Exception as exc:  # noqa: BLE001 - every failure ends its run, recorded
                await self._fail(command, exc)

    async def _fail(self, command: Command, exc: Exception) -> None:
        """End what a failed command left open, with the reason committed.

        Nothing committed yet (the state moved since the caller checked, say): the command is
        rejected in the inbox with why. A run already started: it ends ``failed`` with the
        error. This path is itself retried; if it still cannot commit, ``_Broken`` gives the
        session up and the next driver closes the run as it closes a crash.
        """
        if isinstance(exc, AgentnbError):
            log.info("session %s: command %s failed: %s", self.key, command.command_id, exc)
            reason = describe(exc, typed=False)
        else:
            log.error("session %s: command %s failed", self.key, command.command_id, exc_info=exc)
            reason = f"internal error: {describe(exc)}"
        for attempt in range(FAULT_RETRIES):
            try:
                self.writer.pending.clear()
                await asyncio.to_thread(self._reload)
                run = self.state.runs.get(self.state.active_run or "")
                unhandled = (
                    command.command_id not in self.state.handled
                    and command.command_id not in self.inbox.rejected
                )
                self._reset_stop(force=True)
                if run is not None:
                    await self._finish(run.turn_id, run.run_id, "failed", [], error=reason)
                elif unhandled and command.kind == "submit":
                    # Failed before its first commit: the task still becomes a failed turn,
                    # so its waiter and tasks() see why.
                    turn_id, run_id = self._open_turn(command)
                    await self._finish(
                        turn_id, run_id, "failed", [command.command_id], error=reason
                    )
                elif unhandled:
                    await self._reject(command, reason)
                return
            except FATAL:
                raise
            except Exception as again:  # noqa: BLE001 - retried, then the session is given up
                log.warning(
                    "session %s: recording a failure failed (attempt %d): %s",
                    self.key,
                    attempt + 1,
                    describe(again),
                )
                await asyncio.sleep(0.05 * 2**attempt)
        raise _Broken(f"could not record the end of command {command.command_id}: {reason}")

    async def _execute(self, command: Command) -> None:
        handler = {
            "submit": self._start_turn,
            "resume": self._resume,
            "respond": self._respond,
            "cancel": self._cancel,
            "reconcile": self._reconcile,
            "compact": self._compact_command,
        }.get(command.kind)
        if handler is None:
            await self._reject(command, f"{command.kind} commands are not dispatched")
            return
        await handler(command)

    async def _reject(self, command: Command, reason: str) -> None:
        await asyncio.to_thread(
            self.inbox_log.record,
            "inbox/rejected",
            {"command_id": command.command_id, "reason": reason},
            turn_id=command.turn_id,
        )
        await asyncio.to_thread(self._refresh_inbox)

    def _tool(self, name: str) -> Any:
        return self.agent.tool_named(name)

    # -- recovery, resume, respond, cancel, reconcile ---------------------------------------

    async def _recover(
        self, why: str = "the process executing it stopped", *, auto_resume: bool = True
    ) -> None:
        """Close a run that a crashed process (or an unrecorded failure) left open."""
        run = self.state.runs[self.state.active_run or ""]
        w = self.writer
        w.add(
            "recovery/applied",
            {"reason": "crash", "interrupted_runs": [run.run_id], "source_seq": self.state.seq},
            turn_id=run.turn_id,
            run_id=run.run_id,
        )
        w.add("turn/interrupted", {"reason": why}, turn_id=run.turn_id, run_id=run.run_id)
        w.add(
            "run/end",
            {
                "status": "interrupted",
                "reason": "crash",
                "inbox_seq": self.inbox.seq,
                "stop_reason": "crash",
            },
            turn_id=run.turn_id,
            run_id=run.run_id,
        )
        await w.flush()
        self._publish("status", run.turn_id, run.run_id, status="interrupted")
        if auto_resume and self.runtime.auto_resume:
            try:
                check_resume(self.state, run.turn_id, executing=False, tool=self._tool)
            except CannotResume as exc:
                log.warning(
                    "session %s: turn %s waits for a person: %s", self.key, run.turn_id, exc
                )
                return
            await asyncio.to_thread(
                self.inbox_log.accept,
                "resume",
                turn_id=run.turn_id,
                key=f"auto-resume:{run.run_id}",
            )
            await asyncio.to_thread(self._refresh_inbox)

    def _begin_run(self, command: Command, turn_id: str, reason: str) -> str:
        run_id = new_id("run")
        w = self.writer
        w.add(
            "inbox/started",
            {"command_id": command.command_id, "kind": command.kind},
            turn_id=turn_id,
            run_id=run_id,
        )
        w.add(
            "turn/resumed",
            {"command_id": command.command_id, "reason": reason},
            turn_id=turn_id,
            run_id=run_id,
        )
        w.add(
            "run/start",
            {"reason": reason, "command_id": command.command_id},
            turn_id=turn_id,
            run_id=run_id,
        )
        return run_id

    async def _resume(self, command: Command) -> None:
        turn = check_resume(self.state, command.turn_id or "", executing=False, tool=self._tool)
        run_id = self._begin_run(command, turn.turn_id, "resume")
        await self._continue(turn.turn_id, run_id)

    async def _respond(self, command: Command) -> None:
        answers = command.data.get("answers", {})
        turn_id, checked = check_respond(self.state, answers, tool=self._tool, normalized=True)
        w = self.writer
        if self.state.pending_of(turn_id) and all(
            r["request_id"] in checked for r in self.state.pending_of(turn_id)
        ):
            run_id = self._begin_run(command, turn_id, "respond")
        else:
            run_id = None  # more answers are needed before the turn can go on
            w.add(
                "inbox/started",
                {"command_id": command.command_id, "kind": "respond"},
                turn_id=turn_id,
            )
        for request_id, answer in checked.items():
            kind = self.state.interactions[request_id]["kind"]
            w.add(
                "interaction/resolved",
                {
                    "request_id": request_id,
                    "kind": kind,
                    "status": "answered",
                    "answer": answer,
                    "command_id": command.command_id,
                },
                turn_id=turn_id,
                run_id=run_id,
            )
        if run_id is None:
            await w.flush()
            return
        await self._continue(turn_id, run_id)

    async def _continue(self, turn_id: str, run_id: str) -> None:
        """Finish the turn's open tool calls (answered, re-runnable, not yet run), then go on."""
        self._reset_stop()
        watch_stop = threading.Event()
        watcher = asyncio.create_task(self._watch(turn_id, run_id, watch_stop))
        limit = self._arm_time_limit(turn_id)
        try:
            for call in self.state.open_calls(turn_id):
                data = ToolCallData(call_id=call.call_id, name=call.name, arguments=call.arguments)
                resolved = self.state.resolved.get(call.call_id)
                if resolved is not None:
                    await self._answered_call(turn_id, run_id, data, resolved["answer"])
                elif call.dispatched:  # uncertain, and check_resume allowed it: idempotent
                    await self._run_tool(turn_id, run_id, data, attempt=2)
                elif call.call_id not in self.state.pending:
                    await self._tool_call(turn_id, run_id, data)
                if self._stop.is_set():
                    raise _Stop
            if self.state.pending_of(turn_id):
                await self._finish(turn_id, run_id, "suspended", [])
                return
        except _Stop:
            await self._finish(turn_id, run_id, "interrupted", [])
            return
        finally:
            if limit is not None:
                limit.cancel()
            watcher.cancel()
            watch_stop.set()  # and end the watcher's wait in its worker thread now
            self.store.wake_waiters()
        await self._run(turn_id, run_id, [])

    def _add_result(
        self,
        call_id: str,
        name: str,
        status: str,
        output: Any,
        *,
        turn_id: str | None,
        run_id: str | None = None,
        **extra: Any,
    ) -> None:
        """Add a ``tool/result`` (``extra``: ``synthetic``, ``reconciled``, ``duration_ms``)."""
        payload = {"call_id": call_id, "name": name, "status": status, "output": output}
        self.writer.add("tool/result", payload | extra, turn_id=turn_id, run_id=run_id)

    async def _answered_call(
        self, turn_id: str, run_id: str, call: ToolCallData, answer: Mapping[str, Any]
    ) -> None:
        if "output" in answer:  # external execution or a question: the person's answer
            self._add_result(
                call.call_id, call.name, "success", answer["output"], turn_id=turn_id, run_id=run_id
            )
        elif answer.get("approved"):
            arguments = dict(answer.get("edited_args") or call.arguments)
            await self._run_tool(
                turn_id,
                run_id,
                ToolCallData(call_id=call.call_id, name=call.name, arguments=arguments),
            )
        else:
            reason = answer.get("reason") or "rejected by the user"
            self._add_result(
                call.call_id,
                call.name,
                "denied",
                f"The user rejected this call: {reason}",
                turn_id=turn_id,
                run_id=run_id,
                synthetic=True,
            )

    async def _cancel(self, command: Command) -> None:
        turn_id = command.turn_id or ""
        how = check_cancel(self.state, self.inbox, turn_id, executing=False)
        w = self.writer
        if how != "parked":
            await asyncio.to_thread(
                self.inbox_log.record,
                "inbox/handled",
                {"command_id": command.command_id},
                turn_id=turn_id,
            )
            w.add("inbox/applied", {"command_ids": [command.command_id]}, turn_id=turn_id)
            await w.flush()
            return
        w.add(
            "inbox/started", {"command_id": command.command_id, "kind": "cancel"}, turn_id=turn_id
        )
        for request in self.state.pending_of(turn_id):
            w.add(
                "interaction/resolved",
                {
                    "request_id": request["request_id"],
                    "kind": request["kind"],
                    "status": "cancelled",
                    "command_id": command.command_id,
                },
                turn_id=turn_id,
            )
        for call in self.state.open_calls(turn_id):
            status = "unknown" if call.dispatched else "cancelled"
            self._add_result(
                call.call_id,
                call.name,
                status,
                "The task was cancelled before this call "
                + ("finished." if call.dispatched else "ran."),
                turn_id=turn_id,
                synthetic=True,
            )
        unapplied = [
            c.command_id
            for c in self.inbox.steers_for(turn_id)
            if c.command_id not in self.state.received_inputs
        ]
        if unapplied:
            w.add(
                "input/discarded",
                {"input_ids": unapplied, "reason": "turn cancelled"},
                turn_id=turn_id,
            )
        w.add("turn/cancelled", {"reason": "cancelled by the user"}, turn_id=turn_id)
        await w.flush()

    async def _reconcile(self, command: Command) -> None:
        outcomes = command.data.get("outcomes", {})
        reason = command.data.get("reason", "")
        current = {c.call_id for c in self.state.uncertain_calls()}
        if set(outcomes) != current:
            raise InvalidInput(
                f"the uncertain calls changed to {sorted(current)}; "
                "reconcile again with exactly those"
            )
        w = self.writer
        w.add(
            "inbox/started",
            {"command_id": command.command_id, "kind": "reconcile"},
            turn_id=command.turn_id,
        )
        for call_id, outcome in outcomes.items():
            self._add_result(
                call_id,
                outcome["name"],
                outcome["status"],
                outcome["output"],
                turn_id=outcome.get("turn_id"),
                reconciled=True,
            )
        w.add(
            "recovery/applied",
            {"reason": reason, "resolved_call_ids": list(outcomes), "outcomes": outcomes},
            turn_id=command.turn_id,
        )
        await w.flush()

    # -- one run -----------------------------------------------------------------------------

    async def _start_turn(self, command: Command) -> None:
        turn_id, run_id = self._open_turn(command)
        # The turn starts only if nobody cancelled it since we picked it: the first commit
        # of the run is conditioned on the inbox head we decided from.
        self._guard = (turn_id, self.inbox.seq)
        self._reset_stop()
        try:
            await self._run(turn_id, run_id, applied=[command.command_id])
        except _Cancelled:
            self.writer.pending.clear()
            await asyncio.to_thread(self._reload)

    def _open_turn(self, command: Command) -> tuple[str, str]:
        """Add the events that start a submitted turn and its first run: (turn_id, run_id)."""
        turn_id = command.turn_id or new_id("turn")
        run_id = new_id("run")
        text = command.input or ""
        w = self.writer
        w.add(
            "inbox/started",
            {"command_id": command.command_id, "kind": command.kind},
            turn_id=turn_id,
            run_id=run_id,
        )
        w.add(
            "turn/start",
            {"input": text, "command_id": command.command_id},
            turn_id=turn_id,
            run_id=run_id,
        )
        w.add(
            "run/start",
            {"reason": "submit", "command_id": command.command_id},
            turn_id=turn_id,
            run_id=run_id,
        )
        w.add(
            "input/received",
            {
                "input_id": command.command_id,
                "kind": "submit",
                "text": text,
                "command_id": command.command_id,
            },
            turn_id=turn_id,
            run_id=run_id,
        )
        w.add(
            "message/user",
            {
                "message": Message(
                    id=f"msg_{command.command_id}", role="user", text=text, turn_id=turn_id
                )
            },
            turn_id=turn_id,
            run_id=run_id,
        )
        return turn_id, run_id

    def _publish(self, kind: str, turn_id: str, run_id: str, **data: Any) -> None:
        try:
            self.runtime.publish(LiveEvent(kind, turn_id, run_id, data, self.key))
        except Exception:  # live observers are told best effort; the run is not theirs
            log.exception("session %s: a live observer failed", self.key)

    def _ev(self, type_: str, payload: Any, turn_id: str, run_id: str) -> Event:
        return Event.create(type_, payload, turn_id=turn_id, run_id=run_id)

    async def _run(self, turn_id: str, run_id: str, applied: list[str]) -> None:
        """Steps until the turn completes, fails, needs a person, or is interrupted."""
        w = self.writer
        self._publish("status", turn_id, run_id, status="running")
        watch_stop = threading.Event()
        watcher = asyncio.create_task(self._watch(turn_id, run_id, watch_stop))
        limit = self._arm_time_limit(turn_id)
        step = 0
        step_id: str | None = None
        try:
            while True:
                if self._stop.is_set():
                    raise _Stop
                if step >= self.agent.max_steps:
                    error = (
                        f"stopped after max_steps={self.agent.max_steps} steps without "
                        "a final answer"
                    )
                    await self._finish(
                        turn_id, run_id, "failed", applied, error=error, stop_reason="max_steps"
                    )
                    return
                budget = self._over_budget(turn_id)
                if budget is not None:
                    code, error = budget
                    await self._finish(
                        turn_id, run_id, "failed", applied, error=error, stop_reason=code
                    )
                    return
                step += 1
                step_id = new_id("step")
                w.add(
                    "step/start",
                    {"step_id": step_id, "iteration": step},
                    turn_id=turn_id,
                    run_id=run_id,
                )
                applied.extend(await self._take_inputs(turn_id, run_id))
                too_big = await self._fit_context(turn_id, run_id)
                if too_big is not None:
                    await self._finish(
                        turn_id,
                        run_id,
                        "failed",
                        applied,
                        error=too_big,
                        step_id=step_id,
                        stop_reason="context_overflow",
                    )
                    return
                try:
                    _, calls = await self._model_call(turn_id, run_id)
                except ModelError as exc:
                    await self._finish(
                        turn_id, run_id, "failed", applied, error=str(exc), step_id=step_id
                    )
                    return
                if calls:
                    if await self._tool_calls(turn_id, run_id, calls):
                        await self._finish(turn_id, run_id, "suspended", applied, step_id=step_id)
                        return
                elif await self._complete(turn_id, run_id, step_id, applied):
                    return
                # Tool results to reason about, or steering that arrived during the final
                # model call: either way, one more step in this run.
                for event in self._checkpoint(turn_id, run_id, applied):
                    w.add_event(event)
                w.add(
                    "step/end",
                    {"step_id": step_id, "status": "continued"},
                    turn_id=turn_id,
                    run_id=run_id,
                )
                applied = []
                step_id = None
        except _Stop:
            await self._finish(turn_id, run_id, "interrupted", applied, step_id=step_id)
        finally:
            if limit is not None:
                limit.cancel()
            watcher.cancel()
            watch_stop.set()  # and end the watcher's wait in its worker thread now
            self.store.wake_waiters()

    async def _watch(self, turn_id: str, run_id: str, stop: threading.Event) -> None:
        """Notice interrupt commands for this run (from any process) while it runs."""
        pos = self.inbox.seq
        while True:
            head = await asyncio.to_thread(
                functools.partial(self.store.wait_for_inbox, self.key, pos, 0.5, stop=stop)
            )
            if head <= pos:
                continue
            await asyncio.to_thread(self._refresh_inbox)
            pos = self.inbox.seq
            if self._stop_command is None and self._interrupt_for(run_id) is not None:
                self._request_stop(run_id)

    def _interrupt_for(self, run_id: str) -> str | None:
        """An interrupt command for this run that nobody handled yet."""
        for c in self.inbox.commands.values():
            if (
                c.kind == "interrupt"
                and c.run_id == run_id
                and c.command_id not in self.state.handled
            ):
                return c.command_id
        return None

    def _request_stop(self, run_id: str) -> None:
        self._stop_command = self._interrupt_for(run_id)
        self._stop.set()
        self._cancel_async_tool()

    def _over_budget(self, turn_id: str) -> tuple[str, str] | None:
        """(stop_reason, error) when the turn or the session used its token budget."""
        agent = self.agent
        turn = self.state.turns.get(turn_id)
        used = UsageTotals.of(turn.usage).total_tokens if turn is not None else 0
        if agent.max_turn_tokens is not None and used >= agent.max_turn_tokens:
            error = (
                f"stopped at max_turn_tokens={agent.max_turn_tokens}: the task used {used} "
                "tokens; resume() it to go on, or raise the budget"
            )
            return "max_turn_tokens", error
        total = UsageTotals.of(self.state.usage).total_tokens
        if agent.max_session_tokens is not None and total >= agent.max_session_tokens:
            error = (
                f"stopped at max_session_tokens={agent.max_session_tokens}: the session used "
                f"{total} tokens; raise the budget to go on"
            )
            return "max_session_tokens", error
        return None

    def _cancel_async_tool(self) -> None:
        task = self._tool_task
        if task is not None and not task.done() and self._tool_is_async:
            task.cancel()  # async tools stop now; sync tools finish first

    def request_stop(self, reason: str, code: str = "interrupted") -> None:
        """Stop the active run at its next boundary, recording ``reason`` (close, time limit)
        and ``code`` as its ``stop_reason``.

        On the runtime's loop. A stop already asked for keeps its first reason.
        """
        if not self._stop.is_set():
            self._stop_reason = reason
            self._stop_code = code
            self._stop.set()
        self._cancel_async_tool()

    def abandon_tool(self) -> str | None:
        """End the run without waiting for a sync tool that ignores the stop (``close``).

        Returns what is abandoned (for the caller's report), or None if no tool runs. Its call
        stays uncertain: what it did is unknown.
        """
        task = self._tool_task
        if task is None or task.done():
            return None
        self._abandon.set()
        return self._tool_name

    def _reset_stop(self, *, force: bool = False) -> None:
        """A new run starts with no stop requested (unless the driver is closing)."""
        if self.stopping and not force:
            return  # closing: a run that starts now stops at its first boundary
        self._stop.clear()
        self._stop_command = None
        self._stop_reason = None
        self._stop_code = "interrupted"

    def _arm_time_limit(self, turn_id: str) -> asyncio.TimerHandle | None:
        """Stop the run when the turn has executed for its time limit (over all its runs)."""
        limit = self._time_limit(turn_id)
        if limit is None:
            return None
        used = 0.0
        turn = self.state.turns.get(turn_id)
        for run_id in turn.run_ids if turn is not None else ():
            run = self.state.runs[run_id]
            if run.started_at is not None and run.ended_at is not None:
                used += (run.ended_at - run.started_at).total_seconds()
        reason = f"time limit: the task ran for its limit of {limit:g} s"
        return asyncio.get_running_loop().call_later(
            max(0.0, limit - used), self.request_stop, reason, "time_limit"
        )

    def _time_limit(self, turn_id: str) -> float | None:
        """``submit(..., timeout=)`` of the turn, else ``Agent(max_turn_seconds=)``."""
        turn = self.state.turns.get(turn_id)
        command = self.inbox.commands.get(turn.command_id or "") if turn is not None else None
        timeout = command.data.get("timeout") if command is not None else None
        if isinstance(timeout, int | float):
            return float(timeout)
        return self.agent.max_turn_seconds

    async def _flush_before_side_effect(self, turn_id: str) -> None:
        """Commit before a side effect; the first commit of a new turn is guarded."""
        guard = self._guard
        if guard is None or guard[0] != turn_id:
            await self.writer.flush()
            return
        seen = guard[1]
        while True:
            try:
                await self.writer.flush(expected_inbox=seen)
            except InboxChanged:
                await asyncio.to_thread(self._refresh_inbox)
                submit = self.state.turns[turn_id].command_id
                if submit is not None and submit in self.inbox.rejected:
                    raise _Cancelled from None
                seen = self.inbox.seq
                continue
            self._guard = None
            return

    async def _complete(self, turn_id: str, run_id: str, step_id: str, applied: list[str]) -> bool:
        """Commit the turn's completion, unless steering for it is waiting (then False).

        The completion commits only if the inbox is still where we read it, so steering
        accepted before the commit is always applied, and steering after it is refused by
        ``steer`` (it sees ``run/end.inbox_seq`` below its own inbox seq).
        """
        while True:
            await asyncio.to_thread(self._refresh_inbox)
            seen = self.inbox.seq
            if self._interrupt_for(run_id) is not None:
                # Accepted before we could commit the completion: honour it.
                self._request_stop(run_id)
                raise _Stop
            if any(
                c.command_id not in self.state.received_inputs
                for c in self.inbox.steers_for(turn_id)
            ):
                return False
            message = self.state.context[-1]  # the final assistant message, same id
            tail = [
                self._ev(
                    "turn/output", {"message": message, "status": "completed"}, turn_id, run_id
                ),
                *self._checkpoint(turn_id, run_id, applied),
                self._ev("step/end", {"step_id": step_id, "status": "terminal"}, turn_id, run_id),
                self._ev("turn/completed", {}, turn_id, run_id),
                self._ev(
                    "run/end",
                    {"status": "completed", "inbox_seq": seen, "stop_reason": "final_answer"},
                    turn_id,
                    run_id,
                ),
            ]
            try:
                await self.writer.flush(tail=tail, expected_inbox=seen)
            except InboxChanged:
                continue
            self._publish("status", turn_id, run_id, status="completed")
            return True

    def _refresh_inbox(self) -> None:
        with self._inbox_lock:  # the run and its interrupt watcher both read the inbox
            self.folds.refresh_inbox()

    async def _take_inputs(self, turn_id: str, run_id: str) -> list[str]:
        """Steering for this turn and injected material not yet in the context."""
        await asyncio.to_thread(self._refresh_inbox)
        fresh = [
            c
            for c in self.inbox.steers_for(turn_id) + self.inbox.injects()
            if c.command_id not in self.state.received_inputs
        ]
        fresh.sort(key=lambda c: c.seq)
        for c in fresh:
            text = c.input or ""
            self.writer.add(
                "input/received",
                {
                    "input_id": c.command_id,
                    "kind": "steer" if c.kind == "steer" else "inject",
                    "text": text,
                    "command_id": c.command_id,
                },
                turn_id=turn_id,
                run_id=run_id,
            )
            message = Message(id=f"msg_{c.command_id}", role="user", text=text, turn_id=turn_id)
            self.writer.add("message/user", {"message": message}, turn_id=turn_id, run_id=run_id)
        return [c.command_id for c in fresh]

    def _checkpoint(self, turn_id: str, run_id: str, applied: list[str]) -> list[Event]:
        """The checkpoint closing a step, and the inputs it makes applied."""
        run = self.state.runs.get(run_id)
        events = [
            self._ev(
                "state/checkpoint",
                {
                    "reason": "step",
                    "state": {
                        "turn_id": turn_id,
                        "run_id": run_id,
                        "step": run.steps if run else 0,
                        "context_messages": len(self.state.context),
                    },
                },
                turn_id,
                run_id,
            )
        ]
        if applied:
            events.append(self._ev("input/applied", {"input_ids": applied}, turn_id, run_id))
        return events

    async def _finish(
        self,
        turn_id: str,
        run_id: str,
        status: str,
        applied: list[str],
        *,
        error: str | None = None,
        step_id: str | None = None,
        stop_reason: str | None = None,
    ) -> None:
        """End the run (failed, suspended, interrupted) in one commit.

        ``stop_reason`` is the code ``run/end`` records (by default: ``error`` for a failed
        run, ``needs_person`` for a suspended one, the stop's code for an interrupted one).
        """
        w = self.writer
        reason = None
        code = stop_reason or {"failed": "error", "suspended": "needs_person"}.get(status)
        if status == "interrupted" and code is None:
            code = "interrupted" if self._stop_command is not None else self._stop_code
        if status == "interrupted" and self._stop_command is not None:
            w.add(
                "inbox/started",
                {"command_id": self._stop_command, "kind": "interrupt"},
                turn_id=turn_id,
                run_id=run_id,
            )
            w.add(
                "run/stop_requested",
                {"command_id": self._stop_command},
                turn_id=turn_id,
                run_id=run_id,
            )
        elif status == "interrupted" and self._stop_reason is not None:
            reason = error = self._stop_reason
            w.add("run/stop_requested", {"reason": reason}, turn_id=turn_id, run_id=run_id)
        for event in self._checkpoint(turn_id, run_id, applied):
            w.add_event(event)
        if step_id is not None:
            w.add(
                "step/end",
                {"step_id": step_id, "status": "terminal"},
                turn_id=turn_id,
                run_id=run_id,
            )
        w.add(f"turn/{status}", {"error": error, "reason": reason}, turn_id=turn_id, run_id=run_id)
        w.add(
            "run/end",
            {
                "status": status,
                "reason": reason,
                "error": error,
                "inbox_seq": self.inbox.seq,
                "stop_reason": code,
            },
            turn_id=turn_id,
            run_id=run_id,
        )
        await w.flush()
        self._publish("status", turn_id, run_id, status=status)

    # -- the working context: compaction ---------------------------------------------------

    def _context_tokens(self) -> tuple[int, int | None]:
        """(tokens of the next call's context with the tools, the model's window or None)."""
        agent = self.agent
        messages = build_context(agent.instructions, self.state.context)
        tools = [t.spec() for t in agent.tools]
        window = agent.context_window or agent.model.context_window
        return agent.model.count_tokens(messages, tools), window

    async def _fit_context(self, turn_id: str, run_id: str) -> str | None:
        """Compact before a step when the next context passes the compactor's trigger.

        Returns why the turn cannot go on (the context does not fit the window, and
        compaction could not make it fit), else None.
        """
        compactor = self.agent.compaction
        window = self.agent.context_window or self.agent.model.context_window
        if window is None:
            return None  # no window known: nothing to keep the context inside
        tokens, _ = self._context_tokens()
        if compactor is not None and tokens >= compactor.trigger * window:
            await self._compact(turn_id, run_id, "trigger")
            tokens, _ = self._context_tokens()
        if tokens > window:
            return f"the context ({tokens} tokens) does not fit the model's window of {window}" + (
                "" if compactor else "; give the agent a compaction= compactor"
            )
        return None

    async def _compact(self, turn_id: str | None, run_id: str | None, reason: str) -> bool:
        """Replace the oldest part of the working context (see ``agentnb.compaction``).

        ``compaction/start`` and, for a summary, the summariser's ``model/dispatch`` are
        committed before the summariser is called; ``context/replaced`` and
        ``compaction/end`` commit together, so a crash leaves the old context or the new one.
        A failure records ``compaction/end`` ``failed`` and keeps the context. True if
        compacted.
        """
        compactor = self.agent.compaction
        if compactor is None:
            return False
        w = self.writer
        context = list(self.state.context)
        cut = compactor.cut(context)
        if cut == 0:
            return False
        compaction_id = new_id("cmp")
        before, _ = self._context_tokens()
        w.add(
            "compaction/start",
            {
                "compaction_id": compaction_id,
                "reason": reason,
                "before_count": len(context),
                "tokens_before": before,
                "compactor": compactor.name,
            },
            turn_id=turn_id,
            run_id=run_id,
        )
        summary = isinstance(compactor, SummaryCompactor)
        call_id = new_id("mc")
        model: Model | None = None
        if isinstance(compactor, SummaryCompactor):
            model = compactor.model or self.agent.model
        if model is not None:
            w.add("model/dispatch", {"model_call_id": call_id}, turn_id=turn_id, run_id=run_id)
        await w.flush()
        started = time.monotonic()
        try:
            text = await compactor.replacement(context[:cut], self.agent.model)
        except Exception as exc:  # noqa: BLE001 - a failed compaction keeps the context
            error = describe(exc)
            if model is not None:
                w.add(
                    "model/end",
                    {
                        "model_call_id": call_id,
                        "status": "failed",
                        "model": model.name,
                        "error": error,
                    },
                    turn_id=turn_id,
                    run_id=run_id,
                )
            w.add(
                "compaction/end",
                {
                    "compaction_id": compaction_id,
                    "status": "failed",
                    "error": error,
                    "before_count": len(context),
                    "tokens_before": before,
                },
                turn_id=turn_id,
                run_id=run_id,
            )
            await w.flush()
            return False
        if model is not None:
            w.add(
                "model/end",
                {
                    "model_call_id": call_id,
                    "status": "completed",
                    "model": model.name,
                    "latency_ms": round((time.monotonic() - started) * 1000, 3),
                },
                turn_id=turn_id,
                run_id=run_id,
            )
        replacement = replacement_message(text, compaction_id, summary=summary)
        w.add(
            "context/replaced",
            {
                "reason": reason,
                "messages": [replacement],
                "replaced_count": cut,
                "compaction_id": compaction_id,
                "previous_as_of_seq": self.state.seq,
            },
            turn_id=turn_id,
            run_id=run_id,
        )
        after, _ = self._context_tokens()
        w.add(
            "compaction/end",
            {
                "compaction_id": compaction_id,
                "status": "completed",
                "before_count": len(context),
                "after_count": len(self.state.context),
                "tokens_before": before,
                "tokens_after": after,
                "replaced": [context[0].id, context[cut - 1].id],
                "summary": text if summary else None,
            },
            turn_id=turn_id,
            run_id=run_id,
        )
        await w.flush()
        return True

    async def _compact_command(self, command: Command) -> None:
        """``session.compact()``: compact now, between runs (a no-op when nothing can be cut).

        The command counts as carried out with the compaction's last commit: a crash before
        it leaves the command waiting, and the next runtime compacts again.
        """
        await self._compact(None, None, "requested")
        self.writer.add("inbox/started", {"command_id": command.command_id, "kind": "compact"})
        await self.writer.flush()

    # -- the model call ----------------------------------------------------------------------

    async def _model_call(self, turn_id: str, run_id: str) -> tuple[str, list[ToolCallData]]:
        w = self.writer
        agent = self.agent
        state = self.state
        call_id = new_id("mc")
        prefix = state.requested_messages
        new_messages = state.context[prefix:]
        w.add(
            "request/prepared",
            {
                "model_call_id": call_id,
                "model": agent.model.name,
                "prefix": prefix,
                "messages": new_messages,
                "instructions": agent.instructions if prefix == 0 else None,
                "tools": [t.name for t in agent.tools],
            },
            turn_id=turn_id,
            run_id=run_id,
        )
        messages = tuple(build_context(agent.instructions, state.context))
        tools = tuple(t.spec() for t in agent.tools)
        w.add(
            "context/build",
            {
                "message_count": len(messages),
                "details": {
                    "model_call_id": call_id,
                    "tokens": agent.model.count_tokens(messages, tools),
                    "compactions": state.compactions,
                },
            },
            turn_id=turn_id,
            run_id=run_id,
        )
        request = ModelRequest(
            messages=messages,
            tools=tools,
        )
        for attempt in range(1, MODEL_RETRIES + 2):
            w.add(
                "model/dispatch",
                {"model_call_id": call_id, "attempt": attempt},
                turn_id=turn_id,
                run_id=run_id,
            )
            await self._flush_before_side_effect(turn_id)
            try:
                return await self._stream(call_id, request, turn_id, run_id)
            except ModelError as exc:
                if not exc.retryable or attempt > MODEL_RETRIES:
                    w.add(
                        "model/end",
                        {
                            "model_call_id": call_id,
                            "status": "failed",
                            "model": agent.model.name,
                            "error": str(exc),
                        },
                        turn_id=turn_id,
                        run_id=run_id,
                    )
                    raise
                delay = agent.model.backoff.delay(attempt, exc)
                w.add(
                    "model/retry",
                    {
                        "model_call_id": call_id,
                        "attempt": attempt,
                        "error": str(exc),
                        "delay_s": delay,
                    },
                    turn_id=turn_id,
                    run_id=run_id,
                )
                await asyncio.sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _stream(
        self, call_id: str, request: ModelRequest, turn_id: str, run_id: str
    ) -> tuple[str, list[ToolCallData]]:
        w = self.writer
        started = time.monotonic()
        collector = StreamCollector()
        group = ChunkGroup(w, call_id, turn_id, run_id)
        last_commit = started
        stream = self.agent.model.stream(request)
        try:
            async for item in stream:
                collector.add(item)
                if isinstance(item, TextDelta | ToolCallDelta):
                    piece = group.add(item)
                    self._publish("model/chunk", turn_id, run_id, model_call_id=call_id, **piece)
                if self._stop.is_set():
                    group.close()
                    w.add(
                        "model/end",
                        {
                            "model_call_id": call_id,
                            "status": "cancelled",
                            "model": self.agent.model.name,
                            "latency_ms": round((time.monotonic() - started) * 1000, 3),
                        },
                        turn_id=turn_id,
                        run_id=run_id,
                    )
                    raise _Stop
                now = time.monotonic()
                group.close_if_due(now)
                if now - last_commit >= CHUNK_COMMIT_INTERVAL and w.pending:
                    await w.flush()
                    last_commit = time.monotonic()
        except ModelError as exc:
            group.close()
            if exc.retryable and group.pieces:
                # Part of the reply was streamed (and may be committed): never retried.
                raise ModelError(
                    f"{exc} (after part of the reply was streamed, so it is not retried)"
                ) from exc
            raise
        except _Stop:
            group.close()
            raise
        except Exception as exc:
            group.close()
            raise ModelError(describe(exc)) from exc
        finally:
            close = getattr(stream, "aclose", None)
            if close is not None:
                await close()
        group.close()
        self._bad_arguments = {}
        tool_calls = collector.tool_calls(problems=self._bad_arguments)
        message = Message(
            id=f"msg_{call_id}",
            role="assistant",
            text=collector.text,
            tool_calls=tuple(tool_calls),
            turn_id=turn_id,
        )
        try:
            reply = self._ev(
                "message/assistant", {"message": message, "model_call_id": call_id}, turn_id, run_id
            )
        except InvalidInput as exc:
            raise ModelError(f"the model's reply cannot be recorded: {exc}") from None
        usage = collector.usage
        w.add(
            "model/end",
            {
                "model_call_id": call_id,
                "status": "completed",
                "model": self.agent.model.name,
                "input_tokens": usage.input_tokens if usage else None,
                "output_tokens": usage.output_tokens if usage else None,
                "cached_tokens": usage.cached_tokens if usage else None,
                "reasoning_tokens": usage.reasoning_tokens if usage else None,
                "latency_ms": round((time.monotonic() - started) * 1000, 3),
                "finish_reason": collector.finish_reason,
            },
            turn_id=turn_id,
            run_id=run_id,
        )
        w.add_event(reply)
        return collector.text, tool_calls

    # -- tool calls --------------------------------------------------------------------------

    async def _tool_calls(self, turn_id: str, run_id: str, calls: list[ToolCallData]) -> bool:
        """Run (or ask about) the calls of one reply; True if the turn must wait for a person."""
        for call in calls:
            self.writer.add(
                "tool/requested",
                {"call_id": call.call_id, "name": call.name, "arguments": call.arguments},
                turn_id=turn_id,
                run_id=run_id,
            )
        waiting = False
        for call in calls:
            waiting = await self._tool_call(turn_id, run_id, call) or waiting
            if self._stop.is_set():
                raise _Stop
        return waiting

    def _problem(self, call: ToolCallData) -> str | None:
        """Why this call cannot run (unknown tool, arguments that do not fit), or None."""
        if call.call_id in self._bad_arguments:
            return self._bad_arguments[call.call_id]
        tool = self.agent.tool_named(call.name)
        if tool is None:
            names = ", ".join(t.name for t in self.agent.tools) or "none"
            return f"there is no tool named {call.name!r}; available tools: {names}"
        try:
            tool.validate(call.arguments)
        except InvalidToolArguments as exc:
            return str(exc)
        return None

    async def _tool_call(self, turn_id: str, run_id: str, call: ToolCallData) -> bool:
        """Decide one call: refuse it, ask a person about it (True), or run it."""
        w = self.writer
        tool = self.agent.tool_named(call.name)
        problem = self._problem(call)
        if problem is not None or tool is None:
            # Never run; the model sees what was wrong and can try again.
            w.add(
                "tool/decision",
                {"call_id": call.call_id, "decision": "denied", "reason": problem},
                turn_id=turn_id,
                run_id=run_id,
            )
            self._add_result(
                call.call_id,
                call.name,
                "error",
                f"Error: {problem}",
                turn_id=turn_id,
                run_id=run_id,
                synthetic=True,
            )
            return False
        kind = interaction_kind(tool)
        if kind is not None:
            w.add(
                "tool/decision",
                {"call_id": call.call_id, "decision": "suspended", "reason": kind},
                turn_id=turn_id,
                run_id=run_id,
            )
            w.add(
                "interaction/requested",
                {
                    "request_id": call.call_id,
                    "kind": kind,
                    "call_id": call.call_id,
                    "tool_name": tool.name,
                    "arguments": dict(call.arguments),
                    "prompt": prompt(kind, tool.name, call.arguments),
                },
                turn_id=turn_id,
                run_id=run_id,
            )
            return True
        w.add(
            "tool/decision",
            {"call_id": call.call_id, "decision": "allowed"},
            turn_id=turn_id,
            run_id=run_id,
        )
        await self._run_tool(turn_id, run_id, call)
        return False

    async def _run_tool(
        self, turn_id: str, run_id: str, call: ToolCallData, attempt: int = 1
    ) -> None:
        """Dispatch (durably first), run, and record one tool call."""
        w = self.writer
        tool = self.agent.tool_named(call.name)
        assert tool is not None
        arguments = dict(call.arguments)
        w.add(
            "tool/dispatch",
            {
                "call_id": call.call_id,
                "name": tool.name,
                "arguments": arguments,
                "idempotent": tool.idempotent,
                "attempt": attempt,
            },
            turn_id=turn_id,
            run_id=run_id,
        )
        w.add(
            "action/start",
            {"call_id": call.call_id, "name": tool.name},
            turn_id=turn_id,
            run_id=run_id,
        )
        await self._flush_before_side_effect(turn_id)
        reports = Reports(w, turn_id, run_id, call.call_id, self._publish)
        ctx = ToolContext(self.key, turn_id, run_id, call.call_id, reports.record, reports.progress)
        started = time.monotonic()
        task = asyncio.ensure_future(contained(tool.invoke, arguments, ctx))
        self._tool_task, self._tool_is_async, self._tool_name = task, tool.is_async, tool.name
        self._abandon.clear()
        try:
            output = await self._tool_output(task)
            status, action = "success", "returned"
        except asyncio.CancelledError:
            if not self._stop.is_set():
                raise
            # Interrupted mid-call: what it did is unknown, so no result is recorded and
            # the call stays uncertain until it is reconciled (or re-run, if idempotent).
            reports.close()
            w.add(
                "action/end",
                {"call_id": call.call_id, "name": tool.name, "status": "interrupted"},
                turn_id=turn_id,
                run_id=run_id,
            )
            raise _Stop from None
        except Exception as exc:  # noqa: BLE001 - any failure of a tool is its result
            cause = exc.__cause__ if isinstance(exc, ToolExit) else None
            output = f"Error: {describe(cause or exc)}"
            status, action = "error", "failed"
        finally:
            self._tool_task = None
        await asyncio.sleep(0)  # let records/progress handed over from a worker thread land
        reports.close()
        w.add(
            "action/end",
            {"call_id": call.call_id, "name": tool.name, "status": action},
            turn_id=turn_id,
            run_id=run_id,
        )
        self._add_result(
            call.call_id,
            tool.name,
            status,
            output,
            turn_id=turn_id,
            run_id=run_id,
            duration_ms=round((time.monotonic() - started) * 1000, 3),
        )

    async def _tool_output(self, task: asyncio.Future[str]) -> str:
        """The tool's result; if ``close`` abandons a sync tool that ignores the stop, _Stop."""
        abandon = asyncio.ensure_future(self._abandon.wait())
        either: set[asyncio.Future[Any]] = {task, abandon}
        try:
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            task.cancel()
            raise
        finally:
            abandon.cancel()
        if task.done():
            return task.result()
        # The thread cannot be stopped: leave it behind (its result is never used) and end
        # the run; the call stays uncertain.
        task.add_done_callback(ignore_result)
        self._stop.set()
        raise asyncio.CancelledError
