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

Waiting. One listener connection per store (a thread, started by the first wait) LISTENs and
wakes waiters on every notification; a waiter reads the database only when a notification
names its session, after the listener (re)connects (commits made while it was away had no
one to hear them), and every ``poll_interval`` seconds as a safety net.

Connections. Credentials never leave the URL given: ``store.url``, reprs and errors carry it
with the password masked. A connection lost during a write raises ``StorageError`` saying
the write is uncertain; an append retried with the same batch id settles it. Reads retry on
another connection. Lock waits are bounded by ``lock_timeout`` (``StorageError``, retry).

Scale-out. An accepted inbox command marks ``sessions.pending_since`` (partial index), so a
pool of workers can claim sessions with work through ``claim_pending`` (``FOR UPDATE SKIP
LOCKED``) and clear the mark with ``settle_pending``, never scanning every session.

Why it is long: one backend is one class plus its listener thread: schema and migrations,
the append transaction, leases on the database clock, LISTEN/NOTIFY, the pending-work index
and COPY share one pool and one error translation.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import os
import selectors
import socket
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

from agentnb.errors import (
    Corrupt,
    IdempotencyConflict,
    InvalidInput,
    SessionNotFound,
    StorageError,
    install_hint,
)
from agentnb.events import BLOB_THRESHOLD, Event, canonical_json
from agentnb.ids import Clock, SessionKey, check_id, check_seconds
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
    fold_pairs,
    leases_of,
    merge_labels,
    meta_update,
    submit_delta,
    submit_text,
)
from agentnb.stores.pgurl import check as check_url
from agentnb.stores.pgurl import redact as redact_url
from agentnb.stores.pgurl import scrub as scrub_url
from agentnb.stores.pgurl import secrets as url_secrets

try:  # the postgres extra
    import psycopg
    from psycopg import errors as pg_errors
    from psycopg.conninfo import conninfo_to_dict
    from psycopg_pool import ConnectionPool, PoolTimeout
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        f"PostgresStore needs psycopg 3 and psycopg_pool ({exc}): {install_hint('postgres')}"
    ) from exc

__all__ = ["CHANNEL", "SCHEMA_VERSION", "PostgresStore"]

log = logging.getLogger("agentnb.stores.postgres")

CHANNEL = "agentnb"
"""The ``LISTEN``/``NOTIFY`` channel; payloads are ``e:<row id>:<head>`` or ``i:...``."""
_LOCK_ID = 0x6167_6E62  # advisory lock key serializing migrations ("agnb"); freed on close
_FOLDING_COLLATIONS = ("C.utf8", "C.UTF-8", "und-x-icu")
"""Collations tried (after the database's own) for a ``lower`` that folds beyond ASCII."""
_DELETE_LOCK = 0x6167_6E64  # transaction lock serializing deletions ("agnd"): seq order

# Each entry migrates from version i to i + 1; the list index is the version.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        "CREATE SCHEMA IF NOT EXISTS agentnb",
        (
            "CREATE TABLE agentnb.migrations (version integer PRIMARY KEY, "
            "applied_at timestamptz NOT NULL DEFAULT clock_timestamp(), note text NOT NULL)"
        ),
        "CREATE TABLE agentnb.meta (key text PRIMARY KEY, value bytea NOT NULL)",
        # One row per session: catalogue, both heads, the lease and the pending-work mark.
        # Only unindexed columns change on the hot path, so updates stay HOT (fillfactor).
        (
            "CREATE TABLE agentnb.sessions ("
            " id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
            " namespace text NOT NULL, user_id text NOT NULL, agent_id text NOT NULL,"
            " session_id text NOT NULL, created_at double precision NOT NULL,"
            " head bigint NOT NULL DEFAULT 0, inbox_head bigint NOT NULL DEFAULT 0,"
            " lease_owner text, lease_epoch bigint NOT NULL DEFAULT 0,"
            " lease_expires double precision NOT NULL DEFAULT 0,"
            " pending_since double precision,"
            " UNIQUE (namespace, user_id, agent_id, session_id)"
            ") WITH (fillfactor = 80)"
        ),
        (
            "CREATE INDEX sessions_pending ON agentnb.sessions (pending_since) "
            "WHERE pending_since IS NOT NULL"
        ),
        (
            "CREATE TABLE agentnb.events ("
            " session bigint NOT NULL, seq bigint NOT NULL, event_id text NOT NULL,"
            " type text NOT NULL, turn_id text, run_id text, required smallint NOT NULL,"
            " occurred_us bigint NOT NULL, schema_version integer NOT NULL,"
            " payload text, blob text, crc bigint NOT NULL, batch_id text, digest text,"
            " PRIMARY KEY (session, seq))"
        ),
        (
            "CREATE UNIQUE INDEX events_batch ON agentnb.events (session, batch_id) "
            "WHERE batch_id IS NOT NULL"
        ),
        (
            "CREATE TABLE agentnb.inbox ("
            " session bigint NOT NULL, seq bigint NOT NULL, event_id text NOT NULL,"
            " type text NOT NULL, turn_id text, run_id text, required smallint NOT NULL,"
            " occurred_us bigint NOT NULL, schema_version integer NOT NULL,"
            " payload text, blob text, crc bigint NOT NULL, dedupe_key text, digest text,"
            " PRIMARY KEY (session, seq))"
        ),
        (
            "CREATE UNIQUE INDEX inbox_dedupe ON agentnb.inbox (session, dedupe_key) "
            "WHERE dedupe_key IS NOT NULL"
        ),
        (
            "CREATE TABLE agentnb.watermarks (session bigint NOT NULL, sink text NOT NULL,"
            " seq bigint NOT NULL, PRIMARY KEY (session, sink))"
        ),
        "CREATE TABLE agentnb.blobs (digest text PRIMARY KEY, data bytea NOT NULL)",
        (
            "CREATE TABLE agentnb.snapshots (session bigint NOT NULL, name text NOT NULL,"
            " seq bigint NOT NULL, data bytea NOT NULL, PRIMARY KEY (session, name))"
        ),
    ),
    # 2: the lifecycle. Metadata kept current by the commits; deleted sessions keep their
    # row as a tombstone. Listing reads an index range (newest activity first, for one user
    # or everyone); freeing a deleted session's blobs looks up who else references them.
    (
        (
            "ALTER TABLE agentnb.sessions"
            " ADD COLUMN updated_at double precision NOT NULL DEFAULT 0,"
            " ADD COLUMN last_activity double precision NOT NULL DEFAULT 0,"
            " ADD COLUMN title text, ADD COLUMN labels jsonb NOT NULL DEFAULT '{}',"
            " ADD COLUMN first_task text, ADD COLUMN events bigint NOT NULL DEFAULT 0,"
            " ADD COLUMN turns bigint NOT NULL DEFAULT 0,"
            " ADD COLUMN bytes bigint NOT NULL DEFAULT 0,"
            " ADD COLUMN submits bigint NOT NULL DEFAULT 0, ADD COLUMN turn_status text,"
            " ADD COLUMN deleted_at double precision, ADD COLUMN deleted_by text,"
            " ADD COLUMN deleted_reason text"
        ),
        (
            "UPDATE agentnb.sessions AS s SET events = s.head,"
            " turns = (SELECT count(*) FROM agentnb.events WHERE session = s.id"
            "  AND type = 'turn/start'),"
            " bytes = (SELECT coalesce(sum(length(payload)), 0) FROM agentnb.events"
            "  WHERE session = s.id),"
            " submits = (SELECT count(*) FROM agentnb.inbox WHERE session = s.id"
            "  AND type = 'inbox/accepted' AND payload::jsonb->>'kind' = 'submit'),"
            " turn_status = (SELECT CASE WHEN type IN ('turn/start', 'turn/resumed')"
            "  THEN 'running' ELSE substr(type, 6) END FROM agentnb.events"
            "  WHERE session = s.id AND type IN ('turn/start', 'turn/resumed',"
            "  'turn/completed', 'turn/failed', 'turn/suspended', 'turn/interrupted',"
            "  'turn/cancelled') ORDER BY seq DESC LIMIT 1),"
            " first_task = (SELECT left(split_part(payload::jsonb->>'input', E'\\n', 1), 256)"
            "  FROM agentnb.inbox WHERE session = s.id AND type = 'inbox/accepted'"
            "  AND payload::jsonb->>'kind' = 'submit' ORDER BY seq LIMIT 1),"
            " updated_at = coalesce((SELECT max(occurred_us) / 1e6 FROM agentnb.events"
            "  WHERE session = s.id), s.created_at),"
            " last_activity = greatest(s.created_at,"
            "  (SELECT max(occurred_us) / 1e6 FROM agentnb.events WHERE session = s.id),"
            "  (SELECT max(occurred_us) / 1e6 FROM agentnb.inbox WHERE session = s.id))"
        ),
        (
            "CREATE INDEX sessions_recent ON agentnb.sessions (last_activity, id) "
            "WHERE deleted_at IS NULL"
        ),
        (
            "CREATE INDEX sessions_user_recent ON agentnb.sessions "
            "(namespace, user_id, agent_id, last_activity, id) WHERE deleted_at IS NULL"
        ),
        "CREATE INDEX events_blob ON agentnb.events (blob) WHERE blob IS NOT NULL",
        "CREATE INDEX inbox_blob ON agentnb.inbox (blob) WHERE blob IS NOT NULL",
    ),
    # 3: the archive flag; deletions numbered in commit order (what exports page through),
    # with how far each export sink has applied them.
    (
        (
            "ALTER TABLE agentnb.sessions ADD COLUMN archived_at double precision,"
            " ADD COLUMN deleted_seq bigint"
        ),
        (
            "UPDATE agentnb.sessions AS s SET deleted_seq = o.n FROM (SELECT id,"
            " row_number() OVER (ORDER BY deleted_at, id) AS n FROM agentnb.sessions"
            " WHERE deleted_at IS NOT NULL) AS o WHERE s.id = o.id"
        ),
        (
            "CREATE UNIQUE INDEX sessions_deleted ON agentnb.sessions (deleted_seq) "
            "WHERE deleted_seq IS NOT NULL"
        ),
        "CREATE TABLE agentnb.tombstone_marks (sink text PRIMARY KEY, seq bigint NOT NULL)",
    ),
    # 4: the service's bearer tokens (digests only); a sign-in names the token it was made
    # with (revoking that one revokes it).
    (
        (
            "CREATE TABLE agentnb.tokens (token_id text PRIMARY KEY, user_id text NOT NULL,"
            " label text NOT NULL, digest text NOT NULL,"
            " created_at double precision NOT NULL, last_used_at double precision,"
            " revoked_at double precision, expires_at double precision, parent text)"
        ),
        "CREATE INDEX tokens_parent ON agentnb.tokens (parent) WHERE parent IS NOT NULL",
    ),
    # 5: payloads in blobs by part (``_rows.stored_body``): a row may name several blobs and
    # a blob many rows, so which sessions name which blob is kept apart (a blob is freed
    # with the last of them). The rows of schema 4 name one blob each.
    (
        (
            "CREATE TABLE agentnb.blob_refs (session bigint NOT NULL, digest text NOT NULL,"
            " PRIMARY KEY (session, digest))"
        ),
        (
            "INSERT INTO agentnb.blob_refs SELECT session, blob FROM agentnb.events"
            " WHERE blob IS NOT NULL UNION SELECT session, blob FROM agentnb.inbox"
            " WHERE blob IS NOT NULL"
        ),
        "CREATE INDEX blob_refs_digest ON agentnb.blob_refs (digest)",
        "DROP INDEX agentnb.events_blob",
        "DROP INDEX agentnb.inbox_blob",
    ),
)
SCHEMA_VERSION = len(MIGRATIONS)
"""The schema version this agentnb writes; a database at a higher one is refused."""

