"""Work claims on a PostgreSQL store: the pending-work mark (``sessions.pending_since``, a
partial index) claimed with ``FOR UPDATE SKIP LOCKED``; notifications wake the watchers.
"""

from __future__ import annotations

import logging

from agentnb.ids import SessionKey
from agentnb.stores.base import (
    Lease,
    leases_of,
)
from agentnb.stores.postgres.core import NOW
from agentnb.stores.postgres.listener import PostgresListening

__all__ = ["PostgresWorkClaims"]

log = logging.getLogger("agentnb.stores.postgres")


_CLAIM = (
    "WITH c AS (SELECT id FROM agentnb.sessions WHERE pending_since IS NOT NULL "
    "AND (lease_owner IS NULL OR lease_expires <= " + NOW + ") "
    "AND (%(agent_id)s::text IS NULL OR agent_id = %(agent_id)s) "
    "AND (%(namespace)s::text IS NULL OR namespace = %(namespace)s) "
    "ORDER BY pending_since, id LIMIT %(limit)s FOR UPDATE SKIP LOCKED) "
    "UPDATE agentnb.sessions AS s SET lease_owner = %(owner)s, lease_epoch = s.lease_epoch + 1,"
    " lease_expires = " + NOW + " + %(ttl)s FROM c WHERE s.id = c.id "
    "RETURNING s.namespace, s.user_id, s.agent_id, s.session_id, s.lease_epoch, "
    "s.lease_expires, s.id, s.deleted_at"
)
_HELD = (
    "SELECT namespace, user_id, agent_id, session_id, lease_owner, lease_epoch, lease_expires "
    "FROM agentnb.sessions WHERE pending_since IS NOT NULL AND lease_owner IS NOT NULL "
    "AND lease_expires > " + NOW + " "
    "AND (%(agent_id)s::text IS NULL OR agent_id = %(agent_id)s) "
    "AND (%(namespace)s::text IS NULL OR namespace = %(namespace)s) "
    "ORDER BY pending_since, id LIMIT %(limit)s"
)
_SETTLE = (
    "UPDATE agentnb.sessions SET pending_since = NULL{release} WHERE id = %(sid)s "
    "AND inbox_head = %(seen)s AND lease_owner = %(owner)s AND lease_epoch = %(epoch)s "
    "AND lease_expires > " + NOW
)
_SETTLES = {
    False: _SETTLE.format(release=""),
    True: _SETTLE.format(release=", lease_owner = NULL, lease_expires = 0"),
}
"""Clear the mark; and release the lease too (the row ``release_lease`` writes)."""


class PostgresWorkClaims(PostgresListening):
    """``WorkClaims``'s hooks: claimers running at once get disjoint sessions (``FOR UPDATE
    SKIP LOCKED``); the watchers hear every accepted command through the listener, and after
    each of its (re)connects, when commands accepted meanwhile went unheard (with the
    session's key when this store has used that session, else None)."""

    def _claim_pending(
        self, owner: str, ttl: float, limit: int, agent_id: str | None, namespace: str | None
    ) -> list[Lease]:
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

    def _held_pending(self, limit: int, agent_id: str | None, namespace: str | None) -> list[Lease]:
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

    def _settle_pending(self, lease: Lease, inbox_seen: int, release: bool) -> bool:
        sid = self._sid(lease.key)
        cur = self._write(
            lambda c: c.execute(
                _SETTLES[release],
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

    def _watch_pending(self) -> None:
        self._listen()
