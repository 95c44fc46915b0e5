"""``Runtime``: one background thread with its own asyncio loop that executes sessions.

Work goes on while notebook cells run, and every sync call works inside Jupyter without
nesting event loops: callers hand coroutines to the runtime's loop and wait on a future.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import functools
import logging
import threading
import weakref
from collections.abc import Iterable
from typing import Any, TypeVar

from agentnb.agent import Agent
from agentnb.errors import InvalidInput, SessionNotFound, StorageError, describe
from agentnb.events import Event
from agentnb.folds import ChatFolds
from agentnb.holders import new_owner
from agentnb.ids import SessionKey, check_id
from agentnb.live import LiveEvent, LiveHub, Subscription
from agentnb.runtime.engine import SessionDriver
from agentnb.session import Session
from agentnb.stores import SessionStore, open_store

__all__ = ["Runtime"]

T = TypeVar("T")

log = logging.getLogger("agentnb.runtime")

_open_runtimes: weakref.WeakSet[Runtime] = weakref.WeakSet()
_exit_hook_lock = threading.Lock()
_exit_hook_installed = False

EXIT_CLOSE_TIMEOUT = 5.0
"""Seconds a runtime still open at interpreter exit gets to stop its runs and release."""


def _close_at_exit() -> None:
    for runtime in list(_open_runtimes):
        try:
            runtime.close(timeout=EXIT_CLOSE_TIMEOUT)
        except Exception:
            log.exception("closing %r at interpreter exit failed", runtime)


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


class Runtime:
    """Executes an agent's sessions in the background, on one store.

    ``store`` is a URL (``sqlite:///path.db``, ``memory://``) or a ``SessionStore``; the
    default is SQLite under ``./.agentnb/``. A session executes only while this runtime holds
    its lease (``lease_ttl`` seconds, renewed every third of that).
    """

    def __init__(
        self,
        agent: Agent,
        store: str | SessionStore | None = None,
        *,
        lease_ttl: float = 10.0,
        auto_resume: bool = False,
        export_to: Iterable[Any] = (),
        namespace: str = "default",
    ) -> None:
        if not isinstance(agent, Agent):
            raise InvalidInput(f"agent must be an nb.Agent, got {type(agent).__name__}")
        if not isinstance(lease_ttl, int | float) or not 0.2 <= lease_ttl <= 3600:
            raise InvalidInput(f"lease_ttl must be seconds in [0.2, 3600], got {lease_ttl!r}")
        self.agent = agent
        self._owns_store = not isinstance(store, SessionStore)
        self.store = open_store(store)
        self.lease_ttl = float(lease_ttl)
        self.auto_resume = bool(auto_resume)
        self.export_to = tuple(export_to)
        self.namespace = check_id(namespace, "namespace")
        self.owner = new_owner()
        self.hub = LiveHub()
        self._drivers: dict[SessionKey, SessionDriver] = {}
        self._sessions: dict[SessionKey, Session] = {}
        self._chat_folds: dict[SessionKey, ChatFolds] = {}
        self._chat_lock = threading.Lock()
        self._lock = threading.Lock()
        self._closed = False
        self._loop = asyncio.new_event_loop()
        # Store calls run in worker threads; each running session also keeps one waiting for
        # interrupts, so the default pool of min(32, cpus + 4) threads is too small.
        self._loop.set_default_executor(
            concurrent.futures.ThreadPoolExecutor(max_workers=64, thread_name_prefix="agentnb")
        )
        self._thread = threading.Thread(
            target=self._loop.run_forever, daemon=True, name=f"agentnb-runtime-{agent.agent_id}"
        )
        self._thread.start()
        from agentnb.export.live import LiveExporter  # optional: the export extra

        # Drains export_to in the background, for the sessions this runtime opened.
        self.exporter = LiveExporter.started(self.store, self.export_to, self.session_keys)
        _open_runtimes.add(self)
        _install_exit_hook()

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

    def open(self, session_id: str, user_id: str = "default") -> Session:
        """An existing session; ``SessionNotFound`` if it was never created."""
        self.check_open()
        key = self._key(session_id, user_id)
        if self.store.get_session(key) is None:
            raise SessionNotFound(
                f"no session {session_id!r} for user {user_id!r} and agent "
                f"{self.agent.agent_id!r}; create it with "
                "runtime.session(...)"
            )
        return self._session(key)

    def sessions(self, user_id: str | None = None) -> list[SessionKey]:
        """Keys of this agent's sessions (of ``user_id`` if given), oldest first."""
        records = self.store.list_sessions(
            namespace=self.namespace, user_id=user_id, agent_id=self.agent.agent_id
        )
        return [r.key for r in records]

    def _session(self, key: SessionKey) -> Session:
        with self._lock:
            session = self._sessions.get(key)
            if session is None:
                session = self._sessions[key] = Session(self, key)
            return session

    # -- the loop ----------------------------------------------------------------------------

    def kick(self, key: SessionKey) -> None:
        """Make sure a driver dispatches the session's accepted work (non-blocking)."""
        if self._closed:
            return
        driver = self._drivers.get(key)
        if driver is not None:
            driver.given_up = None  # asked to try again: waiters wait for the new attempt
        self._loop.call_soon_threadsafe(self._ensure_driver, key)

    def _ensure_driver(self, key: SessionKey) -> None:
        driver = self._drivers.get(key)
        if driver is not None and driver.task is not None and not driver.task.done():
            driver.wake.set()
            return
        driver = SessionDriver(self, key)
        self._drivers[key] = driver
        driver.task = self._loop.create_task(driver.run(), name=f"agentnb-session-{key}")
        driver.task.add_done_callback(functools.partial(self._driver_done, driver))

    def _driver_done(self, driver: SessionDriver, task: asyncio.Task[None]) -> None:
        """A driver ended: an error that escaped it is logged and kept for waiters."""
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            log.error("session %s: execution stopped by an error", driver.key, exc_info=exc)
            driver.given_up = describe(exc)

    def failure(self, key: SessionKey) -> str | None:
        """Why this runtime stopped executing ``key`` after an error, while nothing runs it.

        None when it executes the session now or never gave it up. ``Session.wait`` raises
        it instead of waiting for work nobody will do.
        """
        driver = self._drivers.get(key)
        if driver is None or self.active(key):
            return None
        return driver.given_up

    def committed(self, key: SessionKey, events: list[Event]) -> None:
        """A driver committed ``events`` of ``key``: the session's fold takes them as they
        are (nobody reads them back), and live observers are told."""
        session = self._sessions.get(key)
        if session is not None:
            session.feed(events)
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
        """The sessions this runtime opened (what its live exporter drains)."""
        with self._lock:
            return list(self._sessions)

    def stop(self, key: SessionKey) -> None:
        """Stop dispatching ``key`` from this runtime (its driver finishes what it does)."""
        driver = self._drivers.get(key)
        if driver is not None:
            driver.stopping = True

    def all_events(self, maxsize: int = 1000) -> Subscription:
        """Live notifications of every session this runtime executes (``LiveEvent.session``
        says whose); ``session.events()`` has one session's only."""
        return self.hub.subscribe(maxsize)

    def serve(self, poll: float = 1.0, stop: threading.Event | None = None) -> None:
        """Execute queued work of every session of this agent until ``stop`` is set.

        What ``agentnb worker`` runs: every ``poll`` seconds each session is offered to a
        driver, which takes its lease only when it has work (or a crashed run to recover).
        """
        stop = stop or threading.Event()
        while not stop.is_set() and not self._closed:
            for key in self.sessions():
                self.kick(key)
            stop.wait(poll)

    def executing(self, key: SessionKey) -> bool:
        """Whether this runtime has a driver working on ``key`` now."""
        return self.active(key)

    def active(self, key: SessionKey) -> bool:
        """Whether this runtime has a driver working on ``key`` now."""
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
        it. Committed data stays. Also called at interpreter exit for runtimes left open.
        """
        if self._closed:
            return
        self._closed = True
        _open_runtimes.discard(self)
        abandoned: list[str] = []

        async def stop_all() -> None:
            tasks = []
            for driver in self._drivers.values():
                driver.stopping = True
                driver.request_stop("the runtime was closed")
                driver.wake.set()
                if driver.task is not None and not driver.task.done():
                    tasks.append(driver.task)
            if tasks:
                _, pending = await asyncio.wait(tasks, timeout=timeout)
                if pending:
                    # Sync tools that ignore the stop: end their runs without them.
                    for driver in self._drivers.values():
                        tool = driver.abandon_tool()
                        if tool is not None:
                            abandoned.append(f"{tool} in session {driver.key}")
                    _, pending = await asyncio.wait(pending, timeout=2.0)
                for task in pending:
                    task.cancel()
                if pending:
                    await asyncio.wait(pending, timeout=1.0)
            try:  # the model's connection pool lives on this loop
                await asyncio.wait_for(self.agent.model.aclose(), timeout)
            except Exception as exc:  # noqa: BLE001 - closing must go on
                log.warning("runtime close: the model did not close cleanly: %s", describe(exc))
            # Store calls run in worker threads, and cancelling a task does not stop its
            # thread: wait for them, so nothing uses the store once close() returns.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._loop.shutdown_default_executor(), timeout)

        try:
            if self._loop.is_running():
                future = asyncio.run_coroutine_threadsafe(stop_all(), self._loop)
                try:
                    future.result(2 * timeout + 5)
                except concurrent.futures.TimeoutError:
                    log.warning("runtime close: work still running after %.1fs", 2 * timeout)
            if abandoned:
                log.warning(
                    "runtime close: tool(s) did not stop within %.1fs: %s; their runs ended "
                    "interrupted and those calls are uncertain (reconcile them)",
                    timeout,
                    ", ".join(abandoned),
                )
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
            if not self._loop.is_running():
                self._loop.close()
            if self.exporter is not None:
                self.exporter.close()
            if self._owns_store:
                self.store.close()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Runtime(agent={self.agent.agent_id!r}, store={self.store.url!r})"