# The lease clock inside SQL: the caller's clock when given, else the database's.
_NOW = "coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8)"
_FENCE_OK = (
    f"CASE WHEN %(owner)s::text IS NULL THEN lease_owner IS NULL OR lease_expires <= {_NOW} "
    f"ELSE lease_owner = %(owner)s AND lease_epoch = %(epoch)s AND lease_expires > {_NOW} END"
)
_EVENT_COLUMNS = (
    "seq, event_id, type, turn_id, run_id, required, occurred_us, schema_version, payload, "
    "blob, crc"
)
_UNNEST = (
    "unnest(%(seq)b::int8[], %(event_id)b::text[], %(type)b::text[], %(turn_id)b::text[], "
    "%(run_id)b::text[], %(required)b::int2[], %(occurred_us)b::int8[], "
    "%(schema_version)b::int4[], %(payload)b::text[], %(blob)b::text[], %(crc)b::int8[]) "
    f"AS u({_EVENT_COLUMNS})"
)
# A single event (the common commit) binds scalars: no arrays to build and dump.
_ONE_ROW = (
    "(VALUES (%(seq)s::int8, %(event_id)s::text, %(type)s::text, %(turn_id)s::text, "
    "%(run_id)s::text, %(required)s::int2, %(occurred_us)s::int8, %(schema_version)s::int4, "
    "%(payload)s::text, %(blob)s::text, %(crc)s::int8)) "
    f"AS u({_EVENT_COLUMNS})"
)
# An append with blobs holds the deletions' lock shared, taken before the session row (the
# order a deletion takes them in): a deletion freeing a blob this append names waits for
# it, then sees its reference, and a blob found present here is not freed under it. Only
# a committing append stores its blobs and their references.
_LOCK_SHARED = "l AS (SELECT pg_advisory_xact_lock_shared(" + str(_DELETE_LOCK) + ")), "
_BLOBS = (
    "b AS (INSERT INTO agentnb.blobs (digest, data) SELECT u.d, u.data FROM s, "
    "unnest(%(blob_digests)s::text[], %(blob_data)s::bytea[]) AS u(d, data) "
    "ON CONFLICT DO NOTHING), "
    "r AS (INSERT INTO agentnb.blob_refs (session, digest) SELECT s.id, u.d FROM s, "
    "unnest(%(blob_digests)s::text[]) AS u(d) ON CONFLICT DO NOTHING), "
)
# The guarded append: advance the head (expected head, fence, inbox head), insert the batch
# (its first row carries batch id and digest, the replay index), notify; one statement.
_APPEND = (
    "WITH {lock}s AS (UPDATE agentnb.sessions SET head = head + %(n)s, "
    "events = events + %(n)s, turns = turns + %(turns)s, bytes = bytes + %(nbytes)s, "
    "turn_status = coalesce(%(turn_status)s::text, turn_status), updated_at = %(at)s, "
    "last_activity = %(at)s {from_lock}"
    "WHERE id = %(sid)s AND head = %(expected)s AND deleted_at IS NULL AND " + _FENCE_OK + " "
    "AND (%(inbox)s::int8 IS NULL OR inbox_head = %(inbox)s) RETURNING id, head), "
    "{blobs}"
    "e AS (INSERT INTO agentnb.events (session, " + _EVENT_COLUMNS + ", batch_id, digest) "
    "SELECT s.id, u.*, CASE WHEN u.seq = %(first)s THEN %(batch_id)s END, "
    "CASE WHEN u.seq = %(first)s THEN %(digest)s END FROM s, {rows}) "
    "SELECT pg_notify('" + CHANNEL + "', 'e:' || id || ':' || head) FROM s"
)
_APPENDS = {
    (many, blobs): _APPEND.format(
        lock=_LOCK_SHARED if blobs else "",
        from_lock="FROM l " if blobs else "",
        blobs=_BLOBS if blobs else "",
        rows=_UNNEST if many else _ONE_ROW,
    )
    for many in (False, True)
    for blobs in (False, True)
}
"""The append statement by (more than one event, with blobs)."""
_APPEND_STATE = (
    "SELECT s.lease_owner, s.lease_epoch, s.lease_expires, s.head, s.inbox_head, "
    "b.digest, b.seq, " + _NOW + ", s.deleted_at FROM agentnb.sessions AS s "
    "LEFT JOIN agentnb.events AS b ON b.session = s.id AND b.batch_id = %(batch_id)s "
    "WHERE s.id = %(sid)s FOR UPDATE OF s"
)
# An inbox append is one short transaction: take the next inbox seq (the row lock orders
# writers), encode the row with it (its checksum covers the seq), insert it, notify.
_INBOX_NEXT = (
    "UPDATE agentnb.sessions SET inbox_head = inbox_head + 1, pending_since = "
    "CASE WHEN %(pending)s THEN coalesce(pending_since, " + _NOW + ") ELSE pending_since END, "
    "last_activity = %(at)s, submits = GREATEST(submits + %(submit)s, turns), "
    "first_task = coalesce(first_task, %(task)s::text) "
    "WHERE id = %(sid)s AND deleted_at IS NULL AND (archived_at IS NULL OR NOT %(work)s) "
    "RETURNING inbox_head"
)
_INBOX_INSERT = (
    "WITH i AS (INSERT INTO agentnb.inbox (session, " + _EVENT_COLUMNS + ", dedupe_key, digest) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)) "
    "SELECT pg_notify('" + CHANNEL + "', %s)"
)
_RESENT = "SELECT 1 FROM agentnb.inbox WHERE session = %s AND dedupe_key = %s"
_SELECT_EVENTS = (
    f"SELECT {_EVENT_COLUMNS} FROM agentnb.events "
    "WHERE session = %s AND seq > %s AND seq <= %s ORDER BY seq"
)
_COPY_EVENTS = (
    f"COPY ({_SELECT_EVENTS}) TO STDOUT (FORMAT csv, "
    "FORCE_QUOTE (event_id, type, turn_id, run_id, payload, blob))"
)
_SELECT_INBOX = (
    f"SELECT {_EVENT_COLUMNS} FROM agentnb.inbox "
    "WHERE session = %s AND seq > %s AND seq <= %s ORDER BY seq"
)
_LOCK_LEASE = (
    "SELECT lease_owner, lease_epoch, lease_expires, " + _NOW + ", deleted_at "
    "FROM agentnb.sessions WHERE id = %(sid)s FOR UPDATE"
)
_SET_LEASE = (
    "UPDATE agentnb.sessions SET lease_owner = %s, lease_epoch = %s, lease_expires = %s "
    "WHERE id = %s"
)
# Claim sessions with accepted work and no live lease: the next epoch, like decide_acquire
# for a lease nobody holds. SKIP LOCKED lets claimers take disjoint sessions.
_CLAIM = (
    "WITH c AS (SELECT id FROM agentnb.sessions WHERE pending_since IS NOT NULL "
    "AND (lease_owner IS NULL OR lease_expires <= " + _NOW + ") "
    "AND (%(agent_id)s::text IS NULL OR agent_id = %(agent_id)s) "
    "AND (%(namespace)s::text IS NULL OR namespace = %(namespace)s) "
    "ORDER BY pending_since, id LIMIT %(limit)s FOR UPDATE SKIP LOCKED) "
    "UPDATE agentnb.sessions AS s SET lease_owner = %(owner)s, lease_epoch = s.lease_epoch + 1,"
    " lease_expires = " + _NOW + " + %(ttl)s FROM c WHERE s.id = c.id "
    "RETURNING s.namespace, s.user_id, s.agent_id, s.session_id, s.lease_epoch, "
    "s.lease_expires, s.id, s.deleted_at"
)
_HELD = (
    "SELECT namespace, user_id, agent_id, session_id, lease_owner, lease_epoch, lease_expires "
    "FROM agentnb.sessions WHERE pending_since IS NOT NULL AND lease_owner IS NOT NULL "
    "AND lease_expires > " + _NOW + " "
    "AND (%(agent_id)s::text IS NULL OR agent_id = %(agent_id)s) "
    "AND (%(namespace)s::text IS NULL OR namespace = %(namespace)s) "
    "ORDER BY pending_since, id LIMIT %(limit)s"
)
_SETTLE = (
    "UPDATE agentnb.sessions SET pending_since = NULL{release} WHERE id = %(sid)s "
    "AND inbox_head = %(seen)s AND lease_owner = %(owner)s AND lease_epoch = %(epoch)s "
    "AND lease_expires > " + _NOW
)
_SETTLES = {
    False: _SETTLE.format(release=""),
    True: _SETTLE.format(release=", lease_owner = NULL, lease_expires = 0"),
}
"""Clear the mark; and release the lease too (the row ``release_lease`` writes)."""

