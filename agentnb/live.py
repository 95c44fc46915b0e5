"""Live notifications of this process: chunks before they commit, status changes.

Never a commit acknowledgement (read the log for that). Each subscriber has a bounded
buffer; a subscriber that falls behind gets one ``Lagged`` marker instead of stalling the
runtime, and continues with the newest notifications.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from agentnb.errors import InvalidInput
from agentnb.ids import SessionKey

__all__ = ["MAX_BUFFER", "Lagged", "LiveEvent", "LiveHub", "Subscription"]

MAX_BUFFER = 1_000_000
"""The most notifications one subscriber may buffer."""


@dataclass(frozen=True, slots=True)
class LiveEvent:
    """A notification: ``kind`` (``model/chunk``, ``tool/chunk``, ``status``, ``committed``).

    ``session`` is the session it belongs to.
    """

    kind: str
    turn_id: str | None = None
    run_id: str | None = None
    data: dict[str, Any] = field(default_factory=dict)
    session: SessionKey | None = None


@dataclass(frozen=True, slots=True)
class Lagged:
    """This subscriber fell behind and ``dropped`` notifications were skipped."""

    dropped: int


class Subscription:
    """An iterator of ``LiveEvent`` / ``Lagged``; ``close()`` ends it."""

    def __init__(self, hub: LiveHub, maxsize: int, session: SessionKey | None = None) -> None:
        self._hub = hub
        self.session = session
        """Only this session's notifications (None: every session's)."""
        self._queue: queue.Queue[LiveEvent | None] = queue.Queue(maxsize)
        self._dropped = 0
        self._lock = threading.Lock()
        self.closed = False

    def _offer(self, event: LiveEvent) -> None:
        with self._lock:
            try:
                self._queue.put_nowait(event)
            except queue.Full:
                self._dropped += 1

    def get(self, timeout: float | None = None) -> LiveEvent | Lagged | None:
        """The next notification, or None on timeout or after close."""
        with self._lock:
            if self._dropped:
                dropped, self._dropped = self._dropped, 0
                return Lagged(dropped)
        try:
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            return None

    def __iter__(self) -> Iterator[LiveEvent | Lagged]:
        while not self.closed:
            item = self.get(timeout=0.25)
            if item is not None:
                yield item

    def close(self) -> None:
        self.closed = True
        self._hub._unsubscribe(self)
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(None)


class LiveHub:
    """Fan-out of live notifications to subscribers; publishing never blocks."""

    def __init__(self) -> None:
        self._subs: list[Subscription] = []
        self._watchers: list[tuple[SessionKey | None, Callable[[LiveEvent], None]]] = []
        self._lock = threading.Lock()

    def subscribe(self, maxsize: int = 1000, *, session: SessionKey | None = None) -> Subscription:
        """A new subscriber: to ``session``'s notifications, or to every session's (None).

        ``maxsize`` (an int in 1..``MAX_BUFFER``) is how many notifications it buffers
        before it lags; anything else is ``InvalidInput`` (a queue of size 0 or less would
        be unbounded).
        """
        if (
            isinstance(maxsize, bool)
            or not isinstance(maxsize, int)
            or not 1 <= maxsize <= MAX_BUFFER
        ):
            raise InvalidInput(
                f"maxsize must be an int in 1..{MAX_BUFFER:,} (the notifications buffered "
                f"before a slow reader gets a Lagged marker), got {maxsize!r}"
            )
        sub = Subscription(self, maxsize, session)
        with self._lock:
            self._subs.append(sub)
        return sub

    def _unsubscribe(self, sub: Subscription) -> None:
        with self._lock:
            if sub in self._subs:
                self._subs.remove(sub)

    def watch(
        self, callback: Callable[[LiveEvent], None], *, session: SessionKey | None = None
    ) -> Callable[[], None]:
        """Call ``callback`` with each notification of ``session`` (None: of every session),
        on the publisher's thread; returns the unwatch. The callback must not block (hand
        the event over, e.g. with ``loop.call_soon_threadsafe``); an exception it raises is
        dropped, never the publisher's."""
        entry = (session, callback)
        with self._lock:
            self._watchers.append(entry)

        def unwatch() -> None:
            with self._lock:
                if entry in self._watchers:
                    self._watchers.remove(entry)

        return unwatch

    def publish(self, event: LiveEvent) -> None:
        with self._lock:
            subs = list(self._subs)
            watchers = list(self._watchers)
        for sub in subs:
            if sub.session is None or sub.session == event.session:
                sub._offer(event)
        for session, callback in watchers:
            if session is None or session == event.session:
                with contextlib.suppress(Exception):
                    callback(event)
