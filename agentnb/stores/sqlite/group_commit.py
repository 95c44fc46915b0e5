"""Group commit: appends of several sessions that are ready together share one transaction."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from agentnb.stores.sqlite.connections import Connection


@dataclass(slots=True)
class Write:
    """One append waiting for a group commit, and how it ended."""

    write: Callable[[Connection], None]
    done: threading.Event | None = None
    """Made only for an append that waits for another thread's commit."""
    error: BaseException | None = None
    lead: bool = False
    """Set when this append's thread is to commit the next group."""


class GroupCommit:
    """Group commit: appends that arrive while a commit is under way wait, and the next
    commit takes all of them in one transaction.

    The thread of the first waiting append commits the group (its own write included), so
    no thread is dedicated to writing and a lone append commits at once, as before.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.queue: list[Write] = []
        self.busy = False

    def run(
        self,
        write: Callable[[Connection], None],
        commit: Callable[[list[Write]], None],
    ) -> None:
        mine = Write(write)
        with self.lock:
            self.queue.append(mine)
            lead = not self.busy
            self.busy = True
            if not lead:
                done = mine.done = threading.Event()
        if not lead:
            done.wait()
            if not mine.lead:
                if mine.error is not None:
                    raise mine.error
                return
        group: list[Write] = []
        try:
            with self.lock:
                group, self.queue = self.queue, []
            commit(group)
        except BaseException as exc:  # noqa: BLE001 - every waiter of the group hears it
            for pending in group:
                if pending.error is None:
                    pending.error = exc
        finally:
            with self.lock:
                following = self.queue[0] if self.queue else None
                self.busy = following is not None
            for pending in group:
                if pending is not mine:
                    assert pending.done is not None
                    pending.done.set()
            if following is not None:  # it commits the appends that came meanwhile
                following.lead = True
                assert following.done is not None
                following.done.set()
        if mine.error is not None:
            raise mine.error
