"""Work claims: how worker processes sharing a store find the sessions that have work.

``claim_pending`` / ``settle_pending`` / ``held_pending`` / ``watch_pending``
    An accepted command (any but ``update``, which the store carries out as it accepts it)
    marks its session as holding work. ``claim_pending`` leases up to ``limit`` marked
    sessions that no live lease holds, oldest waiting first, each at the next epoch: a
    crashed holder's session is claimable again once its lease expires, and that holder is
    fenced; claimers running at once get disjoint sessions. ``settle_pending`` clears the
    mark of a leased session only while its inbox head is still the one the holder read (a
    command accepted later marks it again, so no work is left unclaimed), and with
    ``release`` releases the lease with it. ``held_pending`` lists the live leases of marked
    sessions (a claimer releases those of holders it knows dead). ``watch_pending`` calls
    back when work may have been accepted: a hint to claim again, nothing more; a claimer
    still claims now and then without one.

The algorithm is written here once (the checks, the guard, the watchers); a backend supplies
the four ``_``-prefixed hooks. One that keeps the mark in its database, set in the
transaction that accepts a command (``_indexes_work``: SQLite's and PostgreSQL's
``pending_since``), implements them with its own statements. Every other backend gets the
default hooks, written over the catalogue, the inbox and the leases: the mark is read from
the inbox (a command past the seq a holder settled at), a claim looks at the catalogue's
sessions (what a worker without an index scans anyway), and only the commands accepted
through this object call the watchers at once (the others wait for the claimer's poll).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from agentnb.errors import Fenced, InvalidInput, LeaseHeld, SessionDeleted, SessionNotFound
from agentnb.events import Event
from agentnb.ids import Clock, SessionKey, check_id
from agentnb.stores.decisions import check_lease, check_pending_scope, check_ttl
from agentnb.stores.ports.catalogue import Catalogue
from agentnb.stores.ports.inbox import Inbox
from agentnb.stores.ports.leases import Leases
from agentnb.stores.values import MAX_READ_LIMIT, Lease

__all__ = ["WorkClaims"]

log = logging.getLogger("agentnb.stores")


def makes_work(event: Event) -> bool:
    """Whether an inbox record marks its session as holding work for a worker."""
    return event.type == "inbox/accepted" and event.payload.get("kind") != "update"


@dataclass(slots=True)
class _Mark:
    """What the default index knows of one session's inbox."""

    through: int = 0
    """The inbox seq it has looked through (a settle starts it again at the settled seq)."""
    since: float | None = None
    """When it first saw a command past the settled seq (None: no work known)."""


