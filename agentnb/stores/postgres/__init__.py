"""The shared store: PostgreSQL through psycopg 3 and a ``psycopg_pool`` connection pool.

Many processes and machines share one database; every table lives in the ``agentnb`` schema,
created and migrated by the store (``agentnb.migrations`` records the version; a database of
a newer version is refused). Per session, one row in ``agentnb.sessions`` holds the heads of
both logs and the lease; an append is one statement that advances the head only if it is the
expected one, the lease fence holds and the inbox head is the expected one, inserts the batch
and sends ``NOTIFY agentnb`` with ``e:<session row id>:<head>`` (``i:...`` for the inbox),
all in one transaction. When it writes nothing, one read of that row says why, through the
same pure decisions as every backend (``decide_append``, ``check_fence``, ``check_inbox``).

Clocks. Without a ``clock`` argument, lease expiries are written and compared on the
database's ``clock_timestamp()``, so machines with skewed clocks agree; ``store.clock``
then reads the database time through an offset measured on every lease call. With a
``clock`` (tests, simulations) that clock decides instead.

Connections. Credentials never leave the URL given: ``store.url``, reprs and errors carry it
with the password masked. A connection lost during a write raises ``StorageError`` saying
the write is uncertain; an append retried with the same batch id settles it. Reads retry on
another connection. Lock waits are bounded by ``lock_timeout`` (``StorageError``, retry).

``PostgresStore`` is the composition of its roles, one module each: ``catalogue``, ``log``,
``inbox``, ``leases``, ``claims`` (the pending-work index), ``watermarks``, ``blobs`` and
``tokens``; ``listener`` holds the waiting (LISTEN/NOTIFY), and beneath them ``core`` (the
pool and the error translation), ``connections``, ``schema`` (the migrations) and ``driver``
(the postgres extra).
"""

from __future__ import annotations

import contextlib
import threading

from agentnb.errors import InvalidInput
from agentnb.ids import Clock, SessionKey, check_seconds
from agentnb.stores.pgurl import check as check_url
from agentnb.stores.pgurl import redact as redact_url
from agentnb.stores.pgurl import secrets as url_secrets
from agentnb.stores.postgres.blobs import PostgresBlobs
from agentnb.stores.postgres.catalogue import PostgresCatalogue
from agentnb.stores.postgres.claims import PostgresWorkClaims
from agentnb.stores.postgres.connections import Connection, DatabaseClock, check_idle, parse_url
from agentnb.stores.postgres.core import CHANNEL
from agentnb.stores.postgres.driver import ConnectionPool
from agentnb.stores.postgres.inbox import PostgresInbox
from agentnb.stores.postgres.leases import PostgresLeases
from agentnb.stores.postgres.log import PostgresEventLog
from agentnb.stores.postgres.schema import MIGRATIONS, SCHEMA_VERSION, PostgresSchema
from agentnb.stores.postgres.tokens import PostgresTokens
from agentnb.stores.postgres.watermarks import PostgresWatermarks

__all__ = ["CHANNEL", "MIGRATIONS", "SCHEMA_VERSION", "PostgresStore"]

_FOLDING_COLLATIONS = ("C.utf8", "C.UTF-8", "und-x-icu")
"""Collations tried (after the database's own) for a ``lower`` that folds beyond ASCII; read
when a store opens."""


class PostgresStore(
    PostgresWorkClaims,
    PostgresInbox,
    PostgresCatalogue,
    PostgresEventLog,
    PostgresWatermarks,
    PostgresBlobs,
    PostgresTokens,
    PostgresLeases,
    PostgresSchema,
):
    """A ``SessionStore`` in a PostgreSQL database, shared by many processes and machines.

    ``url`` is a libpq URL (``postgresql://user:password@host:port/dbname?sslmode=...``;
    ``postgres://`` too). With ``create=False`` a database without an agentnb schema raises
    ``InvalidInput`` and nothing is created (readers). ``pool_size`` bounds the connections
    of this store (plus one for the listener); ``connect_timeout`` the seconds to reach the
    server.
    """

    def __init__(
        self,
        url: str,
        *,
        clock: Clock | None = None,
        create: bool = True,
        pool_size: int = 10,
        connect_timeout: float = 10.0,
        lock_timeout: float = 30.0,
    ) -> None:
        self._db_clock = DatabaseClock() if clock is None else None
        super().__init__(clock=clock or self._db_clock)
        if not isinstance(url, str):
            raise InvalidInput(f"url must be a string, got {type(url).__name__}")
        check_url(url)
        self.url = redact_url(url)
        if not isinstance(pool_size, int) or isinstance(pool_size, bool) or pool_size < 1:
            raise InvalidInput(f"pool_size must be a positive int, got {pool_size!r}")
        check_seconds(connect_timeout, "connect_timeout")
        check_seconds(lock_timeout, "lock_timeout")
        self._conninfo, self._where = parse_url(url, self.url, connect_timeout)
        self._secrets = url_secrets(url)
        self._lock_timeout = lock_timeout
        self._ids: dict[SessionKey, int] = {}
        self._keys: dict[int, SessionKey] = {}
        self._secret_bytes: bytes | None = None
        self._heads: dict[int, int] = {}
        self._inbox_heads: dict[int, int] = {}
        self._committing: dict[int, int] = {}
        self._seen_lock = threading.Lock()
        self._resyncs = 0
        self._listener = None
        self._unlisten = None
        self._listener_lock = threading.Lock()
        self._fold: str | None = None
        self._folding_collations = _FOLDING_COLLATIONS
        self._pool: ConnectionPool[Connection] | None = None
        with self._connect() as conn:
            self._migrate(conn, create)
        self._pool = ConnectionPool(
            self._conninfo,
            # Every statement is prepared on a connection's first use of it, not its fifth:
            # the pool's connections each parse the hot statements once.
            kwargs={"autocommit": True, "prepare_threshold": 0},
            min_size=1,
            max_size=pool_size,
            open=False,
            configure=self._configure,
            connection_class=Connection,
            check=check_idle,
            name="agentnb",
            timeout=max(connect_timeout, 5.0) * 3,
        )
        self._pool.open(wait=False)

    def __repr__(self) -> str:
        return f"PostgresStore({self.url!r})"

    def close(self) -> None:
        super().close()
        with self._listener_lock:
            unlisten, self._unlisten, self._listener = self._unlisten, None, None
        if unlisten is not None:
            unlisten()
        pool, self._pool = self._pool, None
        if pool is not None:
            with contextlib.suppress(Exception):
                pool.close(timeout=5.0)
