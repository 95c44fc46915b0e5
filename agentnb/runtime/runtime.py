"""``Runtime``: one background thread with its own asyncio loop that executes sessions.

Work goes on while notebook cells run, and every sync call works inside Jupyter without
nesting event loops: callers hand coroutines to the runtime's loop and wait on a future.

Why it is long: ``Runtime`` is the public entry point of DESIGN §7 (its loop thread,
sessions, listing, lifecycle, workers' claims and the live exporter); the execution of a
session is in ``runtime/engine.py`` and its parts.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import functools
import logging
import math
import os
import signal
import sys
import threading
import time
import warnings
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

from agentnb import _portable, states
from agentnb.agent import Agent, agents_of
from agentnb.errors import (
    Fenced,
    InboxChanged,
    InvalidInput,
    LeaseHeld,
    SessionBusy,
    SessionNotFound,
    StorageError,
    describe,
)
from agentnb.events import Event
from agentnb.folds import ChatFolds, Folds
from agentnb.holders import holder_alive, new_owner
from agentnb.ids import SessionKey, check_id, check_seconds, new_id
from agentnb.limits import Limits
from agentnb.live import LiveEvent, LiveHub, Subscription
from agentnb.ops.schedules import Scheduler
from agentnb.projections.decisions import effective_status
from agentnb.projections.state import (
    PARKING,
    InboxState,
    SessionState,
    TurnState,
    next_command,
)
from agentnb.records import PruneReport, SessionCounts, SessionInfo, SessionInfos, UsageTotals
from agentnb.runtime.engine import SessionDriver
from agentnb.runtime.locate import agent_path, load_agent
from agentnb.runtime.processes import (
    STOP_TIMEOUT,
    WorkerProcess,
    start_method,
    start_workers,
    stop_workers,
)
from agentnb.runtime.recipes import WORKER_STOPPING
from agentnb.runtime.subagents import AgentHost, session_lineage
from agentnb.session import Session
from agentnb.stores import SessionStore, open_store
from agentnb.stores.base import (
    UNSET,
    Lease,
    SessionRecord,
    Tombstone,
    check_labels,
    check_title,
    check_tombstone,
)
from agentnb.tools import OpenToolset, Tool
from agentnb.workspace import Workspace, remove_workspace

__all__ = ["PendingWork", "Runtime"]

T = TypeVar("T")

log = logging.getLogger("agentnb.runtime")

_open_runtimes: weakref.WeakSet[Runtime] = weakref.WeakSet()
_exit_hook_lock = threading.Lock()
_exit_hook_installed = False


def _forked() -> None:
    # A worker process of Runtime(processes=N) makes a runtime of its own: the lock another
    # thread of its parent held at the fork is nobody's, and the parent's runtimes are not
    # the child's to close.
    global _exit_hook_lock, _open_runtimes
    _exit_hook_lock = threading.Lock()
    _open_runtimes = weakref.WeakSet()


_portable.at_fork(_forked)

EXIT_CLOSE_TIMEOUT = 5.0
EXIT_REASON = "the runtime was closed as the process exited; resume() continues it"
"""Why the runs of a process that exits end (a kernel restart, in a notebook)."""
"""Seconds a runtime still open at interpreter exit gets to stop its runs and release."""
EXIT_TOOL_GRACE = 0.5
"""Seconds a sync tool still running at interpreter exit (or a Ctrl-C out of a ``with``
block) gets before its run ends without it: its thread dies with the process."""
SERVE_STOP_TIMEOUT = 10.0
"""Seconds ``serve`` gives its sessions' runs to stop and release once ``stop`` is set."""
_WORK_FOLDS = 1024
"""Folds ``serve`` keeps (least recently used) to tell cheaply whether a session has work."""


@runtime_checkable
class PendingWork(Protocol):
    """A store's index of the sessions with queued work (``PostgresStore`` has one).

    With it, ``Runtime.serve`` claims sessions that have work instead of scanning every
    session, so any number of worker processes and machines can share the store.
    """

    def claim_pending(
        self,
        owner: str,
        *,
        ttl: float = ...,
        limit: int = ...,
        agent_id: str | None = ...,
        namespace: str | None = ...,
    ) -> list[Lease]:
        """Lease up to ``limit`` sessions with accepted commands and no live lease."""

    def settle_pending(self, lease: Lease, inbox_seen: int, *, release: bool = ...) -> bool:
        """Clear the leased session's mark if its inbox is still at ``inbox_seen`` (and
        with ``release``, release the lease at once)."""

    def held_pending(
        self, *, limit: int = ..., agent_id: str | None = ..., namespace: str | None = ...
    ) -> list[Lease]:
        """The live leases of sessions with queued work (a dead holder's among them)."""

    def watch_pending(self, callback: Callable[[SessionKey | None], None]) -> Callable[[], None]:
        """Call ``callback`` when work may have been accepted (with the session's key when
        the store knows it, else None); returns the unwatch."""


SESSION_STATUSES = frozenset(
    {"idle", "queued", "running", "suspended", "interrupted", "failed", "parked"}
)
"""What ``SessionInfo.status`` says (and ``runtime.sessions(status=...)`` takes)."""
# The raw latest-turn statuses (catalogue column; "none": no turn yet) each session status
# can come from: the store narrows by them, ``session_info`` decides.
_RAW: dict[str, frozenset[str]] = {
    "running": frozenset({"running"}),
    "interrupted": frozenset({"running", "interrupted"}),
    "suspended": frozenset({"suspended"}),
    "failed": frozenset({"failed"}),
    "parked": frozenset({"running", "suspended", "interrupted", "failed"}),
    "queued": frozenset({"none", "completed", "cancelled"}),
    "idle": frozenset({"none", "completed", "cancelled"}),
}


def session_usage(store: SessionStore, key: SessionKey) -> UsageTotals:
    """The session's usage totals: its folds' snapshot plus the events after it."""
    with states.read(store, key) as (state, _):
        return UsageTotals.of(state.usage)


def session_info(
    record: SessionRecord, *, now: float, store: SessionStore | None = None
) -> SessionInfo:
    """A catalogue record as ``runtime.sessions()`` shows it.

    The status comes from the one rule (``effective_status``) applied to the latest turn's
    raw status, with ``executing`` = someone holds a live lease; then the queue: tasks
    accepted but not started make it ``queued``, or ``parked`` behind a turn that waits
    for a person.
    """
    queued = record.submits > record.turns
    status = "queued" if queued else "idle"
    if record.turn_status is not None:
        executing = record.lease_owner is not None and record.lease_expires > now
        turn = TurnState("", "", status=record.turn_status)
        effective = effective_status(SessionState(), turn, executing=executing)
        if effective == "running":
            status = "running"
        elif effective in PARKING:
            status = "parked" if queued else effective

    def at(seconds: float) -> datetime:
        return datetime.fromtimestamp(seconds, UTC)

    return SessionInfo(
        record.key,
        record.title or record.first_task,
        dict(record.labels),
        status,  # type: ignore[arg-type]
        at(record.created_at),
        at(record.updated_at),
        SessionCounts(record.events, record.turns, record.bytes),
        at(record.last_activity),
        None if record.archived_at is None else at(record.archived_at),
        cursor=record.cursor,
        _usage=None if store is None else functools.partial(session_usage, store),
        _lineage=None if store is None else functools.partial(session_lineage, store),
    )


def find_sessions(
    store: SessionStore,
    *,
    namespace: str | None = None,
    agent_id: str | None = None,
    user_id: str | None = None,
    status: str | Iterable[str] | None = None,
    labels: dict[str, str] | None = None,
    since: datetime | float | None = None,
    until: datetime | float | None = None,
    search: str | None = None,
    limit: int = 50,
    before: str | None = None,
    archived: bool | None = False,
) -> list[SessionInfo]:
    """``Runtime.sessions`` on any store and scope (what the command line lists)."""
    wanted = _check_statuses(status)
    raw = None if wanted is None else frozenset().union(*(_RAW[s] for s in wanted))
    page: list[SessionInfo] = []
    cursor = before
    while True:
        records = store.find_sessions(
            namespace=namespace,
            user_id=user_id,
            agent_id=agent_id,
            turn_status=raw,
            labels=labels,
            since=_seconds(since, "since"),
            until=_seconds(until, "until"),
            search=search,
            limit=limit,
            before=cursor,
            archived=archived,
        )
        now = store.clock.now()
        for record in records:
            info = session_info(record, now=now, store=store)
            if wanted is None or info.status in wanted:
                page.append(info)
                if len(page) == limit:
                    break
        if len(page) == limit or len(records) < limit:
            return page
        cursor = records[-1].cursor  # the status filter dropped some: read on


