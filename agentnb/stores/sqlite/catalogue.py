"""The catalogue of an SQLite store: sessions, their lifecycle, tombstones and the archive."""

from __future__ import annotations

import json
import logging
import sqlite3
from typing import Any

from agentnb.ids import SessionKey
from agentnb.stores.base import (
    Lease,
    SessionQuery,
    SessionRecord,
    Tombstone,
    Unset,
    check_fence,
    check_inbox,
    check_tombstone,
    decide_tombstone_mark,
    encode_cursor,
    merge_labels,
)
from agentnb.stores.sqlite.core import TOMBSTONE_COLUMNS, SQLiteCore, tombstone_row
from agentnb.stores.sqlite.files import record_sessions, top_session

__all__ = ["SQLiteCatalogue"]

log = logging.getLogger("agentnb.stores.sqlite")


_RECORD_COLUMNS = (
    "id, namespace, user_id, agent_id, session_id, created_at, updated_at, last_activity, "
    "title, labels, first_task, events, turns, bytes, submits, turn_status, lease_owner, "
    "lease_expires, archived_at, list_key"
)
# A deleted session's blobs, unless another session's rows name them too.
_DELETE_BLOBS = (
    "DELETE FROM blobs WHERE digest IN (SELECT digest FROM blob_refs WHERE session=?1) "
    "AND NOT EXISTS (SELECT 1 FROM blob_refs AS r WHERE r.digest=blobs.digest "
    "AND r.session<>?1)"
)
_TOP_DELETION = "SELECT coalesce(max(deleted_seq), 0) FROM sessions WHERE deleted_seq IS NOT NULL"


class SQLiteCatalogue(SQLiteCore):
    """``Catalogue``'s hooks."""

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

    def _tombstones(self, after: int, limit: int) -> list[Tombstone]:
        rows = (
            self._conn()
            .execute(
                f"SELECT {TOMBSTONE_COLUMNS} FROM sessions WHERE deleted_seq > ? "
                "ORDER BY deleted_seq LIMIT ?",
                (after, limit),
            )
            .fetchall()
        )
        return [tombstone_row(r) for r in rows]

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
                record_sessions(self._catalogue, top_session(c), durable=self._durable)
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
