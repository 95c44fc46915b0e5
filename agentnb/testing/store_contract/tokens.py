"""The store contract of the service's token records."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentnb.errors import (
    InvalidInput,
)
from agentnb.ids import FakeClock
from agentnb.stores.base import (
    SessionStore,
)
from agentnb.testing.store_contract.support import (
    DIGEST_A,
    DIGEST_B,
    ContractBase,
)

__all__ = ["TokensContract"]


class TokensContract(ContractBase):
    """The service's token records."""

    # -- access tokens ------------------------------------------------------------------------

    def test_token_round_trips_without_the_token(
        self, store: SessionStore, clock: FakeClock
    ) -> None:
        """add_token keeps user, label, digest and the creation time; get_token reads it."""
        added = store.add_token("tok_a", "alice", DIGEST_A, label="laptop")
        assert added.created_at == clock.now()
        found = store.get_token("tok_a")
        assert found == added
        assert (found.user_id, found.label, found.digest) == ("alice", "laptop", DIGEST_A)
        assert found.last_used_at is None
        assert found.revoked_at is None
        assert found.usable(clock.now())
        assert store.get_token("tok_missing") is None

    def test_token_id_is_never_reused(self, store: SessionStore) -> None:
        """A second add_token with an id in use raises InvalidInput and keeps the first."""
        store.add_token("tok_a", "alice", DIGEST_A)
        with pytest.raises(InvalidInput, match="in use"):
            store.add_token("tok_a", "bob", DIGEST_B)
        found = store.get_token("tok_a")
        assert found is not None
        assert found.user_id == "alice"

    def test_bad_token_fields_are_invalid_input(self, store: SessionStore) -> None:
        """A digest that is not SHA-256 hex, a bad id or a long label writes nothing."""
        for bad in ("", "xyz", DIGEST_A.upper(), DIGEST_A[:-1]):
            with pytest.raises(InvalidInput):
                store.add_token("tok_a", "alice", bad)
        with pytest.raises(InvalidInput):
            store.add_token("", "alice", DIGEST_A)
        with pytest.raises(InvalidInput):
            store.add_token("tok_a", "alice", DIGEST_A, label="x" * 10_000)
        with pytest.raises(InvalidInput):
            store.add_token("tok_a", "alice", DIGEST_A, expires_at=float("nan"))
        assert store.list_tokens() == []

    def test_list_tokens_by_user_oldest_first(self, store: SessionStore, clock: FakeClock) -> None:
        """list_tokens lists every record (of one user if asked) by creation time."""
        store.add_token("tok_b", "alice", DIGEST_A)
        clock.advance(1)
        store.add_token("tok_a", "bob", DIGEST_B)
        clock.advance(1)
        store.add_token("tok_c", "alice", DIGEST_B, parent="tok_b", expires_at=clock.now() + 9)
        assert [t.token_id for t in store.list_tokens()] == ["tok_b", "tok_a", "tok_c"]
        assert [t.token_id for t in store.list_tokens("alice")] == ["tok_b", "tok_c"]
        assert store.list_tokens("carol") == []

    def test_touch_token_moves_last_used_forward_only(
        self, store: SessionStore, clock: FakeClock
    ) -> None:
        """touch_token records the time of use; an unknown id changes nothing."""
        store.add_token("tok_a", "alice", DIGEST_A)
        clock.advance(5)
        store.touch_token("tok_a")
        found = store.get_token("tok_a")
        assert found is not None
        assert found.last_used_at == clock.now()
        store.touch_token("tok_missing")

    def test_revoke_token_revokes_its_sign_ins(self, store: SessionStore, clock: FakeClock) -> None:
        """revoke_token revokes the token and the sign-ins made with it, not others."""
        store.add_token("tok_a", "alice", DIGEST_A)
        store.add_token("tok_s", "alice", DIGEST_B, parent="tok_a", expires_at=clock.now() + 60)
        store.add_token("tok_o", "alice", DIGEST_B)
        clock.advance(2)
        revoked = store.revoke_token("tok_a")
        assert revoked.revoked_at == clock.now()
        assert not revoked.usable(clock.now())
        sign_in = store.get_token("tok_s")
        assert sign_in is not None
        assert sign_in.revoked_at == clock.now()
        other = store.get_token("tok_o")
        assert other is not None
        assert other.usable(clock.now())
        clock.advance(2)
        again = store.revoke_token("tok_a")
        assert again.revoked_at == revoked.revoked_at  # the first time is kept

    def test_revoke_unknown_token_is_invalid_input(self, store: SessionStore) -> None:
        """revoke_token of an id that was never issued raises InvalidInput."""
        with pytest.raises(InvalidInput, match="no token"):
            store.revoke_token("tok_missing")

    def test_sign_in_expires(self, store: SessionStore, clock: FakeClock) -> None:
        """A token with expires_at is usable before that time and not after."""
        added = store.add_token("tok_s", "alice", DIGEST_A, expires_at=clock.now() + 10)
        assert added.usable(clock.now())
        clock.advance(10)
        assert not added.usable(clock.now())

    def test_tokens_are_seen_by_another_store_object(
        self, tmp_path: Path, store: SessionStore, clock: FakeClock
    ) -> None:
        """A token added or revoked through one store object is what another one reads."""
        peer = self.make_peer(tmp_path, clock=clock)
        if peer is None:
            pytest.skip("this backend's data lives in one object")
        try:
            store.add_token("tok_a", "alice", DIGEST_A)
            found = peer.get_token("tok_a")
            assert found is not None
            assert found.digest == DIGEST_A
            peer.revoke_token("tok_a")
            again = store.get_token("tok_a")
            assert again is not None
            assert again.revoked_at is not None
        finally:
            peer.close()