_RECORD_COLUMNS = (
    "id, namespace, user_id, agent_id, session_id, created_at, updated_at, last_activity, "
    "title, labels, first_task, events, turns, bytes, submits, turn_status, lease_owner, "
    "lease_expires, archived_at"
)
_TOMBSTONE_COLUMNS = (
    "namespace, user_id, agent_id, session_id, deleted_at, deleted_by, deleted_reason, "
    "events, deleted_seq"
)
_TOP_DELETION = (
    "SELECT coalesce(max(deleted_seq), 0) FROM agentnb.sessions WHERE deleted_seq IS NOT NULL"
)
# A write that must not land in a deleted session: the session row, share-locked, gates it.
# The lock waits for a deletion in progress, and the row it then reads says it is deleted.
_LIVE = "s AS (SELECT id FROM agentnb.sessions WHERE id = %s AND deleted_at IS NULL FOR SHARE) "
# A deleted session's blobs, unless another session's rows name them too.
_DELETE_BLOBS = (
    "DELETE FROM agentnb.blobs AS b WHERE b.digest IN ("
    "SELECT digest FROM agentnb.blob_refs WHERE session = %(sid)s) "
    "AND NOT EXISTS (SELECT 1 FROM agentnb.blob_refs AS r WHERE r.digest = b.digest "
    "AND r.session <> %(sid)s)"
)
# An inbox row's blobs and their references (the lock as for _BLOBS, taken first).
_INBOX_BLOBS = (
    "WITH b AS (INSERT INTO agentnb.blobs (digest, data) SELECT * FROM "
    "unnest(%(digests)s::text[], %(data)s::bytea[]) ON CONFLICT DO NOTHING) "
    "INSERT INTO agentnb.blob_refs (session, digest) SELECT %(sid)s, d FROM "
    "unnest(%(digests)s::text[]) AS d ON CONFLICT DO NOTHING"
)


def _record(row: Any) -> SessionRecord:
    row_id, ns, user, agent, session_id, created, updated, activity = row[:8]
    title, labels, first, events, turns, nbytes, submits, status, owner, expires = row[8:18]
    archived = row[18]
    return SessionRecord(
        SessionKey(ns, user, agent, session_id),
        float(created),
        float(updated),
        float(activity),
        title,
        dict(labels or {}),
        first,
        int(events),
        int(turns),
        int(nbytes),
        int(submits),
        status,
        owner,
        float(expires),
        encode_cursor(float(activity), int(row_id)),
        None if archived is None else float(archived),
    )


_ACCESS_COLUMNS = (
    "token_id, user_id, label, digest, created_at, last_used_at, revoked_at, expires_at, parent"
)


def _token_row(row: Any) -> TokenRecord:
    token_id, user_id, label, digest, created, used, revoked, expires, parent = row
    return TokenRecord(
        token_id, user_id, label, created, used, revoked, expires, parent, digest=digest
    )


def _tombstone_row(row: Any) -> Tombstone:
    ns, user, agent, session_id, at, by, reason, events, seq = row
    return Tombstone(
        SessionKey(ns, user, agent, session_id), float(at), by, reason or "", int(events), int(seq)
    )


_T = TypeVar("_T")


class _Connection(psycopg.Connection[Any]):
    """A pooled connection that knows when it was last handed back."""

    idle_since = 0.0


def _check_idle(conn: _Connection) -> None:
    # A round trip on every checkout would cost the hot path; a connection that sat idle
    # (through a server restart, or a proxy reaping idle sockets) is checked before use.
    if time.monotonic() - conn.idle_since > 1.0:
        ConnectionPool.check_connection(conn)


class _DatabaseClock:
    """The database server's clock, read locally through an offset.

    The offset is measured when the store opens and on every lease call, so ``now()`` stays
    within a round trip of the server's ``clock_timestamp()`` (what decides leases).
    """

    def __init__(self) -> None:
        self.offset = 0.0

    def now(self) -> float:
        return time.time() + self.offset

    def observe(self, server_now: float, sent: float, received: float) -> None:
        self.offset = server_now - (sent + received) / 2


