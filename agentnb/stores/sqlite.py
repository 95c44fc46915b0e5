"""The embedded default store: one SQLite file in WAL mode, safe across threads and processes.

Files. The store file and its ``-wal`` and ``-shm`` files are owner-only (0600), and folders
the store creates are 0700. SQLite gives a new ``-wal``/``-shm`` the mode of the store file,
so the store makes them itself (owner-only) before SQLite would, and tightens existing ones
it owns: they hold the conversations too, even when someone loosened the store file. A
store file (or ``-wal``/``-shm``) that is a symbolic link, dangling or not, is refused, as
is one that another user owns or that others can write (``InvalidInput``, saying what to
do). A damaged page surfaces as ``Corrupt`` naming the file, never as a bare ``sqlite3``
error.

Lost sessions. Losing the ``-wal`` file (deleted, or not copied with the store file) rolls
the database back to its last checkpoint, consistently: the sessions created since then
vanish, and nothing inside the file can tell, since the catalogue, the snapshots and the
export watermarks all roll back together. So the store keeps one fact outside the file: the
``-catalogue`` file beside it (owner-only, a few bytes) records the highest session id ever
committed. Sessions are never removed from the catalogue, so that number only grows. It is
written after the commit that creates a session (never before: a failed commit cannot make
it claim too much), and read together with the catalogue under the write lock, so writers
in other processes cannot make it look ahead. Opening a store whose catalogue holds fewer
sessions than the record knows raises ``Corrupt`` naming the file, instead of answering
``SessionNotFound`` later. If the loss is accepted (a backup restored on purpose), deleting
the ``-catalogue`` file makes the store open as it is. With ``synchronous=NORMAL`` or
``OFF`` the record is not flushed to disk, so after a power loss it may be missing (no
check) but never ahead of what was acknowledged as durable. Events lost from an existing
session are not detected this way (that would cost a second flush per commit).

Why it is long: one backend is one class: schema and migrations, the append transaction
and its group commit, leases, the catalogue, deletions and the file checks share one
connection discipline that splitting would spread across modules.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import sqlite3
import stat
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from agentnb import _portable
from agentnb.errors import Corrupt, IdempotencyConflict, InvalidInput, SessionNotFound, StorageError
from agentnb.events import Event
from agentnb.ids import Clock, SessionKey, check_id
from agentnb.stores import _rows
from agentnb.stores.base import (
    Lease,
    LeaseRow,
    RawEvent,
    SessionQuery,
    SessionRecord,
    SessionStore,
    TokenRecord,
    Tombstone,
    Unset,
    check_archived,
    check_fence,
    check_inbox,
    check_lease,
    check_pending_scope,
    check_tombstone,
    check_ttl,
    decide_acquire,
    decide_append,
    decide_catalogue,
    decide_release,
    decide_tombstone_mark,
    does_work,
    encode_cursor,
    fold_case,
    leases_of,
    merge_labels,
    meta_update,
    submit_delta,
    submit_text,
)

FORMAT = "agentnb-sqlite/6"
_MIGRATABLE = ("agentnb-sqlite/2", "agentnb-sqlite/3", "agentnb-sqlite/4", "agentnb-sqlite/5")
"""Formats this agentnb migrates in place: 2 gains the lifecycle columns (its logs are
counted), 2 and 3 the archive flag, the order of deletions and the tombstone watermarks,
2 to 4 the listing key and the pending-work mark (format 5), and all of them the blob
references (format 6: payloads in blobs by part, see ``_rows.stored_body``)."""
SYNCHRONOUS = ("OFF", "NORMAL", "FULL", "EXTRA")
CATALOGUE = "-catalogue"
"""Suffix of the file beside the store that records the highest session id committed."""
_CATALOGUE_FORMAT = "agentnb-catalogue/1"
_SIDE_FILES = ("-wal", "-shm")
# SQLite's result codes (the low byte of an extended code) for a damaged file.
_SQLITE_CORRUPT, _SQLITE_NOTADB = 11, 26

log = logging.getLogger("agentnb.stores.sqlite")


def _fold(text: str | None) -> str | None:
    return None if text is None else fold_case(text)


_SCHEMA = """
CREATE TABLE IF NOT EXISTS agentnb_meta (key TEXT PRIMARY KEY, value BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS sessions (
    id INTEGER PRIMARY KEY,
    namespace TEXT NOT NULL, user_id TEXT NOT NULL, agent_id TEXT NOT NULL,
    session_id TEXT NOT NULL, created_at REAL NOT NULL,
    lease_owner TEXT, lease_epoch INTEGER NOT NULL DEFAULT 0,
    lease_expires REAL NOT NULL DEFAULT 0,
    UNIQUE (namespace, user_id, agent_id, session_id)
);
-- The lifecycle columns (format 3) follow in _LIFECYCLE, shared with the migration from 2.
CREATE TABLE IF NOT EXISTS events (
    session INTEGER NOT NULL, seq INTEGER NOT NULL, event_id TEXT NOT NULL,
    type TEXT NOT NULL, turn_id TEXT, run_id TEXT, required INTEGER NOT NULL,
    occurred_us INTEGER NOT NULL, schema_version INTEGER NOT NULL,
    payload TEXT, blob TEXT, crc INTEGER NOT NULL,
    batch_id TEXT, digest TEXT,
    PRIMARY KEY (session, seq)
);
CREATE UNIQUE INDEX IF NOT EXISTS events_batch ON events (session, batch_id)
    WHERE batch_id IS NOT NULL;
CREATE TABLE IF NOT EXISTS inbox (
    session INTEGER NOT NULL, seq INTEGER NOT NULL, event_id TEXT NOT NULL,
    type TEXT NOT NULL, turn_id TEXT, run_id TEXT, required INTEGER NOT NULL,
    occurred_us INTEGER NOT NULL, schema_version INTEGER NOT NULL,
    payload TEXT, blob TEXT, crc INTEGER NOT NULL,
    dedupe_key TEXT, digest TEXT,
    PRIMARY KEY (session, seq)
);
CREATE UNIQUE INDEX IF NOT EXISTS inbox_dedupe ON inbox (session, dedupe_key)
    WHERE dedupe_key IS NOT NULL;
CREATE TABLE IF NOT EXISTS watermarks (
    session INTEGER NOT NULL, sink TEXT NOT NULL, seq INTEGER NOT NULL,
    PRIMARY KEY (session, sink)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS blobs (digest TEXT PRIMARY KEY, data BLOB NOT NULL);
-- Format 6: which sessions' rows name which blobs (a blob is freed with the last of them).
CREATE TABLE IF NOT EXISTS blob_refs (
    session INTEGER NOT NULL, digest TEXT NOT NULL, PRIMARY KEY (session, digest)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS blob_refs_digest ON blob_refs (digest);
CREATE TABLE IF NOT EXISTS snapshots (
    session INTEGER NOT NULL, name TEXT NOT NULL, seq INTEGER NOT NULL, data BLOB NOT NULL,
    PRIMARY KEY (session, name)
);
-- Format 4: how far each export sink has applied the tombstones (sessions.deleted_seq).
CREATE TABLE IF NOT EXISTS tombstone_marks (sink TEXT PRIMARY KEY, seq INTEGER NOT NULL);
-- The service's bearer tokens (digests only). Created on open, so a store written before the
-- service existed gains it without a migration (an older agentnb ignores the table).
CREATE TABLE IF NOT EXISTS tokens (
    token_id TEXT PRIMARY KEY, user_id TEXT NOT NULL, label TEXT NOT NULL,
    digest TEXT NOT NULL, created_at REAL NOT NULL, last_used_at REAL, revoked_at REAL,
    expires_at REAL, parent TEXT
);
CREATE INDEX IF NOT EXISTS tokens_parent ON tokens (parent) WHERE parent IS NOT NULL;
"""
_FORMAT_4_COLUMNS = ("archived_at REAL", "deleted_seq INTEGER")
"""The columns format 4 adds (the archive flag and the order of deletions)."""
_FORMAT_5_COLUMNS = ("list_key REAL NOT NULL DEFAULT 0", "pending_since REAL")
"""The columns format 5 adds: the listing key (see ``_LIFECYCLE_INDEXES``) and the
pending-work mark (see ``claim_pending``)."""
_LIFECYCLE_COLUMNS = (
    "updated_at REAL NOT NULL DEFAULT 0",
    "last_activity REAL NOT NULL DEFAULT 0",
    "title TEXT",
    "labels TEXT",
    "first_task TEXT",
    "events INTEGER NOT NULL DEFAULT 0",
    "turns INTEGER NOT NULL DEFAULT 0",
    "bytes INTEGER NOT NULL DEFAULT 0",
    "submits INTEGER NOT NULL DEFAULT 0",
    "turn_status TEXT",
    "deleted_at REAL",
    "deleted_by TEXT",
    "deleted_reason TEXT",
    *_FORMAT_4_COLUMNS,
    *_FORMAT_5_COLUMNS,
)
# Listing reads an index range: newest activity first, for one user or for everyone. Only
# live sessions are indexed.
#
# The listing key (format 5). The listing is ordered by ``list_key``, not by
# ``last_activity`` itself, so that an append of the session listed first moves no index
# entry (the commit then dirties no index page of the catalogue). The triggers keep one
# rule: every live session but the first in the order has ``list_key = last_activity``;
# the first one's key may trail its activity (it is first either way). So the order by
# (list_key, id) is the order by (last_activity, id), and filters on the activity read
# ``last_activity`` itself. When another session becomes active (or is created), the first
# one's key is brought up to its activity before that session's key moves.
_TOP_LISTED = (
    "SELECT id FROM sessions WHERE deleted_at IS NULL{} ORDER BY list_key DESC, id DESC LIMIT 1"
)
_LIFECYCLE_INDEXES = (
    (
        "CREATE INDEX IF NOT EXISTS sessions_listed ON sessions (list_key, id) "
        "WHERE deleted_at IS NULL"
    ),
    (
        "CREATE INDEX IF NOT EXISTS sessions_user_listed "
        "ON sessions (namespace, user_id, agent_id, list_key, id) WHERE deleted_at IS NULL"
    ),
    (
        "CREATE UNIQUE INDEX IF NOT EXISTS sessions_deleted ON sessions (deleted_seq) "
        "WHERE deleted_seq IS NOT NULL"
    ),
    (
        "CREATE INDEX IF NOT EXISTS sessions_pending ON sessions (pending_since) "
        "WHERE pending_since IS NOT NULL"
    ),
    # A session became active: unless it is (still) first, bring the first one's key up to
    # its activity, then its own key.
    (
        "CREATE TRIGGER IF NOT EXISTS sessions_active AFTER UPDATE OF last_activity ON sessions "
        "WHEN NEW.deleted_at IS NULL AND NOT (NEW.last_activity >= NEW.list_key "
        f"AND NEW.id IS ({_TOP_LISTED.format('')})) BEGIN "
        f"UPDATE sessions SET list_key = last_activity WHERE id = ({_TOP_LISTED.format('')}) "
        "AND list_key <> last_activity; "
        "UPDATE sessions SET list_key = NEW.last_activity WHERE id = NEW.id; END"
    ),
    # A session was created: the same, the first one being another session.
    (
        "CREATE TRIGGER IF NOT EXISTS sessions_created AFTER INSERT ON sessions BEGIN "
        "UPDATE sessions SET list_key = last_activity WHERE id = "
        f"({_TOP_LISTED.format(' AND id <> NEW.id')}) AND list_key <> last_activity; "
        "UPDATE sessions SET list_key = NEW.last_activity WHERE id = NEW.id; END"
    ),
)
_OLD_INDEXES = ("sessions_recent", "sessions_user_recent")
"""The listing indexes of formats 3 and 4 (on ``last_activity``), dropped by the migration."""
_OLD_BLOB_INDEXES = ("events_blob", "inbox_blob")
"""Formats 3 to 5 found a blob's sessions through these; ``blob_refs`` does it since 6."""
# The references a format-5 (or older) store's rows hold: one digest per row then.
_BACKFILL_REFS = (
    "INSERT OR IGNORE INTO blob_refs SELECT session, blob FROM events WHERE blob IS NOT NULL "
    "UNION SELECT session, blob FROM inbox WHERE blob IS NOT NULL"
)
# A deleted session's blobs, unless another session's rows name them too.
_DELETE_BLOBS = (
    "DELETE FROM blobs WHERE digest IN (SELECT digest FROM blob_refs WHERE session=?1) "
    "AND NOT EXISTS (SELECT 1 FROM blob_refs AS r WHERE r.digest=blobs.digest "
    "AND r.session<>?1)"
)
# Numbering the deletions a format-2 or -3 store holds (once, at the migration), by time.
_NUMBER_DELETIONS = """
UPDATE sessions SET deleted_seq = (SELECT count(*) FROM sessions AS o
    WHERE o.deleted_at IS NOT NULL AND (o.deleted_at < sessions.deleted_at
    OR (o.deleted_at = sessions.deleted_at AND o.id <= sessions.id)))
WHERE deleted_at IS NOT NULL
"""
_TOP_DELETION = "SELECT coalesce(max(deleted_seq), 0) FROM sessions WHERE deleted_seq IS NOT NULL"
_TOMBSTONE_COLUMNS = (
    "namespace, user_id, agent_id, session_id, deleted_at, deleted_by, deleted_reason, "
    "events, deleted_seq"
)
_ACCESS_COLUMNS = (
    "token_id, user_id, label, digest, created_at, last_used_at, revoked_at, expires_at, parent"
)


def _token_row(row: Sequence[Any]) -> TokenRecord:
    token_id, user_id, label, digest, created, used, revoked, expires, parent = row
    return TokenRecord(
        token_id, user_id, label, created, used, revoked, expires, parent, digest=digest
    )


# Counting what a format-2 store already holds (once, at the migration).
_BACKFILL = """
UPDATE sessions SET
    events = (SELECT count(*) FROM events WHERE session = sessions.id),
    turns = (SELECT count(*) FROM events WHERE session = sessions.id AND type = 'turn/start'),
    bytes = (SELECT coalesce(sum(length(payload)), 0) FROM events WHERE session = sessions.id),
    submits = (SELECT count(*) FROM inbox WHERE session = sessions.id
        AND type = 'inbox/accepted' AND json_extract(payload, '$.kind') = 'submit'),
    turn_status = (SELECT CASE type WHEN 'turn/start' THEN 'running'
        WHEN 'turn/resumed' THEN 'running' ELSE substr(type, 6) END
        FROM events WHERE session = sessions.id AND type IN ('turn/start', 'turn/resumed',
        'turn/completed', 'turn/failed', 'turn/suspended', 'turn/interrupted',
        'turn/cancelled') ORDER BY seq DESC LIMIT 1),
    first_task = (SELECT substr(t, 1, instr(t || char(10), char(10)) - 1) FROM (
        SELECT substr(json_extract(payload, '$.input'), 1, 256) AS t FROM inbox
        WHERE session = sessions.id AND type = 'inbox/accepted'
        AND json_extract(payload, '$.kind') = 'submit' ORDER BY seq LIMIT 1)),
    updated_at = coalesce((SELECT max(occurred_us) / 1e6 FROM events
        WHERE session = sessions.id), created_at),
    last_activity = max(
        coalesce((SELECT max(occurred_us) / 1e6 FROM events WHERE session = sessions.id), 0),
        coalesce((SELECT max(occurred_us) / 1e6 FROM inbox WHERE session = sessions.id), 0),
        created_at)
"""
_RECORD_COLUMNS = (
    "id, namespace, user_id, agent_id, session_id, created_at, updated_at, last_activity, "
    "title, labels, first_task, events, turns, bytes, submits, turn_status, lease_owner, "
    "lease_expires, archived_at, list_key"
)
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
# Sessions with accepted work and no live lease, oldest waiting first (the claim's read).
_CLAIMABLE = (
    "SELECT id, namespace, user_id, agent_id, session_id, lease_epoch FROM sessions "
    "WHERE pending_since IS NOT NULL AND deleted_at IS NULL "
    "AND (lease_owner IS NULL OR lease_expires <= ?1) "
    "AND (?2 IS NULL OR agent_id = ?2) AND (?3 IS NULL OR namespace = ?3) "
    "ORDER BY pending_since, id LIMIT ?4"
)
_HELD = (
    "SELECT namespace, user_id, agent_id, session_id, lease_owner, lease_epoch, lease_expires "
    "FROM sessions WHERE pending_since IS NOT NULL AND deleted_at IS NULL "
    "AND lease_owner IS NOT NULL AND lease_expires > ?1 "
    "AND (?2 IS NULL OR agent_id = ?2) AND (?3 IS NULL OR namespace = ?3) "
    "ORDER BY pending_since, id LIMIT ?4"
)
_SETTLE = (
    "UPDATE sessions SET pending_since = NULL{release} WHERE id = ?1 "
    "AND (SELECT coalesce(max(seq), 0) FROM inbox WHERE session = ?1) = ?2 "
    "AND lease_owner = ?3 AND lease_epoch = ?4 AND lease_expires > ?5"
)
_SETTLES = {
    False: _SETTLE.format(release=""),
    True: _SETTLE.format(release=", lease_owner = NULL, lease_expires = 0"),
}
_INSERT_INBOX = (
    f"INSERT INTO inbox (session, {_rows.COLUMNS}, dedupe_key, digest) "
    "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
)


class SQLiteStore(SessionStore):
    """A ``SessionStore`` in one SQLite file (``synchronous=FULL`` unless told otherwise).

    With ``create=False`` a missing file raises ``InvalidInput`` and nothing is created (no
    folder, no file): for readers such as ``agentnb.analysis``. ``busy_timeout``: seconds a
    write waits while another process writes the file; the writers of this process take
    turns among themselves and never meet that wait.
    """

    _digests_rows = True
    local_io = True

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: str = "FULL",
        clock: Clock | None = None,
        busy_timeout: float = 30.0,
        create: bool = True,
    ) -> None:
        super().__init__(clock=clock)
        if not isinstance(path, str | os.PathLike):
            raise InvalidInput(f"path must be a str or path, got {type(path).__name__}")
        if str(synchronous).upper() not in SYNCHRONOUS:
            raise InvalidInput(f"synchronous must be one of {SYNCHRONOUS}, got {synchronous!r}")
        self.path = Path(path)
        self.synchronous = str(synchronous).upper()
        self.url = f"sqlite:///{self.path}"
        self._file = os.path.abspath(self.path)
        self._busy_ms = int(busy_timeout * 1000)
        self._conns = _ThreadConnections()
        self._ids: dict[SessionKey, int] = {}
        self._group = _GroupCommit()
        self._create = create
        self.read_only = False
        """The file is not writable here: opened read-only (every write is refused)."""
        self._catalogue = Path(f"{self.path}{CATALOGUE}")
        self._pending_watchers: list[Callable[[SessionKey | None], None]] = []
        self._pending_lock = threading.Lock()
        self._pending_thread: threading.Thread | None = None
        self._prepare_file()
        self._writers = _writers_of(self.path)
        try:
            self._init_schema()
        except BaseException:
            self.close()  # a refused file must not leave connections open behind it
            raise

    # -- connections -------------------------------------------------------------------------

    def _prepare_file(self) -> None:
        info = _lstat(self.path)
        if info is None:
            if not self._create:
                raise InvalidInput(
                    f"there is no agentnb store at {self.path}; check the path (opening a "
                    "store to read it never creates one)"
                )
            # No store file: a -catalogue record beside it belongs to a store deleted before.
            with contextlib.suppress(FileNotFoundError):
                self._catalogue.unlink()
            make_private_dirs(self.path.parent)
            try:
                os.close(os.open(self.path, _CREATE, 0o600))
            except FileExistsError:  # another process made it first (or a link appeared)
                info = _lstat(self.path)
        if info is not None:
            _check_store_file(self.path, info)
            if info.st_size and not os.access(self.path, os.W_OK):
                self.read_only = True  # a reader of a file it may not change (see _connect)
                return
            if not info.st_size:
                os.chmod(self.path, 0o600)  # empty: nobody's data yet, and the mode SQLite copies
        loose = info is not None and info.st_size and stat.S_IMODE(info.st_mode) & 0o077
        for suffix in _SIDE_FILES:
            _prepare_side_file(Path(f"{self.path}{suffix}"), make=bool(loose))

    def _conn(self) -> _Connection:
        conn: _Connection | None = self._conns.get("conn")
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
                    factory=_Connection,
                )
                conn.path = self.path
                # Search folds case as every backend does (SQLite's lower() is ASCII only).
                conn.create_function("agentnb_fold", 1, _fold, deterministic=True)
                conn.execute(f"PRAGMA busy_timeout={self._busy_ms}")
                mode = _enable_wal(conn, self._busy_ms / 1000)
                if mode is None or str(mode[0]).lower() != "wal":
                    raise Corrupt(f"{self.path}: cannot switch to WAL mode ({mode})")
                conn.execute(f"PRAGMA synchronous={self.synchronous}")
                # Deleted rows are zeroed in place (builds differ in the default), so a
                # deleted session's text does not linger in free pages of the file.
                conn.execute("PRAGMA secure_delete=ON")
                for suffix in _SIDE_FILES:  # made by SQLite in a race with a closing process
                    _prepare_side_file(Path(f"{self.path}{suffix}"), make=False)
            except (sqlite3.DatabaseError, Corrupt, InvalidInput) as exc:
                if conn is not None:
                    conn.close()
                if not isinstance(exc, sqlite3.DatabaseError):
                    raise
                if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
                    raise _translate(exc, self.path) from None
                raise Corrupt(
                    f"{self.path} is not an agentnb store ({exc}); point the store at a new file"
                ) from None
            self._conns.put("conn", conn)
        return conn

    def _connect_read_only(self) -> _Connection:
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
                factory=_Connection,
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
    def _write(self) -> Iterator[_Connection]:
        """One write transaction. The writers of this process take turns on a lock of their
        own first: SQLite's busy handler, which only another process's writer now meets,
        sleeps at least a millisecond each time it finds the file locked."""
        conn = self._conn()
        writers = self._writers
        turn = writers.lock
        if not turn.acquire(timeout=_TURN_TIMEOUT):
            raise StorageError(
                f"{self.path} stayed locked by another writer of this process for "
                f"{_TURN_TIMEOUT:g}s; retry later"
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
                raise _translate(exc, self.path) from None
            try:
                yield conn
            except sqlite3.Error as exc:
                with contextlib.suppress(sqlite3.Error):
                    bare.execute("ROLLBACK")
                if isinstance(exc, sqlite3.DatabaseError):
                    _check_damage(exc, conn)
                raise _translate(exc, self.path) from None
            except BaseException:
                bare.execute("ROLLBACK")
                raise
            try:
                bare.execute("COMMIT")
            except sqlite3.Error as exc:
                with contextlib.suppress(sqlite3.Error):
                    bare.execute("ROLLBACK")
                if isinstance(exc, sqlite3.DatabaseError):
                    _check_damage(exc, conn)
                raise _translate(exc, self.path) from None
        finally:
            writers.give()
            turn.release()

    def _init_schema(self) -> None:
        conn = self._conn()
        try:
            tables = {
                r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
            }
        except sqlite3.DatabaseError as exc:
            raise Corrupt(
                f"{self.path} is not an agentnb store ({exc}); point the store at a new file"
            ) from None
        if tables and "agentnb_meta" not in tables:
            raise Corrupt(
                f"{self.path} is an SQLite database that agentnb did not create "
                f"(tables: {', '.join(sorted(tables)[:5])}); use another file"
            )
        old = None
        if tables:  # an existing store: its format decides, before any statement of ours runs
            old = conn.execute("SELECT value FROM agentnb_meta WHERE key='format'").fetchone()
            if old is None or old[0] not in _MIGRATABLE:
                self._check_format(old)
        if self.read_only:
            if old is None or old[0] != FORMAT:
                raise InvalidInput(
                    f"{self.path} is not writable here and its store is in an older format "
                    f"({old[0] if old else 'none'}); open it once where it is writable (that "
                    "migrates it), then read it here"
                )
            return
        with self._write() as c:
            recorded = self._recorded_sessions()
            top = self._top_session(c)
            if recorded is not None and recorded > top:
                raise self._lost(recorded, top)
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    c.execute(statement)
            self._add_lifecycle(c)
            c.execute("INSERT OR IGNORE INTO agentnb_meta VALUES ('format', ?)", (FORMAT,))
            c.execute("INSERT OR IGNORE INTO agentnb_meta VALUES ('secret', ?)", (os.urandom(32),))
            fmt = c.execute("SELECT value FROM agentnb_meta WHERE key='format'").fetchone()
            if recorded != top and self._create:
                self._record_sessions(top)
        self._check_format(fmt)

    def _add_lifecycle(self, c: sqlite3.Connection) -> None:
        """Formats 3 to 6: the lifecycle columns, indexes and triggers; a format-2 to -5
        store is migrated in place (in the schema transaction: counting what the logs of a
        format-2 store hold, numbering the deletions of a format-2 or -3 one, keying the
        listing of one up to 4, recording the blobs every one's rows name)."""
        fmt = c.execute("SELECT value FROM agentnb_meta WHERE key='format'").fetchone()
        columns = {r[1] for r in c.execute("PRAGMA table_info(sessions)")}
        for column in _LIFECYCLE_COLUMNS:
            if column.split()[0] not in columns:
                c.execute(f"ALTER TABLE sessions ADD COLUMN {column}")
        if fmt is not None and fmt[0] in _MIGRATABLE:
            if fmt[0] == "agentnb-sqlite/2":
                c.execute(_BACKFILL)
            if fmt[0] in ("agentnb-sqlite/2", "agentnb-sqlite/3"):
                c.execute(_NUMBER_DELETIONS)
            for index in _OLD_INDEXES:
                c.execute(f"DROP INDEX IF EXISTS {index}")
            if fmt[0] != "agentnb-sqlite/5":
                c.execute("UPDATE sessions SET list_key = last_activity")
                # A worker looks once at every session with commands, and settles the idle
                # ones.
                c.execute(
                    "UPDATE sessions SET pending_since = last_activity WHERE deleted_at IS NULL "
                    "AND EXISTS (SELECT 1 FROM inbox WHERE session = sessions.id)"
                )
            c.execute(_BACKFILL_REFS)
            for index in _OLD_BLOB_INDEXES:
                c.execute(f"DROP INDEX IF EXISTS {index}")
            c.execute("UPDATE agentnb_meta SET value=? WHERE key='format'", (FORMAT,))
            log.info("%s migrated from %s to %s", self.path, fmt[0], FORMAT)
        for statement in _LIFECYCLE_INDEXES:
            c.execute(statement)

    # -- the -catalogue record (see the module docstring) -------------------------------------

    @staticmethod
    def _top_session(c: sqlite3.Connection) -> int:
        if not c.execute("SELECT 1 FROM sqlite_master WHERE name='sessions'").fetchone():
            return 0
        return int(c.execute("SELECT coalesce(max(id), 0) FROM sessions").fetchone()[0])

    def _recorded_sessions(self) -> int | None:
        """The highest session id the -catalogue record knows (None: no record)."""
        try:
            fd = os.open(self._catalogue, os.O_RDONLY | _portable.O_NOFOLLOW)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise InvalidInput(
                f"{self._catalogue} cannot be read ({exc.strerror}); it must be a file of "
                "your own, not a link: delete it and open the store again"
            ) from None
        with os.fdopen(fd, "rb") as f:
            text = f.read(4096)
        try:
            record = json.loads(text)
            if record.get("format") != _CATALOGUE_FORMAT:
                raise ValueError(f"format {record.get('format')!r}")
            sessions = record["sessions"]
            if not isinstance(sessions, int) or sessions < 0:
                raise ValueError(f"sessions {sessions!r}")
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise Corrupt(
                f"{self._catalogue} is not an agentnb catalogue record ({exc}); delete it "
                f"to open {self.path} as it is"
            ) from None
        return sessions

    def _record_sessions(self, top: int) -> None:
        """Replace the -catalogue record (under the write lock; best effort)."""
        tmp = Path(f"{self._catalogue}.{os.getpid()}.{threading.get_ident()}.tmp")
        data = json.dumps({"format": _CATALOGUE_FORMAT, "sessions": top}).encode()
        durable = self.synchronous in ("FULL", "EXTRA")
        try:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()  # left by a process that died here (with this pid and thread)
            fd = os.open(tmp, _CREATE, 0o600)
            try:
                os.write(fd, data)
                if durable:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self._catalogue)
            if durable:
                _sync_dir(self._catalogue.parent)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            log.warning("%s not updated (%s): lost sessions may go undetected", tmp, exc)

    def _lost(self, recorded: int, top: int) -> Corrupt:
        return Corrupt(
            f"{self.path} lost sessions it had committed: its catalogue holds "
            f"{top} but {self._catalogue} records {recorded} (its -wal file was deleted or "
            "lost, or the file was replaced by an older copy). Restore the -wal file or a "
            f"backup; to accept the store as it is, delete {self._catalogue}"
        )

    def _check_format(self, fmt: tuple[Any, ...] | None) -> None:
        if fmt is None or fmt[0] != FORMAT:
            raise Corrupt(
                f"{self.path} has store format {fmt and fmt[0]!r}; this agentnb reads "
                f"{FORMAT!r} (and migrates {' and '.join(map(repr, _MIGRATABLE))} in place). "
                "Open it with the "
                "agentnb that wrote it (and export what you need), or point the store at a "
                "new file"
            )

    def __repr__(self) -> str:
        # The file it opened, resolved: a relative URL depends on the working directory.
        return f"SQLiteStore({self._file!r})"

    def close(self) -> None:
        super().close()
        self._conns.close()

    def _idle(self) -> None:
        self._conns.lend()

    # -- catalogue ---------------------------------------------------------------------------

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

    @staticmethod
    def _record(row: tuple[Any, ...]) -> SessionRecord:
        (row_id, ns, user, agent, sid, created, updated, activity, title, labels, first) = row[:11]
        events, turns, nbytes, submits, status, owner, expires, archived, list_key = row[11:]
        return SessionRecord(
            SessionKey(ns, user, agent, sid),
            float(created),
            float(updated),
            float(activity),
            title,
            json.loads(labels) if labels else {},
            first,
            int(events),
            int(turns),
            int(nbytes),
            int(submits),
            status,
            owner,
            float(expires),
            encode_cursor(float(list_key), int(row_id)),
            None if archived is None else float(archived),
        )

    def _find_sessions(self, query: SessionQuery) -> list[SessionRecord]:
        where = ["deleted_at IS NULL"]
        if query.archived is not None:
            where.append(f"archived_at IS {'NOT ' if query.archived else ''}NULL")
        params: list[Any] = []
        for column in ("namespace", "user_id", "agent_id"):
            value = getattr(query, column)
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        if query.turn_status is not None:
            marks = ",".join("?" * len(query.turn_status))
            where.append(f"coalesce(turn_status, 'none') IN ({marks})")
            params.extend(sorted(query.turn_status))
        for name, value in (query.labels or {}).items():
            where.append("EXISTS (SELECT 1 FROM json_each(labels) WHERE key = ? AND value = ?)")
            params.extend((name, value))
        # The bounds are on the activity; the index range is on the key, which is the
        # activity for every session but the first listed (its key may trail): the range
        # starts low enough to hold that one too.
        if query.since is not None:
            where.append(
                "list_key >= min(?, (SELECT max(list_key) FROM sessions "
                "WHERE deleted_at IS NULL)) AND last_activity >= ?"
            )
            params.extend((query.since, query.since))
        if query.until is not None:
            where.append("list_key < ? AND last_activity < ?")
            params.extend((query.until, query.until))
        if query.search is not None:
            where.append(
                "(instr(agentnb_fold(coalesce(title, '')), ?) "
                "OR instr(agentnb_fold(coalesce(first_task, '')), ?))"
            )
            params.extend((query.search, query.search))
        if query.after is not None:
            where.append("(list_key, id) < (?, ?)")
            params.extend(query.after)
        rows = (
            self._conn()
            .execute(
                f"SELECT {_RECORD_COLUMNS} FROM sessions WHERE {' AND '.join(where)} "
                "ORDER BY list_key DESC, id DESC LIMIT ?",
                (*params, query.limit),
            )
            .fetchall()
        )
        return [self._record(r) for r in rows]

    def _update_session(
        self,
        key: SessionKey,
        title: str | Unset | None,
        labels: dict[str, str | None],
        now: float,
    ) -> SessionRecord:
        sid = self._sid(key)
        with self._write() as c:
            self._set_meta(c, key, sid, title, labels, now)
            found = c.execute(
                f"SELECT {_RECORD_COLUMNS} FROM sessions WHERE id=?", (sid,)
            ).fetchone()
        return self._record(found)

    def _set_meta(
        self,
        c: sqlite3.Connection,
        key: SessionKey,
        sid: int,
        title: str | Unset | None,
        labels: dict[str, str | None],
        now: float,
    ) -> None:
        """In the caller's transaction: set the title unless ``UNSET``, merge the labels."""
        row = c.execute(
            "SELECT labels FROM sessions WHERE id=? AND deleted_at IS NULL", (sid,)
        ).fetchone()
        if row is None:
            check_tombstone(key, self._tombstone_of(c, key))
        merged = merge_labels(key, json.loads(row[0]) if row[0] else {}, labels)
        c.execute(
            "UPDATE sessions SET labels=?, updated_at=?, last_activity=? WHERE id=?",
            (json.dumps(merged, sort_keys=True) if merged else None, now, now, sid),
        )
        if not isinstance(title, Unset):
            c.execute("UPDATE sessions SET title=? WHERE id=?", (title, sid))

    def _delete_session(
        self, key: SessionKey, by: str, reason: str, fence: Lease | None, now: float
    ) -> Tombstone:
        with self._write() as c:
            old = self._tombstone_of(c, key)
            if old is not None:
                return old
            sid = self._ids.pop(key, None) or self._sid(key, c)
            check_fence(key, self._lease_of(c, sid, key), fence, now)
            c.execute(_DELETE_BLOBS, (sid,))
            for table in ("events", "inbox", "watermarks", "snapshots", "blob_refs"):
                c.execute(f"DELETE FROM {table} WHERE session=?", (sid,))
            # The tombstone keeps the row (so ids, and the -catalogue record, only grow) and
            # the event count; the user's text in it (title, labels, first task) goes.
            # Writers are serialised (BEGIN IMMEDIATE): deletions commit in seq order.
            c.execute(
                "UPDATE sessions SET deleted_at=?, deleted_by=?, deleted_reason=?, title=NULL, "
                "labels=NULL, first_task=NULL, lease_owner=NULL, lease_expires=0, "
                "pending_since=NULL, "
                f"bytes=0, turns=0, submits=0, turn_status=NULL, deleted_seq=({_TOP_DELETION}) "
                "+ 1 WHERE id=?",
                (now, by, reason, sid),
            )
            tombstone = self._tombstone_of(c, key)
        self._ids.pop(key, None)
        # secure_delete zeroed the pages in the log; the checkpoint copies them into the
        # file and truncates the -wal, which still held the frames of the earlier writes.
        busy = self._conn().execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        if busy and busy[0]:
            log.warning(
                "%s: a reader kept the WAL checkpoint after deleting %s from completing; "
                "the deleted pages leave the -wal file at the next checkpoint",
                self.path,
                key,
            )
        assert tombstone is not None
        return tombstone

    def _tombstone(self, key: SessionKey) -> Tombstone | None:
        return self._tombstone_of(self._conn(), key)

    @staticmethod
    def _tombstone_of(c: sqlite3.Connection, key: SessionKey) -> Tombstone | None:
        row = c.execute(
            f"SELECT {_TOMBSTONE_COLUMNS} FROM sessions "
            "WHERE namespace=? AND user_id=? AND agent_id=? AND session_id=? "
            "AND deleted_at IS NOT NULL",
            (key.namespace, key.user_id, key.agent_id, key.session_id),
        ).fetchone()
        return None if row is None else _tombstone_row(row)

    def _tombstones(self, after: int, limit: int) -> list[Tombstone]:
        rows = (
            self._conn()
            .execute(
                f"SELECT {_TOMBSTONE_COLUMNS} FROM sessions WHERE deleted_seq > ? "
                "ORDER BY deleted_seq LIMIT ?",
                (after, limit),
            )
            .fetchall()
        )
        return [_tombstone_row(r) for r in rows]

    def _tombstone_watermark(self, sink: str) -> int:
        row = (
            self._conn().execute("SELECT seq FROM tombstone_marks WHERE sink=?", (sink,)).fetchone()
        )
        return int(row[0]) if row else 0

    def _advance_tombstone_watermark(self, sink: str, seq: int) -> int:
        with self._write() as c:
            top = int(c.execute(_TOP_DELETION).fetchone()[0])
            old = c.execute("SELECT seq FROM tombstone_marks WHERE sink=?", (sink,)).fetchone()
            mark = decide_tombstone_mark(sink, int(old[0]) if old else 0, seq, top)
            c.execute("INSERT OR REPLACE INTO tombstone_marks VALUES (?, ?)", (sink, mark))
        return mark

    def _set_archived(
        self, key: SessionKey, archived: bool, expected_inbox: int | None, now: float
    ) -> SessionRecord:
        sid = self._sid(key)
        with self._write() as c:
            self._check_live(c, key, sid)
            check_inbox(key, self._max_seq(c, "inbox", sid), expected_inbox)
            c.execute(
                "UPDATE sessions SET archived_at = CASE WHEN ? THEN coalesce(archived_at, ?) "
                "END WHERE id=?",
                (archived, now, sid),
            )
            found = c.execute(
                f"SELECT {_RECORD_COLUMNS} FROM sessions WHERE id=?", (sid,)
            ).fetchone()
        return self._record(found)

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

    def _create_session(self, key: SessionKey, now: float) -> SessionRecord:
        with self._write() as c:
            created = c.execute(
                "INSERT OR IGNORE INTO sessions (namespace, user_id, agent_id, "
                "session_id, created_at, updated_at, last_activity) VALUES (?,?,?,?,?,?,?)",
                (key.namespace, key.user_id, key.agent_id, key.session_id, now, now, now),
            ).rowcount
            if not created:
                check_tombstone(key, self._tombstone_of(c, key))
        if created:
            # After the commit, under the write lock again: the record never runs ahead of
            # the catalogue, and records written by other processes come in commit order.
            with self._write() as c:
                self._record_sessions(self._top_session(c))
        record = self._get_session(key)
        assert record is not None
        return record

    def _get_session(self, key: SessionKey) -> SessionRecord | None:
        row = (
            self._conn()
            .execute(
                f"SELECT {_RECORD_COLUMNS} FROM sessions WHERE namespace=? AND user_id=? "
                "AND agent_id=? AND session_id=? AND deleted_at IS NULL",
                (key.namespace, key.user_id, key.agent_id, key.session_id),
            )
            .fetchone()
        )
        return self._record(row) if row else None

    def _list_sessions(
        self, namespace: str | None, user_id: str | None, agent_id: str | None
    ) -> list[SessionRecord]:
        rows = (
            self._conn()
            .execute(
                f"SELECT {_RECORD_COLUMNS} FROM sessions "
                "WHERE (?1 IS NULL OR namespace=?1) AND (?2 IS NULL OR user_id=?2) "
                "AND (?3 IS NULL OR agent_id=?3) AND deleted_at IS NULL ORDER BY id",
                (namespace, user_id, agent_id),
            )
            .fetchall()
        )
        return [self._record(r) for r in rows]

    # -- execution log -----------------------------------------------------------------------

    @staticmethod
    def _max_seq(conn: sqlite3.Connection, table: str, sid: int) -> int:
        row = conn.execute(f"SELECT max(seq) FROM {table} WHERE session=?", (sid,)).fetchone()
        return int(row[0] or 0)

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

        def write(c: _Connection) -> None:
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

    def _commit_group(self, writes: list[_Write]) -> None:
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
                        _translate(exc, self.path) if isinstance(exc, sqlite3.Error) else exc
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

    # -- inbox -------------------------------------------------------------------------------

    def _inbox_append(
        self, key: SessionKey, event: Event, dedupe_key: str | None, digest: str, now: float
    ) -> tuple[Event, bool]:
        with self._write() as c:
            record, created, pending = self._inbox_insert(c, key, event, dedupe_key, digest, now)
        if pending:
            self._wake_pending(key)
        return record, created

    def _inbox_append_many(
        self, items: list[tuple[SessionKey, Event, str | None, str]], now: float
    ) -> list[tuple[Event, bool]]:
        with self._write() as c:  # one transaction: one flush to disk for them all
            done = [self._inbox_insert(c, *item, now) for item in items]
        for key in dict.fromkeys(item[0] for item, (_, _, p) in zip(items, done, strict=True) if p):
            self._wake_pending(key)
        return [(record, created) for record, created, _ in done]

    def _inbox_insert(
        self,
        c: _Connection,
        key: SessionKey,
        event: Event,
        dedupe_key: str | None,
        digest: str,
        now: float,
    ) -> tuple[Event, bool, bool]:
        """``_inbox_append`` inside the write transaction ``c``; also whether the record
        is work a waiting worker should hear of."""
        sid = self._sid(key)
        if dedupe_key is not None:
            old = c.execute(
                f"SELECT {_rows.COLUMNS}, digest FROM inbox WHERE session=? AND dedupe_key=?",
                (sid, dedupe_key),
            ).fetchone()
            if old is not None:
                if not _rows.same_fingerprint(old[-1], digest):
                    raise IdempotencyConflict(
                        f"session {key}: key {dedupe_key!r} was already used for another "
                        "command; use a new key for new content"
                    )
                return _rows.decode(key, old[:-1], self.get_blob), False, False
        task = submit_text(event)
        update = meta_update(event)
        # An update is carried out here, by the store: no worker has anything to do.
        pending = event.type == "inbox/accepted" and update is None
        if not c.execute(
            "UPDATE sessions SET last_activity=?, submits=max(submits+?, turns), "
            "first_task=coalesce(first_task, ?), pending_since=CASE WHEN ? THEN "
            "coalesce(pending_since, ?) ELSE pending_since END WHERE id=? "
            "AND deleted_at IS NULL AND (archived_at IS NULL OR NOT ?)",
            (now, submit_delta(event), task, pending, now, sid, does_work(event)),
        ).rowcount:
            self._check_live(c, key, sid)
            row = c.execute("SELECT archived_at FROM sessions WHERE id=?", (sid,)).fetchone()
            check_archived(key, row[0], event)
            raise StorageError(f"session {key}: command not accepted for no known reason")
        seq = self._max_seq(c, "inbox", sid) + 1
        c.execute(
            _INSERT_INBOX,
            (
                sid,
                *_rows.encode(event, seq, lambda b: self._put_ref(c, sid, None, b)),
                dedupe_key,
                digest,
            ),
        )
        if update is not None:
            self._set_meta(c, key, sid, *update, now)
        return event.with_seq(seq), True, pending

    def _inbox_head(self, key: SessionKey) -> int:
        return self._live_head(key, "inbox")

    def _inbox_read(self, key: SessionKey, after: int, through: int) -> list[Event]:
        conn = self._conn()
        rows = conn.execute(
            f"SELECT {_rows.COLUMNS} FROM inbox WHERE session=? AND seq>? AND seq<=? ORDER BY seq",
            (self._sid(key, conn), after, through),
        ).fetchall()
        return [_rows.decode(key, r, self.get_blob) for r in rows]

    # -- leases ------------------------------------------------------------------------------

    def _lease_row(self, key: SessionKey) -> LeaseRow | None:
        conn = self._conn()
        return self._lease_of(conn, self._sid(key, conn), key)

    def _set_lease(
        self, c: sqlite3.Connection, sid: int, owner: str | None, epoch: int, expires: float
    ) -> None:
        c.execute(
            "UPDATE sessions SET lease_owner=?, lease_epoch=?, lease_expires=? WHERE id=?",
            (owner, epoch, expires, sid),
        )

    def _acquire_lease(self, key: SessionKey, owner: str, ttl: float, now: float) -> Lease:
        sid = self._sid(key)
        with self._write() as c:
            lease = decide_acquire(key, self._lease_of(c, sid, key), owner, ttl, now)
            self._set_lease(c, sid, owner, lease.epoch, lease.expires_at)
        return lease

    def _renew_lease(self, lease: Lease, ttl: float, now: float) -> Lease:
        sid = self._sid(lease.key)
        with self._write() as c:
            check_fence(lease.key, self._lease_of(c, sid, lease.key), lease, now)
            self._set_lease(c, sid, lease.owner, lease.epoch, now + ttl)
        return Lease(lease.key, lease.owner, lease.epoch, now + ttl)

    def _release_lease(self, lease: Lease, now: float) -> None:
        sid = self._sid(lease.key)
        with self._write() as c:
            if decide_release(lease.key, self._lease_of(c, sid, lease.key), lease):
                self._set_lease(c, sid, None, lease.epoch, 0.0)

    # -- watermarks, blobs, secret -----------------------------------------------------------

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

    def _inbox_keys(self, key: SessionKey, after: int, through: int) -> list[tuple[int, str, str]]:
        conn = self._conn()
        rows = conn.execute(
            "SELECT seq, dedupe_key, digest FROM inbox WHERE session=? AND seq>? AND seq<=? "
            "AND dedupe_key IS NOT NULL ORDER BY seq",
            (self._sid(key, conn), after, through),
        ).fetchall()
        return [(int(seq), str(k), str(d or "")) for seq, k, d in rows]

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

    @staticmethod
    def _put_blob(c: sqlite3.Connection, data: bytes) -> str:
        digest = _rows.blob_digest(data)
        c.execute("INSERT OR IGNORE INTO blobs VALUES (?, ?)", (digest, data))
        return digest

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

    # -- access tokens ------------------------------------------------------------------------

    def _add_token(self, record: TokenRecord) -> TokenRecord:
        with self._write() as c:
            try:
                c.execute(
                    f"INSERT INTO tokens ({_ACCESS_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?)",
                    (
                        record.token_id,
                        record.user_id,
                        record.label,
                        record.digest,
                        record.created_at,
                        record.last_used_at,
                        record.revoked_at,
                        record.expires_at,
                        record.parent,
                    ),
                )
            except sqlite3.IntegrityError:
                raise InvalidInput(
                    f"token id {record.token_id!r} is in use; pick another"
                ) from None
        return record

    def _get_token(self, token_id: str) -> TokenRecord | None:
        row = (
            self._conn()
            .execute(f"SELECT {_ACCESS_COLUMNS} FROM tokens WHERE token_id=?", (token_id,))
            .fetchone()
        )
        return None if row is None else _token_row(row)

    def _list_tokens(self, user_id: str | None) -> list[TokenRecord]:
        rows = (
            self._conn()
            .execute(
                f"SELECT {_ACCESS_COLUMNS} FROM tokens WHERE ?1 IS NULL OR user_id = ?1 "
                "ORDER BY created_at, token_id",
                (user_id,),
            )
            .fetchall()
        )
        return [_token_row(r) for r in rows]

    def _touch_token(self, token_id: str, now: float) -> None:
        with self._write() as c:
            c.execute(
                "UPDATE tokens SET last_used_at=? WHERE token_id=? "
                "AND (last_used_at IS NULL OR last_used_at < ?)",
                (now, token_id, now),
            )

    def _revoke_token(self, token_id: str, now: float) -> TokenRecord:
        with self._write() as c:
            c.execute(
                "UPDATE tokens SET revoked_at=? WHERE (token_id=? OR parent=?) "
                "AND revoked_at IS NULL",
                (now, token_id, token_id),
            )
            row = c.execute(
                f"SELECT {_ACCESS_COLUMNS} FROM tokens WHERE token_id=?", (token_id,)
            ).fetchone()
        if row is None:
            raise InvalidInput(f"there is no token {token_id!r}; see agentnb token list")
        return _token_row(row)

    # -- worker processes: the pending-work index ------------------------------------------

    def claim_pending(
        self,
        owner: str,
        *,
        ttl: float = 10.0,
        limit: int = 1,
        agent_id: str | None = None,
        namespace: str | None = None,
    ) -> list[Lease]:
        """Lease up to ``limit`` sessions that have accepted commands and no live lease.

        An accepted command marks its session (``pending_since``, a partial index), so the
        worker processes sharing this file claim sessions with work without scanning every
        session: oldest waiting first, in one write transaction (claimers of other processes
        get disjoint sessions). A session whose holder crashed is claimable again once its
        lease expires, with the next epoch, so a stale holder is fenced.
        """
        check_id(owner, "owner")
        ttl = check_ttl(ttl)
        check_pending_scope(limit, agent_id, namespace)
        with self._operation():
            now = self.clock.now()
            params = (now, agent_id, namespace, limit)
            # A read first: the write lock, which every commit needs, is taken only when
            # there is something to claim.
            if not self._conn().execute(_CLAIMABLE, params).fetchall():
                return []
            leases = []
            with self._write() as c:
                for sid, ns, user, agent, session, epoch in c.execute(
                    _CLAIMABLE, params
                ).fetchall():
                    lease = Lease(SessionKey(ns, user, agent, session), owner, epoch + 1, now + ttl)
                    self._set_lease(c, sid, owner, lease.epoch, lease.expires_at)
                    leases.append(lease)
            for lease in leases:  # resolved here: the claimer's first look needs no lookup
                self._ids[lease.key] = self._ids.get(lease.key) or self._sid(lease.key)
            return leases

    def held_pending(
        self, *, limit: int = 100, agent_id: str | None = None, namespace: str | None = None
    ) -> list[Lease]:
        """The live leases of up to ``limit`` sessions that have queued work: their holders
        execute them, or died holding them (a claimer releases the leases of holders it
        knows dead, so it need not wait for their expiry)."""
        check_pending_scope(limit, agent_id, namespace)
        with self._operation():
            rows = (
                self._conn()
                .execute(_HELD, (self.clock.now(), agent_id, namespace, limit))
                .fetchall()
            )
        return leases_of(rows)

    def settle_pending(self, lease: Lease, inbox_seen: int, *, release: bool = False) -> bool:
        """Clear the pending-work mark of the leased session if the holder has seen its inbox
        through ``inbox_seen`` and nothing arrived since; True if cleared. ``release``: the
        lease is released in the same statement when the mark is cleared (and kept when it
        is not, so the holder can look again under it).

        A command accepted later marks the session again, so no work is left unclaimed.
        """
        check_lease(lease)
        with self._operation():
            sid = self._sid(lease.key)
            with self._write() as c:
                return (
                    c.execute(
                        _SETTLES[bool(release)],
                        (sid, inbox_seen, lease.owner, lease.epoch, self.clock.now()),
                    ).rowcount
                    == 1
                )

    def watch_pending(self, callback: Callable[[SessionKey | None], None]) -> Callable[[], None]:
        """Call ``callback`` (from a watcher thread; it must not block) when a command may
        have been accepted: at once with the session's key for a command accepted through
        this store object, and with None when another process committed to the file and a
        session is claimable (the watcher looks every ``PENDING_POLL`` seconds, reading
        SQLite's ``data_version``, a counter in shared memory, and only when it moved the
        index); returns the function that stops it.

        A hint to run ``claim_pending`` again, nothing more: a claimer still claims now and
        then without one, for sessions whose holder crashed or let go.
        """
        if not callable(callback):
            raise InvalidInput(f"callback must be callable, got {type(callback).__name__}")
        with self._pending_lock:
            self._pending_watchers.append(callback)
            if self._pending_thread is None or not self._pending_thread.is_alive():
                self._pending_thread = threading.Thread(
                    target=_watch_pending,
                    args=(weakref.ref(self),),
                    daemon=True,
                    name="agentnb-sqlite-pending",
                )
                self._pending_thread.start()

        def unwatch() -> None:
            with self._pending_lock, contextlib.suppress(ValueError):
                self._pending_watchers.remove(callback)

        return unwatch

    def _wake_pending(self, key: SessionKey | None) -> None:
        for callback in list(self._pending_watchers):
            try:
                callback(key)
            except Exception:  # a watcher's bug must not deafen the others
                log.exception("pending-work watcher failed")

    def _claimable(self, conn: sqlite3.Connection, version: int) -> tuple[int, bool]:
        """(data_version now, whether it moved and a session is claimable)."""
        now = int(conn.execute("PRAGMA data_version").fetchone()[0])
        if now == version:
            return now, False
        found = conn.execute(_CLAIMABLE, (self.clock.now(), None, None, 1)).fetchall()
        return now, bool(found)


PENDING_POLL = 0.02
"""Seconds between two looks of ``SQLiteStore.watch_pending``'s watcher at the file."""


def _watch_pending(ref: weakref.ref[SQLiteStore]) -> None:
    """The watcher thread of ``SQLiteStore.watch_pending``: ends with its store, or when
    nobody watches."""
    conn: sqlite3.Connection | None = None
    version = -1
    try:
        while True:
            store = ref()
            if store is None or store._closed or not store._pending_watchers:
                return
            try:
                if conn is None:
                    conn = sqlite3.connect(
                        store.path, isolation_level=None, check_same_thread=False
                    )
                    conn.execute(f"PRAGMA busy_timeout={store._busy_ms}")
                version, wake = store._claimable(conn, version)
                if wake:
                    store._wake_pending(None)
            except sqlite3.Error as exc:  # the file is busy or away: look again later
                log.debug("pending-work watcher: %s", exc)
            del store
            time.sleep(PENDING_POLL)
    finally:
        if conn is not None:
            conn.close()


IDLE_CONNECTIONS = 8
"""Connections of each kind a store keeps for threads to come (more are closed)."""


class _Held:
    """A thread's connection, in its ``threading.local``: when the thread ends Python drops
    it, and its finalizer gives the connection back to the pool."""

    __slots__ = ("__weakref__", "conn", "finalizer")

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.finalizer: weakref.finalize[Any, Any] | None = None


class _ThreadConnections:
    """A store's connections: a thread uses one of each kind while it works and gives it
    back to a bounded pool when it ends or goes to sleep in a wait (``lend``).

    Threads come and go (a stream's feed, a worker pool's idle thread) and most of them
    sleep most of the time; a connection kept for each thread for the store's life kept
    its descriptors and page cache after its thread was gone. Closing it does not give
    the descriptor back either while any other connection of the process is open: SQLite
    keeps the file open (a POSIX lock of the process would go with it) until a new
    connection reuses it. So the connections open at once are bounded by the threads that
    work at once, not by the threads that exist.
    """

    def __init__(self) -> None:
        self._local = threading.local()
        self._open: dict[int, Any] = {}
        self._idle: dict[str, list[Any]] = {}
        self._lock = threading.RLock()  # a finalizer may run in a thread that holds it

    def get(self, kind: str) -> Any:
        """This thread's connection of ``kind``: its own, an idle one, or None (open one
        and ``put`` it)."""
        held: _Held | None = getattr(self._local, kind, None)
        if held is not None:
            return held.conn
        with self._lock:
            idle = self._idle.get(kind)
            conn = idle.pop() if idle else None
        if conn is not None:
            self._hold(kind, conn)
        return conn

    def put(self, kind: str, conn: Any) -> None:
        """``conn`` (just opened) is this thread's connection of ``kind``."""
        with self._lock:
            self._open[id(conn)] = conn
        self._hold(kind, conn)

    def _hold(self, kind: str, conn: Any) -> None:
        held = _Held(conn)
        held.finalizer = weakref.finalize(held, self._give_back, kind, id(conn))
        setattr(self._local, kind, held)

    def lend(self) -> None:
        """This thread is about to sleep: its connections not in a transaction go back to
        the pool (it takes one again when it next reads)."""
        for kind in ("conn", "adbc"):
            held: _Held | None = getattr(self._local, kind, None)
            if held is None or getattr(held.conn, "in_transaction", False):
                continue
            delattr(self._local, kind)
            if held.finalizer is not None:
                held.finalizer()  # gives it back now, and never again

    def _give_back(self, kind: str, ident: int) -> None:
        with self._lock:
            conn = self._open.get(ident)
            if conn is None:
                return  # the store closed it
            idle = self._idle.setdefault(kind, [])
            if len(idle) < IDLE_CONNECTIONS and not getattr(conn, "in_transaction", False):
                idle.append(conn)
                return
            del self._open[ident]
        with contextlib.suppress(Exception):
            conn.close()

    def __len__(self) -> int:
        return len(self._open)

    def close(self) -> None:
        """Close every connection (the store closes; threads still running open none)."""
        with self._lock:
            conns = list(self._open.values())
            self._open.clear()
            self._idle.clear()
        # Outside the lock: dropping this thread's holder runs its finalizer here.
        self._local = threading.local()
        for conn in conns:
            with contextlib.suppress(Exception):
                conn.close()


_TURN_TIMEOUT = 60.0
"""Seconds a write waits for the other writers of this process (a write takes milliseconds:
this only bounds a wait on a writer that hangs)."""


class _Writers:
    """The turns the write transactions on one store file take, whichever store object opened
    it: the threads of this process on a lock of their own, then the processes on an
    ``flock`` of the file (a lock SQLite does not use). Re-entrant: a nested write meets
    SQLite's own refusal, as it would without it.

    Why the ``flock``: a writer that finds the file locked by another process meets SQLite's
    busy handler, which sleeps a millisecond or more each time (worker processes sharing a
    file would spend more time asleep than writing); a writer waiting here tries again after
    tens of microseconds at first. A process that dies holding it lets go with its last file
    descriptor. Writers of older agentnb versions, which do not take it, still meet the busy
    handler, as before.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.lock = threading.RLock()
        self.depth = 0
        self.fd: int | None = None

    def take(self, timeout: float) -> None:
        """Take the file's turn (the thread's turn is held); ``StorageError`` after
        ``timeout`` seconds."""
        self.depth += 1
        if self.depth > 1:
            return
        try:
            if self.fd is None:
                self.fd = os.open(
                    self.path, os.O_RDONLY | _portable.O_NOFOLLOW | _portable.O_CLOEXEC
                )
            fd = self.fd
            if _portable.try_lock_file(fd):
                return
            deadline = time.monotonic() + timeout
            pause = 20e-6
            while True:
                time.sleep(pause)
                if _portable.try_lock_file(fd):
                    return
                if time.monotonic() >= deadline:
                    raise StorageError(
                        f"{self.path} stayed locked by a writer of another process for "
                        f"{timeout:g}s; retry later"
                    ) from None
                pause = min(pause * 2, 500e-6)
        except BaseException:
            self.depth -= 1
            raise

    def give(self) -> None:
        """Give the file's turn back (before the thread's)."""
        self.depth -= 1
        if self.depth == 0 and self.fd is not None:
            _portable.unlock_file(self.fd)

    def forked(self) -> None:
        """In a forked child: the lock of another thread is nobody's, and the file's turn is
        taken on a descriptor of the child's own (the one inherited shares the parent's)."""
        self.lock = threading.RLock()
        self.depth = 0
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = None

    def __del__(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)


_WRITERS: weakref.WeakValueDictionary[str, _Writers] = weakref.WeakValueDictionary()
_WRITERS_LOCK = threading.Lock()


def _writers_of(path: Path) -> _Writers:
    name = os.path.realpath(path)
    with _WRITERS_LOCK:
        writers = _WRITERS.get(name)
        if writers is None:
            writers = _WRITERS[name] = _Writers(name)
        return writers


def _forked() -> None:
    # A child has only the forking thread: a turn another thread held is nobody's now.
    global _WRITERS_LOCK
    _WRITERS_LOCK = threading.Lock()
    for writers in list(_WRITERS.values()):
        writers.forked()


_portable.at_fork(_forked)


_CREATE = os.O_CREAT | os.O_EXCL | os.O_WRONLY | _portable.O_NOFOLLOW


def _tombstone_row(row: tuple[Any, ...]) -> Tombstone:
    ns, user, agent, session_id, at, by, reason, events, seq = row
    return Tombstone(
        SessionKey(ns, user, agent, session_id), float(at), by, reason or "", int(events), int(seq)
    )


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def make_private_dirs(folder: Path) -> None:
    """Create ``folder`` and missing parents, each owner-only (0700)."""
    missing = []
    while not folder.exists():
        missing.append(folder)
        if folder.parent == folder:
            break
        folder = folder.parent
    for each in reversed(missing):
        with contextlib.suppress(FileExistsError):
            each.mkdir(mode=0o700)


def _sync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _refuse_foreign(path: Path, info: os.stat_result) -> None:
    if stat.S_ISLNK(info.st_mode):
        raise InvalidInput(
            f"{path} is a symbolic link; agentnb does not follow links for store files. "
            "Name the real file, or a new path"
        )
    uid = _portable.effective_uid()
    if uid is not None and info.st_uid != uid:
        raise InvalidInput(
            f"{path} belongs to another user (uid {info.st_uid}); agentnb opens only store "
            "files you own. Copy it to a file of your own, or run as its owner"
        )


def _check_store_file(path: Path, info: os.stat_result) -> None:
    if stat.S_ISDIR(info.st_mode):
        raise InvalidInput(
            f"{path} is a directory; give a file path such as {path / 'agentnb.sqlite'}"
        )
    _refuse_foreign(path, info)
    if not stat.S_ISREG(info.st_mode):
        raise InvalidInput(f"{path} is not a regular file")
    if info.st_mode & 0o022:
        raise InvalidInput(
            f"{path} can be written by other users (mode {stat.S_IMODE(info.st_mode):04o}); "
            f"run chmod go-w on it (agentnb creates store files owner-only, 0600)"
        )


def _prepare_side_file(path: Path, *, make: bool) -> None:
    """Refuse a ``-wal``/``-shm`` file that is a link or someone else's, tighten ours, and
    with ``make`` (the store file is loosened) make a missing one owner-only first.

    SQLite gives a file it creates, or an empty one it opens, the store file's mode, so it
    is made with one zero byte, which SQLite reads as an empty log (or index) and
    overwrites. Only beside a non-empty store file: SQLite deletes a ``-wal`` it finds
    beside an empty one, which would race with a process that just made the store.
    """
    try:
        fd = os.open(path, _CREATE, 0o600) if make else None
    except FileExistsError:
        fd = None
    if fd is None:
        info = _lstat(path)
        if info is None:
            return  # SQLite makes it, owner-only when the store file is
        _refuse_foreign(path, info)
        if stat.S_IMODE(info.st_mode) & 0o077:
            os.chmod(path, 0o600)
        return
    try:
        os.write(fd, b"\0")
    finally:
        os.close(fd)


class _Cursor(sqlite3.Cursor):
    """Translates a damaged page, wherever SQLite meets it, into ``Corrupt`` naming the file."""

    def execute(self, sql: str, parameters: Any = (), /) -> _Cursor:
        try:
            return super().execute(sql, parameters)
        except sqlite3.DatabaseError as exc:
            _check_damage(exc, self.connection)
            raise

    def executemany(self, sql: str, seq_of_parameters: Any, /) -> _Cursor:
        try:
            return super().executemany(sql, seq_of_parameters)
        except sqlite3.DatabaseError as exc:
            _check_damage(exc, self.connection)
            raise

    def fetchone(self) -> Any:
        try:
            return super().fetchone()
        except sqlite3.DatabaseError as exc:
            _check_damage(exc, self.connection)
            raise

    def fetchall(self) -> list[Any]:
        try:
            return super().fetchall()
        except sqlite3.DatabaseError as exc:
            _check_damage(exc, self.connection)
            raise

    def fetchmany(self, size: int | None = 1) -> list[Any]:
        try:
            return super().fetchmany(size)
        except sqlite3.DatabaseError as exc:
            _check_damage(exc, self.connection)
            raise

    def __next__(self) -> Any:
        try:
            return super().__next__()
        except sqlite3.DatabaseError as exc:
            _check_damage(exc, self.connection)
            raise


class _Connection(sqlite3.Connection):
    path: Path = Path()

    @functools.cached_property
    def bare(self) -> sqlite3.Cursor:
        """A plain cursor, for the statements of a write transaction: ``_write`` translates
        what they raise (damage included) for the whole transaction, at once."""
        return sqlite3.Cursor(self)

    def cursor(self, factory: Any = _Cursor) -> Any:
        return super().cursor(factory)

    # The shortcuts do not go through cursor(): route them there.
    def execute(self, sql: str, parameters: Any = (), /) -> _Cursor:
        cursor: _Cursor = self.cursor()
        return cursor.execute(sql, parameters)

    def executemany(self, sql: str, seq_of_parameters: Any, /) -> _Cursor:
        cursor: _Cursor = self.cursor()
        return cursor.executemany(sql, seq_of_parameters)


def _check_damage(exc: sqlite3.DatabaseError, conn: sqlite3.Connection) -> None:
    """Raise ``Corrupt`` for a damaged file; other errors are left to the caller."""
    code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
    # Text that is not UTF-8 was written by something other than agentnb.
    if code in (_SQLITE_CORRUPT, _SQLITE_NOTADB) or str(exc).startswith("Could not decode"):
        raise Corrupt(
            f"{getattr(conn, 'path', 'the store file')} is damaged ({exc}); restore it from a "
            "backup, or export what is still readable and point the store at a new file"
        ) from None


def adbc_errors() -> tuple[type[BaseException], ...]:
    """What the ADBC driver raises (imported only once it is in use)."""
    import adbc_driver_manager

    return (adbc_driver_manager.Error,)


def _enable_wal(conn: sqlite3.Connection, timeout: float) -> tuple[object, ...] | None:
    # Switching a new file to WAL needs an exclusive lock, and SQLite reports "locked" at once
    # instead of calling the busy handler; processes opening a new store together wait here.
    deadline = time.monotonic() + timeout
    while True:
        try:
            row: tuple[object, ...] | None = conn.execute("PRAGMA journal_mode=WAL").fetchone()
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.01)
        else:
            return row


@dataclass(slots=True)
class _Write:
    """One append waiting for a group commit, and how it ended."""

    write: Callable[[_Connection], None]
    done: threading.Event | None = None
    """Made only for an append that waits for another thread's commit."""
    error: BaseException | None = None
    lead: bool = False
    """Set when this append's thread is to commit the next group."""