class WorkClaims(Catalogue, Inbox, Leases):
    """Claiming, settling and watching the sessions with queued work (see the module)."""

    _indexes_work = False
    """Whether the backend keeps the pending-work mark itself (and wakes the watchers when it
    accepts a command): then it implements the four hooks, and the default index is unused."""

    def __init__(self, *, clock: Clock | None = None) -> None:
        super().__init__(clock=clock)
        self._pending_watchers: list[Callable[[SessionKey | None], None]] = []
        self._pending_lock = threading.Lock()
        self._marks: dict[SessionKey, _Mark] = {}
        self._marks_lock = threading.RLock()

    def claim_pending(
        self,
        owner: str,
        *,
        ttl: float = 10.0,
        limit: int = 1,
        agent_id: str | None = None,
        namespace: str | None = None,
    ) -> list[Lease]:
        """Lease up to ``limit`` sessions that have accepted commands and no live lease."""
        check_id(owner, "owner")
        ttl = check_ttl(ttl)
        check_pending_scope(limit, agent_id, namespace)
        with self._operation():
            return self._claim_pending(owner, ttl, limit, agent_id, namespace)

    def held_pending(
        self, *, limit: int = 100, agent_id: str | None = None, namespace: str | None = None
    ) -> list[Lease]:
        """The live leases of up to ``limit`` sessions that have queued work: their holders
        execute them, or died holding them (a claimer releases the leases of holders it
        knows dead, so it need not wait for their expiry)."""
        check_pending_scope(limit, agent_id, namespace)
        with self._operation():
            return self._held_pending(limit, agent_id, namespace)

    def settle_pending(self, lease: Lease, inbox_seen: int, *, release: bool = False) -> bool:
        """Clear the pending-work mark of the leased session if the holder has seen its inbox
        through ``inbox_seen`` and nothing arrived since; True if cleared. ``release``: the
        lease is released with the mark (and kept when the mark is not cleared, so the
        holder can look again under it)."""
        check_lease(lease)
        with self._operation():
            return self._settle_pending(lease, inbox_seen, bool(release))

    def watch_pending(self, callback: Callable[[SessionKey | None], None]) -> Callable[[], None]:
        """Call ``callback`` (it must not block) when a command may have been accepted: with
        the session's key when the store knows it, else None; returns the function that
        stops it. When the backend hears of other processes' commands is its own to say."""
        if not callable(callback):
            raise InvalidInput(f"callback must be callable, got {type(callback).__name__}")
        with self._pending_lock:
            self._pending_watchers.append(callback)
            self._watch_pending()

        def unwatch() -> None:
            with self._pending_lock, contextlib.suppress(ValueError):
                self._pending_watchers.remove(callback)

        return unwatch

    def _wake_pending(self, key: SessionKey | None) -> None:
        for callback in list(self._pending_watchers):
            try:
                callback(key)
            except Exception:  # a watcher's bug must not deafen the others
                log.exception("pending-work watcher failed")

    # -- the hooks, by default over the other roles ------------------------------------------

    def _claim_pending(
        self, owner: str, ttl: float, limit: int, agent_id: str | None, namespace: str | None
    ) -> list[Lease]:
        """Lease up to ``limit`` marked sessions without a live lease, at the next epoch."""
        leases: list[Lease] = []
        for key in self._marked(agent_id, namespace):
            if len(leases) >= limit:
                break
            if self.current_lease(key) is not None:
                continue
            with contextlib.suppress(LeaseHeld, SessionDeleted, SessionNotFound):
                leases.append(self.acquire_lease(key, owner, ttl))  # lost a race: skip it
        return leases

    def _held_pending(self, limit: int, agent_id: str | None, namespace: str | None) -> list[Lease]:
        """The live leases of up to ``limit`` marked sessions, oldest waiting first."""
        held: list[Lease] = []
        for key in self._marked(agent_id, namespace):
            lease = self.current_lease(key)
            if lease is not None:
                held.append(lease)
                if len(held) >= limit:
                    break
        return held

    def _settle_pending(self, lease: Lease, inbox_seen: int, release: bool) -> bool:
        """Clear the mark while ``lease`` is live and the inbox head is ``inbox_seen``."""
        current = self.current_lease(lease.key)
        if current is None or (current.owner, current.epoch) != (lease.owner, lease.epoch):
            return False
        with self._marks_lock:
            if self.inbox_head(lease.key) != inbox_seen:
                return False
            # A command accepted from here on is past ``through``: the next look finds it.
            self._marks[lease.key] = _Mark(through=inbox_seen)
        if release:
            with contextlib.suppress(Fenced):  # another holder took it after the check
                self.release_lease(lease)
        return True

    def _watch_pending(self) -> None:
        """A watcher was added (under the watchers' lock): a backend that hears of other
        processes' commands starts listening here. The default hears only its own."""

    def _accepted(self, key: SessionKey, record: Event) -> None:
        if self._indexes_work or not makes_work(record):
            return
        with self._marks_lock:
            mark = self._marks.setdefault(key, _Mark())
            if mark.since is None:
                mark.since = self.clock.now()
        self._wake_pending(key)

    def _marked(self, agent_id: str | None, namespace: str | None) -> list[SessionKey]:
        """The catalogue's sessions holding work, oldest waiting first (then by creation)."""
        found = []
        for row, record in enumerate(self.list_sessions(namespace=namespace, agent_id=agent_id)):
            since = self._mark_of(record.key)
            if since is not None:
                found.append((since, row, record.key))
        return [key for _, _, key in sorted(found, key=lambda item: item[:2])]

    def _mark_of(self, key: SessionKey) -> float | None:
        """When the session was first seen holding work since its last settle (None: idle);
        reads only the commands it has not looked at yet."""
        with self._marks_lock:
            mark = self._marks.setdefault(key, _Mark())
            if mark.since is not None:
                return mark.since
            head = self.inbox_head(key)
            while mark.through < head:
                page = self.inbox_read_after(
                    key, mark.through, min(head - mark.through, MAX_READ_LIMIT)
                )
                if not page:
                    break
                if any(makes_work(event) for event in page):
                    mark.since = self.clock.now()
                mark.through = page[-1].seq
                if mark.since is not None:
                    break
            return mark.since
