"""The store contract of export watermarks."""

from __future__ import annotations

import pytest

from agentnb.errors import (
    InvalidInput,
)
from agentnb.ids import SessionKey
from agentnb.stores.base import (
    SessionStore,
)
from agentnb.testing.store_contract.support import (
    ContractBase,
    command,
    session_key,
)

__all__ = ["WatermarksContract"]


class WatermarksContract(ContractBase):
    """Export watermarks."""

    # -- watermarks ---------------------------------------------------------------------------

    def test_watermark_starts_at_zero(self, store: SessionStore, key: SessionKey) -> None:
        """A sink that never advanced has watermark 0."""
        assert store.watermark(key, "parquet") == 0

    def test_watermark_is_monotonic(self, store: SessionStore, key: SessionKey) -> None:
        """Advancing backwards is a no-op that returns the current value."""
        self.fill(store, key, 5)
        assert store.advance_watermark(key, "sink", 3) == 3
        assert store.advance_watermark(key, "sink", 1) == 3
        assert store.watermark(key, "sink") == 3
        assert store.advance_watermark(key, "sink", 5) == 5
        assert store.advance_watermark(key, "sink", 5) == 5

    def test_watermark_past_head_is_invalid_input(
        self, store: SessionStore, key: SessionKey
    ) -> None:
        """A watermark beyond the committed head (or negative) raises InvalidInput."""
        self.fill(store, key, 2)
        with pytest.raises(InvalidInput):
            store.advance_watermark(key, "sink", 3)
        with pytest.raises(InvalidInput):
            store.advance_watermark(key, "sink", -1)
        assert store.watermark(key, "sink") == 0

    def test_watermarks_are_per_sink_and_session(
        self, store: SessionStore, key: SessionKey
    ) -> None:
        """Each (session, sink name) pair has its own watermark."""
        other = session_key("other")
        store.create_session(other)
        self.fill(store, key, 4)
        self.fill(store, other, 4)
        store.advance_watermark(key, "a", 4)
        store.advance_watermark(key, "b", 2)
        assert store.watermark(key, "a") == 4
        assert store.watermark(key, "b") == 2
        assert store.watermark(other, "a") == 0
        assert store.watermarks(key) == {"a": 4, "b": 2}
        assert store.watermarks(other) == {}

    def test_inbox_keys_list_the_keyed_records(self, store: SessionStore, key: SessionKey) -> None:
        """inbox_keys gives (seq, dedupe key, fingerprint) of the records accepted under a
        key, in a seq range, and none of the others (what a backup carries over)."""
        store.inbox_append(key, command("a"), dedupe_key="k1", fingerprint="f1")
        store.inbox_append(key, command("b"))
        store.inbox_append(key, command("c"), dedupe_key="k3", fingerprint="f3")
        assert store.inbox_keys(key, 0, 10) == [(1, "k1", "f1"), (3, "k3", "f3")]
        assert store.inbox_keys(key, 1, 1) == []
        assert store.inbox_keys(key, 2, 5) == [(3, "k3", "f3")]
