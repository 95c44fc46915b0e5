"""The two folds of a session kept current against its store, with snapshot caching.

Reopening a long session must not replay its whole log: the folds are saved now and then as
store snapshots (a cache, never the truth), and a reader loads the newest snapshot and folds
only the events after it. A snapshot that is missing, from another projector version, or
ahead of the log is ignored and rebuilt; so is one whose seal does not match (the store
binds each snapshot to the committed event at its seq, see ``SessionStore.put_snapshot``):
a snapshot row edited in the store file never changes what the folds show.

With ``limits`` a refresh replays at most ``Limits.max_recovery_events`` events (of both logs)
and ``max_recovery_bytes`` payload bytes; past them it raises ``RecoveryLimitExceeded`` and
drops what it folded, so the next refresh starts again from the newest snapshot.
"""

from __future__ import annotations

import collections
import functools
import json
import logging
import math
import threading
import weakref
import zlib
from collections.abc import Collection, Iterator, Sequence
from typing import Any

import orjson

from agentnb.errors import AgentnbError, Corrupt, RecoveryLimitExceeded
from agentnb.events import Event, Message, canonical_json, decode_json
from agentnb.ids import SessionKey
from agentnb.limits import Limits, check_replay
from agentnb.projections.state import (
    CONTEXT_TYPES,
    FOLDED_TYPES,
    KEEP_TURNS,
    TRANSCRIPT_TYPES,
    InboxState,
    SessionState,
    retire_turns,
)
from agentnb.stores._rows import PART_MIN, blob_digest, split_parts, stored_text
from agentnb.stores.base import MAX_READ_LIMIT, RawEvent, SessionStore

__all__ = ["CHAT_SNAPSHOT_EVERY", "SNAPSHOT_EVERY", "ChatFolds", "Folds", "committing"]

log = logging.getLogger("agentnb.folds")

SNAPSHOT_EVERY = 250
"""Events folded since the last snapshot after which a new one is saved."""
CHAT_SNAPSHOT_EVERY = 4 * SNAPSHOT_EVERY
"""The same for the chat fold, whose snapshot (every item of the newest turns) costs more to
write; a reopen folds at most this many events for the view."""
_FOLDS = "session-folds"
"""One snapshot of both folds (the execution log's and the inbox's), taken together."""


_HERE: weakref.WeakValueDictionary[str, Event] = weakref.WeakValueDictionary()
"""The events this process's writers committed (or are committing), by event id, for as long
as anything else holds them.

A reader of this process that must read the store (a waiter woken between a commit and its
hand-over to the folds, a fold that starts while the driver runs) takes these objects instead
of decoding the rows again: the messages they hold are the ones every other fold of the
process shares, never a second copy each."""


def committing(events: Sequence[Event]) -> None:
    """A writer of this process is about to commit ``events`` (with their seqs): readers of
    the store that meet their rows take these objects."""
    for event in events:
        _HERE[event.event_id] = event


def _event_of(raw: RawEvent) -> Event:
    """The committed event a row holds: this process's own object when it has one."""
    event = _HERE.get(raw.event_id)
    if event is not None and event.seq == raw.seq:
        return event
    return raw.to_event()


def _scan(store: SessionStore, key: SessionKey, after: int, through: int) -> Iterator[Event]:
    """The committed events in ``(after, through]``, as ``SessionStore.scan`` gives them but
    with this process's own objects where it has them (see ``_HERE``)."""
    pos = after
    while pos < through:
        page = store.read_raw(key, pos, min(MAX_READ_LIMIT, through - pos))
        if not page:
            raise Corrupt(f"session {key}: events after seq {pos} are missing (up to {through})")
        for raw in page:
            yield _event_of(raw)
        pos = page[-1].seq


_PARTED = b"\x01"
"""The first byte of a snapshot whose long texts are left to the session's blobs (a JSON
snapshot starts with ``{``: an older reader finds no JSON and folds the log instead)."""


