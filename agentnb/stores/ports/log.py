"""The execution log: gapless seqs from 1, written only in atomic, fenced batches.

``append(key, events, expected_seq=, batch_id=, fence=)``
    All or nothing. The events get seqs ``expected_seq + 1 ...``. If the head is not
    ``expected_seq`` the call raises ``AppendConflict`` and writes nothing. A retry of a batch
    that did commit (lost acknowledgement: same ``batch_id``, same content) returns the committed
    events and writes nothing; the same ``batch_id`` with other content raises
    ``IdempotencyConflict``. With a ``fence`` (a ``Lease``) the commit happens only if that lease
    is still the live one, else ``Fenced``; without a fence it is refused with ``LeaseHeld``
    while someone holds a live lease.
``read_after(key, after, limit)`` / ``scan(key, after, through)``
    Committed events in seq order. Reads of a committed prefix are stable while writers append
    and never block them. A gap, a row that fails its checksum or does not decode, or a required
    type this reader does not know raises ``Corrupt`` (naming session and seq): never a skip.
"""

from __future__ import annotations

import threading
from abc import abstractmethod
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from agentnb.errors import Corrupt, InvalidInput
from agentnb.events import Event, event_digest
from agentnb.ids import SessionKey, check_id
from agentnb.stores._rows import RawEvent
from agentnb.stores.core import guarded
from agentnb.stores.decisions import (
    check_key,
    check_limit,
    check_seq,
    checked,
    gap,
    stamp,
)
from agentnb.stores.values import (
    SCAN_PAGE,
    Lease,
)
from agentnb.stores.waiting import Waiting

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["EventLog"]


