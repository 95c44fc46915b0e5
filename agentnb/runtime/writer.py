"""The log writer of a running session: events buffered, then committed in fenced batches.

``LogWriter`` applies each event to the driver's working state as it is added and commits
what it holds in one atomic batch right before a side effect (or a run's end). With a
session cap (``Limits.max_session_events`` / ``max_session_bytes``) a batch that would pass
it is refused with ``SessionFull`` before anything is written; a batch that ends a run (or
cancels a turn) may use the reserve the cap keeps for that, so the run's end still commits.
``ChunkGroup`` groups streamed pieces into ``model/chunk`` events by time and by count.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from agentnb.errors import (
    AppendConflict,
    Fenced,
    IdempotencyConflict,
    InvalidInput,
    LeaseHeld,
    SessionNotFound,
    StorageError,
)
from agentnb.events import Event, canonical_json
from agentnb.folds import committing
from agentnb.ids import SessionKey, new_id
from agentnb.limits import Limits, check_room
from agentnb.models.base import ReasoningDelta, TextDelta, ToolCallDelta
from agentnb.projections.state import INSIDE_A_STEP, SessionState
from agentnb.stores.base import Lease, SessionStore

__all__ = ["CHUNK_GROUP_INTERVAL", "CHUNK_GROUP_MAX", "FATAL", "ChunkGroup", "LogWriter"]

log = logging.getLogger("agentnb.runtime")

CHUNK_GROUP_INTERVAL = 0.1
"""Seconds of streamed pieces grouped into one ``model/chunk`` event."""
CHUNK_GROUP_MAX = 512
"""Streamed pieces at most in one ``model/chunk`` event."""
FATAL = (Fenced, AppendConflict, LeaseHeld, SessionNotFound)
"""Errors after which this process must stop executing the session."""
_NO_RETRY = (*FATAL, InvalidInput, IdempotencyConflict)
_ENDING = frozenset({"run/end", "turn/cancelled"})
"""A batch with one of these ends a run or a turn: it may use the cap's reserve."""


class LogWriter:
    """Buffers events for one session and commits them in fenced batches.

    Events are applied to ``state`` as they are added (this process holds the lease, so it
    is the only writer); if a commit fails the driver refolds the state from the log.
    """

    def __init__(
        self,
        store: SessionStore,
        key: SessionKey,
        state: SessionState,
        limits: Limits | None = None,
    ) -> None:
        self.store = store
        self.key = key
        self.state = state
        self.limits = limits
        self.lease: Lease | None = None
        self.head = state.seq
        self.pending: list[Event] = []
        self.on_commit: Callable[[list[Event]], None] | None = None
        self._flushing = asyncio.Lock()
        """One commit at a time: a stop recorded while the run commits waits for it."""

    def add(
        self,
        type_: str,
        payload: Any = None,
        *,
        turn_id: str | None = None,
        run_id: str | None = None,
        required: bool | None = None,
    ) -> Event:
        """Add an event whose payload the runtime built (trusted: ``Event.built``)."""
        return self.add_event(
            Event.built(type_, payload, turn_id=turn_id, run_id=run_id, required=required)
        )

    def add_event(self, event: Event) -> Event:
        event = event.with_seq(self.head + len(self.pending) + 1)
        self.pending.append(event)
        self.state.apply(event)
        return event

    async def flush(self, *, tail: Sequence[Event] = (), expected_inbox: int | None = None) -> None:
        """Commit everything buffered (plus ``tail``) as one atomic batch.

        ``tail`` events are applied to the state only once committed, so a commit refused
        because the inbox moved (``expected_inbox``) leaves no trace of them. Transient store
        errors are retried with the same batch id: a no-op if the batch did commit.

        Commits are serialised (a stop is recorded by its own commit while the run may be
        committing, ``runtime/run_loop.py``); a caller that may be cancelled mid-commit
        shields it, so the writer never loses track of what it committed.
        """
        async with self._flushing:
            await self._flush(tail, expected_inbox)

    async def _flush(self, tail: Sequence[Event], expected_inbox: int | None) -> None:
        first = self.head + len(self.pending) + 1
        staged = [e.with_seq(first + i) for i, e in enumerate(tail)]
        batch = self.pending + staged
        if not batch:
            return
        in_flight = len(self.pending)
        limits = self.limits
        if limits is not None and limits.max_session_bytes is not None:
            await asyncio.to_thread(self._check_room, limits, batch)  # reads the catalogue
        elif limits is not None and limits.max_session_events is not None:
            self._check_room(limits, batch)
        batch_id = new_id("batch")
        committing(batch)  # a reader of this process meeting these rows takes these objects
        for attempt in range(5):
            try:
                await asyncio.to_thread(
                    self.store.append,
                    self.key,
                    batch,
                    expected_seq=self.head,
                    batch_id=batch_id,
                    fence=self.lease,
                    expected_inbox=expected_inbox,
                    wake=False,  # woken below, once the readers of this process have them
                )
                break
            except _NO_RETRY:
                raise
            except StorageError:
                if attempt == 4:
                    raise
                await asyncio.sleep(0.05 * 2**attempt)
        for event in staged:
            self.state.apply(event)
        # Events added while the commit was in flight (tool progress) stay pending.
        self.pending = self.pending[in_flight:]
        self.head = batch[-1].seq
        for i, event in enumerate(self.pending):
            self.pending[i] = event.with_seq(self.head + i + 1)
        if self.on_commit is not None:
            try:
                self.on_commit(batch)
            except Exception:  # an observer's failure must not look like a failed commit
                log.exception("session %s: a commit observer failed", self.key)
        # A commit of only a step's own events cannot end a turn: who waits for that sleeps on.
        minor = all(event.type in INSIDE_A_STEP for event in batch)
        self.store.wake_waiters(self.key, inbox=False, minor=minor)

    def _check_room(self, limits: Limits, batch: Sequence[Event]) -> None:
        """``SessionFull`` if ``batch`` would pass the session's cap."""
        nbytes = 0
        if limits.max_session_bytes is not None:
            record = self.store.get_session(self.key)
            nbytes = record.bytes if record is not None else 0
        check_room(
            self.head,
            nbytes,
            stage="end" if any(e.type in _ENDING for e in batch) else "run",
            adding_events=len(batch),
            adding_bytes=sum(len(canonical_json(e.payload)) for e in batch),
            limits=limits,
            session=self.key,
        )


