"""What every role of a PostgreSQL store stands on: the pool and its error translation, the
statements several roles share, and a session's row (its id, a column of it, its tombstone).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, NoReturn

from agentnb.errors import (
    Corrupt,
    InvalidInput,
    SessionNotFound,
    StorageError,
)
from agentnb.ids import SessionKey
from agentnb.stores import _rows
from agentnb.stores.base import (
    SessionStore,
    Tombstone,
    check_tombstone,
)
from agentnb.stores.postgres.connections import (
    Connection,
    DatabaseClock,
    T,
    connection_lost,
    unencodable,
)
from agentnb.stores.postgres.driver import (
    ConnectionPool,
    PoolTimeout,
    pg_errors,
    psycopg,
)

__all__ = ["CHANNEL", "PostgresCore"]

log = logging.getLogger("agentnb.stores.postgres")


CHANNEL = "agentnb"
"""The ``LISTEN``/``NOTIFY`` channel; payloads are ``e:<row id>:<head>`` or ``i:...``."""
DELETE_LOCK = 0x6167_6E64  # transaction lock serializing deletions ("agnd"): seq order

# The lease clock inside SQL: the caller's clock when given, else the database's.
NOW = "coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8)"
FENCE_OK = (
    f"CASE WHEN %(owner)s::text IS NULL THEN lease_owner IS NULL OR lease_expires <= {NOW} "
    f"ELSE lease_owner = %(owner)s AND lease_epoch = %(epoch)s AND lease_expires > {NOW} END"
)
EVENT_COLUMNS = (
    "seq, event_id, type, turn_id, run_id, required, occurred_us, schema_version, payload, "
    "blob, crc"
)
LOCK_LEASE = (
    "SELECT lease_owner, lease_epoch, lease_expires, " + NOW + ", deleted_at "
    "FROM agentnb.sessions WHERE id = %(sid)s FOR UPDATE"
)
TOMBSTONE_COLUMNS = (
    "namespace, user_id, agent_id, session_id, deleted_at, deleted_by, deleted_reason, "
    "events, deleted_seq"
)
# A write that must not land in a deleted session: the session row, share-locked, gates it.
# The lock waits for a deletion in progress, and the row it then reads says it is deleted.
LIVE = "s AS (SELECT id FROM agentnb.sessions WHERE id = %s AND deleted_at IS NULL FOR SHARE) "


def tombstone_row(row: Any) -> Tombstone:
    ns, user, agent, session_id, at, by, reason, events, seq = row
    return Tombstone(
        SessionKey(ns, user, agent, session_id), float(at), by, reason or "", int(events), int(seq)
    )


def collect(blobs: dict[str, bytes]) -> Callable[[bytes], str]:
    def put(data: bytes) -> str:
        digest = _rows.blob_digest(data)
        blobs[digest] = data
        return digest

    return put


class PostgresCore(SessionStore):
    """The state a PostgreSQL store's roles share: the pool, the clock, the row ids."""

    _digests_rows = True
    _indexes_work = True
    poll_interval = 5.0  # a safety net: commits wake waiters through NOTIFY
    _db_clock: DatabaseClock | None
    _conninfo: str
    _where: str
    _secrets: list[str]
    _lock_timeout: float
    _pool: ConnectionPool[Connection] | None
    _ids: dict[SessionKey, int]
    _keys: dict[int, SessionKey]
    """The other way: who a notification is for."""
    _heads: dict[int, int]
    _inbox_heads: dict[int, int]
    _committing: dict[int, int]
    """The last seq of each session's append under way through this object: its
    notification wakes nobody (the appender wakes the waiters once it handed over)."""
    _seen_lock: threading.Lock
    _resyncs: int
    _secret_bytes: bytes | None
    _fold: str | None
    _folding_collations: tuple[str, ...]
    """Collations tried (after the database's own) for a ``lower`` that folds beyond ASCII."""

    # -- connections -------------------------------------------------------------------------

    def _connect(self) -> psycopg.Connection[Any]:
        """A connection outside the pool, for the schema check when the store opens."""
        try:
            conn = psycopg.connect(self._conninfo, autocommit=True)
            self._configure(conn)
        except psycopg.Error as exc:
            raise StorageError(
                f"cannot connect to PostgreSQL at {self._where}: {self._clean(exc)}; check "
                f"that the server runs and the URL {self.url} is right"
            ) from None
        return conn

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        ms = str(int(self._lock_timeout * 1000))
        conn.execute(
            "SELECT set_config('lock_timeout', %s, false), "
            "set_config('idle_in_transaction_session_timeout', '60000', false)",
            (ms,),
        )

    def _on_connection(
        self, what: Callable[[psycopg.Connection[Any]], T], timeout: float | None = None
    ) -> T:
        """``what`` run on a pooled connection (handed back after, or dropped if broken)."""
        pool = self._pool
        if pool is None:
            raise StorageError(f"store {self.url} is closed; open it again to use it")
        try:
            conn = pool.getconn(timeout)
        except PoolTimeout:
            raise StorageError(
                f"no connection to PostgreSQL at {self._where} within "
                f"{timeout or pool.timeout:.0f}s (server down or every pooled connection "
                "busy); retry later"
            ) from None
        try:
            return what(conn)
        finally:
            conn.idle_since = time.monotonic()
            pool.putconn(conn)

    def _query(
        self, what: Callable[[psycopg.Connection[Any]], T], *, timeout: float | None = None
    ) -> T:
        """Run a read, on another connection if this one turns out to be lost."""
        attempts = 2 if timeout else (self._pool.max_size if self._pool else 1) + 1
        for attempt in range(attempts):
            try:
                return self._on_connection(what, timeout)
            except UnicodeEncodeError as exc:
                raise unencodable(exc) from None
            except psycopg.Error as exc:
                if not connection_lost(exc) or attempt == attempts - 1:
                    self._raise(exc)
                self._recheck()
        raise AssertionError("unreachable")

    def _write(self, what: Callable[[psycopg.Connection[Any]], T], doing: str) -> T:
        """Run a write; a lost connection raises ``StorageError`` saying it is uncertain."""
        try:
            return self._on_connection(what)
        except UnicodeEncodeError as exc:
            raise unencodable(exc) from None
        except psycopg.Error as exc:
            if connection_lost(exc):
                self._recheck()
                raise StorageError(
                    f"the connection to PostgreSQL at {self._where} was lost during {doing}; "
                    f"it may or may not have committed ({self._clean(exc)}). Retry it: "
                    "writes carry ids that make a repeat harmless"
                ) from None
            self._raise(exc)

    def _recheck(self) -> None:
        # Drop the other idle connections to the same lost server now, not one by one.
        if self._pool is not None:
            with contextlib.suppress(Exception):
                self._pool.check()

    def _clean(self, exc: BaseException) -> str:
        text = str(exc).strip().replace("\n", " ")
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def _raise(self, exc: psycopg.Error) -> NoReturn:
        text = self._clean(exc)
        if isinstance(exc, pg_errors.LockNotAvailable | pg_errors.QueryCanceled):
            raise StorageError(
                f"PostgreSQL at {self._where} cancelled a statement that waited too long "
                f"({text}); another transaction probably holds a lock it needs: retry later"
            ) from None
        if isinstance(exc, pg_errors.SerializationFailure | pg_errors.DeadlockDetected):
            raise StorageError(
                f"PostgreSQL aborted a conflicting write ({text}); retry it"
            ) from None
        if isinstance(exc, pg_errors.InsufficientPrivilege):
            raise StorageError(
                f"the PostgreSQL user of {self.url} may not do this ({text}); grant it "
                "rights on the agentnb schema"
            ) from None
        if isinstance(exc, pg_errors.UndefinedTable | pg_errors.InvalidSchemaName):
            raise Corrupt(
                f"the agentnb tables are missing from {self.url} ({text}); they were "
                "dropped outside agentnb: restore the database from a backup"
            ) from None
        if isinstance(exc, pg_errors.DataError):
            raise InvalidInput(f"PostgreSQL cannot store this value ({text})") from None
        if connection_lost(exc):
            raise StorageError(
                f"lost the connection to PostgreSQL at {self._where} ({text}); retry once "
                "the server is reachable"
            ) from None
        raise StorageError(f"PostgreSQL at {self._where}: {text}") from None

    def _observe_clock(self, conn: psycopg.Connection[Any]) -> None:
        if self._db_clock is None or conn.closed:
            return
        with contextlib.suppress(psycopg.Error):
            sent = time.time()
            row = conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()
            if row:
                self._db_clock.observe(float(row[0]), sent, time.time())

    def _sid(self, key: SessionKey) -> int:
        sid = self._ids.get(key)
        if sid is None:
            row = self._query(
                lambda c: c.execute(
                    "SELECT id, deleted_at FROM agentnb.sessions WHERE namespace = %s "
                    "AND user_id = %s AND agent_id = %s AND session_id = %s",
                    (key.namespace, key.user_id, key.agent_id, key.session_id),
                ).fetchone()
            )
            if row is None:
                raise SessionNotFound(f"session {key} does not exist; create it first")
            if row[1] is not None:
                check_tombstone(key, self._tombstone(key))
            sid = self._ids[key] = int(row[0])
            self._keys[sid] = key
        return sid

    def _tombstone(self, key: SessionKey) -> Tombstone | None:
        row = self._query(
            lambda c: c.execute(
                f"SELECT {TOMBSTONE_COLUMNS} FROM agentnb.sessions "
                "WHERE namespace = %s AND user_id = %s AND agent_id = %s AND session_id = %s "
                "AND deleted_at IS NOT NULL",
                (key.namespace, key.user_id, key.agent_id, key.session_id),
            ).fetchone()
        )
        return None if row is None else tombstone_row(row)

    def _column(self, key: SessionKey, column: str, *, timeout: float | None = None) -> int:
        sid = self._sid(key)
        row = self._query(
            lambda c: c.execute(
                f"SELECT {column}, deleted_at FROM agentnb.sessions WHERE id = %s", (sid,)
            ).fetchone(),
            timeout=timeout,
        )
        if row is None or row[1] is not None:
            self._gone(key)
        return int(row[0])

    def _gone(self, key: SessionKey) -> NoReturn:
        """``SessionDeleted`` (or ``SessionNotFound``) for a session this store knew the row
        of: another process deleted it since."""
        self._ids.pop(key, None)
        check_tombstone(key, self._tombstone(key))
        raise SessionNotFound(f"session {key} does not exist; create it first")

    def _now(self, now: float) -> float | None:
        """The ``now`` SQL gets: None means the database clock decides."""
        return None if self._db_clock is not None else now

    def _select(self, key: SessionKey, sql: str, after: int, through: int) -> list[Any]:
        sid = self._sid(key)
        return self._query(lambda c: c.execute(sql, (sid, after, through)).fetchall())

    def _seen(self, heads: dict[int, int], sid: int, seq: int) -> None:
        with self._seen_lock:  # writers and the listener race; a head only moves up
            if heads.get(sid, 0) < seq:
                heads[sid] = seq
