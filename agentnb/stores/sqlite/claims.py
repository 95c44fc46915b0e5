"""Work claims on an SQLite store: the pending-work mark (``pending_since``, a partial index)
and the watcher thread that hears other processes' commands.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
import weakref

from agentnb.ids import SessionKey
from agentnb.stores.base import (
    Lease,
    leases_of,
)
from agentnb.stores.sqlite.leases import SQLiteLeases

__all__ = ["PENDING_POLL", "SQLiteWorkClaims"]

log = logging.getLogger("agentnb.stores.sqlite")


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


class SQLiteWorkClaims(SQLiteLeases):
    """``WorkClaims``'s hooks over the pending-work mark.

    An accepted command marks its session (``pending_since``, a partial index), so the worker
    processes sharing this file claim sessions with work without scanning every session:
    oldest waiting first, in one write transaction (claimers of other processes get disjoint
    sessions). Other processes' commands are heard by a watcher thread that looks every
    ``PENDING_POLL`` seconds at SQLite's ``data_version`` (a counter in shared memory), and
    reads the index only when it moved.
    """

    def _claim_pending(
        self, owner: str, ttl: float, limit: int, agent_id: str | None, namespace: str | None
    ) -> list[Lease]:
        now = self.clock.now()
        params = (now, agent_id, namespace, limit)
        # A read first: the write lock, which every commit needs, is taken only when
        # there is something to claim.
        if not self._conn().execute(_CLAIMABLE, params).fetchall():
            return []
        leases = []
        with self._write() as c:
            for sid, ns, user, agent, session, epoch in c.execute(_CLAIMABLE, params).fetchall():
                lease = Lease(SessionKey(ns, user, agent, session), owner, epoch + 1, now + ttl)
                self._set_lease(c, sid, owner, lease.epoch, lease.expires_at)
                leases.append(lease)
        for lease in leases:  # resolved here: the claimer's first look needs no lookup
            self._ids[lease.key] = self._ids.get(lease.key) or self._sid(lease.key)
        return leases

    def _held_pending(self, limit: int, agent_id: str | None, namespace: str | None) -> list[Lease]:
        rows = (
            self._conn().execute(_HELD, (self.clock.now(), agent_id, namespace, limit)).fetchall()
        )
        return leases_of(rows)

    def _settle_pending(self, lease: Lease, inbox_seen: int, release: bool) -> bool:
        sid = self._sid(lease.key)
        with self._write() as c:
            return (
                c.execute(
                    _SETTLES[release],
                    (sid, inbox_seen, lease.owner, lease.epoch, self.clock.now()),
                ).rowcount
                == 1
            )

    def _watch_pending(self) -> None:
        # Under the watchers' lock: one watcher thread per store object.
        if self._pending_thread is None or not self._pending_thread.is_alive():
            self._pending_thread = threading.Thread(
                target=_watch,
                args=(weakref.ref(self),),
                daemon=True,
                name="agentnb-sqlite-pending",
            )
            self._pending_thread.start()

    def _claimable(self, conn: sqlite3.Connection, version: int) -> tuple[int, bool]:
        """(data_version now, whether it moved and a session is claimable)."""
        now = int(conn.execute("PRAGMA data_version").fetchone()[0])
        if now == version:
            return now, False
        found = conn.execute(_CLAIMABLE, (self.clock.now(), None, None, 1)).fetchall()
        return now, bool(found)


PENDING_POLL = 0.02
"""Seconds between two looks of ``SQLiteStore.watch_pending``'s watcher at the file."""


def _watch(ref: weakref.ref[SQLiteWorkClaims]) -> None:
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
