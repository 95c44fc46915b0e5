"""The schema of a PostgreSQL store (``agentnb.migrations`` records its version) and its
migrations, run by the first process that opens a database at an older version.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from agentnb.errors import (
    Corrupt,
    InvalidInput,
    StorageError,
)
from agentnb.stores.postgres.core import PostgresCore
from agentnb.stores.postgres.driver import (
    psycopg,
)

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "PostgresSchema"]

log = logging.getLogger("agentnb.stores.postgres")


# Each entry migrates from version i to i + 1; the list index is the version.
_LOCK_ID = 0x6167_6E62  # advisory lock key serializing migrations ("agnb"); freed on close

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


class PostgresSchema(PostgresCore):
    """Creating and migrating the schema; refusing a newer one, or one we did not make."""

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
