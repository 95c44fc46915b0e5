"""The storage port: ``SessionStore``, the composition of its roles, one per module.

A store keeps, per session (``SessionKey``):

* a catalogue record (created once, listed by namespace / user / agent);
* the **execution log**: events with a gapless ``seq`` from 1, written only in atomic batches;
* the **inbox log**: commands from any number of writers, with its own gapless sequence;
* one **execution lease** (owner, epoch, expiry) that fences execution commits;
* **export watermarks**, one per sink name, that only move forward;
* content-addressed **blobs** for payloads over ``BLOB_THRESHOLD`` bytes (transparent to readers).

Each role is a small port documented once, in its module under ``agentnb.stores.ports``,
with the guarantees every backend gives (the contract suite in
``agentnb.testing.store_contract`` checks each of them):

==============  ========================================================================
``EventLog``    ``append``, ``read_after``, ``read_raw``, ``read_arrow``, ``scan``, ``head``
``Inbox``       ``inbox_append(_many)``, ``inbox_read_after``, ``inbox_head``, ``inbox_keys``
``Leases``      ``acquire_lease``, ``renew_lease``, ``release_lease``, ``current_lease``
``WorkClaims``  ``claim_pending``, ``settle_pending``, ``held_pending``, ``watch_pending``
``Catalogue``   sessions, their lifecycle, tombstones and the archive
``Tokens``      the service's bearer token records
``Blobs``       ``put_blob``, ``get_blob``, ``blob_usage``, snapshots, ``secret``
``Watermarks``  ``watermark``, ``advance_watermark``, ``watermarks``
==============  ========================================================================

Waiting for commits (``wait_for_head``, ``wait_for_inbox``) and the hints of what this
object committed is one shared machinery, ``agentnb.stores.waiting``; the values the port
speaks in are ``agentnb.stores.values``, and the pure decisions every backend makes alike
(``decide_append``, ``decide_acquire``, ``check_fence``, ...) ``agentnb.stores.decisions``.
This module hands all of their names on.

Bad arguments (ids that are not strings, negative or huge limits, empty batches, events that
are not ``Event`` or are of unknown types) raise ``InvalidInput`` before anything is written.
Driver errors are translated into ``agentnb.errors``.

Backends subclass ``SessionStore`` and implement the ``_``-prefixed abstract methods of every
role; argument checking and the decisions stay here, so every backend decides the same.
"""

from __future__ import annotations

from agentnb.ids import SessionKey
from agentnb.stores._rows import RawEvent
from agentnb.stores.core import guarded
from agentnb.stores.decisions import (
    check_archived,
    check_fence,
    check_inbox,
    check_key,
    check_labels,
    check_lease,
    check_pending_scope,
    check_title,
    check_token_fields,
    check_tombstone,
    check_ttl,
    decide_acquire,
    decide_append,
    decide_catalogue,
    decide_release,
    decide_tombstone_mark,
    decode_cursor,
    does_work,
    encode_cursor,
    first_line,
    leases_of,
    merge_labels,
    meta_update,
    submit_delta,
    submit_text,
)
from agentnb.stores.ports import (
    Blobs,
    Catalogue,
    EventLog,
    Inbox,
    Leases,
    Tokens,
    Watermarks,
    WorkClaims,
)
from agentnb.stores.values import (
    MAX_BATCH,
    MAX_LABEL_KEY,
    MAX_LABEL_VALUE,
    MAX_LABELS,
    MAX_LIST_LIMIT,
    MAX_READ_LIMIT,
    MAX_TITLE,
    MAX_TOKEN_LABEL,
    SCAN_PAGE,
    UNSET,
    WORK_KINDS,
    CatalogueDelta,
    Lease,
    LeaseRow,
    SessionQuery,
    SessionRecord,
    TokenRecord,
    Tombstone,
    Unset,
    fold_case,
    fold_pairs,
)

__all__ = [
    "MAX_BATCH",
    "MAX_LABELS",
    "MAX_LABEL_KEY",
    "MAX_LABEL_VALUE",
    "MAX_LIST_LIMIT",
    "MAX_READ_LIMIT",
    "MAX_TITLE",
    "MAX_TOKEN_LABEL",
    "SCAN_PAGE",
    "UNSET",
    "WORK_KINDS",
    "Blobs",
    "Catalogue",
    "CatalogueDelta",
    "EventLog",
    "Inbox",
    "Lease",
    "LeaseRow",
    "Leases",
    "RawEvent",
    "SessionQuery",
    "SessionRecord",
    "SessionStore",
    "TokenRecord",
    "Tokens",
    "Tombstone",
    "Unset",
    "Watermarks",
    "WorkClaims",
    "check_archived",
    "check_fence",
    "check_inbox",
    "check_labels",
    "check_lease",
    "check_pending_scope",
    "check_title",
    "check_token_fields",
    "check_tombstone",
    "check_ttl",
    "decide_acquire",
    "decide_append",
    "decide_catalogue",
    "decide_release",
    "decide_tombstone_mark",
    "decode_cursor",
    "does_work",
    "encode_cursor",
    "first_line",
    "fold_case",
    "fold_pairs",
    "leases_of",
    "merge_labels",
    "meta_update",
    "submit_delta",
    "submit_text",
]


class SessionStore(WorkClaims, Blobs, Watermarks, EventLog, Catalogue, Inbox, Leases, Tokens):
    """Durable storage for sessions: catalogue, execution log, inbox, leases, watermarks.

    Thread-safe. Each role's module documents the guarantees of its operations.
    """

    @guarded
    def heads(self, key: SessionKey) -> tuple[int, int]:
        """(``head``, ``inbox_head``) read together, in one read where the backend can: a
        reader that folds both logs reads a log only when its head moved."""
        key = check_key(key)
        head, inbox_head = self._read_heads(key)
        self._saw_inbox(key, inbox_head)
        return head, inbox_head

    def _read_heads(self, key: SessionKey) -> tuple[int, int]:
        """Both heads; a backend overrides it to read them in one statement."""
        return self._head(key), self._inbox_head(key)
