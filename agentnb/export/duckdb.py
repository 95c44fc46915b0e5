"""``DuckDBSink``: a DuckDB file with a ``raw_events`` table keyed by ``event_id`` and the views
of ``exporters/schema.sql``.

Each ``accept`` also keeps ``turn_rollups``, one row of ``turn_rollup`` per turn, in the same
transaction, and ``turn_parts`` reads it: the ``turns`` view does not rescan the events.

Deleted sessions. ``forget(tombstones)`` deletes the sessions' rows from ``raw_events`` and
``turn_rollups`` and records their keys in ``deleted_sessions`` (with who deleted them, when
and why), in one transaction, then checkpoints: every view stops showing them. A key in
``deleted_sessions`` is applied already (a tombstone delivered again changes nothing), and
``accept`` drops events of such a key (an exporter that read them before the delete). What
the file's bytes keep: DuckDB reuses the space of deleted rows but does not zero it, so
until it is overwritten the deleted text may still be found in the file by reading it raw;
copying the database into a new file (``COPY FROM DATABASE``) drops it.

A DuckDB file open for writing locks out every other process (even read-only ones), so the
sink opens it for one ``accept`` and closes it before returning: a notebook kernel never holds
it longer. A writer that finds it locked retries with backoff for ``lock_timeout`` seconds.

Storage version. DuckDB 2.0 writes a storage format (v2.0.0) that no DuckDB 1.x reads, the
1.x command-line tool included. A new export file is created with
``storage_compatibility_version`` set to ``STORAGE_VERSION`` (``v1.1.0``), so every DuckDB
from 1.1 on, Python module or CLI, opens it; later writes keep the file's format. (DuckDB
1.0 cannot: its catalog reader fails on the views of ``schema.sql`` whatever the format.) Pass
``storage_version="v2.0.0"`` (or ``"latest"``) for the newest format when every reader is
2.0 or later. A file that exists keeps the format it was made with.

Files. A new export file is owner-only (0600) from the start: it is made in a private
(0700) folder beside the target and linked into place, so it is never readable by others,
not even empty; folders the sink creates are 0700. (While an ``accept`` runs, DuckDB's own
``.wal`` file beside it has the process's default mode; it is gone when the file is
closed. Keep exports in a folder of your own.) An existing file keeps its mode. Before
DuckDB opens a file, its header is checked: an SQLite file (an agentnb store) raises
``InvalidInput`` (DuckDB itself would try to download an extension to read it), any other
file that is not a DuckDB database ``Corrupt``.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from agentnb.errors import Corrupt, InvalidInput, StorageError
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
from agentnb.stores.base import Tombstone
from agentnb.stores.sqlite import make_private_dirs

require_export_deps()

import duckdb  # noqa: E402 - after the friendly check above
import pyarrow as pa  # noqa: E402

__all__ = ["STORAGE_VERSION", "DuckDBSink", "check_duckdb_file", "open_duckdb"]

TABLE = "raw_events"
ROLLUPS = "turn_rollups"
"""One row of ``turn_rollup`` per turn, kept by each ``accept`` (``turn_parts`` reads it)."""
DELETED = "deleted_sessions"
"""The sessions ``forget`` removed: their keys, with who deleted them, when and why."""
_KEY = ("namespace", "user_id", "agent_id", "session_id")
_SAME_KEY = " AND ".join(f"d.{k} = t.{k}" for k in _KEY)


STORAGE_VERSION = "v1.1.0"
"""The storage format of new export files: readable by DuckDB 1.1 and every later version
(``tests/export/test_duckdb_compat.py`` opens one with DuckDB 1.1.0 and the 1.x CLI)."""
_STORAGE_VERSION = re.compile(r"^(v\d+\.\d+\.\d+|latest)$")

_SQLITE_MAGIC = b"SQLite format 3\x00"
_DUCKDB_MAGIC = b"DUCK"
"""Bytes 8-11 of every DuckDB database file."""


def check_duckdb_file(path: str) -> None:
    """Refuse an existing file that is not a DuckDB database, before DuckDB reads it:
    ``InvalidInput`` for an SQLite file (the wrong kind of source), ``Corrupt`` for any
    other file."""
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except FileNotFoundError:
        return
    except IsADirectoryError:
        raise InvalidInput(f"DuckDB path {path!r} is a folder; pass a file path") from None
    except OSError as exc:
        raise StorageError(f"cannot read DuckDB file {path!r}: {exc.strerror}") from None
    if head.startswith(_SQLITE_MAGIC):
        raise InvalidInput(
            f"{path!r} is an SQLite database (an agentnb store?), not a DuckDB file: read a "
            f"store as sqlite:///{path}, and export to a .duckdb file of its own"
        )
    if head[8:12] != _DUCKDB_MAGIC:
        raise Corrupt(
            f"{path!r} is not a DuckDB database file; pass a DuckDB export, or a new path "
            "to export to"
        )


def _refuse_link(path: Path) -> None:
    """``InvalidInput`` if ``path`` is a symbolic link: a sink writes only the file it names
    (following a link would write wherever it points)."""
    if path.is_symlink():
        raise InvalidInput(
            f"DuckDB path {str(path)!r} is a symbolic link; a sink does not follow links: pass "
            "the path of the file itself"
        )


def open_duckdb(
    path: str, *, read_only: bool = False, lock_timeout: float = 30.0
) -> duckdb.DuckDBPyConnection:
    """Open a DuckDB file, waiting (with backoff) while another process holds its lock.

    A file that exists but is not a DuckDB database raises ``InvalidInput`` first.
    """
    check_duckdb_file(path)
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

    ``name`` defaults to ``duckdb:<absolute path>``. ``storage_version`` is the DuckDB storage
    format a new file is created with (see the module docstring); a malformed one raises
    ``InvalidInput``.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        name: str | None = None,
        lock_timeout: float = 30.0,
        storage_version: str = STORAGE_VERSION,
    ) -> None:
        if not isinstance(storage_version, str) or not _STORAGE_VERSION.match(storage_version):
            raise InvalidInput(
                "storage_version must look like 'v1.1.0' (the oldest DuckDB that must read "
                f"the file) or be 'latest', got {storage_version!r}"
            )
        given = Path(os.fspath(path)).expanduser()
        _refuse_link(given)
        resolved = given.parent.resolve() / given.name
        if resolved.is_dir():
            raise InvalidInput(f"DuckDB path {str(resolved)!r} is a folder; pass a file path")
        check_duckdb_file(str(resolved))
        make_private_dirs(resolved.parent)
        self.path = str(resolved)
        self.name = name if name is not None else sink_name("duckdb", self.path)
        self.lock_timeout = lock_timeout
        self.storage_version = storage_version
        self._mutex = threading.Lock()
        self._rollups: Rollups | None = None

    def __repr__(self) -> str:
        return f"DuckDBSink({self.path!r}, name={self.name!r})"

    def _open_to_write(self) -> duckdb.DuckDBPyConnection:
        # Checked at every write too: a link put in the file's place later is not followed.
        _refuse_link(Path(self.path))
        return open_duckdb(self.path, lock_timeout=self.lock_timeout)

    def accept(self, events: Batch) -> None:
        """Insert the events (``INSERT OR IGNORE`` by ``event_id``) and update the turn
        rollups of the inserted ones, in one transaction."""
        if not any(events.values()):
            return
        envelope = to_arrow(events)
        with self._mutex:
            if self._rollups is None:
                self._rollups = Rollups()
            if not os.path.exists(self.path):
                self._create()
            con = self._open_to_write()
            try:
                con.execute("BEGIN TRANSACTION")
                self._ensure_schema(con)
                gone = self._forgotten(con, list(events))
                if gone:  # read before their delete by some exporter: drop them
                    envelope = to_arrow({k: v for k, v in events.items() if k not in gone})
                con.register("batch", envelope)
                inserted = con.sql(
                    f"INSERT OR IGNORE INTO {TABLE} {FLATTEN_SQL} RETURNING *"
                ).to_arrow_table()
                self._roll_up(con, self._rollups, inserted)
                con.execute("COMMIT")
            finally:
                con.close()

    def forget(self, tombstones: Sequence[Tombstone]) -> None:
        """Delete every row of the tombstones' sessions (events and turn rollups) and record
        their keys in ``deleted_sessions``, in one transaction (see the module docstring)."""
        if not tombstones:
            return
        with self._mutex:
            if not os.path.exists(self.path):
                self._create()
            con = self._open_to_write()
            try:
                con.execute("BEGIN TRANSACTION")
                self._ensure_schema(con)
                known = self._forgotten(con, [t.key for t in tombstones])
                fresh = [t for t in tombstones if t.key not in known]
                if fresh:
                    con.register("gone", _tombstone_table(fresh))
                    for table in (TABLE, ROLLUPS):
                        con.execute(
                            f"DELETE FROM {table} AS t WHERE EXISTS "
                            f"(SELECT 1 FROM gone AS d WHERE {_SAME_KEY})"
                        )
                    con.execute(f"INSERT INTO {DELETED} BY NAME SELECT * FROM gone")
                con.execute("COMMIT")
                if fresh:
                    con.execute("CHECKPOINT")
            finally:
                con.close()

    @staticmethod
    def _forgotten(con: duckdb.DuckDBPyConnection, keys: Sequence[SessionKey]) -> set[SessionKey]:
        """Which of ``keys`` ``forget`` removed before."""
        asked = pa.table({k: [getattr(key, k) for key in keys] for k in _KEY})
        con.register("asked", asked)
        try:
            rows = con.execute(
                f"SELECT {', '.join(_KEY)} FROM asked AS t WHERE EXISTS "
                f"(SELECT 1 FROM {DELETED} AS d WHERE {_SAME_KEY})"
            ).fetchall()
        finally:
            con.unregister("asked")
        return {SessionKey(*row) for row in rows}

    def _create(self) -> None:
        """Make the file, with its schema, owner-only from the start (see the module
        docstring); a file another writer made meanwhile is kept."""
        folder = tempfile.mkdtemp(prefix=".agentnb-", dir=os.path.dirname(self.path))
        try:
            tmp = os.path.join(folder, "new.duckdb")
            try:
                con = duckdb.connect(
                    tmp, config={"storage_compatibility_version": self.storage_version}
                )
            except duckdb.Error as exc:
                raise InvalidInput(
                    f"DuckDB {duckdb.__version__} cannot write storage version "
                    f"{self.storage_version!r}: {exc}"
                ) from None
            con.execute("SET TimeZone = 'UTC'")
            try:
                self._ensure_schema(con)
            finally:
                con.close()
            os.chmod(tmp, 0o600)
            try:
                os.link(tmp, self.path)
            except FileExistsError:
                pass
            except OSError:  # no hard links on this file system
                if not os.path.exists(self.path):
                    os.replace(tmp, self.path)
        finally:
            with contextlib.suppress(OSError):
                shutil.rmtree(folder)

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
            _refuse_link(Path(self.path))
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
        con.execute(
            f"CREATE TABLE IF NOT EXISTS {DELETED} (namespace VARCHAR, user_id VARCHAR, "
            "agent_id VARCHAR, session_id VARCHAR, deleted_at TIMESTAMPTZ, deleted_by VARCHAR, "
            "reason VARCHAR, events BIGINT, PRIMARY KEY (namespace, user_id, agent_id, "
            "session_id))"
        )


def _tombstone_table(tombstones: Sequence[Tombstone]) -> pa.Table:
    """The ``deleted_sessions`` rows of ``tombstones``."""
    from datetime import UTC, datetime

    columns: dict[str, list[object]] = {k: [getattr(t.key, k) for t in tombstones] for k in _KEY}
    columns["deleted_at"] = [datetime.fromtimestamp(t.deleted_at, UTC) for t in tombstones]
    columns["deleted_by"] = [t.deleted_by for t in tombstones]
    columns["reason"] = [t.reason for t in tombstones]
    columns["events"] = [t.events for t in tombstones]
    return pa.table(columns)