def prunable(
    store: SessionStore,
    older_than: timedelta | float,
    *,
    status: str | Iterable[str] = "idle",
    labels: dict[str, str] | None = None,
    namespace: str | None = None,
    agent_id: str | None = None,
    user_id: str | None = None,
) -> list[SessionInfo]:
    """The sessions a retention rule selects (``Runtime.prune``): no activity for
    ``older_than`` (a ``timedelta`` or seconds), in ``status`` (never running or queued)."""
    if isinstance(older_than, timedelta):
        older_than = older_than.total_seconds()
    if not isinstance(older_than, int | float) or isinstance(older_than, bool):
        raise InvalidInput(
            f"older_than must be a timedelta or seconds, got {older_than!r}; "
            "e.g. prune(timedelta(days=30))"
        )
    if not 0 <= older_than < math.inf:  # NaN compares false both ways
        raise InvalidInput(f"older_than must be seconds >= 0 (finite), got {older_than!r}")
    wanted = _check_statuses(status) or frozenset({"idle"})
    if wanted & {"running", "queued"}:
        raise InvalidInput(
            "prune never deletes running or queued sessions; delete one with "
            "runtime.delete(key, force=True) if you must"
        )
    cutoff = store.clock.now() - float(older_than)
    found: list[SessionInfo] = []
    before = None
    while True:
        page = find_sessions(
            store,
            namespace=namespace,
            agent_id=agent_id,
            user_id=user_id,
            status=wanted,
            labels=labels,
            until=cutoff,
            limit=500,
            before=before,
            archived=None,  # retention covers archived sessions too
        )
        found += page
        if len(page) < 500:
            return found
        before = page[-1].cursor


_STARTS = frozenset(
    {"submit", "resume", "respond", "cancel", "reconcile", "compact", "revoke", "feedback"}
)
"""Commands a runtime dispatches (steering and material wait for a run to pick them up)."""


def _with_workspace(agent: Agent, workspace: object, accept: object) -> tuple[Agent, bool]:
    """(the agent with the runtime's ``workspace``, if one was given, as its own; whether
    the runtime accepts workspace changes), or ``InvalidInput``."""
    if not isinstance(accept, bool):
        raise InvalidInput(f"accept_workspace_change must be True or False, got {accept!r}")
    if workspace is None:
        return agent, accept
    if not isinstance(workspace, Workspace):
        raise InvalidInput(
            f"workspace must be an nb.Workspace(root), got {type(workspace).__name__}"
        )
    return agent.with_workspace(workspace), accept


def check_archive(key: SessionKey, state: SessionState, inbox: InboxState) -> None:
    """``SessionBusy`` unless the session holds no work: no run open (running, or cut off
    by a crash and not recovered yet) and no command waiting to be carried out (queued
    tasks, answers, resumes). A turn that waits for a person may be archived as it is."""
    if state.active_run is not None:
        turn = state.runs[state.active_run].turn_id
        raise SessionBusy(
            f"session {key} cannot be archived: turn {turn} has a run open (running, or cut "
            "off by a crash and not recovered yet); interrupt or cancel it, then archive"
        )
    waiting = [
        c
        for c in inbox.commands.values()
        if c.kind in _STARTS
        and c.command_id not in state.handled
        and c.command_id not in inbox.rejected
    ]
    if waiting:
        raise SessionBusy(
            f"session {key} cannot be archived: {len(waiting)} command(s) wait to be carried "
            f"out (first: {waiting[0].kind} {waiting[0].command_id}); let them run or cancel "
            "the queued tasks, then archive"
        )


def archive_session(store: SessionStore, key: SessionKey) -> SessionInfo:
    """Archive ``key`` in ``store`` (what ``Runtime.archive`` and ``agentnb archive`` do):
    decided by ``check_archive`` at the inbox head the flag is set against, again if a
    command came in meanwhile."""
    for _ in range(10):
        with states.read(store, key) as (state, inbox):
            check_archive(key, state, inbox)
            seen = inbox.seq
        try:
            record = store.set_archived(key, True, expected_inbox=seen)
        except InboxChanged:
            continue  # a command came in meanwhile: decide again
        return session_info(record, now=store.clock.now(), store=store)
    raise SessionBusy(f"session {key} keeps receiving commands; archive it once it is idle")


def unarchive_session(store: SessionStore, key: SessionKey) -> SessionInfo:
    """Take ``key`` out of the archive (``Runtime.unarchive``, ``agentnb unarchive``)."""
    record = store.set_archived(key, False)
    return session_info(record, now=store.clock.now(), store=store)


def _check_statuses(status: str | Iterable[str] | None) -> frozenset[str] | None:
    if status is None:
        return None
    try:
        wanted = frozenset([status] if isinstance(status, str) else status)
    except TypeError:  # not a str nor a collection of them
        wanted = frozenset([repr(status)])
    unknown = wanted - SESSION_STATUSES
    if unknown or not wanted:
        raise InvalidInput(
            f"status must be one or more of {sorted(SESSION_STATUSES)}, got {status!r}"
        )
    return wanted


