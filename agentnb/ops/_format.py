"""The logical form of a store's contents: what a backup archive holds, line by line, and
what a migration copies, record by record.

An archive is one file of lines, each ``<check> <json>\\n``: ``check`` is the first 16 hex
digits of the SHA-256 of the JSON text, so a flipped byte is found on its line. The first
line is the header, the last the manifest; between them every session's records, one
session after another:

``{"r": "header", "format": "agentnb-archive/1", "created_at": ..., "method": ...}``
``{"r": "token", ...}``                 one per access token (digests only, as stored)
``{"r": "session", "s": i, "key": [...], "record": {...}, "head": n, "inbox_head": m}``
``{"r": "inbox", "s": i, "e": [...], "k": dedupe_key, "f": fingerprint}``
``{"r": "event", "s": i, "e": [...]}``  the row as committed (``EVENT_FIELDS``)
``{"r": "marks", "s": i, "m": {sink: seq}}``
``{"r": "tombstone", "key": [...], ...}``
``{"r": "manifest", "sessions": [{"key", "head", "inbox_head", "digest", "inbox_digest",
"offset"}], "tokens": n, "tombstones": n, "lines": n}``

A session's ``digest`` is the SHA-256 over its event rows' JSON texts in seq order (each
followed by a newline), ``inbox_digest`` the same over its inbox rows: a copy holds the
same rows, byte for byte, exactly when the digests agree (``log_digests`` computes them
from a store).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from agentnb.events import Event
from agentnb.ids import SessionKey
from agentnb.stores.base import RawEvent, SessionStore, Tombstone

__all__ = [
    "EVENT_FIELDS",
    "FORMAT",
    "PHYSICAL",
    "Digests",
    "all_tombstones",
    "inbox_events",
    "inbox_key_map",
    "key_of",
    "key_text",
    "log_digests",
    "raw_events",
    "raw_of",
    "row_of",
    "rows_digest",
]

FORMAT = "agentnb-archive/1"
"""The logical archive: every record a line (any backend; PostgreSQL and memory write it)."""
PHYSICAL = "agentnb-archive/2"
"""The physical archive of an SQLite store (``agentnb.ops.backup``): the copy the online
backup API made, then lines (header, the ``-catalogue`` record, manifest, end)."""
EVENT_FIELDS = (
    "seq",
    "event_id",
    "type",
    "turn_id",
    "run_id",
    "required",
    "occurred_us",
    "schema_version",
    "payload",
)
"""The fields of an event row, in order (the payload is its committed canonical JSON)."""
PAGE = 1_000


def row_of(event: RawEvent) -> list[Any]:
    """An event row as the archive keeps it."""
    return list(event)


def raw_of(row: list[Any]) -> RawEvent:
    """The committed event a row holds."""
    seq, event_id, type_, turn_id, run_id, required, occurred_us, version, payload = row
    return RawEvent(
        int(seq),
        str(event_id),
        str(type_),
        turn_id,
        run_id,
        bool(required),
        int(occurred_us),
        int(version),
        str(payload),
    )


def encode(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def check_of(data: bytes) -> bytes:
    return hashlib.sha256(data).hexdigest()[:16].encode()


def key_of(value: list[str]) -> SessionKey:
    namespace, user_id, agent_id, session_id = value
    return SessionKey(namespace, user_id, agent_id, session_id)


def key_text(key: SessionKey) -> str:
    return f"{key.namespace}/{key.user_id}/{key.agent_id}/{key.session_id}"


@dataclass
class Digests:
    """The running digests of one session's two logs."""

    events: Any = field(default_factory=hashlib.sha256)
    inbox: Any = field(default_factory=hashlib.sha256)

    def event(self, row: list[Any]) -> None:
        self.events.update(encode(row) + b"\n")

    def event_bytes(self, data: bytes) -> None:
        """``event`` of a row already encoded (``encode(row)``)."""
        self.events.update(data + b"\n")

    def inbox_row(self, row: list[Any]) -> None:
        self.inbox.update(encode(row) + b"\n")


def rows_digest(rows: Iterable[list[Any]]) -> str:
    digest = hashlib.sha256()
    for row in rows:
        digest.update(encode(row) + b"\n")
    return digest.hexdigest()


def raw_events(
    store: SessionStore, key: SessionKey, through: int, after: int = 0
) -> Iterator[RawEvent]:
    """The committed execution events of ``key`` with ``after < seq <= through``, by pages."""
    while after < through:
        page = store.read_raw(key, after, min(PAGE, through - after))
        if not page:
            return
        yield from page
        after = page[-1].seq


def inbox_events(
    store: SessionStore, key: SessionKey, through: int, after: int = 0
) -> Iterator[Event]:
    """The inbox records of ``key`` with ``after < seq <= through``, by pages."""
    while after < through:
        page = store.inbox_read_after(key, after, min(PAGE, through - after))
        if not page:
            return
        yield from page
        after = page[-1].seq


def inbox_key_map(
    store: SessionStore, key: SessionKey, through: int, after: int = 0
) -> dict[int, tuple[str, str]]:
    """``seq -> (dedupe_key, fingerprint)`` of the inbox records in ``(after, through]``
    accepted under a key."""
    found: dict[int, tuple[str, str]] = {}
    while after < through:
        step = min(10_000, through - after)
        for seq, k, fingerprint in store.inbox_keys(key, after, step):
            found[seq] = (k, fingerprint)
        after += step
    return found


def all_tombstones(store: SessionStore) -> list[Tombstone]:
    """Every tombstone of ``store``, in the order of the deletions."""
    found: list[Tombstone] = []
    while page := store.tombstones(after=found[-1].seq if found else 0, limit=1000):
        found += page
    return found


def log_digests(store: SessionStore, key: SessionKey) -> tuple[int, int, str, str]:
    """``(head, inbox_head, digest, inbox_digest)`` of a session as ``store`` holds it now."""
    head, inbox_head = store.heads(key)
    digests = Digests()
    for raw in raw_events(store, key, head):
        digests.event(row_of(raw))
    for event in inbox_events(store, key, inbox_head):
        digests.inbox_row(row_of(RawEvent.of(event)))
    return head, inbox_head, digests.events.hexdigest(), digests.inbox.hexdigest()
