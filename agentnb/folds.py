"""The two folds of a session kept current against its store, with snapshot caching.

Reopening a long session must not replay its whole log: the folds are saved now and then as
store snapshots (a cache, never the truth), and a reader loads the newest snapshot and folds
only the events after it. A snapshot that is missing, from another projector version, or
ahead of the log is ignored and rebuilt; so is one whose seal does not match (the store
binds each snapshot to the committed event at its seq, see ``SessionStore.put_snapshot``):
a snapshot row edited in the store file never changes what the folds show.
"""

from __future__ import annotations

import json
import logging
import threading
import zlib
from typing import Any

from agentnb.errors import AgentnbError, Corrupt
from agentnb.ids import SessionKey
from agentnb.projections.state import FOLDED_TYPES, InboxState, SessionState
from agentnb.stores.base import MAX_READ_LIMIT, SessionStore

__all__ = ["SNAPSHOT_EVERY", "ChatFolds", "Folds"]

log = logging.getLogger("agentnb.folds")

SNAPSHOT_EVERY = 1_000
"""Events folded since the last snapshot after which a new one is saved."""
_STATE, _INBOX = "session-state", "inbox-state"


def _encode(data: dict[str, Any]) -> bytes:
    return zlib.compress(json.dumps(data, separators=(",", ":")).encode(), 1)


def _decode(blob: bytes) -> dict[str, Any]:
    value = json.loads(zlib.decompress(blob))
    if not isinstance(value, dict):
        raise ValueError("snapshot is not a JSON object")
    return value


class Folds:
    """``SessionState`` and ``InboxState`` of one session, brought up to date on ``refresh``."""

    def __init__(self, store: SessionStore, key: SessionKey) -> None:
        self.store = store
        self.key = key
        self.state = SessionState()
        self.inbox = InboxState()
        self._loaded = False
        self._saved_seq = 0
        self._saved_inbox = 0

    def _load(self) -> None:
        self._loaded = True
        head = self.store.head(self.key)
        inbox_head = self.store.inbox_head(self.key)
        for name, limit in ((_STATE, head), (_INBOX, inbox_head)):
            found = self.store.get_snapshot(self.key, name)
            if found is None or found[0] > limit:
                continue
            try:
                data = _decode(found[1])
                if name == _STATE:
                    self.state = SessionState.load(data)
                    self._saved_seq = self.state.seq
                else:
                    self.inbox = InboxState.load(data)
                    self._saved_inbox = self.inbox.seq
            except (ValueError, KeyError, TypeError, zlib.error) as exc:
                log.info("session %s: ignoring snapshot %s (%s)", self.key, name, exc)

    def refresh_inbox(self) -> InboxState:
        """Fold the inbox commands accepted since the last call."""
        if not self._loaded:
            self._load()
        while batch := self.store.inbox_read_after(self.key, self.inbox.seq, 1000):
            for event in batch:
                self.inbox.apply(event)
        return self.inbox

    def refresh(self) -> tuple[SessionState, InboxState]:
        """Fold whatever was committed since the last call (both logs).

        A refresh that had to fold a long tail (a log nobody snapshotted lately) saves a
        snapshot, so the next reader does not fold it again; regular snapshots are the
        executing driver's job, written off its loop.
        """
        # Inbox first: a command seen there may have started by the time the log is read,
        # never the other way round.
        self.refresh_inbox()
        before = self.state.seq
        self._fold_log()
        if self.state.seq - before >= SNAPSHOT_EVERY:
            self.save_if_due()
        return self.state, self.inbox

    def _fold_log(self) -> None:
        """Fold the execution log's new events, decoding only the types the fold reads."""
        head = self.store.head(self.key)
        pos = self.state.seq
        while pos < head:
            page = self.store.read_raw(self.key, pos, min(MAX_READ_LIMIT, head - pos))
            if not page:
                raise Corrupt(
                    f"session {self.key}: events after seq {pos} are missing "
                    f"(expected up to {head})"
                )
            for raw in page:
                if raw.type in FOLDED_TYPES:
                    self.state.apply(raw.to_event())
                else:  # streamed chunks and the like: nothing to decode
                    self.state.seq = raw.seq
            pos = page[-1].seq

    def due_snapshots(self, every: int = SNAPSHOT_EVERY) -> list[tuple[str, int, Any]]:
        """Snapshots of the folds that are due (the state must be committed), not encoded.

        Each is a fresh structure that the folds never change afterwards, so it can be
        encoded and written on another thread while the folds go on.
        """
        due: list[tuple[str, int, Any]] = []
        if self.state.seq - self._saved_seq >= every:
            due.append((_STATE, self.state.seq, self.state.dump()))
            self._saved_seq = self.state.seq
        if self.inbox.seq - self._saved_inbox >= every:
            # The inbox has its own sequence; the store checks snapshot seqs against the
            # execution head, so stamp it with one that is never past it.
            due.append((_INBOX, min(self.inbox.seq, self.state.seq), self.inbox.dump()))
            self._saved_inbox = self.inbox.seq
        return due

    def put_snapshots(self, due: list[tuple[str, int, Any]]) -> None:
        """Encode and write snapshots (best effort: a cache that cannot be written is only
        slower)."""
        for name, seq, data in due:
            try:
                self.store.put_snapshot(self.key, name, seq, _encode(data))
            except AgentnbError as exc:
                log.info("session %s: snapshot %s not saved: %s", self.key, name, exc)

    def save_if_due(self, every: int = SNAPSHOT_EVERY) -> None:
        """Save the snapshots that are due."""
        self.put_snapshots(self.due_snapshots(every))