def _seconds(value: datetime | float | None, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise InvalidInput(
                f"{name} is a naive datetime; give it a timezone, e.g. datetime.now(UTC)"
            )
        return value.timestamp()
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise InvalidInput(f"{name} must be a datetime or seconds since the epoch, got {value!r}")
    return float(value)


def _start_loop(agent_id: str) -> tuple[asyncio.AbstractEventLoop, threading.Thread]:
    """A runtime's event loop, running on its own daemon thread."""
    loop = asyncio.new_event_loop()
    # Store calls run in worker threads; each running session also keeps one waiting for
    # interrupts, so the default pool of min(32, cpus + 4) threads is too small.
    loop.set_default_executor(
        concurrent.futures.ThreadPoolExecutor(max_workers=64, thread_name_prefix="agentnb")
    )
    thread = threading.Thread(
        target=loop.run_forever, daemon=True, name=f"agentnb-runtime-{agent_id}"
    )
    thread.start()
    return loop, thread


class SecondRuntimeWarning(UserWarning):
    """A second executing ``Runtime`` of the same agent opened on a store this process
    already executes it from (a setup cell run twice): the two compete for its sessions."""


def _warn_if_twin(agent_id: str, namespace: str, store: SessionStore) -> None:
    """Warn when an open executing runtime of this process runs ``agent_id`` on ``store``."""
    for other in list(_open_runtimes):
        same = other.store is store or (
            not store.url.startswith("memory") and repr(other.store) == repr(store)
        )
        if (
            same
            and other.execute
            and not other._closed
            and other.agent.agent_id == agent_id
            and other.namespace == namespace
        ):
            warnings.warn(
                f"another Runtime of agent {agent_id!r} is open on {store!r} in this process "
                "(a setup cell run twice?): both would execute its sessions. Close the first "
                "(runtime.close()) or reuse it",
                SecondRuntimeWarning,
                stacklevel=3,
            )
            return


def _close_at_exit() -> None:
    """Stop the runs of every open runtime, record why and release their leases, promptly:
    a sync tool that does not return is left to die with the process (its call is
    recorded uncertain). A second Ctrl-C meanwhile exits at once (``_exit_now``)."""
    runtimes = list(_open_runtimes)
    if not runtimes:
        return
    previous = _on_second_interrupt(_exit_now)
    try:
        for runtime in runtimes:
            try:
                runtime._shut_down(EXIT_REASON, EXIT_CLOSE_TIMEOUT)
            except Exception:
                log.exception("closing %r at interpreter exit failed", runtime)
    finally:
        _on_second_interrupt(previous)


def _on_second_interrupt(handler: Any) -> Any:
    """Make ``handler`` SIGINT's handler (main thread only); returns the one it replaced."""
    if handler is None or threading.current_thread() is not threading.main_thread():
        return None
    try:
        return signal.signal(signal.SIGINT, handler)
    except (ValueError, OSError):  # not the main interpreter, or no signals here
        return None


def _exit_now(*_: object) -> None:
    """A second Ctrl-C while the runs stop at exit: leave at once, with one line. What was
    not recorded is recovered as interrupted when the session is next opened."""
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.write(
            "agentnb: second Ctrl-C: exiting without waiting for the runs to stop; their "
            "turns are recorded interrupted when the sessions are next opened\n"
        )
        sys.stderr.flush()
    os._exit(130)


def _install_exit_hook() -> None:
    """Close open runtimes at interpreter exit, before the thread pools shut down.

    ``atexit`` runs after ``concurrent.futures`` has refused new work, too late for a clean
    close (runs would end with "cannot schedule new futures after shutdown" and leases stay
    held). ``threading._register_atexit`` hooks run before that, newest first; registering
    after the pool module was imported puts this hook ahead of its shutdown.
    """
    global _exit_hook_installed
    with _exit_hook_lock:
        if _exit_hook_installed:
            return
        _exit_hook_installed = True
    register = getattr(threading, "_register_atexit", None)
    try:
        if register is None:
            raise RuntimeError("no threading exit hooks")
        register(_close_at_exit)
    except RuntimeError:  # an older Python, or the interpreter is already shutting down
        atexit.register(_close_at_exit)


class _Wakeups:
    """What wakes ``serve``'s loop: a slot freed, or commands accepted, with the sessions
    they are for when the store knows them (only their drivers need to look)."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._keys: set[SessionKey] = set()
        self._lock = threading.Lock()

    def slot_freed(self) -> None:
        self._event.set()

    def accepted(self, key: SessionKey | None) -> None:
        if key is not None:
            with self._lock:
                self._keys.add(key)
        self._event.set()

    def take(self) -> tuple[bool, set[SessionKey]]:
        """(whether anything woke the loop, the sessions with commands) since the last take."""
        woken = self._event.is_set()
        self._event.clear()
        with self._lock:
            keys, self._keys = self._keys, set()
        return woken, keys

    def wait(self, timeout: float) -> None:
        self._event.wait(timeout)


def _check_options(
    agent: object,
    execute: object,
    accept_agent_change: object,
    limits: object,
    lease_ttl: object,
    auto_resume: object,
) -> None:
    """``InvalidInput`` for a ``Runtime`` option of the wrong kind (before anything opens)."""
    if not isinstance(agent, Agent):
        raise InvalidInput(f"agent must be an nb.Agent, got {type(agent).__name__}")
    if not isinstance(execute, bool):
        raise InvalidInput(f"execute must be True or False, got {execute!r}")
    if not isinstance(accept_agent_change, bool):
        raise InvalidInput(
            f"accept_agent_change must be True or False, got {accept_agent_change!r}"
        )
    if limits is not None and not isinstance(limits, Limits):
        raise InvalidInput(
            f"limits must be an nb.Limits (e.g. nb.Limits(max_queued_commands=16)), got "
            f"{type(limits).__name__}"
        )
    if not isinstance(lease_ttl, int | float) or not 0.2 <= lease_ttl <= 3600:
        raise InvalidInput(f"lease_ttl must be seconds in [0.2, 3600], got {lease_ttl!r}")
    if auto_resume not in (False, True, "unknown"):
        raise InvalidInput(f"auto_resume must be False, True or 'unknown', got {auto_resume!r}")


def _check_schedules(schedules: object) -> bool:
    """``schedules`` as given to ``Runtime``: True or False, else ``InvalidInput``."""
    if not isinstance(schedules, bool):
        raise InvalidInput(f"schedules must be True or False, got {schedules!r}")
    return schedules


def _ended_clean(task: asyncio.Task[None]) -> bool:
    """Whether a driver's task ended without an error (its folds can be taken over)."""
    return task.done() and not task.cancelled() and task.exception() is None


class Runtime:
    """Executes an agent's sessions in the background, on one store.

    ``store`` is a URL (``sqlite:///path.db``, ``memory://``) or a ``SessionStore``; the
    default is SQLite under ``./.agentnb/``. A session executes only while this runtime holds
    its lease (``lease_ttl`` seconds, renewed every third of that).

    ``execute=False`` makes a runtime that only submits and observes, for a notebook next to
    ``agentnb worker`` processes on a shared (PostgreSQL) store: ``submit``, ``respond``,
    ``resume``, ``interrupt``... accept commands durably, but this process starts no driver
    (``kick`` does nothing, ``serve`` refuses); ``wait``, ``follow`` and the widgets wake on
    the workers' commits (through ``LISTEN/NOTIFY`` on PostgreSQL).

    ``auto_resume`` (for workers): ``True`` resumes a turn a crash cut off when nothing
    uncertain blocks it; ``"unknown"`` resumes it anyway, recording each call whose outcome
    is unknown as ``unknown`` and telling the model (``resume(turn, uncertain="unknown")``;
    ``agentnb worker --auto-resume=unknown``); ``False`` leaves it to a person.

    The agent's toolsets (``nb.mcp.stdio(...)``, ...) are opened here, once, on this
    runtime's loop (``ToolsetUnavailable`` if one cannot start), and closed by ``close``;
    ``runtime.agent`` is the agent with their tools.

    ``limits`` (an ``nb.Limits``) bounds the sessions' queues, what opening one may replay,
    and (optionally) how much one may hold; the defaults are the seeds' bounds.

    ``webhooks`` (``nb.Webhook(url, events=..., secret=...)``) POST committed events to
    receivers; each is an export sink like those of ``export_to`` (drained on the exporter's
    thread, its watermark in the store): at least once, in order per session, retried with
    backoff, never blocking a turn.

    ``schedules=True`` fires the due schedules (``session.schedule``) of this agent's
    sessions; a runtime that adds a schedule fires from then on too. Firing is exactly once
    per due time across any number of runtimes and workers (``agentnb.ops.schedules``).

    ``processes=N`` (N > 1) executes on N cores: the runtime forks N worker processes, each
    serving this agent on the same store (an SQLite file or PostgreSQL, not ``memory://``)
    and claiming sessions with queued work as ``agentnb worker`` processes do, and stays
    the client itself: it accepts commands and observes, like ``execute=False``. Closing it
    stops the workers cooperatively (their runs end interrupted, as ``close`` ends this
    process's runs). A killed worker's sessions are claimed by the others as soon as they
    see it dead. The default, 1, executes in this process.

    ``workspace`` (an ``nb.Workspace``) gives each session its working directory, as
    ``Agent(workspace=...)`` does (this one wins): bound at the session's first run, never
    switched (``WorkspaceChanged``) unless ``accept_workspace_change=True`` rebinds it
    (``agentnb.workspace``).

    A session is bound to the agent of its first turn (its fingerprint: id, instructions,
    tools with their schemas, model name). Reading it always works, from any runtime; new
    work (``submit``, ``send``, ``steer``, ``inject``, ``resume``, ``respond``, ``compact``)
    with an agent whose fingerprint differs raises ``AgentChanged`` naming what changed.
    Ending and recording work (``interrupt``, ``cancel``, ``reconcile``, ``update``,
    ``delete``) is never refused for it. With ``accept_agent_change=True`` this runtime's
    agent takes the session over: the driver that starts the next run records
    ``agent/changed`` (both fingerprints) in that run's first commit, and from then on the
    session is bound to the new agent. A driver (this runtime's, or a worker's) checks again
    when it starts a run and rejects the command in the inbox with the reason, so a worker
    with another agent never runs it; a runtime with ``execute=False`` only stops refusing at
    its own door, the worker executing decides.
    """

    def __init__(
        self,
        agent: Agent | str,
        store: str | SessionStore | None = None,
        *,
        lease_ttl: float = 10.0,
        auto_resume: bool | str = False,
        export_to: Iterable[Any] = (),
        namespace: str = "default",
        execute: bool = True,
        limits: Limits | None = None,
        accept_agent_change: bool = False,
        processes: int = 1,
        webhooks: Iterable[Any] = (),
        schedules: bool = False,
        workspace: Workspace | None = None,
        accept_workspace_change: bool = False,
    ) -> None:
        if isinstance(agent, str):  # "package.module:attribute"
            agent = load_agent(agent)
        agent, self.accept_workspace_change = _with_workspace(
            agent, workspace, accept_workspace_change
        )
        _check_options(agent, execute, accept_agent_change, limits, lease_ttl, auto_resume)
        check_processes(processes, execute)
        self.agent = agent
        self.agents = agents_of(agent)
        """Every agent this runtime executes sessions of: its own and its sub-agents'."""
        self._owns_store = not isinstance(store, SessionStore)
        self.store = open_store(store)
        if execute:
            _warn_if_twin(agent.agent_id, namespace, self.store)
        self.lease_ttl = float(lease_ttl)
        self.auto_resume: bool | str = auto_resume
        self.export_to = tuple(export_to) + tuple(webhooks)  # a webhook is an export sink
        self.namespace = check_id(namespace, "namespace")
        self.owner = new_owner()
        self.execute = execute
        self.limits = limits or Limits()
        self.accept_agent_change = accept_agent_change
        self.processes = processes
        self._workers: list[WorkerProcess] = []
        if processes > 1:  # forked before this runtime starts a thread of its own
            self._start_workers(processes)
        self._work_folds: OrderedDict[SessionKey, Folds] = OrderedDict()
        self._work_folds_lock = threading.Lock()
        self.hub = LiveHub()
        self._drivers: dict[SessionKey, SessionDriver] = {}
        self._kicked: dict[SessionKey, int] = {}
        """Kicks of a session its loop has not handled yet."""
        self._sessions: dict[SessionKey, Session] = {}
        self._pooled = 0
        """How many ``serve`` calls claim work from a pool now (their children are too)."""
        self._chat_folds: dict[SessionKey, ChatFolds] = {}
        self._chat_lock = threading.Lock()
        self._lock = threading.Lock()
        self._closed = False
        # Every commit through this runtime's store object reaches the session's folds as
        # committed, before any waiter can see its head: nobody reads it back.
        self._unwatch = self.store.bus.watch(None, self._on_commit)
        self._loop, self._thread = _start_loop(agent.agent_id)
        self._toolsets: list[OpenToolset] = []
        self._with_toolsets()
        from agentnb.export.live import LiveExporter  # optional: the export extra

        # Drains export_to in the background, for the sessions this runtime opened.
        self.exporter = LiveExporter.started(self.store, self.export_to, self.session_keys)
        self._scheduler: Scheduler | None = None
        self._scheduler_lock = threading.Lock()
        if _check_schedules(schedules):
            self._start_scheduler()
        _open_runtimes.add(self)
        _install_exit_hook()

    def _start_scheduler(self) -> Scheduler:
        """Fire the due schedules of this runtime's agent's sessions (started once)."""
        with self._scheduler_lock:
            if self._scheduler is None:
                agent_id = self.agent.agent_id

                def keys(since: float | None) -> list[SessionKey]:
                    if since is None:
                        records = self.store.list_sessions(
                            namespace=self.namespace, agent_id=agent_id
                        )
                        return [r.key for r in records]
                    found: list[SessionKey] = []
                    before = None
                    while page := self.store.find_sessions(
                        namespace=self.namespace,
                        agent_id=agent_id,
                        since=since,
                        limit=1000,
                        before=before,
                        archived=None,
                    ):
                        found += [r.key for r in page]
                        before = page[-1].cursor
                        if len(page) < 1000:
                            break
                    return found

                def open_session(key: SessionKey) -> Session:
                    return self.session(key.session_id, user_id=key.user_id)

                self._scheduler = Scheduler(self.store, open_session, keys).start()
            return self._scheduler

    def schedules_changed(self, key: SessionKey) -> None:
        """A schedule of ``key`` was added or removed through this runtime: an executing
        runtime fires schedules from now on (``agentnb.ops.schedules``)."""
        if self.processes > 1 or not self.execute:
            return  # the workers (or another runtime) fire; they see it when they look
        if key.agent_id == self.agent.agent_id and key.namespace == self.namespace:
            self._start_scheduler().notify(key)

    @property
    def worker_pids(self) -> tuple[int, ...]:
        """The process ids of the worker processes of ``processes=N`` (empty when this
        runtime executes in its own process)."""
        return tuple(worker.pid for worker in self._workers)

    def _start_workers(self, processes: int) -> None:
        """Fork the worker processes of ``processes=N``; this runtime becomes their client."""
        url = shared_url(self.store)
        options = {
            "lease_ttl": self.lease_ttl,
            "auto_resume": self.auto_resume,
            "namespace": self.namespace,
            "limits": self.limits,
            "accept_agent_change": self.accept_agent_change,
        }
        method, serve = _worker_target(self.agent, url, options)
        try:
            self._workers = start_workers(processes, serve, method=method)
        except BaseException:
            if self._owns_store:
                self.store.close()
            raise
        self.execute = False

    def _with_toolsets(self) -> None:
        """Open the agents' toolsets (MCP servers...) on the loop; the agents then carry
        their tools."""
        if any(a.toolsets for a in self.agents.values()):
            self.agents = self._start_toolsets(self.agents)
            self.agent = self.agents[self.agent.agent_id]

    def _start_toolsets(self, agents: dict[str, Agent]) -> dict[str, Agent]:
        """Open the toolsets of every agent of the tree on the loop; if one fails, undo the
        runtime's start."""
        try:
            return asyncio.run_coroutine_threadsafe(
                self._open_toolsets(agents), self._loop
            ).result()
        except BaseException:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
            if not self._loop.is_running():
                self._loop.close()
            if self._owns_store:
                self.store.close()
            raise

    async def _open_toolsets(self, agents: dict[str, Agent]) -> dict[str, Agent]:
        """Open the toolsets of each agent (the runtime's and its sub-agents') on this loop:
        each agent with all its tools, by agent id.

        What one opened before a later one failed is closed again before the error rises.
        """
        opened_agents: dict[str, Agent] = {}
        try:
            for agent_id, agent in agents.items():
                tools: list[Tool] = []
                for toolset in agent.toolsets:
                    opened = await toolset.open()
                    self._toolsets.append(opened)
                    tools.extend(opened.tools)
                opened_agents[agent_id] = agent.with_opened(tools) if agent.toolsets else agent
            return opened_agents
        except BaseException:
            await self._close_toolsets()
            raise

    async def _close_toolsets(self) -> None:
        opened, self._toolsets = self._toolsets, []
        for toolset in reversed(opened):
            try:
                await toolset.close()
            except Exception as exc:  # noqa: BLE001 - closing must go on
                log.warning("runtime close: a toolset did not close cleanly: %s", describe(exc))

    # -- sessions ----------------------------------------------------------------------------

    def _key(self, session_id: str, user_id: str) -> SessionKey:
        return SessionKey(
            self.namespace,
            check_id(user_id, "user_id"),
            self.agent.agent_id,
            check_id(session_id, "session_id"),
        )

    def session(self, session_id: str, user_id: str = "default") -> Session:
        """Get or create a session; starts nothing (call ``start()`` after a restart)."""
        self.check_open()
        key = self._key(session_id, user_id)
        self.store.create_session(key)
        return self._session(key)

    def create(
        self,
        *,
        user_id: str | None = None,
        title: str | None = None,
        labels: dict[str, str] | None = None,
    ) -> Session:
        """A new session with an id made here (Everruns' ``engine.create``): opaque, unique,
        and sortable by creation time (``s_`` and a UUIDv7), so a listing ordered by id is
        ordered by age. ``user_id`` defaults to ``"default"``, as for ``session()``.

        The title and labels are checked before anything is written (``InvalidInput``) and
        set in the same call, so ``runtime.sessions()`` lists the session with them. Starts
        nothing; ``session.key.session_id`` is the id to ``open`` it with later.
        """
        self.check_open()
        if title is not None:
            title = check_title(title)
        checked = None if labels is None else check_labels(labels, patch=False)
        key = self._key(new_id("s"), "default" if user_id is None else user_id)
        self.store.create_session(key)
        session = self._session(key)
        if title is not None or checked:
            session.update(title=title if title is not None else UNSET, labels=checked or None)
        return session

    def open(self, session_id: str, user_id: str = "default") -> Session:
        """An existing session; ``SessionNotFound`` if it was never created."""
        self.check_open()
        key = self._key(session_id, user_id)
        if self.store.get_session(key) is None:
            check_tombstone(key, self.store.tombstone(key))
            raise SessionNotFound(
                f"no session {session_id!r} for user {user_id!r} and agent "
                f"{self.agent.agent_id!r}; create it with "
                "runtime.session(...)"
            )
        return self._session(key)

    def agent_for(self, key: SessionKey) -> Agent:
        """The agent that executes ``key``: the runtime's, or the sub-agent of that id."""
        return self.agents.get(key.agent_id, self.agent)

    def session_of(self, key: SessionKey) -> Session:
        """The session of ``key``, an agent of this runtime's (a sub-agent's child session
        too); ``InvalidInput`` for another agent's, ``SessionNotFound`` if it does not exist."""
        self.check_open()
        if not isinstance(key, SessionKey):
            raise InvalidInput(f"key must be a SessionKey, got {type(key).__name__}")
        if key.agent_id not in self.agents:
            raise InvalidInput(
                f"session {key} belongs to agent {key.agent_id!r}, which is neither this "
                f"runtime's agent nor one of its sub-agents ({', '.join(sorted(self.agents))})"
            )
        if self.store.get_session(key) is None:
            check_tombstone(key, self.store.tombstone(key))
            raise SessionNotFound(f"there is no session {key}")
        return self._session(key)

    def all_keys(self, user_id: str | None = None) -> list[SessionKey]:
        """Keys of this agent's sessions (of ``user_id`` if given), oldest first."""
        records = self.store.list_sessions(
            namespace=self.namespace, user_id=user_id, agent_id=self.agent.agent_id
        )
        return [r.key for r in records]

    def sessions(
        self,
        user_id: str | None = None,
        *,
        status: str | Iterable[str] | None = None,
        labels: dict[str, str] | None = None,
        since: datetime | float | None = None,
        until: datetime | float | None = None,
        search: str | None = None,
        limit: int = 50,
        before: str | None = None,
        archived: bool | None = False,
    ) -> SessionInfos:
        """This agent's sessions, newest activity first, read from the catalogue's index.

        ``status``: one of ``SESSION_STATUSES`` or several; ``labels``: every pair must
        match; ``since`` / ``until``: bounds on the last activity (a ``datetime`` or seconds
        since the epoch); ``search``: text in the title or the first task (any case);
        ``before``: the ``cursor`` of the last record of the previous page; ``archived``:
        False (the default) leaves archived sessions out, True lists only them, None both.
        Deleted sessions are never listed. ``all_keys()`` gives bare keys.
        """
        return SessionInfos(
            find_sessions(
                self.store,
                namespace=self.namespace,
                agent_id=self.agent.agent_id,
                user_id=user_id,
                status=status,
                labels=labels,
                since=since,
                until=until,
                search=search,
                limit=limit,
                before=before,
                archived=archived,
            )
        )

    def archive(self, key: SessionKey | str, *, user_id: str = "default") -> SessionInfo:
        """Archive a finished session: ``sessions()`` leaves it out (``archived=True``
        lists it), it stays readable (``transcript``, ``history``, ``inspect``, exports),
        and it refuses new work (``submit``, ``send``, ``inject``, ``respond``, ``resume``,
        ``reconcile``, ``compact``; ``steer`` finds nothing running) with
        ``SessionArchived`` until ``unarchive``, from any runtime or process: the store
        checks the flag where it accepts a command. ``cancel`` and ``interrupt`` still work.

        ``SessionBusy`` while the session has work: a run open, or commands waiting (cancel
        queued tasks first). A turn waiting for a person (suspended, interrupted, failed)
        is archived as it is. Archiving an archived session changes nothing.
        """
        self.check_open()
        if not isinstance(key, SessionKey):
            key = self._key(key, user_id)
        return archive_session(self.store, key)

    def unarchive(self, key: SessionKey | str, *, user_id: str = "default") -> SessionInfo:
        """Bring an archived session back: listed by default again, and it takes new work."""
        self.check_open()
        if not isinstance(key, SessionKey):
            key = self._key(key, user_id)
        return unarchive_session(self.store, key)

    def delete(
        self,
        key: SessionKey | str,
        *,
        user_id: str = "default",
        force: bool = False,
        reason: str = "",
        by: str | None = None,
        timeout: float = 30.0,
    ) -> Tombstone:
        """Delete a session: its events, inbox, blobs, snapshots, lease and watermarks, in
        one transaction; a tombstone (``by``, when, ``reason``) stays in the catalogue.

        ``key`` is a ``SessionKey`` or a session id of this agent (with ``user_id``).
        ``SessionBusy`` while a turn runs, unless ``force=True``: then the run is
        interrupted first (cooperatively; ``SessionBusy`` if it has not stopped within
        ``timeout`` seconds). Deleting a deleted session returns its tombstone.
        """
        self.check_open()
        timeout = check_seconds(timeout, "timeout")
        if not isinstance(key, SessionKey):
            key = self._key(key, user_id)
        by = self.owner if by is None else check_id(by, "by")
        tombstone = self.store.tombstone(key)
        if tombstone is not None:
            return tombstone
        record = self.store.get_session(key)
        if record is None:
            raise SessionNotFound(f"there is no session {key}; see runtime.sessions()")
        info = session_info(record, now=self.store.clock.now())
        if info.status == "running" and not force:
            raise SessionBusy(
                f"session {key} has a turn running; interrupt it first, or delete it with "
                "force=True (which interrupts it)"
            )
        deadline = time.monotonic() + timeout
        self._let_go_of(key, timeout, interrupt=info.status == "running")
        bound = Folds(self.store, key, limits=self.limits).refresh()[0].workspace
        while True:
            try:
                tombstone = self.store.delete_session(key, by=by, reason=reason)
                break
            except LeaseHeld:
                # This runtime's own serve() loop may claim the session again for what the
                # stop left in its inbox (the interrupt): let that short run end, then delete.
                lease = self.store.current_lease(key)
                if lease is not None and (
                    lease.owner != self.owner or time.monotonic() >= deadline
                ):
                    raise
                self._let_go_of(key, max(0.1, deadline - time.monotonic()), interrupt=False)
        self._forget(key)
        if bound is not None:  # its working files go with it (never a shared root)
            remove_workspace(Path(bound["path"]), Path(bound["root"]))
        if self.exporter is not None:
            self.exporter.notify()  # the tombstone goes to the export sinks now
        return tombstone

    def prune(
        self,
        older_than: timedelta | float,
        *,
        status: str | Iterable[str] = "idle",
        labels: dict[str, str] | None = None,
        user_id: str | None = None,
        dry_run: bool = True,
        reason: str = "retention",
    ) -> PruneReport:
        """Delete this agent's sessions with no activity for ``older_than`` (a ``timedelta``
        or seconds) whose status is ``status`` (default ``idle``; never ``running`` or
        ``queued``) and whose labels match, archived or not. With ``dry_run`` (the default)
        nothing is deleted: the report lists what would be.
        """
        if not isinstance(dry_run, bool):
            raise InvalidInput(
                f"dry_run must be True (list only) or False (delete), got {dry_run!r}"
            )
        found = prunable(
            self.store,
            older_than,
            status=status,
            labels=labels,
            namespace=self.namespace,
            agent_id=self.agent.agent_id,
            user_id=user_id,
        )
        deleted = 0
        if not dry_run:
            for info in found:
                try:
                    self.delete(info.key, reason=reason)
                except (SessionBusy, LeaseHeld):
                    continue  # it came back to life since it was listed: keep it
                deleted += 1
        return PruneReport(bool(dry_run), tuple(found), deleted)

    def _let_go_of(self, key: SessionKey, timeout: float, *, interrupt: bool) -> None:
        """Stop this runtime's driver of ``key`` (interrupting its run) and wait for it to
        release the lease; for another holder's run, ask it to interrupt and wait."""
        driver = self._drivers.get(key)
        if driver is not None and self.active(key):

            async def stop() -> None:
                driver.stopping = True
                if interrupt:
                    driver.request_stop("the session is being deleted")
                driver.wake.set()
                if driver.task is not None:
                    await asyncio.wait({driver.task}, timeout=timeout)

            asyncio.run_coroutine_threadsafe(stop(), self._loop).result(timeout + 5)
        elif interrupt:
            self._session(key).interrupt()
        deadline = time.monotonic() + timeout
        while interrupt or self.active(key):
            lease = self.store.current_lease(key)
            if lease is None and not self.active(key):
                return
            if time.monotonic() >= deadline:
                raise SessionBusy(
                    f"session {key} still runs after {timeout}s of asking it to stop; "
                    "try again later"
                )
            time.sleep(0.05)

    def _forget(self, key: SessionKey) -> None:
        with self._lock:
            self._sessions.pop(key, None)
            self._drivers.pop(key, None)
        with self._chat_lock:
            self._chat_folds.pop(key, None)
        self._take_folds(key)

    def _session(self, key: SessionKey) -> Session:
        with self._lock:
            session = self._sessions.get(key)
            if session is None:
                agent = self.agent_for(key)
                # A sub-agent's child session reads and works with its own agent.
                host = self if agent is self.agent else AgentHost(self, agent)
                session = self._sessions[key] = Session(host, key)
            return session

    # -- the loop ----------------------------------------------------------------------------

    def kick(self, key: SessionKey, accepted: Event | None = None) -> None:
        """Make sure a driver dispatches the session's accepted work (non-blocking).

        ``accepted``: the inbox record just accepted here, handed to a running driver so it
        need not read it back. Does nothing in a runtime made with ``execute=False``:
        workers execute.
        """
        if self._closed or not self.execute or key.agent_id not in self.agents:
            return  # another agent's session: a runtime of that agent executes it
        driver = self._drivers.get(key)
        if driver is not None:
            driver.given_up = None  # asked to try again: waiters wait for the new attempt
        with self._lock:  # executing from now on: a waiter does not call an open run cut off
            self._kicked[key] = self._kicked.get(key, 0) + 1
        try:
            self._loop.call_soon_threadsafe(self._kicked_driver, key, accepted)
        except RuntimeError:  # the loop closed meanwhile
            self._kick_done(key)
            raise

    def _kicked_driver(self, key: SessionKey, accepted: Event | None) -> None:
        try:
            self._ensure_driver(key, accepted)
        finally:
            self._kick_done(key)

    def _kick_done(self, key: SessionKey) -> None:
        with self._lock:
            left = self._kicked.pop(key, 1) - 1
            if left:
                self._kicked[key] = left

    def _ensure_driver(
        self, key: SessionKey, accepted: Event | None = None, *, lease: Lease | None = None
    ) -> SessionDriver:
        """The session's running driver, woken (handed ``accepted``), or a new one: lent
        ``lease`` (a worker's claim) and given the folds the last one left."""
        driver = self._drivers.get(key)
        if driver is not None and driver.task is not None and not driver.task.done():
            if accepted is not None:
                driver.hand_over(accepted)
            driver.wake.set()
            return driver
        folds = self._take_folds(key)
        task = driver.task if driver is not None else None
        if folds is None and driver is not None and task is not None and _ended_clean(task):
            # Its end's callback has not run yet: take over the folds it leaves right away
            # (else this driver would fold the whole log again, a copy of every message).
            folds = driver.reusable_folds
        driver = SessionDriver(self, key, folds=folds, lease=lease)
        self._drivers[key] = driver
        driver.task = self._loop.create_task(driver.run(), name=f"agentnb-session-{key}")
        driver.task.add_done_callback(functools.partial(self._driver_done, driver))
        return driver

    def _driver_done(self, driver: SessionDriver, task: asyncio.Task[None]) -> None:
        """A driver ended: an error that escaped it is logged and kept for waiters; folds
        it left clean are kept for the session's next driver."""
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:  # its driver kept the reason for waiters before it ended
            log.error("session %s: execution stopped by an error", driver.key, exc_info=exc)
            return
        folds = driver.reusable_folds
        if folds is not None and self._drivers.get(driver.key) is driver:  # else taken over
            self._keep_folds(driver.key, folds)

    def _take_folds(self, key: SessionKey) -> Folds | None:
        """The session's kept folds, now the caller's alone (None: none kept)."""
        with self._work_folds_lock:
            return self._work_folds.pop(key, None)

    def _keep_folds(self, key: SessionKey, folds: Folds) -> None:
        """Keep folds nobody uses now for the session's next driver or worker look (the
        newest ``_WORK_FOLDS`` sessions')."""
        with self._work_folds_lock:
            self._work_folds[key] = folds
            self._work_folds.move_to_end(key)
            while len(self._work_folds) > _WORK_FOLDS:
                self._work_folds.popitem(last=False)

    def failure(self, key: SessionKey) -> str | None:
        """Why this runtime stopped executing ``key`` after an error, while nothing runs it.

        None when it executes the session now or never gave it up. ``Session.wait`` raises
        it instead of waiting for work nobody will do.
        """
        driver = self._drivers.get(key)
        if driver is None or self.active(key):
            return None
        return driver.given_up

    def _on_commit(self, key: SessionKey, events: Sequence[Event]) -> None:
        """On the commit bus (the committer's thread): the session handle's folds and the
        chat fold of ``key`` take the committed events as they are."""
        session = self._sessions.get(key)
        if session is not None:
            session.feed(events)
        chat = self._chat_folds.get(key)
        if chat is not None:
            chat.feed(events)

    def committed(self, key: SessionKey, events: list[Event]) -> None:
        """A driver committed ``events`` of ``key`` (its folds took them from the commit
        bus): live observers are told."""
        last = events[-1]
        self.hub.publish(
            LiveEvent(
                "committed", last.turn_id, last.run_id, {"session": str(key), "seq": last.seq}, key
            )
        )

    def publish(self, event: LiveEvent) -> None:
        """Tell this process's live observers (never blocks)."""
        self.hub.publish(event)

    def subscribe(self, maxsize: int = 1000, *, session: SessionKey | None = None) -> Subscription:
        """Live notifications of ``session`` (or of every session, None)."""
        return self.hub.subscribe(maxsize, session=session)

    def chat_folds(self, key: SessionKey) -> ChatFolds:
        """The one chat fold of ``key`` in this runtime: its sessions and its driver share it."""
        with self._chat_lock:  # not _lock: a Session being built under it asks for this
            folds = self._chat_folds.get(key)
            if folds is None:
                folds = self._chat_folds[key] = ChatFolds(self.store, key)
            return folds

    def session_keys(self) -> list[SessionKey]:
        """The sessions this runtime opened or executed (what its live exporter drains): the
        children its sub-agent calls made and ran here too."""
        executed = self._drivers.copy()  # changed on the loop thread; a copy is one step
        with self._lock:
            return list(dict.fromkeys([*self._sessions, *executed]))

    def stop(self, key: SessionKey, *, timeout: float = 10.0) -> None:
        """Stop dispatching ``key`` from this runtime and interrupt the run its driver
        executes (``Session.close``): cooperatively, at the run's next boundary, recorded
        as ``run/stop_requested`` and a ``run/end`` with ``stop_reason`` ``session_closed``.

        Returns once the driver ended. A sync tool still running after ``timeout`` seconds
        is left behind, as ``close`` does: the run ends interrupted, that call uncertain.
        """
        driver = self._drivers.get(key)
        if driver is None or self._closed:
            return
        if driver.task is None or driver.task.done() or not self._loop.is_running():
            driver.stopping = True
            return
        task = driver.task

        async def stop() -> None:
            driver.stopping = True
            driver.request_stop("the session was closed", "session_closed")
            driver.wake.set()
            _, pending = await asyncio.wait({task}, timeout=timeout)
            if pending:
                tool = driver.abandon_tool()
                if tool is not None:
                    log.warning(
                        "session %s closed: tool %s did not stop within %.1fs; its run ended "
                        "interrupted and the call is uncertain (reconcile it)",
                        key,
                        tool,
                        timeout,
                    )
                await asyncio.wait({task}, timeout=2.0)

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(timeout + 5)

    def all_events(self, maxsize: int = 1000) -> Subscription:
        """Live notifications of every session this runtime executes (``LiveEvent.session``
        says whose); ``session.events()`` has one session's only."""
        return self.hub.subscribe(maxsize)

    def serve(
        self,
        poll: float = 1.0,
        stop: threading.Event | None = None,
        *,
        concurrency: int = 16,
    ) -> None:
        """Execute queued work of this agent's sessions until ``stop`` is set.

        What ``agentnb worker`` runs; at most ``concurrency`` sessions execute at once. On a
        store with a pending-work index (``PendingWork``: PostgreSQL) it claims sessions that
        have work, woken when a command is accepted anywhere and every ``poll`` seconds (for
        sessions whose holder crashed, once their lease expires); the claim is the lease the
        session runs under, and a session is let go (its mark settled) once nothing is left
        to do. Many processes and machines can serve one store; each session executes in one
        place at a time. Other stores are scanned: every ``poll`` seconds each session is
        looked at, and one with work gets a driver (one machine). Once ``stop`` is set, the
        runs of this call are interrupted cooperatively, their ends committed and their leases
        released before it returns.
        """
        if not isinstance(poll, int | float) or isinstance(poll, bool) or not 0 < poll <= 3600:
            raise InvalidInput(f"poll must be seconds in (0, 3600], got {poll!r}")
        if (
            not isinstance(concurrency, int)
            or isinstance(concurrency, bool)
            or not 1 <= concurrency <= 1000
        ):
            raise InvalidInput(f"concurrency must be an int in 1..1000, got {concurrency!r}")
        if self._workers:
            raise InvalidInput(
                f"this runtime's {len(self._workers)} worker processes execute (processes="
                f"{self.processes}); serve() needs a runtime made with processes=1"
            )
        if not self.execute:
            raise InvalidInput(
                "this runtime was made with execute=False (it only submits and observes); "
                "serve() needs a runtime that executes"
            )
        self.check_open()
        stop = stop or threading.Event()
        store = self.store
        halt = threading.Event()  # tells this call's session loops to let go
        wake = _Wakeups()
        working: dict[SessionKey, concurrent.futures.Future[None]] = {}
        claims = store if isinstance(store, PendingWork) else None
        unwatch = claims.watch_pending(wake.accepted) if claims is not None else None
        self._pooled += claims is not None
        next_pass = 0.0
        owed = False  # a claim or scan pass fell due while every slot was busy
        scan: list[SessionKey] = []  # without an index: the sessions this round still looks at
        try:
            while not stop.is_set() and not self._closed:
                # Taken before the slots are counted: a slot freed or work accepted from here
                # on sets it again. With every slot busy, a wake-up waits for a free slot
                # (its callback wakes this loop) instead of spinning the loop.
                woken, keys = wake.take()
                wake_keys: set[SessionKey] | None = keys
                for key in [k for k, f in working.items() if f.done()]:
                    del working[key]
                # A session whose run waits for its sub-agents' children holds no slot: the
                # children it waits for take slots of this pool.
                free = concurrency - sum(1 for k in working if not self._waits_for_children(k))
                if time.monotonic() >= next_pass:
                    next_pass = time.monotonic() + poll
                    owed = True
                    wake_keys = None  # every lingering driver looks for commands now and
                    # then: a store without notifications tells of none
                if (woken or owed) and free > 0:
                    if claims is None and owed and not scan:
                        scan = self._all_sessions()
                    owed = False
                    if claims is not None and wake_keys is None:  # a poll pass
                        self._release_dead_holders(claims)
                    for key, lease in self._next_sessions(claims, free, working, scan):
                        future = asyncio.run_coroutine_threadsafe(
                            self._work_on(key, lease, halt, claims), self._loop
                        )
                        future.add_done_callback(lambda _: wake.slot_freed())
                        working[key] = future
                if wake_keys is None or wake_keys:
                    # Commands for sessions held here (their drivers linger) are seen now;
                    # only those sessions' drivers look, not every driver for every command.
                    self._loop.call_soon_threadsafe(self._wake_drivers, wake_keys)
                wake.wait(min(poll, 0.1))  # short: ``stop`` has no way to wake this
        finally:
            self._pooled -= claims is not None
            if unwatch is not None:
                unwatch()
            halt.set()
            self._let_go(list(working.values()))

    def _all_sessions(self) -> list[SessionKey]:
        try:
            return [
                r.key
                for agent_id in self.agents
                for r in self.store.list_sessions(namespace=self.namespace, agent_id=agent_id)
            ]
        except StorageError as exc:  # the store is away: the next pass tries again
            log.warning("worker: could not list sessions: %s", describe(exc))
            return []

    def _next_sessions(
        self,
        claims: PendingWork | None,
        free: int,
        working: dict[SessionKey, concurrent.futures.Future[None]],
        scan: list[SessionKey],
    ) -> list[tuple[SessionKey, Lease | None]]:
        """The sessions to work on next: claimed ones with their lease, or (no index) the
        next ones of this round's scan, each looked at in a free slot."""
        if claims is None:
            taken: list[tuple[SessionKey, Lease | None]] = []
            while scan and len(taken) < free:
                key = scan.pop(0)
                if key not in working:
                    taken.append((key, None))
            return taken
        leases: list[Lease] = []
        try:
            # The sessions of every agent it executes: its own and its sub-agents' children.
            for agent_id in self.agents:
                if len(leases) >= free:
                    break
                leases += claims.claim_pending(
                    self.owner,
                    ttl=self.lease_ttl,
                    limit=free - len(leases),
                    agent_id=agent_id,
                    namespace=self.namespace,
                )
        except StorageError as exc:  # the store is away: the next pass tries again
            log.warning("worker: could not look for work: %s", describe(exc))
        return [(lease.key, lease) for lease in leases]

    def _release_dead_holders(self, claims: PendingWork) -> None:
        """Release the leases of sessions with queued work whose holder is known dead (a
        process of this host that is gone, ``kill -9``), each at its exact epoch: they are
        claimed now instead of once their leases expire."""
        try:
            held = [
                lease
                for agent_id in self.agents  # its own sessions and its sub-agents' children
                for lease in claims.held_pending(agent_id=agent_id, namespace=self.namespace)
            ]
            for lease in held:
                if holder_alive(lease.owner) is False:
                    log.info("worker: session %s: its holder %s is dead", lease.key, lease.owner)
                    with contextlib.suppress(Fenced):
                        self.store.release_lease(lease)
        except StorageError as exc:  # the store is away: the next pass tries again
            log.warning("worker: could not look for dead holders: %s", describe(exc))

    def _waits_for_children(self, key: SessionKey) -> bool:
        driver = self._drivers.get(key)
        return driver is not None and driver.waits_for_children

    def hand_off(self, key: SessionKey) -> None:
        """Make sure another session's accepted work is dispatched (a sub-agent's child, a
        parent its child woke): here, or, while this runtime serves a pool of workers
        (``serve`` on a store with a pending-work index), by whichever worker claims it."""
        if self._pooled:
            self._loop.call_soon_threadsafe(self._wake_drivers, {key})
            return
        self.kick(key)

    def _wake_drivers(self, keys: set[SessionKey] | None = None) -> None:
        """Wake the live drivers of ``keys`` (None: every one) to look at their inboxes."""
        drivers = self._drivers
        for driver in list(drivers.values()) if keys is None else map(drivers.get, keys):
            if driver is not None and driver.task is not None and not driver.task.done():
                driver.wake.set()

    def _let_go(self, futures: list[concurrent.futures.Future[None]]) -> None:
        """Interrupt the runs of ``serve``'s sessions, wait for their ends and releases."""
        if not futures or self._closed:
            return

        def interrupt() -> None:
            for driver in self._drivers.values():
                if driver.task is not None and not driver.task.done():
                    driver.stopping = True
                    # Not the user's stop: the run's end queues its resume (recipes.finish)
                    # for the next worker that claims the session.
                    driver.request_stop("the worker is stopping", WORKER_STOPPING)
                    driver.wake.set()

        self._loop.call_soon_threadsafe(interrupt)
        concurrent.futures.wait(futures, timeout=SERVE_STOP_TIMEOUT)

    async def _work_on(
        self,
        key: SessionKey,
        lease: Lease | None,
        halt: threading.Event,
        claims: PendingWork | None,
    ) -> None:
        """Execute one session's work: under ``lease`` when claimed (its driver adopts it:
        same owner), else under the lease its driver takes. Claimed, it is let go only when
        its mark is settled, so work accepted meanwhile is never left unclaimed."""
        fresh = False
        try:
            while not halt.is_set() and not self._closed:
                work, lease = await asyncio.to_thread(self._look, key, lease, claims, fresh)
                if not work:
                    return
                driver = self._ensure_driver(key, lease=lease)
                if driver.task is not None:
                    await asyncio.wait({driver.task})
                if driver.given_up is not None or lease is None:
                    return  # a broken store: the next pass (or claim) tries again
                if driver.lent_back is not None:
                    lease = driver.lent_back  # idle: settle or go on under it
                    fresh = not driver.stopping and driver.reusable_folds is not None
                    continue
                try:  # the driver released it; take it back to settle or go on
                    lease = await asyncio.to_thread(
                        self.store.acquire_lease, key, self.owner, self.lease_ttl
                    )
                except LeaseHeld:
                    lease = None  # another worker took over: it settles
                    return
        except Exception as exc:  # noqa: BLE001 - the session stays marked: claimed again
            log.warning("worker: session %s: %s", key, describe(exc))
        finally:
            if lease is not None:
                with contextlib.suppress(StorageError, RuntimeError):
                    await asyncio.to_thread(self.store.release_lease, lease)

    def _look(
        self,
        key: SessionKey,
        lease: Lease | None,
        claims: PendingWork | None,
        fresh: bool = False,
    ) -> tuple[bool, Lease | None]:
        """In a worker thread: (whether ``key`` has work, the lease still held). Without work
        a claimed session's mark is settled and its lease released. ``fresh``: the session's
        driver just read both logs under ``lease`` and found nothing to do."""
        folds = self._take_folds(key) or Folds(self.store, key, limits=self.limits)
        try:
            return self._look_at(key, folds, lease, claims, fresh)
        finally:
            self._keep_folds(key, folds)  # a failed refresh leaves a consistent prefix

    def _look_at(
        self,
        key: SessionKey,
        folds: Folds,
        lease: Lease | None,
        claims: PendingWork | None,
        fresh: bool,
    ) -> tuple[bool, Lease | None]:
        while True:
            if not (fresh and folds.holds_known()):
                folds.refresh()
            fresh = False  # settling is conditioned on the inbox head the look decided on
            # An open run nobody executes was cut off by a crash: its driver recovers it.
            work = next_command(folds.inbox, folds.state) is not None
            if work or folds.state.active_run is not None:
                return True, lease
            if lease is None or claims is None:
                return False, lease
            if claims.settle_pending(lease, folds.inbox.seq, release=True):
                return False, None
            # A command came after the fold, or the lease ran out: look again, under it.
            lease = self.store.acquire_lease(key, self.owner, self.lease_ttl)

    def executing(self, key: SessionKey) -> bool:
        """Whether this runtime has a driver working on ``key`` now."""
        return self.active(key)

    def sole_writer(self, key: SessionKey) -> bool:
        """Whether this runtime's driver of ``key`` holds its lease now."""
        driver = self._drivers.get(key)
        return driver is not None and driver.holds_lease

    def active(self, key: SessionKey) -> bool:
        """Whether this runtime has a driver working on ``key`` now (or one kicked that is
        about to)."""
        if self._kicked.get(key):
            return True
        driver = self._drivers.get(key)
        return driver is not None and driver.task is not None and not driver.task.done()

    def check_open(self) -> None:
        """Raise ``StorageError`` once the runtime is closed."""
        if self._closed:
            raise StorageError("this runtime is closed; create a new nb.Runtime")

    def close(self, timeout: float = 10.0) -> None:
        """Stop scheduling; interrupt active runs and commit their ends; release the leases.

        Runs stop cooperatively at their next boundary (``run/stop_requested`` with the
        reason, then the run's end). A sync tool still running after ``timeout`` seconds is
        left behind: its run ends interrupted with that call uncertain, and a warning names
        it. Committed data stays. At interpreter exit, runtimes left open are closed the
        same way without waiting for sync tools (``EXIT_TOOL_GRACE``).
        """
        if self._stop_all("the runtime was closed", timeout, timeout):
            raise KeyboardInterrupt("stopped waiting for the runs to end") from None

    def _shut_down(self, reason: str, timeout: float = EXIT_CLOSE_TIMEOUT) -> bool:
        """``close`` for a process on its way out (interpreter exit, Ctrl-C out of a
        ``with`` block): the runs' ends record ``reason``, and a sync tool still running
        after ``EXIT_TOOL_GRACE`` seconds is left behind at once (its thread dies with the
        process). True if a Ctrl-C cut the wait short (what was not recorded then is
        recovered as interrupted later)."""
        return self._stop_all(reason, timeout, min(timeout, EXIT_TOOL_GRACE))

    async def _stop_runs(
        self, reason: str, timeout: float, tool_grace: float, abandoned: list[str]
    ) -> None:
        """On the loop: stop every driver's run with ``reason``; after ``tool_grace`` seconds
        leave sync tools behind (named in ``abandoned``); then close the model's pool and
        wait for the store calls in worker threads."""
        tasks = []
        for driver in self._drivers.values():
            driver.stopping = True
            driver.request_stop(reason, "runtime_closed")
            driver.wake.set()
            if driver.task is not None and not driver.task.done():
                tasks.append(driver.task)
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=tool_grace)
            if pending:
                # Sync tools that ignore the stop: end their runs without them.
                for driver in self._drivers.values():
                    tool = driver.abandon_tool()
                    if tool is not None:
                        abandoned.append(f"{tool} in session {driver.key}")
                _, pending = await asyncio.wait(pending, timeout=max(2.0, timeout - tool_grace))
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=1.0)
        await self._close_toolsets()  # after the runs: their calls are over
        try:  # the model's connection pool lives on this loop
            await asyncio.wait_for(self.agent.model.aclose(), timeout)
        except Exception as exc:  # noqa: BLE001 - closing must go on
            log.warning("runtime close: the model did not close cleanly: %s", describe(exc))
        # Store calls run in worker threads, and cancelling a task does not stop its
        # thread: wait for them, so nothing uses the store once close() returns.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._loop.shutdown_default_executor(), timeout)

    def _stop_all(self, reason: str, timeout: float, tool_grace: float) -> bool:
        """Close: stop the runs with ``reason`` (waiting ``tool_grace`` seconds before
        leaving sync tools behind, ``timeout`` in all), release, close the loop and store.
        True if a KeyboardInterrupt ended the wait (swallowed: the caller decides)."""
        if self._closed:
            return False
        self._closed = True
        _open_runtimes.discard(self)
        if self._scheduler is not None:
            self._scheduler.stop()
        if self._workers:
            stop_workers(self._workers, timeout=max(timeout, STOP_TIMEOUT))
        abandoned: list[str] = []

        interrupted = False
        try:
            if self._loop.is_running():
                future = asyncio.run_coroutine_threadsafe(
                    self._stop_runs(reason, timeout, tool_grace, abandoned), self._loop
                )
                try:
                    future.result(2 * timeout + 5)
                except concurrent.futures.TimeoutError:
                    log.warning("runtime close: work still running after %.1fs", 2 * timeout)
                except KeyboardInterrupt:
                    interrupted = True  # stop waiting: the loop's thread is a daemon
            if abandoned:
                log.warning(
                    "runtime close: tool(s) still running after %.1fs were left behind: %s; "
                    "their runs ended interrupted and those calls are uncertain (reconcile "
                    "them)",
                    tool_grace,
                    ", ".join(abandoned),
                )
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=0.5 if interrupted else 5)
            if not self._loop.is_running() and not interrupted:
                self._loop.close()
            if self.exporter is not None:
                self.exporter.close()
            self._unwatch()
            if self._owns_store:
                self.store.close()
        return interrupted

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        if kind is not None and issubclass(kind, KeyboardInterrupt):
            # Ctrl-C out of the block: the process is on its way out; do not wait for tools.
            if self._shut_down("interrupted (Ctrl-C); resume() continues it"):
                raise KeyboardInterrupt(
                    "second Ctrl-C: stopped waiting for the runs to end; their turns are "
                    "recorded interrupted when the sessions are next opened"
                ) from None
            return
        self.close()

    def __repr__(self) -> str:
        return f"Runtime(agent={self.agent.agent_id!r}, store={self.store.url!r})"


