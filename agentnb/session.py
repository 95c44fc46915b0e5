"""``Session``: the facade a notebook, script or worker uses to drive one conversation.

Every operation is sync and thread-safe. Commands go to the session's inbox (durable before
the call returns); the runtime's loop executes them. Reads fold the committed log.

Why it is long: ``Session`` is the one public facade of DESIGN §7 (reading, submitting,
steering, answering, lifecycle); each method is short and delegates to the folds, the
inbox and the projections.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from agentnb.agent import check_agent
from agentnb.answers import ToolOutcome
from agentnb.baseline import STATE_FORMAT, STATE_VERSION, ImportReport, convert
from agentnb.blocks import FilePart, ImagePart, part_bytes
from agentnb.children import children_of, descendant_requests
from agentnb.commands import IF_BUSY, Commands, accept_cancel, check_if_busy
from agentnb.errors import (
    AgentChanged,
    AppendConflict,
    IdempotencyConflict,
    InvalidAnswer,
    InvalidBlock,
    InvalidInput,
    LeaseHeld,
    SessionNotFound,
    StorageError,
    UnknownTurn,
)
from agentnb.events import Event, Message, PlanItem, app_type
from agentnb.feedback import check_feedback, live_feedback
from agentnb.folds import ChatFolds, Folds, load_context
from agentnb.history import DEFAULT_REPLAY_LIMIT, HistoryPage, HistoryPages, read_history
from agentnb.holders import holder_alive, holder_of
from agentnb.ids import SessionKey, check_id, new_id
from agentnb.limits import Limits, check_queue, check_room, check_steering, check_text
from agentnb.live import Subscription
from agentnb.log import Inbox, SessionLog
from agentnb.ops.schedules import Schedule, add_schedule, remove_schedule, schedules_of
from agentnb.permissions import agent_digest, find_rule, rules_in_force, shared_rules
from agentnb.projections.chat import interactions_of, tasks_of
from agentnb.projections.decisions import (
    check_reconcile,
    effective_status,
    open_calls,
)
from agentnb.projections.outcomes import receipt_outcome, refused, turn_outcome
from agentnb.projections.queue import (
    blocking_turn,
    parked_error,
    pending_steers,
    queued_commands,
)
from agentnb.projections.state import (
    PROJECTOR_VERSION,
    InboxState,
    LazyMessages,
    SessionState,
    build_context,
)
from agentnb.projections.subagents import key_of
from agentnb.records import (
    Children,
    Holder,
    InputReceipt,
    Inspection,
    Outcome,
    PermissionRule,
    PermissionRules,
    Receipt,
    Requests,
    Task,
    Tasks,
    ToolCallRef,
    Transcript,
    UsageTotals,
)
from agentnb.stores.base import UNSET, Unset, check_labels, check_title
from agentnb.workspace import check_workspace, copy_workspace, workspace_status

if TYPE_CHECKING:
    from agentnb.agent import Agent
    from agentnb.projections.chat import ChatSnapshot, ChatState
    from agentnb.records import SessionInfo
    from agentnb.stores.base import SessionStore, Tombstone

# IF_BUSY, accept_cancel and check_if_busy were defined here before the command client
# (agentnb.commands) took them: they still import from here.
__all__ = ["IF_BUSY", "Session", "accept_cancel", "check_if_busy"]

_MISSING: Any = object()
_HOLDER_RECHECK = 0.5
"""Seconds a waiter trusts a live holder's lease it read, before reading it again."""


def _goes_ahead(inbox: InboxState, turn_id: str, blocking: str) -> bool:
    """Whether the task ``turn_id`` was submitted to go ahead of turn ``blocking``."""
    return any(
        c.kind == "submit" and c.turn_id == turn_id and c.data.get("preempts") == blocking
        for c in inbox.commands.values()
    )


def _check_wait(timeout: object) -> float | None:
    """A waiting call's ``timeout``: None (no limit) or seconds >= 0, else ``InvalidInput``."""
    if timeout is None:
        return None
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not 0 <= timeout < float("inf")
    ):
        raise InvalidInput(f"timeout must be seconds >= 0 or None, got {timeout!r}")
    return float(timeout)


def _still_running(receipt: Receipt | Task) -> KeyboardInterrupt:
    """What a wait cut short by Ctrl-C raises: one line saying the task goes on."""
    return KeyboardInterrupt(
        f"stopped waiting; task {receipt.turn_id} goes on in the background while its "
        "runtime is open (session.interrupt() stops it)"
    )


def _check_text(value: object, what: str) -> str:
    # The one limit every entering text shares (answers and reconcile use it too).
    return check_text(value, what)


class SessionHost(Protocol):
    """What a ``Session`` asks of the runtime that made it: the one seam between them.

    ``Runtime`` is one; a test double or a read-only host can be another.
    """

    store: SessionStore
    agent: Agent
    owner: str
    exporter: Any
    """Something with ``status(key)`` (the live exporter), or None."""
    limits: Limits
    accept_agent_change: bool
    """Whether new work may go on with an agent other than the one the session is bound to."""
    accept_workspace_change: bool
    """Whether new work may rebind the session to another workspace (``nb.Workspace``)."""

    def check_open(self) -> None:
        """Raise ``StorageError`` if the host no longer accepts commands."""

    def kick(self, key: SessionKey, accepted: Event | None = None) -> None:
        """Make sure accepted work of ``key`` gets dispatched (non-blocking); ``accepted``
        is the inbox record just accepted, handed over so that it need not be read back."""

    def executing(self, key: SessionKey) -> bool:
        """Whether this host executes ``key`` right now."""

    def sole_writer(self, key: SessionKey) -> bool:
        """Whether this host holds ``key``'s lease now: every commit of its execution log,
        and every record that settles a turn, is then this host's own (and handed to the
        session's fold by ``feed``)."""

    def failure(self, key: SessionKey) -> str | None:
        """Why the host gave ``key`` up after an error it could not record, if it did."""

    def subscribe(self, maxsize: int = 1000, *, session: SessionKey | None = None) -> Subscription:
        """Live notifications of ``session`` in this process."""

    def stop(self, key: SessionKey, *, timeout: float = 10.0) -> None:
        """Stop dispatching ``key`` and interrupt the run this host executes for it;
        committed data stays."""

    def session(self, session_id: str, user_id: str = "default") -> Session:
        """Get or create another session of the same agent."""

    def session_of(self, key: SessionKey) -> Session:
        """The session of ``key`` (a sub-agent's child session); ``SessionNotFound`` if it
        does not exist, ``InvalidInput`` for an agent the host does not know."""

    def chat_folds(self, key: SessionKey) -> ChatFolds:
        """The one chat fold of ``key`` in this process (shared with its driver)."""

    def delete(self, key: SessionKey, *, force: bool = False, reason: str = "") -> Tombstone:
        """Delete ``key`` and everything of it, leaving a tombstone (``Runtime.delete``)."""

    def archive(self, key: SessionKey) -> SessionInfo:
        """Archive ``key``: readable, refusing new work (``Runtime.archive``)."""

    def unarchive(self, key: SessionKey) -> SessionInfo:
        """Take ``key`` out of the archive (``Runtime.unarchive``)."""

    def schedules_changed(self, key: SessionKey) -> None:
        """A schedule of ``key`` was added or removed here: fire it (``agentnb.ops.schedules``)."""


