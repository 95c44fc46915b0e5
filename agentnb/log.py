"""``SessionLog`` and ``Inbox``: one session's two ordered logs, over any ``SessionStore``.

The log is what every other layer reads: projections fold it, widgets follow it, exporters
drain it. It never executes anything. ``follow`` yields each committed event exactly once, in
seq order, from this process or any other sharing the store.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any

from agentnb.errors import InvalidInput
from agentnb.events import Event, canonical_json
from agentnb.ids import SessionKey, check_id, new_id
from agentnb.limits import check_json_chars
from agentnb.stores.base import Lease, SessionStore

__all__ = ["Follow", "Inbox", "SessionLog"]

_FOLLOW_BATCH = 256
_ReadFn = Callable[[int, int], list[Event]]
_WaitFn = Callable[[int, float], int | None]
_ASYNC_WAIT_SLICE = 0.25  # seconds a worker thread waits before the coroutine checks in


class Follow:
    """A live view of committed events after a position: iterate it sync or async.

    Stops when ``stop`` is set, when ``idle_timeout`` seconds pass with no new event, or when
    the store is closed; otherwise it waits for new commits.
    """

    def __init__(
        self,
        read: _ReadFn,
        wait: _WaitFn,
        after: int,
        idle_timeout: float | None,
        stop: threading.Event | None,
    ) -> None:
        self._read = read
        self._wait = wait
        self.position = after
        """Seq of the last event yielded."""
        self._idle = idle_timeout
        self._stop = stop or threading.Event()

    def close(self) -> None:
        """Stop following (a waiting iterator returns within one poll interval)."""
        self._stop.set()

    def _next_batch(self, slice_: float | None) -> list[Event] | None:
        """Events after the position, waiting up to the idle timeout; None when done."""
        deadline = None if self._idle is None else time.monotonic() + self._idle
        while not self._stop.is_set():
            events = self._read(self.position, _FOLLOW_BATCH)
            if events:
                self.position = events[-1].seq
                return events
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                # For the async form the deadline is only a slice: [] means "check in again".
                return None if slice_ is None else []
            wait = 0.5 if remaining is None else min(remaining, 0.5)
            if slice_ is not None:
                wait = min(wait, slice_)
            if self._wait(self.position, wait) is None:
                return None
            if slice_ is not None:
                return []
        return None

    def __iter__(self) -> Iterator[Event]:
        while (batch := self._next_batch(None)) is not None:
            yield from batch

    async def _agen(self) -> AsyncIterator[Event]:
        deadline = None if self._idle is None else time.monotonic() + self._idle
        saved, self._idle = self._idle, _ASYNC_WAIT_SLICE
        try:
            while not self._stop.is_set():
                batch = await asyncio.to_thread(self._next_batch, _ASYNC_WAIT_SLICE)
                if batch is None:  # stopped, or the store was closed
                    return
                if batch:
                    deadline = None if saved is None else time.monotonic() + saved
                    for event in batch:
                        yield event
                elif deadline is not None and time.monotonic() >= deadline:
                    return
        finally:
            self._idle = saved

    def __aiter__(self) -> AsyncIterator[Event]:
        return self._agen()


class SessionLog:
    """The ordered execution log of one session."""

    def __init__(self, store: SessionStore, key: SessionKey) -> None:
        if not isinstance(store, SessionStore):
            raise InvalidInput(f"store must be a SessionStore, got {type(store).__name__}")
        if not isinstance(key, SessionKey):
            raise InvalidInput(f"key must be a SessionKey, got {type(key).__name__}")
        self.store = store
        self.key = key

    def head(self) -> int:
        """Last committed seq; 0 when the session is empty."""
        return self.store.head(self.key)

    def scan(self, after: int = 0, through: int | None = None) -> Iterator[Event]:
        """Committed events in ``(after, through]``; through defaults to the head now."""
        return self.store.scan(self.key, after, through)

    def read_after(self, seq: int, limit: int = 100) -> list[Event]:
        """Up to ``limit`` committed events after ``seq``."""
        return self.store.read_after(self.key, seq, limit)

    def follow(
        self,
        after: int = 0,
        *,
        idle_timeout: float | None = None,
        stop: threading.Event | None = None,
    ) -> Follow:
        """Committed events after ``after`` as they commit (``for`` or ``async for``)."""
        if not isinstance(after, int) or after < 0:
            raise InvalidInput(f"after must be a non-negative int, got {after!r}")

        def wait(pos: int, timeout: float) -> int | None:
            if self.store._closed:
                return None
            head = self.store.wait_for_head(self.key, pos, timeout)
            return None if self.store._closed else head

        def read(pos: int, limit: int) -> list[Event]:
            # A closed store ends the follow (through wait) instead of failing the read.
            return [] if self.store._closed else self.read_after(pos, limit)

        return Follow(read, wait, after, idle_timeout, stop)

    def append(
        self,
        events: Sequence[Event],
        *,
        expected_seq: int,
        batch_id: str | None = None,
        fence: Lease | None = None,
    ) -> list[Event]:
        """Commit a batch (see ``SessionStore.append``); returns the committed events."""
        return self.store.append(
            self.key,
            events,
            expected_seq=expected_seq,
            batch_id=batch_id or new_id("batch"),
            fence=fence,
        )

    def __repr__(self) -> str:
        return f"SessionLog({self.key})"


class Inbox:
    """The durable command queue of one session: many writers, one ordered sequence."""

    def __init__(self, store: SessionStore, key: SessionKey) -> None:
        self.store = store
        self.key = key

    def head(self) -> int:
        return self.store.inbox_head(self.key)

    def read_after(self, seq: int, limit: int = 100) -> list[Event]:
        return self.store.inbox_read_after(self.key, seq, limit)

    def scan(self, after: int = 0) -> Iterator[Event]:
        pos = after
        while batch := self.read_after(pos, 1_000):
            yield from batch
            pos = batch[-1].seq

    def accept(
        self,
        kind: str,
        *,
        command_id: str | None = None,
        key: str | None = None,
        turn_id: str | None = None,
        run_id: str | None = None,
        input: str | None = None,
        data: dict[str, Any] | None = None,
    ) -> tuple[Event, bool]:
        """Durably accept a command; returns (``inbox/accepted`` event, created).

        With ``key`` (an idempotency key) a re-send with the same meaning returns the original
        record; with another meaning it raises ``IdempotencyConflict``.
        """
        if key is not None:
            check_id(key, "key")
        # The one character rule for text entering a session, whichever door it came by.
        check_json_chars([input, data], f"the {kind} command's text")
        command_id = command_id or new_id("cmd")
        payload = {
            "command_id": command_id,
            "kind": kind,
            "turn_id": turn_id,
            "run_id": run_id,
            "input": input,
            "key": key,
            "data": data or {},
        }
        event = Event.create("inbox/accepted", payload, turn_id=turn_id, run_id=run_id)
        # A submit allocates its turn id, so a retry differs there; meaning is the rest.
        target = None if kind == "submit" else turn_id
        fingerprint = canonical_json([kind, target, run_id, input, data or {}])
        return self.store.inbox_append(self.key, event, dedupe_key=key, fingerprint=fingerprint)

    def record(
        self,
        type_: str,
        payload: dict[str, Any],
        *,
        turn_id: str | None = None,
        run_id: str | None = None,
    ) -> Event:
        """Append a non-command inbox event (``inbox/handled``, ``inbox/rejected``, ...)."""
        event, _ = self.store.inbox_append(
            self.key, Event.create(type_, payload, turn_id=turn_id, run_id=run_id)
        )
        return event

    def follow(
        self,
        after: int = 0,
        *,
        idle_timeout: float | None = None,
        stop: threading.Event | None = None,
    ) -> Follow:
        def wait(pos: int, timeout: float) -> int | None:
            if self.store._closed:
                return None
            head = self.store.wait_for_inbox(self.key, pos, timeout)
            return None if self.store._closed else head

        def read(pos: int, limit: int) -> list[Event]:
            # A closed store ends the follow (through wait) instead of failing the read.
            return [] if self.store._closed else self.read_after(pos, limit)

        return Follow(read, wait, after, idle_timeout, stop)
