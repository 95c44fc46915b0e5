"""The store contract of durability: what a store object opened afresh on the same data keeps."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentnb.events import BLOB_THRESHOLD, Event
from agentnb.ids import FakeClock
from agentnb.stores.base import SessionStore
from agentnb.testing.store_contract.support import ContractBase, command, session_key, step

__all__ = ["DurabilityContract"]


class DurabilityContract(ContractBase):
    """Closing a store and opening another object on its data (``make_peer``) loses nothing."""

    def test_reopen_keeps_everything(
        self, store: SessionStore, tmp_path: Path, clock: FakeClock
    ) -> None:
        """Closing and reopening keeps the catalogue, log, inbox, lease, watermark, blobs and
        secret; a retried batch and a re-sent command are still recognised."""
        key = session_key()
        store.create_session(key)
        big = Event.create("acme/big", {"text": "y" * (BLOB_THRESHOLD + 10)})
        batch = [step(1), big]
        events = store.append(key, batch, expected_seq=0, batch_id="b1")
        accepted, _ = store.inbox_append(key, command("a"), dedupe_key="k", fingerprint="f")
        lease = store.acquire_lease(key, "owner-a", ttl=60)
        store.advance_watermark(key, "sink", 2)
        blob = store.put_blob(b"bytes")
        secret = store.secret()
        record = store.get_session(key)  # with the metadata those commits changed
        store.close()
        again = self.make_peer(tmp_path, clock=clock)
        if again is None:
            pytest.skip("this backend's data lives in one store object")
        try:
            assert again.get_session(key) == record
            assert again.read_after(key, 0, 10) == events
            assert again.head(key) == 2
            # The batch id is remembered: a retried batch is still recognised after reopening.
            assert again.append(key, batch, expected_seq=0, batch_id="b1", fence=lease) == events
            assert again.inbox_read_after(key, 0, 10) == [accepted]
            assert again.inbox_append(key, command("a"), dedupe_key="k", fingerprint="f") == (
                accepted,
                False,
            )
            assert again.current_lease(key) == lease
            assert again.watermark(key, "sink") == 2
            assert again.get_blob(blob) == b"bytes"
            assert again.secret() == secret
        finally:
            again.close()