class _Handle:
    """A ``Session`` as the command client's host (``agentnb.commands.CommandHost``): its
    folds and lock, its agent's tools and checks, its runtime's dispatch."""

    def __init__(self, session: Session) -> None:
        self._session = session
        self.store = session.runtime.store
        self.key = session.key
        self.inbox = session.inbox
        self.lock = session._lock
        self.waiter: Session = session

    def refresh(self) -> tuple[SessionState, InboxState]:
        return self._session._refresh()

    def catch_up(self) -> tuple[SessionState, InboxState]:
        return self._session._catch_up()

    def whole(self) -> tuple[SessionState, InboxState]:
        return self._session._whole()

    def executing(self) -> bool:
        return self._session._executing()

    def tools(self, state: SessionState) -> Callable[[str], Any]:
        return self._session._tool

    def admit(
        self,
        state: SessionState,
        inbox: InboxState,
        *,
        queued: bool = False,
        steering: str | None = None,
    ) -> None:
        self._session._admit(state, inbox, queued=queued, steering=steering)

    def fingerprint(self) -> Any:
        return self._session._submitting_agent()

    def check_open(self) -> None:
        self._session.runtime.check_open()

    def dispatch(self, accepted: Event | None = None) -> None:
        self._session._dispatch(accepted)

    def accepted(self, event: Event) -> None:
        self._session._folds.feed_inbox(event)

    def open_child(self, key: SessionKey) -> Session | None:
        return self._session._open_child(key)