class ChunkGroup:
    """Streamed pieces grouped into ``model/chunk`` events (by time and by count)."""

    def __init__(self, writer: LogWriter, call_id: str, turn_id: str, run_id: str) -> None:
        self.writer = writer
        self.call_id = call_id
        self.ids = (turn_id, run_id)
        self.text: list[str] = []
        self.fragments: list[dict[str, Any]] = []
        self.reasoning: list[dict[str, Any]] = []
        self.start = 0
        self.pieces = 0
        self.opened = time.monotonic()

    def add(self, item: TextDelta | ReasoningDelta | ToolCallDelta) -> dict[str, Any]:
        """Take one piece; returns it as live-notification data. ``piece`` is its place in
        the reply's stream: the ``model/chunk`` that commits it covers ``[index, index +
        pieces)``, so a live observer can tell which pieces a commit already holds."""
        piece = self.pieces
        self.pieces += 1
        if isinstance(item, TextDelta):
            self.text.append(item.text)
            return {"text": item.text, "piece": piece}
        if isinstance(item, ReasoningDelta):
            # Reasoning is its own kind of piece: the fields a part has not set stay out.
            thought: dict[str, Any] = {"index": item.index, "text": item.text}
            for name in ("provider", "signature", "data", "id", "summary"):
                value = getattr(item, name)
                if value:
                    thought[name] = list(value) if name == "summary" else value
            self.reasoning.append(thought)
            return {"reasoning": thought, "piece": piece}
        fragment = {
            "index": item.index,
            "call_id": item.call_id,
            "name": item.name,
            "arguments_delta": item.arguments_delta,
        }
        self.fragments.append(fragment)
        return {"tool_call": fragment, "piece": piece}

    def close_if_due(self, now: float) -> None:
        if now - self.opened >= CHUNK_GROUP_INTERVAL or self.pieces - self.start >= CHUNK_GROUP_MAX:
            self.close()
            self.opened = now

    def close(self) -> None:
        if not self.text and not self.fragments and not self.reasoning:
            return
        payload: dict[str, Any] = {
            "model_call_id": self.call_id,
            "index": self.start,
            "text": "".join(self.text),
            "tool_call_fragments": self.fragments,
            "pieces": self.pieces - self.start,
        }
        if self.reasoning:
            payload["reasoning_fragments"] = self.reasoning
        self.writer.add("model/chunk", payload, turn_id=self.ids[0], run_id=self.ids[1])
        self.text, self.fragments, self.reasoning, self.start = [], [], [], self.pieces
