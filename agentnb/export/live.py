"""``LiveExporter``: drains committed events into sinks on a background thread.

``Runtime(agent, export_to=[sink])`` starts one. It wakes after commits, lingers a moment so
that several commits share one ``accept`` (fewer, larger files), and passes at most once
every ``interval`` seconds (1 s: a sink is about a second behind at most, and a busy session
costs one set of files a second, not one per commit; ``flush`` does not wait for it), and
drains with an
``Exporter`` per sink, so the watermark rules (at least once, resumable) are the same as for a
manual drain. It never runs on the runtime's loop: a slow or failing sink cannot slow or
block the agent. A failing sink is retried with exponential backoff (with jitter); its error
and lag are shown by ``status()``; nothing is lost, since the watermark only moves after a
successful ``accept``.

The events this process commits come to it by the store's commit bus as they were
committed: a drain hands them to the sinks without reading them back (``HELD_EVENTS`` per
session at most). The store is read for the rest: a start after a restart, a gap, a sink
far behind, other processes' commits.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from agentnb.errors import AgentnbError, InvalidInput, SessionDeleted
from agentnb.events import Event
from agentnb.export.base import Exporter, ExportSink
from agentnb.ids import SessionKey
from agentnb.stores.base import SessionStore

__all__ = ["HELD_EVENTS", "ExportStatus", "LiveExporter"]

log = logging.getLogger("agentnb.export")

HELD_EVENTS = 50_000
"""Events of one session a live exporter holds from the commit bus for its next drain;
past it (a sink far behind) the drain reads them from the store."""


@dataclass(frozen=True, slots=True)
class ExportStatus:
    """How one sink keeps up: ``lag`` events behind; the last error while it is failing."""

    sink: str
    lag: int
    delivered: int
    failures: int
    """Consecutive failed drains (0 when the last drain succeeded)."""
    last_error: str | None
    """The error of the last failed drain, None once a drain succeeded again."""
    retry_in: float | None
    """Seconds until the next attempt while backing off, else None."""
    tombstones: int = 0
    """Deleted sessions whose rows the sink still holds (counted up to 100)."""


@dataclass
class _SinkState:
    sink: ExportSink
    delivered: int = 0
    failures: int = 0
    last_error: str | None = None
    retry_at: float = 0.0


class LiveExporter:
    """Keeps ``sinks`` up to date with the sessions ``keys()`` names (every session if None)."""

    def __init__(
        self,
        store: SessionStore,
        sinks: Sequence[ExportSink],
        *,
        keys: Callable[[], Iterable[SessionKey]] | None = None,
        linger: float = 0.05,
        interval: float = 1.0,
        poll_interval: float = 0.25,
        retry_initial: float = 0.5,
        retry_max: float = 30.0,
        batch_size: int = 10_000,
    ) -> None:
        for sink in sinks:
            if not isinstance(sink, ExportSink):
                raise InvalidInput(
                    f"export_to takes sinks (a name and accept(events)), got {type(sink).__name__}"
                )
        names = [s.name for s in sinks]
        if len(set(names)) != len(names):
            raise InvalidInput(f"two export sinks share a name: {names}; give each its own")
        self.store = store
        self._states = [_SinkState(s) for s in sinks]
        self._keys = keys
        self.linger = linger
        self.interval = interval
        self.poll_interval = poll_interval
        self.retry_initial = retry_initial
        self.retry_max = retry_max
        self.batch_size = batch_size
        self._wake = threading.Event()
        self._urgent = threading.Event()
        """Set by ``flush`` and ``close``: the next pass does not wait for ``interval``."""
        self._last_pass = 0.0
        self._stop = threading.Event()
        self._idle = threading.Condition()
        self._passes = 0
        self._thread: threading.Thread | None = None
        self._held: dict[SessionKey, list[Event]] = {}
        """Per session, the newest gapless run of events this process committed (from the
        store's commit bus): what the next drain hands the sinks without reading them back."""
        self._held_lock = threading.Lock()
        self._unwatch: Callable[[], None] | None = None

    @classmethod
    def started(
        cls,
        store: SessionStore,
        sinks: Sequence[ExportSink],
        keys: Callable[[], list[SessionKey]],
    ) -> LiveExporter | None:
        """A running exporter of ``keys()``' sessions to ``sinks`` (None when there are none);
        what a runtime starts for its ``export_to``."""
        if not sinks:
            return None
        exporter = cls(store, list(sinks), keys=keys)
        exporter.start()
        return exporter

    # -- control -----------------------------------------------------------------------------

    def start(self) -> None:
        if self._unwatch is None:
            self._unwatch = self.store.bus.watch(None, self._on_commit)
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, daemon=True, name="agentnb-export")
            self._thread.start()

    def notify(self) -> None:
        """Something was committed: drain soon (optional; commits are also noticed by polling)."""
        self._wake.set()

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every sink has caught up with the heads now; False on timeout or failure."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(s.lag == 0 and s.tombstones == 0 for s in self.status()):
                return True
            with self._idle:
                seen = self._passes
                self._urgent.set()
                self._wake.set()
                self._idle.wait_for(
                    lambda seen=seen: self._passes > seen or self._stop.is_set(),  # type: ignore[misc]
                    max(0.0, min(0.5, deadline - time.monotonic())),
                )
        return all(s.lag == 0 and s.tombstones == 0 for s in self.status())

    def close(self, timeout: float = 5.0) -> None:
        """Stop after one last drain (bounded by ``timeout``); undelivered events stay undelivered
        and are exported by the next drain (their watermark did not move)."""
        if self._thread is None:
            return
        self._stop.set()
        self._urgent.set()
        self._wake.set()
        self._thread.join(timeout)
        self._thread = None
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None
        with self._held_lock:
            self._held.clear()

    def status(self, key: SessionKey | None = None) -> tuple[ExportStatus, ...]:
        """One ``ExportStatus`` per sink; ``lag`` for ``key`` only when given."""
        now = time.monotonic()
        out = []
        for state in self._states:
            try:
                exporter = self._exporter(state.sink, key)
                lag = exporter.lag()
                tombstones = exporter.tombstone_lag()
            except Exception:  # noqa: BLE001 - status must not raise for a closed store
                lag, tombstones = -1, -1
            out.append(
                ExportStatus(
                    state.sink.name,
                    lag,
                    state.delivered,
                    state.failures,
                    state.last_error,
                    round(state.retry_at - now, 3) if state.retry_at > now else None,
                    tombstones,
                )
            )
        return tuple(out)

    # -- the commit bus (the committer's thread: never blocks) -----------------------------

    def _on_commit(self, key: SessionKey, batch: Sequence[Event]) -> None:
        with self._held_lock:
            run = self._held.get(key)
            if run is None or (run and run[-1].seq + 1 != batch[0].seq):
                run = self._held[key] = []  # a gap (a commit the bus did not carry): the store
            if len(run) + len(batch) > HELD_EVENTS:
                run.clear()  # a drain far behind reads the store; the bus never waits for it
            if len(batch) <= HELD_EVENTS:
                run.extend(batch)
        self._wake.set()

    def _take_held(self, key: SessionKey, after: int, limit: int) -> list[Event] | None:
        """The held events of ``key`` after ``after`` (at most ``limit``), when the run held
        covers the next one; else None (the drain reads the store)."""
        with self._held_lock:
            run = self._held.get(key)
            if not run or run[0].seq > after + 1 or run[-1].seq <= after:
                return None
            start = after + 1 - run[0].seq
            return run[start : start + limit]

    def _trim_held(self, cut: dict[SessionKey, int]) -> None:
        """After a pass every sink took: drop what it delivered (at or below ``cut``, the
        runs' ends when the pass began) and the runs of sessions this exporter does not
        drain."""
        drained = set(self._keys()) if self._keys else None
        with self._held_lock:
            for key in list(self._held):
                if drained is not None and key not in drained:
                    del self._held[key]
                elif key in cut:
                    keep = [e for e in self._held[key] if e.seq > cut[key]]
                    if keep:
                        self._held[key] = keep
                    else:
                        del self._held[key]

    # -- the thread --------------------------------------------------------------------------

    def _exporter(
        self, sink: ExportSink, key: SessionKey | None = None, *, held: bool = False
    ) -> Exporter:
        keys = [key] if key is not None else (list(self._keys()) if self._keys else None)
        return Exporter(
            self.store,
            sink,
            keys=keys,
            batch_size=self.batch_size,
            progress=False,
            held=self._take_held if held else None,
        )

    def _drain_all(self, *, force: bool = False) -> float:
        """One pass over the sinks; returns seconds until the next retry is due (or inf)."""
        next_due = float("inf")
        with self._held_lock:
            cut = {key: run[-1].seq for key, run in self._held.items() if run}
        failed = False
        for state in self._states:
            now = time.monotonic()
            if not force and state.retry_at > now:
                next_due = min(next_due, state.retry_at - now)
                failed = True  # not taken by this sink: kept for its retry
                continue
            try:
                state.delivered += self._exporter(state.sink, held=True).drain()
            except Exception as exc:  # noqa: BLE001 - any sink failure is retried, never raised
                failed = True
                state.failures += 1
                state.last_error = f"{type(exc).__name__}: {exc}"
                backoff = min(self.retry_max, self.retry_initial * 2 ** (state.failures - 1))
                backoff *= random.uniform(0.8, 1.2)
                state.retry_at = time.monotonic() + backoff
                next_due = min(next_due, backoff)
                log.warning(
                    "export to %s failed (retry in %.1fs): %s",
                    state.sink.name,
                    backoff,
                    state.last_error,
                )
            else:
                state.failures, state.last_error, state.retry_at = 0, None, 0.0
        if not failed:
            self._trim_held(cut)
        return next_due

    def _heads(self) -> dict[SessionKey, int]:
        keys = list(self._keys()) if self._keys else [r.key for r in self.store.list_sessions()]
        heads = {}
        for key in keys:
            try:
                heads[key] = self.store.head(key)
            except SessionDeleted:
                continue  # its tombstone goes out with the next drain
        return heads

    def _loop(self) -> None:
        seen: dict[SessionKey, int] = {}
        while not self._stop.is_set():
            self._last_pass = time.monotonic()
            try:
                due = self._drain_all()
                seen = self._heads()
            except Exception as exc:  # noqa: BLE001 - the store may be closing; look again
                log.debug("export pass failed: %s", exc)
                due = self.poll_interval
            with self._idle:
                self._passes += 1
                self._idle.notify_all()
            self._wait(seen, min(due, self.poll_interval * 4))
        try:
            self._drain_all(force=True)  # a last pass so a clean shutdown leaves no lag
        except Exception as exc:  # noqa: BLE001
            log.debug("final export pass failed: %s", exc)
        with self._idle:
            self._passes += 1
            self._idle.notify_all()

    def _wait(self, seen: dict[SessionKey, int], limit: float) -> None:
        """Sleep until a commit (or ``notify``), a retry is due, or ``limit`` seconds passed."""
        deadline = time.monotonic() + limit
        while not self._stop.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._wake.is_set():
                break
            step = min(remaining, self.poll_interval)
            if len(seen) == 1:
                ((key, head),) = seen.items()
                # Returns at once on a commit in this process (the store's condition).
                try:
                    if self.store.wait_for_head(key, head, step) > head:
                        break
                except AgentnbError:
                    break  # deleted (or the store closing): the next pass looks again
            elif self._wake.wait(step) or self._moved(seen):
                break
        self._wake.clear()
        if self._stop.is_set():
            return
        # Let a burst of commits share one accept, and pass at most once an ``interval``
        # (unless a flush asks for it now).
        pause = self.linger
        if not self._urgent.is_set():
            pause = max(pause, self._last_pass + self.interval - time.monotonic())
        if pause > 0:
            self._urgent.wait(pause)
        if self._urgent.is_set():
            self._urgent.clear()
            if not self._stop.is_set() and self.linger > 0:
                self._stop.wait(self.linger)

    def _moved(self, seen: dict[SessionKey, int]) -> bool:
        try:
            heads = self._heads()
        except Exception:  # noqa: BLE001
            return False
        return any(head > seen.get(k, 0) for k, head in heads.items())

    def __repr__(self) -> str:
        return f"LiveExporter(sinks={[s.sink.name for s in self._states]})"

    def __enter__(self) -> LiveExporter:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
