"""Group commit on SQLite: appends of several sessions that are ready together share one
transaction, and each keeps its own checks (one refusal never fails another's append)."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentnb.errors import AppendConflict, Fenced, InboxChanged, StorageError
from agentnb.ids import SessionKey, new_id
from agentnb.stores import sqlite as sqlite_store
from agentnb.stores.sqlite import SQLiteStore
from agentnb.testing.store_contract import command, session_key, step

THREADS = 8
ROUNDS = 15


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    store = SQLiteStore(tmp_path / "agentnb.sqlite")
    try:
        yield store
    finally:
        store.close()


@pytest.fixture
def groups(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Sizes of the groups committed; each commit is slowed a little, as a slow disk would
    be, so appends that arrive meanwhile queue behind it."""
    sizes: list[int] = []
    original = SQLiteStore._commit_group

    def slow_commit(self: SQLiteStore, writes: list[Any]) -> None:
        sizes.append(len(writes))
        time.sleep(0.005)
        original(self, writes)

    monkeypatch.setattr(SQLiteStore, "_commit_group", slow_commit)
    return sizes


def _sessions(store: SQLiteStore, n: int) -> list[SessionKey]:
    keys = [session_key(f"s{i}") for i in range(n)]
    for key in keys:
        store.create_session(key)
    return keys