_CHAT = "chat-state"


class ChatFolds:
    """The chat fold of one session (``Session.snapshot()``), cached like ``Folds``."""

    def __init__(self, store: SessionStore, key: SessionKey) -> None:
        from agentnb.projections.chat import ChatState

        self.store = store
        self.key = key
        self.chat = ChatState()
        self._loaded = False
        self._saved_seq = 0
        self._lock = threading.Lock()

    def _load(self, limit: int) -> None:
        from agentnb.projections.chat import ChatState

        self._loaded = True
        found = self.store.get_snapshot(self.key, _CHAT)
        if found is None or found[0] > limit:
            return
        try:
            self.chat = ChatState.load(_decode(found[1]))
            self._saved_seq = self.chat.seq
        except (ValueError, KeyError, TypeError, zlib.error) as exc:
            log.info("session %s: ignoring snapshot %s (%s)", self.key, _CHAT, exc)

    def snapshot(self, through: int, inbox: InboxState, *, executing: bool) -> Any:
        """The ``ChatSnapshot`` of exactly ``(0, through]`` (plus queued tasks from ``inbox``)."""
        with self._lock:
            return self._refresh(through).snapshot(inbox, executing=executing)

    def copy(self, through: int) -> Any:
        """A private ``ChatState`` of exactly ``(0, through]`` that the caller may fold on."""
        from agentnb.projections.chat import ChatState

        with self._lock:
            return ChatState.load(self._refresh(through).dump())

    def refresh(self, through: int | None = None) -> None:
        """Fold up to ``through`` (default: the head now), saving a snapshot when due."""
        with self._lock:
            self._refresh(self.store.head(self.key) if through is None else through)

    def _refresh(self, head: int) -> Any:
        """The chat fold of exactly ``(0, head]``; a newer snapshot is saved when due."""
        if not self._loaded:
            self._load(head)
        if self.chat.seq > head:  # asked for an older prefix: fold it from scratch
            from agentnb.projections.chat import ChatState

            return ChatState.fold(self.store.scan(self.key, 0, head))
        for event in self.store.scan(self.key, self.chat.seq, head):
            self.chat.apply(event)
        if self.chat.seq - self._saved_seq >= SNAPSHOT_EVERY:
            try:
                self.store.put_snapshot(self.key, _CHAT, self.chat.seq, _encode(self.chat.dump()))
                self._saved_seq = self.chat.seq
            except AgentnbError as exc:
                log.info("session %s: snapshot %s not saved: %s", self.key, _CHAT, exc)
        return self.chat
