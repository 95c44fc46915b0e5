"""The execution lease: one live holder per session; its epoch fences execution commits.

``acquire_lease / renew_lease / release_lease``
    At most one live lease per session. A live lease cannot be taken by another owner
    (``LeaseHeld``); once expired it can, with ``epoch + 1``. Renew with a stale epoch,
    another owner, or after expiry raises ``Fenced``; so does release once another holder
    took the lease. Releasing twice, or after expiry while nobody took over, is harmless.
"""

from __future__ import annotations

from abc import abstractmethod

from agentnb.ids import SessionKey, check_id
from agentnb.stores.core import StoreCore, guarded
from agentnb.stores.decisions import (
    check_key,
    check_lease,
    check_ttl,
)
from agentnb.stores.values import (
    Lease,
    LeaseRow,
)

__all__ = ["Leases"]


class Leases(StoreCore):
    """Taking, renewing and releasing the execution lease of a session."""

    @guarded
    def acquire_lease(self, key: SessionKey, owner: str, ttl: float = 10.0) -> Lease:
        """Take (or extend, for the same owner) the execution lease; ``LeaseHeld`` if taken."""
        key = check_key(key)
        check_id(owner, "owner")
        return self._acquire_lease(key, owner, check_ttl(ttl), self.clock.now())

    @guarded
    def renew_lease(self, lease: Lease, ttl: float = 10.0) -> Lease:
        """Extend a live lease; ``Fenced`` if it is stale or expired."""
        check_lease(lease)
        return self._renew_lease(lease, check_ttl(ttl), self.clock.now())

    @guarded
    def release_lease(self, lease: Lease) -> None:
        """Give the lease up now so another holder need not wait; ``Fenced`` if stale."""
        check_lease(lease)
        self._release_lease(lease, self.clock.now())

    @guarded
    def current_lease(self, key: SessionKey) -> Lease | None:
        """The live lease, or None when nobody holds one."""
        key = check_key(key)
        row = self._lease_row(key)
        now = self.clock.now()
        if row is None or row.owner is None or row.expires_at <= now:
            return None
        return Lease(key, row.owner, row.epoch, row.expires_at)

    # -- what a backend implements -----------------------------------------------------------

    @abstractmethod
    def _lease_row(self, key: SessionKey) -> LeaseRow | None: ...

    @abstractmethod
    def _acquire_lease(self, key: SessionKey, owner: str, ttl: float, now: float) -> Lease: ...

    @abstractmethod
    def _renew_lease(self, lease: Lease, ttl: float, now: float) -> Lease: ...

    @abstractmethod
    def _release_lease(self, lease: Lease, now: float) -> None: ...
