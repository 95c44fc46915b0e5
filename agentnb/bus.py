"""The commit bus: what a process commits, handed to the same process's followers as it is.

A store object publishes each batch it commits (execution log) and each record it accepts
(inbox) right after the commit, before its waiters learn of the new head: a follower woken
by the commit finds the events on the bus and never reads them back from the store (no
query, no decode). The store is read only to start from a cursor, to fill a gap the bus
tells of (``Lagged``, or a batch that does not follow on), and for commits of other
processes (other store objects), which never come by the bus.

Publishing never blocks the committer: a subscriber's buffer holds ``maxsize`` events; past
it the batches are dropped and one ``Lagged`` marker stands where the gap is. A watcher's
callback runs on the committer's thread and must only hand the events over.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from agentnb.errors import InvalidInput
from agentnb.ids import SessionKey
from agentnb.live import Lagged

if TYPE_CHECKING:
    from agentnb.events import Event

__all__ = ["BUS_BUFFER", "BusSubscription", "CommitBus"]

BUS_BUFFER = 10_000
"""Events a bus subscriber buffers before it lags (and reads the gap from the store)."""

_Slot = tuple[SessionKey, bool]
"""A session and which of its logs (True: the inbox)."""
Batch = tuple["Event", ...]


class BusSubscription:
    """The committed batches of one log of one session, as this process commits them.

    ``take()`` hands over what arrived (batches, and ``Lagged`` where some were dropped);
    ``close()`` ends it. Never blocks the publisher.
    """

    __slots__ = ("__weakref__", "_bus", "_events", "_items", "_lock", "closed", "maxsize", "slot")

    def __init__(self, bus: CommitBus, slot: _Slot, maxsize: int) -> None:
        self._bus = bus
        self.slot = slot
        self.maxsize = maxsize
        self._items: collections.deque[Batch | Lagged] = collections.deque()
        self._events = 0
        self._lock = threading.Lock()
        self.closed = False

    def _offer(self, batch: Batch) -> None:
        with self._lock:
            items = self._items
            if self._events + len(batch) <= self.maxsize:
                items.append(batch)
                self._events += len(batch)
            elif items and isinstance(items[-1], Lagged):
                items[-1] = Lagged(items[-1].dropped + len(batch))
            else:
                items.append(Lagged(len(batch)))

    def take(self) -> list[Batch | Lagged]:
        """Everything that arrived since the last call, in commit order."""
        with self._lock:
            out = list(self._items)
            self._items.clear()
            self._events = 0
        return out

    def close(self) -> None:
        self.closed = True
        self._bus._unsubscribe(self)


class CommitBus:
    """Fan-out of one store object's commits to the followers of this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subs: dict[_Slot, tuple[weakref.ref[BusSubscription], ...]] = {}
        """Held weakly: a subscription nobody holds any more (a follow never iterated to
        its end) leaves the bus by itself."""
        self._watchers: dict[
            tuple[SessionKey | None, bool], tuple[Callable[[SessionKey, Batch], None], ...]
        ] = {}
        self.published = 0
        """Batches published so far (a test's and a benchmark's count)."""

    def subscribe(
        self, key: SessionKey, *, inbox: bool = False, maxsize: int = BUS_BUFFER
    ) -> BusSubscription:
        """A buffer of ``key``'s commits (of its inbox with ``inbox``) from now on."""
        if isinstance(maxsize, bool) or not isinstance(maxsize, int) or maxsize < 1:
            raise InvalidInput(f"maxsize must be a positive int (events), got {maxsize!r}")
        sub = BusSubscription(self, (key, inbox), maxsize)
        slot = sub.slot

        def gone(ref: weakref.ref[BusSubscription]) -> None:
            self._drop(slot, ref)

        with self._lock:
            self._subs[slot] = (*self._subs.get(slot, ()), weakref.ref(sub, gone))
        return sub

    def subscribers(self, key: SessionKey, *, inbox: bool = False) -> int:
        """How many subscriptions of ``key``'s log (its inbox's) are open now."""
        return sum(1 for ref in self._subs.get((key, inbox), ()) if ref() is not None)

    def _unsubscribe(self, sub: BusSubscription) -> None:
        with self._lock:
            left = tuple(r for r in self._subs.get(sub.slot, ()) if r() is not sub)
            self._set(sub.slot, left)

    def _drop(self, slot: _Slot, ref: weakref.ref[BusSubscription]) -> None:
        with self._lock:
            self._set(slot, tuple(r for r in self._subs.get(slot, ()) if r is not ref))

    def _set(self, slot: _Slot, refs: tuple[weakref.ref[BusSubscription], ...]) -> None:
        if refs:
            self._subs[slot] = refs
        else:
            self._subs.pop(slot, None)

    def watch(
        self,
        key: SessionKey | None,
        callback: Callable[[SessionKey, Batch], None],
        *,
        inbox: bool = False,
    ) -> Callable[[], None]:
        """Call ``callback(key, batch)`` with each batch of ``key`` (None: of every session)
        committed through the store object, on the committer's thread (it must not block; an
        exception it raises is dropped); returns the unwatch."""
        slot = (key, inbox)
        with self._lock:
            self._watchers[slot] = (*self._watchers.get(slot, ()), callback)

        def unwatch() -> None:
            with self._lock:
                left = tuple(c for c in self._watchers.get(slot, ()) if c is not callback)
                if left:
                    self._watchers[slot] = left
                else:
                    self._watchers.pop(slot, None)

        return unwatch

    def publish(self, key: SessionKey, events: Sequence[Event], *, inbox: bool = False) -> None:
        """Hand a committed batch to the subscribers and watchers of its log (never blocks)."""
        slot = (key, inbox)
        subs = self._subs.get(slot, ())
        watchers = self._watchers.get(slot, ()) + self._watchers.get((None, inbox), ())
        self.published += 1
        if not subs and not watchers:
            return
        batch = tuple(events)
        for ref in subs:
            sub = ref()
            if sub is not None:
                sub._offer(batch)
        for callback in watchers:
            with contextlib.suppress(Exception):
                callback(key, batch)
