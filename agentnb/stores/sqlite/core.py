"""What every role of an SQLite store stands on: its connections and the write transaction,
and the lookups each role makes (a session's row id, its liveness, its tombstone).
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

from agentnb.errors import Corrupt, InvalidInput, SessionNotFound, StorageError
from agentnb.ids import SessionKey
from agentnb.stores import _rows
from agentnb.stores.base import (
    LeaseRow,
    SessionStore,
    Tombstone,
    check_tombstone,
    fold_case,
)
from agentnb.stores.sqlite.connections import (
    Connection,
    FileWriters,
    ThreadConnections,
    check_damage,
    enable_wal,
    translate,
)
from agentnb.stores.sqlite.files import SIDE_FILES, prepare_side_file
from agentnb.stores.sqlite.group_commit import GroupCommit

__all__ = ["SQLiteCore"]

TOMBSTONE_COLUMNS = (
    "namespace, user_id, agent_id, session_id, deleted_at, deleted_by, deleted_reason, "
    "events, deleted_seq"
)


class SQLiteCore(SessionStore):
    """The state an SQLite store's roles share, and the connection discipline they follow."""

    _digests_rows = True
    local_io = True
    _indexes_work = True
    path: Path
    synchronous: str
    read_only: bool
    """The file is not writable here: opened read-only (every write is refused)."""
    _busy_ms: int
    _turn_timeout: float
    """Seconds a write waits for the other writers of this process."""
    _conns: ThreadConnections
    _writers: FileWriters
    _group: GroupCommit
    _ids: dict[SessionKey, int]
    _catalogue: Path
    _create: bool
    _pending_thread: threading.Thread | None = None

    @property
    def _durable(self) -> bool:
        """Whether commits are flushed to disk (``synchronous`` FULL or EXTRA)."""
        return self.synchronous in ("FULL", "EXTRA")

    # -- connections -------------------------------------------------------------------------

    def _conn(self) -> Connection:
        conn: Connection | None = self._conns.get("conn")
        if conn is None:
            if self._closed:
                raise StorageError(f"store {self.url} is closed")
            try:
                if self.read_only:
                    conn = self._connect_read_only()
                    self._conns.put("conn", conn)
                    return conn
                conn = sqlite3.connect(
                    self.path,
                    isolation_level=None,
                    check_same_thread=False,
                    timeout=self._busy_ms / 1000,
                    factory=Connection,
                )
                conn.path = self.path
                # Search folds case as every backend does (SQLite's lower() is ASCII only).
                conn.create_function("agentnb_fold", 1, _fold, deterministic=True)
                conn.execute(f"PRAGMA busy_timeout={self._busy_ms}")
                mode = enable_wal(conn, self._busy_ms / 1000)
                if mode is None or str(mode[0]).lower() != "wal":
                    raise Corrupt(f"{self.path}: cannot switch to WAL mode ({mode})")
                conn.execute(f"PRAGMA synchronous={self.synchronous}")
                # Deleted rows are zeroed in place (builds differ in the default), so a
                # deleted session's text does not linger in free pages of the file.
                conn.execute("PRAGMA secure_delete=ON")
                for suffix in SIDE_FILES:  # made by SQLite in a race with a closing process
                    prepare_side_file(Path(f"{self.path}{suffix}"), make=False)
            except (sqlite3.DatabaseError, Corrupt, InvalidInput) as exc:
                if conn is not None:
                    conn.close()
                if not isinstance(exc, sqlite3.DatabaseError):
                    raise
                if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
                    raise translate(exc, self.path) from None
                raise Corrupt(
                    f"{self.path} is not an agentnb store ({exc}); point the store at a new file"
                ) from None
            self._conns.put("conn", conn)
        return conn

    def _connect_read_only(self) -> Connection:
        """A connection to a file this process may not write (``mode=ro``), or, when SQLite
        cannot share its WAL index read-only either (no ``-shm`` it may use), to the file
        as it is (``immutable=1``: a reader of a file nobody writes now)."""
        uri = self.path.resolve().as_uri()
        for options in ("mode=ro", "mode=ro&immutable=1"):
            conn = sqlite3.connect(
                f"{uri}?{options}",
                uri=True,
                isolation_level=None,
                check_same_thread=False,
                timeout=self._busy_ms / 1000,
                factory=Connection,
            )
            try:
                conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            except sqlite3.OperationalError:
                conn.close()
                continue
            conn.path = self.path
            conn.create_function("agentnb_fold", 1, _fold, deterministic=True)
            conn.execute(f"PRAGMA busy_timeout={self._busy_ms}")
            return conn
        raise StorageError(
            f"{self.path} is not writable here and SQLite cannot read it read-only either; "
            "read it as a user who may write it, or copy it"
        )

    @contextlib.contextmanager
    def _write(self) -> Iterator[Connection]:
        """One write transaction. The writers of this process take turns on a lock of their
        own first: SQLite's busy handler, which only another process's writer now meets,
        sleeps at least a millisecond each time it finds the file locked."""
        conn = self._conn()
        writers = self._writers
        turn = writers.lock
        if not turn.acquire(timeout=self._turn_timeout):
            raise StorageError(
                f"{self.path} stayed locked by another writer of this process for "
                f"{self._turn_timeout:g}s; retry later"
            )
        bare = conn.bare
        try:
            writers.take(self._busy_ms / 1000)
        except BaseException:
            turn.release()
            raise
        try:
            try:
                bare.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise translate(exc, self.path) from None
            try:
                yield conn
            except sqlite3.Error as exc:
                with contextlib.suppress(sqlite3.Error):
                    bare.execute("ROLLBACK")
                if isinstance(exc, sqlite3.DatabaseError):
                    check_damage(exc, conn)
                raise translate(exc, self.path) from None
            except BaseException:
                bare.execute("ROLLBACK")
                raise
            try:
                bare.execute("COMMIT")
            except sqlite3.Error as exc:
                with contextlib.suppress(sqlite3.Error):
                    bare.execute("ROLLBACK")
                if isinstance(exc, sqlite3.DatabaseError):
                    check_damage(exc, conn)
                raise translate(exc, self.path) from None
        finally:
            writers.give()
            turn.release()

    def _sid(self, key: SessionKey, conn: sqlite3.Connection | None = None) -> int:
        sid = self._ids.get(key)
        if sid is None:
            row = (
                (conn or self._conn())
                .execute(
                    "SELECT id, deleted_at FROM sessions WHERE namespace=? AND user_id=? "
                    "AND agent_id=? AND session_id=?",
                    (key.namespace, key.user_id, key.agent_id, key.session_id),
                )
                .fetchone()
            )
            if row is None:
                raise SessionNotFound(f"session {key} does not exist; create it first")
            if row[1] is not None:
                check_tombstone(key, self._tombstone(key))
            sid = self._ids[key] = int(row[0])
        return sid

    def _check_live(self, c: sqlite3.Connection, key: SessionKey, sid: int) -> None:
        """``SessionDeleted`` if the session was deleted (by any process, since this one
        cached its row id); called inside the write transaction it guards."""
        row = c.execute("SELECT deleted_at FROM sessions WHERE id=?", (sid,)).fetchone()
        if row is None or row[0] is not None:
            self._gone(c, key)

    def _gone(self, c: sqlite3.Connection, key: SessionKey) -> NoReturn:
        self._ids.pop(key, None)
        check_tombstone(key, self._tombstone_of(c, key))
        raise SessionNotFound(f"session {key} does not exist; create it first")

    @staticmethod
    def _max_seq(conn: sqlite3.Connection, table: str, sid: int) -> int:
        row = conn.execute(f"SELECT max(seq) FROM {table} WHERE session=?", (sid,)).fetchone()
        return int(row[0] or 0)

    def _live_head(self, key: SessionKey, table: str) -> int:
        """The last seq of ``table``; ``SessionDeleted`` once another process deleted the
        session this one knows by its cached row id."""
        conn = self._conn()
        sid = self._sid(key, conn)
        head, deleted = conn.execute(
            f"SELECT (SELECT max(seq) FROM {table} WHERE session=?1), deleted_at FROM sessions "
            "WHERE id=?1",
            (sid,),
        ).fetchone()
        if deleted is not None:
            self._gone(conn, key)
        return int(head or 0)

    def _lease_of(self, conn: sqlite3.Connection, sid: int, key: SessionKey) -> LeaseRow:
        owner, epoch, expires, deleted = conn.execute(
            "SELECT lease_owner, lease_epoch, lease_expires, deleted_at FROM sessions WHERE id=?",
            (sid,),
        ).fetchone()
        if deleted is not None:
            self._gone(conn, key)
        return LeaseRow(owner, int(epoch), float(expires))

    @staticmethod
    def _tombstone_of(c: sqlite3.Connection, key: SessionKey) -> Tombstone | None:
        row = c.execute(
            f"SELECT {TOMBSTONE_COLUMNS} FROM sessions "
            "WHERE namespace=? AND user_id=? AND agent_id=? AND session_id=? "
            "AND deleted_at IS NOT NULL",
            (key.namespace, key.user_id, key.agent_id, key.session_id),
        ).fetchone()
        return None if row is None else tombstone_row(row)

    @staticmethod
    def _put_ref(
        c: sqlite3.Connection | sqlite3.Cursor, sid: int, digest: str | None, data: bytes
    ) -> str:
        """Store a blob a row of session ``sid`` names, and the reference."""
        digest = digest or _rows.blob_digest(data)
        # Only a new blob pays for its bytes: a part the store holds is one index lookup.
        if not c.execute("SELECT 1 FROM blobs WHERE digest=?", (digest,)).fetchone():
            c.execute("INSERT INTO blobs VALUES (?, ?)", (digest, data))
        c.execute("INSERT OR IGNORE INTO blob_refs VALUES (?, ?)", (sid, digest))
        return digest


def tombstone_row(row: tuple[Any, ...]) -> Tombstone:
    ns, user, agent, session_id, at, by, reason, events, seq = row
    return Tombstone(
        SessionKey(ns, user, agent, session_id), float(at), by, reason or "", int(events), int(seq)
    )


def _fold(text: str | None) -> str | None:
    return None if text is None else fold_case(text)
