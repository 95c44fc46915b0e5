"""The inbox of a PostgreSQL store: each command one short transaction that notifies."""

from __future__ import annotations

import logging
from typing import Any

from agentnb.errors import (
    IdempotencyConflict,
    StorageError,
)
from agentnb.events import BLOB_THRESHOLD, Event, canonical_json
from agentnb.ids import SessionKey
from agentnb.stores import _rows
from agentnb.stores.base import (
    check_archived,
    does_work,
    meta_update,
    submit_delta,
    submit_text,
)
from agentnb.stores.postgres.catalogue import set_meta
from agentnb.stores.postgres.core import (
    CHANNEL,
    DELETE_LOCK,
    EVENT_COLUMNS,
    NOW,
    PostgresCore,
    collect,
)
from agentnb.stores.postgres.driver import (
    pg_errors,
    psycopg,
)

__all__ = ["PostgresInbox"]

log = logging.getLogger("agentnb.stores.postgres")


_INBOX_NEXT = (
    "UPDATE agentnb.sessions SET inbox_head = inbox_head + 1, pending_since = "
    "CASE WHEN %(pending)s THEN coalesce(pending_since, " + NOW + ") ELSE pending_since END, "
    "last_activity = %(at)s, submits = GREATEST(submits + %(submit)s, turns), "
    "first_task = coalesce(first_task, %(task)s::text) "
    "WHERE id = %(sid)s AND deleted_at IS NULL AND (archived_at IS NULL OR NOT %(work)s) "
    "RETURNING inbox_head"
)
_INBOX_INSERT = (
    "WITH i AS (INSERT INTO agentnb.inbox (session, " + EVENT_COLUMNS + ", dedupe_key, digest) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)) "
    "SELECT pg_notify('" + CHANNEL + "', %s)"
)
_RESENT = "SELECT 1 FROM agentnb.inbox WHERE session = %s AND dedupe_key = %s"
_SELECT_INBOX = (
    f"SELECT {EVENT_COLUMNS} FROM agentnb.inbox "
    "WHERE session = %s AND seq > %s AND seq <= %s ORDER BY seq"
)
# An inbox row's blobs and their references (the lock as for the append's, taken first).
_INBOX_BLOBS = (
    "WITH b AS (INSERT INTO agentnb.blobs (digest, data) SELECT * FROM "
    "unnest(%(digests)s::text[], %(data)s::bytea[]) ON CONFLICT DO NOTHING) "
    "INSERT INTO agentnb.blob_refs (session, digest) SELECT %(sid)s, d FROM "
    "unnest(%(digests)s::text[]) AS d ON CONFLICT DO NOTHING"
)


class PostgresInbox(PostgresCore):
    """``Inbox``'s hooks (an ``update`` command changes the catalogue as it is accepted)."""

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
                        c.execute("SELECT pg_advisory_xact_lock_shared(%s)", (DELETE_LOCK,))
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
                    row = _rows.encode(event, seq, collect(blobs))
                    if blobs:
                        c.execute(
                            _INBOX_BLOBS,
                            {"sid": sid, "digests": list(blobs), "data": list(blobs.values())},
                        )
                    c.execute(_INBOX_INSERT, (sid, *row, dedupe_key, digest, f"i:{sid}:{seq}"))
                    if update is not None:
                        set_meta(c, key, sid, *update, now)
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
                    f"SELECT {EVENT_COLUMNS}, digest FROM agentnb.inbox "
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
