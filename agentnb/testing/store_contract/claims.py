"""The store contract of work claims: the index of pending work that workers claim from."""

from __future__ import annotations

import pytest

from agentnb.errors import (
    Fenced,
    InvalidInput,
)
from agentnb.ids import FakeClock
from agentnb.log import Inbox
from agentnb.stores.base import (
    SessionStore,
)
from agentnb.testing.store_contract.support import (
    ContractBase,
    command,
    session_key,
    step,
)

__all__ = ["WorkClaimsContract"]


class WorkClaimsContract(ContractBase):
    """Work claims: the pending-work index worker processes claim sessions from."""

    def test_claimers_take_disjoint_sessions_with_accepted_work(self, store: SessionStore) -> None:
        """Only sessions with accepted commands are claimed; two claimers never share one."""
        claims = self._claims(store)
        keys = [session_key(f"s{i}") for i in range(6)]
        for k in keys:
            store.create_session(k)
        for k in keys[:4]:
            store.inbox_append(k, command("go"))
        first = claims.claim_pending("w1", limit=3)
        second = claims.claim_pending("w2", limit=3)
        claimed = [lease.key for lease in first + second]
        assert sorted(claimed, key=str) == sorted(keys[:4], key=str)
        assert all(lease.epoch == 1 for lease in first + second)
        assert claims.claim_pending("w3", limit=3) == []
        for lease in first:
            assert store.current_lease(lease.key) == lease

    def test_settle_keeps_work_that_arrived_meanwhile(
        self, store: SessionStore, clock: FakeClock
    ) -> None:
        """settle_pending clears the mark only if no command arrived since the holder read
        the inbox; a crashed holder's session is claimable again after its lease expires,
        and the crashed holder is fenced."""
        claims = self._claims(store)
        key = session_key("s1")
        store.create_session(key)
        store.inbox_append(key, command("a"))
        (lease,) = claims.claim_pending("w1", ttl=5)
        store.inbox_append(key, command("b"))
        assert claims.settle_pending(lease, inbox_seen=1) is False
        assert claims.settle_pending(lease, inbox_seen=2) is True
        assert claims.claim_pending("w2") == []
        store.inbox_append(key, command("c"))
        assert claims.claim_pending("w2") == []  # its holder lives
        clock.advance(5)
        (again,) = claims.claim_pending("w2")
        assert again.epoch == lease.epoch + 1
        with pytest.raises(Fenced):
            store.append(key, [step()], expected_seq=0, batch_id="b", fence=lease)

    def test_settle_can_release_the_lease_in_the_same_statement(self, store: SessionStore) -> None:
        """With ``release``, a settled session's lease is released with its mark; a session
        that got a command meanwhile keeps both, so its holder looks again under it."""
        claims = self._claims(store)
        key = session_key("s1")
        store.create_session(key)
        store.inbox_append(key, command("a"))
        (lease,) = claims.claim_pending("w1")
        store.inbox_append(key, command("b"))
        assert claims.settle_pending(lease, inbox_seen=1, release=True) is False
        assert store.current_lease(key) == lease
        assert claims.claim_pending("w2") == []
        assert claims.settle_pending(lease, inbox_seen=2, release=True) is True
        assert store.current_lease(key) is None
        store.release_lease(lease)  # releasing again is harmless
        store.inbox_append(key, command("c"))
        (again,) = claims.claim_pending("w2")
        assert again.epoch == lease.epoch + 1

    def test_held_pending_lists_the_live_leases_of_sessions_with_work(
        self, store: SessionStore, clock: FakeClock
    ) -> None:
        """held_pending gives the live lease of each session with queued work (what a
        claimer checks for dead holders); idle, free and expired ones are not listed."""
        claims = self._claims(store)
        busy, idle, free = session_key("busy"), session_key("idle"), session_key("free")
        for k in (busy, idle, free):
            store.create_session(k)
        store.inbox_append(busy, command("a"))
        store.inbox_append(free, command("b"))
        (lease,) = claims.claim_pending("w1", ttl=5, limit=1)
        assert lease.key == busy
        store.acquire_lease(idle, "w2")
        assert claims.held_pending() == [lease]
        clock.advance(5)
        assert claims.held_pending() == []

    def test_deleted_and_updated_sessions_are_not_claimed(self, store: SessionStore) -> None:
        """A deleted session leaves the index; an ``update`` command (carried out by the
        store as it is accepted) gives no worker anything to do."""
        claims = self._claims(store)
        gone, renamed = session_key("gone"), session_key("renamed")
        for k in (gone, renamed):
            store.create_session(k)
        store.inbox_append(gone, command("a"))
        store.delete_session(gone, by="test")
        Inbox(store, renamed).accept("update", data={"title": "Trip"})
        assert claims.claim_pending("w1", limit=5) == []

    def test_bad_claims_are_invalid_input(self, store: SessionStore) -> None:
        """A claim's owner, ttl and limit are checked before anything is written."""
        claims = self._claims(store)
        for bad in ({"owner": ""}, {"ttl": -1}, {"limit": 0}, {"limit": True}):
            args = {"owner": "w1", **bad}
            with pytest.raises(InvalidInput):
                claims.claim_pending(args.pop("owner"), **args)

    def test_bad_held_pending_queries_are_invalid_input(self, store: SessionStore) -> None:
        """``held_pending`` checks its limit, agent id and namespace as a claim does."""
        claims = self._claims(store)
        for bad in ({"limit": 0}, {"limit": 1001}, {"agent_id": ""}, {"namespace": 5}):
            with pytest.raises(InvalidInput):
                claims.held_pending(**bad)