def _at_once(jobs: list[Any]) -> list[BaseException | None]:
    """Run the callables on their own threads, released together; what each raised."""
    start = threading.Barrier(len(jobs))
    errors: list[BaseException | None] = [None] * len(jobs)

    def run(i: int) -> None:
        start.wait()
        try:
            jobs[i]()
        except BaseException as exc:
            errors[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return errors


def test_sessions_appending_together_share_commits(
    store: SQLiteStore, groups: list[int], tmp_path: Path
) -> None:
    keys = _sessions(store, THREADS)

    def writer(key: SessionKey) -> None:
        for i in range(ROUNDS):
            store.append(key, [step(i), step(i)], expected_seq=2 * i, batch_id=new_id("b"))

    assert _at_once([lambda k=k: writer(k) for k in keys]) == [None] * THREADS
    appends = THREADS * ROUNDS
    assert sum(groups) == appends  # every append committed exactly once
    assert max(groups) > 1  # they shared transactions
    assert len(groups) < appends
    for key in keys:
        events = store.read_after(key, 0, 1000)
        assert [e.seq for e in events] == list(range(1, 2 * ROUNDS + 1))
    # Another connection sees every row (the groups committed, nothing is left open).
    conn = sqlite3.connect(tmp_path / "agentnb.sqlite")
    try:
        assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == 2 * appends
    finally:
        conn.close()


def test_a_conflict_in_a_group_fails_only_its_own_append(
    store: SQLiteStore, groups: list[int]
) -> None:
    keys = _sessions(store, THREADS)
    for key in keys:
        store.append(key, [step()], expected_seq=0, batch_id=new_id("b"))
    groups.clear()
    # Session 0 appends as if it had not seen its first event: a conflict.
    expected = [0] + [1] * (THREADS - 1)
    errors = _at_once(
        [
            lambda k=k, e=e: store.append(k, [step(2)], expected_seq=e, batch_id=new_id("b"))
            for k, e in zip(keys, expected, strict=True)
        ]
    )
    assert isinstance(errors[0], AppendConflict)
    assert errors[1:] == [None] * (THREADS - 1)
    assert store.head(keys[0]) == 1
    assert all(store.head(k) == 2 for k in keys[1:])


def test_a_fenced_append_in_a_group_fails_only_itself(
    store: SQLiteStore, groups: list[int]
) -> None:
    keys = _sessions(store, THREADS)
    leases = [store.acquire_lease(k, f"owner-{i}", ttl=30) for i, k in enumerate(keys)]
    # Session 0's lease is taken over: its old holder is fenced.
    store.release_lease(leases[0])
    store.acquire_lease(keys[0], "new-owner", ttl=30)
    errors = _at_once(
        [
            lambda k=k, lease=lease: store.append(
                k, [step()], expected_seq=0, batch_id=new_id("b"), fence=lease
            )
            for k, lease in zip(keys, leases, strict=True)
        ]
    )
    assert isinstance(errors[0], Fenced)
    assert errors[1:] == [None] * (THREADS - 1)
    assert store.head(keys[0]) == 0
    assert all(store.head(k) == 1 for k in keys[1:])


def test_a_failed_group_commit_reaches_every_waiter(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the group's transaction itself fails, every append in it hears the error, and
    the next append commits again (nothing is left half written or waiting)."""
    keys = _sessions(store, THREADS)
    original = SQLiteStore._commit_group
    failing = threading.Event()
    failing.set()

    def commit(self: SQLiteStore, writes: list[Any]) -> None:
        time.sleep(0.005)
        if failing.is_set():
            raise sqlite3.OperationalError("disk I/O error")
        original(self, writes)

    monkeypatch.setattr(SQLiteStore, "_commit_group", commit)
    errors = _at_once(
        [lambda k=k: store.append(k, [step()], expected_seq=0, batch_id=new_id("b")) for k in keys]
    )
    assert all(isinstance(e, sqlite3.OperationalError) for e in errors)
    assert all(store.head(k) == 0 for k in keys)
    failing.clear()
    errors = _at_once(
        [lambda k=k: store.append(k, [step()], expected_seq=0, batch_id=new_id("b")) for k in keys]
    )
    assert errors == [None] * THREADS
    assert all(store.head(k) == 1 for k in keys)


def test_a_refusal_after_rows_were_written_rolls_back_only_that_append(
    store: SQLiteStore, groups: list[int]
) -> None:
    """The inbox check runs after the batch's first row is written: its savepoint takes
    that row back, and the rest of the group commits."""
    keys = _sessions(store, THREADS)
    store.inbox_append(keys[0], command("steer"))  # session 0's inbox moved on: head 1
    errors = _at_once(
        [
            lambda k=k: store.append(
                k, [step(), step()], expected_seq=0, batch_id=new_id("b"), expected_inbox=0
            )
            for k in keys
        ]
    )
    assert isinstance(errors[0], InboxChanged)
    assert errors[1:] == [None] * (THREADS - 1)
    assert store.head(keys[0]) == 0
    assert store.read_after(keys[0], 0, 10) == []
    assert all(store.head(k) == 2 for k in keys[1:])


# --------------------------------------------------------------------------------------------
# Writers of one process take turns before SQLite's lock: its busy handler, which sleeps a
# millisecond or more each time it finds the file locked, is met only by other processes.


def _every_kind_of_write(store: SQLiteStore, key: SessionKey, n: int) -> None:
    """Appends, accepted commands, a lease and snapshots of one session, one after another."""
    lease = store.acquire_lease(key, f"owner-{key.session_id}", ttl=30)
    for i in range(n):
        store.append(key, [step(i)], expected_seq=i, batch_id=new_id("b"), fence=lease)
        store.inbox_append(key, command(f"{key.session_id}-{i}"))
        store.put_snapshot(key, "cache", i + 1, b"x")
    store.release_lease(lease)


def test_writers_of_one_process_never_meet_a_locked_file(tmp_path: Path) -> None:
    """With no patience for a locked file at all (``busy_timeout=0``), writes of every kind
    from many threads and two store objects on one file all commit: they take turns."""
    path = tmp_path / "agentnb.sqlite"
    one = SQLiteStore(path, busy_timeout=0)
    two = SQLiteStore(path, busy_timeout=0)
    try:
        keys = _sessions(one, THREADS)
        stores = [one, two] * (THREADS // 2)
        errors = _at_once(
            [
                lambda s=s, k=k: _every_kind_of_write(s, k, ROUNDS)
                for s, k in zip(stores, keys, strict=True)
            ]
        )
        assert errors == [None] * THREADS
        for key in keys:
            assert one.head(key) == ROUNDS
            assert one.inbox_head(key) == ROUNDS
    finally:
        one.close()
        two.close()


def test_a_writer_kept_waiting_past_its_patience_hears_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write that waits for this process's other writers past its bound raises the
    typed error that says to retry; the write it waited for commits, and the retry does
    too."""
    monkeypatch.setattr(sqlite_store, "_TURN_TIMEOUT", 0.1)
    store = SQLiteStore(tmp_path / "agentnb.sqlite")
    try:
        first, second = _sessions(store, 2)
        original = SQLiteStore._commit_group
        inside = threading.Event()

        def slow_commit(self: SQLiteStore, writes: list[Any]) -> None:
            def slow(c: Any, write: Any = writes[0].write) -> None:
                inside.set()
                time.sleep(0.5)
                write(c)

            writes[0].write = slow
            original(self, writes)

        monkeypatch.setattr(SQLiteStore, "_commit_group", slow_commit)
        slow_append = threading.Thread(
            target=store.append,
            args=(first, [step()]),
            kwargs={"expected_seq": 0, "batch_id": "slow"},
        )
        slow_append.start()
        assert inside.wait(10)
        with pytest.raises(StorageError, match="locked by another writer"):
            store.inbox_append(second, command("late"))
        slow_append.join(10)
        assert store.head(first) == 1
        assert store.inbox_head(second) == 0
        store.inbox_append(second, command("late"))
        assert store.inbox_head(second) == 1
    finally:
        store.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_writes_although_a_parent_thread_held_the_turn(tmp_path: Path) -> None:
    """A child forked while another thread of the parent was writing starts with nobody
    holding the turn (that thread does not exist in the child)."""
    path = tmp_path / "agentnb.sqlite"
    store = SQLiteStore(path)
    try:
        (key,) = _sessions(store, 1)
        holding, done = threading.Event(), threading.Event()

        def hold() -> None:
            with store._writers.lock:  # the turn, taken as a write in progress takes it
                holding.set()
                done.wait(10)

        holder = threading.Thread(target=hold)
        holder.start()
        assert holding.wait(10)
        pid = os.fork()
        if pid == 0:  # the child: a store of its own on the same file
            code = 1
            try:
                child = SQLiteStore(path, busy_timeout=5)
                child.inbox_append(key, command("from the child"))
                child.close()
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        done.set()
        holder.join(10)
        assert os.waitstatus_to_exitcode(status) == 0
        assert store.inbox_head(key) == 1
    finally:
        store.close()
