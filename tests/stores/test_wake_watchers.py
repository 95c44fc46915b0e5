"""``SessionStore.watch_wakes``: a follower that never sleeps in a thread (an event loop's
task, as a server's stream feed) is told of each wake-up of a session's waiters: a commit of
the store object once its readers have it, a PostgreSQL notification of another process's
commit, and the wake-up of every waiter at close."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentnb.stores.base import SessionStore
from agentnb.stores.memory import MemoryStore
from agentnb.stores.sqlite import SQLiteStore
from agentnb.testing.store_contract import command, session_key, step


class Told:
    """The wake-ups a watcher was told of (any thread)."""

    def __init__(self) -> None:
        self.seen: list[bool | None] = []
        self.event = threading.Event()

    def __call__(self, inbox: bool | None) -> None:
        self.seen.append(inbox)
        self.event.set()

    def wait(self) -> list[bool | None]:
        assert self.event.wait(10), "the watcher was never told"
        self.event.clear()
        return self.seen

    def wait_for(self, inbox: bool | None) -> None:
        """Until a wake-up of that kind came (others may come first: a PostgreSQL
        listener that connects wakes every waiter to read again)."""
        deadline = time.monotonic() + 10
        while inbox not in self.seen:
            assert time.monotonic() < deadline, f"never told {inbox!r}; told {self.seen}"
            self.event.wait(0.05)
        self.seen.clear()


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SessionStore]:
    made: SessionStore = (
        MemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "w.sqlite")
    )
    try:
        yield made
    finally:
        made.close()


def test_a_commit_and_a_command_tell_the_watcher_of_their_session(store: SessionStore) -> None:
    key, other = session_key("s1"), session_key("s2")
    store.create_session(key)
    store.create_session(other)
    told = Told()
    unwatch = store.watch_wakes(key, told)
    store.append(other, [step()], expected_seq=0, batch_id="b_other")
    store.inbox_append(other, command("elsewhere"))
    assert told.seen == []  # another session's commits wake its own watchers only
    store.append(key, [step()], expected_seq=0, batch_id="b_1")
    assert told.wait() == [False]
    store.inbox_append(key, command())
    assert told.wait()[-1] is not False  # the inbox moved (which can settle a turn too)
    n = len(told.seen)
    unwatch()
    store.append(key, [step(2)], expected_seq=1, batch_id="b_2")
    assert len(told.seen) == n


def test_a_commit_without_wake_tells_at_the_writers_wake(store: SessionStore) -> None:
    """A writer that hands its events over first (``wake=False``) tells at ``wake_waiters``."""
    key = session_key()
    store.create_session(key)
    told = Told()
    store.watch_wakes(key, told)
    store.append(key, [step()], expected_seq=0, batch_id="b_1", wake=False)
    assert told.seen == []
    store.wake_waiters(key, inbox=False)
    assert told.wait() == [False]


def test_close_tells_every_watcher(store: SessionStore) -> None:
    key = session_key()
    store.create_session(key)
    told = Told()
    store.watch_wakes(key, told)
    store.close()
    assert told.wait() == [None]


def test_a_failing_watcher_does_not_fail_the_commit(store: SessionStore) -> None:
    key = session_key()
    store.create_session(key)

    def broken(inbox: bool | None) -> None:
        raise RuntimeError("a watcher's bug")

    told = Told()
    store.watch_wakes(key, broken)
    store.watch_wakes(key, told)
    store.append(key, [step()], expected_seq=0, batch_id="b_1")
    assert told.wait() == [False]
    assert store.head(key) == 1


def test_postgres_tells_of_another_processes_commit(pg_url: str) -> None:
    """Another store object's commit (another process) arrives by NOTIFY: the watcher of
    this one is told without any read of its own."""
    from agentnb.stores.postgres import PostgresStore

    here, there = PostgresStore(pg_url), PostgresStore(pg_url)
    try:
        key = session_key("pg-wake")
        there.create_session(key)
        here.head(key)  # this object knows the session (its notifications name it)
        told = Told()
        here.watch_wakes(key, told)
        # The listener starts with the watch and connects in the background: a commit
        # before its LISTEN is covered by the wake-up of every waiter when it connects
        # (None); commits after it come by NOTIFY, each as the log's (False).
        seq, deadline = 0, time.monotonic() + 10
        while False not in told.seen:
            assert time.monotonic() < deadline, f"no notified commit; told {told.seen}"
            there.append(key, [step(seq + 1)], expected_seq=seq, batch_id=f"b_{seq}")
            seq += 1
            told.event.wait(0.2)
        told.seen.clear()
        there.inbox_append(key, command())
        told.wait_for(None)  # a command can settle a turn: both logs' waiters wake
    finally:
        here.close()
        there.close()
