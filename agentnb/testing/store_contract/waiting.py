"""The store contract of waiting for commits and following the logs."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest

from agentnb.errors import (
    InvalidInput,
    StorageError,
)
from agentnb.events import (
    Event,
)
from agentnb.ids import SessionKey
from agentnb.log import SessionLog
from agentnb.stores.base import (
    SessionStore,
)
from agentnb.testing.store_contract.support import (
    GUARD,
    ContractBase,
    command,
    run_threads,
    session_key,
    step,
)

__all__ = ["WaitingContract"]


class WaitingContract(ContractBase):
    """Waiting for commits and following the logs."""

    # -- waiting and following -------------------------------------------------------------------

    def test_wait_for_head_wakes_on_commit(self, store: SessionStore, key: SessionKey) -> None:
        """wait_for_head returns the new head once another thread commits."""
        waiting = threading.Event()
        result: list[int] = []

        def waiter() -> None:
            waiting.set()
            result.append(store.wait_for_head(key, 0, GUARD))

        def writer() -> None:
            waiting.wait(GUARD)
            time.sleep(0.05)
            store.append(key, [step()], expected_seq=0, batch_id="b")

        started = time.monotonic()
        run_threads([waiter, writer])
        assert result == [1]
        assert time.monotonic() - started < GUARD, "the waiter slept through the commit"

    def test_a_slow_polling_wait_still_wakes_on_this_objects_commits(
        self, store: SessionStore, key: SessionKey
    ) -> None:
        """With ``poll`` far longer than its wait, a waiter still wakes on a commit of this
        store object (log and inbox alike): only other writers' commits wait for a poll."""
        result: list[int] = []
        waiting = threading.Event()

        def waiter() -> None:
            waiting.set()
            result.append(store.wait_for_head(key, 0, GUARD, poll=3600))
            result.append(store.wait_for_inbox(key, 0, GUARD, poll=3600))

        def writer() -> None:
            waiting.wait(GUARD)
            time.sleep(0.05)
            store.append(key, [step()], expected_seq=0, batch_id="b")
            time.sleep(0.05)
            store.inbox_append(key, command("x"))

        started = time.monotonic()
        run_threads([waiter, writer])
        assert result == [1, 1]
        assert time.monotonic() - started < GUARD, "the waiter slept through the commit"

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
            result.append(store.wait_for_inbox(key, 0, GUARD))

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
            result.append(store.wait_for_head(key, 0, GUARD))

        def closer() -> None:
            time.sleep(0.05)
            store.close()

        started = time.monotonic()
        run_threads([waiter, closer])
        assert result == [0]
        assert time.monotonic() - started < GUARD

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
            for event in log.follow(0, idle_timeout=GUARD):
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
            async for event in log.follow(0, idle_timeout=GUARD):
                got.append(event)
                if event.seq == total:
                    break
            return got

        thread = threading.Thread(target=writer, daemon=True)
        thread.start()
        got = asyncio.run(follow())
        thread.join(GUARD)
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
            assert first.wait(GUARD)
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

        assert asyncio.run(asyncio.wait_for(run(), GUARD)) == [1]

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

        assert asyncio.run(asyncio.wait_for(run(), GUARD)) == [1]

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