class EventLog(Waiting):
    """Reads and writes of a session's execution log; ``wait_for_head`` waits for its commits."""

    _digests_rows = False
    """A backend that computes the batch digest itself while encoding (``_append`` then gets
    an empty ``digest``)."""

    @guarded
    def head(self, key: SessionKey) -> int:
        """Last committed seq (0 when empty). ``SessionNotFound`` for unknown sessions."""
        return self._head(check_key(key))

    @guarded
    def append(
        self,
        key: SessionKey,
        events: Sequence[Event],
        *,
        expected_seq: int,
        batch_id: str,
        fence: Lease | None = None,
        expected_inbox: int | None = None,
        wake: bool = True,
    ) -> list[Event]:
        """Commit ``events`` atomically after ``expected_seq``; returns them with their seqs.

        With ``expected_inbox`` the batch commits only if the inbox head is still that seq
        (else ``InboxChanged``, nothing written): a writer can decide from the inbox and
        commit that decision without another writer's command slipping in between.
        ``wake=False`` leaves this process's waiters asleep: the writer wakes them with
        ``wake_waiters(key)`` once it has handed the events to its readers (so they need
        not read them back); other processes' waiters poll as always.
        """
        key = check_key(key)
        check_id(batch_id, "batch_id")
        check_seq(expected_seq, "expected_seq")
        if fence is not None and not isinstance(fence, Lease):
            raise InvalidInput(f"fence must be a Lease, got {type(fence).__name__}")
        if fence is not None and fence.key != key:
            raise InvalidInput(f"fence is a lease of session {fence.key}, not of {key}")
        if expected_inbox is not None:
            check_seq(expected_inbox, "expected_inbox")
        batch = stamp(events, expected_seq, execution=True)
        self._append(
            key,
            batch,
            expected_seq,
            batch_id,
            "" if self._digests_rows else event_digest(batch),
            fence,
            self.clock.now(),
            expected_inbox=expected_inbox,
        )
        # On the bus before the hint moves: a waiter that sees the new head finds its events.
        self.bus.publish(key, batch)
        self._saw(self._heads_seen, key, batch[-1].seq)
        if wake:
            self._notify(key, inbox=False)
        return batch

    @guarded
    def read_after(self, key: SessionKey, after: int, limit: int) -> list[Event]:
        """Up to ``limit`` committed events with seq > ``after``."""
        key = check_key(key)
        check_seq(after, "after")
        check_limit(limit)
        return checked(key, after, self._read(key, after, after + limit))

    @guarded
    def read_raw(self, key: SessionKey, after: int, limit: int) -> list[RawEvent]:
        """Like ``read_after``, but events stay in their stored form (for exporters).

        Rows are checked (checksum, gaps, unknown required types) but payloads are not
        parsed: ``RawEvent.payload_json`` is the canonical JSON text that was committed.
        """
        key = check_key(key)
        check_seq(after, "after")
        check_limit(limit)
        return checked(key, after, self._read_raw(key, after, after + limit))

    def _read_raw(self, key: SessionKey, after: int, through: int) -> list[RawEvent]:
        """Backends with a cheaper stored form override this."""
        return [RawEvent.of(e) for e in self._read(key, after, through)]

    @guarded
    def read_arrow(self, key: SessionKey, after: int, limit: int) -> pa.Table:
        """Like ``read_raw``, as one Arrow table (needs pyarrow): the fast path of exporters.

        Columns: ``seq``, ``event_id``, ``type``, ``turn_id``, ``run_id``, ``required``,
        ``occurred_at`` (UTC microseconds), ``schema_version`` and ``payload`` (the committed
        canonical JSON text). Checked like ``read_raw``: checksums, gaps, required types.
        """
        key = check_key(key)
        check_seq(after, "after")
        check_limit(limit)
        table = self._read_arrow(key, after, after + limit)
        n = table.num_rows
        # Seqs are unique and sorted (the key of the log): n of them in (after, after + n]
        # with the last one at after + n leaves no room for a gap.
        if n and (table["seq"][0].as_py() != after + 1 or table["seq"][-1].as_py() != after + n):
            raise gap(key, after, table["seq"].to_pylist())
        return table

    def _read_arrow(self, key: SessionKey, after: int, through: int) -> pa.Table:
        """Backends that can fetch columns directly override this."""
        from agentnb.stores._arrow import from_raw

        return from_raw(self._read_raw(key, after, through))

    def scan(self, key: SessionKey, after: int = 0, through: int | None = None) -> Iterator[Event]:
        """Committed events in ``(after, through]`` (through defaults to the head now)."""
        key = check_key(key)
        check_seq(after, "after")
        with self._operation():
            head = self._head(key)
        end = head if through is None else check_seq(through, "through")
        if end > head:
            # Not a gap: those events were never committed. Saying Corrupt would mislead.
            raise InvalidInput(f"session {key}: through={end} is past the head {head}")
        pos = after
        while pos < end:
            with self._operation():
                page = checked(key, pos, self._read(key, pos, min(end, pos + SCAN_PAGE)))
            if not page:
                raise Corrupt(
                    f"session {key}: events after seq {pos} are missing (expected up to {end})"
                )
            yield from page
            pos = page[-1].seq

    def wait_for_head(
        self,
        key: SessionKey,
        after: int,
        timeout: float | None,
        *,
        stop: threading.Event | None = None,
        local: bool = False,
        settling: bool = False,
        poll: float | None = None,
    ) -> int:
        """Block until the head passes ``after``, ``timeout`` elapses or ``stop`` is set.

        Returns the head (at least: this object's own commits are known without asking
        the database, which is read at most every ``poll_interval`` for other writers').
        Whoever sets ``stop`` calls ``wake_waiters()`` to end the wait now. ``local``: the
        caller knows that only this store object commits to the session now (it holds the
        lease), so even the first read is left to the poll. ``settling``: the caller only
        cares about commits that may settle a turn, so the commits this object's writer
        calls minor (``wake_waiters(minor=True)``: events inside a step) do not wake it
        before the next poll; everything else does. ``poll``: seconds between reads of the
        database for other writers' commits, for this wait (default ``poll_interval``); a
        waiter that many wait beside (a server's stream) reads less often, and this
        process's commits still wake it at once.
        """
        key = check_key(key)
        poll = self._poll(poll)
        read = self._hinted(self._heads_seen, key, after, local, lambda: self._head(key), poll)
        return self._wait(
            read, after, timeout, stop, key=key, inbox=False, settling=settling, poll=poll
        )

    # -- what a backend implements -----------------------------------------------------------

    @abstractmethod
    def _head(self, key: SessionKey) -> int: ...

    @abstractmethod
    def _append(
        self,
        key: SessionKey,
        batch: list[Event],
        expected_seq: int,
        batch_id: str,
        digest: str,
        fence: Lease | None,
        now: float,
        *,
        expected_inbox: int | None = None,
    ) -> None:
        """Atomically: check_fence, decide_append, check_inbox, then write the batch."""

    @abstractmethod
    def _read(self, key: SessionKey, after: int, through: int) -> list[Event]:
        """Committed events with after < seq <= through, decoded (``decode_row``)."""
