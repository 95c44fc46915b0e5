"""The commit bus: a store object hands what it commits to this process's followers as it
is; a follower that lags, or misses a commit the bus did not carry, reads only the gap from
the store, and sees every event once, in order."""

from __future__ import annotations

import gc
import threading
from pathlib import Path

import pytest

import agentnb as nb
from agentnb.bus import CommitBus
from agentnb.errors import InvalidInput
from agentnb.events import Event
from agentnb.live import Lagged
from agentnb.log import SessionLog, Tail

KEY = nb.SessionKey("default", "alice", "agent", "s")


def _commit(store: nb.SessionStore, n: int = 1) -> list[Event]:
    head = store.head(KEY)
    events = [Event.create("acme/tick", {"n": head + i}, required=False) for i in range(n)]
    return store.append(KEY, events, expected_seq=head, batch_id=f"b{head}")


@pytest.fixture
def store(tmp_path: Path) -> nb.SessionStore:
    store = nb.open_store(f"sqlite:///{tmp_path / 'bus.sqlite'}")
    store.create_session(KEY)
    yield store
    store.close()


class TestBus:
    def test_a_subscriber_gets_the_committed_events_themselves(
        self, store: nb.SessionStore
    ) -> None:
        """The batch on the bus holds the very event objects the append returned."""
        sub = store.bus.subscribe(KEY)
        committed = _commit(store, 3)
        (batch,) = sub.take()
        assert not isinstance(batch, Lagged)
        assert all(a is b for a, b in zip(batch, committed, strict=True))

    def test_a_full_buffer_drops_and_marks_the_gap(self, store: nb.SessionStore) -> None:
        """Past ``maxsize`` events the publisher does not wait: one ``Lagged`` marker counts
        what was dropped, and the commits go on."""
        sub = store.bus.subscribe(KEY, maxsize=2)
        for _ in range(4):
            _commit(store)
        items = sub.take()
        assert [len(i) for i in items if not isinstance(i, Lagged)] == [1, 1]
        assert items[-1] == Lagged(2)
        assert store.head(KEY) == 4

    def test_other_sessions_and_the_inbox_are_apart(self, store: nb.SessionStore) -> None:
        """A subscriber of one session's log gets neither another session's commits nor its
        own inbox's."""
        other = nb.SessionKey("default", "alice", "agent", "t")
        store.create_session(other)
        sub = store.bus.subscribe(KEY)
        inbox = store.bus.subscribe(KEY, inbox=True)
        store.append(
            other, [Event.create("acme/tick", {}, required=False)], expected_seq=0, batch_id="o"
        )
        store.inbox_append(
            KEY,
            Event.create(
                "inbox/accepted",
                {
                    "command_id": "cmd_1",
                    "kind": "inject",
                    "turn_id": None,
                    "run_id": None,
                    "input": "x",
                    "key": None,
                    "data": {},
                },
            ),
        )
        assert sub.take() == []
        assert len(inbox.take()) == 1

    def test_a_watcher_that_fails_does_not_fail_the_commit(self, store: nb.SessionStore) -> None:
        """A watcher's exception is dropped: the commit stands and other watchers run."""
        seen: list[int] = []

        def broken(key: nb.SessionKey, batch: tuple[Event, ...]) -> None:
            raise RuntimeError("boom")

        store.bus.watch(KEY, broken)
        store.bus.watch(None, lambda key, batch: seen.extend(e.seq for e in batch))
        _commit(store, 2)
        assert seen == [1, 2]

    def test_a_bad_buffer_size_is_refused(self) -> None:
        """A buffer of no events is ``InvalidInput``."""
        with pytest.raises(InvalidInput, match="maxsize"):
            CommitBus().subscribe(KEY, maxsize=0)


class TestTail:
    def test_commits_come_from_the_bus_not_the_store(self, store: nb.SessionStore) -> None:
        """After its start, a tail reads nothing from the store for this object's commits."""
        _commit(store, 2)
        tail = Tail(store, KEY, 0)
        assert [e.seq for e in tail.read()] == [1, 2]  # the start: from the store
        committed = _commit(store, 3)
        events = tail.read()
        assert all(a is b for a, b in zip(events, committed, strict=True))
        assert tail.from_store == 2

    def test_a_lagging_tail_reads_the_gap_and_resyncs(self, store: nb.SessionStore) -> None:
        """A tail whose buffer overflowed reads what it missed from the store and goes on
        from the bus: every event once, in order."""
        tail = Tail(store, KEY, 0, maxsize=2)
        for _ in range(5):
            _commit(store)
        seqs = [e.seq for e in tail.read()]
        seqs += [e.seq for e in tail.read()]
        assert seqs == [1, 2, 3, 4, 5]
        assert tail.from_store == 3
        _commit(store)
        assert [e.seq for e in tail.read()] == [6]
        assert tail.from_store == 3

    def test_another_objects_commit_is_read_from_the_store(
        self, store: nb.SessionStore, tmp_path: Path
    ) -> None:
        """A commit through another store object (another process's, in effect) never comes
        by this bus: the tail fills that gap from the store, then takes the bus again."""
        tail = Tail(store, KEY, 0)
        _commit(store)
        other = nb.open_store(f"sqlite:///{tmp_path / 'bus.sqlite'}")
        try:
            _commit(other)
        finally:
            other.close()
        _commit(store)
        assert [e.seq for e in tail.read()] == [1]
        assert [e.seq for e in tail.read()] == [2, 3]
        assert tail.from_store == 2


class TestFollow:
    def test_follow_yields_this_process_commits_without_reading(
        self, store: nb.SessionStore
    ) -> None:
        """``log.follow`` yields this object's commits, once each and in order, as the very
        objects committed."""
        log = SessionLog(store, KEY)
        _commit(store)
        follow = log.follow(after=0, stop=threading.Event())
        it = iter(follow)
        assert next(it).seq == 1  # the start: from the store
        committed = _commit(store, 2)
        got = [next(it), next(it)]
        follow.close()
        assert [e.seq for e in got] == [2, 3]
        assert all(a is b for a, b in zip(got, committed, strict=True))

    def test_a_follow_never_iterated_leaves_the_bus(self, store: nb.SessionStore) -> None:
        """A follow made and dropped without iterating holds no buffer on the bus once it
        is collected: commits after it cost nothing."""
        follow = SessionLog(store, KEY).follow(after=0)
        assert store.bus.subscribers(KEY) == 1
        del follow
        gc.collect()
        assert store.bus.subscribers(KEY) == 0
