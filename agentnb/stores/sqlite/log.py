"""The execution log of an SQLite store: the guarded append, its group commit, and reads."""

from __future__ import annotations

import hashlib
import sqlite3
from typing import Any

from agentnb.errors import StorageError
from agentnb.events import Event
from agentnb.ids import SessionKey
from agentnb.stores import _rows
from agentnb.stores.base import (
    Lease,
    LeaseRow,
    RawEvent,
    check_fence,
    check_inbox,
    check_tombstone,
    decide_append,
    decide_catalogue,
)
from agentnb.stores.sqlite.connections import Connection, adbc_errors, translate
from agentnb.stores.sqlite.core import SQLiteCore
from agentnb.stores.sqlite.group_commit import Write

__all__ = ["SQLiteEventLog"]


_CATALOGUE_AFTER_APPEND = (
    "UPDATE sessions SET events = events + ?, turns = turns + ?, bytes = bytes + ?, "
    "turn_status = coalesce(?, turn_status), updated_at = ?, last_activity = ? WHERE id = ?"
)

_SELECT_ROWS = (
    f"SELECT {_rows.COLUMNS} FROM events WHERE session=? AND seq>? AND seq<=? ORDER BY seq"
)
_INSERT_EVENT = f"INSERT INTO events (session, {_rows.COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)"
# The first event of a batch carries the batch id and digest (lost-ack replay detection), and
# is inserted only if the head and the lease are what the caller expects: the common append
# is one guarded statement. When it inserts nothing, _APPEND_STATE says why.
_INSERT_FIRST = (
    f"INSERT INTO events (session, {_rows.COLUMNS}, batch_id, digest) "
    "SELECT ?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14 FROM sessions AS s WHERE s.id=?1 "
    "AND s.deleted_at IS NULL "
    "AND (SELECT coalesce(max(seq), 0) FROM events WHERE session=?1) = ?15 "
    "AND CASE WHEN ?16 IS NULL THEN s.lease_owner IS NULL OR s.lease_expires <= ?18 "
    "ELSE s.lease_owner = ?16 AND s.lease_epoch = ?17 AND s.lease_expires > ?18 END"
)
_APPEND_STATE = (
    "SELECT s.lease_owner, s.lease_epoch, s.lease_expires, "
    "(SELECT max(seq) FROM events WHERE session=s.id), b.digest, b.seq, s.deleted_at "
    "FROM sessions AS s LEFT JOIN events AS b ON b.session=s.id AND b.batch_id=?2 "
    "WHERE s.id=?1"
)


