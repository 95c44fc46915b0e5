"""The execution leases of a PostgreSQL store, decided on the database's clock."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from agentnb.ids import SessionKey
from agentnb.stores.base import (
    Lease,
    LeaseRow,
    check_fence,
    decide_acquire,
    decide_release,
)
from agentnb.stores.postgres.connections import T
from agentnb.stores.postgres.core import LOCK_LEASE, PostgresCore
from agentnb.stores.postgres.driver import (
    psycopg,
)

__all__ = ["PostgresLeases"]

log = logging.getLogger("agentnb.stores.postgres")


_SET_LEASE = (
    "UPDATE agentnb.sessions SET lease_owner = %s, lease_epoch = %s, lease_expires = %s "
    "WHERE id = %s"
)
# Claim sessions with accepted work and no live lease: the next epoch, like decide_acquire
# for a lease nobody holds. SKIP LOCKED lets claimers take disjoint sessions.


class PostgresLeases(PostgresCore):
    """``Leases``'s hooks."""

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
        decide: Callable[[LeaseRow, float], tuple[T, tuple[str | None, int, float] | None]],
        doing: str,
    ) -> T:
        """Lock the lease row, ``decide`` from it on the lease clock, write what it returns.

        ``decide`` returns (result, new lease row or None); read, decision and write share
        one transaction holding the row lock.
        """
        sid = self._sid(key)

        def run(c: psycopg.Connection[Any]) -> T:
            with c.transaction():
                sent = time.time()
                row = c.execute(LOCK_LEASE, {"sid": sid, "now": self._now(now)}).fetchone()
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