def check_processes(processes: object, execute: bool) -> None:
    """``InvalidInput`` unless ``processes`` is a count of worker processes this runtime can
    fork."""
    if not isinstance(processes, int) or isinstance(processes, bool) or not 1 <= processes <= 64:
        raise InvalidInput(f"processes must be an int in 1..64, got {processes!r}")
    if processes > 1 and not execute:
        raise InvalidInput(
            "processes > 1 starts worker processes that execute; a runtime made with "
            "execute=False has none (leave processes at 1)"
        )


def shared_url(store: SessionStore) -> str:
    """The URL worker processes open ``store`` by; ``InvalidInput`` for a store only this
    process can see."""
    url = store.url
    if not url or url.startswith("memory:"):
        raise InvalidInput(
            "processes > 1 needs a store that processes share: an SQLite file "
            "(sqlite:///path.db) or PostgreSQL, not memory://"
        )
    return url


def _worker_target(
    agent: Agent, url: str, options: dict[str, Any]
) -> tuple[str, Callable[[threading.Event], None]]:
    """How the workers start (``processes.start_method``) and what each one serves: the
    agent itself when forked, its import path when spawned."""
    method = start_method()
    if method == "fork":
        return method, functools.partial(_serve_forked, agent, url, options)
    path = agent_path(agent)
    if path is None:
        if sys.platform == "linux" and not os.environ.get("AGENTNB_START_METHOD"):
            return "fork", functools.partial(_serve_forked, agent, url, options)
        raise InvalidInput(
            f"processes > 1 starts its workers with spawn here, and each imports the agent "
            f"{agent.agent_id!r} by its path, but no module holds it (defined in a notebook "
            "cell or `python -c`?): define it at the top level of a module (agents.py) and "
            "pass Runtime('agents:agent', processes=N), or run `agentnb worker --agent "
            "agents:agent` processes"
        )
    load_agent(path)  # fails here, in the parent, rather than in every worker
    return method, functools.partial(_serve_spawned, path, url, options)


def _serve_spawned(path: str, url: str, options: dict[str, Any], stop: threading.Event) -> None:
    """In a spawned worker process: import the agent by its path, serve it until ``stop``."""
    _serve_forked(load_agent(path), url, options, stop)


def _serve_forked(agent: Agent, url: str, options: dict[str, Any], stop: threading.Event) -> None:
    """In a worker process of ``Runtime(processes=N)``: serve the agent until ``stop``."""
    runtime = Runtime(agent, store=url, **options)
    try:
        runtime.serve(stop=stop)
    finally:
        runtime.close()
