"""The lease and the command loop: executes one session's accepted commands under its lease.

A ``SessionDriver`` lives on the runtime's loop while its session has work. It takes the
session's lease (renewing it, taking it over from a dead holder), folds the log, and runs
accepted commands in order (``next_command``); when a command fails, ``fail`` ends what it
left open with the reason committed. The driver is the ``RunHost`` (``runtime/scope.py``) of
the parts that execute a run, each with one job:

- ``runtime/writer.py``: the log writer (buffered events, fenced batch commits, chunks);
- ``runtime/recipes.py``: each command's events (start, resume, respond, cancel, reconcile,
  recover, and a run's end), written once;
- ``runtime/run_loop.py``: the step loop, its interrupt watch, time limit and budgets;
- ``runtime/model_call.py`` and ``runtime/tool_call.py``: the model call and the tool calls;
- ``runtime/context.py``: the working context's size and compaction.

Commit rules (DESIGN §4): events are committed in one batch right before every side effect
(``model/dispatch``, ``tool/dispatch``) and at the end of a run; everything between two side
effects shares one commit.

Why it is over 500 lines: the lease's life (take, renew, take over, release, or run under a
worker's claim and give it back), the command loop with the fold it reads (and what it may
skip reading), and the fault path that must commit every failure's reason belong to one
object, the session's one executor.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from pathlib import Path
from typing import Any, Protocol

from agentnb.agent import Agent, agent_changes, check_agent, instructions_message
from agentnb.errors import (
    AgentChanged,
    AgentnbError,
    Fenced,
    LeaseHeld,
    SessionFull,
    StorageError,
    WorkspaceChanged,
    describe,
)
from agentnb.events import Event, canonical_json
from agentnb.folds import ChatFolds, Folds
from agentnb.holders import holder_alive
from agentnb.ids import SessionKey
from agentnb.limits import Limits, check_room
from agentnb.live import LiveEvent
from agentnb.log import Inbox
from agentnb.projections.state import Command, InboxState, SessionState, next_command
from agentnb.runtime.run_loop import RunLoop
from agentnb.runtime.scope import RunStop
from agentnb.runtime.writer import FATAL, LogWriter
from agentnb.stores.base import Lease, SessionStore
from agentnb.workspace import check_workspace

__all__ = ["DriverHost", "SessionDriver"]

log = logging.getLogger("agentnb.runtime")

LINGER = 0.5
"""Seconds an idle driver keeps the lease, waiting for more work, before releasing it."""
FAULT_RETRIES = 3
"""Attempts to commit the end of a run that failed before the session is given up."""
_AGENT_WORK = frozenset({"submit", "resume", "respond", "compact"})
"""Commands whose work the agent does: refused for another agent or a full session."""


class _Broken(Exception):
    """A failure could not be recorded even by the fault path: stop executing the session."""


class DriverHost(Protocol):
    """What a ``SessionDriver`` needs from the runtime that runs it."""

    store: SessionStore
    agent: Agent
    owner: str
    lease_ttl: float
    auto_resume: bool | str
    """False, True (resume when nothing uncertain blocks) or ``"unknown"`` (settle the
    uncertain calls as unknown and resume)."""
    limits: Limits
    accept_agent_change: bool
    accept_workspace_change: bool

    def publish(self, event: LiveEvent) -> None:
        """Tell live observers (never blocks)."""

    def agent_for(self, key: SessionKey) -> Agent:
        """The agent that executes ``key`` (the runtime's, or one of its sub-agents)."""

    def hand_off(self, key: SessionKey) -> None:
        """Make sure another session's accepted work gets dispatched, here or by a worker
        of the pool (non-blocking)."""

    def committed(self, key: SessionKey, events: list[Event]) -> None:
        """Called after each commit of ``key`` with the events committed."""

    def chat_folds(self, key: SessionKey) -> ChatFolds:
        """The process's one chat fold of ``key`` (the driver keeps its snapshot current)."""


class SessionDriver:
    """Executes one session's accepted commands while this process holds its lease."""

    def __init__(
        self,
        runtime: DriverHost,
        key: SessionKey,
        *,
        folds: Folds | None = None,
        lease: Lease | None = None,
    ) -> None:
        """``folds``: the session's folds left by its last driver (or a worker's look), taken
        over and brought up to date instead of loaded again. ``lease``: one the caller holds
        (a worker's claim) and lends: the driver runs under it, keeps it only while it has
        work (no lingering) and gives it back in ``lent_back`` instead of releasing it."""
        self.runtime = runtime
        self.key = key
        self.store = runtime.store
        self.agent = runtime.agent_for(key)
        self.inbox_log = Inbox(self.store, key)
        self.wake = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.folds = folds if folds is not None else Folds(self.store, key, limits=runtime.limits)
        self._lent = lease
        self.lent_back: Lease | None = None
        """The lent lease, given back when the driver ended idle (None: it was lost, or
        released)."""
        self.chat_folds = runtime.chat_folds(key)
        self.writer = LogWriter(self.store, key, self.state, runtime.limits)
        self.writer.on_commit = self._committed
        self._renewer: asyncio.Task[None] | None = None
        self.stop = RunStop()
        self.guard: tuple[str, int] | None = None
        self._inbox_lock = threading.Lock()
        self._background: set[asyncio.Future[None]] = set()
        self.runs = RunLoop(self)
        self.recipes = self.runs.recipes
        self.stopping = False
        self.given_up: str | None = None
        """Why this driver stopped executing the session after a failure it could not record."""
        self._handed: list[Event] = []
        """Inbox records this process accepted and handed over (``hand_over``), not folded."""

    # -- lifecycle ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Take the lease, run every dispatchable command, release the lease when idle.

        An error that escapes is kept in ``given_up`` before the task ends, so a waiter that
        sees nobody executing also sees why.
        """
        try:
            await self._run()
        except Exception as exc:
            self.given_up = describe(exc)
            raise

    async def _run(self) -> None:
        while not self.stopping:
            self.wake.clear()
            lease, taken = self._lent, False
            if lease is None:
                if not await self._has_work():
                    if self.wake.is_set():
                        continue  # work was accepted while this looked: look again
                    return
                lease, taken = await self._acquire(), True
                if lease is None:
                    return
            self.writer.lease = lease
            try:
                await self._begin(lease, refresh=taken)
                loop = asyncio.get_running_loop()
                idle_since: float | None = None
                while not self.stopping:
                    if await self._execute_all():
                        idle_since = None
                    if self.stopping:
                        break
                    if self.wake.is_set():
                        continue  # kicked after the last look: look again
                    if self._lent is not None:
                        break  # the lender looks again and settles: its slot is not held
                    # Keep the lease a moment: back-to-back tasks then cost no lease commits.
                    # Wake-ups that bring no work (a worker's poll) do not extend the moment.
                    idle_since = loop.time() if idle_since is None else idle_since
                    left = LINGER - (loop.time() - idle_since)
                    if left <= 0:
                        break
                    try:
                        await asyncio.wait_for(self.wake.wait(), left)
                    except TimeoutError:
                        break
            except FATAL as exc:
                log.warning("session %s: execution stopped: %s", self.key, exc)
                self._lent = None  # the lease may be lost: released, not given back
                self.writer.pending.clear()
                with contextlib.suppress(Exception):
                    await asyncio.to_thread(self._reload)
            except _Broken as exc:
                # Even the fault path could not commit (the store keeps failing). Give the
                # session up; a later driver closes the open run as a crash would be.
                log.error("session %s: execution given up: %s", self.key, exc)
                self._lent = None
                self.writer.pending.clear()
                self.given_up = str(exc)
                return
            finally:
                await self._release()
            if self.lent_back is not None or not self.wake.is_set():
                return

    async def _begin(self, lease: Lease, *, refresh: bool) -> None:
        """Under a lease just taken (``refresh``: another process may have written before)
        or lent (the lender looked under it: the folds are read again only if the store
        object knows of a commit they lack): keep it renewed, and recover a run that a
        crash cut off. Inside the driver's ``try``, so a failure here still releases it."""
        if refresh or not self._folds_current():
            await asyncio.to_thread(self._refresh)
        self._renewer = asyncio.create_task(self._renew(lease))
        if self.state.active_run is not None:
            await self.recipes.recover()

    @property
    def reusable_folds(self) -> Folds | None:
        """The folds, when they hold exactly what was committed up to their seq (the next
        driver of the session may take them over); None after a failure."""
        if (
            self.given_up is None
            and not self.writer.pending
            and self.state.seq == self.writer.head
            and self.folds.loaded
        ):
            return self.folds
        return None

    def _folds_current(self) -> bool:
        """Whether the folds hold every commit this store object knows of, and nobody else
        writes the execution log (this driver holds the lease).

        A command of another process not seen yet is taken at a later look; a turn's first
        commit is conditioned on the inbox head, so a cancel of it is not missed.
        """
        return self.holds_lease and not self.writer.pending and self.folds.holds_known()

    async def _has_work(self) -> bool:
        await asyncio.to_thread(self._refresh)
        # A run without an end that nobody executes was cut off by a crash: recover it.
        return next_command(self.inbox, self.state) is not None or self.state.active_run is not None

    @property
    def state(self) -> SessionState:
        return self.folds.state

    @property
    def holds_lease(self) -> bool:
        """Whether this driver holds the session's lease (read from any thread)."""
        task = self.task
        return (
            self.writer.lease is not None
            and not self.stopping
            and task is not None
            and not task.done()
        )

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
        self.folds = Folds(self.store, self.key, limits=self.runtime.limits)
        self.writer = LogWriter(self.store, self.key, self.state, self.runtime.limits)
        self.writer.lease = lease
        self.writer.on_commit = self._committed
        self._refresh()

    def _save_snapshots(self, due: list[tuple[str, int, bytes]], seq: int) -> None:
        """In a worker thread: write the due snapshots, and the chat fold's when it is due."""
        self.folds.put_snapshots(due)
        try:
            self.chat_folds.keep_up(seq)
        except Exception as exc:  # noqa: BLE001 - a cache: a failure only makes reads slower
            log.info("session %s: chat snapshot not refreshed: %s", self.key, describe(exc))

    def _committed(self, events: list[Event]) -> None:
        """After each commit: tell live observers (the chat fold took the events from the
        commit bus), and now and then snapshot the folds."""
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
        if lease is not None and self._lent is not None:
            self._lent, self.lent_back = None, lease  # renewed meanwhile: the newest
        elif lease is not None:
            with contextlib.suppress(StorageError):
                await asyncio.to_thread(self.store.release_lease, lease)

    def hand_over(self, record: Event) -> None:
        """On the loop: an inbox record this process just accepted, folded at the next look
        instead of read back."""
        self._handed.append(record)

    def _fold_handed(self) -> bool:
        """On the loop: fold the records handed over; True if the folds are then known to be
        current without reading the store.

        They are while this driver holds the lease (nobody else writes the execution log),
        has nothing uncommitted, and the store object has seen no command they lack: a
        command of another process not seen yet is taken at the look after this turn (and
        the turn's first commit is conditioned on the inbox head, so a cancel of it is
        not missed).
        """
        handed, self._handed = self._handed, []
        if handed:
            if not self._inbox_lock.acquire(blocking=False):
                return False  # a read is under way: read
            try:
                for record in handed:
                    if record.seq == self.inbox.seq + 1:
                        self.inbox.apply(record)
            finally:
                self._inbox_lock.release()
        return self._folds_current()

    async def _execute_all(self) -> bool:
        """Run commands until none is dispatchable: True if any ran (or a run was closed).

        The wake flag is cleared before each look, so a kick it did not see stays set.
        """
        worked = False
        while not self.stopping:
            self.wake.clear()
            if not self._fold_handed() or (
                self.state.active_run is None
                and next_command(self.inbox, self.state) is None
                and self._lent is None
            ):
                # Nothing to do by what is folded: the store decides (before going idle).
                # Under a lent lease the lender decides instead: it settles the session's
                # mark only if the inbox head is still the one these folds hold (else it
                # looks again), so a command that came meanwhile is not missed and the
                # wake-up costs no read of its own.
                await asyncio.to_thread(self._refresh)
            if self.state.active_run is not None:
                # Every command ends the run it starts, so an open run here was left by a
                # failure nobody could record: close it as a crash is closed, and go on.
                await self.recipes.recover("an error left the run open", auto_resume=False)
                worked = True
                continue
            command = next_command(self.inbox, self.state)
            if command is None:
                return worked
            worked = True
            try:
                await self._execute(command)
            except FATAL:
                raise
            except Exception as exc:  # noqa: BLE001 - every failure ends its run, recorded
                await self._fail(command, exc)
        return worked

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
                self.reset_stop(force=True)
                if run is not None:
                    code = "session_full" if isinstance(exc, SessionFull) else None
                    await self.recipes.finish(
                        run.turn_id, run.run_id, "failed", [], error=reason, stop_reason=code
                    )
                elif unhandled and command.kind == "submit" and not isinstance(exc, SessionFull):
                    # Failed before its first commit: the task still becomes a failed turn,
                    # so its waiter and tasks() see why.
                    turn_id, run_id = self.recipes.open_turn(command)
                    await self.recipes.finish(
                        turn_id, run_id, "failed", [command.command_id], error=reason
                    )
                elif unhandled:
                    await self.recipes.reject(command, reason)
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
        runs = self.runs
        kind = command.kind
        subagents = runs.tools.subagents
        if not await subagents.before_command(command):
            return  # a sub-agent's wake-up with nothing to continue, recorded as carried out
        if kind in _AGENT_WORK and not await self._admit(command):
            return
        if kind == "submit":
            await runs.start_turn(command)
        elif kind == "resume":
            await runs.continue_(*await self.recipes.resume(command))
        elif kind == "respond":
            turn_id, run_id = await self.recipes.respond(command)
            if run_id is not None:
                await runs.continue_(turn_id, run_id)
        elif kind == "cancel":
            await subagents.cancel_turn(command)  # its children first, in the same commit
            await self.recipes.cancel(command)
        elif kind == "reconcile":
            await self.recipes.reconcile(command)
        elif kind == "compact":
            await runs.context.compact_command(command)
        elif kind == "revoke":
            await self.recipes.revoke(command)
        elif kind == "feedback":
            await self.recipes.feedback(command)
        else:
            await self.recipes.reject(command, f"{kind} commands are not dispatched")

    async def _admit(self, command: Command) -> bool:
        """Whether ``command`` may start its work here; refused, it is rejected with why.

        The work must be done by the agent the session is bound to (``check_agent``: a
        worker with another agent refuses it unless it accepts agent changes), and the
        session must have room under its cap. Binding the session (its first work) or an
        accepted change adds its event to the writer: it commits with the work's first
        commit, or not at all.
        """
        limits = self.runtime.limits
        try:
            nbytes = 0
            if limits.max_session_bytes is not None:
                record = await asyncio.to_thread(self.store.get_session, self.key)
                nbytes = record.bytes if record is not None else 0
            check_room(self.state.seq, nbytes, stage="start", limits=limits, session=self.key)
            self._check_submitted_for(command)
            binding = check_agent(
                self.state.agent,
                self.agent,
                accept=self.runtime.accept_agent_change,
                session=self.key,
            )
            workspace = check_workspace(
                self.state.workspace,
                self.agent.workspace,
                self.key,
                accept=self.runtime.accept_workspace_change,
            )
        except (AgentChanged, SessionFull, WorkspaceChanged) as exc:
            await self.recipes.reject(command, describe(exc, typed=False))
            return False
        if binding is not None:
            self.writer.add(binding[0], binding[1], turn_id=command.turn_id)
            system = instructions_message(binding, self.agent)
            if system is not None:  # the instructions the session's runs use from here on
                self.writer.add("message/system", {"message": system}, turn_id=command.turn_id)
        if workspace is not None:  # bound with the work's first commit, or not at all
            await asyncio.to_thread(Path(workspace["path"]).mkdir, parents=True, exist_ok=True)
            self.writer.add("workspace/bound", workspace, turn_id=command.turn_id)
        self._record_restore(command)
        return True

    def _record_restore(self, command: Command) -> None:
        """Add ``state/restored`` to the work's first commit when the folds this driver
        decides from started from a snapshot (once per load: a reload after a failed commit
        loads, and records, again)."""
        snapshot_seq = self.folds.restored_from
        if snapshot_seq is None:
            return
        self.folds.restored_from = None
        self.writer.add(
            "state/restored",
            {"snapshot_seq": snapshot_seq, "restored_seq": self.state.seq},
            turn_id=command.turn_id,
        )

    def _check_submitted_for(self, command: Command) -> None:
        """``AgentChanged`` if ``command`` was submitted for an agent other than this
        driver's (its fingerprint travels with it), unless this runtime accepts agent
        changes: a worker never runs a task with an agent it was not meant for, not even
        the first task of a session that is not bound yet."""
        wanted = command.data.get("agent")
        if not isinstance(wanted, dict) or self.runtime.accept_agent_change:
            return
        current = self.agent.fingerprint
        if canonical_json(wanted) == canonical_json(current):
            return
        changes = agent_changes(wanted, current) or ["the fingerprint changed"]
        raise AgentChanged(
            f"this task was submitted for another version of agent {wanted.get('agent_id')!r} "
            f"than this runtime executes ({'; '.join(changes)}); nothing was run. Execute it "
            "with the agent it was submitted for (e.g. agentnb worker --agent with that "
            "agent), or let this runtime take sessions over (accept_agent_change=True)",
            changes=changes,
            bound=wanted,
            current=current,
        )

    # -- what the parts of a run use (``RunHost``) ------------------------------------------

    @property
    def auto_resume(self) -> bool | str:
        return self.runtime.auto_resume

    @property
    def limits(self) -> Limits:
        return self.runtime.limits

    def kick(self, key: SessionKey) -> None:
        self.runtime.hand_off(key)

    @property
    def waits_for_children(self) -> bool:
        """Whether the run waits for its sub-agents' children now (it holds no worker slot)."""
        return self.runs.tools.subagents.waiting

    def publish(self, kind: str, turn_id: str, run_id: str, **data: Any) -> None:
        if kind == "status" and "task" not in data:
            # The task's own text rides along, from the folds in memory: an observer that
            # shows it (``agentnb worker``'s lines) need not read the session back.
            turn = self.state.turns.get(turn_id)
            if turn is not None:
                data["task"] = turn.input
        try:
            self.runtime.publish(LiveEvent(kind, turn_id, run_id, data, self.key))
        except Exception:  # live observers are told best effort; the run is not theirs
            log.exception("session %s: a live observer failed", self.key)

    async def refresh_inbox(self) -> None:
        await asyncio.to_thread(self._refresh_inbox)

    def _refresh_inbox(self) -> None:
        with self._inbox_lock:  # the run and its interrupt watcher both read the inbox
            self.folds.refresh_inbox()

    async def reload(self) -> None:
        await asyncio.to_thread(self._reload)

    def reset_stop(self, *, force: bool = False) -> None:
        """A new run starts with no stop requested (unless the driver is closing)."""
        if self.stopping and not force:
            return  # closing: a run that starts now stops at its first boundary
        self.stop.reset()

    def request_stop(self, reason: str, code: str = "interrupted") -> None:
        """Stop the active run at its next boundary, recording ``reason`` (close, time limit)
        and ``code`` as its ``stop_reason``.

        On the runtime's loop. A stop already asked for keeps its first reason.
        """
        self.stop.request(reason, code)

    def abandon_tool(self) -> str | None:
        """End the run without waiting for a sync tool that ignores the stop (``close``).

        Returns what is abandoned (for the caller's report), or None if no tool runs. Its call
        stays uncertain: what it did is unknown.
        """
        return self.stop.abandon_tool()