class _GroupCommit:
    """Group commit: appends that arrive while a commit is under way wait, and the next
    commit takes all of them in one transaction.

    The thread of the first waiting append commits the group (its own write included), so
    no thread is dedicated to writing and a lone append commits at once, as before.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.queue: list[_Write] = []
        self.busy = False

    def run(
        self,
        write: Callable[[_Connection], None],
        commit: Callable[[list[_Write]], None],
    ) -> None:
        mine = _Write(write)
        with self.lock:
            self.queue.append(mine)
            lead = not self.busy
            self.busy = True
            if not lead:
                done = mine.done = threading.Event()
        if not lead:
            done.wait()
            if not mine.lead:
                if mine.error is not None:
                    raise mine.error
                return
        group: list[_Write] = []
        try:
            with self.lock:
                group, self.queue = self.queue, []
            commit(group)
        except BaseException as exc:  # noqa: BLE001 - every waiter of the group hears it
            for pending in group:
                if pending.error is None:
                    pending.error = exc
        finally:
            with self.lock:
                following = self.queue[0] if self.queue else None
                self.busy = following is not None
            for pending in group:
                if pending is not mine:
                    assert pending.done is not None
                    pending.done.set()
            if following is not None:  # it commits the appends that came meanwhile
                following.lead = True
                assert following.done is not None
                following.done.set()
        if mine.error is not None:
            raise mine.error


def _translate(exc: sqlite3.Error, path: Path) -> StorageError:
    if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
        return StorageError(f"{path} stayed locked by another writer ({exc}); retry later")
    if isinstance(exc, sqlite3.DatabaseError) and "not a database" in str(exc):
        return Corrupt(f"{path} is not an agentnb store ({exc})")
    return StorageError(f"{path}: {exc}")