class SQLiteEventLog(SQLiteCore):
    """``EventLog``'s hooks."""

    def _head(self, key: SessionKey) -> int:
        return self._live_head(key, "events")

    def _read_heads(self, key: SessionKey) -> tuple[int, int]:
        conn = self._conn()
        sid = self._sid(key, conn)
        head, inbox_head, deleted = conn.execute(
            "SELECT (SELECT max(seq) FROM events WHERE session=?1), "
            "(SELECT max(seq) FROM inbox WHERE session=?1), deleted_at FROM sessions WHERE id=?1",
            (sid,),
        ).fetchone()
        if deleted is not None:
            self._gone(conn, key)
        return int(head or 0), int(inbox_head or 0)

    def _append(
        self,
        key: SessionKey,
        batch: list[Event],
        expected_seq: int,
        batch_id: str,
        digest: str,
        fence: Lease | None,
        now: float,
        *,
        expected_inbox: int | None = None,
    ) -> None:
        sid = self._sid(key)
        # Encode before taking the write lock: other writers wait less.
        blobs: dict[str, bytes] = {}  # one insert per distinct part of the batch

        def put_blob(data: bytes) -> str:
            digest = _rows.blob_digest(data)
            blobs[digest] = data
            return digest

        hasher = hashlib.sha256()
        first, *rest = encoded = [_rows.encode(e, e.seq, put_blob, hasher) for e in batch]
        nbytes = sum(len(r.payload or "") for r in encoded) + sum(map(len, blobs.values()))
        owner, epoch = (fence.owner, fence.epoch) if fence is not None else (None, None)
        digest = hasher.hexdigest()
        params = (sid, *first, batch_id, digest, expected_seq, owner, epoch, now)

        def write(c: Connection) -> None:
            bare = c.bare
            for blob in blobs.items():
                self._put_ref(bare, sid, *blob)
            try:
                inserted = bare.execute(_INSERT_FIRST, params).rowcount
            except sqlite3.IntegrityError:
                inserted = 0  # the batch id was used before: a replay, or a reuse
            if not inserted:
                state = c.execute(_APPEND_STATE, (sid, batch_id)).fetchone()
                owner_, epoch_, expires, head, old_digest, old_first, deleted = state
                if deleted is not None:
                    self._ids.pop(key, None)
                    check_tombstone(key, self._tombstone_of(c, key))
                check_fence(key, LeaseRow(owner_, int(epoch_), float(expires)), fence, now)
                old = None if old_digest is None else (old_digest, int(old_first))
                if not decide_append(key, int(head or 0), expected_seq, old, digest):
                    return
                raise StorageError(f"session {key}: append refused for no known reason")
            if expected_inbox is not None:
                check_inbox(key, self._max_seq(c, "inbox", sid), expected_inbox)
            if rest:
                bare.executemany(_INSERT_EVENT, [(sid, *row) for row in rest])
            delta = decide_catalogue(batch, nbytes)
            bare.execute(
                _CATALOGUE_AFTER_APPEND,
                (delta.events, delta.turns, delta.bytes, delta.turn_status, now, now, sid),
            )

        self._group.run(write, self._commit_group)

    def _commit_group(self, writes: list[Write]) -> None:
        """Commit the appends of several sessions that are ready together in one transaction
        (one fsync). Each runs in its own savepoint with its own checks, so one append's
        refusal (a conflict, a fence, a deleted session) rolls back only that append. A lone
        append needs no savepoint: its refusal rolls back the transaction."""
        with self._write() as c:
            if len(writes) == 1:
                writes[0].write(c)
                return
            for pending in writes:
                c.execute("SAVEPOINT append")
                try:
                    pending.write(c)
                except Exception as exc:  # noqa: BLE001 - that append's own outcome
                    c.execute("ROLLBACK TO append")
                    pending.error = (
                        translate(exc, self.path) if isinstance(exc, sqlite3.Error) else exc
                    )
                c.execute("RELEASE append")

    def _rows(self, key: SessionKey, after: int, through: int) -> list[tuple[Any, ...]]:
        conn = self._conn()
        return conn.execute(_SELECT_ROWS, (self._sid(key, conn), after, through)).fetchall()

    def _read(self, key: SessionKey, after: int, through: int) -> list[Event]:
        return [_rows.decode(key, r, self.get_blob) for r in self._rows(key, after, through)]

    def _read_raw(self, key: SessionKey, after: int, through: int) -> list[RawEvent]:
        return [
            RawEvent(*_rows.decode_raw(key, r, self.get_blob))
            for r in self._rows(key, after, through)
        ]

    def _read_arrow(self, key: SessionKey, after: int, through: int) -> Any:
        """Rows fetched straight into Arrow by ADBC's SQLite driver when it is installed.

        The driver opens the file read-only on its own connection (autocommit: no snapshot
        is held between reads). It types columns from the rows it fetched, so one read is one
        batch; rows whose columns do not have the stored types, or a driver error, fall back
        to reading row by row, which names the damage.
        """
        adbc = self._adbc()
        if adbc is None:
            return super()._read_arrow(key, after, through)
        from agentnb.stores._arrow import Unreadable, verified

        sid = self._sid(key)
        try:
            with adbc.cursor() as cur:
                cur.adbc_statement.set_options(
                    **{"adbc.sqlite.query.batch_rows": str(max(1, through - after))}
                )
                cur.execute(_SELECT_ROWS, (sid, after, through))
                rows = cur.fetch_arrow_table()
            return verified(key, rows, self.get_blob)
        except Exception as exc:
            if not isinstance(exc, (Unreadable, OSError, *adbc_errors())):
                raise
            return super()._read_arrow(key, after, through)

    def _adbc(self) -> Any:
        """This thread's ADBC connection (``None`` without ``adbc-driver-sqlite``)."""
        conn = self._conns.get("adbc")
        if conn is None:
            if self._closed:
                raise StorageError(f"store {self.url} is closed")
            try:
                import adbc_driver_sqlite.dbapi as adbc
            except ImportError:
                return None
            uri = f"{self.path.resolve().as_uri()}?mode=ro"
            conn = adbc.connect(uri, autocommit=True)
            with conn.cursor() as cur:
                cur.execute(f"PRAGMA busy_timeout={self._busy_ms}")
            self._conns.put("adbc", conn)
        return conn
