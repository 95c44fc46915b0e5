"""The operations' own SQL on an SQLite store's file, for the bulk work the store port
makes slow: the physical backup's digests and the bulk append of rows already encoded.

It reads and writes the store's schema (``agentnb.stores.sqlite``, format 6) on
connections of its own, as another process would, and keeps the invariants the store
keeps for the same work:

* ``row_digests``: a session's digests computed in SQL from a copy of the file: the
  SHA-256 over ``"<crc>\\n"`` of each row in seq order (its rows counted: seqs 1 to the
  head, no gaps), ``crc`` being the CRC-32 the store keeps over every field of the row
  (seq included), so a row changed anywhere changes it.
* ``RowReader.events``: an SQLite source's rows as stored (no payload decoded).
* ``RowWriter.append_stored`` (and ``append``, of ``RawEvent``s): commits a batch of
  committed events into a session's log in one transaction: the rows the store's
  ``append`` would write (checksum, the batch id and digest on the first), each checked
  first against the checksum the source stored, guarded like the port's append (the head
  the caller expects, the session live, its lease free), the catalogue's counts and
  latest-turn status moved as ``decide_catalogue`` says, required types checked as a read
  checks them. Payloads stored in blobs (over ``BLOB_THRESHOLD``) are not written here:
  the loader sends those through the port.

What the port does besides, and this does not: wake this process's waiters and publish on
its commit bus (a copy has no followers), and take the store's in-process writer turn
(another writer meets SQLite's own lock and waits for it).
"""

from __future__ import annotations

import contextlib
import hashlib
import sqlite3
import time
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple, cast

from agentnb.errors import Corrupt, LeaseHeld, SessionNotFound, StorageError, StoreNotEmpty
from agentnb.events import BLOB_THRESHOLD, check_readable
from agentnb.ids import SessionKey
from agentnb.stores.base import RawEvent, SessionStore, decide_catalogue

__all__ = ["RowReader", "RowWriter", "StoredRow", "connect", "row_digests", "sqlite_path"]

_COLUMNS = (
    "session, seq, event_id, type, turn_id, run_id, required, occurred_us, schema_version, "
    "payload, blob, crc"
)
_SELECT = (
    "SELECT seq, event_id, type, turn_id, run_id, required, occurred_us, schema_version, "
    "payload, blob, crc FROM events WHERE session=? AND seq>? AND seq<=? ORDER BY seq"
)
StoredRow = tuple[Any, ...]
"""An ``events`` row as stored: the ``RawEvent`` fields (``required`` 0 or 1, the payload
text or, for one stored in blobs, its skeleton), then ``blob`` and ``crc``."""
_INSERT = f"INSERT INTO events ({_COLUMNS}) VALUES ({{sid}},?,?,?,?,?,?,?,?,?,?,?)"
# The first row of a batch carries its id and digest (as the store's append writes it).
_MARK_BATCH = "UPDATE events SET batch_id=?, digest=? WHERE session=? AND seq=?"
_ID = (
    "SELECT id FROM sessions WHERE namespace=? AND user_id=? AND agent_id=? AND session_id=? "
    "AND deleted_at IS NULL"
)
_STATE = (
    "SELECT deleted_at, lease_owner, lease_expires, "
    "(SELECT coalesce(max(seq), 0) FROM events WHERE session = s.id) FROM sessions AS s "
    "WHERE id=?"
)
_CATALOGUE = (
    "UPDATE sessions SET events = events + ?, turns = turns + ?, bytes = bytes + ?, "
    "turn_status = coalesce(?, turn_status), updated_at = ?, last_activity = ? WHERE id = ?"
)
_DIGEST_CHUNK = 50_000
"""Rows per ``group_concat`` of ``row_digests`` (bounds the text one query returns)."""


def sqlite_path(store: SessionStore) -> Path | None:
    """The file of an SQLite store (None for other backends)."""
    path = getattr(store, "path", None)
    return path if store.url.startswith("sqlite:") and isinstance(path, Path) else None


