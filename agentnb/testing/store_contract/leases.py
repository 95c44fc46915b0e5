"""The store contract of the execution lease."""

from __future__ import annotations

from typing import Any

import pytest

from agentnb.errors import (
    Fenced,
    InvalidInput,
    LeaseHeld,
)
from agentnb.ids import FakeClock, SessionKey
from agentnb.stores.base import (
    Lease,
    SessionStore,
)
from agentnb.testing.store_contract.support import (
    ContractBase,
    session_key,
    step,
)

__all__ = ["LeasesContract"]


class LeasesContract(ContractBase):
    """The execution lease."""

    # -- leases -------------------------------------------------------------------------------

    def test_live_lease_cannot_be_taken_by_another_owner(
        self, store: SessionStore, key: SessionKey
    ) -> None:
        """While a lease is live, another owner's acquire raises LeaseHeld."""
        lease = store.acquire_lease(key, "a", ttl=10)
        assert lease.epoch == 1
        with pytest.raises(LeaseHeld):
            store.acquire_lease(key, "b", ttl=10)
        assert store.current_lease(key) == lease

    def test_same_owner_reacquire_keeps_epoch(
        self, store: SessionStore, key: SessionKey, clock: FakeClock
    ) -> None:
        """The holder re-acquiring its live lease keeps the epoch and extends the expiry."""
        first = store.acquire_lease(key, "a", ttl=10)
        clock.advance(5)
        again = store.acquire_lease(key, "a", ttl=10)
        assert again.epoch == first.epoch
        assert again.expires_at > first.expires_at

    def test_expired_lease_passes_to_another_owner_with_next_epoch(
        self, store: SessionStore, key: SessionKey, clock: FakeClock
    ) -> None:
        """Once a lease expires another owner takes it with epoch + 1."""
        old = store.acquire_lease(key, "a", ttl=10)
        clock.advance(10.001)
        assert store.current_lease(key) is None
        new = store.acquire_lease(key, "b", ttl=10)
        assert (new.owner, new.epoch) == ("b", old.epoch + 1)
        assert store.current_lease(key) == new

    def test_stale_epoch_cannot_commit_or_renew(
        self, store: SessionStore, key: SessionKey, clock: FakeClock
    ) -> None:
        """A paused old holder's fenced append and renew raise Fenced and write nothing."""
        old = store.acquire_lease(key, "a", ttl=10)
        store.append(key, [step(1)], expected_seq=0, batch_id="b1", fence=old)
        clock.advance(11)
        new = store.acquire_lease(key, "b", ttl=10)
        with pytest.raises(Fenced):
            store.append(key, [step(2)], expected_seq=1, batch_id="b2", fence=old)
        with pytest.raises(Fenced):
            store.renew_lease(old)
        assert store.head(key) == 1
        assert store.current_lease(key) == new
        store.append(key, [step(2)], expected_seq=1, batch_id="b2", fence=new)
        assert store.head(key) == 2

    def test_expired_lease_cannot_commit_even_if_nobody_took_it(
        self, store: SessionStore, key: SessionKey, clock: FakeClock
    ) -> None:
        """A fenced append or renew after the lease expired raises Fenced."""
        lease = store.acquire_lease(key, "a", ttl=10)
        clock.advance(10)
        with pytest.raises(Fenced):
            store.append(key, [step(1)], expected_seq=0, batch_id="b1", fence=lease)
        with pytest.raises(Fenced):
            store.renew_lease(lease)
        assert store.head(key) == 0

    def test_renew_extends_a_live_lease(
        self, store: SessionStore, key: SessionKey, clock: FakeClock
    ) -> None:
        """Renewing a live lease keeps its epoch and moves its expiry to now + ttl."""
        lease = store.acquire_lease(key, "a", ttl=10)
        clock.advance(8)
        renewed = store.renew_lease(lease, ttl=10)
        assert renewed.epoch == lease.epoch
        assert renewed.expires_at == clock.now() + 10
        clock.advance(8)  # past the first expiry, within the renewed one
        store.append(key, [step(1)], expected_seq=0, batch_id="b", fence=renewed)
        with pytest.raises(LeaseHeld):
            store.acquire_lease(key, "b")

    def test_renew_by_another_owner_is_fenced(self, store: SessionStore, key: SessionKey) -> None:
        """A lease record naming another owner cannot renew the live lease."""
        lease = store.acquire_lease(key, "a", ttl=10)
        forged = Lease(key, "b", lease.epoch, lease.expires_at)
        with pytest.raises(Fenced):
            store.renew_lease(forged)
        with pytest.raises(Fenced):
            store.append(key, [step()], expected_seq=0, batch_id="b", fence=forged)

    def test_release_lets_another_owner_acquire_at_once(
        self, store: SessionStore, key: SessionKey
    ) -> None:
        """After release another owner acquires immediately, with the next epoch."""
        lease = store.acquire_lease(key, "a", ttl=10)
        store.release_lease(lease)
        assert store.current_lease(key) is None
        other = store.acquire_lease(key, "b", ttl=10)
        assert other.epoch == lease.epoch + 1
        with pytest.raises(Fenced):
            store.append(key, [step()], expected_seq=0, batch_id="b", fence=lease)

    def test_double_release_is_harmless(self, store: SessionStore, key: SessionKey) -> None:
        """Releasing the same lease twice does not raise and leaves no lease."""
        lease = store.acquire_lease(key, "a", ttl=10)
        store.release_lease(lease)
        store.release_lease(lease)
        assert store.current_lease(key) is None

    def test_release_by_stale_epoch_is_fenced(
        self, store: SessionStore, key: SessionKey, clock: FakeClock
    ) -> None:
        """Releasing an old epoch after another holder took over raises Fenced and keeps theirs."""
        old = store.acquire_lease(key, "a", ttl=10)
        clock.advance(11)
        new = store.acquire_lease(key, "b", ttl=10)
        with pytest.raises(Fenced):
            store.release_lease(old)
        assert store.current_lease(key) == new

    def test_unfenced_append_refused_while_lease_is_live(
        self, store: SessionStore, key: SessionKey, clock: FakeClock
    ) -> None:
        """An append without a fence raises LeaseHeld while someone holds a live lease."""
        store.acquire_lease(key, "a", ttl=10)
        with pytest.raises(LeaseHeld):
            store.append(key, [step()], expected_seq=0, batch_id="b")
        assert store.head(key) == 0
        clock.advance(10)
        store.append(key, [step()], expected_seq=0, batch_id="b")
        assert store.head(key) == 1

    def test_fence_of_another_session_is_invalid_input(
        self, store: SessionStore, key: SessionKey
    ) -> None:
        """A lease of session A used to fence an append to session B raises InvalidInput."""
        other = session_key("other")
        store.create_session(other)
        lease = store.acquire_lease(other, "a", ttl=10)
        with pytest.raises(InvalidInput):
            store.append(key, [step()], expected_seq=0, batch_id="b", fence=lease)
        assert store.head(key) == 0

    @pytest.mark.parametrize("ttl", [0, -1, True, "10", 86_401])
    def test_bad_ttl_is_invalid_input(self, store: SessionStore, key: SessionKey, ttl: Any) -> None:
        """A ttl that is not a positive number of seconds (at most a day) raises InvalidInput."""
        with pytest.raises(InvalidInput):
            store.acquire_lease(key, "a", ttl=ttl)
        assert store.current_lease(key) is None

    def test_leases_are_per_session(self, store: SessionStore, key: SessionKey) -> None:
        """A lease on one session does not block another session."""
        other = session_key("other")
        store.create_session(other)
        store.acquire_lease(key, "a")
        assert store.acquire_lease(other, "b").epoch == 1
        store.append(
            other, [step()], expected_seq=0, batch_id="b", fence=store.current_lease(other)
        )