class PostgresStore(SessionStore):
    """A ``SessionStore`` in a PostgreSQL database, shared by many processes and machines.

    ``url`` is a libpq URL (``postgresql://user:password@host:port/dbname?sslmode=...``;
    ``postgres://`` too). With ``create=False`` a database without an agentnb schema raises
    ``InvalidInput`` and nothing is created (readers). ``pool_size`` bounds the connections
    of this store (plus one for the listener); ``connect_timeout`` the seconds to reach the
    server.
    """

    _digests_rows = True
    poll_interval = 5.0  # a safety net: commits wake waiters through NOTIFY

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
        self._db_clock = _DatabaseClock() if clock is None else None
        super().__init__(clock=clock or self._db_clock)
        if not isinstance(url, str):
            raise InvalidInput(f"url must be a string, got {type(url).__name__}")
        check_url(url)
        self.url = redact_url(url)
        if not isinstance(pool_size, int) or isinstance(pool_size, bool) or pool_size < 1:
            raise InvalidInput(f"pool_size must be a positive int, got {pool_size!r}")
        check_seconds(connect_timeout, "connect_timeout")
        check_seconds(lock_timeout, "lock_timeout")
        self._conninfo, self._where = _parse(url, self.url, connect_timeout)
        self._secrets = url_secrets(url)
        self._lock_timeout = lock_timeout
        self._ids: dict[SessionKey, int] = {}
        self._keys: dict[int, SessionKey] = {}  # the other way: who a notification is for
        self._secret_bytes: bytes | None = None
        self._heads: dict[int, int] = {}
        self._inbox_heads: dict[int, int] = {}
        self._committing: dict[int, int] = {}
        """The last seq of each session's append under way through this object: its
        notification wakes nobody (the appender wakes the waiters once it handed over)."""
        self._seen_lock = threading.Lock()
        self._resyncs = 0
        self._listener: _Listener | None = None
        self._unlisten: Callable[[], object] | None = None
        self._listener_lock = threading.Lock()
        self._pending_watchers: list[Callable[[SessionKey | None], None]] = []
        self._fold: str | None = None
        self._pool: ConnectionPool[_Connection] | None = None
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
            connection_class=_Connection,
            check=_check_idle,
            name="agentnb",
            timeout=max(connect_timeout, 5.0) * 3,
        )
        self._pool.open(wait=False)

    def __repr__(self) -> str:
        return f"PostgresStore({self.url!r})"

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
        self, what: Callable[[psycopg.Connection[Any]], _T], timeout: float | None = None
    ) -> _T:
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
        self, what: Callable[[psycopg.Connection[Any]], _T], *, timeout: float | None = None
    ) -> _T:
        """Run a read, on another connection if this one turns out to be lost."""
        attempts = 2 if timeout else (self._pool.max_size if self._pool else 1) + 1
        for attempt in range(attempts):
            try:
                return self._on_connection(what, timeout)
            except UnicodeEncodeError as exc:
                raise _unencodable(exc) from None
            except psycopg.Error as exc:
                if not _lost(exc) or attempt == attempts - 1:
                    self._raise(exc)
                self._recheck()
        raise AssertionError("unreachable")

    def _write(self, what: Callable[[psycopg.Connection[Any]], _T], doing: str) -> _T:
        """Run a write; a lost connection raises ``StorageError`` saying it is uncertain."""
        try:
            return self._on_connection(what)
        except UnicodeEncodeError as exc:
            raise _unencodable(exc) from None
        except psycopg.Error as exc:
            if _lost(exc):
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
        if _lost(exc):
            raise StorageError(
                f"lost the connection to PostgreSQL at {self._where} ({text}); retry once "
                "the server is reachable"
            ) from None
        raise StorageError(f"PostgreSQL at {self._where}: {text}") from None

    # -- schema ------------------------------------------------------------------------------

    def _migrate(self, conn: psycopg.Connection[Any], create: bool) -> None:
        try:
            version = self._version(conn)
            if version == SCHEMA_VERSION:
                return
            if version > SCHEMA_VERSION:
                raise self._newer(version)
            if not create:
                raise InvalidInput(
                    f"there is no agentnb store in {self.url}; check the URL (opening a store "
                    "to read it never creates one)"
                )
            # Two processes opening a new database together: one migrates, one waits. The
            # lock is taken before the transaction starts, so the transaction sees (in its
            # catalogue too) whatever the other one committed.
            conn.execute("SELECT pg_advisory_lock(%s)", (_LOCK_ID,))
            with conn.transaction():
                version = self._version(conn)
                if version > SCHEMA_VERSION:
                    raise self._newer(version)
                if version == 0:
                    self._refuse_foreign(conn)
                for v in range(version, SCHEMA_VERSION):
                    for statement in MIGRATIONS[v]:
                        conn.execute(statement)
                    conn.execute(
                        "INSERT INTO agentnb.migrations (version, note) VALUES (%s, %s)",
                        (v + 1, f"agentnb schema {v + 1}"),
                    )
                conn.execute(
                    "INSERT INTO agentnb.meta VALUES ('secret', %s) ON CONFLICT DO NOTHING",
                    (os.urandom(32),),
                )
        except psycopg.Error as exc:
            self._raise(exc)
        finally:
            self._observe_clock(conn)
            conn.close()

    @staticmethod
    def _version(conn: psycopg.Connection[Any]) -> int:
        row = conn.execute("SELECT to_regclass('agentnb.migrations') IS NOT NULL").fetchone()
        if not row or not row[0]:
            return 0
        found = conn.execute("SELECT max(version) FROM agentnb.migrations").fetchone()
        return int(found[0] or 0) if found else 0

    def _refuse_foreign(self, conn: psycopg.Connection[Any]) -> None:
        rows = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'agentnb' "
            "ORDER BY 1 LIMIT 5"
        ).fetchall()
        if rows:
            raise Corrupt(
                f"{self.url} has an 'agentnb' schema that agentnb did not create (tables: "
                f"{', '.join(r[0] for r in rows)}); use another database or drop that schema"
            )

    def _newer(self, version: int) -> StorageError:
        return StorageError(
            f"{self.url} holds agentnb schema version {version}, newer than this agentnb "
            f"understands ({SCHEMA_VERSION}); upgrade agentnb on every machine sharing this "
            'database (in its clone: git pull, then pip install -e ".[postgres]")'
        )

    def _observe_clock(self, conn: psycopg.Connection[Any]) -> None:
        if self._db_clock is None or conn.closed:
            return
        with contextlib.suppress(psycopg.Error):
            sent = time.time()
            row = conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()
            if row:
                self._db_clock.observe(float(row[0]), sent, time.time())

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

    # -- catalogue ---------------------------------------------------------------------------

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

    def _create_session(self, key: SessionKey, now: float) -> SessionRecord:
        self._write(
            lambda c: c.execute(
                "INSERT INTO agentnb.sessions (namespace, user_id, agent_id, session_id, "
                "created_at, updated_at, last_activity) VALUES (%s, %s, %s, %s, %s, %s, %s) "
                "ON CONFLICT DO NOTHING",
                (key.namespace, key.user_id, key.agent_id, key.session_id, now, now, now),
            ),
            f"the creation of session {key}",
        )
        record = self._get_session(key)
        if record is None:
            check_tombstone(key, self._tombstone(key))
        assert record is not None
        return record

    def _get_session(self, key: SessionKey) -> SessionRecord | None:
        row = self._query(
            lambda c: c.execute(
                f"SELECT {_RECORD_COLUMNS} FROM agentnb.sessions WHERE namespace = %s "
                "AND user_id = %s AND agent_id = %s AND session_id = %s "
                "AND deleted_at IS NULL",
                (key.namespace, key.user_id, key.agent_id, key.session_id),
            ).fetchone()
        )
        return _record(row) if row else None

    def _list_sessions(
        self, namespace: str | None, user_id: str | None, agent_id: str | None
    ) -> list[SessionRecord]:
        rows = self._query(
            lambda c: c.execute(
                f"SELECT {_RECORD_COLUMNS} "
                "FROM agentnb.sessions WHERE (%(n)s::text IS NULL OR namespace = %(n)s) "
                "AND (%(u)s::text IS NULL OR user_id = %(u)s) "
                "AND (%(a)s::text IS NULL OR agent_id = %(a)s) AND deleted_at IS NULL "
                "ORDER BY id",
                {"n": namespace, "u": user_id, "a": agent_id},
            ).fetchall()
        )
        return [_record(r) for r in rows]

    def _find_sessions(self, query: SessionQuery) -> list[SessionRecord]:
        where = ["deleted_at IS NULL"]
        if query.archived is not None:
            where.append(f"archived_at IS {'NOT ' if query.archived else ''}NULL")
        params: dict[str, Any] = {"limit": query.limit}
        for column in ("namespace", "user_id", "agent_id"):
            if getattr(query, column) is not None:
                where.append(f"{column} = %({column})s")
                params[column] = getattr(query, column)
        if query.turn_status is not None:
            where.append("coalesce(turn_status, 'none') = ANY(%(statuses)s::text[])")
            params["statuses"] = sorted(query.turn_status)
        if query.labels:
            where.append("labels @> %(labels)s::jsonb")
            params["labels"] = json.dumps(query.labels)
        if query.since is not None:
            where.append("last_activity >= %(since)s")
            params["since"] = query.since
        if query.until is not None:
            where.append("last_activity < %(until)s")
            params["until"] = query.until
        if query.search is not None:
            fold = self._fold_sql()
            where.append(
                f"(strpos({fold.format('title')}, %(search)s) > 0 "
                f"OR strpos({fold.format('first_task')}, %(search)s) > 0)"
            )
            params["search"] = query.search
            if "%(fold_from)s" in fold:
                params["fold_from"], params["fold_to"] = fold_pairs()
        if query.after is not None:
            where.append("(last_activity, id) < (%(activity)s, %(row)s)")
            params["activity"], params["row"] = query.after
        sql = (
            f"SELECT {_RECORD_COLUMNS} FROM agentnb.sessions WHERE {' AND '.join(where)} "
            "ORDER BY last_activity DESC, id DESC LIMIT %(limit)s"
        )
        rows = self._query(lambda c: c.execute(sql, params).fetchall())
        return [_record(r) for r in rows]

    def _fold_sql(self) -> str:
        """How this database folds a column's case as ``fold_case`` does (``{}``: the
        column), found once: ``lower`` under the first collation that folds letters beyond
        ASCII (the database's own, a UTF-8 one, ICU's), else a ``translate`` by the table."""
        if self._fold is None:
            for collation in ("", *(f' COLLATE "{c}"' for c in _FOLDING_COLLATIONS)):
                if self._folds_with(collation):
                    self._fold = f"lower(coalesce({{}}, ''){collation})"
                    break
            else:
                self._fold = "translate(coalesce({}, ''), %(fold_from)s, %(fold_to)s)"
        return self._fold

    def _folds_with(self, collation: str) -> bool:
        probe = "ÀÉÎÕÜ ÄÖ ĞŞ ЖЯ ΔΩ"

        def ask(conn: psycopg.Connection[Any]) -> Any:
            sql = f"SELECT lower(%s::text{collation}) = %s"
            return conn.execute(sql, (probe, fold_case(probe))).fetchone()

        try:
            row = self._query(ask)
        except StorageError:
            return False  # no such collation here
        return bool(row and row[0])

    def _update_session(
        self,
        key: SessionKey,
        title: str | Unset | None,
        labels: dict[str, str | None],
        now: float,
    ) -> SessionRecord:
        sid = self._sid(key)

        def update(c: psycopg.Connection[Any]) -> Any:
            with c.transaction():
                return _set_meta(c, key, sid, title, labels, now)

        found = self._write(update, f"updating session {key}")
        if found is None:
            self._ids.pop(key, None)
            check_tombstone(key, self._tombstone(key))
            raise SessionNotFound(f"session {key} does not exist; create it first")
        return _record(found)

    def _delete_session(
        self, key: SessionKey, by: str, reason: str, fence: Lease | None, now: float
    ) -> Tombstone:
        old = self._tombstone(key)
        if old is not None:
            return old
        sid = self._sid(key)

        def delete(c: psycopg.Connection[Any]) -> bool:
            with c.transaction():
                # Deletions one at a time (the lock is freed at commit): each takes the next
                # seq, and commits before the next one can take a higher one.
                c.execute("SELECT pg_advisory_xact_lock(%s)", (_DELETE_LOCK,))
                row = c.execute(_LOCK_LEASE, {"sid": sid, "now": self._now(now)}).fetchone()
                if row is None or row[4] is not None:
                    return False
                lease_owner, lease_epoch, expires, db_now, _ = row
                at = now if self._db_clock is None else float(db_now)
                check_fence(key, LeaseRow(lease_owner, int(lease_epoch), float(expires)), fence, at)
                c.execute(_DELETE_BLOBS, {"sid": sid})
                for table in ("events", "inbox", "watermarks", "snapshots", "blob_refs"):
                    c.execute(f"DELETE FROM agentnb.{table} WHERE session = %s", (sid,))
                c.execute(
                    "UPDATE agentnb.sessions SET deleted_at = %s, deleted_by = %s, "
                    "deleted_reason = %s, title = NULL, labels = '{}', first_task = NULL, "
                    "lease_owner = NULL, lease_expires = 0, pending_since = NULL, bytes = 0, "
                    f"turns = 0, submits = 0, turn_status = NULL, deleted_seq = ({_TOP_DELETION})"
                    " + 1 WHERE id = %s",
                    (now, by, reason, sid),
                )
                return True

        self._write(delete, f"deleting session {key}")
        self._ids.pop(key, None)
        tombstone = self._tombstone(key)
        assert tombstone is not None
        return tombstone

    def _tombstone(self, key: SessionKey) -> Tombstone | None:
        row = self._query(
            lambda c: c.execute(
                f"SELECT {_TOMBSTONE_COLUMNS} FROM agentnb.sessions "
                "WHERE namespace = %s AND user_id = %s AND agent_id = %s AND session_id = %s "
                "AND deleted_at IS NOT NULL",
                (key.namespace, key.user_id, key.agent_id, key.session_id),
            ).fetchone()
        )
        return None if row is None else _tombstone_row(row)

    def _tombstones(self, after: int, limit: int) -> list[Tombstone]:
        rows = self._query(
            lambda c: c.execute(
                f"SELECT {_TOMBSTONE_COLUMNS} FROM agentnb.sessions WHERE deleted_seq > %s "
                "ORDER BY deleted_seq LIMIT %s",
                (after, limit),
            ).fetchall()
        )
        return [_tombstone_row(r) for r in rows]

    def _tombstone_watermark(self, sink: str) -> int:
        row = self._query(
            lambda c: c.execute(
                "SELECT seq FROM agentnb.tombstone_marks WHERE sink = %s", (sink,)
            ).fetchone()
        )
        return int(row[0]) if row else 0

    def _advance_tombstone_watermark(self, sink: str, seq: int) -> int:
        def advance(c: psycopg.Connection[Any]) -> int:
            with c.transaction():
                top = c.execute(_TOP_DELETION).fetchone()
                old = c.execute(
                    "SELECT seq FROM agentnb.tombstone_marks WHERE sink = %s FOR UPDATE", (sink,)
                ).fetchone()
                mark = decide_tombstone_mark(
                    sink, int(old[0]) if old else 0, seq, int(top[0]) if top else 0
                )
                c.execute(
                    "INSERT INTO agentnb.tombstone_marks AS m VALUES (%s, %s) ON CONFLICT "
                    "(sink) DO UPDATE SET seq = greatest(m.seq, excluded.seq)",
                    (sink, mark),
                )
                return mark

        return self._write(advance, f"advancing the tombstone watermark of {sink!r}")

    def _set_archived(
        self, key: SessionKey, archived: bool, expected_inbox: int | None, now: float
    ) -> SessionRecord:
        sid = self._sid(key)
        found = self._write(
            lambda c: c.execute(
                "UPDATE agentnb.sessions SET archived_at = CASE WHEN %(archived)s THEN "
                "coalesce(archived_at, %(at)s) END WHERE id = %(sid)s AND deleted_at IS NULL "
                "AND (%(inbox)s::int8 IS NULL OR inbox_head = %(inbox)s) "
                f"RETURNING {_RECORD_COLUMNS}",
                {"archived": archived, "at": now, "sid": sid, "inbox": expected_inbox},
            ).fetchone(),
            f"archiving session {key}",
        )
        if found is None:
            check_inbox(key, self._column(key, "inbox_head"), expected_inbox)
            raise StorageError(f"session {key}: not archived for no known reason; retry it")
        return _record(found)

    # -- execution log -----------------------------------------------------------------------

    def _head(self, key: SessionKey) -> int:
        return self._column(key, "head")

    def _read_heads(self, key: SessionKey) -> tuple[int, int]:
        sid = self._sid(key)
        row = self._query(
            lambda c: c.execute(
                "SELECT head, inbox_head, deleted_at FROM agentnb.sessions WHERE id = %s", (sid,)
            ).fetchone()
        )
        if row is None or row[2] is not None:
            self._gone(key)
        return int(row[0]), int(row[1])

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
        blobs: dict[str, bytes] = {}
        hasher = hashlib.sha256()
        rows = [_rows.encode(e, e.seq, _collect(blobs), hasher) for e in batch]
        digest = hasher.hexdigest()
        delta = decide_catalogue(
            batch, sum(len(r.payload or "") for r in rows) + sum(map(len, blobs.values()))
        )
        params: dict[str, Any] = {
            "turns": delta.turns,
            "nbytes": delta.bytes,
            "turn_status": delta.turn_status,
            "at": now,
            "n": len(rows),
            "sid": sid,
            "expected": expected_seq,
            "owner": fence.owner if fence is not None else None,
            "epoch": fence.epoch if fence is not None else None,
            "inbox": expected_inbox,
            "now": self._now(now),
            "first": expected_seq + 1,
            "batch_id": batch_id,
            "digest": digest,
            **(_columns(rows) if len(rows) > 1 else rows[0]._asdict()),
        }
        if blobs:
            params["blob_digests"] = list(blobs)
            params["blob_data"] = list(blobs.values())
        statement = _APPENDS[len(rows) > 1, bool(blobs)]

        def commit(c: psycopg.Connection[Any]) -> bool:
            try:
                return c.execute(statement, params).fetchone() is not None
            except pg_errors.UniqueViolation:
                return False  # the batch id was used before: a replay, or a reuse

        def decide(c: psycopg.Connection[Any]) -> bool:
            # The guarded statement was refused: under the session row's lock, say why, or
            # commit now (nothing can move between the checks and the statement). False: a
            # replay of a batch already committed.
            with c.transaction():
                state = c.execute(_APPEND_STATE, {"sid": sid, "batch_id": batch_id, **params})
                row = state.fetchone()
                if row is None:
                    raise SessionNotFound(f"session {key} does not exist; create it first")
                owner, epoch, expires, head, inbox_head, old_digest, old_first, db_now, gone = row
                if gone is not None:
                    self._ids.pop(key, None)
                    check_tombstone(key, self._tombstone(key))
                decided_now = now if self._db_clock is None else float(db_now)
                check_fence(key, LeaseRow(owner, int(epoch), float(expires)), fence, decided_now)
                old = None if old_digest is None else (str(old_digest), int(old_first))
                if not decide_append(key, int(head), expected_seq, old, digest):
                    return False
                check_inbox(key, int(inbox_head), expected_inbox)
                if c.execute(statement, params).fetchone() is None:
                    raise StorageError(f"session {key}: append refused for no known reason")
                return True

        doing = f"the commit of batch {batch_id} to session {key}"
        self._committing[sid] = batch[-1].seq
        try:
            if not self._write(commit, doing):
                self._notify(key, inbox=False)  # a notification it held back was another's
                if not self._write(decide, doing):
                    return  # an acknowledged replay: the batch is committed
            # Recorded before the marker goes: its NOTIFY wakes nobody.
            self._seen(self._heads, sid, batch[-1].seq)
            self._saw(self._heads_seen, key, batch[-1].seq)
        finally:
            self._committing.pop(sid, None)

    def _select(self, key: SessionKey, sql: str, after: int, through: int) -> list[Any]:
        sid = self._sid(key)
        return self._query(lambda c: c.execute(sql, (sid, after, through)).fetchall())

    def _read(self, key: SessionKey, after: int, through: int) -> list[Event]:
        rows = self._select(key, _SELECT_EVENTS, after, through)
        return [_rows.decode(key, r, self.get_blob) for r in rows]

    def _read_raw(self, key: SessionKey, after: int, through: int) -> list[RawEvent]:
        rows = self._select(key, _SELECT_EVENTS, after, through)
        return [RawEvent(*_rows.decode_raw(key, r, self.get_blob)) for r in rows]

    def _read_arrow(self, key: SessionKey, after: int, through: int) -> Any:
        """Rows straight into Arrow: ``COPY ... TO STDOUT (FORMAT csv)`` parsed by pyarrow.

        Measured on 10k-event pages against a client cursor, a server-side cursor and binary
        COPY (all of which build Python objects per value): the CSV path was the fastest.
        Every non-NULL text value is quoted, so only NULLs arrive unquoted and empty. Rows are
        then checked like every columnar read (``verified``); a page pyarrow cannot parse as
        the stored types falls back to reading row by row, which names the damage.
        """
        from agentnb.stores._arrow import Unreadable, verified

        sid = self._sid(key)
        buffer = io.BytesIO()

        def copy(c: psycopg.Connection[Any]) -> None:
            buffer.seek(0)
            buffer.truncate()
            with c.cursor().copy(_COPY_EVENTS, (sid, after, through)) as rows:
                for block in rows:
                    buffer.write(block)

        self._query(copy)
        if not buffer.tell():
            from agentnb.stores._arrow import schema

            return schema().empty_table()
        try:
            table = _parse_csv(buffer.getvalue())
            return verified(key, table, self.get_blob)
        except Unreadable:
            return super()._read_arrow(key, after, through)

    # -- inbox -------------------------------------------------------------------------------

    def _inbox_append(
        self, key: SessionKey, event: Event, dedupe_key: str | None, digest: str, now: float
    ) -> tuple[Event, bool]:
        sid = self._sid(key)
        task = submit_text(event)
        update = meta_update(event)
        params = {
            "sid": sid,
            # An update is carried out here, by the store: no worker has anything to do.
            "pending": event.type == "inbox/accepted" and update is None,
            "now": self._now(now),
            "at": now,
            "submit": submit_delta(event),
            "task": task,
            "work": does_work(event),
        }
        # Its blobs, if any, do not depend on the seq: known before the row is encoded.
        large = len(canonical_json(event.payload)) > BLOB_THRESHOLD

        def accept(c: psycopg.Connection[Any]) -> int | None:
            try:
                with c.transaction():
                    if large:
                        c.execute("SELECT pg_advisory_xact_lock_shared(%s)", (_DELETE_LOCK,))
                    found = c.execute(_INBOX_NEXT, params).fetchone()
                    if found is None:
                        archived = c.execute(
                            "SELECT archived_at FROM agentnb.sessions WHERE id = %s "
                            "AND deleted_at IS NULL",
                            (sid,),
                        ).fetchone()
                        if archived is None:
                            self._gone(key)
                        if (
                            dedupe_key is not None
                            and c.execute(_RESENT, (sid, dedupe_key)).fetchone()
                        ):
                            return None  # a re-send of a command accepted before: see below
                        check_archived(key, archived[0], event)
                        raise StorageError(f"session {key}: command refused for no known reason")
                    seq = int(found[0])
                    blobs: dict[str, bytes] = {}
                    row = _rows.encode(event, seq, _collect(blobs))
                    if blobs:
                        c.execute(
                            _INBOX_BLOBS,
                            {"sid": sid, "digests": list(blobs), "data": list(blobs.values())},
                        )
                    c.execute(_INBOX_INSERT, (sid, *row, dedupe_key, digest, f"i:{sid}:{seq}"))
                    if update is not None:
                        _set_meta(c, key, sid, *update, now)
                    return seq
            except pg_errors.UniqueViolation:
                return None  # the dedupe key was used before (rolled back: no seq used)

        for _ in range(3):
            seq = self._write(accept, f"accepting a command for session {key}")
            if seq is not None:
                self._seen(self._inbox_heads, sid, seq)
                return event.with_seq(seq), True
            old = self._query(
                lambda c: c.execute(
                    f"SELECT {_EVENT_COLUMNS}, digest FROM agentnb.inbox "
                    "WHERE session = %s AND dedupe_key = %s",
                    (sid, dedupe_key),
                ).fetchone()
            )
            if old is None:
                continue  # the conflicting row was not committed after all
            if not _rows.same_fingerprint(old[-1], digest):
                raise IdempotencyConflict(
                    f"session {key}: key {dedupe_key!r} was already used for another "
                    "command; use a new key for new content"
                )
            return _rows.decode(key, old[:-1], self.get_blob), False
        raise StorageError(f"session {key}: command not accepted for no known reason; retry it")

    def _inbox_head(self, key: SessionKey) -> int:
        return self._column(key, "inbox_head")

    def _inbox_read(self, key: SessionKey, after: int, through: int) -> list[Event]:
        rows = self._select(key, _SELECT_INBOX, after, through)
        return [_rows.decode(key, r, self.get_blob) for r in rows]

    # -- leases ------------------------------------------------------------------------------

    def _lease_row(self, key: SessionKey) -> LeaseRow | None:
        sid = self._sid(key)
        row = self._query(
            lambda c: c.execute(
                "SELECT lease_owner, lease_epoch, lease_expires FROM agentnb.sessions "
                "WHERE id = %s",
                (sid,),
            ).fetchone()
        )
        return LeaseRow(row[0], int(row[1]), float(row[2])) if row else None

    def _decide_lease(
        self,
        key: SessionKey,
        now: float,
        decide: Callable[[LeaseRow, float], tuple[_T, tuple[str | None, int, float] | None]],
        doing: str,
    ) -> _T:
        """Lock the lease row, ``decide`` from it on the lease clock, write what it returns.

        ``decide`` returns (result, new lease row or None); read, decision and write share
        one transaction holding the row lock.
        """
        sid = self._sid(key)

        def run(c: psycopg.Connection[Any]) -> _T:
            with c.transaction():
                sent = time.time()
                row = c.execute(_LOCK_LEASE, {"sid": sid, "now": self._now(now)}).fetchone()
                if row is None or row[4] is not None:
                    self._gone(key)
                owner, epoch, expires, server_now, _ = row
                if self._db_clock is not None:
                    self._db_clock.observe(float(server_now), sent, time.time())
                at = now if self._db_clock is None else float(server_now)
                result, write = decide(LeaseRow(owner, int(epoch), float(expires)), at)
                if write is not None:
                    c.execute(_SET_LEASE, (*write, sid))
                return result

        return self._write(run, f"{doing} of session {key}")

    def _acquire_lease(self, key: SessionKey, owner: str, ttl: float, now: float) -> Lease:
        def decide(row: LeaseRow, at: float) -> tuple[Lease, tuple[str, int, float]]:
            lease = decide_acquire(key, row, owner, ttl, at)
            return lease, (owner, lease.epoch, lease.expires_at)

        return self._decide_lease(key, now, decide, "acquiring the lease")

    def _renew_lease(self, lease: Lease, ttl: float, now: float) -> Lease:
        def decide(row: LeaseRow, at: float) -> tuple[Lease, tuple[str, int, float]]:
            check_fence(lease.key, row, lease, at)
            return Lease(lease.key, lease.owner, lease.epoch, at + ttl), (
                lease.owner,
                lease.epoch,
                at + ttl,
            )

        return self._decide_lease(lease.key, now, decide, "renewing the lease")

    def _release_lease(self, lease: Lease, now: float) -> None:
        def decide(row: LeaseRow, at: float) -> tuple[None, tuple[None, int, float] | None]:
            if decide_release(lease.key, row, lease):
                return None, (None, lease.epoch, 0.0)
            return None, None

        self._decide_lease(lease.key, now, decide, "releasing the lease")

    # -- watermarks, blobs, snapshots, secret ------------------------------------------------

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

    def _inbox_keys(self, key: SessionKey, after: int, through: int) -> list[tuple[int, str, str]]:
        sid = self._sid(key)
        rows = self._query(
            lambda c: c.execute(
                "SELECT seq, dedupe_key, digest FROM agentnb.inbox WHERE session = %s "
                "AND seq > %s AND seq <= %s AND dedupe_key IS NOT NULL ORDER BY seq",
                (sid, after, through),
            ).fetchall()
        )
        return [(int(seq), str(k), str(d or "")) for seq, k, d in rows]

    def _advance_watermark(self, key: SessionKey, sink: str, seq: int) -> int:
        sid = self._sid(key)
        row = self._write(
            lambda c: c.execute(
                f"WITH {_LIVE}INSERT INTO agentnb.watermarks AS w SELECT s.id, %s, %s FROM s "
                "ON CONFLICT (session, sink) DO UPDATE SET seq = greatest(w.seq, excluded.seq) "
                "RETURNING seq",
                (sid, sink, seq),
            ).fetchone(),
            f"advancing watermark {sink!r} of session {key}",
        )
        if row is None:
            self._gone(key)
        return int(row[0])

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
                    f"WITH {_LIVE}INSERT INTO agentnb.snapshots AS n SELECT s.id, %s, %s, %s "
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

    # -- access tokens -----------------------------------------------------------------------

    def _add_token(self, record: TokenRecord) -> TokenRecord:
        def add(c: psycopg.Connection[Any]) -> Any:
            return c.execute(
                f"INSERT INTO agentnb.tokens ({_ACCESS_COLUMNS}) VALUES "
                "(%s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (token_id) DO NOTHING "
                "RETURNING token_id",
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
            ).fetchone()

        if self._write(add, f"adding token {record.token_id}") is None:
            raise InvalidInput(f"token id {record.token_id!r} is in use; pick another")
        return record

    def _get_token(self, token_id: str) -> TokenRecord | None:
        row = self._query(
            lambda c: c.execute(
                f"SELECT {_ACCESS_COLUMNS} FROM agentnb.tokens WHERE token_id = %s", (token_id,)
            ).fetchone()
        )
        return None if row is None else _token_row(row)

    def _list_tokens(self, user_id: str | None) -> list[TokenRecord]:
        rows = self._query(
            lambda c: c.execute(
                f"SELECT {_ACCESS_COLUMNS} FROM agentnb.tokens WHERE %(u)s::text IS NULL "
                "OR user_id = %(u)s ORDER BY created_at, token_id",
                {"u": user_id},
            ).fetchall()
        )
        return [_token_row(r) for r in rows]

    def _touch_token(self, token_id: str, now: float) -> None:
        self._write(
            lambda c: c.execute(
                "UPDATE agentnb.tokens SET last_used_at = %(now)s WHERE token_id = %(t)s "
                "AND (last_used_at IS NULL OR last_used_at < %(now)s)",
                {"now": now, "t": token_id},
            ),
            f"recording the use of token {token_id}",
        )

    def _revoke_token(self, token_id: str, now: float) -> TokenRecord:
        def revoke(c: psycopg.Connection[Any]) -> Any:
            with c.transaction():
                c.execute(
                    "UPDATE agentnb.tokens SET revoked_at = %(now)s WHERE (token_id = %(t)s "
                    "OR parent = %(t)s) AND revoked_at IS NULL",
                    {"now": now, "t": token_id},
                )
                return c.execute(
                    f"SELECT {_ACCESS_COLUMNS} FROM agentnb.tokens WHERE token_id = %s",
                    (token_id,),
                ).fetchone()

        row = self._write(revoke, f"revoking token {token_id}")
        if row is None:
            raise InvalidInput(f"there is no token {token_id!r}; see agentnb token list")
        return _token_row(row)

    # -- waiting -----------------------------------------------------------------------------

    def _seen(self, heads: dict[int, int], sid: int, seq: int) -> None:
        with self._seen_lock:  # writers and the listener race; a head only moves up
            if heads.get(sid, 0) < seq:
                heads[sid] = seq

    def _on_notify(self, payload: str) -> bool:
        """Take one notification: record the head it tells, wake that log's waiters. False
        when it names a session this object never resolved (the caller wakes the waiters
        of no session in particular)."""
        kind, _, rest = payload.partition(":")
        sid_text, _, seq_text = rest.partition(":")
        try:
            sid, seq = int(sid_text), int(seq_text)
        except ValueError:
            return True  # not ours
        self._seen(self._heads if kind == "e" else self._inbox_heads, sid, seq)
        key = self._keys.get(sid)
        if kind == "i":
            self._wake_pending(key)
        if key is None:
            return False
        if kind == "e" and seq <= max(self._committing.get(sid, 0), self.head_hint(key)):
            return True  # this object's own commit: it wakes the waiters after hand-over
        # An inbox record can settle a turn too, so it wakes both logs' waiters.
        self._notify(key, inbox=False if kind == "e" else None)
        return True

    def inbox_head_hint(self, key: SessionKey) -> int:
        """Also what notifications said of other writers' commands (see the base class)."""
        sid = self._ids.get(key)
        notified = 0 if sid is None else self._inbox_heads.get(sid, 0)
        return max(super().inbox_head_hint(key), notified)

    def wait_for_head(
        self,
        key: SessionKey,
        after: int,
        timeout: float | None,
        *,
        stop: threading.Event | None = None,
        local: bool = False,
        settling: bool = False,
        poll: float | None = None,
    ) -> int:
        return self._wait_on(
            key, after, timeout, stop, inbox=False, local=local, settling=settling, poll=poll
        )

    def wait_for_inbox(
        self,
        key: SessionKey,
        after: int,
        timeout: float | None,
        *,
        stop: threading.Event | None = None,
        local: bool = False,
        poll: float | None = None,
    ) -> int:
        return self._wait_on(key, after, timeout, stop, inbox=True, local=local, poll=poll)

    def _wait_on(
        self,
        key: SessionKey,
        after: int,
        timeout: float | None,
        stop: threading.Event | None,
        *,
        inbox: bool,
        local: bool = False,
        settling: bool = False,
        poll: float | None = None,
    ) -> int:
        if not isinstance(key, SessionKey):
            raise InvalidInput(f"expected a SessionKey, got {type(key).__name__}")
        every = self._poll(poll)
        self._listen()
        heads = self._inbox_heads if inbox else self._heads
        column = "inbox_head" if inbox else "head"
        sid = -1
        checked = (-1, 0.0)  # (listener connection, time) of the last database read
        if local and key in self._ids:
            # The caller knows what this object knows: its own commits (of a session whose
            # lease it holds) and what notifications told. No first read; the poll comes.
            sid, checked = self._ids[key], (self._resyncs, time.monotonic())

        def known() -> int:
            return max(after, self.inbox_head_hint(key) if inbox else heads.get(sid, 0))

        def read() -> int:
            # The database is read first, after each (re)connect of the listener and every
            # poll_interval; a wake-up in between is a notification, for this session or not.
            nonlocal sid, checked
            resync, at = self._resyncs, time.monotonic()
            if sid >= 0 and (
                at - checked[1] < every and (checked[0] == resync or not self._listening())
            ):
                return known()
            try:
                value = self._column(key, column, timeout=1.0)
            except StorageError:
                if sid < 0:
                    raise
                checked = (checked[0], at)  # the server is away: the listener's reconnect
                return known()  # wakes this waiter to read again
            sid, checked = self._ids[key], (resync, at)
            return value

        return self._wait(
            read, after, timeout, stop, key=key, inbox=inbox, settling=settling, poll=every
        )

    def watch_wakes(
        self, key: SessionKey, callback: Callable[[bool | None], None]
    ) -> Callable[[], None]:
        """Also starts the listener: other processes' commits wake the watcher by NOTIFY."""
        self._listen()
        return super().watch_wakes(key, callback)

    def _listening(self) -> bool:
        listener = self._listener
        return listener is not None and listener.listening

    def _listen(self) -> None:
        with self._listener_lock:
            if self._listener is None and not self._closed:
                listener = self._listener = _Listener(self)
                # Stopped by close(), or as soon as a store nobody closed is collected: its
                # thread, connection and wake-up sockets go with it, not 30 s later.
                self._unlisten = weakref.finalize(self, listener.stop)
                listener.start()

    # -- scale-out: the pending-work index -------------------------------------------------

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

        Oldest waiting first; claimers running at once get disjoint sessions (``FOR UPDATE
        SKIP LOCKED``). A session whose holder crashed is claimable again once its lease
        expires, with the next epoch, so a stale holder is fenced.
        """
        check_id(owner, "owner")
        ttl = check_ttl(ttl)
        check_pending_scope(limit, agent_id, namespace)
        with self._operation():
            rows = self._write(
                lambda c: c.execute(
                    _CLAIM,
                    {
                        "owner": owner,
                        "ttl": ttl,
                        "limit": limit,
                        "agent_id": agent_id,
                        "namespace": namespace,
                        "now": self._now(self.clock.now()),
                    },
                ).fetchall(),
                "claiming sessions with pending work",
            )
        leases = []
        for ns, user, agent, session, epoch, expires, sid, deleted in rows:
            key = SessionKey(ns, user, agent, session)
            if deleted is None:  # resolved here: the claimer's first look needs no lookup
                self._ids[key], self._keys[sid] = sid, key
            leases.append(Lease(key, owner, int(epoch), float(expires)))
        return leases

    def watch_pending(self, callback: Callable[[SessionKey | None], None]) -> Callable[[], None]:
        """Call ``callback`` (from the listener thread; it must not block) whenever a command
        is accepted in any session, and after every (re)connect of the listener, when
        commands accepted meanwhile went unheard; returns the function that stops it.

        The callback gets the key of the session when this store has used that session (so
        whoever holds it here can look), else None (a session new to this store, or the
        reconnect). A hint to run ``claim_pending`` again, nothing more: a claimer still
        claims now and then without one, for sessions whose holder crashed or let go.
        """
        if not callable(callback):
            raise InvalidInput(f"callback must be callable, got {type(callback).__name__}")
        with self._listener_lock:
            self._pending_watchers.append(callback)
        self._listen()

        def unwatch() -> None:
            with self._listener_lock, contextlib.suppress(ValueError):
                self._pending_watchers.remove(callback)

        return unwatch

    def _wake_pending(self, key: SessionKey | None) -> None:
        for callback in list(self._pending_watchers):
            try:
                callback(key)
            except Exception:  # a watcher's bug must not deafen the listener
                log.exception("pending-work watcher failed")

    def held_pending(
        self, *, limit: int = 100, agent_id: str | None = None, namespace: str | None = None
    ) -> list[Lease]:
        """The live leases of up to ``limit`` sessions that have queued work: their holders
        execute them, or died holding them (a claimer releases the leases of holders it
        knows dead, so it need not wait for their expiry)."""
        check_pending_scope(limit, agent_id, namespace)
        with self._operation():
            rows = self._query(
                lambda c: c.execute(
                    _HELD,
                    {
                        "limit": limit,
                        "agent_id": agent_id,
                        "namespace": namespace,
                        "now": self._now(self.clock.now()),
                    },
                ).fetchall()
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
            cur = self._write(
                lambda c: c.execute(
                    _SETTLES[bool(release)],
                    {
                        "sid": sid,
                        "seen": inbox_seen,
                        "owner": lease.owner,
                        "epoch": lease.epoch,
                        "now": self._now(self.clock.now()),
                    },
                ),
                "clearing the pending-work mark",
            )
            return cur.rowcount == 1


_KEEPALIVES = {
    "keepalives": 1,
    "keepalives_idle": 30,
    "keepalives_interval": 10,
    "keepalives_count": 3,
}


class _Listener(threading.Thread):
    """One connection LISTENing on ``CHANNEL`` for a store; reconnects until stopped."""

    def __init__(self, store: PostgresStore) -> None:
        super().__init__(name="agentnb-pg-listener", daemon=True)
        self._store = weakref.ref(store)
        # TCP keepalives (unless the URL sets its own): a silent network drop ends the
        # listener's connection within about a minute instead of the system's hours.
        params = conninfo_to_dict(store._conninfo)
        for name, value in _KEEPALIVES.items():
            params.setdefault(name, value)
        self._conninfo = psycopg.conninfo.make_conninfo("", **params)
        self._stopped = threading.Event()
        self._wake_r, self._wake_w = socket.socketpair()
        self.listening = False

    def stop(self) -> None:
        self._stopped.set()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        if self is not threading.current_thread():
            self.join(10)
        for sock in (self._wake_r, self._wake_w):
            sock.close()

    def run(self) -> None:
        backoff = 0.05
        while not self._stopped.is_set() and self._store() is not None:
            try:
                self._serve()
                backoff = 0.05
            except (psycopg.Error, OSError) as exc:
                log.debug("listener lost its connection: %s", exc)
            self.listening = False
            self._stopped.wait(backoff)
            backoff = min(backoff * 2, 1.0)

    def _serve(self) -> None:
        with (
            psycopg.connect(self._conninfo, autocommit=True) as conn,
            selectors.DefaultSelector() as selector,
        ):
            conn.execute(f"LISTEN {CHANNEL}")
            selector.register(conn.fileno(), selectors.EVENT_READ)
            selector.register(self._wake_r, selectors.EVENT_READ)
            self.listening = True
            if not self._deliver(conn, resynced=True):
                return
            while not self._stopped.is_set():
                ready = selector.select(30.0)
                if self._stopped.is_set():
                    return
                if not ready:
                    conn.execute("SELECT 1")  # a silent network drop shows here
                if not self._deliver(conn, resynced=False):
                    return

    def _deliver(self, conn: psycopg.Connection[Any], *, resynced: bool) -> bool:
        """Hand the notifications received to the store; False once the store is gone."""
        store = self._store()
        if store is None:
            return False
        unknown = False
        for note in conn.notifies(timeout=0):
            if not store._on_notify(note.payload):
                unknown = True  # a session it never resolved: no waiter of it sleeps
        if resynced:
            store._resyncs += 1  # waiters read the database again: commits made while
            # nobody listened sent notifications nobody heard
            store._wake_pending(None)
            store._notify()
        elif unknown:  # another worker's session, say: only waiters of every session care
            store._notify_unkeyed()
        return True


def _set_meta(
    c: psycopg.Connection[Any],
    key: SessionKey,
    sid: int,
    title: str | Unset | None,
    labels: dict[str, str | None],
    now: float,
) -> Any:
    """In the caller's transaction: set the title unless ``UNSET`` and merge the labels; the
    record's row after the change, or None if the session is not live."""
    row = c.execute(
        "SELECT labels FROM agentnb.sessions WHERE id = %s AND deleted_at IS NULL FOR UPDATE",
        (sid,),
    ).fetchone()
    if row is None:
        return None
    merged = merge_labels(key, dict(row[0] or {}), labels)
    return c.execute(
        "UPDATE agentnb.sessions SET labels = %s::jsonb, updated_at = %s, "
        "last_activity = %s, title = CASE WHEN %s THEN title ELSE %s::text END "
        f"WHERE id = %s RETURNING {_RECORD_COLUMNS}",
        (
            json.dumps(merged),
            now,
            now,
            isinstance(title, Unset),
            None if isinstance(title, Unset) else title,
            sid,
        ),
    ).fetchone()


