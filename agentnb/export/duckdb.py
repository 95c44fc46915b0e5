"""``DuckDBSink``: a DuckDB file with a ``raw_events`` table keyed by ``event_id`` and the views
of ``exporters/schema.sql``.

Each ``accept`` also keeps ``turn_rollups``, one row of ``turn_rollup`` per turn, in the same
transaction, and ``turn_parts`` reads it: the ``turns`` view does not rescan the events.

A DuckDB file open for writing locks out every other process (even read-only ones), so the
sink opens it for one ``accept`` and closes it before returning: a notebook kernel never holds
it longer. A writer that finds it locked retries with backoff for ``lock_timeout`` seconds.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from agentnb.errors import InvalidInput, StorageError
from agentnb.export.base import sink_name
from agentnb.export.columns import (
    FLATTEN_SQL,
    Batch,
    connect,
    create_table_sql,
    require_export_deps,
    to_arrow,
)
from agentnb.export.rollup import Rollups
from agentnb.export.sql import schema_sql
from agentnb.ids import SessionKey

require_export_deps()

import duckdb  # noqa: E402 - after the friendly check above
import pyarrow as pa  # noqa: E402

__all__ = ["DuckDBSink", "open_duckdb"]

TABLE = "raw_events"
ROLLUPS = "turn_rollups"
"""One row of ``turn_rollup`` per turn, kept by each ``accept`` (``turn_parts`` reads it)."""


def open_duckdb(
    path: str, *, read_only: bool = False, lock_timeout: float = 30.0
) -> duckdb.DuckDBPyConnection:
    """Open a DuckDB file, waiting (with backoff) while another process holds its lock."""
    deadline = time.monotonic() + lock_timeout
    delay = 0.02
    while True:
        try:
            return connect(path, read_only=read_only)
        except duckdb.IOException as exc:
            if "lock" not in str(exc).lower() or time.monotonic() >= deadline:
                raise StorageError(f"cannot open DuckDB file {path!r}: {exc}") from None
            time.sleep(delay)
            delay = min(delay * 2, 0.5)
        except duckdb.Error as exc:
            raise StorageError(f"cannot open DuckDB file {path!r}: {exc}") from None


class DuckDBSink:
    """Exports events into the DuckDB file at ``path`` (created if missing).

    ``name`` defaults to ``duckdb:<absolute path>``.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, name: str | None = None, lock_timeout: float = 30.0
    ) -> None:
        resolved = Path(os.fspath(path)).expanduser().resolve()
        if resolved.is_dir():
            raise InvalidInput(f"DuckDB path {str(resolved)!r} is a folder; pass a file path")
        resolved.parent.mkdir(parents=True, exist_ok=True)
        self.path = str(resolved)
        self.name = name if name is not None else sink_name("duckdb", self.path)
        self.lock_timeout = lock_timeout
        self._mutex = threading.Lock()
        self._rollups: Rollups | None = None

    def __repr__(self) -> str:
        return f"DuckDBSink({self.path!r}, name={self.name!r})"

    def accept(self, events: Batch) -> None:
        """Insert the events (``INSERT OR IGNORE`` by ``event_id``) and update the turn
        rollups of the inserted ones, in one transaction."""
        if not any(events.values()):
            return
        envelope = to_arrow(events)
        with self._mutex:
            if self._rollups is None:
                self._rollups = Rollups()
            con = open_duckdb(self.path, lock_timeout=self.lock_timeout)
            try:
                con.register("batch", envelope)
                con.execute("BEGIN TRANSACTION")
                self._ensure_schema(con)
                inserted = con.sql(
                    f"INSERT OR IGNORE INTO {TABLE} {FLATTEN_SQL} RETURNING *"
                ).to_arrow_table()
                self._roll_up(con, self._rollups, inserted)
                con.execute("COMMIT")
            finally:
                con.close()

    @staticmethod
    def _roll_up(con: duckdb.DuckDBPyConnection, rollups: Rollups, inserted: pa.Table) -> None:
        """Replace the rollup rows of the turns ``inserted`` events belong to."""
        fresh = rollups.of(inserted)
        if not fresh.num_rows:
            return
        con.register("fresh_turns", fresh)
        mine = "turn_id IN (SELECT turn_id FROM fresh_turns)"
        old = con.sql(f"SELECT * FROM {ROLLUPS} WHERE {mine}").to_arrow_table()
        combined = rollups.combine([old, fresh]) if old.num_rows else fresh
        con.execute(f"DELETE FROM {ROLLUPS} WHERE {mine}")
        con.register("combined_turns", combined)
        con.execute(f"INSERT INTO {ROLLUPS} BY NAME SELECT * FROM combined_turns")

    def position(self, key: SessionKey) -> int:
        """Highest seq ``s`` such that the table holds seqs ``1..s`` of the session."""
        if not os.path.exists(self.path):
            return 0
        with self._mutex:
            con = open_duckdb(self.path, read_only=True, lock_timeout=self.lock_timeout)
            try:
                exists = con.execute(
                    "SELECT count(*) FROM information_schema.tables WHERE table_name = ?",
                    [TABLE],
                ).fetchone()
                if not exists or not exists[0]:
                    return 0
                where = "namespace = ? AND user_id = ? AND agent_id = ? AND session_id = ?"
                params = [key.namespace, key.user_id, key.agent_id, key.session_id]
                row = con.execute(
                    f"SELECT count(DISTINCT seq), coalesce(max(seq), 0) FROM {TABLE} WHERE {where}",
                    params,
                ).fetchone()
                assert row is not None
                count, top = int(row[0]), int(row[1])
                if count == top:
                    return top
                gap = con.execute(
                    f"SELECT min(seq) FROM (SELECT seq, lead(seq) OVER (ORDER BY seq) AS nxt "
                    f"FROM {TABLE} WHERE {where}) WHERE nxt IS NULL OR nxt <> seq + 1",
                    params,
                ).fetchone()
                first = con.execute(
                    f"SELECT min(seq) FROM {TABLE} WHERE {where}", params
                ).fetchone()
                if first is None or first[0] != 1 or gap is None:
                    return 0
                return int(gap[0])
            finally:
                con.close()

    def _ensure_schema(self, con: duckdb.DuckDBPyConnection) -> None:
        con.execute(create_table_sql(TABLE))
        # schema.sql's views bind as they are created: turn_parts must name a relation that
        # exists, so it is made again over the rollup table once that exists.
        con.execute("DROP VIEW IF EXISTS turn_parts")
        con.execute(schema_sql())
        # A file written before rollups were kept gets them from its events, once.
        con.execute(f"CREATE TABLE IF NOT EXISTS {ROLLUPS} AS SELECT * FROM turn_rollup")
        con.execute(f"CREATE OR REPLACE VIEW turn_parts AS SELECT * FROM {ROLLUPS}")
