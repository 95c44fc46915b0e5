"""The export watermarks of an SQLite store."""

from __future__ import annotations

from agentnb.ids import SessionKey
from agentnb.stores.sqlite.core import SQLiteCore

__all__ = ["SQLiteWatermarks"]


class SQLiteWatermarks(SQLiteCore):
    """``Watermarks``'s hooks."""

    def _watermark(self, key: SessionKey, sink: str) -> int:
        conn = self._conn()
        row = conn.execute(
            "SELECT seq FROM watermarks WHERE session=? AND sink=?", (self._sid(key, conn), sink)
        ).fetchone()
        return int(row[0]) if row else 0

    def _watermarks(self, key: SessionKey) -> dict[str, int]:
        conn = self._conn()
        rows = conn.execute(
            "SELECT sink, seq FROM watermarks WHERE session=? ORDER BY sink",
            (self._sid(key, conn),),
        ).fetchall()
        return {str(sink): int(seq) for sink, seq in rows}

    def _advance_watermark(self, key: SessionKey, sink: str, seq: int) -> int:
        sid = self._sid(key)
        with self._write() as c:
            self._check_live(c, key, sid)
            c.execute(
                "INSERT INTO watermarks VALUES (?,?,?) ON CONFLICT (session, sink) "
                "DO UPDATE SET seq=max(seq, excluded.seq)",
                (sid, sink, seq),
            )
            row = c.execute(
                "SELECT seq FROM watermarks WHERE session=? AND sink=?", (sid, sink)
            ).fetchone()
        return int(row[0])
