"""In-process store for tests and throwaway sessions; nothing survives the process."""

from __future__ import annotations

import dataclasses
import os
import threading
from dataclasses import dataclass, field
from typing import Any

import orjson

from agentnb.errors import IdempotencyConflict, InvalidInput, SessionNotFound
from agentnb.events import BLOB_THRESHOLD, Event, FrozenDict, canonical_json, check_readable
from agentnb.ids import Clock, SessionKey
from agentnb.stores._rows import PART_MIN, blob_digest, check_blob, same_fingerprint
from agentnb.stores.base import (
    Lease,
    LeaseRow,
    SessionQuery,
    SessionRecord,
    SessionStore,
    TokenRecord,
    Tombstone,
    Unset,
    check_archived,
    check_fence,
    check_inbox,
    check_tombstone,
    decide_acquire,
    decide_append,
    decide_catalogue,
    decide_release,
    decide_tombstone_mark,
    encode_cursor,
    merge_labels,
    meta_update,
    submit_delta,
    submit_text,
)


@dataclass
class _Session:
    record: SessionRecord
    row: int = 0
    events: list[Event] = field(default_factory=list)
    batches: dict[str, tuple[str, int]] = field(default_factory=dict)
    inbox: list[Event] = field(default_factory=list)
    dedupe: dict[str, tuple[str, int]] = field(default_factory=dict)
    lease: LeaseRow | None = None
    watermarks: dict[str, int] = field(default_factory=dict)
    snapshots: dict[str, tuple[int, bytes]] = field(default_factory=dict)
    parts: dict[str, str] = field(default_factory=dict)
    """The long texts of this session's large payloads, by the digest of their JSON text:
    the events hold these very strings, one per distinct text (freed when it is deleted)."""


