"""The inbox log: commands from any number of writers, with its own gapless sequence.

``inbox_append(key, event, dedupe_key=)``
    Safe from many writers and processes at once, no lease needed. With a ``dedupe_key`` a
    re-send returns the original record (``created=False``) if the content is the same, and
    raises ``IdempotencyConflict`` if it differs.
"""

from __future__ import annotations

import threading
from abc import abstractmethod
from collections.abc import Sequence

from agentnb.errors import InvalidInput
from agentnb.events import Event
from agentnb.ids import SessionKey
from agentnb.stores.core import guarded
from agentnb.stores.decisions import (
    check_key,
    check_limit,
    check_seq,
    checked,
    inbox_item,
)
from agentnb.stores.values import (
    MAX_BATCH,
)
from agentnb.stores.waiting import Waiting

__all__ = ["Inbox"]


class Inbox(Waiting):
    """Accepting and reading a session's commands; ``wait_for_inbox`` waits for new ones."""

    @guarded
    def inbox_append(
        self,
        key: SessionKey,
        event: Event,
        *,
        dedupe_key: str | None = None,
        fingerprint: str | None = None,
    ) -> tuple[Event, bool]:
        """Accept one inbox event from any writer; returns (record, created).

        ``fingerprint`` is what a re-send under the same ``dedupe_key`` must repeat (by
        default the whole event; callers pass the command's meaning, since a retried command
        is a new event with a new id). A long one is kept as its SHA-256
        (``stored_fingerprint``): ``inbox_keys`` returns what is kept, and passing that back
        as the fingerprint (a restore) keeps the same.
        """
        key, stamped, dedupe_key, digest = inbox_item(key, event, dedupe_key, fingerprint)
        record = self._inbox_append(key, stamped, dedupe_key, digest, self.clock.now())
        if record[1]:
            self.bus.publish(key, (record[0],), inbox=True)
        self._saw_inbox(key, record[0].seq)
        if record[1]:
            self._notify(key)  # both logs' waiters: a record in the inbox can settle a turn
            self._accepted(key, record[0])
        return record

    @guarded
    def inbox_append_many(
        self, items: Sequence[tuple[SessionKey, Event, str | None, str | None]]
    ) -> list[tuple[Event, bool]]:
        """``inbox_append`` of several records, of one session or several, each given as
        ``(key, event, dedupe_key, fingerprint)``; returns each ``(record, created)`` in
        order. A backend that can commits them together (SQLite: one transaction, one flush
        to disk; then an error of one, such as ``IdempotencyConflict`` or a deleted session,
        writes none of them); the default appends them one by one. Either way each record is
        accepted once under its dedupe key, so a caller that retries after an error writes
        nothing twice. At most ``MAX_BATCH`` records.
        """
        if len(items) > MAX_BATCH:
            raise InvalidInput(f"at most {MAX_BATCH} inbox records per call, got {len(items)}")
        prepared = [inbox_item(*item) for item in items]
        records = self._inbox_append_many(prepared, self.clock.now())
        for (key, *_), (record, created) in zip(prepared, records, strict=True):
            if created:
                self.bus.publish(key, (record,), inbox=True)
            self._saw_inbox(key, record.seq)
            if created:
                self._notify(key)
                self._accepted(key, record)
        return records

    @guarded
    def inbox_head(self, key: SessionKey) -> int:
        """Last inbox seq (0 when empty)."""
        key = check_key(key)
        return self._saw_inbox(key, self._inbox_head(key))

    @guarded
    def inbox_read_after(self, key: SessionKey, after: int, limit: int) -> list[Event]:
        """Up to ``limit`` inbox events with inbox seq > ``after``."""
        key = check_key(key)
        check_seq(after, "after")
        check_limit(limit)
        events = checked(key, after, self._inbox_read(key, after, after + limit))
        if events:
            self._saw_inbox(key, events[-1].seq)
        return events

    @guarded
    def inbox_keys(self, key: SessionKey, after: int, limit: int) -> list[tuple[int, str, str]]:
        """``(seq, dedupe_key, fingerprint)`` of the inbox records after ``after`` (up to
        ``limit`` seqs on) that were accepted under a ``dedupe_key``: what a backup or a
        migration needs so that a re-sent command is recognised on the copy too."""
        key = check_key(key)
        check_seq(after, "after")
        check_limit(limit)
        return self._inbox_keys(key, after, after + limit)

    def wait_for_inbox(
        self,
        key: SessionKey,
        after: int,
        timeout: float | None,
        *,
        stop: threading.Event | None = None,
        local: bool = False,
        poll: float | None = None,
    ) -> int:
        """Block until the inbox head passes ``after``, ``timeout`` elapses or ``stop`` is set.

        ``local``: the caller's fold already holds every command this object knows of up to
        ``after`` (a run's watcher), so the database is read only every ``poll_interval``
        (for other writers' commands, where no notification brings them sooner); commands
        accepted through this object wake it at once, without a read. ``poll`` as for
        ``wait_for_head``.
        """
        key = check_key(key)
        poll = self._poll(poll)
        read = self._hinted(
            self._inbox_seen,
            key,
            after,
            local,
            lambda: self._saw_inbox(key, self._inbox_head(key)),
            poll,
        )
        return self._wait(read, after, timeout, stop, key=key, inbox=True, poll=poll)

    def _accepted(self, key: SessionKey, record: Event) -> None:
        """A record was accepted through this object, after its waiters were woken
        (``WorkClaims`` keeps its default index of pending work with it)."""

    # -- what a backend implements -----------------------------------------------------------

    @abstractmethod
    def _inbox_append(
        self, key: SessionKey, event: Event, dedupe_key: str | None, digest: str, now: float
    ) -> tuple[Event, bool]:
        """Atomically: refuse a deleted key, return the original of a known ``dedupe_key``,
        ``check_archived``, then append."""

    def _inbox_append_many(
        self, items: list[tuple[SessionKey, Event, str | None, str]], now: float
    ) -> list[tuple[Event, bool]]:
        """``_inbox_append`` of each item; a backend that can overrides this to commit them
        in one transaction."""
        return [self._inbox_append(key, e, dedupe, digest, now) for key, e, dedupe, digest in items]

    @abstractmethod
    def _inbox_head(self, key: SessionKey) -> int: ...

    @abstractmethod
    def _inbox_read(self, key: SessionKey, after: int, through: int) -> list[Event]: ...

    @abstractmethod
    def _inbox_keys(
        self, key: SessionKey, after: int, through: int
    ) -> list[tuple[int, str, str]]: ...