class Session:
    """One continuing conversation. Get it from ``runtime.session(...)``."""

    def __init__(self, runtime: SessionHost, key: SessionKey) -> None:
        self.runtime = runtime
        self.key = key
        self.log = SessionLog(runtime.store, key)
        self.inbox = Inbox(runtime.store, key)
        self._lock = threading.RLock()
        self._folds = Folds(runtime.store, key, limits=runtime.limits)
        self._chat = runtime.chat_folds(key)
        self._holder_until = 0.0
        """Until when (monotonic) a waiter may take the holder it last read as executing."""

    # -- reading -----------------------------------------------------------------------------

    def feed(self, events: Sequence[Event]) -> None:
        """Fold events its runtime just committed for this session: readers need not read
        them back. While a reader holds the session they wait for its next read (the
        committer never blocks on a reader)."""
        self._folds.offer(events)  # a refresh under way takes them instead of reading them
        if not self._lock.acquire(blocking=False):
            return
        try:
            self._take_fed()
        finally:
            self._lock.release()

    def _take_fed(self) -> None:
        """Under the lock: fold the commits fed since the last read, in order."""
        self._folds.take_offered()

    def _refresh(self) -> tuple[SessionState, InboxState]:
        """Fold whatever was committed since the last read (both logs)."""
        with self._lock:
            self._take_fed()
            return self._folds.refresh()

    def _catch_up(self, at_least: int = 0) -> tuple[SessionState, InboxState]:
        """``_refresh`` for a waiter, which reads the store only when it could hold more.

        While this process holds the lease, what settles a turn is committed here and fed
        to the fold; the store object's hints say whether anything else (a command of this
        process not handed over yet) is ahead of the fold. A waiter wakes at every commit,
        so this keeps its wake-ups off the database. ``at_least``: a head the waiter was
        told of (a notification can tell of a commit before its hint is recorded); a fold
        short of it reads the store, so the waiter never spins on a head it cannot see.
        """
        with self._lock:
            self._take_fed()
            folds = self._folds
            if (
                self.runtime.sole_writer(self.key)
                and folds.holds_known()
                and folds.state.seq >= at_least
            ):
                return folds.state, folds.inbox
            return folds.refresh()

    def tasks(self, limit: int | None = None, before: str | None = None) -> Tasks:
        """One task per turn, in submission order, with its status and runs.

        ``limit`` keeps the newest ``limit`` of them, ``before`` only those submitted before
        that task (a turn id): a page. The newest tasks are at hand; older ones of a long
        session are read from the log, so a page of recent tasks costs the same whatever the
        session's length.
        """
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or limit < 1
        ):
            raise InvalidInput(f"limit must be a positive int or None, got {limit!r}")
        if before is not None:
            check_id(before, "before")
        with self._lock:
            state, inbox = self._refresh()
            tasks = tasks_of(state, inbox, executing=self._executing())
            if state.retired_turns and not self._page_at_hand(tasks, limit, before):
                whole, whole_inbox = self._whole()
                tasks = tasks_of(whole, whole_inbox, executing=self._executing())
        if before is not None:
            ids = [t.turn_id for t in tasks]
            if before not in ids:
                raise InvalidInput(f"no task {before!r} in session {self.key}; see tasks()")
            tasks = tasks[: ids.index(before)]
        tasks = tasks if limit is None else tasks[-limit:]
        return Tasks(dataclasses.replace(t, _session=self) for t in tasks)

    @staticmethod
    def _page_at_hand(tasks: list[Task], limit: int | None, before: str | None) -> bool:
        """Whether the kept tasks hold the whole page asked for."""
        if limit is None:
            return False
        ids = [t.turn_id for t in tasks]
        end = ids.index(before) if before in ids else (len(ids) if before is None else -1)
        return end >= limit

    def _whole(self) -> tuple[SessionState, InboxState]:
        """Both folds over the whole history, nothing retired (reads every event once)."""
        return Folds(self.runtime.store, self.key, whole=True).refresh()

    def task(self, command_id: str) -> Task:
        """The task a submit's ``command_id`` (or a turn id) created; ``task(...).wait()``
        observes the whole turn."""
        with self._lock:
            state, inbox = self._refresh()
            if command_id not in inbox.commands and state.retired_turns:
                state, inbox = self._whole()
            command = inbox.commands.get(command_id)
            turn_id = command.turn_id if command else command_id
            for task in tasks_of(state, inbox, executing=self._executing()):
                if task.turn_id == turn_id:
                    return dataclasses.replace(task, _session=self)
        raise InvalidInput(f"no task for {command_id!r} in session {self.key}")

    def block_bytes(self, sha256: str) -> tuple[bytes, ImagePart | FilePart]:
        """The bytes of an image or file block of this session's results, and its part
        (mime, name); ``InvalidBlock`` if no result of this session holds such a block (a
        digest of another session's bytes reads nothing here)."""
        for message in self.transcript().messages:
            for part in message.blocks:
                if isinstance(part, ImagePart | FilePart) and part.sha256 == sha256:
                    return part_bytes(part, self.runtime.store.get_blob), part
        raise InvalidBlock(
            f"session {self.key.session_id} has no image or file block {sha256!r}; the "
            "digests are in the blocks of its messages (transcript())"
        )

    def transcript(self) -> Transcript:
        """The complete committed messages (user, assistant, tool) as of one seq."""
        with self._lock:
            state, _ = self._refresh()
            labels = {"steer": "steer", "inject": "material"}
            sources = {
                f"msg_{input_id}": labels[kind]
                for input_id, received in state.received_inputs.items()
                if (kind := str(received.get("kind"))) in labels
            }
            if state.compactions:  # the context lost its oldest messages; the log has them
                messages = load_context(self.runtime.store, self.key, state.seq, transcript=True)
                return Transcript(tuple(messages), state.seq, sources)
            return Transcript(tuple(state.context), state.seq, sources)

    def snapshot(self) -> ChatSnapshot:
        """One consistent read at one watermark: chat items, messages, pending, tasks, cursor.

        Items include the unfinished text of a reply still streaming and tool cards with
        their arguments, progress and results; ``cursor`` is the seq they cover.
        """
        with self._lock:
            head = self.log.head()
            inbox = self._folds.refresh_inbox()  # the chat fold reads the log itself
            return self._chat.snapshot(head, inbox, executing=self._executing())  # type: ignore[no-any-return]

    def history(
        self,
        limit: int = 100,
        after: str | None = None,
        *,
        replay_limit: int = DEFAULT_REPLAY_LIMIT,
    ) -> HistoryPage:
        """One bounded page of committed messages, oldest first (see ``HistoryPage``).

        ``after`` is the ``next_cursor`` of the previous page: opaque, signed, bound to this
        session, and pinned to the first page's high-water mark. ``replay_limit`` bounds the
        events one page may examine (``HistoryTooLarge`` beyond it).
        """
        return read_history(self.runtime.store, self.key, limit, after, replay_limit=replay_limit)

    def history_pages(
        self, limit: int = 100, *, replay_limit: int = DEFAULT_REPLAY_LIMIT
    ) -> HistoryPages:
        """Every page of the history, lazily; the walk sees the log as of its first page."""
        return HistoryPages(self.runtime.store, self.key, limit, replay_limit=replay_limit)

    def inspect(self) -> Inspection:
        """What the runtime would do next, read-only: the calls running or uncertain, the
        model, tools, instructions and messages the next model call uses."""
        with self._lock:
            state, inbox = self._refresh()
            executing = self._executing()
            running, uncertain = (
                tuple(
                    ToolCallRef(c.call_id, c.name, dict(c.arguments), c.turn_id, c.run_id)
                    for c in calls
                )
                for calls in open_calls(state, executing=executing)
            )
            latest = state.latest_turn
            interrupted = (
                latest.turn_id
                if latest is not None
                and effective_status(state, latest, executing=executing) == "interrupted"
                else None
            )
            # Material injected or steering accepted but not yet applied joins the next call.
            waiting = [c for c in inbox.injects() if c.command_id not in state.received_inputs]
            if latest is not None and latest.status not in {"completed", "cancelled"}:
                waiting += [
                    c
                    for c in inbox.steers_for(latest.turn_id)
                    if c.command_id not in state.received_inputs
                ]
            extra = [
                Message(
                    id=f"msg_{c.command_id}", role="user", text=c.input or "", turn_id=c.turn_id
                )
                for c in sorted(waiting, key=lambda c: c.seq)
            ]
            so_far = state.messages_through(state.seq)
            instructions = self.runtime.agent.instructions
            next_context = LazyMessages(lambda: build_context(instructions, [*so_far, *extra]))
            active = (state.active_run,) if state.active_run and executing else ()
            exporter = self.runtime.exporter
            blocking = blocking_turn(state, inbox, executing=executing)
            agent = self.runtime.agent
            tools = [t.spec() for t in agent.tools]
            return Inspection(
                state.seq,
                uncertain,
                active,
                interrupted,
                next_context,
                exporter.status(self.key) if exporter is not None else (),
                blocked_by=blocking[0].turn_id if blocking else None,
                blocked_status=blocking[1] if blocking else None,
                holder=self._holder(),
                context_window=agent.context_window or agent.model.context_window,
                usage=UsageTotals.of(state.usage),
                running_tool_calls=running,
                model=agent.model.name,
                tools=tuple(tools),
                instructions=instructions,
                children=tuple(
                    children_of(
                        self.runtime.store,
                        [c for c in state.children.values() if c.get("status") == "running"],
                    )
                ),
                workspace=workspace_status(state.workspace, state.workspace_checkpoint),
                _tokens=functools.cache(lambda: agent.model.count_tokens(next_context, tools)),
            )

    def _holder(self) -> Holder | None:
        store = self.runtime.store
        lease = store.current_lease(self.key)
        if lease is None:
            return None
        return holder_of(
            lease.owner,
            lease.epoch,
            lease.expires_at - store.clock.now(),
            local=lease.owner == self.runtime.owner,
        )

    # -- commands ----------------------------------------------------------------------------

    @functools.cached_property
    def _commands(self) -> Commands:
        """The command client the verbs below write with (``agentnb.commands``)."""
        return Commands(_Handle(self))

    def submit(
        self,
        input: str,
        key: str | None = None,
        *,
        timeout: float | None = None,
        if_busy: str = "queue",
    ) -> Receipt:
        """Durably accept a new task and return at once; it runs in the background.

        ``timeout`` bounds how long the task executes (over all its runs; waiting for a person
        does not count); past it the run is interrupted with the reason recorded. The
        default is the agent's ``max_turn_seconds``.

        ``if_busy`` says what to do when the task would not start at once (a turn runs, a
        task waits to start, or the queue is parked behind a turn): ``"queue"`` (the
        default) queues it; ``"reject"`` raises ``SessionBusy`` naming that turn, writing
        nothing; ``"interrupt"`` stops the running turn (it ends ``interrupted``, never
        cancelled: its work so far, its checkpoint and its steering are kept, and the new
        task sees its messages) and starts the new task next, ahead of it - from then on
        that turn is set aside (``resume`` refuses it, naming the new task; ``cancel``
        closes it); ``"steer"`` steers the running turn (or the task
        about to start) instead, as ``send`` does. With a policy other than ``"queue"`` the
        receipt's ``disposition`` says what happened (``started``, ``queued``, ``steered``).
        """
        return self._commands.submit(input, key, timeout=timeout, if_busy=if_busy)

    def _submitting_agent(self) -> Any:
        """The fingerprint of the agent a task is submitted for: it travels with the command,
        so a runtime executing another agent (a worker) refuses the task, even a session's
        first, before it runs anything (unless it accepts agent changes)."""
        return self.runtime.agent.fingerprint

    def send(self, input: str) -> Receipt:
        """Steer the running turn, or start / queue a new one; ``disposition`` says which.

        Only a run with a live executor is steered: a run whose process stopped is not
        running, and the input becomes a new task (queued behind that interrupted turn).

        A task accepted and not started yet counts as the running turn when it is the one to
        start next (nothing runs, nothing else waits, the queue is not parked): a ``send``
        right after another ``send`` started a turn steers that turn (applied at its first
        step) instead of queueing a second one (Everruns: "if a turn is active, the message
        steers that turn"); the receipt (``disposition="steered"``, ``run_id`` None) observes
        that turn's first run.

        Refused like ``steer`` or ``submit`` (``QueueFull``, ``AgentChanged``, ...) by the
        way it would go: a send that would steer never falls back to queueing a task.
        """
        return self._commands.send(input)

    def run(self, input: str, timeout: float | None = None) -> Outcome:
        """``submit`` then ``wait``: the same log, not a separate mode."""
        return self.wait(self.submit(input), timeout)

    def steer(self, input: str, task: str | None = None) -> InputReceipt:
        """Guidance for the running turn, applied at its next step (never lost).

        ``NotRunning`` when nothing runs, when ``task`` is not the running turn, or when the
        open run has no live executor (its process stopped: ``resume`` continues it).
        """
        return self._commands.steer(input, task)

    def inject(self, material: str) -> InputReceipt:
        """Store reference material; applied exactly once at the next step of any run."""
        return self._commands.inject(material)

    def _admit(
        self,
        state: SessionState,
        inbox: InboxState,
        *,
        queued: bool = False,
        steering: str | None = None,
    ) -> None:
        """Refuse new work before anything is written, naming why.

        ``AgentChanged`` when the session is bound to an agent other than this runtime's
        (unless it accepts agent changes); ``SessionFull`` at the session's cap; with
        ``queued``, ``QueueFull`` when the command queue is full; with ``steering`` (a turn
        id), when that turn's steering queue is. The driver checks the agent and the cap again
        when it starts the work. The check and the accept share this handle's lock, so the
        queue limits hold against the commands of one process; handles in two processes
        accepting at the very same moment may each take the last free place (the inbox
        accepts without a condition), so a queue can pass its limit by one per such writer.
        """
        runtime = self.runtime
        check_agent(
            state.agent, runtime.agent, accept=runtime.accept_agent_change, session=self.key
        )
        check_workspace(
            state.workspace,
            runtime.agent.workspace,
            self.key,
            accept=runtime.accept_workspace_change,
        )
        limits = runtime.limits
        nbytes = 0
        if limits.max_session_bytes is not None:
            record = runtime.store.get_session(self.key)
            nbytes = record.bytes if record is not None else 0
        check_room(
            state.seq,
            nbytes,
            stage="start",
            limits=limits,
            session=self.key,
        )
        if queued:
            check_queue(queued_commands(state, inbox), limits, session=self.key)
        if steering is not None:
            check_steering(pending_steers(state, inbox, steering), limits, turn=steering)

    def agent_change(self) -> list[str] | None:
        """What new work would be refused for, before anyone asks: the differences between
        this runtime's agent and the one the session is bound to (``AgentChanged``'s
        ``changes``), or None when new work may go on (not bound yet, the same agent, or a
        runtime that accepts agent changes). Nothing is written."""
        state, _ = self._refresh()
        try:
            check_agent(
                state.agent,
                self.runtime.agent,
                accept=self.runtime.accept_agent_change,
                session=self.key,
            )
        except AgentChanged as exc:
            return list(exc.changes)
        return None

    # -- people in the loop, interrupts, recovery ------------------------------------------

    def chat_copy(self) -> tuple[ChatState, InboxState]:
        """Private copies of the chat fold at the log's head and of the inbox fold at its
        head, for a reader that folds on by itself (the ``SessionView``)."""
        chat: ChatState = self._chat.copy(self.log.head())
        with self._lock:
            return chat, InboxState.load(self._folds.refresh_inbox().dump())

    def shared_chat(self) -> tuple[ChatFolds, InboxState]:
        """The session's one chat fold in this process, which the commit bus feeds (read
        it with ``current(seq)`` under its ``lock``; never fold on it), and a private copy
        of the inbox fold at its head: for the readers that follow the session (the
        ``SessionView``, the server's page streams)."""
        self._chat.current(self.log.head())
        with self._lock:
            return self._chat, InboxState.load(self._folds.refresh_inbox().dump())

    def executing(self) -> bool:
        """Whether some runtime (here or elsewhere) holds the lease and executes now (or this
        runtime was just asked to, and its driver has not looked yet)."""
        return self._executing()

    def _executing(self, *, recent: bool = False) -> bool:
        """Whether some runtime (here or elsewhere) holds the lease and executes now.

        A lease whose holder is known to be dead (same host, process gone) does not count.
        ``recent``: a live holder read less than ``_HOLDER_RECHECK`` seconds ago counts
        without a read (a waiter woken at each of a worker's commits). Only a yes is
        reused: a stale one makes a waiter wait a moment longer for a holder that died,
        never report a running turn as cut off.
        """
        if self.runtime.executing(self.key):
            return True
        now = time.monotonic()
        if recent and now < self._holder_until:
            return True
        lease = self.runtime.store.current_lease(self.key)
        alive = lease is not None and holder_alive(lease.owner) is not False
        self._holder_until = now + _HOLDER_RECHECK if alive else 0.0
        return alive

    def _tool(self, name: str) -> Any:
        return self.runtime.agent.tool_named(name)

    def pending(self) -> Requests:
        """Open requests for a person: approvals, external results, questions.

        Its sub-agents' open requests too (their children's, recursively), each with the
        ``path`` of agents it came through and the ``session`` it lives in: answer them
        here (``respond`` routes them) or in that session.
        """
        with self._lock:
            state, _ = self._refresh()
            own = interactions_of(state)
        return Requests(own | descendant_requests(state, self._open_child))

    def _open_child(self, key: SessionKey) -> Session | None:
        try:
            return self.runtime.session_of(key)
        except (SessionNotFound, InvalidInput):
            return None

    def children(self, turn_id: str | None = None) -> Children:
        """The sub-agent calls of this session (of turn ``turn_id`` if given), oldest first,
        each with its child session's key and where the child's task stands now."""
        if turn_id is not None:
            check_id(turn_id, "turn_id")
        with self._lock:
            state, _ = self._refresh()
            if turn_id is not None and turn_id not in state.turns and state.retired_turns:
                state, _ = self._whole()
        return Children(children_of(self.runtime.store, state.children_of(turn_id)))

    def child(self, call_id: str) -> Session:
        """The child session of the sub-agent call ``call_id`` (see ``children()``)."""
        check_id(call_id, "call_id")
        with self._lock:
            state, _ = self._refresh()
            call = state.children.get(call_id)
            if call is None and state.retired_turns:
                call = self._whole()[0].children.get(call_id)
        if call is None:
            raise InvalidInput(
                f"no sub-agent call {call_id!r} in session {self.key}; see session.children()"
            )
        return self.runtime.session_of(key_of(call["child"]))

    def plan(self) -> list[PlanItem]:
        """The plan the model keeps with the built-in ``nb.todo`` tool, step by step (empty
        until it wrote one)."""
        with self._lock:
            state, _ = self._refresh()
            return [PlanItem.model_validate(item) for item in state.plan]

    def app_state(self, name: str) -> dict[str, Any]:
        """The state the reducer of application event type ``name`` folded from this
        session's log (``register_event_type(name, reducer=...)``): ``{}`` before its first
        event. A copy: changing it changes nothing. ``InvalidInput`` if ``name`` has no
        reducer registered here; ``ReducerFailed`` if a required event could not be folded.
        """
        registered = app_type(name) if isinstance(name, str) else None
        if registered is None or registered.reducer is None:
            raise InvalidInput(
                f"no reducer is registered for event type {name!r}; call "
                "agentnb.register_event_type(name, reducer=fn) before opening the session"
            )
        with self._lock:
            state, _ = self._refresh()
            if name not in state.app.reducers:  # folded before the reducer was registered
                state, _ = self._whole()
            return state.app.get(name)

    def respond(self, request_id: str | Mapping[str, object], answer: object = _MISSING) -> Receipt:
        """Answer pending requests and continue their turn in a new run (or in the run that
        asked, while it still waits for them in place: ``Agent(wait_inline=)``).

        ``respond(request_id, answer)`` or ``respond({request_id: answer, ...})``. Nothing is
        written when an answer does not fit (``InvalidAnswer``); re-sending the same answers
        before they are applied returns the same receipt.

        A sub-agent's request (``pending()`` shows them with their ``path``) is routed to the
        child session that asked, and this session's turn is woken for it: the receipt
        observes the run of this session that the wake-up starts (it waits for the child's
        turn and goes on), or, when none starts (a request of this session's own is still
        open), this session's latest run as it stands. Answer one session's requests at a
        time.
        """
        if isinstance(request_id, Mapping):
            if answer is not _MISSING:
                raise InvalidAnswer(
                    "pass either respond(request_id, answer) or "
                    "respond({request_id: answer}), not both"
                )
            answers = dict(request_id)
        else:
            if answer is _MISSING:
                raise InvalidAnswer("respond(request_id, answer) needs the answer")
            answers = {request_id: answer}
        return self._commands.respond(answers)

    def schedule(
        self,
        text: str,
        *,
        cron: str | None = None,
        every: float | timedelta | None = None,
        at: datetime | str | None = None,
        tz: str = "UTC",
        overlap: str = "skip",
        key: str | None = None,
        catch_up: str = "one",
    ) -> Schedule:
        """Submit ``text`` as a task at each due time: ``cron`` (an expression read in
        ``tz``), ``every`` seconds from now, or once ``at`` a time (exactly one of them).

        Durable when it returns (``schedule/added`` in the inbox). Each due time is fired
        once, across restarts and processes, by a runtime made with ``schedules=True`` (or
        this one, which starts firing now), as a submit whose key derives from the schedule
        and the due time. ``overlap`` decides a firing while a turn runs: ``"skip"`` it,
        ``"queue"`` the task behind it, or ``"steer"`` the running turn with the text.
        ``catch_up`` decides due times missed while no runtime ran: ``"one"`` (the latest),
        ``"all"`` or ``"none"``. ``key`` makes the call idempotent (the same key and
        schedule return the same ``Schedule``; another schedule, ``IdempotencyConflict``).
        Bad values raise ``InvalidInput`` naming the field (``agentnb.ops.schedules``).
        """
        self.runtime.check_open()
        found = add_schedule(
            self.runtime.store,
            self.key,
            text,
            cron=cron,
            every=every,
            at=at,
            tz=tz,
            overlap=overlap,
            catch_up=catch_up,
            idempotency_key=key,
        )
        self.runtime.schedules_changed(self.key)
        return found

    def schedules(self) -> list[Schedule]:
        """The session's active schedules, with their last and next due times."""
        return schedules_of(self.runtime.store, self.key)

    def unschedule(self, schedule_id: str) -> None:
        """Remove a schedule: it fires no more (``schedule/removed``). ``InvalidInput`` for
        one that is not active."""
        self.runtime.check_open()
        remove_schedule(self.runtime.store, self.key, schedule_id)
        self.runtime.schedules_changed(self.key)

    def permissions(self) -> PermissionRules:
        """The permission rules in force for this session's calls, oldest first: those its
        approvals remembered (``Answer.approve(remember=...)``) and the agent-wide ones
        other sessions of this agent and user granted, under the agent this runtime runs
        (a rule never outlives an agent change, nor the deletion of its session)."""
        with self._lock:
            state, inbox = self._refresh()
        digest = agent_digest(self.runtime.agent.fingerprint)
        found = [
            (self.key, rule)
            for rule in rules_in_force(state, inbox).values()
            if rule["agent"] == digest
        ]
        found += shared_rules(self.runtime.store, self.key, digest)
        return PermissionRules(
            PermissionRule(
                rule["rule_id"],
                rule["scope"],
                rule["tool"],
                dict(rule.get("match") or {}),
                key.session_id,
                rule.get("request_id"),
            )
            for key, rule in found
        )

    def revoke(self, rule_id: str) -> None:
        """Remove a permission rule (one ``permissions()`` lists): calls it allowed ask
        again from now on.

        Durable when it returns: a ``revoke`` command in the inbox of the session that holds
        the rule, which every runtime honours from its acceptance; the runtime executing that
        session records ``permission/changed`` when it next dispatches it. ``InvalidInput``
        for a rule that is not in force (unknown, or revoked already).
        """
        check_id(rule_id, "rule_id")
        self.runtime.check_open()
        with self._lock:
            state, inbox = self._refresh()
        holder = find_rule(self.runtime.store, self.key, state, inbox, rule_id)
        if holder is None:
            raise InvalidInput(
                f"there is no permission rule {rule_id!r} in force for session {self.key}; "
                "see session.permissions()"
            )
        Inbox(self.runtime.store, holder).accept("revoke", data={"rule_id": rule_id})
        if holder == self.key:
            self.start()
        else:
            self.runtime.session(holder.session_id, user_id=holder.user_id).start()

    # -- feedback ----------------------------------------------------------------------------

    def feedback(
        self,
        turn_id: str,
        *,
        score: float | None = None,
        label: str | None = None,
        comment: str | None = None,
        by: str | None = None,
        timeout: float = 30.0,
    ) -> str:
        """Rate a turn's answer: thumbs are ``score=1`` (up) and ``score=0`` (down); a
        ``label`` tags it (``"negative"`` marks it bad like a score of 0 or below), a
        ``comment`` says why, ``by`` who. Returns the feedback id (``retract_feedback``).

        A ``feedback`` command in the inbox (durable when it is accepted); the runtime that
        executes the session records ``feedback/added`` for it, and this returns once that
        is committed, or at once while a turn runs (it is recorded when that run ends).
        ``UnknownTurn`` for a turn that is not this session's, ``SessionDeleted`` for a
        deleted session, ``InvalidInput`` for a bad rating: nothing is written then.
        """
        check_id(turn_id, "turn_id")
        fields = check_feedback(score=score, label=label, comment=comment, by=by)
        _check_wait(timeout)
        self.runtime.check_open()
        with self._lock:
            state, _ = self._refresh()
            if turn_id not in state.turns and state.retired_turns:
                state, _ = self._whole()
        if turn_id not in state.turns:
            raise UnknownTurn(
                f"turn {turn_id!r} is not a turn of session {self.key}; rate a turn of this "
                "session (see session.tasks()), or the session that holds it"
            )
        feedback_id = new_id("fb")
        data = {"action": "added", "feedback_id": feedback_id, "turn_id": turn_id, **fields}
        self._feedback_command(data, state, timeout)
        return feedback_id

    def retract_feedback(self, feedback_id: str, *, timeout: float = 30.0) -> None:
        """Take back a rating ``feedback`` returned (``feedback/removed``): it no longer
        counts in datasets and exports. ``InvalidInput`` for an id that is not a rating of
        this session in force (unknown, or retracted already); nothing is written then."""
        check_id(feedback_id, "feedback_id")
        _check_wait(timeout)
        self.runtime.check_open()
        with self._lock:
            state, _ = self._refresh()
        rating = live_feedback(self.log.scan()).get(feedback_id)
        if rating is None:
            raise InvalidInput(
                f"there is no feedback {feedback_id!r} in force in session {self.key} "
                "(unknown, or retracted already)"
            )
        data = {"action": "removed", "feedback_id": feedback_id, "turn_id": rating.turn_id}
        self._feedback_command(data, state, timeout)

    def _feedback_command(self, data: dict[str, Any], state: SessionState, timeout: float) -> None:
        event, _ = self.inbox.accept("feedback", data=data)
        self.start()
        if state.active_run is None:
            self._await_handled(event.payload["command_id"], timeout)

    def interrupt(self, run_id: str | None = None) -> bool:
        """Ask the running run to stop at its next chunk or step boundary.

        False when nothing runs; with ``run_id``, ``NotRunning`` if that run is not active.
        """
        return self._commands.interrupt(run_id)

    def resume(self, turn_id: str, *, uncertain: str = "refuse") -> Receipt:
        """Continue the latest unfinished turn in a new run (same turn id).

        Refused (``CannotResume``) for a turn that is completed, cancelled, running, not the
        latest unfinished one, waiting for answers, or already being continued (a resume of
        it is queued). Tool calls whose outcome is unknown (their process stopped mid-call)
        block it with ``UncertainToolCalls`` unless their tool is idempotent (then they
        simply run again) or ``uncertain="unknown"``: the new run then records each as
        ``tool/result`` with status ``unknown`` and the reason, tells the model it was not
        run again, and goes on (Everruns' ``resume_interrupted_turn``). The default,
        ``"refuse"``, waits for a person to ``reconcile`` them.
        """
        return self._commands.resume(turn_id, uncertain=uncertain)

    def cancel(self, turn_id: str, timeout: float = 30.0) -> None:
        """End a queued, running, suspended or interrupted turn; idempotent.

        A running turn is interrupted first (cooperatively, at its next boundary). Pending
        requests of the turn are closed and its unapplied steering is discarded. Returns once
        the cancellation is committed.
        """
        check_id(turn_id, "turn_id")
        _check_wait(timeout)
        command_id = self._commands.cancel(turn_id)
        if command_id is not None:
            self._await_handled(command_id, timeout)

    def reconcile(
        self, outcomes: Mapping[str, ToolOutcome], reason: str, timeout: float = 30.0
    ) -> None:
        """Record verified outcomes of uncertain tool calls without running them again.

        ``outcomes`` must cover exactly the uncertain calls (``inspect()``); ``reason`` says
        who checked what. Returns once recorded; then ``resume`` can continue the turn.
        """
        _check_wait(timeout)
        self.runtime.check_open()
        with self._lock:
            state, _ = self._refresh()
            checked = check_reconcile(state, outcomes, reason, executing=self._executing())
            turn_id = next(iter(checked.values()))["turn_id"]
            event, _ = self.inbox.accept(
                "reconcile", turn_id=turn_id, data={"outcomes": checked, "reason": reason}
            )
        self.start()
        self._await_handled(event.payload["command_id"], timeout)

    def _await_handled(self, command_id: str, timeout: float) -> None:
        deadline = time.monotonic() + (_check_wait(timeout) or 0.0)
        while True:
            with self._lock:
                state, inbox = self._refresh()
                if command_id in inbox.rejected:
                    raise InvalidInput(f"the runtime refused it: {inbox.rejected[command_id]}")
                if command_id in state.handled:
                    return
                seq = state.seq
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(
                    f"command {command_id} was accepted but not carried out "
                    f"within {timeout}s; is a runtime executing this session?"
                )
            self.runtime.store.wait_for_head(self.key, seq, min(0.5, remaining))

    # -- moving state between sessions ------------------------------------------------------

    def compact(self, timeout: float = 30.0) -> None:
        """Compact the working context now (between runs), with the agent's compactor.

        An inbox command: durable and ordered with the others. Returns once it is carried
        out; the log keeps every original message (``transcript()``). ``InvalidInput`` when
        the agent has no ``compaction=``.
        """
        _check_wait(timeout)
        if self.runtime.agent.compaction is None:
            raise InvalidInput(
                "this agent has no compactor: create it with "
                "compaction=nb.SummaryCompactor(...) or nb.TrimCompactor(...)"
            )
        self.runtime.check_open()
        with self._lock:
            self._admit(*self._refresh())
        event, _ = self.inbox.accept("compact")
        self.start()
        self._await_handled(event.payload["command_id"], timeout)

    def export_state(self) -> dict[str, Any]:
        """The conversation state at a quiescent point (no run, request, uncertain call or
        sub-agent at work).

        Returns JSON-ready data for ``import_baseline`` (``agentnb.baseline``): the model
        context, the plan and the permission rules granted in this session; history is not
        included.
        """
        with self._lock:
            state, inbox = self._refresh()
            problems = []
            if state.active_run is not None:
                problems.append("a run is active")
            if state.pending:
                problems.append(f"{len(state.pending)} request(s) wait for answers")
            running, uncertain = open_calls(state, executing=self._executing())
            if running:
                problems.append(f"{len(running)} tool call(s) are running")
            if uncertain:
                problems.append("tool calls have unknown outcomes (reconcile them)")
            live = {c.call_id for c in running}
            waiting = [
                c
                for c in state.children.values()
                if c.get("status") == "running" and c["call_id"] not in live
            ]
            if waiting:
                problems.append(
                    f"{len(waiting)} sub-agent call(s) wait for their child sessions "
                    "(see children())"
                )
            if problems:
                raise InvalidInput(f"session {self.key} is not quiescent: {'; '.join(problems)}")
            messages = [m.model_dump(mode="json") for m in state.context]
            rules = sorted(rules_in_force(state, inbox).values(), key=lambda r: r["rule_id"])
            return {
                "format": STATE_FORMAT,
                "version": STATE_VERSION,
                "messages": messages,
                "plan": [dict(item) for item in state.plan],
                "permissions": [dict(rule) for rule in rules],
                "source": str(self.key),
                "source_seq": state.seq,
            }

    def import_baseline(
        self,
        state: Mapping[str, Any] | Sequence[Mapping[str, Any]],
        *,
        source: str | None = None,
        source_version: int | str | None = None,
    ) -> ImportReport:
        """Start this (empty) session from ``state`` with one ``migration/baseline`` event.

        ``state`` is what ``export_state`` returned (its plan and session permission rules
        come along), OpenAI chat messages, or an AgentScope-style ``AgentState``;
        ``agentnb.baseline`` says how each is converted. ``source`` is the provenance
        recorded on the baseline (by default the exported state's own); when it is or starts
        with ``agentnb``, ``openai`` or ``agentscope`` it also names the shape, which is
        otherwise told from the state itself. ``source_version`` is the source's version,
        recorded as given. The report lists what the import did not keep.

        Importing the same state again is a no-op (``imported=False``); an existing history
        raises ``InvalidInput``, and so does a near miss of a shape, naming the field.
        """
        if source is not None:
            source = check_id(source, "source")
        if source_version is not None and (
            isinstance(source_version, bool) or not isinstance(source_version, int | str)
        ):
            raise InvalidInput(
                f"source_version must be an int or a str, got {type(source_version).__name__}"
            )
        baseline = convert(state, source=source)
        digest = baseline.digest
        if source is None:
            given = baseline.state.get("source")
            source = given if isinstance(given, str) else None
        dropped = tuple(f"{d.path}: {d.reason}" for d in baseline.dropped)
        event = Event.create(
            "migration/baseline",
            {
                "state": baseline.state,
                "source": source,
                "source_version": (
                    source_version
                    if source_version is not None or baseline.format != "agentnb"
                    else PROJECTOR_VERSION
                ),
                "source_hash": digest,
                "format": baseline.format,
                "dropped": dropped,
            },
            event_id=f"evt_baseline_{digest[:32]}",
            occurred_at=datetime.fromtimestamp(0, UTC),
        )
        report = ImportReport(
            baseline.format, source, len(baseline.state["messages"]), baseline.dropped
        )
        not_empty = InvalidInput(
            f"session {self.key} is not empty; import a baseline only into a new session"
        )
        if self.log.head() > 0:
            first = self.log.read_after(0, 1)[0]
            if first.event_id == event.event_id:
                return dataclasses.replace(report, imported=False)  # imported already
            raise not_empty
        try:
            self.log.append([event], expected_seq=0, batch_id=f"baseline-{digest[:40]}")
        except (AppendConflict, IdempotencyConflict, LeaseHeld):
            raise not_empty from None
        return report

    def fork(self, new_session_id: str) -> Session:
        """A new session continuing from this one's current state; history is not copied."""
        state = self.export_state()
        target = self.runtime.session(new_session_id, user_id=self.key.user_id)
        target.import_baseline(state)
        self._fork_workspace(target)
        return target

    def _fork_workspace(self, target: Session) -> None:
        """Copy this session's working files, as they stand, to where ``target``'s
        workspace will be bound (its first run binds it there)."""
        bound = self._refresh()[0].workspace
        workspace = self.runtime.agent.workspace
        if bound is None or workspace is None:
            return
        copy_workspace(Path(bound["path"]), workspace.path_for(target.key))

    def start(self) -> None:
        """Dispatch accepted queued work (needed after a restart; submit calls it)."""
        self._dispatch()

    def _dispatch(self, accepted: Event | None = None) -> None:
        """``start``, handing the inbox record just ``accepted`` to the runtime's driver."""
        self.runtime.check_open()
        self.runtime.kick(self.key, accepted)

    # -- waiting -----------------------------------------------------------------------------

    def _outcome(
        self, watched: Receipt | Task, state: SessionState, inbox: InboxState, *, executing: bool
    ) -> Outcome | None:
        """How what ``watched`` observes stands, or None while it is queued or runs.

        A receipt observes the run its command started (a continuation has its own
        receipt); a task observes its whole turn (``agentnb.projections.outcomes``).
        """
        if isinstance(watched, Task):
            return turn_outcome(
                state, inbox, watched.turn_id, watched.command_id, executing=executing
            )
        run_id = watched.run_id if watched.disposition == "steered" else None
        if watched.disposition == "steered" and run_id is None:
            # It steered a task that had not started: it observes that task's first run.
            turn = state.turns.get(watched.turn_id)
            if turn is None or not turn.run_ids:
                submit = next(
                    (
                        c
                        for c in inbox.commands.values()
                        if c.kind == "submit" and c.turn_id == watched.turn_id
                    ),
                    None,
                )
                return refused(inbox, submit.command_id, watched.turn_id) if submit else None
            run_id = turn.run_ids[0]
        return receipt_outcome(
            state, inbox, watched.command_id, watched.turn_id, run_id, executing=executing
        )

    def _settled(self, watched: Receipt | Task, at_least: int = 0) -> tuple[Outcome | None, int]:
        """(outcome or None, the seq it was decided at); ``Parked`` if it cannot move.
        ``at_least``: the head the waiter last woke to (see ``_catch_up``)."""
        # Whether anyone executes is read before and after the state: a run seen open with
        # nobody executing on both sides of the read was really cut off.
        before = self._executing(recent=True)
        state, inbox = self._catch_up(at_least)
        executing = before or self._executing()
        command_id = watched.command_id
        if (
            state.retired_turns
            and watched.turn_id not in state.turns
            and (command_id is None or command_id not in inbox.commands)
        ):
            state, inbox = self._whole()  # a receipt of a turn retired from the folds
        outcome = self._outcome(watched, state, inbox, executing=True)  # as committed
        if outcome is None and not executing:
            failure = self.runtime.failure(self.key)
            if failure is not None:
                raise StorageError(
                    f"the runtime stopped executing session {self.key}: {failure}; fix the "
                    "store, then call session.start() (an open run is closed as interrupted)"
                )
            turn = state.turns.get(watched.turn_id)
            blocking = blocking_turn(state, inbox, executing=False)
            if (
                blocking is not None
                and blocking[1] in ("interrupted", "failed")
                and _goes_ahead(inbox, watched.turn_id, blocking[0].turn_id)
            ):
                blocking = None  # if_busy="interrupt": it goes ahead of the turn it stopped
            if (turn is None or not turn.run_ids) and blocking is not None:
                raise parked_error(state, watched.turn_id, *blocking)
            outcome = self._outcome(watched, state, inbox, executing=False)  # cut off?
        return outcome, state.seq

    def wait(self, receipt: Receipt | Task, timeout: float | None = None) -> Outcome:
        """Block until what ``receipt`` observes settles; observes only, never acts.

        A ``Receipt`` observes the run its command started: returns when that run
        completes, suspends, is interrupted, fails or is cancelled, or at once when the
        command was refused (``rejected``, with the reason). ``respond`` and ``resume``
        return new receipts that observe the runs they start. A ``Task`` (``tasks()``,
        ``task(...)``) observes its whole turn: it returns once the turn settles and nothing
        accepted for it (an answer, a resume, a cancel) is still to carry it on. Raises
        ``Parked`` when the task waits in the queue behind a turn that only a person can
        move, naming that turn. Ctrl-C (or Kernel → Interrupt) while it waits raises a
        one-line ``KeyboardInterrupt`` from here: the task goes on, and
        ``session.interrupt()`` stops it.
        """
        if not isinstance(receipt, Receipt | Task):
            raise InvalidInput(f"wait() takes a Receipt or a Task, got {type(receipt).__name__}")
        timeout = _check_wait(timeout)
        try:
            return self._wait(receipt, timeout)
        except KeyboardInterrupt:
            # Kernel -> Interrupt (Ctrl-C) stops the waiting, not the task: say so, briefly.
            raise _still_running(receipt) from None

    def _wait(self, receipt: Receipt | Task, timeout: float | None) -> Outcome:
        deadline = None if timeout is None else time.monotonic() + timeout
        head = 0
        while True:
            with self._lock:
                outcome, seq = self._settled(receipt, head)
            if outcome is not None:
                return outcome
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise self._timed_out(receipt, timeout)
            # Commits of this process wake it once they are handed to the fold (the writer
            # wakes the store's waiters after ``feed``): they are never read back. Those of
            # only a step's own events cannot settle the turn: it sleeps through them.
            head = self.runtime.store.wait_for_head(
                self.key,
                seq,
                0.5 if remaining is None else min(0.5, remaining),
                local=self.runtime.sole_writer(self.key),
                settling=True,
            )

    def _timed_out(self, receipt: Receipt | Task, timeout: float | None) -> TimeoutError:
        """Why a wait ran out: when nobody took the task up (no runtime holds the session),
        say so and how to start a worker, instead of a bare timeout."""
        with self._lock:
            state, _ = self._refresh()
        turn = state.turns.get(receipt.turn_id)
        if (turn is None or not turn.run_ids) and not self._executing():
            return TimeoutError(
                f"task {receipt.turn_id} did not start within {timeout}s: no worker has "
                f"claimed session {self.key}. Start one on this store: agentnb worker "
                f"--store {self.runtime.store.url} --agent module:attribute (or open the "
                "session in a runtime that executes: nb.Runtime(agent)); the task waits"
            )
        return TimeoutError(f"turn {receipt.turn_id} did not end within {timeout}s")

    def events(self, maxsize: int = 1000) -> Subscription:
        """Live notifications of this session in this process (chunks before commit, status).

        Only this session's: ``runtime.all_events()`` subscribes to every session's. The
        subscriber's buffer holds ``maxsize`` notifications; one that falls further behind
        gets a ``Lagged(dropped)`` marker where the gap is (the runtime never waits for it)
        and resyncs from the log: ``log.read_after(seq)`` after the ``data["seq"]`` of the
        last ``committed`` notification it took.
        """
        return self.runtime.subscribe(maxsize, session=self.key)

    def close(self, timeout: float = 10.0) -> None:
        """Stop dispatching this session from this runtime and interrupt its active run.

        As DESIGN §3 says (and the seed: closing "stops scheduling and interrupts active
        work"): the run this runtime executes stops cooperatively at its next boundary
        (async tools are cancelled, a sync tool finishes first, or after ``timeout`` seconds
        is left behind with its call uncertain), recorded with ``stop_reason``
        ``session_closed``; ``resume`` continues the turn. Returns once the run ended.
        Committed data and queued work stay. A run another process (a worker) executes is
        that process's work, not this handle's: it goes on (``interrupt()`` stops it). A
        later command on this session dispatches again.
        """
        self.runtime.stop(self.key, timeout=timeout)

    # -- lifecycle ---------------------------------------------------------------------------

    def update(
        self,
        *,
        title: str | Unset | None = UNSET,
        labels: dict[str, str | None] | None = None,
        key: str | None = None,
    ) -> None:
        """Set the title (None: back to the first task's first line) and merge ``labels``
        (a None value removes that label).

        An inbox command, like every change to a session: durable when this returns, ordered
        with the session's other commands, and carried out by the store in the transaction
        that accepts it (so it needs no runtime to execute it, and works while a turn runs or
        the session is archived). The same change twice leaves the same record; with ``key``
        a re-send is recognised and changes nothing. ``InvalidInput`` for a bad title or
        labels (see ``agentnb.stores.base`` for the bounds); nothing is written then.
        """
        self.runtime.check_open()
        data: dict[str, Any] = {}
        if not isinstance(title, Unset):
            data["title"] = check_title(title)
        if labels is not None:
            data["labels"] = check_labels(labels, patch=True)
        self.inbox.accept("update", data=data, key=key)

    def delete(self, *, force: bool = False, reason: str = "") -> Tombstone:
        """Delete this session (``runtime.delete``): refused with ``SessionBusy`` while a
        turn runs unless ``force=True``, which interrupts it first."""
        return self.runtime.delete(self.key, force=force, reason=reason)

    def archive(self) -> SessionInfo:
        """Archive this session (``runtime.archive``): out of the default listing, still
        readable and exported, refusing new work (``SessionArchived``) until ``unarchive()``.
        ``SessionBusy`` while it has a run open or commands waiting."""
        return self.runtime.archive(self.key)

    def unarchive(self) -> SessionInfo:
        """Bring this session back from the archive: it takes new work again."""
        return self.runtime.unarchive(self.key)

    def __repr__(self) -> str:
        return f"Session({self.key})"

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(repr(self))

    display: ClassVar[Callable[[Session, Any, Any], Any] | None] = None
    """How a notebook shows a session: ``agentnb`` sets it to the live ``SessionView``."""

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> Any:
        """In a notebook a session shows as its live ``SessionView`` (text without ipywidgets)."""
        if Session.display is None:
            return {"text/plain": repr(self)}
        return Session.display(self, include, exclude)
