"""The worker loop: ``Runtime.serve``, and the worker processes of ``Runtime(processes=N)``.

``serve`` (what ``agentnb worker`` runs) claims sessions with queued work through the store's
``WorkClaims`` role (every store has it: SQLite and PostgreSQL keep a pending-work index,
others claim from their inbox and leases) and executes each in a slot of its pool until it
is told to stop. A session claimed is let
go only once its mark is settled, so work accepted meanwhile is never left unclaimed.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from agentnb.agent import Agent
from agentnb.errors import Fenced, InvalidInput, LeaseHeld, StorageError, describe
from agentnb.folds import Folds
from agentnb.holders import holder_alive
from agentnb.ids import SessionKey
from agentnb.projections.state import next_command
from agentnb.runtime.drivers import Drivers
from agentnb.runtime.locate import agent_path, load_agent
from agentnb.runtime.processes import WorkerProcess, start_method
from agentnb.runtime.recipes import WORKER_STOPPING
from agentnb.stores import SessionStore
from agentnb.stores.base import Lease
from agentnb.stores.ports.claims import WorkClaims

__all__ = [
    "SERVE_STOP_TIMEOUT",
    "PendingWork",
    "Serving",
    "check_processes",
    "shared_url",
    "worker_target",
]

log = logging.getLogger("agentnb.runtime")

SERVE_STOP_TIMEOUT = 10.0
"""Seconds ``serve`` gives its sessions' runs to stop and release once ``stop`` is set."""


PendingWork = WorkClaims
"""The store role ``serve`` claims work through (its older name)."""


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


class Serving(Drivers):
    """``Runtime.serve``: execute queued work of the runtime's sessions in a pool."""

    processes: int
    _workers: list[WorkerProcess]
    _pooled: int
    """How many ``serve`` calls claim work from a pool now (their children are too)."""

    def serve(
        self,
        poll: float = 1.0,
        stop: threading.Event | None = None,
        *,
        concurrency: int = 16,
    ) -> None:
        """Execute queued work of this agent's sessions until ``stop`` is set.

        What ``agentnb worker`` runs; at most ``concurrency`` sessions execute at once. It
        claims sessions that have work (the store's ``WorkClaims``), woken when a command is
        accepted and every ``poll`` seconds (for sessions whose holder crashed, once their
        lease expires); the claim is the lease the session runs under, and a session is let
        go (its mark settled) once nothing is left to do. Many processes and machines can
        serve one shared store; each session executes in one place at a time. Once ``stop``
        is set, the runs of this call are interrupted cooperatively, their ends committed and
        their leases released before it returns.
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
        claims: WorkClaims = store
        unwatch = claims.watch_pending(wake.accepted)
        self._pooled += 1
        next_pass = 0.0
        owed = False  # a claim pass fell due while every slot was busy
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
                    owed = False
                    if wake_keys is None:  # a poll pass
                        self._release_dead_holders(claims)
                    for key, lease in self._next_sessions(claims, free):
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
            self._pooled -= 1
            unwatch()
            halt.set()
            self._let_go(list(working.values()))

    def _next_sessions(self, claims: WorkClaims, free: int) -> list[tuple[SessionKey, Lease]]:
        """The sessions to work on next, claimed with their lease, one per free slot."""
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

    def _release_dead_holders(self, claims: WorkClaims) -> None:
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
        (``serve``), by whichever worker claims it."""
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
        claims: WorkClaims,
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
        claims: WorkClaims,
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
        claims: WorkClaims,
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
            if lease is None:
                return False, lease
            if claims.settle_pending(lease, folds.inbox.seq, release=True):
                return False, None
            # A command came after the fold, or the lease ran out: look again, under it.
            lease = self.store.acquire_lease(key, self.owner, self.lease_ttl)


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


class Served(Protocol):
    """What a worker process makes to serve: a runtime (``Runtime`` is one)."""

    def serve(self, poll: float = ..., stop: threading.Event | None = ...) -> None:
        """Execute queued work until ``stop`` is set."""

    def close(self, timeout: float = ...) -> None:
        """Stop and release."""


Make = Callable[..., Served]
"""``make(agent, store=url, **options)``: the runtime a worker process serves with (the
``Runtime`` class, handed down so that this module need not import it)."""


def worker_target(
    make: Make, agent: Agent, url: str, options: dict[str, Any]
) -> tuple[str, Callable[[threading.Event], None]]:
    """How the workers start (``processes.start_method``) and what each one serves: the
    agent itself when forked, its import path when spawned (``make`` is pickled by its
    name then)."""
    method = start_method()
    if method == "fork":
        return method, functools.partial(_serve_forked, make, agent, url, options)
    path = agent_path(agent)
    if path is None:
        if sys.platform == "linux" and not os.environ.get("AGENTNB_START_METHOD"):
            return "fork", functools.partial(_serve_forked, make, agent, url, options)
        raise InvalidInput(
            f"processes > 1 starts its workers with spawn here, and each imports the agent "
            f"{agent.agent_id!r} by its path, but no module holds it (defined in a notebook "
            "cell or `python -c`?): define it at the top level of a module (agents.py) and "
            "pass Runtime('agents:agent', processes=N), or run `agentnb worker --agent "
            "agents:agent` processes"
        )
    load_agent(path)  # fails here, in the parent, rather than in every worker
    return method, functools.partial(_serve_spawned, make, path, url, options)


def _serve_spawned(
    make: Make, path: str, url: str, options: dict[str, Any], stop: threading.Event
) -> None:
    """In a spawned worker process: import the agent by its path, serve it until ``stop``."""
    _serve_forked(make, load_agent(path), url, options, stop)


def _serve_forked(
    make: Make, agent: Agent, url: str, options: dict[str, Any], stop: threading.Event
) -> None:
    """In a worker process of ``Runtime(processes=N)``: serve the agent until ``stop``."""
    runtime = make(agent, store=url, **options)
    try:
        runtime.serve(stop=stop)
    finally:
        runtime.close()
