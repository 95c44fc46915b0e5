"""The export watermarks of a PostgreSQL store."""

from __future__ import annotations

import logging

from agentnb.ids import SessionKey
from agentnb.stores.postgres.core import LIVE, PostgresCore

__all__ = ["PostgresWatermarks"]

log = logging.getLogger("agentnb.stores.postgres")


class PostgresWatermarks(PostgresCore):
    """``Watermarks``'s hooks."""

    def _watermark(self, key: SessionKey, sink: str) -> int:
        sid = self._sid(key)
        row = self._query(
            lambda c: c.execute(
                "SELECT seq FROM agentnb.watermarks WHERE session = %s AND sink = %s", (sid, sink)
            ).fetchone()
        )
        return int(row[0]) if row else 0

    def _watermarks(self, key: SessionKey) -> dict[str, int]:
        sid = self._sid(key)
        rows = self._query(
            lambda c: c.execute(
                "SELECT sink, seq FROM agentnb.watermarks WHERE session = %s ORDER BY sink",
                (sid,),
            ).fetchall()
        )
        return {str(sink): int(seq) for sink, seq in rows}

    def _advance_watermark(self, key: SessionKey, sink: str, seq: int) -> int:
        sid = self._sid(key)
        row = self._write(
            lambda c: c.execute(
                f"WITH {LIVE}INSERT INTO agentnb.watermarks AS w SELECT s.id, %s, %s FROM s "
                "ON CONFLICT (session, sink) DO UPDATE SET seq = greatest(w.seq, excluded.seq) "
                "RETURNING seq",
                (sid, sink, seq),
            ).fetchone(),
            f"advancing watermark {sink!r} of session {key}",
        )
        if row is None:
            self._gone(key)
        return int(row[0])
