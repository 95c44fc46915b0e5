"""The schema of an SQLite store and its migrations in place from the formats before it."""

from __future__ import annotations

import logging
import os
import sqlite3
from typing import Any

from agentnb.errors import Corrupt, InvalidInput
from agentnb.stores.sqlite.core import SQLiteCore
from agentnb.stores.sqlite.files import lost, record_sessions, recorded_sessions, top_session

__all__ = ["FORMAT", "SQLiteSchema"]

log = logging.getLogger("agentnb.stores.sqlite")


FORMAT = "agentnb-sqlite/6"
MIGRATABLE = ("agentnb-sqlite/2", "agentnb-sqlite/3", "agentnb-sqlite/4", "agentnb-sqlite/5")
"""Formats this agentnb migrates in place: 2 gains the lifecycle columns (its logs are
counted), 2 and 3 the archive flag, the order of deletions and the tombstone watermarks,
2 to 4 the listing key and the pending-work mark (format 5), and all of them the blob
references (format 6: payloads in blobs by part, see ``_rows.stored_body``)."""

SCHEMA = """
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
FORMAT_4_COLUMNS = ("archived_at REAL", "deleted_seq INTEGER")
"""The columns format 4 adds (the archive flag and the order of deletions)."""
FORMAT_5_COLUMNS = ("list_key REAL NOT NULL DEFAULT 0", "pending_since REAL")
"""The columns format 5 adds: the listing key (see ``_LIFECYCLE_INDEXES``) and the
pending-work mark (see ``claim_pending``)."""
LIFECYCLE_COLUMNS = (
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
    *FORMAT_4_COLUMNS,
    *FORMAT_5_COLUMNS,
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
# Numbering the deletions a format-2 or -3 store holds (once, at the migration), by time.
_NUMBER_DELETIONS = """
UPDATE sessions SET deleted_seq = (SELECT count(*) FROM sessions AS o
    WHERE o.deleted_at IS NOT NULL AND (o.deleted_at < sessions.deleted_at
    OR (o.deleted_at = sessions.deleted_at AND o.id <= sessions.id)))
WHERE deleted_at IS NOT NULL
"""

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


class SQLiteSchema(SQLiteCore):
    """Creating the tables of a new file, migrating an older one, refusing what is not ours."""

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
            if old is None or old[0] not in MIGRATABLE:
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
            recorded = recorded_sessions(self._catalogue, self.path)
            top = top_session(c)
            if recorded is not None and recorded > top:
                raise lost(self.path, self._catalogue, recorded, top)
            for statement in SCHEMA.split(";"):
                if statement.strip():
                    c.execute(statement)
            self._add_lifecycle(c)
            c.execute("INSERT OR IGNORE INTO agentnb_meta VALUES ('format', ?)", (FORMAT,))
            c.execute("INSERT OR IGNORE INTO agentnb_meta VALUES ('secret', ?)", (os.urandom(32),))
            fmt = c.execute("SELECT value FROM agentnb_meta WHERE key='format'").fetchone()
            if recorded != top and self._create:
                record_sessions(self._catalogue, top, durable=self._durable)
        self._check_format(fmt)

    def _add_lifecycle(self, c: sqlite3.Connection) -> None:
        """Formats 3 to 6: the lifecycle columns, indexes and triggers; a format-2 to -5
        store is migrated in place (in the schema transaction: counting what the logs of a
        format-2 store hold, numbering the deletions of a format-2 or -3 one, keying the
        listing of one up to 4, recording the blobs every one's rows name)."""
        fmt = c.execute("SELECT value FROM agentnb_meta WHERE key='format'").fetchone()
        columns = {r[1] for r in c.execute("PRAGMA table_info(sessions)")}
        for column in LIFECYCLE_COLUMNS:
            if column.split()[0] not in columns:
                c.execute(f"ALTER TABLE sessions ADD COLUMN {column}")
        if fmt is not None and fmt[0] in MIGRATABLE:
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

    def _check_format(self, fmt: tuple[Any, ...] | None) -> None:
        if fmt is None or fmt[0] != FORMAT:
            raise Corrupt(
                f"{self.path} has store format {fmt and fmt[0]!r}; this agentnb reads "
                f"{FORMAT!r} (and migrates {' and '.join(map(repr, MIGRATABLE))} in place). "
                "Open it with the "
                "agentnb that wrote it (and export what you need), or point the store at a "
                "new file"
            )
