"""The folded state of each session a process reads, kept once per store object.

Readers that are not a session's handle (a parent looking at its children, the permission
lookups across sessions, archiving, usage totals, the CLI) share one ``Folds`` per session
per store object, fed by the store's commit bus: a commit of this process is folded once,
as it is (never read back), and a read folds only what another process committed since.
``read(store, key)`` is the one way in.

The states are shared: read them inside the ``with`` block (which holds the session's fold)
and never change them. The newest ``CAPACITY`` sessions read are kept; an older one is folded
again from its snapshot when read next.
"""

from __future__ import annotations

import collections
import contextlib
import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from agentnb.errors import SessionNotFound
from agentnb.folds import Folds
from agentnb.ids import SessionKey
from agentnb.projections.state import InboxState, SessionState
from agentnb.stores.base import SessionStore

if TYPE_CHECKING:
    from agentnb.events import Event

__all__ = ["CAPACITY", "SessionStates", "read", "states_of"]

CAPACITY = 128
"""Sessions whose folds one store object's registry keeps (the newest read)."""

_REGISTRIES_LOCK = threading.Lock()


class _Entry:
    __slots__ = ("folds", "lock")

    def __init__(self, folds: Folds) -> None:
        self.folds = folds
        self.lock = threading.RLock()


class SessionStates:
    """One ``Folds`` per session of one store object, fed by its commit bus."""

    def __init__(self, store: SessionStore, *, capacity: int = CAPACITY) -> None:
        self.store = store
        self.capacity = capacity
        self._entries: collections.OrderedDict[SessionKey, _Entry] = collections.OrderedDict()
        self._lock = threading.Lock()
        self.folded_from_store = 0
        """Reads that had to fold events from the store (a test's and a benchmark's count)."""
        store.bus.watch(None, self._on_commit)

    def _on_commit(self, key: SessionKey, events: Sequence[Event]) -> None:
        """On the committer's thread: a kept fold takes the batch (folded at its next read)."""
        entry = self._entries.get(key)
        if entry is not None:
            entry.folds.offer(events)

    def _entry(self, key: SessionKey) -> _Entry:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                entry = self._entries[key] = _Entry(Folds(self.store, key))
                while len(self._entries) > self.capacity:
                    self._entries.popitem(last=False)
            else:
                self._entries.move_to_end(key)
            return entry

    @contextlib.contextmanager
    def read(self, key: SessionKey) -> Iterator[tuple[SessionState, InboxState]]:
        """The session's state and inbox at both heads (read them inside the block)."""
        entry = self._entry(key)
        with entry.lock:
            folds = entry.folds
            fresh = not folds.loaded
            folds.take_offered()
            fed = folds.state.seq
            try:
                state, inbox = folds.refresh()
            except SessionNotFound:
                self.forget(key)  # deleted: a session made again under its key starts anew
                raise
            if fresh or state.seq != fed:
                self.folded_from_store += 1
            yield state, inbox

    def forget(self, key: SessionKey) -> None:
        """Drop the session's fold (it was deleted, or its log replaced by a restore)."""
        with self._lock:
            self._entries.pop(key, None)


def states_of(store: SessionStore) -> SessionStates:
    """The registry of ``store`` (made at its first use)."""
    registry = store.states
    if registry is None:
        with _REGISTRIES_LOCK:
            registry = store.states
            if registry is None:
                registry = store.states = SessionStates(store)
    assert isinstance(registry, SessionStates)
    return registry


def read(
    store: SessionStore, key: SessionKey
) -> contextlib.AbstractContextManager[tuple[SessionState, InboxState]]:
    """``with read(store, key) as (state, inbox):`` the session's one shared state in this
    process, at both heads. Raises what a refresh raises (``SessionNotFound``, ``Corrupt``)."""
    return states_of(store).read(key)
