"""The catalogue of a PostgreSQL store: sessions, their lifecycle, tombstones and the archive."""

from __future__ import annotations

import json
import logging
from typing import Any

from agentnb.errors import (
    SessionNotFound,
    StorageError,
)
from agentnb.ids import SessionKey
from agentnb.stores.base import (
    Lease,
    LeaseRow,
    SessionQuery,
    SessionRecord,
    Tombstone,
    Unset,
    check_fence,
    check_inbox,
    check_tombstone,
    decide_tombstone_mark,
    encode_cursor,
    fold_case,
    fold_pairs,
    merge_labels,
)
from agentnb.stores.postgres.core import (
    DELETE_LOCK,
    LOCK_LEASE,
    TOMBSTONE_COLUMNS,
    PostgresCore,
    tombstone_row,
)
from agentnb.stores.postgres.driver import (
    psycopg,
)

__all__ = ["PostgresCatalogue"]

log = logging.getLogger("agentnb.stores.postgres")


_RECORD_COLUMNS = (
    "id, namespace, user_id, agent_id, session_id, created_at, updated_at, last_activity, "
    "title, labels, first_task, events, turns, bytes, submits, turn_status, lease_owner, "
    "lease_expires, archived_at"
)
_TOP_DELETION = (
    "SELECT coalesce(max(deleted_seq), 0) FROM agentnb.sessions WHERE deleted_seq IS NOT NULL"
)
# A deleted session's blobs, unless another session's rows name them too.
_DELETE_BLOBS = (
    "DELETE FROM agentnb.blobs AS b WHERE b.digest IN ("
    "SELECT digest FROM agentnb.blob_refs WHERE session = %(sid)s) "
    "AND NOT EXISTS (SELECT 1 FROM agentnb.blob_refs AS r WHERE r.digest = b.digest "
    "AND r.session <> %(sid)s)"
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


class PostgresCatalogue(PostgresCore):
    """``Catalogue``'s hooks."""

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
            for collation in ("", *(f' COLLATE "{c}"' for c in self._folding_collations)):
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
                return set_meta(c, key, sid, title, labels, now)

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
                c.execute("SELECT pg_advisory_xact_lock(%s)", (DELETE_LOCK,))
                row = c.execute(LOCK_LEASE, {"sid": sid, "now": self._now(now)}).fetchone()
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

    def _tombstones(self, after: int, limit: int) -> list[Tombstone]:
        rows = self._query(
            lambda c: c.execute(
                f"SELECT {TOMBSTONE_COLUMNS} FROM agentnb.sessions WHERE deleted_seq > %s "
                "ORDER BY deleted_seq LIMIT %s",
                (after, limit),
            ).fetchall()
        )
        return [tombstone_row(r) for r in rows]

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


def set_meta(
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
