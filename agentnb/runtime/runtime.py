"""``Runtime``: executes an agent's sessions in the background, on one store.

The face: construction, ``session`` / ``open`` / ``create`` / ``sessions``, and ``close``.
Its parts live beside it: the loop thread (``runtime/loop.py``), the drivers of the
sessions at work (``runtime/drivers.py``), the catalogue and lifecycle verbs
(``runtime/catalogue.py``), the worker loop and worker processes (``runtime/worker.py``),
and what ties the runtimes to the process: forks, twins, interpreter exit
(``runtime/hooks.py``). The execution of a session is in ``runtime/engine.py``.

Why it is over 600 lines: ``Runtime``'s docstring is the contract of every option
(DESIGN §7), and opening the agents' toolsets and closing (stop the runs, leave sync tools
behind, release, close the loop and store) are the construction and ``close`` it keeps.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from agentnb.agent import Agent, agents_of
from agentnb.errors import InvalidInput, SessionNotFound, describe
from agentnb.folds import ChatFolds, Folds
from agentnb.holders import new_owner
from agentnb.ids import SessionKey, check_id, new_id
from agentnb.limits import Limits
from agentnb.live import LiveHub
from agentnb.ops.schedules import Scheduler
from agentnb.records import SessionInfos
from agentnb.runtime import hooks
from agentnb.runtime.catalogue import (
    SESSION_STATUSES,
    Lifecycle,
    archive_session,
    check_archive,
    find_sessions,
    prunable,
    session_info,
    session_usage,
    unarchive_session,
)
from agentnb.runtime.engine import SessionDriver
from agentnb.runtime.hooks import (
    EXIT_CLOSE_TIMEOUT,
    EXIT_REASON,
    EXIT_TOOL_GRACE,
    SecondRuntimeWarning,
)
from agentnb.runtime.locate import load_agent
from agentnb.runtime.loop import start_loop
from agentnb.runtime.processes import STOP_TIMEOUT, WorkerProcess, start_workers, stop_workers
from agentnb.runtime.subagents import AgentHost
from agentnb.runtime.worker import (
    SERVE_STOP_TIMEOUT,
    PendingWork,
    Serving,
    check_processes,
    shared_url,
    worker_target,
)
from agentnb.session import Session
from agentnb.stores import SessionStore, open_store
from agentnb.stores.base import UNSET, check_labels, check_title, check_tombstone
from agentnb.tools import OpenToolset, Tool
from agentnb.workspace import Workspace

# The names below ``Runtime`` were defined here before its parts moved beside it; they
# still import from here (pyproject's filterwarnings names SecondRuntimeWarning so).
__all__ = [
    "EXIT_CLOSE_TIMEOUT",
    "EXIT_REASON",
    "EXIT_TOOL_GRACE",
    "SERVE_STOP_TIMEOUT",
    "SESSION_STATUSES",
    "PendingWork",
    "Runtime",
    "SecondRuntimeWarning",
    "archive_session",
    "check_archive",
    "check_processes",
    "find_sessions",
    "prunable",
    "session_info",
    "session_usage",
    "shared_url",
    "unarchive_session",
]

log = logging.getLogger("agentnb.runtime")


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


class Runtime(Lifecycle, Serving):
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
            hooks.warn_if_twin(agent.agent_id, namespace, self.store)
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
        self._loop, self._thread = start_loop(agent.agent_id)
        self._toolsets: list[OpenToolset] = []
        self._with_toolsets()
        from agentnb.export.live import LiveExporter  # optional: the export extra

        # Drains export_to in the background, for the sessions this runtime opened.
        self.exporter = LiveExporter.started(self.store, self.export_to, self.session_keys)
        self._scheduler: Scheduler | None = None
        self._scheduler_lock = threading.Lock()
        if _check_schedules(schedules):
            self._start_scheduler()
        hooks.track(self)

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
        method, serve = worker_target(Runtime, self.agent, url, options)
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

    def _session(self, key: SessionKey) -> Session:
        with self._lock:
            session = self._sessions.get(key)
            if session is None:
                agent = self.agent_for(key)
                # A sub-agent's child session reads and works with its own agent.
                host = self if agent is self.agent else AgentHost(self, agent)
                session = self._sessions[key] = Session(host, key)
            return session

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
        hooks.untrack(self)
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
