"""Writing a store's logical contents into another store, through the store port only.

``Loader`` is what restore and migrate share. It writes each record with the port's own
verbs (``create_session``, ``inbox_append``, ``append``, ``update_session``,
``advance_watermark``, ``set_archived``, the token and deletion verbs), so every backend,
third-party ones too, keeps its own invariants (catalogue counts, pending-work marks,
blob placement) exactly as if the work had happened there. The times the port stamps are
the source's: while a record is written the target's clock is pinned, in this thread only,
to the time the record carries (its creation, its events' ``occurred_at``, ...).

Resumable by construction: every write is skipped when the target already holds it (a
session's logs continue after the target's heads; a batch of events is one atomic append
with a batch id derived from its seqs, so a lost acknowledgement replays as a no-op), so
running a killed restore or migration again finishes it and writes nothing twice. Before
continuing a log the loader checks that the target's last event is the source's event at
that seq (same id): a target holding another history for the key is ``StoreNotEmpty``.

One exception to "the port only", for speed: into an SQLite store the execution events
are appended as rows already encoded (``agentnb.ops._sqlite.RowWriter``: the payload text
as committed, no decoding into ``Event`` and encoding again), in the same batches, each one
transaction guarded like the port's append and moving the catalogue as it does. Events
whose payloads are stored in blobs (over ``BLOB_THRESHOLD``) still go through the port.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from agentnb.errors import StoreNotEmpty
from agentnb.events import BLOB_THRESHOLD
from agentnb.ids import Clock, SessionKey
from agentnb.ops._format import inbox_events, inbox_key_map, key_text, raw_events
from agentnb.ops._sqlite import RowReader, RowWriter, StoredRow, sqlite_path
from agentnb.stores.base import RawEvent, SessionStore, TokenRecord, Tombstone

__all__ = ["Loader", "copy_logs", "record_fields"]

BATCH = 5_000
"""Events per append (one transaction each)."""
BATCH_BYTES = 4 << 20
"""Payload bytes per append, at most (one large event is a batch of its own)."""


class _PinnedClock:
    """The target's clock, answering a pinned time in the thread that pinned it."""

    def __init__(self, inner: Clock) -> None:
        self.inner = inner
        self.local = threading.local()

    def now(self) -> float:
        at: float | None = getattr(self.local, "at", None)
        return self.inner.now() if at is None else at


def record_fields(record: Any) -> dict[str, Any]:
    """The catalogue fields a copy carries over (the rest the target computes itself)."""
    return {
        "created_at": record.created_at,
        "updated_at": record.updated_at,
        "last_activity": record.last_activity,
        "title": record.title,
        "labels": dict(record.labels),
        "archived_at": record.archived_at,
    }


