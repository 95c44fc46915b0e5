"""What every role of the store port stands on: the clock, the bus, and the operation guard.

``close`` waits for the calls in flight (``guarded``, ``_operation``) and refuses later ones
with ``StorageError``; the waiters' side of closing is ``agentnb.stores.waiting``'s. The
roles built on it are in ``agentnb.stores.ports``.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from abc import ABC
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from agentnb.bus import CommitBus
from agentnb.errors import StorageError
from agentnb.ids import Clock, SystemClock

__all__ = ["StoreCore", "guarded"]

_F = TypeVar("_F", bound=Callable[..., Any])


def guarded(method: _F) -> _F:
    """Run a public store call as an operation ``close`` waits for."""

    @functools.wraps(method)
    def wrapper(self: StoreCore, *args: Any, **kwargs: Any) -> Any:
        # _operation() inlined: this wraps every store call.
        done = self._ops_done
        with done:
            if self._closed:
                raise StorageError(f"store {self.url} is closed; open it again to use it")
            self._ops += 1
        try:
            return method(self, *args, **kwargs)
        finally:
            with done:
                self._ops -= 1
                if not self._ops and self._closed:
                    done.notify_all()

    return wrapper  # type: ignore[return-value]


class StoreCore(ABC):  # noqa: B024 - the root of the roles; each role declares its hooks
    """The state every role shares: ``url``, ``clock``, the commit ``bus``, the guard."""

    url: str = ""
    local_io = False
    """Whether every operation's I/O stays on this machine (memory, a local file), so a
    caller on an event loop may call a short one inline rather than hand it to a thread (a
    networked backend's round trips are not short)."""

    def __init__(self, *, clock: Clock | None = None) -> None:
        self.clock: Clock = clock or SystemClock()
        self._closed = False
        self._ops = 0
        self._ops_done = threading.Condition()
        self.bus = CommitBus()
        """What this object commits, handed to this process's followers (``agentnb.bus``)."""
        self.states: object | None = None
        """The process's shared folds of this object's sessions (``agentnb.states``, which
        sets it at its first use; the store never reads it)."""

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called (every later call raises ``StorageError``)."""
        return self._closed

    @contextlib.contextmanager
    def _operation(self) -> Iterator[None]:
        """Count a call in flight, so ``close`` waits for it (and refuses new ones)."""
        with self._ops_done:
            if self._closed:
                raise StorageError(f"store {self.url} is closed; open it again to use it")
            self._ops += 1
        try:
            yield
        finally:
            with self._ops_done:
                self._ops -= 1
                if not self._ops and self._closed:
                    self._ops_done.notify_all()
