"""The store contract of the inbox."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from agentnb.errors import (
    IdempotencyConflict,
    InvalidInput,
)
from agentnb.ids import SessionKey
from agentnb.log import Inbox
from agentnb.stores.base import (
    MAX_READ_LIMIT,
    SessionStore,
)
from agentnb.testing.store_contract.support import (
    ContractBase,
    command,
    run_threads,
    step,
)

__all__ = ["InboxContract"]


class InboxContract(ContractBase):
    """The inbox."""

    # -- inbox --------------------------------------------------------------------------------

    def test_inbox_seq_is_gapless(self, store: SessionStore, key: SessionKey) -> None:
        """Inbox events get their own gapless sequence from 1, separate from the log."""
        records = [store.inbox_append(key, command(f"c{i}")) for i in range(5)]
        assert [(r.seq, created) for r, created in records] == [(i, True) for i in range(1, 6)]
        assert store.inbox_head(key) == 5
        assert store.head(key) == 0
        assert [e.seq for e in store.inbox_read_after(key, 2, 2)] == [3, 4]
        assert store.inbox_read_after(key, 0, 10) == [r for r, _ in records]

    def test_inbox_dedupe_key_returns_the_original(
        self, store: SessionStore, key: SessionKey
    ) -> None:
        """A re-send under the same dedupe key and fingerprint returns the original record."""
        first, created = store.inbox_append(key, command("a"), dedupe_key="k1", fingerprint="f")
        assert created
        again, created = store.inbox_append(key, command("a"), dedupe_key="k1", fingerprint="f")
        assert not created
        assert again == first
        assert store.inbox_head(key) == 1

    def test_inbox_dedupe_without_fingerprint_uses_the_event(
        self, store: SessionStore, key: SessionKey
    ) -> None:
        """Without a fingerprint, re-sending the identical event is recognised."""
        event = command("a")
        first, _ = store.inbox_append(key, event, dedupe_key="k1")
        again, created = store.inbox_append(key, event, dedupe_key="k1")
        assert (again, created) == (first, False)
        with pytest.raises(IdempotencyConflict):
            store.inbox_append(key, command("a"), dedupe_key="k1")

    def test_inbox_dedupe_key_with_other_content_conflicts(
        self, store: SessionStore, key: SessionKey
    ) -> None:
        """The same dedupe key with other content raises IdempotencyConflict, writes nothing."""
        store.inbox_append(key, command("a"), dedupe_key="k1", fingerprint="f1")
        with pytest.raises(IdempotencyConflict):
            store.inbox_append(key, command("b"), dedupe_key="k1", fingerprint="f2")
        assert store.inbox_head(key) == 1

    def test_inbox_accepts_concurrent_writers_exactly_once(
        self, store: SessionStore, key: SessionKey
    ) -> None:
        """8 threads x 50 commands (each sent twice) are all accepted, each exactly once."""
        threads, per_thread = 8, 50
        created_count = [0] * threads

        def writer(t: int) -> Callable[[], None]:
            def run() -> None:
                for i in range(per_thread):
                    for _ in range(2):
                        _, created = store.inbox_append(
                            key, command(f"t{t}-{i}"), dedupe_key=f"t{t}-{i}", fingerprint="same"
                        )
                        created_count[t] += created

            return run

        run_threads([writer(t) for t in range(threads)])
        records = store.inbox_read_after(key, 0, MAX_READ_LIMIT)
        assert created_count == [per_thread] * threads
        assert [r.seq for r in records] == list(range(1, threads * per_thread + 1))
        inputs = sorted(r.payload["input"] for r in records)
        assert inputs == sorted(f"t{t}-{i}" for t in range(threads) for i in range(per_thread))

    def test_inbox_append_many_accepts_each_record_once(
        self, store: SessionStore, key: SessionKey
    ) -> None:
        """Records of two sessions in one call land in order, each session's seqs gapless;
        sent again, the keyed ones return their originals and nothing is written twice."""
        other = SessionKey(key.namespace, key.user_id, key.agent_id, key.session_id + "-b")
        store.create_session(other)
        items = [
            (key, command("a"), "ka", "fa"),
            (other, command("b"), "kb", "fb"),
            (key, command("c"), None, None),
            (key, command("d"), "kd", "fd"),
        ]
        first = store.inbox_append_many(items)
        assert [(r.seq, created) for r, created in first] == [
            (1, True),
            (1, True),
            (2, True),
            (3, True),
        ]
        assert [r.payload["input"] for r, _ in first] == ["a", "b", "c", "d"]
        again = store.inbox_append_many([items[0], items[1], items[3]])
        assert again == [(first[0][0], False), (first[1][0], False), (first[3][0], False)]
        assert store.heads(key) == (0, 3)
        assert store.inbox_head(other) == 1
        assert store.inbox_read_after(key, 0, 10) == [first[0][0], first[2][0], first[3][0]]

    def test_inbox_append_many_checks_each_record(
        self, store: SessionStore, key: SessionKey
    ) -> None:
        """A bad record (an execution type, a conflicting key) raises the one-record error;
        the record is not written, nor a second copy of any other on a retry."""
        with pytest.raises(InvalidInput):
            store.inbox_append_many([(key, command("a"), "k1", "f"), (key, step(), None, None)])
        assert store.inbox_head(key) == 0
        store.inbox_append(key, command("a"), dedupe_key="k1", fingerprint="f1")
        with pytest.raises(IdempotencyConflict):
            store.inbox_append_many(
                [(key, command("x"), "k2", "f2"), (key, command("b"), "k1", "f-other")]
            )
        store.inbox_append_many([(key, command("x"), "k2", "f2")])
        keyed = [r.payload["input"] for r in store.inbox_read_after(key, 0, 10)]
        assert keyed == ["a", "x"]

    def test_inbox_refuses_execution_types(self, store: SessionStore, key: SessionKey) -> None:
        """Execution-log events and pre-stamped events are refused by the inbox."""
        with pytest.raises(InvalidInput):
            store.inbox_append(key, step())
        with pytest.raises(InvalidInput):
            store.inbox_append(key, command().with_seq(1))
        with pytest.raises(InvalidInput):
            store.inbox_append(key, "command")  # type: ignore[arg-type]
        with pytest.raises(InvalidInput):
            store.inbox_append(key, command(), dedupe_key="")
        assert store.inbox_head(key) == 0

    def test_inbox_class_accept_is_idempotent_by_key(
        self, store: SessionStore, key: SessionKey
    ) -> None:
        """Inbox.accept with a key returns the original on a same-meaning retry, else conflicts."""
        inbox = Inbox(store, key)
        first, created = inbox.accept("submit", key="k", turn_id="turn_1", input="hi")
        assert created
        # A retried submit allocates a new turn id; the meaning (kind, input) is the same.
        again, created = inbox.accept("submit", key="k", turn_id="turn_2", input="hi")
        assert (again, created) == (first, False)
        with pytest.raises(IdempotencyConflict):
            inbox.accept("submit", key="k", turn_id="turn_3", input="other")
        handled = inbox.record("inbox/handled", {"command_id": first.payload["command_id"]})
        assert handled.seq == 2
        assert [e.type for e in inbox.scan()] == ["inbox/accepted", "inbox/handled"]
        assert inbox.head() == 2
