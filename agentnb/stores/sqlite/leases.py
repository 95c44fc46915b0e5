"""The execution leases of an SQLite store: a session row's owner, epoch and expiry."""

from __future__ import annotations

import sqlite3

from agentnb.ids import SessionKey
from agentnb.stores.base import (
    Lease,
    LeaseRow,
    check_fence,
    decide_acquire,
    decide_release,
)
from agentnb.stores.sqlite.core import SQLiteCore

__all__ = ["SQLiteLeases"]


class SQLiteLeases(SQLiteCore):
    """``Leases``'s hooks."""

    def _lease_row(self, key: SessionKey) -> LeaseRow | None:
        conn = self._conn()
        return self._lease_of(conn, self._sid(key, conn), key)

    def _set_lease(
        self, c: sqlite3.Connection, sid: int, owner: str | None, epoch: int, expires: float
    ) -> None:
        c.execute(
            "UPDATE sessions SET lease_owner=?, lease_epoch=?, lease_expires=? WHERE id=?",
            (owner, epoch, expires, sid),
        )

    def _acquire_lease(self, key: SessionKey, owner: str, ttl: float, now: float) -> Lease:
        sid = self._sid(key)
        with self._write() as c:
            lease = decide_acquire(key, self._lease_of(c, sid, key), owner, ttl, now)
            self._set_lease(c, sid, owner, lease.epoch, lease.expires_at)
        return lease

    def _renew_lease(self, lease: Lease, ttl: float, now: float) -> Lease:
        sid = self._sid(lease.key)
        with self._write() as c:
            check_fence(lease.key, self._lease_of(c, sid, lease.key), lease, now)
            self._set_lease(c, sid, lease.owner, lease.epoch, now + ttl)
        return Lease(lease.key, lease.owner, lease.epoch, now + ttl)

    def _release_lease(self, lease: Lease, now: float) -> None:
        sid = self._sid(lease.key)
        with self._write() as c:
            if decide_release(lease.key, self._lease_of(c, sid, lease.key), lease):
                self._set_lease(c, sid, None, lease.epoch, 0.0)
