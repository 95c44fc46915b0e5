"""Group commit on SQLite: appends of several sessions that are ready together share one
transaction, and each keeps its own checks (one refusal never fails another's append)."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentnb.errors import AppendConflict, Fenced, InboxChanged
from agentnb.ids import SessionKey, new_id
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