class MemoryStore(SessionStore):
    url = "memory://"
    poll_interval = 1.0  # every commit notifies in-process; polling is only a safety net
    local_io = True

    def __init__(self, *, clock: Clock | None = None) -> None:
        super().__init__(clock=clock)
        self._lock = threading.RLock()
        self._sessions: dict[SessionKey, _Session] = {}
        self._blobs: dict[str, bytes] = {}
        self._secret_bytes = os.urandom(32)
        self._deleted: dict[SessionKey, Tombstone] = {}
        self._tombstone_marks: dict[str, int] = {}
        self._rows = 0
        self._tokens: dict[str, TokenRecord] = {}

    def _get(self, key: SessionKey) -> _Session:
        try:
            return self._sessions[key]
        except KeyError:
            check_tombstone(key, self._deleted.get(key))
            raise SessionNotFound(f"session {key} does not exist; create it first") from None

    def _create_session(self, key: SessionKey, now: float) -> SessionRecord:
        with self._lock:
            check_tombstone(key, self._deleted.get(key))
            if key not in self._sessions:
                self._rows += 1
                s = self._sessions[key] = _Session(SessionRecord(key, now, now, now), self._rows)
                self._change(s)
            return self._sessions[key].record

    def _change(self, s: _Session, **changes: object) -> None:
        record = dataclasses.replace(s.record, **changes)  # type: ignore[arg-type]
        s.record = dataclasses.replace(record, cursor=encode_cursor(record.last_activity, s.row))

    def _find_sessions(self, query: SessionQuery) -> list[SessionRecord]:
        # No index: memory stores are small (tests, throwaway sessions).
        with self._lock:
            records = [(self._live(s), s.row) for s in self._sessions.values()]
        found = [(r.last_activity, row, r) for r, row in records if query.matches(r, row)]
        found.sort(key=lambda t: (t[0], t[1]), reverse=True)
        return [r for _, _, r in found[: query.limit]]

    def _live(self, s: _Session) -> SessionRecord:
        lease = s.lease
        if lease is None:
            return s.record
        return dataclasses.replace(
            s.record, lease_owner=lease.owner, lease_expires=lease.expires_at
        )

    def _update_session(
        self,
        key: SessionKey,
        title: str | Unset | None,
        labels: dict[str, str | None],
        now: float,
    ) -> SessionRecord:
        with self._lock:
            s = self._get(key)
            merged = merge_labels(key, s.record.labels, labels)
            self._change(
                s,
                title=s.record.title if isinstance(title, Unset) else title,
                labels=merged,
                updated_at=now,
                last_activity=now,
            )
            return self._live(s)

    def _delete_session(
        self, key: SessionKey, by: str, reason: str, fence: Lease | None, now: float
    ) -> Tombstone:
        with self._lock:
            old = self._deleted.get(key)
            if old is not None:
                return old
            s = self._get(key)
            check_fence(key, s.lease, fence, now)
            del self._sessions[key]
            tombstone = self._deleted[key] = Tombstone(
                key, now, by, reason, len(s.events), len(self._deleted) + 1
            )
            return tombstone

    def _tombstone(self, key: SessionKey) -> Tombstone | None:
        with self._lock:
            return self._deleted.get(key)

    def _tombstones(self, after: int, limit: int) -> list[Tombstone]:
        with self._lock:  # insertion order is deletion order: seq n is at index n - 1
            return list(self._deleted.values())[after : after + limit]

    def _tombstone_watermark(self, sink: str) -> int:
        with self._lock:
            return self._tombstone_marks.get(sink, 0)

    def _advance_tombstone_watermark(self, sink: str, seq: int) -> int:
        with self._lock:
            mark = decide_tombstone_mark(
                sink, self._tombstone_marks.get(sink, 0), seq, len(self._deleted)
            )
            self._tombstone_marks[sink] = mark
            return mark

    def _set_archived(
        self, key: SessionKey, archived: bool, expected_inbox: int | None, now: float
    ) -> SessionRecord:
        with self._lock:
            s = self._get(key)
            check_inbox(key, len(s.inbox), expected_inbox)
            if not archived:
                self._change(s, archived_at=None)
            elif s.record.archived_at is None:
                self._change(s, archived_at=now)
            return self._live(s)

    def _get_session(self, key: SessionKey) -> SessionRecord | None:
        with self._lock:
            s = self._sessions.get(key)
            return self._live(s) if s else None

    def _list_sessions(
        self, namespace: str | None, user_id: str | None, agent_id: str | None
    ) -> list[SessionRecord]:
        with self._lock:
            return [
                self._live(s)
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
                s.events.extend(_shared(e, s.parts) for e in batch)
                s.batches[batch_id] = (digest, expected_seq + 1)
                delta = decide_catalogue(batch, sum(len(canonical_json(e.payload)) for e in batch))
                r = s.record
                self._change(
                    s,
                    events=r.events + delta.events,
                    turns=r.turns + delta.turns,
                    bytes=r.bytes + delta.bytes,
                    turn_status=delta.turn_status or r.turn_status,
                    updated_at=now,
                    last_activity=now,
                )

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
                if not same_fingerprint(old_digest, digest):
                    raise IdempotencyConflict(
                        f"session {key}: key {dedupe_key!r} was already used for another "
                        "command; use a new key for new content"
                    )
                return s.inbox[seq - 1], False
            check_archived(key, s.record.archived_at, event)
            update = meta_update(event)
            if update is not None:  # labels past the bound once merged: refused, not written
                merge_labels(key, s.record.labels, update[1])
            stamped = _shared(event.with_seq(len(s.inbox) + 1), s.parts)
            s.inbox.append(stamped)
            if dedupe_key is not None:
                s.dedupe[dedupe_key] = (digest, stamped.seq)
            task = submit_text(stamped)
            r = s.record
            self._change(
                s,
                last_activity=now,
                submits=max(r.submits + submit_delta(stamped), r.turns),
                first_task=r.first_task if r.first_task is not None else task,
            )
            if update is not None:
                self._update_session(key, *update, now)  # the same lock: one step
            return stamped, True

    def _inbox_head(self, key: SessionKey) -> int:
        with self._lock:
            return len(self._get(key).inbox)

    def _inbox_read(self, key: SessionKey, after: int, through: int) -> list[Event]:
        with self._lock:
            return self._get(key).inbox[after:through]

    def _lease_row(self, key: SessionKey) -> LeaseRow | None:
        with self._lock:
            return self._get(key).lease

    def _acquire_lease(self, key: SessionKey, owner: str, ttl: float, now: float) -> Lease:
        with self._lock:
            s = self._get(key)
            lease = decide_acquire(key, s.lease, owner, ttl, now)
            s.lease = LeaseRow(owner, lease.epoch, lease.expires_at)
            return lease

    def _renew_lease(self, lease: Lease, ttl: float, now: float) -> Lease:
        with self._lock:
            s = self._get(lease.key)
            check_fence(lease.key, s.lease, lease, now)
            renewed = Lease(lease.key, lease.owner, lease.epoch, now + ttl)
            s.lease = LeaseRow(lease.owner, lease.epoch, renewed.expires_at)
            return renewed

    def _release_lease(self, lease: Lease, now: float) -> None:
        with self._lock:
            s = self._get(lease.key)
            if decide_release(lease.key, s.lease, lease):
                s.lease = LeaseRow(None, lease.epoch, 0.0)

    def _watermark(self, key: SessionKey, sink: str) -> int:
        with self._lock:
            return self._get(key).watermarks.get(sink, 0)

    def _advance_watermark(self, key: SessionKey, sink: str, seq: int) -> int:
        with self._lock:
            marks = self._get(key).watermarks
            marks[sink] = max(marks.get(sink, 0), seq)
            return marks[sink]

    def _watermarks(self, key: SessionKey) -> dict[str, int]:
        with self._lock:
            return dict(sorted(self._get(key).watermarks.items()))

    def _inbox_keys(self, key: SessionKey, after: int, through: int) -> list[tuple[int, str, str]]:
        with self._lock:
            found = self._get(key).dedupe.items()
            return sorted((seq, k, d) for k, (d, seq) in found if after < seq <= through)

    def put_blob(self, data: bytes) -> str:
        digest = blob_digest(data)
        with self._lock:
            self._blobs.setdefault(digest, bytes(data))
        return digest

    def get_blob(self, digest: str) -> bytes:
        with self._lock:
            data = self._blobs.get(digest)
            if data is None:  # a part of a session's payloads, as the SQL stores keep it
                text = next(
                    (s.parts[digest] for s in self._sessions.values() if digest in s.parts), None
                )
                data = None if text is None else orjson.dumps(text)
            return check_blob(digest, data)

    def _blob_usage(self, key: SessionKey) -> dict[str, int]:
        with self._lock:
            parts = self._get(key).parts
            return {d: len(orjson.dumps(parts[d])) for d in sorted(parts)}

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

    def _add_token(self, record: TokenRecord) -> TokenRecord:
        with self._lock:
            if record.token_id in self._tokens:
                raise InvalidInput(f"token id {record.token_id!r} is in use; pick another")
            self._tokens[record.token_id] = record
            return record

    def _get_token(self, token_id: str) -> TokenRecord | None:
        with self._lock:
            return self._tokens.get(token_id)

    def _list_tokens(self, user_id: str | None) -> list[TokenRecord]:
        with self._lock:
            found = [t for t in self._tokens.values() if user_id in (None, t.user_id)]
        return sorted(found, key=lambda t: (t.created_at, t.token_id))

    def _touch_token(self, token_id: str, now: float) -> None:
        with self._lock:
            token = self._tokens.get(token_id)
            if token is not None and (token.last_used_at or 0.0) < now:
                self._tokens[token_id] = dataclasses.replace(token, last_used_at=now)

    def _revoke_token(self, token_id: str, now: float) -> TokenRecord:
        with self._lock:
            if token_id not in self._tokens:
                raise InvalidInput(f"there is no token {token_id!r}; see agentnb token list")
            for tid, token in list(self._tokens.items()):
                if token_id in (tid, token.parent) and token.revoked_at is None:
                    self._tokens[tid] = dataclasses.replace(token, revoked_at=now)
            return self._tokens[token_id]


def _shared(event: Event, parts: dict[str, str]) -> Event:
    """``event`` as kept: a payload over ``BLOB_THRESHOLD`` holds the session's one copy of
    each of its long texts (what the SQL stores keep as one blob)."""
    if len(canonical_json(event.payload)) <= BLOB_THRESHOLD:
        return event
    return event.model_copy(update={"payload": _intern(event.payload, parts)})


def _intern(value: Any, parts: dict[str, str]) -> Any:
    if isinstance(value, str):
        if len(value) < PART_MIN:
            return value
        return parts.setdefault(blob_digest(orjson.dumps(value)), value)
    if isinstance(value, dict):
        return FrozenDict({k: _intern(v, parts) for k, v in value.items()})
    if isinstance(value, tuple):
        return tuple(_intern(v, parts) for v in value)
    return value
