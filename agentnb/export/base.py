"""The export seam: ``ExportSink`` (where events go) and ``Exporter`` (what moves them).

Delivery is **at least once**: the exporter hands a batch to ``sink.accept`` and advances the
store's watermark for (session, ``sink.name``) only after ``accept`` returned. A crash between
the two re-delivers that batch on the next drain, so sinks must ignore duplicates by
``event_id`` (the built-in sinks do, and also skip events they already hold by seq).

Deletions travel the same way: after the events, a drain hands the store's tombstones past
the sink's tombstone watermark to ``sink.forget`` and advances that watermark once it
returned. Tombstones of every session of the store go to every sink, whatever sessions an
exporter drains: a deleted session's rows must leave each export that holds them, and a
tombstone for a session a sink never held only makes the sink remember the key.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

from agentnb.errors import InvalidInput, SessionDeleted
from agentnb.events import Event
from agentnb.export.columns import Batch, RawColumns
from agentnb.ids import SessionKey, check_id
from agentnb.log import SessionLog
from agentnb.stores.base import MAX_READ_LIMIT, SessionStore, Tombstone

__all__ = ["ExportSink", "Exporter", "SinkMismatch", "sink_name"]

PROGRESS_THRESHOLD = 20_000
"""Drains of at least this many events show a progress bar (``progress=None``)."""


MAX_BATCH_EVENTS = 1_000_000
"""Largest number of events one ``accept`` call receives (reads happen in pages)."""
TOMBSTONE_PAGE = 100
"""Most tombstones one ``forget`` call receives."""

log = logging.getLogger("agentnb.export")
_unforgetting: set[str] = set()
"""Names of sinks without ``forget`` already warned about (once per process)."""


class SinkMismatch(InvalidInput):
    """The sink name's watermark says events were delivered that this destination lacks.

    Raised when a sink name is reused for another destination (or the destination lost
    data): the watermark cannot move back, so draining would silently skip events.
    """


@runtime_checkable
class ExportSink(Protocol):
    """Where committed events are exported to.

    ``name``
        Stable and unique per destination: the store keeps one watermark per
        (session, name), so two destinations must never share a name.
    ``accept(events)``
        ``events`` maps each ``SessionKey`` to committed events of that session in seq
        order. Returns only once the sink holds them durably (a crash after it returns loses
        nothing); raises if it could not, and then nothing is acknowledged. Receiving an
        event it already holds (same ``event_id``) must be harmless: delivery is at least
        once.

    A sink may also offer ``position(key) -> int``: the highest seq ``s`` such that it holds
    every event of the session with seq ``1..s``. The exporter then skips what the sink already
    holds after a crash, and refuses to drain (``SinkMismatch``) when the store's watermark is
    ahead of what the sink holds.

    A sink that assembles several events into one record (``OTelSink``: a span from its
    start and end events) may offer ``holds_back(key) -> int | None``: the seq of the first
    event of a record it has not finished yet. The exporter keeps the watermark below it, so
    a process that stops with the record open delivers its events again next time (the sink
    skips, by seq, what it already took in this process).

    A sink that keeps what it accepted offers ``forget(tombstones)`` too (both built-in
    sinks do): it removes every row of those sessions, durably, before it returns, and
    remembers their keys in the same commit, so a tombstone delivered again is recognised
    (at least once, like events) and events of a forgotten session that arrive later (an
    exporter that read them before the delete) are dropped. A sink without ``forget`` is
    warned about once and its tombstones stay undelivered.
    """

    name: str

    def accept(self, events: Batch) -> None: ...


def sink_name(prefix: str, destination: str) -> str:
    """A default sink name for a destination: ``prefix:destination`` (shortened if long)."""
    name = f"{prefix}:{destination}"
    if len(name) > 200:
        import hashlib

        digest = hashlib.sha256(destination.encode()).hexdigest()[:16]
        name = f"{prefix}:...{destination[-150:]}#{digest}"
    return re.sub(r"[\x00-\x1f]", "?", name)


class Exporter:
    """Drains committed events of one session (a ``SessionLog``) or of every session of a
    ``SessionStore`` (optionally filtered by namespace, user or agent, or just ``keys``) into
    ``sink``.

    ``drain()`` is resumable (it starts after the store's watermark for the sink's name) and
    at least once; it returns the number of events delivered. Long drains show a tqdm
    progress bar unless ``progress=False``.
    """

    def __init__(
        self,
        source: SessionLog | SessionStore,
        sink: ExportSink,
        *,
        batch_size: int = 50_000,
        progress: bool | None = None,
        namespace: str | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
        keys: Iterable[SessionKey] | None = None,
        held: Callable[[SessionKey, int, int], Sequence[Event] | None] | None = None,
    ) -> None:
        """``held(key, after, limit)``: committed events of ``key`` after ``after`` (at most
        ``limit``, gapless) that the caller holds in memory, or None to read the store (the
        live exporter's events from the commit bus)."""
        if not isinstance(sink, ExportSink):
            raise InvalidInput(
                f"sink must have a name and an accept(events) method, got {type(sink).__name__}"
            )
        check_id(sink.name, "sink.name")
        if not isinstance(batch_size, int) or not 1 <= batch_size <= MAX_BATCH_EVENTS:
            raise InvalidInput(f"batch_size must be an int in 1..{MAX_BATCH_EVENTS}")
        if isinstance(source, SessionLog):
            self.store = source.store
            self._keys: list[SessionKey] | None = [source.key]
        elif isinstance(source, SessionStore):
            self.store = source
            self._keys = None if keys is None else list(keys)
        else:
            raise InvalidInput(
                f"source must be a SessionLog or a SessionStore, got {type(source).__name__}"
            )
        self.sink = sink
        self.held = held
        self.batch_size = batch_size
        self.progress = progress
        self._filters = {"namespace": namespace, "user_id": user_id, "agent_id": agent_id}

    def keys(self) -> list[SessionKey]:
        """The sessions this exporter drains."""
        if self._keys is not None:
            return list(self._keys)
        return [r.key for r in self.store.list_sessions(**self._filters)]

    def lag(self) -> int:
        """Committed events not yet acknowledged by the sink (over all sessions drained)."""
        name = self.sink.name
        behind = 0
        for key in self.keys():
            try:
                behind += max(0, self.store.head(key) - self.store.watermark(key, name))
            except SessionDeleted:
                continue  # its rows leave the sink with its tombstone
        return behind

    def tombstone_lag(self) -> int:
        """Tombstones not yet delivered to the sink (counted up to ``TOMBSTONE_PAGE``; 0 for
        a sink without ``forget``, which never gets them)."""
        if getattr(self.sink, "forget", None) is None:
            return 0
        mark = self.store.tombstone_watermark(self.sink.name)
        return len(self.store.tombstones(after=mark, limit=TOMBSTONE_PAGE))

    def drain(self) -> int:
        """Deliver every committed event past the watermark, then the tombstones past the
        sink's tombstone watermark (``deliver_tombstones``); returns how many events were
        delivered."""
        name = self.sink.name
        todo: list[tuple[SessionKey, int, int]] = []
        for key in self.keys():
            try:
                start = self._start(key)
                head = self.store.head(key)
            except SessionDeleted:
                continue  # deleted since it was listed: its tombstone follows below
            if head > start:
                todo.append((key, start, head))
        total = sum(head - start for _, start, head in todo)
        bar = self._bar(total)
        delivered = 0
        try:
            holds_back = getattr(self.sink, "holds_back", None)
            for batch in _read_ahead(self._batches(todo)):
                self.sink.accept(batch)
                for key, events in batch.items():
                    through = events[-1].seq
                    held = holds_back(key) if holds_back is not None else None
                    if held is not None:
                        through = min(through, held - 1)
                    with contextlib.suppress(SessionDeleted):  # its tombstone follows below
                        self.store.advance_watermark(key, name, max(through, 0))
                n = sum(len(events) for events in batch.values())
                delivered += n
                if bar is not None:
                    bar.update(n)
        finally:
            if bar is not None:
                bar.close()
        self.deliver_tombstones()
        return delivered

    def deliver_tombstones(self) -> int:
        """Hand the store's tombstones past the sink's tombstone watermark to
        ``sink.forget``, a page at a time, advancing the watermark after each; returns how
        many were delivered (0, with a warning, for a sink without ``forget``)."""
        forget = getattr(self.sink, "forget", None)
        name = self.sink.name
        if forget is None:
            if name not in _unforgetting and self.store.tombstones(limit=1):
                _unforgetting.add(name)
                log.warning(
                    "sink %s has no forget(tombstones): the rows of deleted sessions stay in it",
                    name,
                )
            return 0
        delivered = 0
        while True:
            page: list[Tombstone] = self.store.tombstones(
                after=self.store.tombstone_watermark(name), limit=TOMBSTONE_PAGE
            )
            if not page:
                return delivered
            forget(page)
            self.store.advance_tombstone_watermark(name, page[-1].seq)
            delivered += len(page)

    def _start(self, key: SessionKey) -> int:
        """Where to resume: the watermark, moved up to what the sink already holds."""
        name = self.sink.name
        mark = self.store.watermark(key, name)
        position = getattr(self.sink, "position", None)
        if position is None:
            return mark
        held = int(position(key))
        if held < mark:
            raise SinkMismatch(
                f"sink {name!r} has delivered session {key} up to seq {mark}, but this "
                f"destination holds only up to seq {held}: the name is used by another "
                "destination (or this one lost data). Give this sink its own name=..."
            )
        if held > mark:
            # Acknowledged by the sink but not recorded (a crash in between): skip ahead.
            mark = self.store.advance_watermark(key, name, min(held, self.store.head(key)))
        return mark

    def _batches(self, todo: Sequence[tuple[SessionKey, int, int]]) -> Iterator[Batch]:
        """Batches of at most ``batch_size`` events; small sessions share a batch."""
        parts: dict[SessionKey, list[Any]] = {}
        size = 0
        for key, start, head in todo:
            pos = start
            while pos < head:
                room = self.batch_size - size
                limit = min(room, head - pos, MAX_READ_LIMIT)
                events = self.held(key, pos, limit) if self.held is not None else None
                try:
                    if events:
                        table = RawColumns.table_of(events)
                    else:
                        table = self.store.read_arrow(key, pos, limit)
                except SessionDeleted:
                    break  # deleted while the drain runs: its tombstone follows
                if not table.num_rows:
                    break
                parts.setdefault(key, []).append(table)
                size += table.num_rows
                pos += table.num_rows
                if size >= self.batch_size:
                    yield {k: RawColumns.concat(v) for k, v in parts.items()}
                    parts, size = {}, 0
        if parts:
            yield {k: RawColumns.concat(v) for k, v in parts.items()}

    def _bar(self, total: int) -> Any:
        show = self.progress if self.progress is not None else total >= PROGRESS_THRESHOLD
        if not show or total == 0:
            return None
        try:
            from tqdm.auto import tqdm
        except ImportError:
            return None
        return tqdm(total=total, unit="ev", desc=f"export to {self.sink.name}", leave=False)


_DONE = object()


def _read_ahead(batches: Iterator[Batch]) -> Iterator[Batch]:
    """``batches``, each read on a helper thread while the previous one is being accepted.

    Reading (the store, checksums) and writing (the sink: DuckDB, Parquet, fsync) mostly
    run outside the GIL, so the two overlap. At most one batch waits read ahead. A read
    error is raised here, in order; when the consumer stops early, the helper stops too.
    """
    import queue
    import threading

    ready: queue.Queue[Any] = queue.Queue(maxsize=1)
    stop = threading.Event()

    def hand_over(item: Any) -> bool:
        """Queue ``item`` unless the consumer has stopped; whether it was queued."""
        while not stop.is_set():
            try:
                ready.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for batch in batches:
                if not hand_over(batch):
                    return
            item: Any = _DONE
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, in order
            item = exc
        hand_over(item)

    helper = threading.Thread(target=produce, name="agentnb-export-read", daemon=True)
    helper.start()
    try:
        while True:
            item = ready.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        helper.join()
