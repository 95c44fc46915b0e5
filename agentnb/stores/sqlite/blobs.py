"""The blobs and snapshots of an SQLite store, and its secret."""

from __future__ import annotations

import sqlite3

from agentnb.errors import InvalidInput
from agentnb.ids import SessionKey
from agentnb.stores import _rows
from agentnb.stores.sqlite.core import SQLiteCore

__all__ = ["SQLiteBlobs"]


class SQLiteBlobs(SQLiteCore):
    """``Blobs``'s hooks."""

    @staticmethod
    def _put_blob(c: sqlite3.Connection, data: bytes) -> str:
        digest = _rows.blob_digest(data)
        c.execute("INSERT OR IGNORE INTO blobs VALUES (?, ?)", (digest, data))
        return digest

    def put_blob(self, data: bytes) -> str:
        if not isinstance(data, bytes | bytearray):
            raise InvalidInput(f"blob data must be bytes, got {type(data).__name__}")
        with self._write() as c:
            return self._put_blob(c, bytes(data))

    def get_blob(self, digest: str) -> bytes:
        row = self._conn().execute("SELECT data FROM blobs WHERE digest=?", (digest,)).fetchone()
        return _rows.check_blob(digest, bytes(row[0]) if row else None)

    def _blob_usage(self, key: SessionKey) -> dict[str, int]:
        conn = self._conn()
        rows = conn.execute(
            "SELECT r.digest, length(b.data) FROM blob_refs AS r JOIN blobs AS b "
            "ON b.digest = r.digest WHERE r.session=? ORDER BY r.digest",
            (self._sid(key, conn),),
        ).fetchall()
        return {str(d): int(n) for d, n in rows}

    def _put_snapshot(self, key: SessionKey, name: str, seq: int, data: bytes) -> None:
        sid = self._sid(key)
        with self._write() as c:
            self._check_live(c, key, sid)
            c.execute(
                "INSERT INTO snapshots VALUES (?,?,?,?) ON CONFLICT (session, name) DO "
                "UPDATE SET seq=excluded.seq, data=excluded.data WHERE excluded.seq > seq",
                (sid, name, seq, data),
            )

    def _get_snapshot(self, key: SessionKey, name: str) -> tuple[int, bytes] | None:
        conn = self._conn()
        row = conn.execute(
            "SELECT seq, CAST(data AS BLOB) FROM snapshots WHERE session=? AND name=?",
            (self._sid(key, conn), name),
        ).fetchone()
        if row is None or type(row[0]) is not int or row[1] is None:
            return None  # an edited row: a cache the reader does without
        return row[0], bytes(row[1])

    def _secret(self) -> bytes:
        row = self._conn().execute("SELECT value FROM agentnb_meta WHERE key='secret'").fetchone()
        return bytes(row[0])