class Loader:
    """Writes sessions, tokens and deletions into ``target`` (see the module docstring)."""

    def __init__(self, target: SessionStore) -> None:
        self.target = target
        self.events = 0
        """Events written by this loader (skipped ones not counted)."""
        self.inbox = 0
        self._rows = RowWriter(target) if sqlite_path(target) is not None else None

    def close(self) -> None:
        """Close the loader's own connection (if it has one)."""
        if self._rows is not None:
            self._rows.close()
            self._rows = None

    @contextlib.contextmanager
    def pinned(self) -> Iterator[None]:
        """Pin the target's clock for the block (restored afterwards); the loader's own
        connection (SQLite targets) is closed at its end."""
        original = self.target.clock
        clock = _PinnedClock(original)
        self.target.clock = clock
        self._clock = clock
        try:
            yield
        finally:
            self.target.clock = original
            self.close()

    def _at(self, when: float | None) -> contextlib.AbstractContextManager[None]:
        clock = getattr(self, "_clock", None)

        @contextlib.contextmanager
        def pin() -> Iterator[None]:
            if clock is None or when is None:
                yield
                return
            clock.local.at = float(when)
            try:
                yield
            finally:
                clock.local.at = None

        return pin()

    # -- sessions ----------------------------------------------------------------------------

    def begin(self, key: SessionKey, fields: dict[str, Any]) -> tuple[int, int]:
        """Create the session (at its creation time) if it is not there; the target's heads,
        where its logs continue."""
        with self._at(fields.get("created_at")):
            self.target.create_session(key)
        return self.target.heads(key)

    def check_continues(self, key: SessionKey, head: int, event_id: str | None) -> None:
        """``StoreNotEmpty`` unless the target's event at ``head`` is ``event_id``."""
        if head == 0:
            return
        (last,) = self.target.read_raw(key, head - 1, 1)
        if event_id is None or last.event_id != event_id:
            raise StoreNotEmpty(
                f"session {key_text(key)} exists at the target with another history (its "
                f"event {head} is {last.event_id}, the source's is {event_id}); delete it there "
                "or leave it out (--session)",
                sessions=[key_text(key)],
            )

    def inbox_record(
        self, key: SessionKey, raw: RawEvent, dedupe_key: str | None, fingerprint: str | None
    ) -> None:
        """Accept one inbox record (its seq must be the target's next)."""
        event = raw.to_event().with_seq(0)
        with self._at(raw.occurred_us / 1e6):
            record, created = self.target.inbox_append(
                key, event, dedupe_key=dedupe_key, fingerprint=fingerprint or None
            )
        if created and record.seq != raw.seq:
            raise StoreNotEmpty(
                f"session {key_text(key)}: its inbox record {raw.seq} landed as {record.seq} at "
                "the target (another writer added commands there); copy it again into a "
                "store nobody else writes to",
                sessions=[key_text(key)],
            )
        self.inbox += int(created)

    def append_events(self, key: SessionKey, raws: Sequence[RawEvent]) -> None:
        """Commit ``raws`` (contiguous seqs after the target's head) in batches: as rows
        already encoded into SQLite, through the port otherwise (and for payloads in blobs)."""
        batch: list[RawEvent] = []
        size = 0
        direct = False
        for raw in raws:
            n = len(raw.payload_json)
            rows = self._rows is not None and n <= BLOB_THRESHOLD
            if batch and (rows != direct or len(batch) >= BATCH or size + n > BATCH_BYTES):
                self._commit(key, batch, direct)
                batch, size = [], 0
            direct = rows
            batch.append(raw)
            size += n
        if batch:
            self._commit(key, batch, direct)

    @property
    def takes_rows(self) -> bool:
        """Whether ``append_stored`` can take an SQLite source's rows as stored."""
        return self._rows is not None

    def append_stored(
        self, key: SessionKey, rows: Sequence[StoredRow], source: SessionStore
    ) -> None:
        """Commit an SQLite source's rows as stored (contiguous seqs after the target's
        head: ``agentnb.ops._sqlite.RowReader``), each checked against its stored checksum;
        a row whose payload is in blobs is read from ``source`` and goes through the port."""
        if self._rows is None:
            raise ValueError("append_stored needs an SQLite target")
        batch: list[StoredRow] = []

        def flush() -> None:
            if batch and self._rows is not None:
                first, last = batch[0][0], batch[-1][0]
                self.events += self._rows.append_stored(key, batch, f"ops-copy-{first}-{last}")
            batch.clear()

        for row in rows:
            if row[9] is not None:  # the payload is in blobs: read it whole, by the port
                flush()
                self._commit(key, source.read_raw(key, row[0] - 1, 1), False)
                continue
            batch.append(row)
            if len(batch) >= BATCH:
                flush()
        flush()

    def _commit(self, key: SessionKey, batch: list[RawEvent], direct: bool) -> None:
        first, last = batch[0].seq, batch[-1].seq
        batch_id = f"ops-copy-{first}-{last}"
        if direct and self._rows is not None:
            self.events += self._rows.append(key, batch, batch_id)
            return
        with self._at(batch[-1].occurred_us / 1_000_000):
            self.target.append(
                key, [r.to_event() for r in batch], expected_seq=first - 1, batch_id=batch_id
            )
        self.events += len(batch)

    def finish(self, key: SessionKey, fields: dict[str, Any], marks: dict[str, int]) -> None:
        """Title, labels, watermarks and the archive flag, once the logs are in."""
        with self._at(fields.get("updated_at")):
            self.target.update_session(key, title=fields.get("title"), labels=fields["labels"])
        head = self.target.head(key)
        for sink, seq in sorted(marks.items()):
            self.target.advance_watermark(key, sink, min(int(seq), head))
        if fields.get("archived_at") is not None:
            with self._at(fields["archived_at"]):
                self.target.set_archived(key, True)

    # -- store-wide records ------------------------------------------------------------------

    def tokens(self, records: Sequence[TokenRecord]) -> None:
        """Add the tokens (digests only) with their times, unless the target has them;
        revocations last, earliest first, so each keeps its own time (revoking a token
        revokes its sign-ins)."""
        added = []
        for record in records:
            if self.target.get_token(record.token_id) is not None:
                continue
            with self._at(record.created_at):
                self.target.add_token(
                    record.token_id,
                    record.user_id,
                    record.digest,
                    label=record.label,
                    expires_at=record.expires_at,
                    parent=record.parent,
                )
            if record.last_used_at is not None:
                with self._at(record.last_used_at):
                    self.target.touch_token(record.token_id)
            added.append(record)
        revoked = [r for r in added if r.revoked_at is not None]
        for record in sorted(revoked, key=lambda r: r.revoked_at or 0.0):
            with self._at(record.revoked_at):
                self.target.revoke_token(record.token_id)

    def tombstone(self, tomb: Tombstone) -> None:
        """Leave the deleted session's tombstone, so its id never comes back there."""
        if self.target.tombstone(tomb.key) is not None:
            return
        with self._at(tomb.deleted_at):
            self.target.create_session(tomb.key)
            self.target.delete_session(tomb.key, by=tomb.deleted_by, reason=tomb.reason)


