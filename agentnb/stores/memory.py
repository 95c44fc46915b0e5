"""In-process store for tests and throwaway sessions; nothing survives the process."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field

from agentnb.errors import IdempotencyConflict, SessionNotFound
from agentnb.events import Event, check_readable
from agentnb.ids import Clock, SessionKey
from agentnb.stores._rows import blob_digest, check_blob
from agentnb.stores.base import (
    Lease,
    SessionRecord,
    SessionStore,
    _LeaseRow,
    check_fence,
    check_inbox,
    decide_acquire,
    decide_append,
    decide_release,
)


@dataclass
class _Session:
    record: SessionRecord
    events: list[Event] = field(default_factory=list)
    batches: dict[str, tuple[str, int]] = field(default_factory=dict)
    inbox: list[Event] = field(default_factory=list)
    dedupe: dict[str, tuple[str, int]] = field(default_factory=dict)
    lease: _LeaseRow | None = None
    watermarks: dict[str, int] = field(default_factory=dict)
    snapshots: dict[str, tuple[int, bytes]] = field(default_factory=dict)


class MemoryStore(SessionStore):
    url = "memory://"
    poll_interval = 1.0  # every commit notifies in-process; polling is only a safety net

    def __init__(self, *, clock: Clock | None = None) -> None:
        super().__init__(clock=clock)
        self._lock = threading.RLock()
        self._sessions: dict[SessionKey, _Session] = {}
        self._blobs: dict[str, bytes] = {}
        self._secret_bytes = os.urandom(32)

    def _get(self, key: SessionKey) -> _Session:
        try:
            return self._sessions[key]
        except KeyError:
            raise SessionNotFound(f"session {key} does not exist; create it first") from None

    def _create_session(self, key: SessionKey, now: float) -> SessionRecord:
        with self._lock:
            if key not in self._sessions:
                self._sessions[key] = _Session(SessionRecord(key, now))
            return self._sessions[key].record

    def _get_session(self, key: SessionKey) -> SessionRecord | None:
        with self._lock:
            s = self._sessions.get(key)
            return s.record if s else None

    def _list_sessions(
        self, namespace: str | None, user_id: str | None, agent_id: str | None
    ) -> list[SessionRecord]:
        with self._lock:
            return [
                s.record
                for k, s in self._sessions.items()
                if (namespace is None or k.namespace == namespace)
                and (user_id is None or k.user_id == user_id)
                and (agent_id is None or k.agent_id == agent_id)
            ]

    def _head(self, key: SessionKey) -> int:
        with self._lock:
            return len(self._get(key).events)

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
        with self._lock:
            s = self._get(key)
            check_fence(key, s.lease, fence, now)
            if decide_append(key, len(s.events), expected_seq, s.batches.get(batch_id), digest):
                check_inbox(key, len(s.inbox), expected_inbox)
                s.events.extend(batch)
                s.batches[batch_id] = (digest, expected_seq + 1)

    def _read(self, key: SessionKey, after: int, through: int) -> list[Event]:
        with self._lock:
            events = self._get(key).events[after:through]
        for event in events:  # a codec may have been unregistered since the write
            check_readable(event.type, event.required, session=key, seq=event.seq)
        return events

    def _inbox_append(
        self, key: SessionKey, event: Event, dedupe_key: str | None, digest: str, now: float
    ) -> tuple[Event, bool]:
        with self._lock:
            s = self._get(key)
            if dedupe_key is not None and dedupe_key in s.dedupe:
                old_digest, seq = s.dedupe[dedupe_key]
                if old_digest != digest:
                    raise IdempotencyConflict(
                        f"session {key}: key {dedupe_key!r} was already used for another "
                        "command; use a new key for new content"
                    )
                return s.inbox[seq - 1], False
            stamped = event.with_seq(len(s.inbox) + 1)
            s.inbox.append(stamped)
            if dedupe_key is not None:
                s.dedupe[dedupe_key] = (digest, stamped.seq)
            return stamped, True

    def _inbox_head(self, key: SessionKey) -> int:
        with self._lock:
            return len(self._get(key).inbox)

    def _inbox_read(self, key: SessionKey, after: int, through: int) -> list[Event]:
        with self._lock:
            return self._get(key).inbox[after:through]

    def _lease_row(self, key: SessionKey) -> _LeaseRow | None:
        with self._lock:
            return self._get(key).lease

    def _acquire_lease(self, key: SessionKey, owner: str, ttl: float, now: float) -> Lease:
        with self._lock:
            s = self._get(key)
            lease = decide_acquire(key, s.lease, owner, ttl, now)
            s.lease = _LeaseRow(owner, lease.epoch, lease.expires_at)
            return lease

    def _renew_lease(self, lease: Lease, ttl: float, now: float) -> Lease:
        with self._lock:
            s = self._get(lease.key)
            check_fence(lease.key, s.lease, lease, now)
            renewed = Lease(lease.key, lease.owner, lease.epoch, now + ttl)
            s.lease = _LeaseRow(lease.owner, lease.epoch, renewed.expires_at)
            return renewed

    def _release_lease(self, lease: Lease, now: float) -> None:
        with self._lock:
            s = self._get(lease.key)
            if decide_release(lease.key, s.lease, lease):
                s.lease = _LeaseRow(None, lease.epoch, 0.0)

    def _watermark(self, key: SessionKey, sink: str) -> int:
        with self._lock:
            return self._get(key).watermarks.get(sink, 0)

    def _advance_watermark(self, key: SessionKey, sink: str, seq: int) -> int:
        with self._lock:
            marks = self._get(key).watermarks
            marks[sink] = max(marks.get(sink, 0), seq)
            return marks[sink]

    def put_blob(self, data: bytes) -> str:
        digest = blob_digest(data)
        with self._lock:
            self._blobs.setdefault(digest, bytes(data))
        return digest

    def get_blob(self, digest: str) -> bytes:
        with self._lock:
            return check_blob(digest, self._blobs.get(digest))

    def _put_snapshot(self, key: SessionKey, name: str, seq: int, data: bytes) -> None:
        with self._lock:
            snaps = self._get(key).snapshots
            if name not in snaps or snaps[name][0] < seq:
                snaps[name] = (seq, bytes(data))

    def _get_snapshot(self, key: SessionKey, name: str) -> tuple[int, bytes] | None:
        with self._lock:
            return self._get(key).snapshots.get(name)

    def _secret(self) -> bytes:
        return self._secret_bytes
