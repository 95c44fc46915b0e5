"""The store contract suite: the promises of ``SessionStore`` as tests every backend must pass.

Subclass ``StoreContract`` in a test module and implement ``make_store``::

    class TestMyStore(StoreContract):
        def make_store(self, tmp_path: Path, *, clock: Clock | None = None) -> SessionStore:
            return MyStore(..., clock=clock)

The class has no ``Test`` prefix, so pytest collects it only through such subclasses. Each
test's docstring names the promise it proves (see ``agentnb.stores.base``); the stores are
built with a ``FakeClock`` so lease expiry is exact, and wait-based tests use generous
timeouts only as failure guards, never as speed thresholds.

Why it is long: it is the definition of done for every backend, one test per promise of
``SessionStore``; kept in one class so a new backend subclasses one suite and cannot miss a
part of it.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from agentnb.errors import (
    AppendConflict,
    Corrupt,
    Fenced,
    IdempotencyConflict,
    InboxChanged,
    InvalidInput,
    LeaseHeld,
    SessionArchived,
    SessionDeleted,
    SessionNotFound,
    StorageError,
)
from agentnb.events import (
    BLOB_THRESHOLD,
    Event,
    FrozenDict,
    canonical_json,
    register_event_type,
    unregister_event_type,
)
from agentnb.ids import Clock, FakeClock, SessionKey
from agentnb.log import Inbox, SessionLog
from agentnb.stores._rows import blob_digest, event_anchor, seal_snapshot
from agentnb.stores.base import (
    MAX_BATCH,
    MAX_LABEL_KEY,
    MAX_LABEL_VALUE,
    MAX_LABELS,
    MAX_LIST_LIMIT,
    MAX_READ_LIMIT,
    MAX_TITLE,
    SCAN_PAGE,
    WORK_KINDS,
    Lease,
    SessionStore,
)

__all__ = ["StoreContract"]

_DIGEST_A = "a" * 64
_DIGEST_B = "0123456789abcdef" * 4

_GUARD = 30.0
"""Seconds a wait-based test allows before it declares a hang (a failure guard only)."""


def session_key(
    session_id: str = "s1",
    *,
    namespace: str = "default",
    user_id: str = "alice",
    agent_id: str = "agent",
) -> SessionKey:
    """A session key with test defaults."""
    return SessionKey(namespace, user_id, agent_id, session_id)


def step(i: int = 1) -> Event:
    """A small, valid execution event."""
    return Event.create("step/start", {"step_id": f"step_{i}", "iteration": i})


def command(text: str = "hello") -> Event:
    """A small, valid inbox event."""
    return Event.create(
        "inbox/accepted",
        {"command_id": f"cmd_{text}", "kind": "submit", "input": text},
    )


def _text_digest(text: str) -> str:
    """The digest a long text of a large payload is stored under (its JSON text's)."""
    return blob_digest(orjson.dumps(text))


def run_threads(targets: list[Callable[[], None]], timeout: float = _GUARD) -> None:
    """Run each target in its own thread; re-raise the first failure in the caller."""
    errors: list[BaseException] = []
    start = threading.Barrier(len(targets))

    def wrap(target: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                start.wait(timeout)
                target()
            except BaseException as exc:  # noqa: BLE001 - handed to the test thread below
                errors.append(exc)

        return run

    threads = [threading.Thread(target=wrap(t), daemon=True) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not any(t.is_alive() for t in threads), "a worker thread hung"
    if errors:
        raise errors[0]


class StoreContract:
    """Tests every ``SessionStore`` backend must pass; subclasses provide ``make_store``."""

    # -- fixtures -------------------------------------------------------------------------------

    def make_store(self, tmp_path: Path, *, clock: Clock | None = None) -> SessionStore:
        """A new, empty store of the backend under test that uses ``clock``."""
        raise NotImplementedError("subclasses of StoreContract implement make_store()")

    def make_peer(self, tmp_path: Path, *, clock: Clock | None = None) -> SessionStore | None:
        """Another store object over the data ``make_store`` made (what another process
        sees), or None for a backend whose data lives in one object (the default)."""
        return None

    def rows_of(self, tmp_path: Path, key: SessionKey) -> dict[str, int] | None:
        """Rows each table still holds for ``key`` (deleted or not), read around the store;
        None for a backend that cannot say (the default)."""
        return None

    @pytest.fixture
    def clock(self) -> FakeClock:
        return FakeClock()

    @pytest.fixture
    def store(self, tmp_path: Path, clock: FakeClock) -> Iterator[SessionStore]:
        store = self.make_store(tmp_path, clock=clock)
        try:
            yield store
        finally:
            store.close()

    @pytest.fixture
    def key(self, store: SessionStore) -> SessionKey:
        key = session_key()
        store.create_session(key)
        return key

    @staticmethod
    def fill(store: SessionStore, key: SessionKey, n: int, *, batch: int = 500) -> list[Event]:
        """Append ``n`` step events in batches after the current head."""
        out: list[Event] = []
        head = store.head(key)
        while len(out) < n:
            size = min(batch, n - len(out))
            events = [step(head + i + 1) for i in range(size)]
            out += store.append(key, events, expected_seq=head, batch_id=f"fill-{head}")
            head += size
        return out

    # -- catalogue ------------------------------------------------------------------------------

    def test_create_session_is_get_or_create(self, store: SessionStore, clock: FakeClock) -> None:
        """Creating an existing session returns the original record and changes nothing."""
        key = session_key()
        first = store.create_session(key)
        clock.advance(5)
        again = store.create_session(key)
        assert again == first
        assert again.key == key
        assert len(store.list_sessions()) == 1

    def test_get_session_never_creates(self, store: SessionStore) -> None:
        """get_session of an unknown key returns None and leaves the catalogue empty."""
        assert store.get_session(session_key("nope")) is None
        assert store.list_sessions() == []
        created = store.create_session(session_key("yes"))
        assert store.get_session(session_key("yes")) == created

    def test_list_sessions_filters_by_namespace_user_and_agent(self, store: SessionStore) -> None:
        """list_sessions returns sessions matching every filter given, oldest first."""
        keys = [
            session_key("a", namespace="n1", user_id="alice", agent_id="x"),
            session_key("b", namespace="n1", user_id="bob", agent_id="x"),
            session_key("c", namespace="n2", user_id="alice", agent_id="y"),
            session_key("d", namespace="n1", user_id="alice", agent_id="y"),
        ]
        for k in keys:
            store.create_session(k)

        def ids(**filters: str) -> list[str]:
            return [r.key.session_id for r in store.list_sessions(**filters)]

        assert ids() == ["a", "b", "c", "d"]
        assert ids(namespace="n1") == ["a", "b", "d"]
        assert ids(user_id="alice") == ["a", "c", "d"]
        assert ids(agent_id="y") == ["c", "d"]
        assert ids(namespace="n1", user_id="alice", agent_id="y") == ["d"]
        assert ids(user_id="carol") == []

    def test_list_sessions_rejects_bad_filters(self, store: SessionStore) -> None:
        """A filter that is not an identifier string raises InvalidInput."""
        with pytest.raises(InvalidInput):
            store.list_sessions(user_id=5)  # type: ignore[arg-type]
        with pytest.raises(InvalidInput):
            store.list_sessions(namespace="")

    def test_unknown_session_raises_session_not_found(self, store: SessionStore) -> None:
        """Every per-session operation on an unknown session raises SessionNotFound."""
        key = session_key("ghost")
        calls: list[Callable[[], object]] = [
            lambda: store.head(key),
            lambda: store.append(key, [step()], expected_seq=0, batch_id="b"),
            lambda: store.read_after(key, 0, 10),
            lambda: list(store.scan(key)),
            lambda: store.inbox_append(key, command()),
            lambda: store.inbox_head(key),
            lambda: store.heads(key),
            lambda: store.inbox_read_after(key, 0, 10),
            lambda: store.acquire_lease(key, "owner"),
            lambda: store.current_lease(key),
            lambda: store.watermark(key, "sink"),
            lambda: store.wait_for_head(key, 0, 0.01),
        ]
        for call in calls:
            with pytest.raises(SessionNotFound):
                call()
        assert store.get_session(key) is None

    def test_non_key_arguments_are_invalid_input(self, store: SessionStore) -> None:
        """Passing something other than a SessionKey raises InvalidInput."""
        with pytest.raises(InvalidInput):
            store.create_session("default/alice/agent/s1")  # type: ignore[arg-type]
        with pytest.raises(InvalidInput):
            store.head(("a", "b", "c", "d"))  # type: ignore[arg-type]
        with pytest.raises(InvalidInput):
            store.heads("default/alice/agent/s1")  # type: ignore[arg-type]

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

    # -- lifecycle: metadata, finding, deleting -------------------------------------------------

    def test_new_session_record_carries_empty_metadata(
        self, store: SessionStore, clock: FakeClock
    ) -> None:
        """A new record has its times set to now, no title or labels and zero counts."""
        record = store.create_session(session_key())
        now = clock.now()
        assert (record.created_at, record.updated_at, record.last_activity) == (now, now, now)
        assert (record.title, record.labels, record.first_task) == (None, {}, None)
        assert (record.events, record.turns, record.bytes, record.submits) == (0, 0, 0, 0)
        assert record.turn_status is None

    def test_append_keeps_counts_times_and_turn_status_current(
        self, store: SessionStore, key: SessionKey, clock: FakeClock
    ) -> None:
        """Each commit adds its events, turns and payload size, moves the times and sets the
        latest turn's raw status; a replayed batch changes nothing."""
        clock.advance(10)
        batch = [Event.create("turn/start", {"input": "hi"}, turn_id="turn_1"), step(2)]
        store.append(key, batch, expected_seq=0, batch_id="b1")
        record = store.get_session(key)
        assert record is not None
        assert (record.events, record.turns, record.turn_status) == (2, 1, "running")
        assert record.bytes == sum(len(canonical_json(e.payload)) for e in batch)
        assert record.updated_at == record.last_activity == clock.now()
        clock.advance(10)
        store.append(key, batch, expected_seq=0, batch_id="b1")  # a lost-ack replay
        assert store.get_session(key) == record
        done = Event.create("turn/suspended", {"reason": "needs a person"}, turn_id="turn_1")
        store.append(key, [done], expected_seq=2, batch_id="b2")
        after = store.get_session(key)
        assert after is not None
        assert (after.events, after.turns, after.turn_status) == (3, 1, "suspended")
        assert after.created_at == record.created_at

    def test_first_submit_is_the_first_task_and_submits_are_counted(
        self, store: SessionStore, key: SessionKey, clock: FakeClock
    ) -> None:
        """The first accepted submit's first line becomes first_task; every submit counts once
        (a deduplicated re-send does not) and moves last_activity but not updated_at."""
        clock.advance(3)
        first = Event.create(
            "inbox/accepted",
            {"command_id": "c1", "kind": "submit", "input": "\n  Plan the trip \nin detail"},
        )
        store.inbox_append(key, first, dedupe_key="k1")
        store.inbox_append(key, first, dedupe_key="k1")
        store.inbox_append(key, command("second task"))
        store.inbox_append(
            key,
            Event.create("inbox/accepted", {"command_id": "c3", "kind": "inject", "input": "x"}),
        )
        record = store.get_session(key)
        assert record is not None
        assert record.first_task == "Plan the trip"
        assert record.submits == 2
        assert record.last_activity == clock.now() > record.updated_at

    def test_update_sets_title_and_merges_labels(
        self, store: SessionStore, key: SessionKey, clock: FakeClock
    ) -> None:
        """update_session sets the title, merges labels (None removes one) and is idempotent."""
        clock.advance(1)
        record = store.update_session(key, title="Trip plan", labels={"team": "a", "env": "x"})
        assert (record.title, record.labels) == ("Trip plan", {"env": "x", "team": "a"})
        assert record.updated_at == clock.now()
        record = store.update_session(key, labels={"env": None, "tier": "gold"})
        assert (record.title, record.labels) == ("Trip plan", {"team": "a", "tier": "gold"})
        again = store.update_session(key, labels={"env": None, "tier": "gold"})
        assert again == record
        cleared = store.update_session(key, title=None)
        assert (cleared.title, cleared.labels) == (None, {"team": "a", "tier": "gold"})
        assert store.get_session(key) == cleared

    @pytest.mark.parametrize(
        "changes",
        [
            {"title": ""},
            {"title": "two\nlines"},
            {"title": "x" * (MAX_TITLE + 1)},
            {"title": 5},
            {"labels": ["a"]},
            {"labels": {"": "v"}},
            {"labels": {"k" * (MAX_LABEL_KEY + 1): "v"}},
            {"labels": {"k": "v" * (MAX_LABEL_VALUE + 1)}},
            {"labels": {"k": 5}},
            {"labels": {f"k{i}": "v" for i in range(MAX_LABELS + 1)}},
        ],
    )
    def test_bad_metadata_is_invalid_input_and_writes_nothing(
        self, store: SessionStore, key: SessionKey, changes: dict[str, Any]
    ) -> None:
        """A bad title or bad labels raise InvalidInput and the record is unchanged."""
        before = store.get_session(key)
        with pytest.raises(InvalidInput):
            store.update_session(key, **changes)
        assert store.get_session(key) == before

    def test_labels_past_the_bound_after_merging_are_refused(
        self, store: SessionStore, key: SessionKey
    ) -> None:
        """Merging labels that would exceed MAX_LABELS raises InvalidInput, nothing written."""
        store.update_session(key, labels={f"k{i}": "v" for i in range(MAX_LABELS)})
        before = store.get_session(key)
        with pytest.raises(InvalidInput, match="remove some"):
            store.update_session(key, labels={"one-more": "v"})
        assert store.get_session(key) == before

    def test_an_update_command_changes_the_record_as_it_is_accepted(
        self, store: SessionStore, key: SessionKey, clock: FakeClock
    ) -> None:
        """An ``update`` inbox command (``Session.update``) is carried out in the transaction
        that accepts it; a re-send under its key changes nothing; a bad one (or labels past
        the bound once merged) is refused with neither the command nor the record written."""
        inbox = Inbox(store, key)
        clock.advance(1)
        inbox.accept("update", data={"title": "Trip", "labels": {"team": "a"}}, key="u1")
        record = store.get_session(key)
        assert record is not None
        assert (record.title, record.labels) == ("Trip", {"team": "a"})
        assert record.updated_at == clock.now()
        clock.advance(1)
        again = {"title": "Trip", "labels": {"team": "a"}}
        assert inbox.accept("update", data=again, key="u1")[1] is False
        assert store.get_session(key) == record
        inbox.accept(
            "update",
            data={"labels": {"team": None, **{f"k{i}": "v" for i in range(MAX_LABELS - 1)}}},
        )
        head = store.inbox_head(key)
        before = store.get_session(key)
        for bad in (
            {"title": "two\nlines"},
            {"title": 5},
            {"labels": {"k": 5}},
            {"labels": ["a"]},
            {"labels": {"one": "v", "two": "v"}},  # past MAX_LABELS once merged
        ):
            with pytest.raises(InvalidInput):
                inbox.accept("update", data=bad)
        assert store.inbox_head(key) == head
        assert store.get_session(key) == before

    def _sessions(self, store: SessionStore, clock: FakeClock, n: int) -> list[SessionKey]:
        keys = []
        for i in range(n):
            clock.advance(1)
            keys.append(session_key(f"s{i}", user_id="alice" if i % 2 else "bob"))
            store.create_session(keys[-1])
        return keys

    def test_find_sessions_is_newest_activity_first(
        self, store: SessionStore, clock: FakeClock
    ) -> None:
        """Sessions come newest last_activity first, and activity moves a session up."""
        keys = self._sessions(store, clock, 4)
        assert [r.key for r in store.find_sessions()] == keys[::-1]
        clock.advance(1)
        store.append(keys[0], [step()], expected_seq=0, batch_id="b")
        assert store.find_sessions(limit=1)[0].key == keys[0]

    def test_find_sessions_pages_with_a_stable_cursor(
        self, store: SessionStore, clock: FakeClock
    ) -> None:
        """Pages follow each other without gaps or repeats, even while sessions are added."""
        keys = self._sessions(store, clock, 5)
        first = store.find_sessions(limit=2)
        assert [r.key for r in first] == [keys[4], keys[3]]
        clock.advance(1)
        store.create_session(session_key("new"))  # newer: it belongs before page one
        second = store.find_sessions(limit=2, before=first[-1].cursor)
        third = store.find_sessions(limit=2, before=second[-1].cursor)
        assert [r.key for r in second + third] == [keys[2], keys[1], keys[0]]
        assert store.find_sessions(limit=2, before=third[-1].cursor) == []

    def test_listing_follows_the_first_sessions_own_activity_exactly(
        self, store: SessionStore, clock: FakeClock
    ) -> None:
        """While the session listed first goes on committing, its ``last_activity``, the
        ``since`` / ``until`` bounds and the cursor follow each commit exactly; once another
        session is active, or created, or the first one deleted, the order is still by
        activity."""
        keys = self._sessions(store, clock, 3)
        head = 0
        for _ in range(3):  # the newest session commits again and again
            clock.advance(1)
            store.append(keys[2], [step()], expected_seq=head, batch_id=f"b{head}")
            head += 1
        top = store.find_sessions()[0]
        assert (top.key, top.last_activity) == (keys[2], clock.now())
        assert [r.key for r in store.find_sessions(since=clock.now())] == [keys[2]]
        assert [r.key for r in store.find_sessions(until=clock.now())] == [keys[1], keys[0]]
        assert [r.key for r in store.find_sessions(before=top.cursor)] == [keys[1], keys[0]]
        clock.advance(1)
        store.inbox_append(keys[0], command("another task"))
        assert [r.key for r in store.find_sessions()] == [keys[0], keys[2], keys[1]]
        assert [r.key for r in store.find_sessions(since=clock.now() - 1)] == [keys[0], keys[2]]
        clock.advance(1)
        newest = session_key("newest")
        store.create_session(newest)
        clock.advance(1)
        store.append(keys[2], [step()], expected_seq=head, batch_id="again")
        assert [r.key for r in store.find_sessions()] == [keys[2], newest, keys[0], keys[1]]
        store.delete_session(keys[2], by="test")
        clock.advance(1)
        store.append(keys[1], [step()], expected_seq=0, batch_id="b")
        listed = store.find_sessions()
        assert [r.key for r in listed] == [keys[1], newest, keys[0]]
        assert [r.last_activity for r in listed] == sorted(
            (r.last_activity for r in listed), reverse=True
        )

    # -- the pending-work index (stores that worker processes claim sessions from) --------

    @staticmethod
    def _claims(store: SessionStore) -> Any:
        if not hasattr(store, "claim_pending"):
            pytest.skip("this backend has no pending-work index (one process executes)")
        return store

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

    def test_find_sessions_filters(self, store: SessionStore, clock: FakeClock) -> None:
        """User, labels (all must match), activity range, text search and raw turn status
        each narrow the listing."""
        keys = self._sessions(store, clock, 4)

        def ids(**filters: Any) -> list[str]:
            return [r.key.session_id for r in store.find_sessions(**filters)]

        middle = store.get_session(keys[2])
        assert middle is not None
        assert ids(since=middle.last_activity) == ["s3", "s2"]
        assert ids(until=middle.last_activity) == ["s1", "s0"]
        clock.advance(1)
        store.update_session(keys[1], title="Quarterly BUDGET review", labels={"team": "fin"})
        store.update_session(keys[3], labels={"team": "fin", "tier": "gold"})
        store.inbox_append(keys[2], command("Draft the budget memo"))
        store.append(
            keys[0],
            [Event.create("turn/start", {"input": "x"}, turn_id="turn_1")],
            expected_seq=0,
            batch_id="b",
        )
        assert ids(user_id="alice") == ["s3", "s1"]
        assert ids(labels={"team": "fin"}) == ["s3", "s1"]
        assert ids(labels={"team": "fin", "tier": "gold"}) == ["s3"]
        assert ids(search="budget") == ["s2", "s1"]
        assert ids(search="BUDGET", user_id="bob") == ["s2"]
        assert ids(turn_status=["running"]) == ["s0"]
        assert ids(turn_status=["none"]) == ["s3", "s2", "s1"]
        assert ids(agent_id="other") == []

    @pytest.mark.parametrize(
        "filters",
        [
            {"limit": 0},
            {"limit": MAX_LIST_LIMIT + 1},
            {"before": "not-a-cursor"},
            {"before": 5},
            {"search": " "},
            {"labels": {"k": 5}},
            {"turn_status": "running"},
            {"since": "yesterday"},
            {"user_id": ""},
            {"archived": "no"},
        ],
    )
    def test_bad_find_arguments_are_invalid_input(
        self, store: SessionStore, filters: dict[str, Any]
    ) -> None:
        """Bad filters, limits and cursors raise InvalidInput saying what to pass."""
        with pytest.raises(InvalidInput):
            store.find_sessions(**filters)

    def test_delete_removes_every_row_of_the_session_and_nothing_else(
        self, store: SessionStore, key: SessionKey, clock: FakeClock
    ) -> None:
        """Events, inbox, watermarks, snapshots, lease and unshared blobs go; the other
        session, and a blob it shares, stay."""
        other = session_key("other")
        store.create_session(other)
        shared = Event.create("acme/big", {"text": "s" * (BLOB_THRESHOLD + 1)})
        mine = Event.create("acme/big", {"text": "m" * (BLOB_THRESHOLD + 1)})
        store.append(key, [step(), shared, mine], expected_seq=0, batch_id="b")
        store.append(other, [step(), shared.model_copy()], expected_seq=0, batch_id="b")
        store.inbox_append(key, command())
        store.advance_watermark(key, "sink", 2)
        store.put_snapshot(key, "fold", 3, b"state")
        lease = store.acquire_lease(key, "me")
        store.release_lease(lease)
        clock.advance(2)
        tombstone = store.delete_session(key, by="alice", reason="GDPR request 7")
        assert (tombstone.key, tombstone.deleted_by, tombstone.reason) == (
            key,
            "alice",
            "GDPR request 7",
        )
        assert (tombstone.deleted_at, tombstone.events) == (clock.now(), 3)
        assert store.tombstone(key) == tombstone
        assert store.get_session(key) is None
        with pytest.raises(Corrupt):
            store.get_blob(_text_digest(mine.payload["text"]))
        # The shared blob is still there: the other session reads it back.
        assert [e.payload for e in store.read_after(other, 0, 10)][1] == shared.payload
        assert [r.key for r in store.find_sessions()] == [other]
        assert store.tombstone(other) is None

    def test_a_deleted_session_refuses_every_call(
        self, store: SessionStore, key: SessionKey
    ) -> None:
        """After delete, reads, writes and create_session raise SessionDeleted; deleting
        again returns the first tombstone."""
        store.append(key, [step()], expected_seq=0, batch_id="b")
        lease = store.acquire_lease(key, "me")
        store.release_lease(lease)
        tombstone = store.delete_session(key, by="ops")
        for call in (
            lambda: store.head(key),
            lambda: store.read_after(key, 0, 10),
            lambda: store.append(key, [step(2)], expected_seq=1, batch_id="b2"),
            lambda: store.inbox_append(key, command()),
            lambda: store.inbox_head(key),
            lambda: store.update_session(key, title="back"),
            lambda: store.set_archived(key),
            lambda: store.acquire_lease(key, "me"),
            lambda: store.renew_lease(lease),
            lambda: store.release_lease(lease),
            lambda: store.put_snapshot(key, "fold", 0, b"state"),
            lambda: store.advance_watermark(key, "sink", 0),
            lambda: store.create_session(key),
        ):
            with pytest.raises(SessionDeleted, match="ops"):
                call()
        assert store.delete_session(key, by="someone else") == tombstone
        assert store.list_sessions() == []
        with pytest.raises(SessionNotFound):
            store.delete_session(session_key("never"), by="ops")

    def test_delete_is_refused_under_another_live_lease(
        self, store: SessionStore, key: SessionKey
    ) -> None:
        """A live lease makes delete raise LeaseHeld (nothing deleted) unless it is the fence."""
        store.append(key, [step()], expected_seq=0, batch_id="b")
        lease = store.acquire_lease(key, "runner")
        with pytest.raises(LeaseHeld):
            store.delete_session(key, by="ops")
        assert store.head(key) == 1
        store.delete_session(key, by="runner", fence=lease)
        assert store.tombstone(key) is not None

    @pytest.mark.parametrize(
        "arguments",
        [{"by": ""}, {"by": 5}, {"by": "ops", "reason": 5}, {"by": "ops", "fence": "lease"}],
    )
    def test_bad_delete_arguments_are_invalid_input(
        self, store: SessionStore, key: SessionKey, arguments: dict[str, Any]
    ) -> None:
        """delete_session with a bad who, reason or fence raises InvalidInput, deletes nothing."""
        with pytest.raises(InvalidInput):
            store.delete_session(key, **arguments)
        assert store.tombstone(key) is None

    def test_a_delete_racing_commits_leaves_nothing_behind(
        self, store: SessionStore, key: SessionKey
    ) -> None:
        """A writer committing while the session is deleted either commits before the delete
        or gets SessionDeleted; no event of it survives."""
        stopped: list[BaseException] = []

        def write() -> None:
            for i in range(200):
                try:
                    store.append(key, [step(i)], expected_seq=i, batch_id=f"b{i}")
                    store.inbox_append(key, command(f"c{i}"))
                except SessionDeleted as exc:
                    stopped.append(exc)
                    return

        def delete() -> None:
            time.sleep(0.01)  # let some commits through first (not a timing assertion)
            store.delete_session(key, by="ops")

        run_threads([write, delete])
        with pytest.raises(SessionDeleted):
            store.head(key)
        assert store.find_sessions() == []
        if stopped:
            assert isinstance(stopped[0], SessionDeleted)

    def test_a_delete_racing_every_kind_of_write_leaves_no_row(
        self, store: SessionStore, key: SessionKey, tmp_path: Path
    ) -> None:
        """Writers of every kind (commits, commands, snapshots, watermarks, leases) racing
        a delete each stop with SessionDeleted, and no table keeps a row of the session."""
        stopped: list[BaseException] = []

        def writer(w: int) -> Callable[[], None]:
            def run() -> None:
                for i in itertools.count(1):  # until the delete (run_threads guards a hang)
                    try:
                        if w == 0:
                            head = store.head(key)
                            store.append(key, [step(i)], expected_seq=head, batch_id=f"b{i}")
                        elif w == 1:
                            store.inbox_append(key, command(f"c{i}"))
                        elif w == 2:
                            store.put_snapshot(key, "fold", store.head(key), b"state")
                            store.advance_watermark(key, "sink", store.head(key))
                        else:
                            store.release_lease(store.acquire_lease(key, f"owner-{i}"))
                    except (AppendConflict, LeaseHeld, Fenced):
                        continue  # another writer of this test got there first
                    except SessionDeleted as exc:
                        stopped.append(exc)
                        return

            return run

        def delete() -> None:
            time.sleep(0.01)  # let some writes through first (not a timing assertion)
            while True:
                try:
                    store.delete_session(key, by="ops")
                    return
                except LeaseHeld:
                    continue  # the lease writer holds it for a moment

        run_threads([*(writer(w) for w in range(4)), delete])
        assert len(stopped) == 4
        rows = self.rows_of(tmp_path, key)
        if rows is not None:
            assert rows == dict.fromkeys(rows, 0), rows

    def test_another_store_object_sees_the_delete_at_every_write(
        self, store: SessionStore, key: SessionKey, tmp_path: Path, clock: FakeClock
    ) -> None:
        """A second store object over the same data (another process) that used the session
        before the delete gets SessionDeleted from every write and from the heads."""
        peer = self.make_peer(tmp_path, clock=clock)
        if peer is None:
            pytest.skip("this backend's data lives in one store object")
        try:
            peer.append(key, [step()], expected_seq=0, batch_id="b")
            peer.inbox_append(key, command())
            peer.put_snapshot(key, "fold", 1, b"state")
            peer.advance_watermark(key, "sink", 1)
            lease = peer.acquire_lease(key, "peer")
            peer.release_lease(lease)
            store.delete_session(key, by="ops")
            for call in (
                lambda: peer.head(key),
                lambda: peer.inbox_head(key),
                lambda: peer.append(key, [step(2)], expected_seq=1, batch_id="b2"),
                lambda: peer.inbox_append(key, command("again")),
                lambda: peer.put_snapshot(key, "fold", 0, b"state"),
                lambda: peer.advance_watermark(key, "sink", 0),
                lambda: peer.acquire_lease(key, "peer"),
                lambda: peer.renew_lease(lease),
                lambda: peer.release_lease(lease),
                lambda: peer.update_session(key, title="back"),
                lambda: peer.set_archived(key),
            ):
                with pytest.raises(SessionDeleted, match="ops"):
                    call()
        finally:
            peer.close()
        rows = self.rows_of(tmp_path, key)
        if rows is not None:
            assert rows == dict.fromkeys(rows, 0), rows

    # -- tombstones (what exports apply) ---------------------------------------------------

    def test_tombstones_page_in_deletion_order(self, store: SessionStore, clock: FakeClock) -> None:
        """Each deletion takes the next seq; tombstones(after=, limit=) pages them in that
        order, and a page after the last one seen holds only later deletions."""
        keys = [session_key(f"s{i}") for i in range(5)]
        for k in keys:
            store.create_session(k)
        order = [keys[3], keys[0], keys[4]]
        for k in order:
            clock.advance(1)
            store.delete_session(k, by="ops", reason=f"drop {k.session_id}")
        found = store.tombstones()
        assert [(t.key, t.seq) for t in found] == [(k, i) for i, k in enumerate(order, 1)]
        assert [t.reason for t in found] == ["drop s3", "drop s0", "drop s4"]
        assert store.tombstone(keys[0]) == found[1]
        assert store.tombstones(after=1, limit=1) == [found[1]]
        assert store.tombstones(after=3) == []
        store.delete_session(keys[1], by="ops")
        assert [(t.key, t.seq) for t in store.tombstones(after=3)] == [(keys[1], 4)]
        assert store.delete_session(keys[0], by="again").seq == 2  # deleting again: the first

    def test_tombstone_seqs_are_gapless_under_concurrent_deletes(self, store: SessionStore) -> None:
        """Sessions deleted from several threads at once get seqs 1..n, and a reader paging
        with after= the last seq it saw meanwhile sees every tombstone once, in order."""
        keys = [session_key(f"s{i}") for i in range(24)]
        for k in keys:
            store.create_session(k)
        seen: list[int] = []
        done = threading.Event()

        def deleter(part: int) -> Callable[[], None]:
            def run() -> None:
                for k in keys[part::3]:
                    store.delete_session(k, by=f"d{part}")

            return run

        def reader() -> None:
            while True:
                finished = done.is_set()
                page = store.tombstones(after=seen[-1] if seen else 0, limit=5)
                seen.extend(t.seq for t in page)
                if finished and not page:
                    return

        def deleters() -> None:
            try:
                run_threads([deleter(p) for p in range(3)])
            finally:
                done.set()

        run_threads([deleters, reader])
        assert seen == list(range(1, len(keys) + 1))
        assert {t.key for t in store.tombstones(limit=100)} == set(keys)

    def test_tombstone_watermark_is_monotonic_per_sink(
        self, store: SessionStore, key: SessionKey
    ) -> None:
        """A sink's tombstone watermark starts at 0, only moves forward, is kept per sink
        name, and cannot pass the last deletion (InvalidInput)."""
        assert store.tombstone_watermark("sink") == 0
        with pytest.raises(InvalidInput, match="past the last deletion"):
            store.advance_tombstone_watermark("sink", 1)
        store.delete_session(key, by="ops")
        assert store.advance_tombstone_watermark("sink", 1) == 1
        assert store.advance_tombstone_watermark("sink", 0) == 1
        assert store.tombstone_watermark("sink") == 1
        assert store.tombstone_watermark("other") == 0

    @pytest.mark.parametrize(
        "call",
        [
            lambda s: s.tombstones(after=-1),
            lambda s: s.tombstones(limit=0),
            lambda s: s.tombstones(limit=MAX_READ_LIMIT + 1),
            lambda s: s.tombstones(after=True),
            lambda s: s.tombstone_watermark(""),
            lambda s: s.advance_tombstone_watermark("sink", -1),
            lambda s: s.advance_tombstone_watermark(5, 0),
        ],
    )
    def test_bad_tombstone_arguments_are_invalid_input(
        self, store: SessionStore, call: Callable[[SessionStore], object]
    ) -> None:
        """Negative cursors, bad limits and sink names raise InvalidInput."""
        with pytest.raises(InvalidInput):
            call(store)

    # -- archive ------------------------------------------------------------------------------

    def test_archive_round_trips_and_leaves_the_default_listing(
        self, store: SessionStore, key: SessionKey, clock: FakeClock
    ) -> None:
        """set_archived sets archived_at (kept when archived again) without moving the
        activity times; find_sessions leaves it out unless archived=True or None; clearing
        the flag brings it back."""
        other = session_key("other")
        store.create_session(other)
        before = store.get_session(key)
        assert before is not None
        assert before.archived_at is None
        clock.advance(5)
        record = store.set_archived(key)
        assert record.archived_at == clock.now()
        assert (record.last_activity, record.updated_at) == (
            before.last_activity,
            before.updated_at,
        )
        clock.advance(5)
        assert store.set_archived(key).archived_at == record.archived_at
        assert store.get_session(key) == record
        assert [r.key for r in store.find_sessions()] == [other]
        assert [r.key for r in store.find_sessions(archived=True)] == [key]
        assert {r.key for r in store.find_sessions(archived=None)} == {key, other}
        assert store.set_archived(key, False).archived_at is None
        assert {r.key for r in store.find_sessions()} == {key, other}
        assert store.find_sessions(archived=True) == []

    def test_an_archived_session_refuses_new_work_and_stays_readable(
        self, store: SessionStore, key: SessionKey
    ) -> None:
        """Every command that starts or feeds a run raises SessionArchived and writes
        nothing; interrupt, cancel, other inbox records, the execution log, metadata and
        reads go on; once unarchived, work is accepted again."""
        inbox = Inbox(store, key)
        inbox.accept("submit", key="early", turn_id="turn_1", input="before")
        store.append(key, [step()], expected_seq=0, batch_id="b")
        store.set_archived(key)
        head = store.inbox_head(key)
        for kind in sorted(WORK_KINDS):
            with pytest.raises(SessionArchived, match="unarchive"):
                inbox.accept(kind, turn_id="turn_1", input="more")
        assert store.inbox_head(key) == head
        # A re-send of a command accepted before the archive returns the original.
        again, created = inbox.accept("submit", key="early", turn_id="turn_9", input="before")
        assert (again.seq, created) == (1, False)
        inbox.accept("interrupt", turn_id="turn_1", run_id="run_1")
        inbox.accept("cancel", turn_id="turn_1")
        inbox.record("inbox/rejected", {"command_id": "cmd_x", "reason": "r"})
        store.append(key, [step(2)], expected_seq=1, batch_id="b2")
        store.update_session(key, title="kept for later")
        assert store.inbox_head(key) == head + 3
        assert len(store.read_after(key, 0, 10)) == 2
        store.set_archived(key, False)
        inbox.accept("submit", turn_id="turn_2", input="after")
        assert store.inbox_head(key) == head + 4

    def test_archive_can_be_conditioned_on_the_inbox_head(
        self, store: SessionStore, key: SessionKey
    ) -> None:
        """With expected_inbox, set_archived commits only if no command arrived since
        (else InboxChanged, not archived)."""
        store.inbox_append(key, command("first"))
        store.inbox_append(key, command("second"))
        with pytest.raises(InboxChanged):
            store.set_archived(key, expected_inbox=1)
        record = store.get_session(key)
        assert record is not None
        assert record.archived_at is None
        assert store.set_archived(key, expected_inbox=2).archived_at is not None

    @pytest.mark.parametrize(
        "arguments", [{"archived": "yes"}, {"archived": None}, {"expected_inbox": -1}]
    )
    def test_bad_archive_arguments_are_invalid_input(
        self, store: SessionStore, key: SessionKey, arguments: dict[str, Any]
    ) -> None:
        """set_archived with a non-bool flag or a bad inbox head raises InvalidInput."""
        with pytest.raises(InvalidInput):
            store.set_archived(key, **arguments)
        record = store.get_session(key)
        assert record is not None
        assert record.archived_at is None

    def test_archive_of_an_unknown_session_is_session_not_found(self, store: SessionStore) -> None:
        """set_archived of a session that was never created raises SessionNotFound."""
        with pytest.raises(SessionNotFound):
            store.set_archived(session_key("never"))

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
        assert list(usage) == [_text_digest(text)]
        assert usage[_text_digest(text)] == len(orjson.dumps(text))
        assert [e.payload for e in store.read_after(key, 0, 10)] == [e.payload for e in events]
        raw = store.read_raw(key, 0, 10)
        assert [r.payload_json for r in raw] == [canonical_json(e.payload) for e in events]
        assert store.inbox_read_after(key, 0, 1)[0].payload["input"] == text
        assert store.get_blob(_text_digest(text)) == orjson.dumps(text)

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
        digest = _text_digest(text)
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
        assert store.get_blob(_text_digest(text)) == orjson.dumps(text)

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
        register_event_type("acme/review_note", validate=_require_text, required=True)
        try:
            with pytest.raises(InvalidInput):
                Event.create("acme/review_note", {"text": 5})
            event = Event.create("acme/review_note", {"text": "ok"})
            assert event.required is True
            store.append(key, [event], expected_seq=0, batch_id="b")
            assert store.read_after(key, 0, 1)[0].payload == {"text": "ok"}
        finally:
            unregister_event_type("acme/review_note")

    # -- waiting and following -------------------------------------------------------------------

    def test_wait_for_head_wakes_on_commit(self, store: SessionStore, key: SessionKey) -> None:
        """wait_for_head returns the new head once another thread commits."""
        waiting = threading.Event()
        result: list[int] = []

        def waiter() -> None:
            waiting.set()
            result.append(store.wait_for_head(key, 0, _GUARD))

        def writer() -> None:
            waiting.wait(_GUARD)
            time.sleep(0.05)
            store.append(key, [step()], expected_seq=0, batch_id="b")

        started = time.monotonic()
        run_threads([waiter, writer])
        assert result == [1]
        assert time.monotonic() - started < _GUARD, "the waiter slept through the commit"

    def test_a_slow_polling_wait_still_wakes_on_this_objects_commits(
        self, store: SessionStore, key: SessionKey
    ) -> None:
        """With ``poll`` far longer than its wait, a waiter still wakes on a commit of this
        store object (log and inbox alike): only other writers' commits wait for a poll."""
        result: list[int] = []
        waiting = threading.Event()

        def waiter() -> None:
            waiting.set()
            result.append(store.wait_for_head(key, 0, _GUARD, poll=3600))
            result.append(store.wait_for_inbox(key, 0, _GUARD, poll=3600))

        def writer() -> None:
            waiting.wait(_GUARD)
            time.sleep(0.05)
            store.append(key, [step()], expected_seq=0, batch_id="b")
            time.sleep(0.05)
            store.inbox_append(key, command("x"))

        started = time.monotonic()
        run_threads([waiter, writer])
        assert result == [1, 1]
        assert time.monotonic() - started < _GUARD, "the waiter slept through the commit"

    def test_bad_poll_is_invalid_input(self, store: SessionStore, key: SessionKey) -> None:
        """A poll that is not positive seconds is refused before any wait."""
        for bad in (0, -1, "1", True, 10_000):
            with pytest.raises(InvalidInput):
                store.wait_for_head(key, 0, 0.01, poll=bad)  # type: ignore[arg-type]
            with pytest.raises(InvalidInput):
                store.wait_for_inbox(key, 0, 0.01, poll=bad)  # type: ignore[arg-type]

    def test_wait_for_head_returns_on_timeout(self, store: SessionStore, key: SessionKey) -> None:
        """With no commit, wait_for_head returns the unchanged head after the timeout."""
        self.fill(store, key, 2)
        assert store.wait_for_head(key, 2, 0.05) == 2
        assert store.wait_for_head(key, 0, 0.05) == 2

    def test_wait_for_inbox_wakes_on_command(self, store: SessionStore, key: SessionKey) -> None:
        """wait_for_inbox returns the new inbox head once a command is accepted."""
        result: list[int] = []

        def waiter() -> None:
            result.append(store.wait_for_inbox(key, 0, _GUARD))

        def writer() -> None:
            time.sleep(0.05)
            store.inbox_append(key, command())

        run_threads([waiter, writer])
        assert result == [1]
        assert store.wait_for_inbox(key, 1, 0.05) == 1

    def test_close_wakes_waiters(self, store: SessionStore, key: SessionKey) -> None:
        """Closing the store wakes a thread blocked in wait_for_head without raising."""
        result: list[int] = []

        def waiter() -> None:
            result.append(store.wait_for_head(key, 0, _GUARD))

        def closer() -> None:
            time.sleep(0.05)
            store.close()

        started = time.monotonic()
        run_threads([waiter, closer])
        assert result == [0]
        assert time.monotonic() - started < _GUARD

    def test_follow_yields_every_event_once_in_order(
        self, store: SessionStore, key: SessionKey
    ) -> None:
        """SessionLog.follow yields each committed event exactly once, in seq order."""
        log = SessionLog(store, key)
        total = 300
        got: list[Event] = []

        def writer() -> None:
            written = 0
            while written < total:
                size = min(1 + written % 7, total - written)
                log.append([step(i) for i in range(size)], expected_seq=written)
                written += size
                if written % 50 < 7:
                    time.sleep(0.005)

        def follower() -> None:
            for event in log.follow(0, idle_timeout=_GUARD):
                got.append(event)
                if event.seq == total:
                    break

        run_threads([writer, follower])
        assert [e.seq for e in got] == list(range(1, total + 1))
        assert got == list(log.scan())
        assert list(log.follow(total, idle_timeout=0.05)) == []

    def test_follow_starts_after_the_given_position(
        self, store: SessionStore, key: SessionKey
    ) -> None:
        """follow(after) yields only events with seq > after and stops when idle."""
        log = SessionLog(store, key)
        self.fill(store, key, 10)
        follow = log.follow(7, idle_timeout=0.05)
        assert [e.seq for e in follow] == [8, 9, 10]
        assert follow.position == 10

    def test_async_follow_yields_every_event_once_in_order(
        self, store: SessionStore, key: SessionKey
    ) -> None:
        """async for over SessionLog.follow yields each committed event once, in order."""
        log = SessionLog(store, key)
        total = 120

        def writer() -> None:
            for i in range(total // 4):
                log.append([step(j) for j in range(4)], expected_seq=i * 4)
                if i % 5 == 0:
                    time.sleep(0.01)

        async def follow() -> list[Event]:
            got: list[Event] = []
            async for event in log.follow(0, idle_timeout=_GUARD):
                got.append(event)
                if event.seq == total:
                    break
            return got

        thread = threading.Thread(target=writer, daemon=True)
        thread.start()
        got = asyncio.run(follow())
        thread.join(_GUARD)
        assert [e.seq for e in got] == list(range(1, total + 1))

        async def idle() -> list[Event]:
            return [e async for e in log.follow(total, idle_timeout=0.1)]

        assert asyncio.run(idle()) == []

    def test_follow_close_stops_it(self, store: SessionStore, key: SessionKey) -> None:
        """Follow.close() ends a follow that is waiting with no idle timeout."""
        log = SessionLog(store, key)
        follow = log.follow(0)
        got: list[int] = []
        first = threading.Event()

        def follower() -> None:
            for event in follow:
                got.append(event.seq)
                first.set()

        def driver() -> None:
            log.append([step()], expected_seq=0)
            assert first.wait(_GUARD)
            follow.close()

        run_threads([follower, driver])
        assert got == [1]

    def test_async_follow_close_stops_it(self, store: SessionStore, key: SessionKey) -> None:
        """Follow.close() ends an async follow that is waiting with no idle timeout."""
        log = SessionLog(store, key)
        log.append([step()], expected_seq=0)
        follow = log.follow(0)

        async def run() -> list[int]:
            got: list[int] = []
            async for event in follow:
                got.append(event.seq)
                follow.close()
            return got

        assert asyncio.run(asyncio.wait_for(run(), _GUARD)) == [1]

    def test_follow_stops_when_the_store_closes(self, store: SessionStore, key: SessionKey) -> None:
        """A follow with no idle timeout ends (without raising) when the store is closed."""
        log = SessionLog(store, key)
        got: list[int] = []

        def follower() -> None:
            got.extend(e.seq for e in log.follow(0))

        def closer() -> None:
            log.append([step()], expected_seq=0)
            time.sleep(0.1)
            store.close()

        run_threads([follower, closer])
        assert got == [1]

    def test_async_follow_stops_when_the_store_closes(
        self, store: SessionStore, key: SessionKey
    ) -> None:
        """An async follow with no idle timeout ends (without raising) when the store closes."""
        log = SessionLog(store, key)
        log.append([step()], expected_seq=0)

        async def run() -> list[int]:
            got: list[int] = []
            async for event in log.follow(0):
                got.append(event.seq)
                store.close()
            return got

        assert asyncio.run(asyncio.wait_for(run(), _GUARD)) == [1]

    def test_log_follow_rejects_negative_after(self, store: SessionStore, key: SessionKey) -> None:
        """SessionLog.follow with a negative position raises InvalidInput."""
        with pytest.raises(InvalidInput):
            SessionLog(store, key).follow(-1)

    def test_calls_after_close_raise_storage_error(
        self, store: SessionStore, key: SessionKey
    ) -> None:
        """Once closed, every call raises StorageError (never a driver error); closing twice is
        harmless."""
        store.append(key, [step()], expected_seq=0, batch_id="b")
        store.close()
        calls: list[Callable[[], object]] = [
            lambda: store.head(key),
            lambda: store.append(key, [step()], expected_seq=1, batch_id="b2"),
            lambda: store.read_after(key, 0, 10),
            lambda: store.inbox_append(key, command()),
            lambda: store.acquire_lease(key, "owner"),
            lambda: store.create_session(session_key("new")),
        ]
        for call in calls:
            with pytest.raises(StorageError):
                call()
        store.close()

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

    # -- access tokens ------------------------------------------------------------------------

    def test_token_round_trips_without_the_token(
        self, store: SessionStore, clock: FakeClock
    ) -> None:
        """add_token keeps user, label, digest and the creation time; get_token reads it."""
        added = store.add_token("tok_a", "alice", _DIGEST_A, label="laptop")
        assert added.created_at == clock.now()
        found = store.get_token("tok_a")
        assert found == added
        assert (found.user_id, found.label, found.digest) == ("alice", "laptop", _DIGEST_A)
        assert found.last_used_at is None
        assert found.revoked_at is None
        assert found.usable(clock.now())
        assert store.get_token("tok_missing") is None

    def test_token_id_is_never_reused(self, store: SessionStore) -> None:
        """A second add_token with an id in use raises InvalidInput and keeps the first."""
        store.add_token("tok_a", "alice", _DIGEST_A)
        with pytest.raises(InvalidInput, match="in use"):
            store.add_token("tok_a", "bob", _DIGEST_B)
        found = store.get_token("tok_a")
        assert found is not None
        assert found.user_id == "alice"

    def test_bad_token_fields_are_invalid_input(self, store: SessionStore) -> None:
        """A digest that is not SHA-256 hex, a bad id or a long label writes nothing."""
        for bad in ("", "xyz", _DIGEST_A.upper(), _DIGEST_A[:-1]):
            with pytest.raises(InvalidInput):
                store.add_token("tok_a", "alice", bad)
        with pytest.raises(InvalidInput):
            store.add_token("", "alice", _DIGEST_A)
        with pytest.raises(InvalidInput):
            store.add_token("tok_a", "alice", _DIGEST_A, label="x" * 10_000)
        with pytest.raises(InvalidInput):
            store.add_token("tok_a", "alice", _DIGEST_A, expires_at=float("nan"))
        assert store.list_tokens() == []

    def test_list_tokens_by_user_oldest_first(self, store: SessionStore, clock: FakeClock) -> None:
        """list_tokens lists every record (of one user if asked) by creation time."""
        store.add_token("tok_b", "alice", _DIGEST_A)
        clock.advance(1)
        store.add_token("tok_a", "bob", _DIGEST_B)
        clock.advance(1)
        store.add_token("tok_c", "alice", _DIGEST_B, parent="tok_b", expires_at=clock.now() + 9)
        assert [t.token_id for t in store.list_tokens()] == ["tok_b", "tok_a", "tok_c"]
        assert [t.token_id for t in store.list_tokens("alice")] == ["tok_b", "tok_c"]
        assert store.list_tokens("carol") == []

    def test_touch_token_moves_last_used_forward_only(
        self, store: SessionStore, clock: FakeClock
    ) -> None:
        """touch_token records the time of use; an unknown id changes nothing."""
        store.add_token("tok_a", "alice", _DIGEST_A)
        clock.advance(5)
        store.touch_token("tok_a")
        found = store.get_token("tok_a")
        assert found is not None
        assert found.last_used_at == clock.now()
        store.touch_token("tok_missing")

    def test_revoke_token_revokes_its_sign_ins(self, store: SessionStore, clock: FakeClock) -> None:
        """revoke_token revokes the token and the sign-ins made with it, not others."""
        store.add_token("tok_a", "alice", _DIGEST_A)
        store.add_token("tok_s", "alice", _DIGEST_B, parent="tok_a", expires_at=clock.now() + 60)
        store.add_token("tok_o", "alice", _DIGEST_B)
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
        added = store.add_token("tok_s", "alice", _DIGEST_A, expires_at=clock.now() + 10)
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
            store.add_token("tok_a", "alice", _DIGEST_A)
            found = peer.get_token("tok_a")
            assert found is not None
            assert found.digest == _DIGEST_A
            peer.revoke_token("tok_a")
            again = store.get_token("tok_a")
            assert again is not None
            assert again.revoked_at is not None
        finally:
            peer.close()

    # -- secret -------------------------------------------------------------------------------

    def test_secret_is_32_stable_bytes(self, store: SessionStore) -> None:
        """secret() is 32 bytes and the same on every call."""
        secret = store.secret()
        assert isinstance(secret, bytes)
        assert len(secret) == 32
        assert store.secret() == secret


def _require_text(data: Any) -> Any:
    if not isinstance(data.get("text"), str):
        raise ValueError("text must be a string")
    return data