def copy_logs(
    source: SessionStore,
    loader: Loader,
    key: SessionKey,
    start: tuple[int, int],
    through: tuple[int, int],
    rows: RowReader | None = None,
    on_batch: Callable[[int], None] | None = None,
) -> None:
    """Copy ``key``'s inbox and execution log from ``source`` into ``loader``'s target:
    the records after ``start`` (the target's heads) through ``through`` (the source's),
    checking first that the target's log is a prefix of the source's. ``rows``: read an
    SQLite source's rows as stored (an SQLite target). ``on_batch(seq)`` after each batch."""
    head, inbox_head = start
    src_head, src_inbox = through
    if head > src_head or inbox_head > src_inbox:
        loader.check_continues(key, head, None)
    if head:
        (at,) = source.read_raw(key, head - 1, 1)
        loader.check_continues(key, head, at.event_id)
    keys = inbox_key_map(source, key, src_inbox, inbox_head)
    for event in inbox_events(source, key, src_inbox, inbox_head):
        k, f = keys.get(event.seq, (None, None))
        loader.inbox_record(key, RawEvent.of(event), k, f)
    if rows is not None:  # SQLite to SQLite: the rows as stored
        for after in range(head, src_head, BATCH):
            last = min(src_head, after + BATCH)
            loader.append_stored(key, rows.events(key, after, last), source)
            if on_batch is not None:
                on_batch(last)
        return
    batch: list[RawEvent] = []
    for raw in raw_events(source, key, src_head, head):
        batch.append(raw)
        if len(batch) >= BATCH:
            loader.append_events(key, batch)
            batch = []
            if on_batch is not None:
                on_batch(raw.seq)
    if batch:
        loader.append_events(key, batch)


def token_of(fields: dict[str, Any]) -> TokenRecord:
    return TokenRecord(
        fields["token_id"],
        fields["user_id"],
        fields["label"],
        fields["created_at"],
        fields["last_used_at"],
        fields["revoked_at"],
        fields["expires_at"],
        fields["parent"],
        digest=fields["digest"],
    )


def tombstone_fields(tomb: Tombstone) -> dict[str, Any]:
    k = tomb.key
    return {
        "key": [k.namespace, k.user_id, k.agent_id, k.session_id],
        "deleted_at": tomb.deleted_at,
        "deleted_by": tomb.deleted_by,
        "reason": tomb.reason,
        "events": tomb.events,
    }
