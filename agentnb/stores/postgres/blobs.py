"""The blobs and snapshots of a PostgreSQL store, and its secret."""

from __future__ import annotations

import logging

from agentnb.errors import (
    Corrupt,
    InvalidInput,
)
from agentnb.ids import SessionKey
from agentnb.stores import _rows
from agentnb.stores.postgres.core import LIVE, PostgresCore

__all__ = ["PostgresBlobs"]

log = logging.getLogger("agentnb.stores.postgres")


class PostgresBlobs(PostgresCore):
    """``Blobs``'s hooks."""

    def put_blob(self, data: bytes) -> str:
        if not isinstance(data, bytes | bytearray):
            raise InvalidInput(f"blob data must be bytes, got {type(data).__name__}")
        with self._operation():
            digest = _rows.blob_digest(bytes(data))
            self._write(
                lambda c: c.execute(
                    "INSERT INTO agentnb.blobs VALUES (%s, %s) ON CONFLICT DO NOTHING",
                    (digest, bytes(data)),
                ),
                f"storing blob {digest}",
            )
            return digest

    def get_blob(self, digest: str) -> bytes:
        row = self._query(
            lambda c: c.execute(
                "SELECT data FROM agentnb.blobs WHERE digest = %s", (digest,)
            ).fetchone()
        )
        return _rows.check_blob(digest, bytes(row[0]) if row else None)

    def _blob_usage(self, key: SessionKey) -> dict[str, int]:
        sid = self._sid(key)
        rows = self._query(
            lambda c: c.execute(
                "SELECT r.digest, octet_length(b.data) FROM agentnb.blob_refs AS r "
                "JOIN agentnb.blobs AS b ON b.digest = r.digest WHERE r.session = %s "
                "ORDER BY r.digest",
                (sid,),
            ).fetchall()
        )
        return {str(d): int(n) for d, n in rows}

    def _put_snapshot(self, key: SessionKey, name: str, seq: int, data: bytes) -> None:
        sid = self._sid(key)
        written = self._write(
            lambda c: (
                c.execute(
                    f"WITH {LIVE}INSERT INTO agentnb.snapshots AS n SELECT s.id, %s, %s, %s "
                    "FROM s ON CONFLICT (session, name) DO UPDATE SET seq = excluded.seq, "
                    "data = excluded.data WHERE excluded.seq > n.seq",
                    (sid, name, seq, data),
                ).rowcount
            ),
            f"storing snapshot {name!r} of session {key}",
        )
        if not written:  # an older snapshot than the stored one, or a deleted session
            self._column(key, "head")

    def _get_snapshot(self, key: SessionKey, name: str) -> tuple[int, bytes] | None:
        sid = self._sid(key)
        row = self._query(
            lambda c: c.execute(
                "SELECT seq, data FROM agentnb.snapshots WHERE session = %s AND name = %s",
                (sid, name),
            ).fetchone()
        )
        return (int(row[0]), bytes(row[1])) if row else None

    def _secret(self) -> bytes:
        if self._secret_bytes is None:
            row = self._query(
                lambda c: c.execute(
                    "SELECT value FROM agentnb.meta WHERE key = 'secret'"
                ).fetchone()
            )
            if row is None or len(row[0]) != 32:
                raise Corrupt(f"{self.url}: the store secret is missing or damaged")
            self._secret_bytes = bytes(row[0])
        return self._secret_bytes
