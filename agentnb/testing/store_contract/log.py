"""The store contract of the execution log: appends, reads, payloads and event types."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from agentnb.errors import (
    AppendConflict,
    IdempotencyConflict,
    InboxChanged,
    InvalidInput,
    SessionNotFound,
)
from agentnb.events import (
    BLOB_THRESHOLD,
    Event,
    FrozenDict,
    register_event_type,
    unregister_event_type,
)
from agentnb.ids import SessionKey
from agentnb.stores.base import (
    MAX_BATCH,
    MAX_READ_LIMIT,
    SCAN_PAGE,
    SessionStore,
)
from agentnb.testing.store_contract.support import (
    ContractBase,
    command,
    require_text,
    run_threads,
    session_key,
    step,
)

__all__ = ["EventLogContract"]


class EventLogContract(ContractBase):
    """The execution log: appends, reads, payloads and event types."""

    # -- append -------------------------------------------------------------------------------

    def test_append_assigns_gapless_seqs_from_one(
        self, store: SessionStore, key: SessionKey
    ) -> None:
        """Events get seqs expected_seq + 1, ... and the returned events carry them."""
        first = [step(1), step(2), step(3)]
        committed = store.append(key, first, expected_seq=0, batch_id="b1")
        assert [e.seq for e in committed] == [1, 2, 3]
        assert [e.event_id for e in committed] == [e.event_id for e in first]
        more = store.append(key, [step(4), step(5)], expected_seq=3, batch_id="b2")
        assert [e.seq for e in more] == [4, 5]
        assert store.head(key) == 5
        assert store.read_after(key, 0, 100) == committed + more

    def test_heads_are_both_logs_heads(self, store: SessionStore, key: SessionKey) -> None:
        """``heads`` is (``head``, ``inbox_head``), each log's own."""
        assert store.heads(key) == (0, 0)
        store.append(key, [step(1), step(2)], expected_seq=0, batch_id="b1")
        assert store.heads(key) == (2, 0)
        store.inbox_append(key, command("a"))
        assert store.heads(key) == (2, 1) == (store.head(key), store.inbox_head(key))

    def test_empty_session_head_is_zero(self, store: SessionStore, key: SessionKey) -> None:
        """A new session has head 0 and reads return nothing."""
        assert store.head(key) == 0
        assert store.read_after(key, 0, 10) == []
        assert list(store.scan(key)) == []

    def test_append_accepts_correct_preset_seqs(self, store: SessionStore, key: SessionKey) -> None:
        """Events that already carry the seqs they will get are accepted unchanged."""
        events = [step(1).with_seq(1), step(2).with_seq(2)]
        assert store.append(key, events, expected_seq=0, batch_id="b") == events

    def test_retried_batch_is_a_no_op(self, store: SessionStore, key: SessionKey) -> None:
        """A batch retried with the same id and content returns the same events, writes nothing."""
        events = [step(1), step(2)]
        committed = store.append(key, events, expected_seq=0, batch_id="b1")
        again = store.append(key, events, expected_seq=0, batch_id="b1")
        assert again == committed
        assert store.head(key) == 2
        store.append(key, [step(3)], expected_seq=2, batch_id="b2")
        # A late retry of the first batch (its acknowledgement was lost) is still recognised.
        assert store.append(key, events, expected_seq=0, batch_id="b1") == committed
        assert store.head(key) == 3

    def test_reused_batch_id_with_other_content_conflicts(
        self, store: SessionStore, key: SessionKey
    ) -> None:
        """The same batch id with other events raises IdempotencyConflict and writes nothing."""
        store.append(key, [step(1)], expected_seq=0, batch_id="b1")
        with pytest.raises(IdempotencyConflict):
            store.append(key, [step(2)], expected_seq=1, batch_id="b1")
        assert store.head(key) == 1

    def test_stale_expected_seq_raises_append_conflict(
        self, store: SessionStore, key: SessionKey
    ) -> None:
        """An expected_seq that is not the head raises AppendConflict and writes nothing."""
        store.append(key, [step(1), step(2)], expected_seq=0, batch_id="b1")
        with pytest.raises(AppendConflict):
            store.append(key, [step(3)], expected_seq=1, batch_id="b2")
        with pytest.raises(AppendConflict):
            store.append(key, [step(3)], expected_seq=5, batch_id="b3")
        assert store.head(key) == 2
        # The refused batch ids stay free for a correct retry.
        assert [e.seq for e in store.append(key, [step(3)], expected_seq=2, batch_id="b2")] == [3]

    @pytest.mark.parametrize(
        "bad",
        [
            "empty",
            "not_a_list",
            "non_event",
            "inbox_type",
            "duplicate_id",
            "wrong_seq",
            "unknown_required_type",
            "too_many",
        ],
    )
    def test_invalid_batch_raises_invalid_input_and_writes_nothing(
        self, store: SessionStore, key: SessionKey, bad: str
    ) -> None:
        """A batch with any invalid item raises InvalidInput and no event of it is written."""
        store.append(key, [step(1)], expected_seq=0, batch_id="seed")
        good = step(2)
        batches: dict[str, Any] = {
            "empty": [],
            "not_a_list": good,
            "non_event": [good, {"type": "step/start"}],
            "inbox_type": [good, command()],
            "duplicate_id": [good, good],
            "wrong_seq": [good, step(3).with_seq(7)],
            "unknown_required_type": [
                good,
                Event.model_construct(**{**step(3).__dict__, "type": "acme/unknown"}),
            ],
            "too_many": [good] * (MAX_BATCH + 1),
        }
        with pytest.raises(InvalidInput):
            store.append(key, batches[bad], expected_seq=1, batch_id="bad")
        assert store.head(key) == 1
        assert [e.seq for e in store.read_after(key, 0, 10)] == [1]
        # Nothing about the refused batch was remembered: its id is still free.
        assert [e.seq for e in store.append(key, [good], expected_seq=1, batch_id="bad")] == [2]

    @pytest.mark.parametrize(
        ("expected_seq", "batch_id", "fence"),
        [
            (-1, "b", None),
            (True, "b", None),
            ("0", "b", None),
            (0, "", None),
            (0, 7, None),
            (0, "b", "lease"),
        ],
    )
    def test_bad_append_arguments_raise_invalid_input(
        self, store: SessionStore, key: SessionKey, expected_seq: Any, batch_id: Any, fence: Any
    ) -> None:
        """Bad expected_seq, batch_id or fence arguments raise InvalidInput, writing nothing."""
        with pytest.raises(InvalidInput):
            store.append(key, [step()], expected_seq=expected_seq, batch_id=batch_id, fence=fence)
        assert store.head(key) == 0

    def test_expected_inbox_conditions_the_commit(
        self, store: SessionStore, key: SessionKey
    ) -> None:
        """With expected_inbox a batch commits only if the inbox head is still that seq."""
        store.append(key, [step(1)], expected_seq=0, batch_id="b1", expected_inbox=0)
        store.inbox_append(key, command("new"))
        with pytest.raises(InboxChanged):
            store.append(key, [step(2)], expected_seq=1, batch_id="b2", expected_inbox=0)
        assert store.head(key) == 1
        store.append(key, [step(2)], expected_seq=1, batch_id="b2", expected_inbox=1)
        assert store.head(key) == 2
        with pytest.raises(InvalidInput):
            store.append(key, [step(3)], expected_seq=2, batch_id="b3", expected_inbox=-1)
        assert store.head(key) == 2

    def test_concurrent_appenders_never_interleave_batches(
        self, store: SessionStore, key: SessionKey
    ) -> None:
        """Writers racing on one session each commit whole batches, contiguous and gapless."""
        writers, batches, size = 6, 10, 3

        def writer(w: int) -> Callable[[], None]:
            def run() -> None:
                for b in range(batches):
                    events = [step(i) for i in range(size)]
                    while True:
                        head = store.head(key)
                        try:
                            store.append(key, events, expected_seq=head, batch_id=f"w{w}-{b}")
                            break
                        except AppendConflict:
                            continue

            return run

        run_threads([writer(w) for w in range(writers)])
        events = list(store.scan(key))
        assert [e.seq for e in events] == list(range(1, writers * batches * size + 1))
        assert len({e.event_id for e in events}) == len(events)
        for i in range(0, len(events), size):
            assert [e.data.iteration for e in events[i : i + size]] == [0, 1, 2]  # type: ignore[union-attr]

    # -- reads --------------------------------------------------------------------------------

    def test_read_after_and_scan_bounds(self, store: SessionStore, key: SessionKey) -> None:
        """read_after returns at most limit events after seq; scan returns (after, through]."""
        self.fill(store, key, 10)
        assert [e.seq for e in store.read_after(key, 0, 3)] == [1, 2, 3]
        assert [e.seq for e in store.read_after(key, 8, 100)] == [9, 10]
        assert store.read_after(key, 10, 5) == []
        assert store.read_after(key, 50, 5) == []
        assert [e.seq for e in store.read_after(key, 9, MAX_READ_LIMIT)] == [10]
        assert [e.seq for e in store.scan(key)] == list(range(1, 11))
        assert [e.seq for e in store.scan(key, 3, 6)] == [4, 5, 6]
        assert [e.seq for e in store.scan(key, after=7)] == [8, 9, 10]
        assert list(store.scan(key, 10)) == []
        assert list(store.scan(key, 6, 6)) == []

    def test_raw_and_columnar_reads_hold_what_read_after_holds(
        self, store: SessionStore, key: SessionKey
    ) -> None:
        """read_raw rows decode to read_after's events; read_arrow holds the same rows as
        columns (turn/run ids NULL where absent, blob payloads filled in), in every window."""
        pytest.importorskip("pyarrow")
        from agentnb.stores._arrow import from_raw

        events = [
            step(1),
            Event.create("turn/start", {"input": "hi", "command_id": "c1"}, turn_id="turn_1"),
            Event.create("acme/big", {"text": "z" * (BLOB_THRESHOLD + 1)}, run_id="run_1"),
            Event.create("acme/note", {"text": "\u00e9 \u2028 \x1f"}),
            step(5),
        ]
        store.append(key, events, expected_seq=0, batch_id="b")
        read = store.read_after(key, 0, 10)
        raw = store.read_raw(key, 0, 10)
        assert [r.to_event() for r in raw] == read
        table = store.read_arrow(key, 0, 10)
        assert table.equals(from_raw(raw))
        assert table["turn_id"].to_pylist() == [None, "turn_1", None, None, None]
        assert table["payload"][2].as_py() == raw[2].payload_json
        for after, limit in ((0, 1), (1, 3), (4, 10), (5, 10), (50, 1)):
            window = store.read_arrow(key, after, limit)
            assert window["seq"].to_pylist() == [e.seq for e in read[after : after + limit]]

    def test_columnar_read_of_a_log_of_nulls(self, store: SessionStore, key: SessionKey) -> None:
        """A window where every row lacks turn_id and run_id keeps the column types."""
        pytest.importorskip("pyarrow")
        from agentnb.stores._arrow import schema

        self.fill(store, key, 3)
        assert store.read_arrow(key, 0, 10).schema == schema()
        assert store.read_arrow(key, 3, 10).schema == schema()

    @pytest.mark.parametrize(("after", "limit"), [(-1, 10), (0, 0), (0, MAX_READ_LIMIT + 1)])
    def test_bad_raw_and_columnar_reads_are_invalid_input(
        self, store: SessionStore, key: SessionKey, after: int, limit: int
    ) -> None:
        """read_raw and read_arrow check their arguments like read_after."""
        pytest.importorskip("pyarrow")
        with pytest.raises(InvalidInput):
            store.read_raw(key, after, limit)
        with pytest.raises(InvalidInput):
            store.read_arrow(key, after, limit)
        with pytest.raises(SessionNotFound):
            store.read_arrow(session_key("nobody"), 0, 10)

    def test_scan_through_past_head_is_invalid_input(
        self, store: SessionStore, key: SessionKey
    ) -> None:
        """scan with through beyond the head raises InvalidInput (not a false Corrupt)."""
        self.fill(store, key, 3)
        with pytest.raises(InvalidInput):
            list(store.scan(key, 0, 4))

    @pytest.mark.parametrize("limit", [0, -1, MAX_READ_LIMIT + 1, 1.5, "10", None, True])
    def test_bad_limit_is_invalid_input(
        self, store: SessionStore, key: SessionKey, limit: Any
    ) -> None:
        """A limit outside 1..MAX_READ_LIMIT, or not an int, raises InvalidInput."""
        with pytest.raises(InvalidInput):
            store.read_after(key, 0, limit)
        with pytest.raises(InvalidInput):
            store.inbox_read_after(key, 0, limit)

    @pytest.mark.parametrize("after", [-1, True, 1.0, "0"])
    def test_bad_after_is_invalid_input(
        self, store: SessionStore, key: SessionKey, after: Any
    ) -> None:
        """An after position that is not a non-negative int raises InvalidInput."""
        with pytest.raises(InvalidInput):
            store.read_after(key, after, 10)
        with pytest.raises(InvalidInput):
            list(store.scan(key, after))
        with pytest.raises(InvalidInput):
            store.inbox_read_after(key, after, 10)

    def test_committed_events_round_trip(self, store: SessionStore, key: SessionKey) -> None:
        """A read returns exactly the envelope and payload that were committed."""
        event = Event.create(
            "message/user",
            {"message": {"id": "m1", "role": "user", "text": "héllo ✓", "turn_id": "turn_1"}},
            turn_id="turn_1",
            run_id="run_1",
        )
        (committed,) = store.append(key, [event], expected_seq=0, batch_id="b")
        (read,) = store.read_after(key, 0, 1)
        assert read == committed
        assert read.occurred_at == event.occurred_at
        assert read.data.message.text == "héllo ✓"  # type: ignore[union-attr]

    def test_prefix_reads_are_stable_while_another_thread_appends(
        self, store: SessionStore, key: SessionKey
    ) -> None:
        """A committed prefix reads the same while a writer keeps appending."""
        snapshot = self.fill(store, key, 50)
        done = threading.Event()

        def writer() -> None:
            try:
                for b in range(40):
                    head = store.head(key)
                    store.append(
                        key, [step(i) for i in range(5)], expected_seq=head, batch_id=f"w{b}"
                    )
            finally:
                done.set()

        def reader() -> None:
            while not done.is_set():
                assert store.read_after(key, 0, 50) == snapshot
                assert list(store.scan(key, 0, 50)) == snapshot
                seen = [e.seq for e in store.scan(key)]
                assert seen == list(range(1, len(seen) + 1))

        run_threads([writer, reader])
        assert store.head(key) == 250
        assert store.read_after(key, 0, 50) == snapshot

    def test_scan_pages_across_many_events(self, store: SessionStore, key: SessionKey) -> None:
        """scan yields every event across more than one internal page, in order."""
        n = SCAN_PAGE * 2 + 345
        self.fill(store, key, n, batch=1000)
        assert [e.seq for e in store.scan(key)] == list(range(1, n + 1))
        assert [e.seq for e in store.scan(key, SCAN_PAGE - 1, SCAN_PAGE * 2 + 1)] == list(
            range(SCAN_PAGE, SCAN_PAGE * 2 + 2)
        )

    # -- payloads and event types ----------------------------------------------------------------

    def test_committed_payloads_are_frozen(self, store: SessionStore, key: SessionKey) -> None:
        """Payloads of committed and read events refuse mutation."""
        event = Event.create("acme/note", {"tags": ["a"], "inner": {"k": 1}})
        (committed,) = store.append(key, [event], expected_seq=0, batch_id="b")
        (read,) = store.read_after(key, 0, 1)
        for e in (event, committed, read):
            assert isinstance(e.payload, FrozenDict)
            with pytest.raises(TypeError):
                e.payload["tags"] = ()
            with pytest.raises(TypeError):
                e.payload["inner"]["k"] = 2
            with pytest.raises(AttributeError):
                e.payload["tags"].append("b")

    def test_unfrozen_payload_is_frozen_on_append(
        self, store: SessionStore, key: SessionKey
    ) -> None:
        """An event built around a plain dict gets a frozen copy of its payload on commit."""
        raw: dict[str, Any] = {"n": 1}
        event = Event.model_construct(**{**Event.create("acme/raw").__dict__, "payload": raw})
        (committed,) = store.append(key, [event], expected_seq=0, batch_id="b")
        raw["n"] = 2
        assert committed.payload == {"n": 1}
        assert store.read_after(key, 0, 1)[0].payload == {"n": 1}

    def test_optional_unknown_application_type_passes_through(
        self, store: SessionStore, key: SessionKey
    ) -> None:
        """An unregistered optional application type is stored and read back as raw JSON."""
        event = Event.create("acme/unregistered", {"anything": [1, "two"]})
        assert event.required is False
        store.append(key, [event], expected_seq=0, batch_id="b")
        (read,) = store.read_after(key, 0, 1)
        assert read.data == {"anything": (1, "two")}

    def test_registered_required_type_round_trips(
        self, store: SessionStore, key: SessionKey
    ) -> None:
        """A registered required application type validates, commits and reads back."""
        register_event_type("acme/review_note", validate=require_text, required=True)
        try:
            with pytest.raises(InvalidInput):
                Event.create("acme/review_note", {"text": 5})
            event = Event.create("acme/review_note", {"text": "ok"})
            assert event.required is True
            store.append(key, [event], expected_seq=0, batch_id="b")
            assert store.read_after(key, 0, 1)[0].payload == {"text": "ok"}
        finally:
            unregister_event_type("acme/review_note")
