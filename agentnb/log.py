"""``SessionLog`` and ``Inbox``: one session's two ordered logs, over any ``SessionStore``.

The log is what every other layer reads: projections fold it, widgets follow it, exporters
drain it. It never executes anything. ``follow`` yields each committed event exactly once, in
seq order, from this process or any other sharing the store. A ``Tail`` is how every
follower of this process reads: the commits of its own store object come by the commit bus
(``agentnb.bus``) as they were committed, and only a start, a gap or another process's commit
is read from the store.
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any

from agentnb.bus import BUS_BUFFER
from agentnb.errors import InvalidInput
from agentnb.events import Event, canonical_json
from agentnb.ids import SessionKey, check_id, new_id
from agentnb.limits import check_json_chars
from agentnb.live import Lagged
from agentnb.stores.base import Lease, SessionStore

__all__ = ["Follow", "Inbox", "SessionLog", "Tail"]

_FOLLOW_BATCH = 256
_WaitFn = Callable[[int, float], int | None]
_ASYNC_WAIT_SLICE = 0.25  # seconds a worker thread waits before the coroutine checks in


class Tail:
    """The committed events of one log of one session after ``position``, read in order.

    What this process's store object commits after the tail was made comes from the bus
    (``store.bus``), as committed; the store is read at the start, after a gap (a
    ``Lagged`` marker, or a batch that does not follow on: a commit the bus did not carry)
    and for other processes' commits. Call ``read`` when a wait said the head moved;
    ``close()`` unsubscribes.
    """

    def __init__(
        self,
        store: SessionStore,
        key: SessionKey,
        after: int,
        *,
        inbox: bool = False,
        maxsize: int = BUS_BUFFER,
    ) -> None:
        self.store = store
        self.key = key
        self.inbox = inbox
        self.position = after
        """Seq of the last event read."""
        self._sub = store.bus.subscribe(key, inbox=inbox, maxsize=maxsize)
        self._held: collections.deque[Event] = collections.deque()
        """Events from the bus that follow ``position`` without a gap."""
        self.from_store = 0
        """Events read from the store so far (a start, gaps, other processes' commits)."""

    def _pull(self) -> None:
        held = self._held
        for item in self._sub.take():
            if isinstance(item, Lagged):
                return  # what follows the gap is read from the store
            for event in item:
                last = held[-1].seq if held else self.position
                if event.seq <= last:
                    continue  # read from the store meanwhile
                if event.seq != last + 1:
                    return  # a gap: the store fills it once the held events are read
                held.append(event)

    def read(self, limit: int = _FOLLOW_BATCH) -> list[Event]:
        """Up to ``limit`` events after ``position`` (none when nothing more is committed)."""
        self._pull()
        held = self._held
        if held:
            out = [held.popleft() for _ in range(min(limit, len(held)))]
        else:
            if self.store.closed:
                return []
            if self.inbox:
                out = self.store.inbox_read_after(self.key, self.position, limit)
            else:
                out = self.store.read_after(self.key, self.position, limit)
            self.from_store += len(out)
        if out:
            self.position = out[-1].seq
        return out

    def skip_to(self, seq: int) -> None:
        """Go on after ``seq`` without reading what lies before it."""
        self.position = max(self.position, seq)
        held = self._held
        while held and held[0].seq <= self.position:
            held.popleft()

    def close(self) -> None:
        self._sub.close()
        self._held.clear()


class Follow:
    """A live view of committed events after a position: iterate it sync or async.

    Stops when ``stop`` is set, when ``idle_timeout`` seconds pass with no new event, or when
    the store is closed; otherwise it waits for new commits. It reads through a ``Tail``
    (made with the follow, closed when an iteration ends): this process's commits come by the
    bus, not back from the store.
    """

    def __init__(
        self,
        tail: Callable[[int], Tail],
        wait: _WaitFn,
        after: int,
        idle_timeout: float | None,
        stop: threading.Event | None,
    ) -> None:
        self._make_tail = tail
        # Made now: whatever commits after ``follow()`` comes by the bus, however late the
        # iteration starts (a tail nobody iterates leaves the bus when it is collected).
        self._tail: Tail | None = tail(after)
        self._wait = wait
        self.position = after
        """Seq of the last event yielded."""
        self._head: int | None = None
        """The head the last wait returned (None: not known, read first)."""
        self._idle = idle_timeout
        self._stop = stop or threading.Event()

    def close(self) -> None:
        """Stop following (a waiting iterator returns within one poll interval)."""
        self._stop.set()
        self._end()

    def _end(self) -> None:
        tail, self._tail = self._tail, None
        if tail is not None:
            tail.close()

    def _next_batch(self, slice_: float | None) -> list[Event] | None:
        """Events after the position, waiting up to the idle timeout; None when done."""
        deadline = None if self._idle is None else time.monotonic() + self._idle
        if self._tail is None:
            self._tail = self._make_tail(self.position)
        tail = self._tail
        while not self._stop.is_set():
            if self._head is None or self._head > self.position:
                events = tail.read(_FOLLOW_BATCH)
                if events:
                    self.position = events[-1].seq
                    return events
                self._head = self.position  # nothing there after all: wait for more
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                # For the async form the deadline is only a slice: [] means "check in again".
                return None if slice_ is None else []
            wait = 0.5 if remaining is None else min(remaining, 0.5)
            if slice_ is not None:
                wait = min(wait, slice_)
            self._head = self._wait(self.position, wait)
            if self._head is None:
                return None
            if slice_ is not None and self._head <= self.position:
                return []
        return None

    def __iter__(self) -> Iterator[Event]:
        try:
            while (batch := self._next_batch(None)) is not None:
                yield from batch
        finally:
            self._end()

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
            self._end()

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
            if self.store.closed:
                return None
            head = self.store.wait_for_head(self.key, pos, timeout)
            return None if self.store.closed else head

        def tail(pos: int) -> Tail:
            return Tail(self.store, self.key, pos)

        return Follow(tail, wait, after, idle_timeout, stop)

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
            if self.store.closed:
                return None
            head = self.store.wait_for_inbox(self.key, pos, timeout)
            return None if self.store.closed else head

        def tail(pos: int) -> Tail:
            return Tail(self.store, self.key, pos, inbox=True)

        return Follow(tail, wait, after, idle_timeout, stop)
