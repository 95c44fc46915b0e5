"""Live notifications of this process: chunks before they commit, status changes.

Never a commit acknowledgement (read the log for that). Each subscriber has a bounded
buffer (``DEFAULT_BUFFER`` = 1,000 notifications unless ``maxsize`` says otherwise); a
subscriber that falls behind gets one ``Lagged`` marker, where the gap is, with the number
of notifications it missed, instead of stalling the runtime, and continues with newer ones.
It resyncs from the log (``committed`` notifications carry the seq to read after).
"""

from __future__ import annotations

import collections
import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from agentnb.errors import InvalidInput
from agentnb.ids import SessionKey

__all__ = ["DEFAULT_BUFFER", "MAX_BUFFER", "Lagged", "LiveEvent", "LiveHub", "Subscription"]

MAX_BUFFER = 1_000_000
"""The most notifications one subscriber may buffer."""


@dataclass(frozen=True, slots=True)
class LiveEvent:
    """A notification: ``kind`` (``model/chunk``, ``tool/chunk``, ``status``, ``committed``).

    ``session`` is the session it belongs to. A ``status`` notification's ``data`` holds
    ``status`` (``running`` when a run starts, its end status when it ends) and ``task``,
    the task's own text.
    """

    kind: str
    turn_id: str | None = None
    run_id: str | None = None
    data: dict[str, Any] = field(default_factory=dict)
    session: SessionKey | None = None


@dataclass(frozen=True, slots=True)
class Lagged:
    """This subscriber fell behind: ``dropped`` notifications were skipped here.

    The marker stands where the gap is: what came before it was delivered, what follows it
    is newer than what was skipped. Nothing committed is lost: read the log after the last
    ``committed`` notification's ``data["seq"]`` (``session.log.read_after(seq)``).
    """

    dropped: int


DEFAULT_BUFFER = 1000
"""Notifications a subscriber's buffer holds (``events(maxsize=...)``) before it lags."""


class Subscription:
    """An iterator of ``LiveEvent`` / ``Lagged``; ``close()`` ends it.

    Its buffer holds ``maxsize`` notifications. Publishing never waits for the subscriber:
    when the buffer is full, the notification is dropped and counted in one ``Lagged``
    marker at the end of the buffer; once the subscriber has taken it, newer notifications
    follow.
    """

    def __init__(
        self, hub: LiveHub, maxsize: int = DEFAULT_BUFFER, session: SessionKey | None = None
    ) -> None:
        if isinstance(maxsize, bool) or not isinstance(maxsize, int) or maxsize < 1:
            raise InvalidInput(
                f"maxsize must be a positive int (the notifications a subscriber's buffer "
                f"holds), got {maxsize!r}"
            )
        self._hub = hub
        self.maxsize = maxsize
        self.session = session
        """Only this session's notifications (None: every session's)."""
        self._items: collections.deque[LiveEvent | Lagged] = collections.deque()
        self._events = 0
        """How many of ``_items`` are notifications (not markers)."""
        self._cond = threading.Condition()
        self.closed = False

    def _offer(self, event: LiveEvent) -> None:
        with self._cond:
            if self.closed:
                return
            items = self._items
            if self._events < self.maxsize:
                items.append(event)
                self._events += 1
            elif items and isinstance(items[-1], Lagged):
                items[-1] = Lagged(items[-1].dropped + 1)
            else:
                items.append(Lagged(1))  # the gap starts here
            self._cond.notify()

    def get(self, timeout: float | None = None) -> LiveEvent | Lagged | None:
        """The next notification (or marker), or None on timeout or after close."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._items or self.closed, timeout):
                return None
            if not self._items:
                return None
            item = self._items.popleft()
            if not isinstance(item, Lagged):
                self._events -= 1
            return item

    def __iter__(self) -> Iterator[LiveEvent | Lagged]:
        while not self.closed:
            item = self.get(timeout=0.25)
            if item is not None:
                yield item

    def close(self) -> None:
        with self._cond:
            self.closed = True
            self._cond.notify_all()
        self._hub._unsubscribe(self)


class LiveHub:
    """Fan-out of live notifications to subscribers; publishing never blocks."""

    def __init__(self) -> None:
        self._subs: list[Subscription] = []
        self._watchers: list[tuple[SessionKey | None, Callable[[LiveEvent], None]]] = []
        self._lock = threading.Lock()

    def subscribe(
        self, maxsize: int = DEFAULT_BUFFER, *, session: SessionKey | None = None
    ) -> Subscription:
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
