"""The runtime's sessions at work: one driver per executing session, on the runtime's loop.

``Drivers`` is the part of ``Runtime`` that starts a session's driver when work is accepted
(``kick``), keeps the folds a driver leaves for the next one, feeds the commit bus to the
session handles and chat folds, tells live observers, and stops a driver (``stop``).
``Runtime`` builds its fields; the worker loop (``runtime/worker.py``) and the catalogue
verbs (``runtime/catalogue.py``) build on it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING

from agentnb.agent import Agent
from agentnb.errors import SessionBusy, StorageError
from agentnb.events import Event
from agentnb.folds import ChatFolds, Folds
from agentnb.ids import SessionKey
from agentnb.limits import Limits
from agentnb.live import LiveEvent, LiveHub, Subscription
from agentnb.runtime.engine import SessionDriver
from agentnb.session import Session
from agentnb.stores import SessionStore
from agentnb.stores.base import Lease

__all__ = ["Drivers"]

log = logging.getLogger("agentnb.runtime")

_WORK_FOLDS = 1024
"""Folds ``serve`` keeps (least recently used) to tell cheaply whether a session has work."""


def _ended_clean(task: asyncio.Task[None]) -> bool:
    """Whether a driver's task ended without an error (its folds can be taken over)."""
    return task.done() and not task.cancelled() and task.exception() is None


class Drivers:
    """The drivers of a runtime's sessions, their folds, and the commits they hand on."""

    store: SessionStore
    agent: Agent
    agents: dict[str, Agent]
    owner: str
    namespace: str
    lease_ttl: float
    auto_resume: bool | str
    limits: Limits
    accept_agent_change: bool
    accept_workspace_change: bool
    execute: bool
    hub: LiveHub
    _loop: asyncio.AbstractEventLoop
    _closed: bool
    _lock: threading.Lock
    _drivers: dict[SessionKey, SessionDriver]
    _kicked: dict[SessionKey, int]
    _sessions: dict[SessionKey, Session]
    _chat_folds: dict[SessionKey, ChatFolds]
    _chat_lock: threading.Lock
    _work_folds: OrderedDict[SessionKey, Folds]
    _work_folds_lock: threading.Lock

    if TYPE_CHECKING:

        def agent_for(self, key: SessionKey) -> Agent: ...

        def hand_off(self, key: SessionKey) -> None: ...

        def _session(self, key: SessionKey) -> Session: ...

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
