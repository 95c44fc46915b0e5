"""Waiting for commits, and the hints of what this store object committed or read.

``wait_for_head / wait_for_inbox``
    Block until the sequence passes ``after`` or the timeout elapses. Commits in the same
    process wake waiters at once; commits from other processes are seen by polling.

How: every commit calls ``_notify`` with its session and log; a waiter sleeps on the
condition of its (session, log) slot, so a commit wakes only the waiters of the log that
moved, and reads again at most every ``poll_interval`` for other processes' commits. The
hints (``head_hint``, ``inbox_head_hint``) are what this object committed, accepted or read:
a waiter whose hint passed ``after`` returns without a database read.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from agentnb.errors import InvalidInput, StorageError
from agentnb.ids import Clock, SessionKey
from agentnb.stores.core import StoreCore
from agentnb.stores.decisions import check_key

if TYPE_CHECKING:
    from typing import Self

__all__ = ["Waiting"]

_Slot = tuple[SessionKey, str]
"""Whose waiters a commit wakes: (session, "inbox", "log" or "settle"). "settle" waiters
wait on the execution log but sleep through the commits its writer calls minor."""


class Waiting(StoreCore):
    """The waiters of a store object and its hints; every role that commits wakes them."""

    poll_interval: float = 0.05
    """Seconds between polls when waiting for commits made by other processes."""

    def __init__(self, *, clock: Clock | None = None) -> None:
        super().__init__(clock=clock)
        self._wake_lock = threading.Lock()
        self._cond = threading.Condition(self._wake_lock)
        """Waiters of no session in particular: woken by every commit."""
        self._waiting = 0
        self._generation = 0
        self._unkeyed = 0
        """Wake-ups of the waiters of no session in particular (every commit is one)."""
        self._key_conds: dict[_Slot, threading.Condition] = {}
        """Waiters of one log of one session: woken by that log's commits (and by
        ``wake_waiters``)."""
        self._key_waiting: dict[_Slot, int] = {}
        self._key_generations: dict[_Slot, int] = {}
        self._inbox_seen: dict[SessionKey, int] = {}
        """The highest inbox seq of each session this object appended or read: a lower bound
        of the inbox head (``inbox_head_hint``)."""
        self._heads_seen: dict[SessionKey, int] = {}
        """The last seq each session's appends through this object committed (``head_hint``)."""
        self._hints_lock = threading.Lock()

    def inbox_head_hint(self, key: SessionKey) -> int:
        """The highest inbox seq of ``key`` this store object has appended or read (0: none).

        Never a database call: a lower bound of the inbox head, exact for commands accepted
        through this object, and as fresh for other writers' as the last read (a
        ``wait_for_inbox`` reads at least every ``poll_interval``, or on their notification).
        A reader that knows every command up to the hint may skip a read whose result only
        decides *when* it sees another writer's command, never *whether*.
        """
        return self._inbox_seen.get(key, 0)

    def head_hint(self, key: SessionKey) -> int:
        """The last execution-log seq of ``key`` this store object committed (0: none).

        Never a database call; a lower bound of the head, exact while every append of the
        session goes through this object (its lease holder's, say).
        """
        return self._heads_seen.get(key, 0)

    def _saw_inbox(self, key: SessionKey, seq: int) -> int:
        return self._saw(self._inbox_seen, key, seq)

    def _saw(self, seen: dict[SessionKey, int], key: SessionKey, seq: int) -> int:
        if seq > seen.get(key, 0):
            with self._hints_lock:  # never lowered by a slower thread's older value
                if seq > seen.get(key, 0):
                    seen[key] = seq
        return seq

    def _poll(self, poll: float | None) -> float:
        if poll is None:
            return self.poll_interval
        if not isinstance(poll, int | float) or isinstance(poll, bool) or not 0 < poll <= 3600:
            raise InvalidInput(f"poll must be seconds in (0, 3600], got {poll!r}")
        return float(poll)

    def _hinted(
        self,
        seen: dict[SessionKey, int],
        key: SessionKey,
        after: int,
        local: bool,
        read_db: Callable[[], int],
        poll: float,
    ) -> Callable[[], int]:
        """A waiter's read: a seq past ``after`` that this object committed, accepted or
        read (``seen``) needs no query; the database is read at most every ``poll``
        seconds, the first time too when ``local``."""
        checked = time.monotonic() if local else -math.inf

        def read() -> int:
            nonlocal checked
            known = seen.get(key, 0)
            if known > after:
                return known
            now = time.monotonic()
            if now - checked < poll:
                return after
            checked = now
            return read_db()

        return read

    def wake_waiters(
        self, key: SessionKey | None = None, *, inbox: bool | None = None, minor: bool = False
    ) -> None:
        """Wake the waiters of ``key`` (and those of no session in particular); None wakes
        every waiter of this store, so those whose ``stop`` is set return now.

        ``inbox`` wakes only the waiters of that log of ``key`` (True: ``wait_for_inbox``,
        False: ``wait_for_head``); None wakes both. ``minor``: the commit cannot settle a
        turn (only events inside a step), so ``wait_for_head(settling=True)`` sleeps on.
        """
        self._notify(None if key is None else check_key(key), inbox=inbox, minor=minor)

    def close(self) -> None:
        """Release resources; committed data stays. Waiters wake up.

        Calls already running in other threads finish first; later calls raise
        ``StorageError``. Backends release their resources after this returns.
        """
        with self._ops_done:
            self._closed = True
        self._notify()
        with self._ops_done:
            self._ops_done.wait_for(lambda: self._ops == 0, timeout=60)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- helpers for backends ----------------------------------------------------------------

    def _notify(
        self, key: SessionKey | None = None, *, inbox: bool | None = None, minor: bool = False
    ) -> None:
        """Wake the waiters of ``key`` (a commit of that session: of its inbox when
        ``inbox``, of its execution log when not, of either when None) and those of no
        session in particular; no key wakes every waiter (close, ``wake_waiters``, a remote
        commit nobody could place).

        Every commit calls this: the lock is skipped when nobody waits (a waiter counts
        itself before it reads, and the generations tell it a commit slipped in before it
        slept). Waking only the waiters of the log that moved keeps a commit's cost flat
        however many sessions run at once, and a run's inbox watcher asleep through its own
        run's commits. A ``minor`` commit of the execution log leaves its "settle" waiters
        asleep.
        """
        if not self._waiting:
            return
        with self._wake_lock:
            if key is None:
                self._generation += 1
                for cond in self._key_conds.values():
                    cond.notify_all()
            else:
                kinds: list[str] = []
                if inbox is not True:  # the execution log moved
                    kinds += ["log"] if minor else ["log", "settle"]
                if inbox is not False:
                    kinds.append("inbox")
                for kind in kinds:
                    slot = (key, kind)
                    self._key_generations[slot] = self._key_generations.get(slot, 0) + 1
                    waiting = self._key_conds.get(slot)
                    if waiting is not None:
                        waiting.notify_all()
            self._unkeyed += 1
            self._cond.notify_all()

    def _notify_unkeyed(self) -> None:
        """Wake only the waiters of no session in particular: for a commit of a session
        this object never resolved (a waiter's first read resolves its session, so such a
        session has no waiter of its own)."""
        if not self._waiting:
            return
        with self._wake_lock:
            self._unkeyed += 1
            self._cond.notify_all()

    def _wait(
        self,
        read: Callable[[], int],
        after: int,
        timeout: float | None,
        stop: threading.Event | None = None,
        *,
        key: SessionKey | None = None,
        inbox: bool = False,
        settling: bool = False,
        poll: float | None = None,
    ) -> int:
        """Read until the value passes ``after``, sleeping between reads until a commit of
        ``key``'s inbox (``inbox``) or execution log (any commit, without a key; with
        ``settling``, not a minor one) or the poll interval for other processes' commits."""
        kind = "inbox" if inbox else "settle" if settling else "log"
        slot = None if key is None else (key, kind)
        with self._wake_lock:
            self._waiting += 1
            cond = self._cond
            if slot is not None:
                self._key_waiting[slot] = self._key_waiting.get(slot, 0) + 1
                cond = self._key_conds.setdefault(slot, threading.Condition(self._wake_lock))
        try:
            return self._wait_loop(
                read, after, timeout, stop, slot, cond, self.poll_interval if poll is None else poll
            )
        finally:
            with self._wake_lock:
                self._waiting -= 1
                if slot is not None:
                    left = self._key_waiting[slot] - 1
                    if left:
                        self._key_waiting[slot] = left
                    else:  # nobody waits for this log: forget it (keys come and go)
                        del self._key_waiting[slot]
                        self._key_conds.pop(slot, None)
                        self._key_generations.pop(slot, None)

    def _generations(self, slot: _Slot | None) -> tuple[int, int]:
        return self._generation, (
            self._unkeyed if slot is None else self._key_generations.get(slot, 0)
        )

    def _wait_loop(
        self,
        read: Callable[[], int],
        after: int,
        timeout: float | None,
        stop: threading.Event | None,
        slot: _Slot | None,
        cond: threading.Condition,
        poll: float,
    ) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        value = after
        while True:
            generation = self._generations(slot)
            try:
                with self._operation():
                    value = read()
            except StorageError:
                if self._closed:
                    return value  # closed while waiting: the waiter just needs to wake
                raise
            if value > after or self._closed or (stop is not None and stop.is_set()):
                return value
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return value
            step = poll if remaining is None else min(remaining, poll)
            self._idle()
            with self._wake_lock:
                # Checked under the lock that close() and wake_waiters() notify with.
                if (
                    not self._closed
                    and not (stop is not None and stop.is_set())
                    and generation == self._generations(slot)
                ):
                    cond.wait(step)
            if self._closed:
                # Reading again could fail on a closed backend; the waiter just needs to wake.
                return value

    def _idle(self) -> None:
        """This thread is about to sleep in a wait: a backend may lend its connection to
        other threads meanwhile (SQLite does; the default keeps it)."""