def connect(
    path: Path, *, read_only: bool = False, synchronous: str = "FULL"
) -> sqlite3.Connection:
    """A connection of the operations' own (autocommit: transactions are explicit)."""
    if read_only:
        conn = sqlite3.connect(
            f"{path.resolve().as_uri()}?mode=ro", uri=True, isolation_level=None, timeout=30.0
        )
    else:
        conn = sqlite3.connect(path, isolation_level=None, timeout=30.0)
        conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute("PRAGMA busy_timeout=30000")
    return conn


def row_digests(conn: sqlite3.Connection, table: str, sid: int, head: int) -> str:
    """The digest of session ``sid``'s rows of ``table`` (``events`` or ``inbox``) through
    ``head`` (module docstring), computed by SQLite."""
    if table not in ("events", "inbox"):
        raise ValueError(table)
    # The range of the primary key (session, seq): the rows come in seq order.
    sql = (
        f"SELECT count(*), group_concat(crc, char(10)) FROM {table} "
        "WHERE session=? AND seq>? AND seq<=?"
    )
    digest = hashlib.sha256()
    for after in range(0, head, _DIGEST_CHUNK):
        through = min(head, after + _DIGEST_CHUNK)
        count, text = conn.execute(sql, (sid, after, through)).fetchone()
        if count != through - after:
            raise StorageError(f"session row {sid}: {table} {after + 1}..{through} has gaps")
        digest.update(text.encode())
        digest.update(b"\n")
    return digest.hexdigest()


def _text(row: StoredRow) -> bytes:
    """What a row's checksum (and its batch's digest) covers, as the store writes it."""
    seq, event_id, type_, turn_id, run_id, required, occurred_us, version, body = row[:9]
    return (
        f"{seq}\x1f{event_id}\x1f{type_}\x1f{turn_id}\x1f{run_id}\x1f{required}"
        f"\x1f{occurred_us}\x1f{version}\x1f{body}"
    ).encode()


def _session_id(conn: sqlite3.Connection, key: SessionKey) -> int | None:
    found = conn.execute(_ID, (key.namespace, key.user_id, key.agent_id, key.session_id)).fetchone()
    return None if found is None else int(found[0])


class _Typed(NamedTuple):
    """What ``decide_catalogue`` reads of an event (the turn events of a batch: the rest
    move only the count)."""

    type: str


class RowReader:
    """Reads an SQLite store's event rows as stored, on a read-only connection of its own
    (each read its own transaction: the caller holds the session's lease meanwhile)."""

    def __init__(self, store: SessionStore) -> None:
        path = sqlite_path(store)
        if path is None:
            raise ValueError(f"{store.url} is not an SQLite store")
        self.conn = connect(path, read_only=True)
        self._ids: dict[SessionKey, int] = {}

    def close(self) -> None:
        self.conn.close()

    def events(self, key: SessionKey, after: int, through: int) -> list[StoredRow]:
        """The rows with ``after < seq <= through`` (``Corrupt`` on a gap)."""
        sid = self._ids.get(key)
        if sid is None:
            sid = _session_id(self.conn, key)
            if sid is None:
                raise SessionNotFound(f"session {key} is not at the source (deleted meanwhile?)")
            self._ids[key] = sid
        rows = self.conn.execute(_SELECT, (sid, after, through)).fetchall()
        if len(rows) != through - after:
            raise Corrupt(
                f"session {key}: events {after + 1}..{through} have gaps at the source "
                f"({len(rows)} rows); restore it from a backup"
            )
        return rows


