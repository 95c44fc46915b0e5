"""The inbox of an SQLite store: commands accepted in one short write transaction each."""

from __future__ import annotations

from agentnb.errors import IdempotencyConflict, StorageError
from agentnb.events import Event
from agentnb.ids import SessionKey
from agentnb.stores import _rows
from agentnb.stores.base import (
    check_archived,
    does_work,
    meta_update,
    submit_delta,
    submit_text,
)
from agentnb.stores.sqlite.catalogue import SQLiteCatalogue
from agentnb.stores.sqlite.connections import Connection

__all__ = ["SQLiteInbox"]


_INSERT_INBOX = (
    f"INSERT INTO inbox (session, {_rows.COLUMNS}, dedupe_key, digest) "
    "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
)


class SQLiteInbox(SQLiteCatalogue):
    """``Inbox``'s hooks (an ``update`` command changes the catalogue as it is accepted)."""

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
        c: Connection,
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

    def _inbox_keys(self, key: SessionKey, after: int, through: int) -> list[tuple[int, str, str]]:
        conn = self._conn()
        rows = conn.execute(
            "SELECT seq, dedupe_key, digest FROM inbox WHERE session=? AND seq>? AND seq<=? "
            "AND dedupe_key IS NOT NULL ORDER BY seq",
            (self._sid(key, conn), after, through),
        ).fetchall()
        return [(int(seq), str(k), str(d or "")) for seq, k, d in rows]