def _encode(data: dict[str, Any], store: SessionStore, key: SessionKey) -> bytes:
    """A snapshot's bytes. A text of ``PART_MIN`` characters or more that the session's
    events already keep as a blob (a long task is in several events and in the folds) is
    left out where it stood, named by its digest: a snapshot never holds another copy."""
    try:
        text = orjson.dumps(data, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:  # an int past 64 bits
        text = json.dumps(data, separators=(",", ":")).encode()
    if len(text) >= 2 * PART_MIN:
        parted = _parted(text.decode(), data, store.blob_usage(key))
        if parted is not None:
            return zlib.compress(parted, 1)
    return zlib.compress(text, 1)


def _parted(body: str, data: dict[str, Any], held: Collection[str]) -> bytes | None:
    """``_PARTED``, the digests, then ``body`` with a hole for each long text in ``held``
    (None when no long text is a blob of the session's)."""
    if not held:
        return None

    def named(literal: bytes) -> str | None:
        digest = blob_digest(literal)
        return digest if digest in held else None

    skeleton, digests = split_parts(body, data, named)
    if not digests:
        return None
    return _PARTED + " ".join(digests).encode() + b"\n" + skeleton.encode()


def _decode(blob: bytes, store: SessionStore) -> dict[str, Any]:
    raw = zlib.decompress(blob)
    if raw.startswith(_PARTED):
        head, _, skeleton = raw[1:].partition(b"\n")
        try:
            raw = stored_text(skeleton.decode(), head.decode(), store.get_blob).encode()
        except AgentnbError as exc:  # a blob gone: the snapshot is ignored, the log folded
            raise ValueError(f"snapshot names a blob that does not read back: {exc}") from exc
    value = decode_json(raw)
    if not isinstance(value, dict):
        raise ValueError("snapshot is not a JSON object")
    return value


def load_context(
    store: SessionStore, key: SessionKey, through: int, *, transcript: bool = False
) -> list[Message]:
    """The working context committed at or below ``through``, folded from the log; with
    ``transcript``, every message ever committed instead (no compaction replaces any).

    Only the message events are decoded; the same fold rule builds them as ``SessionState``.
    """
    types = TRANSCRIPT_TYPES if transcript else CONTEXT_TYPES
    state = SessionState()
    pos = 0
    while pos < through:
        page = store.read_raw(key, pos, min(MAX_READ_LIMIT, through - pos))
        if not page:
            raise Corrupt(f"session {key}: events after seq {pos} are missing (up to {through})")
        for raw in page:
            if raw.type in types:
                state.apply(_event_of(raw))
        pos = page[-1].seq
    return state.context


class Folds:
    """``SessionState`` and ``InboxState`` of one session, brought up to date on ``refresh``."""

    def __init__(
        self,
        store: SessionStore,
        key: SessionKey,
        *,
        whole: bool = False,
        limits: Limits | None = None,
    ) -> None:
        self.store = store
        self.key = key
        self.whole = whole
        """Fold every turn from the start and retire none (a reader of the history)."""
        self.limits = limits
        """The recovery bounds of one refresh (None: unbounded)."""
        self._reset()
        self._replayed = [0, 0]
        """Events and payload bytes the refresh under way has folded."""
        self._offered: collections.deque[Sequence[Event]] = collections.deque()
        """Commits handed over by the commit bus, not folded yet (``offer``)."""

    def offer(self, events: Sequence[Event]) -> None:
        """Hand over committed events from any thread without waiting (the commit bus):
        folded by the next ``take_offered`` or ``refresh``, which then never reads them
        back, even when a refresh under way learned of their commit first."""
        self._offered.append(events)
        if len(self._offered) > _OFFERED_MAX:
            self._offered.popleft()  # nobody reads: the log has them

    def take_offered(self) -> None:
        """Fold the offered commits that follow the fold (the caller owns the folds)."""
        while self._offered:
            self.feed(self._offered.popleft())

    def _reset(self) -> None:
        """Back to nothing folded: the next refresh starts from the newest snapshot."""
        self.state = SessionState()
        self.inbox = InboxState()
        self._loaded = self.whole
        self._saved_seq = 0
        self._saved_inbox = 0
        self.restored_from: int | None = None
        """The seq of the snapshot the folds started from (None: folded from the start);
        a driver records it as ``state/restored`` and clears it."""

    def _load(self) -> tuple[int, int] | None:
        """Start from the newest snapshot of both folds, taken together (never one alone:
        retiring old turns changes both, so a state and an inbox of different moments could
        make a retired command look unhandled). Returns the heads it read to check the
        snapshot (None: no snapshot, nothing read)."""
        self._loaded = True
        found = self.store.get_snapshot(self.key, _FOLDS)
        if found is None:
            return None
        heads = head, inbox_head = self.store.heads(self.key)
        if found[0] > head:
            return heads
        try:
            data = _decode(found[1], self.store)
            state = SessionState.load(data["state"], self.context_loader)
            inbox = InboxState.load(data["inbox"])
            state.app.check_current()  # folded by other reducers: the log folds them anew
        except (ValueError, KeyError, TypeError, zlib.error) as exc:
            log.info("session %s: ignoring snapshot %s (%s)", self.key, _FOLDS, exc)
            return heads
        if inbox.seq > inbox_head:
            return heads  # an inbox that lost commands it had: fold both logs from the start
        self.state, self.inbox = state, inbox
        self._saved_seq, self._saved_inbox = state.seq, inbox.seq
        self.restored_from = state.seq
        return heads

    @property
    def loaded(self) -> bool:
        """Whether the folds started (from a snapshot or the log's start) and are fed."""
        return self._loaded

    def holds_known(self) -> bool:
        """Whether the folds started and hold every commit of both logs that their store
        object made, accepted or read (its hints; never a database call). Commands of
        other processes it has not seen may still be missing."""
        store, key = self.store, self.key
        return (
            self._loaded
            and store.head_hint(key) <= self.state.seq
            and store.inbox_head_hint(key) <= self.inbox.seq
        )

    def feed_inbox(self, record: Event) -> None:
        """Fold an inbox record this process just accepted, when it follows the fold (else
        the next refresh reads it)."""
        if self._loaded and record.seq == self.inbox.seq + 1:
            self.inbox.apply(record)

    def feed(self, events: Sequence[Event]) -> None:
        """Fold events this process just committed, so no reader reads them back.

        Only events that follow the fold's seq without a gap are taken; anything else (a
        fold not loaded yet, events of another writer in between) waits for ``refresh``.
        Finished turns are retired as ``refresh`` retires them: a fold that only ever gets
        fed (a waiter's, while this process runs the session) stays bounded too.
        """
        if not self._loaded:
            return
        for event in events:
            if event.seq != self.state.seq + 1:
                if event.seq > self.state.seq + 1:
                    break
                continue
            self.state.apply(event)
        self._bound()

    def _bound(self) -> None:
        """Retire finished turns once the fold holds twice the turns it keeps."""
        if not self.whole and len(self.state.turns) > 2 * KEEP_TURNS:
            retire_turns(self.state, self.inbox)

    @property
    def context_loader(self) -> functools.partial[list[Message]]:
        """Reads this session's context from the log (for states loaded from a snapshot)."""
        return functools.partial(load_context, self.store, self.key)

    def refresh_inbox(self) -> InboxState:
        """Fold the inbox commands accepted since the last call."""
        if not self._loaded:
            self._load()
        while batch := self.store.inbox_read_after(self.key, self.inbox.seq, _INBOX_PAGE):
            if self.limits is not None:
                self._replay(len(batch), sum(len(canonical_json(e.payload)) for e in batch))
            for event in batch:
                self.inbox.apply(event)
            if len(batch) < _INBOX_PAGE:
                break  # a short page is the end: no read that finds nothing
        return self.inbox

    def _replay(self, events: int, nbytes: int, *, ahead: int = 0) -> None:
        """Count what this refresh folds; ``RecoveryLimitExceeded`` past the bounds (checked
        with ``ahead`` more events that are about to be read)."""
        assert self.limits is not None
        self._replayed[0] += events
        self._replayed[1] += nbytes
        check_replay(self._replayed[0] + ahead, self._replayed[1], self.limits, session=self.key)

    def refresh(self) -> tuple[SessionState, InboxState]:
        """Fold whatever was committed since the last call (both logs).

        A refresh that had to fold a long tail (a log nobody snapshotted lately) saves a
        snapshot, so the next reader does not fold it again; regular snapshots are the
        executing driver's job, written off its loop. Past the recovery bounds (``limits``)
        a fold that fell far behind starts again from the newest snapshot once; if that is
        still too far, ``RecoveryLimitExceeded``.
        """
        if self.limits is None:
            return self._refresh()
        if self._loaded:
            try:
                return self._refresh()
            except RecoveryLimitExceeded:
                self._reset()
        try:
            return self._refresh()
        except RecoveryLimitExceeded:
            self._reset()
            raise

    def _refresh(self) -> tuple[SessionState, InboxState]:
        self._replayed = [0, 0]
        loaded = None if self._loaded else self._load()
        # Both heads at one moment, then each log up to at least its head: a command seen
        # started in the log is in the inbox read (it was accepted before it started).
        head, inbox_head = loaded or self.store.heads(self.key)
        if inbox_head > self.inbox.seq:
            self.refresh_inbox()
        before = self.state.seq
        self._fold_log(head)
        self._bound()
        if self.state.seq - before >= SNAPSHOT_EVERY and not self.whole:
            self.save_if_due()
        return self.state, self.inbox

    def _fold_log(self, head: int) -> None:
        """Fold the execution log's new events up to ``head``, decoding only the types the
        fold reads."""
        self.take_offered()
        pos = self.state.seq
        if self.limits is not None and head > pos:
            self._replay(0, 0, ahead=head - pos)
        while pos < head:
            self.take_offered()  # what the bus brought meanwhile is not read back
            if self.state.seq > pos:
                pos = self.state.seq
                continue
            page = self.store.read_raw(self.key, pos, min(MAX_READ_LIMIT, head - pos))
            if not page:
                raise Corrupt(
                    f"session {self.key}: events after seq {pos} are missing "
                    f"(expected up to {head})"
                )
            if self.limits is not None:
                self._replay(0, sum(len(raw.payload_json) for raw in page))
            for raw in page:
                if raw.type in FOLDED_TYPES or raw.type in self.state.app.reducers:
                    self.state.apply(_event_of(raw))
                else:  # streamed chunks and the like: nothing to decode
                    self.state.seq = raw.seq
            pos = page[-1].seq

    def due_snapshots(self, every: int = SNAPSHOT_EVERY) -> list[tuple[str, int, Any]]:
        """Snapshots of the folds that are due (the state must be committed), not encoded.

        Each is a fresh structure that the folds never change afterwards, so it can be
        encoded and written on another thread while the folds go on.
        """
        if (
            self.state.seq - self._saved_seq < every and self.inbox.seq - self._saved_inbox < every
        ) or self.state.seq == 0:
            return []
        retire_turns(self.state, self.inbox)  # both folds at once: never half retired
        self._saved_seq, self._saved_inbox = self.state.seq, self.inbox.seq
        data = {"state": self.state.dump(), "inbox": self.inbox.dump()}
        return [(_FOLDS, self.state.seq, data)]

    def put_snapshots(self, due: list[tuple[str, int, Any]]) -> None:
        """Encode and write snapshots (best effort: a cache that cannot be written is only
        slower)."""
        for name, seq, data in due:
            try:
                self.store.put_snapshot(self.key, name, seq, _encode(data, self.store, self.key))
            except AgentnbError as exc:
                log.info("session %s: snapshot %s not saved: %s", self.key, name, exc)

    def save_if_due(self, every: int = SNAPSHOT_EVERY) -> None:
        """Save the snapshots that are due."""
        self.put_snapshots(self.due_snapshots(every))


_INBOX_PAGE = 1000
"""Inbox records read at most per read."""
_OFFERED_MAX = 10_000
"""Commits the session folds keep for their next reader (past them it reads the log)."""
_FED_MAX = 10_000
"""Commits the chat fold keeps for its next reader (past them it reads the log)."""
_CHAT = "chat-state"
_ITEMS_WINDOW = 256
"""Events read per step when older chat items are read back from the log."""


def load_items(store: SessionStore, key: SessionKey, through: int, count: int) -> list[Any]:
    """The newest ``count`` chat items of the log at or below ``through``, oldest first.

    Read backwards by windows that start at a ``turn/start`` (a turn's events are contiguous
    in the log), each folded on its own, until ``count`` items or the start of the log.
    """
    from agentnb.projections.chat import ChatState

    window = _ITEMS_WINDOW
    while True:
        low = max(0, through - window)
        events = list(_scan(store, key, low, through))
        starts = [e.seq for e in events if e.type == "turn/start"]
        begin = 0 if low == 0 else (starts[0] - 1 if starts else None)
        if begin is not None:
            chat = ChatState()
            for event in events:
                if event.seq > begin:
                    chat.apply(event)
            items = chat.items
            if len(items) >= count or begin == 0:
                return list(items[-count:])
        window *= 2


class ChatFolds:
    """The chat fold of one session (``Session.snapshot()``), cached like ``Folds``.

    Items of finished turns older than the newest ``KEEP_TURNS`` are retired (read back from
    the log by page when asked for), so the fold and its snapshot stay bounded.

    One per session per runtime (``Runtime.chat_folds``), fed by the commit bus: snapshots,
    the ``SessionView`` and the server's page streams all read this one (``current``), so a
    committed event is folded into the chat once in the process.
    """

    def __init__(self, store: SessionStore, key: SessionKey) -> None:
        self.store = store
        self.key = key
        self.chat = self._new(None)
        self._loaded = False
        self._saved_seq = 0
        self._lock = threading.RLock()
        self._fed: collections.deque[Sequence[Event]] = collections.deque()
        """Commits of this process not folded yet (folded at the next read)."""

    @property
    def lock(self) -> threading.RLock:
        """Held while the shared fold is read (``current``) or folded on."""
        return self._lock

    def current(self, at_least: int) -> Any:
        """The one chat fold of the session, holding at least ``(0, at_least]`` (and what
        was fed beyond it): shared, so the caller holds ``lock`` while it reads it, and
        never folds on it. The log is read only for what nobody fed."""
        with self._lock:
            return self._refresh(at_least, newest=True)

    def feed(self, events: Sequence[Event]) -> None:
        """Hand over committed events (the commit bus's, or a follower's from another
        process), so the fold need not read them back.

        Never blocks the committer: they are folded by the next reader (or snapshot)."""
        self._fed.append(events)
        if len(self._fed) > _FED_MAX:
            self._fed.popleft()  # nobody reads: the oldest are read from the log if asked for

    def _take_fed(self, head: float) -> None:
        """Under the lock: fold the fed events that follow the fold, up to ``head``."""
        while self._fed:
            batch = self._fed.popleft()
            for i, event in enumerate(batch):
                if event.seq > head:  # asked for an older prefix: keep the rest for later
                    self._fed.appendleft(batch[i:])
                    return
                if event.seq > self.chat.seq + 1:  # a gap nobody fed: read it from the log
                    for missed in self.store.scan(self.key, self.chat.seq, event.seq - 1):
                        self.chat.apply(missed)
                if event.seq == self.chat.seq + 1:
                    self.chat.apply(event)
                # older ones are folded already

    def _new(self, data: dict[str, Any] | None) -> Any:
        """A chat fold (from a dump, or empty) wired to read the log when it must."""
        from agentnb.projections.chat import ChatState

        loader = functools.partial(load_context, self.store, self.key)
        chat = ChatState() if data is None else ChatState.load(data, loader)
        chat.session.context_loader = loader
        chat.session.transcript_loader = functools.partial(
            load_context, self.store, self.key, transcript=True
        )
        chat.items_loader = functools.partial(load_items, self.store, self.key)
        return chat

    def _load(self, limit: int) -> None:
        self._loaded = True
        found = self.store.get_snapshot(self.key, _CHAT)
        if found is None or found[0] > limit:
            return
        try:
            self.chat = self._new(_decode(found[1], self.store))
            self._saved_seq = self.chat.seq
        except (ValueError, KeyError, TypeError, zlib.error) as exc:
            log.info("session %s: ignoring snapshot %s (%s)", self.key, _CHAT, exc)

    def snapshot(self, through: int, inbox: InboxState, *, executing: bool) -> Any:
        """The ``ChatSnapshot`` of exactly ``(0, through]`` (plus queued tasks from ``inbox``)."""
        with self._lock:
            return self._refresh(through).snapshot(inbox, executing=executing)

    def copy(self, through: int) -> Any:
        """A private ``ChatState`` of exactly ``(0, through]`` that the caller may fold on."""
        with self._lock:
            return self._new(self._refresh(through).dump())

    def refresh(self, through: int | None = None) -> None:
        """Fold up to ``through`` (default: the head now), saving a snapshot when due."""
        with self._lock:
            self._refresh(self.store.head(self.key) if through is None else through)

    def keep_up(self, through: int) -> None:
        """Fold up to ``through`` and snapshot, if the last snapshot is a whole interval
        behind it (the executing driver calls this, so a reopen finds a recent snapshot)."""
        if through - self._saved_seq >= CHAT_SNAPSHOT_EVERY:
            self.refresh(through)

    def _refresh(self, head: int, *, newest: bool = False) -> Any:
        """The chat fold of exactly ``(0, head]`` (``newest``: of at least that, with all
        that was fed); a newer snapshot is saved when due."""
        if not self._loaded:
            self._load(head)
        if self.chat.seq > head and not newest:  # an older prefix: fold it from scratch
            older = self._new(None)
            for event in _scan(self.store, self.key, 0, head):
                older.apply(event)
            return older
        self._take_fed(math.inf if newest else head)
        if self.chat.seq < head:
            for event in _scan(self.store, self.key, self.chat.seq, head):
                self.chat.apply(event)
        if len(self.chat.session.turns) > 2 * KEEP_TURNS:
            self.chat.retire()
        if self.chat.seq - self._saved_seq >= CHAT_SNAPSHOT_EVERY:
            try:
                data = _encode(self.chat.dump(), self.store, self.key)
                self.store.put_snapshot(self.key, _CHAT, self.chat.seq, data)
                self._saved_seq = self.chat.seq
            except AgentnbError as exc:
                log.info("session %s: snapshot %s not saved: %s", self.key, _CHAT, exc)
        return self.chat