class RowWriter:
    """Appends committed rows to an SQLite store's logs on a connection of its own."""

    def __init__(self, store: SessionStore) -> None:
        path = sqlite_path(store)
        if path is None:
            raise ValueError(f"{store.url} is not an SQLite store")
        self.conn = connect(path, synchronous=str(getattr(store, "synchronous", "FULL")))
        self._ids: dict[SessionKey, int] = {}

    def close(self) -> None:
        self.conn.close()

    def _sid(self, key: SessionKey) -> int:
        sid = self._ids.get(key)
        if sid is None:
            sid = _session_id(self.conn, key)
            if sid is None:
                raise SessionNotFound(f"session {key} is not at the target (deleted meanwhile?)")
            self._ids[key] = sid
        return sid

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def append(self, key: SessionKey, raws: Sequence[RawEvent], batch_id: str) -> int:
        """Commit ``raws`` (contiguous seqs, each payload at most ``BLOB_THRESHOLD``) after
        the session's head, at the time of the last one; the rows written (0 when the target
        holds them already: a batch committed before a kill)."""
        stored = []
        for raw in raws:
            row = (*raw[:5], int(raw.required), *raw[6:], None)
            stored.append((*row, zlib.crc32(_text(row))))
        return self.append_stored(key, stored, batch_id)

    def append_stored(self, key: SessionKey, stored: Sequence[StoredRow], batch_id: str) -> int:
        """``append`` of rows as an SQLite store keeps them (``RowReader.events``; inline
        payloads only), each checked against its stored checksum (``Corrupt``); the rows
        are inserted as they are."""
        first, last = stored[0][0], stored[-1][0]
        sid = self._sid(key)
        hasher = hashlib.sha256()
        nbytes = 0
        kinds = set()
        turns = []
        for (
            seq,
            event_id,
            type_,
            turn_id,
            run_id,
            required,
            occurred_us,
            version,
            body,
            blob,
            crc,
        ) in stored:
            if blob is not None or len(body) > BLOB_THRESHOLD:
                raise ValueError(f"event {seq} is stored in blobs: append it by the port")
            text = (  # _text(row), inline: this loop is the cost of the copy
                f"{seq}\x1f{event_id}\x1f{type_}\x1f{turn_id}\x1f{run_id}\x1f{required}"
                f"\x1f{occurred_us}\x1f{version}\x1f{body}"
            ).encode()
            if zlib.crc32(text) != crc:
                raise Corrupt(
                    f"session {key} seq {seq}: stored event is damaged (checksum mismatch) at "
                    "the source; restore it from a backup"
                )
            hasher.update(text)
            hasher.update(b"\x1e")
            nbytes += len(body)
            kinds.add((type_, required))
            if type_.startswith("turn/"):
                turns.append(_Typed(type_))
        for type_, required in kinds:  # as a read through the port checks each row
            check_readable(type_, bool(required), session=key, seq=first)
        delta = decide_catalogue(cast(Any, turns), nbytes)
        at = stored[-1][6] / 1_000_000
        with self._transaction() as conn:
            deleted, owner, expires, head = conn.execute(_STATE, (sid,)).fetchone()
            if deleted is not None:
                self._ids.pop(key, None)
                raise SessionNotFound(f"session {key} was deleted at the target meanwhile")
            if head >= last:
                (there,) = conn.execute(
                    "SELECT event_id FROM events WHERE session=? AND seq=?", (sid, last)
                ).fetchone()
                if there != stored[-1][1]:
                    raise StoreNotEmpty(
                        f"session {key}: the target's event {last} is {there}, the source's "
                        f"{stored[-1][1]}: another history; delete it there or leave it out",
                        sessions=[str(key)],
                    )
                return 0
            if head != first - 1:
                raise StoreNotEmpty(
                    f"session {key}: the target's log ends at {head}, the copy continues after "
                    f"{first - 1} (another writer?); copy it again into a store nobody writes to",
                    sessions=[str(key)],
                )
            if owner is not None and expires > time.time():
                raise LeaseHeld(
                    f"session {key} runs at the target (its lease is held by {owner!r}); "
                    "stop it there, then copy again"
                )
            # The session's row id is ours (an int): in the statement, the rows go in as read.
            conn.executemany(_INSERT.format(sid=int(sid)), stored)
            conn.execute(_MARK_BATCH, (batch_id, hasher.hexdigest(), sid, first))
            conn.execute(
                _CATALOGUE,
                (len(stored), delta.turns, delta.bytes, delta.turn_status, at, at, sid),
            )
        return len(stored)
