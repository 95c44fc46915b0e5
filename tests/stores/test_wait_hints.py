"""What a store object knows without asking the database (its hints), and whom a commit
wakes: the waiters of the log it moved, and a ``local`` waiter without a read per wake-up."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentnb.ids import SessionKey, new_id
from agentnb.stores.sqlite import SQLiteStore
from agentnb.testing.store_contract import command, session_key, step


class CountingStore(SQLiteStore):
    """Counts the head reads that go to the database."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.head_reads = 0
        self.inbox_head_reads = 0

    def _head(self, key: SessionKey) -> int:
        self.head_reads += 1
        return super()._head(key)

    def _inbox_head(self, key: SessionKey) -> int:
        self.inbox_head_reads += 1
        return super()._inbox_head(key)


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[tuple[CountingStore, CountingStore]]:
    """Two store objects on one file: what two processes are to each other."""
    one, two = CountingStore(tmp_path / "s.sqlite"), CountingStore(tmp_path / "s.sqlite")
    try:
        yield one, two
    finally:
        one.close()
        two.close()


def _append(store: SQLiteStore, key: SessionKey, head: int, n: int = 1) -> int:
    store.append(
        key, [step(head + i + 1) for i in range(n)], expected_seq=head, batch_id=new_id("b")
    )
    return head + n


def _in_thread(target: object) -> tuple[threading.Thread, list[int]]:
    out: list[int] = []
    thread = threading.Thread(target=lambda: out.append(target()))  # type: ignore[operator]
    thread.start()
    return thread, out


def test_hints_are_what_this_object_committed_or_read(
    stores: tuple[CountingStore, CountingStore],
) -> None:
    one, two = stores
    key = session_key()
    one.create_session(key)
    assert one.head_hint(key) == one.inbox_head_hint(key) == 0
    _append(one, key, 0, 3)
    one.inbox_append(key, command("a"))
    assert (one.head_hint(key), one.inbox_head_hint(key)) == (3, 1)
    # The other object has seen nothing yet: its hints stay low (a lower bound, never more).
    assert (two.head_hint(key), two.inbox_head_hint(key)) == (0, 0)
    assert two.inbox_head(key) == 1
    assert two.inbox_head_hint(key) == 1  # a read raises it
    two.inbox_append(key, command("b"))
    assert one.inbox_head_hint(key) == 1  # until it reads
    assert [e.seq for e in one.inbox_read_after(key, 0, 10)] == [1, 2]
    assert one.inbox_head_hint(key) == 2
    one.delete_session(key, by="test")
    assert one.head_hint(key) == one.inbox_head_hint(key) == 0


def test_commits_to_the_log_do_not_wake_inbox_waiters(
    stores: tuple[CountingStore, CountingStore],
) -> None:
    one, _ = stores
    one.poll_interval = 60.0  # only a notification can wake the waiter
    key = session_key()
    one.create_session(key)
    stop = threading.Event()
    thread, out = _in_thread(lambda: one.wait_for_inbox(key, 0, 30, stop=stop))
    deadline = time.monotonic() + 5
    while one.inbox_head_reads == 0 and time.monotonic() < deadline:
        time.sleep(0.005)
    head = 0
    for _ in range(5):
        head = _append(one, key, head)
    time.sleep(0.05)
    assert one.inbox_head_reads == 1  # slept through five commits of the other log
    one.inbox_append(key, command("go"))
    thread.join(5)
    assert out == [1]
    stop.set()


def test_a_local_waiter_wakes_at_its_commits_without_reading_back(
    stores: tuple[CountingStore, CountingStore],
) -> None:
    one, _ = stores
    one.poll_interval = 60.0  # the safety-net read does not come during the test
    key = session_key()
    one.create_session(key)
    head = _append(one, key, 0)
    one.head_reads = 0
    assert one.wait_for_head(key, 0, 5, local=True) == 1  # known: no read
    thread, out = _in_thread(lambda: one.wait_for_head(key, head, 5, local=True))
    time.sleep(0.02)
    _append(one, key, head)
    thread.join(5)
    assert out == [2]
    assert one.head_reads == 0


@pytest.mark.parametrize("inbox", [False, True], ids=["head", "inbox"])
def test_a_local_waiter_still_sees_another_writer_within_a_poll(
    stores: tuple[CountingStore, CountingStore], inbox: bool
) -> None:
    """A ``local`` waiter leaves the database to the poll; if another object writes anyway
    (the execution log despite the lease, or a command to the inbox a run's watcher
    watches), the waiter reads it within a poll_interval and returns."""
    one, two = stores
    key = session_key()
    one.create_session(key)
    wait = one.wait_for_inbox if inbox else one.wait_for_head
    thread, out = _in_thread(lambda: wait(key, 0, 10, local=True))
    time.sleep(0.02)
    started = time.monotonic()
    if inbox:
        two.inbox_append(key, command("from elsewhere"))
    else:
        _append(two, key, 0)
    thread.join(5)
    assert out == [1]
    assert time.monotonic() - started < 2.0


def test_a_local_inbox_waiter_wakes_at_this_objects_commands_without_a_read(
    stores: tuple[CountingStore, CountingStore],
) -> None:
    """A run's watcher (``local``): its fold holds what this object knows, so a command
    accepted here wakes it from the hint; the database is left to the poll."""
    one, _ = stores
    one.poll_interval = 60.0  # the safety-net read does not come during the test
    key = session_key()
    one.create_session(key)
    one.inbox_append(key, command("a"))
    one.inbox_head_reads = 0
    thread, out = _in_thread(lambda: one.wait_for_inbox(key, 1, 5, local=True))
    time.sleep(0.02)
    one.inbox_append(key, command("b"))
    thread.join(5)
    assert out == [2]
    assert one.inbox_head_reads == 0