def _parse_csv(data: bytes) -> Any:
    """The CSV of ``_COPY_EVENTS`` as an Arrow table of the stored columns."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    from agentnb.stores._arrow import Unreadable

    names = [name.strip() for name in _EVENT_COLUMNS.split(",")]
    text, number = pa.string(), pa.int64()
    try:
        return pacsv.read_csv(
            io.BytesIO(data),
            read_options=pacsv.ReadOptions(column_names=names, use_threads=False),
            parse_options=pacsv.ParseOptions(newlines_in_values=True),
            convert_options=pacsv.ConvertOptions(
                column_types={n: text if n in _TEXT_COLUMNS else number for n in names},
                null_values=[""],
                strings_can_be_null=True,
                quoted_strings_can_be_null=False,
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise Unreadable(str(exc)) from None


_TEXT_COLUMNS = frozenset({"event_id", "type", "turn_id", "run_id", "payload", "blob"})


def _collect(blobs: dict[str, bytes]) -> Callable[[bytes], str]:
    def put(data: bytes) -> str:
        digest = _rows.blob_digest(data)
        blobs[digest] = data
        return digest

    return put


def _columns(rows: list[_rows.Row]) -> dict[str, list[Any]]:
    """The rows as one list per column (the ``unnest`` arrays)."""
    names = _rows.Row._fields
    return {name: list(values) for name, values in zip(names, zip(*rows, strict=True), strict=True)}


def _unencodable(exc: UnicodeEncodeError) -> InvalidInput:
    return InvalidInput(
        f"text {exc.object[exc.start : exc.end]!r} cannot be stored: it is not valid Unicode "
        "(a lone surrogate); replace it (str.encode('utf-8', 'replace')) first"
    )


def _lost(exc: BaseException) -> bool:
    """Whether ``exc`` means the connection is gone (not an error of the statement)."""
    if isinstance(exc, pg_errors.LockNotAvailable | pg_errors.QueryCanceled):
        return False
    if isinstance(exc, psycopg.OperationalError):
        return True
    return isinstance(exc, psycopg.InterfaceError)


def _parse(url: str, shown: str, connect_timeout: float) -> tuple[str, str]:
    """The conninfo to connect with and a "host:port/db" text that names no secret."""
    try:
        params = conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        raise InvalidInput(
            f"{shown} is not a PostgreSQL URL ({scrub_url(str(exc), url)}); write "
            "postgresql://user:password@host:port/dbname"
        ) from None
    if "connect_timeout" not in params:
        params["connect_timeout"] = max(1, round(connect_timeout))
    host = str(params.get("host") or params.get("hostaddr") or "localhost")
    port = str(params.get("port") or 5432)
    db = str(params.get("dbname") or params.get("user") or "")
    where = f"{host}:{port}/{db}" if not host.startswith("/") else f"{host} (socket)/{db}"
    return psycopg.conninfo.make_conninfo("", **params), where
