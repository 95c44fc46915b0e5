"""The store contract of blobs, snapshots and the store's secret."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from agentnb.errors import (
    Corrupt,
    IdempotencyConflict,
    InvalidInput,
)
from agentnb.events import (
    BLOB_THRESHOLD,
    Event,
    FrozenDict,
    canonical_json,
)
from agentnb.ids import SessionKey
from agentnb.stores._rows import event_anchor, seal_snapshot
from agentnb.stores.base import (
    SessionStore,
)
from agentnb.testing.store_contract.support import (
    ContractBase,
    command,
    run_threads,
    session_key,
    step,
    text_digest,
)

__all__ = ["BlobsContract"]


class BlobsContract(ContractBase):
    """Blobs, snapshots and the store's secret."""

    # -- blobs --------------------------------------------------------------------------------

    def test_large_payload_round_trips(self, store: SessionStore, key: SessionKey) -> None:
        """A payload larger than BLOB_THRESHOLD is stored and read back unchanged."""
        text = "x" * (BLOB_THRESHOLD + 1000) + "é"
        event = Event.create("acme/big", {"text": text})
        store.append(key, [step(1), event, step(3)], expected_seq=0, batch_id="b")
        read = store.read_after(key, 0, 10)
        assert read[1].payload["text"] == text
        assert read[1].event_id == event.event_id
        big_command = Event.create(
            "inbox/accepted", {"command_id": "c", "kind": "inject", "input": text}
        )
        store.inbox_append(key, big_command)
        assert store.inbox_read_after(key, 0, 1)[0].payload["input"] == text

    def test_a_text_many_events_carry_is_stored_once(
        self, store: SessionStore, key: SessionKey
    ) -> None:
        """A large task's text in a command and four events of other shapes is one blob of
        the session, and every payload reads back as committed, raw and decoded."""
        text = "task " + "é" * 300_000 + "x" * 400_000
        store.inbox_append(
            key,
            Event.create("inbox/accepted", {"command_id": "c", "kind": "submit", "input": text}),
            dedupe_key="k",
            fingerprint=canonical_json(["submit", None, None, text, {}]),
        )
        events = [
            Event.create("turn/start", {"input": text}, turn_id="turn_1"),
            Event.create("acme/received", {"text": text, "kind": "task"}),
            Event.create("acme/message", {"message": {"role": "user", "text": text}}),
            Event.create("acme/request", {"messages": [{"text": "earlier"}, {"text": text}]}),
        ]
        store.append(key, events, expected_seq=0, batch_id="b")
        usage = store.blob_usage(key)
        assert list(usage) == [text_digest(text)]
        assert usage[text_digest(text)] == len(orjson.dumps(text))
        assert [e.payload for e in store.read_after(key, 0, 10)] == [e.payload for e in events]
        raw = store.read_raw(key, 0, 10)
        assert [r.payload_json for r in raw] == [canonical_json(e.payload) for e in events]
        assert store.inbox_read_after(key, 0, 1)[0].payload["input"] == text
        assert store.get_blob(text_digest(text)) == orjson.dumps(text)

    def test_a_batch_stored_in_parts_keeps_its_digest(
        self, store: SessionStore, key: SessionKey
    ) -> None:
        """A retried batch of large payloads (same id, same content) is recognised as
        committed, and the same id with another large text is an IdempotencyConflict."""
        big = Event.create("acme/big", {"text": "y" * (BLOB_THRESHOLD * 2)})
        batch = [step(1), big]
        first = store.append(key, batch, expected_seq=0, batch_id="b")
        assert store.append(key, batch, expected_seq=0, batch_id="b") == first
        other = big.model_copy(
            update={"payload": FrozenDict({"text": "z" * len(big.payload["text"])})}
        )
        with pytest.raises(IdempotencyConflict):
            store.append(key, [batch[0], other], expected_seq=0, batch_id="b")
        assert store.head(key) == 2

    def test_a_resent_large_command_is_recognised(
        self, store: SessionStore, key: SessionKey
    ) -> None:
        """A command whose fingerprint holds a large text, sent again under its key, returns
        the original record; another text under that key is an IdempotencyConflict."""
        text = "q" * 500_000
        first, created = store.inbox_append(
            key, command(text), dedupe_key="k", fingerprint=canonical_json([text])
        )
        again, created_again = store.inbox_append(
            key, command(text), dedupe_key="k", fingerprint=canonical_json([text])
        )
        assert (created, created_again, again) == (True, False, first)
        with pytest.raises(IdempotencyConflict):
            store.inbox_append(
                key, command("other"), dedupe_key="k", fingerprint=canonical_json([text + "!"])
            )
        # What the store keeps of it (a backup carries it) is recognised as the same.
        ((_, _, kept),) = store.inbox_keys(key, 0, 10)
        assert len(kept) < 100
        assert store.inbox_append(key, command(text), dedupe_key="k", fingerprint=kept)[1] is False

    def test_a_text_two_sessions_carry_lives_until_neither_is_left(
        self, store: SessionStore, key: SessionKey
    ) -> None:
        """Deleting one of two sessions that carry the same long text keeps its blob for the
        other; deleting the other frees it, and a session that never carried it lists none."""
        other = session_key("other")
        store.create_session(other)
        text = "s" * (BLOB_THRESHOLD + 1)
        for k in (key, other):
            store.append(
                k,
                [Event.create("acme/a", {"text": text}), Event.create("acme/b", {"t": text})],
                expected_seq=0,
                batch_id="b",
            )
        digest = text_digest(text)
        assert list(store.blob_usage(key)) == list(store.blob_usage(other)) == [digest]
        store.delete_session(key, by="ops")
        assert store.get_blob(digest) == orjson.dumps(text)
        assert store.read_after(other, 0, 2)[1].payload["t"] == text
        store.delete_session(other, by="ops")
        with pytest.raises(Corrupt):
            store.get_blob(digest)
        third = session_key("third")
        store.create_session(third)
        store.append(third, [step(1)], expected_seq=0, batch_id="b")
        assert store.blob_usage(third) == {}

    def test_a_deletion_racing_appends_of_its_text_frees_no_blob_in_use(
        self, store: SessionStore, tmp_path: Path
    ) -> None:
        """Sessions carrying a long text deleted while another store object appends the same
        text to a kept session: every event of the kept session still reads back."""
        peer = self.make_peer(tmp_path) or store
        text = "r" * (BLOB_THRESHOLD + 1)
        keeper = session_key("keeper")
        store.create_session(keeper)
        doomed = [session_key(f"doomed{i}") for i in range(20)]
        for k in doomed:
            store.create_session(k)
            store.append(k, [Event.create("acme/r", {"text": text})], expected_seq=0, batch_id="b")

        def appends() -> None:
            for i in range(20):
                event = Event.create("acme/r", {"text": text, "i": i})
                peer.append(keeper, [event], expected_seq=i, batch_id=f"b{i}")

        def deletes() -> None:
            for k in doomed:
                store.delete_session(k, by="ops")

        try:
            run_threads([appends, deletes])
        finally:
            if peer is not store:
                peer.close()
        read = store.read_after(keeper, 0, 100)
        assert [(e.payload["i"], e.payload["text"]) for e in read] == [(i, text) for i in range(20)]
        assert store.get_blob(text_digest(text)) == orjson.dumps(text)

    def test_a_payload_of_many_short_texts_round_trips(
        self, store: SessionStore, key: SessionKey
    ) -> None:
        """A payload over the threshold made of many short texts (no long one) and one with
        texts that hold control characters and quotes read back as committed."""
        many = Event.create("acme/many", {"items": [f"item {i}" for i in range(20_000)]})
        odd = '\x01"quoted"\n\u2028' * 3000
        mixed = Event.create("acme/odd", {"a": odd, "b": [odd, {"c": odd + "!"}], "n": 1})
        store.append(key, [many, mixed], expected_seq=0, batch_id="b")
        assert [e.payload for e in store.read_after(key, 0, 2)] == [many.payload, mixed.payload]
        assert [r.payload_json for r in store.read_raw(key, 0, 2)] == [
            canonical_json(many.payload),
            canonical_json(mixed.payload),
        ]

    def test_put_blob_is_idempotent(self, store: SessionStore) -> None:
        """put_blob returns the SHA-256 digest and storing the same bytes twice is harmless."""
        data = b"\x00binary\xff" * 100
        digest = store.put_blob(data)
        assert store.put_blob(data) == digest
        assert len(digest) == 64
        assert store.get_blob(digest) == data

    def test_get_blob_of_unknown_digest_is_corrupt(self, store: SessionStore) -> None:
        """Asking for a blob that was never stored raises Corrupt."""
        with pytest.raises(Corrupt):
            store.get_blob("0" * 64)

    # -- snapshots ----------------------------------------------------------------------------

    def test_snapshot_round_trips(self, store: SessionStore, key: SessionKey) -> None:
        """get_snapshot returns the seq and bytes put_snapshot stored; None before that."""
        assert store.get_snapshot(key, "state") is None
        self.fill(store, key, 3)
        store.put_snapshot(key, "state", 3, b"folded")
        assert store.get_snapshot(key, "state") == (3, b"folded")

    def test_older_snapshot_is_a_no_op(self, store: SessionStore, key: SessionKey) -> None:
        """A snapshot with an older seq than the stored one leaves the stored one."""
        self.fill(store, key, 3)
        store.put_snapshot(key, "state", 3, b"newer")
        store.put_snapshot(key, "state", 2, b"older")
        assert store.get_snapshot(key, "state") == (3, b"newer")

    def test_snapshot_past_the_head_is_invalid_input(
        self, store: SessionStore, key: SessionKey
    ) -> None:
        """A snapshot seq past the head raises InvalidInput; nothing is stored."""
        self.fill(store, key, 2)
        with pytest.raises(InvalidInput):
            store.put_snapshot(key, "state", 3, b"ahead")
        assert store.get_snapshot(key, "state") is None

    # The next tests play someone editing the stored bytes (through the backend's hooks).

    def test_altered_snapshot_is_ignored(self, store: SessionStore, key: SessionKey) -> None:
        """A snapshot whose stored bytes were changed reads as None (the reader folds the
        log instead); the same bytes unchanged read back."""
        self.fill(store, key, 2)
        anchor = event_anchor(store.read_raw(key, 1, 1))
        for name, data in (("kept", b"folded"), ("altered", b"folded")):
            sealed = seal_snapshot(store.secret(), key, name, 2, anchor, data)
            if name == "altered":
                sealed = sealed.replace(b"folded", b"forged")
            store._put_snapshot(key, name, 2, sealed)
        assert store.get_snapshot(key, "kept") == (2, b"folded")
        assert store.get_snapshot(key, "altered") is None

    def test_snapshot_moved_to_another_session_or_name_is_ignored(
        self, store: SessionStore, key: SessionKey
    ) -> None:
        """Stored snapshot bytes copied to another session, or under another name, read as
        None: the seal binds them to where they were made."""
        other = session_key("other")
        store.create_session(other)
        self.fill(store, key, 2)
        self.fill(store, other, 2)
        store.put_snapshot(key, "state", 2, b"folded")
        found = store._get_snapshot(key, "state")
        assert found is not None
        store._put_snapshot(other, "state", 2, found[1])
        store._put_snapshot(key, "chat", 2, found[1])
        assert store.get_snapshot(other, "state") is None
        assert store.get_snapshot(key, "chat") is None

    # -- secret -------------------------------------------------------------------------------

    def test_secret_is_32_stable_bytes(self, store: SessionStore) -> None:
        """secret() is 32 bytes and the same on every call."""
        secret = store.secret()
        assert isinstance(secret, bytes)
        assert len(secret) == 32
        assert store.secret() == secret
