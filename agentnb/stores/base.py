"""The storage port: ``SessionStore``, documented here once for every backend.

A store keeps, per session (``SessionKey``):

* a catalogue record (created once, listed by namespace / user / agent);
* the **execution log**: events with a gapless ``seq`` from 1, written only in atomic batches;
* the **inbox log**: commands from any number of writers, with its own gapless sequence;
* one **execution lease** (owner, epoch, expiry) that fences execution commits;
* **export watermarks**, one per sink name, that only move forward;
* content-addressed **blobs** for payloads over ``BLOB_THRESHOLD`` bytes (transparent to readers).

Blobs. A payload over ``BLOB_THRESHOLD`` is stored in parts: each long text in it is one
content-addressed blob, so a text that many events of a session carry (a large task's
input is in ``inbox/accepted``, ``turn/start``, ``input/received``, ``message/user`` and
``request/prepared``) is stored once (``blob_usage`` lists them). Reads, checksums, batch
digests and exports see each payload's canonical text exactly as committed. A blob lives
while a row of some session names it: ``delete_session`` frees those no other session's
rows name. ``put_blob`` / ``get_blob`` store and read bytes by digest directly; a blob put
that way belongs to no session and stays.

Guarantees every backend gives (the contract suite in ``agentnb.testing.store_contract`` checks
each of them):

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
``inbox_append(key, event, dedupe_key=)``
    Safe from many writers and processes at once, no lease needed. With a ``dedupe_key`` a
    re-send returns the original record (``created=False``) if the content is the same, and
    raises ``IdempotencyConflict`` if it differs.
``acquire_lease / renew_lease / release_lease``
    At most one live lease per session. A live lease cannot be taken by another owner
    (``LeaseHeld``); once expired it can, with ``epoch + 1``. Renew with a stale epoch,
    another owner, or after expiry raises ``Fenced``; so does release once another holder
    took the lease. Releasing twice, or after expiry while nobody took over, is harmless.
``advance_watermark``
    Monotonic: moving backwards is a no-op that returns the current value.
``wait_for_head / wait_for_inbox``
    Block until the sequence passes ``after`` or the timeout elapses. Commits in the same
    process wake waiters at once; commits from other processes are seen by polling.
``find_sessions`` / ``update_session`` / ``delete_session`` (the lifecycle)
    Every catalogue record carries metadata kept current in the transaction that changes it:
    ``append`` adds to the counts (events, turns, bytes of payload) and sets ``updated_at``,
    ``last_activity`` and the raw status of the latest turn (``decide_catalogue``); an
    ``inbox_append`` of a submit counts it and, for the first one, keeps the first line of
    its text (``first_task``, the default title); ``update_session`` sets the title and
    merges labels (at most ``MAX_LABELS``, keys of ``MAX_LABEL_KEY`` and values of
    ``MAX_LABEL_VALUE`` characters). ``find_sessions`` pages the catalogue newest activity
    first through an index, with an opaque keyset cursor: sessions added or active while a
    caller pages appear before its first page, never inside a later one.
    ``delete_session`` removes, in one transaction, the session's events, inbox, snapshots,
    watermarks, lease and the blobs no other session references, and leaves a tombstone
    (who, when, why) in the catalogue; refused (``LeaseHeld``) while another holder has a
    live lease unless the caller passes that lease as ``fence``. Afterwards the key is
    ``SessionDeleted`` for reads, writes and ``create_session`` (an id never silently comes
    back): every write (``append``, ``inbox_append``, ``put_snapshot``,
    ``advance_watermark``, the lease calls, ``update_session``, ``set_archived``) checks
    the tombstone in the transaction that would write, so a writer racing the delete, in
    this process or another, either commits before it (and its rows go with the session)
    or gets ``SessionDeleted`` and writes nothing. ``get_session`` answers None and
    ``tombstone`` the record. What the bytes on disk become is the backend's to say.
``tombstones(after=, limit=)`` (deletions reaching the exports)
    Every tombstone carries ``seq``, its place in the order of this store's deletions
    (1, 2, ...), given when the deletion commits: a later deletion never gets a smaller
    seq than one already visible, so paging with ``after=`` the last seq seen never skips
    one. ``advance_tombstone_watermark(sink, seq)`` records, monotonically, how far the
    export sink named ``sink`` has applied them (what ``Exporter`` resumes from).
``set_archived`` (archive)
    A catalogue flag (``archived_at``): an archived session stays readable, is left out of
    ``find_sessions`` unless asked for (``archived=True`` or ``None``), and refuses new work:
    ``inbox_append`` of a command that would start or feed a run (``WORK_KINDS``) raises
    ``SessionArchived`` in the transaction that would accept it, so a command from any
    process either lands before the archive or is refused. Cancelling and interrupting are
    still accepted, and so is the execution log (a runtime closing what it runs).
    Archiving neither moves ``last_activity`` nor ``updated_at``. With ``expected_inbox``
    the flag is set only if the inbox head is still that seq (else ``InboxChanged``):
    the caller decided from the inbox that the session holds no work.

``add_token`` / ``get_token`` / ``list_tokens`` / ``touch_token`` / ``revoke_token`` (access)
    The service's bearer tokens (``agentnb.tokens`` issues and checks them): one record per
    token, keeping the user it acts for, a label, its SHA-256 ``digest`` (never the token),
    when it was created, last used, revoked and (for a browser sign-in) when it expires.
    A sign-in is a token of its own whose ``parent`` is the token it was made with:
    ``revoke_token`` revokes a token and its sign-ins in one transaction, so revoking a token
    ends the browser sessions opened with it. Records are kept after revocation (an audit
    trail); a token id is never reused (``InvalidInput``).

Bad arguments (ids that are not strings, negative or huge limits, empty batches, events that
are not ``Event`` or are of unknown types) raise ``InvalidInput`` before anything is written.
Driver errors are translated into ``agentnb.errors``.

Backends subclass ``SessionStore`` and implement the ``_``-prefixed abstract methods; argument
checking and the pure decisions (``decide_append``, ``decide_acquire``, ``check_fence``) live
here so every backend makes the same decisions.

Why it is long: the port is documented here once for every backend, and the decisions that
must not differ between backends (fences, appends, leases, the catalogue, tombstones,
cursors, argument checks) live beside it as pure functions the backends call.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import functools
import json
import math
import re
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from agentnb.bus import CommitBus
from agentnb.errors import (
    AppendConflict,
    Corrupt,
    Fenced,
    IdempotencyConflict,
    InboxChanged,
    InvalidCursor,
    InvalidInput,
    LeaseHeld,
    SessionArchived,
    SessionDeleted,
    StorageError,
)
from agentnb.events import (
    INBOX_TYPES,
    Event,
    FrozenDict,
    check_writable,
    event_digest,
    freeze_json,
)
from agentnb.ids import Clock, SessionKey, SystemClock, check_id
from agentnb.limits import check_chars
from agentnb.stores._rows import (
    RawEvent,
    event_anchor,
    open_snapshot,
    seal_snapshot,
    stored_fingerprint,
)

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "MAX_BATCH",
    "MAX_LABELS",
    "MAX_LABEL_KEY",
    "MAX_LABEL_VALUE",
    "MAX_LIST_LIMIT",
    "MAX_READ_LIMIT",
    "MAX_TITLE",
    "MAX_TOKEN_LABEL",
    "UNSET",
    "WORK_KINDS",
    "CatalogueDelta",
    "Lease",
    "LeaseRow",
    "RawEvent",
    "SessionQuery",
    "SessionRecord",
    "SessionStore",
    "TokenRecord",
    "Tombstone",
    "Unset",
    "check_archived",
    "check_fence",
    "check_inbox",
    "check_lease",
    "check_pending_scope",
    "check_token_fields",
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
    "leases_of",
    "merge_labels",
    "meta_update",
]

MAX_READ_LIMIT = 10_000
"""Largest ``limit`` one read accepts; page with ``after`` for more."""
MAX_BATCH = 10_000
"""Largest number of events one ``append`` accepts."""
SCAN_PAGE = 1_000


MAX_LABELS = 32
"""Most labels one session holds."""
MAX_LABEL_KEY = 64
"""Longest label key, in characters."""
MAX_LABEL_VALUE = 256
"""Longest label value, in characters."""
MAX_TITLE = 256
"""Longest title, in characters (a default title is the first task's first line, cut)."""
MAX_LIST_LIMIT = 1_000
"""Largest page ``find_sessions`` returns."""
WORK_KINDS = frozenset({"submit", "steer", "inject", "respond", "resume", "reconcile", "compact"})
"""Inbox commands that start a run or feed one: what an archived session refuses.
(``interrupt`` and ``cancel`` only stop work, and are still accepted.)"""


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """A session in the catalogue, with the metadata the store keeps current.

    ``updated_at`` is the time of the last commit to the execution log or metadata change;
    ``last_activity`` also moves with inbox commands. ``turn_status`` is the raw status of
    the latest turn as its log says (``running`` even if its runtime crashed: the caller
    decides the effective status with the lease). ``submits`` counts accepted tasks and
    ``turns`` started ones, so ``submits > turns`` means tasks wait in the queue.
    """

    key: SessionKey
    created_at: float
    updated_at: float = 0.0
    last_activity: float = 0.0
    title: str | None = None
    """Set by the user; None until then (``first_task`` is the default)."""
    labels: dict[str, str] = field(default_factory=dict)
    first_task: str | None = None
    events: int = 0
    turns: int = 0
    bytes: int = 0
    submits: int = 0
    turn_status: str | None = None
    lease_owner: str | None = None
    lease_expires: float = 0.0
    cursor: str = ""
    """Where a page that ends with this record continues (``find_sessions(before=...)``)."""
    archived_at: float | None = None
    """When the session was archived (``set_archived``); None while it is not."""


@dataclass(frozen=True, slots=True)
class Tombstone:
    """What stays in the catalogue of a deleted session: who deleted it, when and why."""

    key: SessionKey
    deleted_at: float
    deleted_by: str
    reason: str
    events: int
    """How many events the session held when it was deleted."""
    seq: int = 0
    """Its place in the order of this store's deletions (1, 2, ...): the cursor of
    ``tombstones(after=)``."""


@dataclass(frozen=True, slots=True)
class TokenRecord:
    """A bearer token of the service as the store keeps it (never the token itself)."""

    token_id: str
    user_id: str
    """The user every request made with the token acts for."""
    label: str
    created_at: float
    last_used_at: float | None = None
    """When a request last used it (recorded at most once a minute), None before."""
    revoked_at: float | None = None
    expires_at: float | None = None
    """For a browser sign-in: when it stops working; None for a token that does not expire."""
    parent: str | None = None
    """For a browser sign-in: the token it was made with (revoking that one revokes it)."""
    digest: str = field(default="", repr=False)
    """SHA-256 of the token's secret part, hex; compared in constant time."""

    def usable(self, now: float) -> bool:
        """Neither revoked nor expired at ``now``."""
        return self.revoked_at is None and (self.expires_at is None or now < self.expires_at)


@dataclass(frozen=True, slots=True)
class CatalogueDelta:
    """What one committed batch changes in its catalogue record (``decide_catalogue``)."""

    events: int
    turns: int
    bytes: int
    turn_status: str | None
    """The raw status of the latest turn after the batch, None if the batch says nothing."""


@dataclass(frozen=True, slots=True)
class Lease:
    """The right to execute one session; pass it as ``fence`` to fence commits.

    ``epoch`` grows by one each time a new holder takes the lease; a commit carrying an older
    epoch is refused.
    """

    key: SessionKey
    owner: str
    epoch: int
    expires_at: float


class Unset:
    """The default of an argument that was not given (None means something else)."""


UNSET = Unset()


@functools.cache
def _fold_table() -> dict[int, str]:
    # Every character whose lower case is one character (every cased letter but U+0130),
    # mapped alone: no context rules (final sigma), so SQL can do exactly the same.
    table = {}
    for point in range(0x1F000):  # past the last cased letter
        if 0xD800 <= point <= 0xDFFF:
            continue
        char = chr(point)
        lower = char.lower()
        if lower != char:
            table[point] = lower if len(lower) == 1 else lower[0]
    return table


def fold_case(text: str) -> str:
    """``text`` in lower case, one character at a time (``"ÉTÉ"`` → ``"été"``), as session
    search compares texts on every backend (``find_sessions``)."""
    return text.translate(_fold_table())


def fold_pairs() -> tuple[str, str]:
    """The folding of ``fold_case`` as SQL ``translate(text, from, to)`` arguments."""
    table = _fold_table()
    return "".join(map(chr, table)), "".join(table.values())


@dataclass(frozen=True, slots=True)
class SessionQuery:
    """A checked ``find_sessions`` query (what a backend's ``_find_sessions`` gets)."""

    namespace: str | None
    user_id: str | None
    agent_id: str | None
    turn_status: frozenset[str] | None
    labels: dict[str, str] | None
    since: float | None
    until: float | None
    search: str | None
    """Case-folded (``fold_case``)."""
    limit: int
    after: tuple[float, int] | None
    """(listing key, row) of the last record of the previous page, decoded from its
    cursor. The key is ``last_activity``, or a backend's own key that orders the same way
    (SQLite's ``list_key``)."""
    archived: bool | None = False
    """False: live sessions only; True: archived ones only; None: both."""

    def matches(self, record: SessionRecord, row: int) -> bool:
        """The filters as a Python predicate (backends that filter in memory use it)."""
        k = record.key
        return (
            (self.namespace is None or k.namespace == self.namespace)
            and (self.user_id is None or k.user_id == self.user_id)
            and (self.agent_id is None or k.agent_id == self.agent_id)
            and (self.turn_status is None or (record.turn_status or "none") in self.turn_status)
            and (
                self.labels is None
                or all(record.labels.get(n) == v for n, v in self.labels.items())
            )
            and (self.since is None or record.last_activity >= self.since)
            and (self.until is None or record.last_activity < self.until)
            and (
                self.search is None
                or self.search in fold_case(record.title or "")
                or self.search in fold_case(record.first_task or "")
            )
            and (self.after is None or (record.last_activity, row) < self.after)
            and (self.archived is None or (record.archived_at is not None) == self.archived)
        )


@dataclass(frozen=True, slots=True)
class LeaseRow:
    """A session's lease as a backend read it (what ``check_fence`` and friends decide on)."""

    owner: str | None
    epoch: int
    expires_at: float


# --------------------------------------------------------------------------------------------
# Pure decisions shared by every backend (called inside the backend's transaction)


def check_fence(key: SessionKey, current: LeaseRow | None, fence: Lease | None, now: float) -> None:
    """Raise unless a write with ``fence`` may commit given the ``current`` lease row."""
    if fence is None:
        if current is not None and current.owner is not None and current.expires_at > now:
            raise LeaseHeld(
                f"session {key} is being executed by {current.owner!r} (epoch {current.epoch}); "
                "write through that runtime or wait for its lease to expire"
            )
        return
    if current is None or current.epoch != fence.epoch or current.owner != fence.owner:
        raise Fenced(
            f"session {key}: lease epoch {fence.epoch} of {fence.owner!r} is stale "
            f"(current epoch {current.epoch if current else 0}); stop writing and re-acquire"
        )
    if current.expires_at <= now:
        raise Fenced(
            f"session {key}: lease epoch {fence.epoch} expired; renew it sooner or re-acquire"
        )


def decide_release(key: SessionKey, current: LeaseRow | None, lease: Lease) -> bool:
    """Whether releasing ``lease`` changes anything; ``Fenced`` if another epoch holds it.

    Releasing twice, or after the lease ran out while nobody took it, is harmless.
    """
    if current is not None and current.epoch == lease.epoch:
        return current.owner == lease.owner
    raise Fenced(
        f"session {key}: cannot release epoch {lease.epoch} of {lease.owner!r}; the lease is "
        f"now at epoch {current.epoch if current else 0} (another holder took over)"
    )


def decide_acquire(
    key: SessionKey, current: LeaseRow | None, owner: str, ttl: float, now: float
) -> Lease:
    """The lease ``owner`` gets, or ``LeaseHeld`` if another live holder has it."""
    if current is not None and current.owner is not None and current.expires_at > now:
        if current.owner != owner:
            raise LeaseHeld(
                f"session {key} is leased to {current.owner!r} for another "
                f"{current.expires_at - now:.1f}s; try again after it expires or is released"
            )
        return Lease(key, owner, current.epoch, now + ttl)
    epoch = (current.epoch if current is not None else 0) + 1
    return Lease(key, owner, epoch, now + ttl)


def check_inbox(key: SessionKey, inbox_head: int, expected_inbox: int | None) -> None:
    """Raise ``InboxChanged`` unless the inbox head is the one the writer decided from."""
    if expected_inbox is not None and inbox_head != expected_inbox:
        raise InboxChanged(
            f"session {key}: the inbox moved from {expected_inbox} to {inbox_head}; "
            "read the new commands and decide again"
        )


def decide_append(
    key: SessionKey,
    head: int,
    expected_seq: int,
    existing_batch: tuple[str, int] | None,
    digest: str,
) -> bool:
    """Whether the batch must be written (True) or is an acknowledged replay (False).

    ``existing_batch`` is ``(digest, first_seq)`` of a committed batch with the same id.
    """
    if existing_batch is not None:
        old_digest, first_seq = existing_batch
        if old_digest == digest and first_seq == expected_seq + 1:
            return False
        raise IdempotencyConflict(
            f"session {key}: batch id was already used for other events (first seq "
            f"{first_seq}); use a fresh batch id for new content"
        )
    if head != expected_seq:
        raise AppendConflict(
            f"session {key}: expected head {expected_seq} but it is {head}; another writer "
            "committed first - re-read the log and retry"
        )
    return True


_TURN_STATUS = {
    "turn/start": "running",
    "turn/resumed": "running",
    "turn/completed": "completed",
    "turn/failed": "failed",
    "turn/suspended": "suspended",
    "turn/interrupted": "interrupted",
    "turn/cancelled": "cancelled",
}


def decide_catalogue(batch: Sequence[Event], nbytes: int) -> CatalogueDelta:
    """How a committed batch moves its session's counts and latest-turn status."""
    turns = 0
    status: str | None = None
    for event in batch:
        found = _TURN_STATUS.get(event.type)
        if found is not None:
            status = found
            turns += event.type == "turn/start"
    return CatalogueDelta(len(batch), turns, nbytes, status)


def first_line(text: str, limit: int = MAX_TITLE) -> str:
    """``text`` cut to its first non-empty line and to ``limit`` characters."""
    line = next((part.strip() for part in text.splitlines() if part.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "\u2026"


def submit_text(event: Event) -> str | None:
    """The task text of an accepted submit command, else None."""
    if event.type != "inbox/accepted" or event.payload.get("kind") != "submit":
        return None
    text = event.payload.get("input")
    return first_line(text) if isinstance(text, str) else ""


def check_title(title: object) -> str | None:
    """A valid title (None clears it), or ``InvalidInput``."""
    if title is None:
        return None
    if not isinstance(title, str) or not title.strip() or "\n" in title or "\r" in title:
        raise InvalidInput(
            f"title must be one non-empty line of text (or None to clear it), got {title!r}"
        )
    if len(title) > MAX_TITLE:
        raise InvalidInput(f"title is {len(title)} characters; keep it to {MAX_TITLE}")
    return check_chars(title, "title")


def check_labels(labels: object, *, patch: bool) -> dict[str, str | None]:
    """Labels as a dict, or ``InvalidInput``; a ``patch`` may map a key to None (remove it)."""
    if not isinstance(labels, dict):
        raise InvalidInput(f"labels must be a dict of str to str, got {type(labels).__name__}")
    for k, v in labels.items():
        if not isinstance(k, str) or not k or len(k) > MAX_LABEL_KEY:
            raise InvalidInput(
                f"label keys must be non-empty strings of at most {MAX_LABEL_KEY} characters, "
                f"got {k!r}"
            )
        check_chars(k, "a label key")
        if v is None and patch:
            continue
        if not isinstance(v, str) or len(v) > MAX_LABEL_VALUE:
            raise InvalidInput(
                f"label {k!r}: values must be strings of at most {MAX_LABEL_VALUE} characters"
                + (" (None removes the label)" if patch else "")
                + f", got {v!r}"[:80]
            )
        check_chars(v, f"label {k!r}")
    if len(labels) > MAX_LABELS:
        raise InvalidInput(f"{len(labels)} labels given; a session holds at most {MAX_LABELS}")
    return dict(labels)


def merge_labels(
    key: SessionKey, old: dict[str, str], patch: dict[str, str | None]
) -> dict[str, str]:
    """The labels after ``patch`` (None removes a key); ``InvalidInput`` past ``MAX_LABELS``."""
    merged = dict(old)
    for k, v in patch.items():
        if v is None:
            merged.pop(k, None)
        else:
            merged[k] = v
    if len(merged) > MAX_LABELS:
        raise InvalidInput(
            f"session {key} would hold {len(merged)} labels; the most is {MAX_LABELS}: "
            "remove some (map them to None) first"
        )
    return merged


def encode_cursor(last_activity: float, row: int) -> str:
    """The opaque keyset cursor after a record (its activity and catalogue row id)."""
    raw = json.dumps([last_activity, row]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


_CURSOR = re.compile(rb"\[(-?[0-9]{1,20}(?:\.[0-9]{1,20})?(?:e[-+]?[0-9]{1,3})?), ([0-9]{1,18})\]")
"""What ``encode_cursor`` writes: a finite number and a row id, nothing nested."""


def decode_cursor(cursor: object) -> tuple[float, int]:
    """(last_activity, row) of a cursor from ``encode_cursor``, or ``InvalidCursor`` (an
    ``InvalidInput``) for anything else: the text is matched whole before any number is
    read, so a crafted one (deep nesting, a huge integer) is refused like a garbled one."""
    found = None
    if isinstance(cursor, str) and len(cursor) <= 128 and cursor.isascii():
        with contextlib.suppress(ValueError, binascii.Error):
            found = _CURSOR.fullmatch(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    activity = float(found.group(1)) if found else math.nan
    if found is None or not math.isfinite(activity):
        shown = repr(cursor[:80]) if isinstance(cursor, str) else f"a {type(cursor).__name__}"
        raise InvalidCursor(
            f"before={shown} is not a cursor of this listing; pass the cursor of the last "
            "record of the previous page (or None for the first page)"
        )
    return activity, int(found.group(2))


def decide_tombstone_mark(sink: str, old: int, seq: int, top: int) -> int:
    """The tombstone watermark of ``sink`` after advancing it to ``seq`` (``top``: the highest
    tombstone seq); ``InvalidInput`` past it."""
    if seq > top:
        raise InvalidInput(
            f"tombstone watermark {seq} of sink {sink!r} is past the last deletion ({top})"
        )
    return max(old, seq)


def does_work(event: Event) -> bool:
    """Whether an inbox event is a command an archived session refuses (``WORK_KINDS``)."""
    return event.type == "inbox/accepted" and event.payload.get("kind") in WORK_KINDS


def submit_delta(event: Event) -> int:
    """How an inbox event moves the catalogue's count of accepted tasks: +1 for an accepted
    submit, -1 for a refused one (cancelled while queued, or rejected by a runtime), which
    never starts; stores keep the count at or above the turns started."""
    if event.type == "inbox/accepted" and event.payload.get("kind") == "submit":
        return 1
    if event.type == "inbox/rejected" and event.payload.get("kind") == "submit":
        return -1
    return 0


def meta_update(event: Event) -> tuple[str | Unset | None, dict[str, str | None]] | None:
    """What an ``update`` command (``Session.update``) sets: (title or ``UNSET``, labels
    patch); None for any other event. ``InvalidInput`` for a title or labels out of bounds.

    A store applies it to the catalogue in the transaction that accepts the command, so the
    change is durable, ordered with the session's other commands and idempotent (a re-send
    under its key changes nothing).
    """
    if event.type != "inbox/accepted" or event.payload.get("kind") != "update":
        return None
    data = event.payload.get("data") or {}
    title = check_title(data["title"]) if "title" in data else UNSET
    labels = data.get("labels")
    return title, check_labels({} if labels is None else labels, patch=True)


def check_archived(key: SessionKey, archived_at: float | None, event: Event) -> None:
    """Raise ``SessionArchived`` if ``event`` would give work to an archived session."""
    if archived_at is not None and does_work(event):
        raise SessionArchived(
            f"session {key} is archived: it can be read, but takes no new work "
            f"({event.payload.get('kind')} refused). Call session.unarchive() (or "
            "runtime.unarchive(key)) first"
        )


def check_tombstone(key: SessionKey, tombstone: Tombstone | None) -> None:
    """Raise ``SessionDeleted`` if ``key`` was deleted."""
    if tombstone is not None:
        raise SessionDeleted(
            f"session {key} was deleted by {tombstone.deleted_by!r} "
            f"({tombstone.reason or 'no reason given'}); its data is gone. Use a new session id"
        )


# --------------------------------------------------------------------------------------------


_F = TypeVar("_F", bound=Callable[..., Any])


def _guarded(method: _F) -> _F:
    """Run a public store call as an operation ``close`` waits for."""

    @functools.wraps(method)
    def wrapper(self: SessionStore, *args: Any, **kwargs: Any) -> Any:
        # _operation() inlined: this wraps every store call.
        done = self._ops_done
        with done:
            if self._closed:
                raise StorageError(f"store {self.url} is closed; open it again to use it")
            self._ops += 1
        try:
            return method(self, *args, **kwargs)
        finally:
            with done:
                self._ops -= 1
                if not self._ops and self._closed:
                    done.notify_all()

    return wrapper  # type: ignore[return-value]


_Slot = tuple[SessionKey, str]
"""Whose waiters a commit wakes: (session, "inbox", "log" or "settle"). "settle" waiters
wait on the execution log but sleep through the commits its writer calls minor."""


class SessionStore(ABC):
    """Durable storage for sessions: catalogue, execution log, inbox, leases, watermarks.

    Thread-safe. See the module docstring for the guarantees of each operation.
    """

    url: str = ""
    _digests_rows = False
    """A backend that computes the batch digest itself while encoding (``_append`` then gets
    an empty ``digest``)."""
    poll_interval: float = 0.05
    """Seconds between polls when waiting for commits made by other processes."""
    local_io = False
    """Whether every operation's I/O stays on this machine (memory, a local file), so a
    caller on an event loop may call a short one inline rather than hand it to a thread (a
    networked backend's round trips are not short)."""

    def __init__(self, *, clock: Clock | None = None) -> None:
        self.clock: Clock = clock or SystemClock()
        self._wake_lock = threading.Lock()
        self._cond = threading.Condition(self._wake_lock)
        """Waiters of no session in particular: woken by every commit."""
        self._waiting = 0
        self._generation = 0
        self._unkeyed = 0
        """Wake-ups of the waiters of no session in particular (every commit is one)."""
        self._key_conds: dict[_Slot, threading.Condition] = {}
        """Waiters of one log of one session: woken by that log's commits (and by
        ``wake_waiters``)."""
        self._key_waiting: dict[_Slot, int] = {}
        self._key_generations: dict[_Slot, int] = {}
        self._wake_watchers: dict[SessionKey, tuple[Callable[[bool | None], None], ...]] = {}
        """Callbacks told of each wake-up of one session's waiters (``watch_wakes``)."""
        self._closed = False
        self._ops = 0
        self._ops_done = threading.Condition()
        self._inbox_seen: dict[SessionKey, int] = {}
        """The highest inbox seq of each session this object appended or read: a lower bound
        of the inbox head (``inbox_head_hint``)."""
        self._heads_seen: dict[SessionKey, int] = {}
        """The last seq each session's appends through this object committed (``head_hint``)."""
        self._hints_lock = threading.Lock()
        self.bus = CommitBus()
        """What this object commits, handed to this process's followers (``agentnb.bus``)."""
        self.states: object | None = None
        """The process's shared folds of this object's sessions (``agentnb.states``, which
        sets it at its first use; the store never reads it)."""

    # -- catalogue ---------------------------------------------------------------------------

    @_guarded
    def create_session(self, key: SessionKey) -> SessionRecord:
        """Get or create the catalogue record of ``key``."""
        return self._create_session(_key(key), self.clock.now())

    @_guarded
    def get_session(self, key: SessionKey) -> SessionRecord | None:
        """The catalogue record, or None; never creates anything."""
        return self._get_session(_key(key))

    @_guarded
    def list_sessions(
        self,
        *,
        namespace: str | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
    ) -> list[SessionRecord]:
        """Sessions matching every filter given, oldest first."""
        for value, name in ((namespace, "namespace"), (user_id, "user_id"), (agent_id, "agent_id")):
            if value is not None:
                check_id(value, name)
        return self._list_sessions(namespace, user_id, agent_id)

    @_guarded
    def find_sessions(
        self,
        *,
        namespace: str | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
        turn_status: Collection[str] | None = None,
        labels: dict[str, str] | None = None,
        since: float | None = None,
        until: float | None = None,
        search: str | None = None,
        limit: int = 50,
        before: str | None = None,
        archived: bool | None = False,
    ) -> list[SessionRecord]:
        """Up to ``limit`` live sessions matching every filter, newest ``last_activity`` first.

        ``turn_status``: raw latest-turn statuses to keep (``"none"`` for sessions with no
        turn yet); ``labels``: every pair must match; ``since`` / ``until``: bounds on
        ``last_activity`` (seconds since the epoch, inclusive / exclusive); ``search``: a
        substring of the title or the first task's text, both case-folded by ``fold_case``
        (so every backend finds the same, whatever its database's locale); ``before``: the
        ``cursor`` of the last record of the previous page; ``archived``: False (the
        default) leaves archived sessions out, True lists only them, None both. Reads a
        bounded slice of an index.
        """
        for value, name in ((namespace, "namespace"), (user_id, "user_id"), (agent_id, "agent_id")):
            if value is not None:
                check_id(value, name)
        if (
            not isinstance(limit, int)
            or isinstance(limit, bool)
            or not 1 <= limit <= MAX_LIST_LIMIT
        ):
            raise InvalidInput(f"limit must be an int in 1..{MAX_LIST_LIMIT}, got {limit!r}")
        statuses = None
        if turn_status is not None:
            if isinstance(turn_status, str) or not all(isinstance(t, str) for t in turn_status):
                raise InvalidInput("turn_status must be a collection of status names")
            statuses = frozenset(turn_status)
        wanted = (
            None
            if labels is None
            else {k: v for k, v in check_labels(labels, patch=False).items() if v is not None}
        )
        for bound, name in ((since, "since"), (until, "until")):
            if bound is not None and (
                not isinstance(bound, int | float) or isinstance(bound, bool)
            ):
                raise InvalidInput(f"{name} must be seconds since the epoch, got {bound!r}")
        if search is not None and (not isinstance(search, str) or not search.strip()):
            raise InvalidInput(f"search must be non-empty text, got {search!r}")
        if search is not None:
            check_chars(search, "search")
        if archived is not None and not isinstance(archived, bool):
            raise InvalidInput(f"archived must be True, False or None (both), got {archived!r}")
        after = None if before is None else decode_cursor(before)
        return self._find_sessions(
            SessionQuery(
                namespace,
                user_id,
                agent_id,
                statuses,
                wanted,
                None if since is None else float(since),
                None if until is None else float(until),
                None if search is None else fold_case(search.strip()),
                limit,
                after,
                archived,
            )
        )

    @_guarded
    def update_session(
        self,
        key: SessionKey,
        *,
        title: str | Unset | None = UNSET,
        labels: dict[str, str | None] | None = None,
    ) -> SessionRecord:
        """Set the title (None clears it: the first task's line shows again) and merge
        ``labels`` (a None value removes that label); returns the record after the change.

        Idempotent: the same change twice leaves the same record.
        """
        key = _key(key)
        new_title = title if isinstance(title, Unset) else check_title(title)
        patch = {} if labels is None else check_labels(labels, patch=True)
        return self._update_session(key, new_title, patch, self.clock.now())

    @_guarded
    def delete_session(
        self, key: SessionKey, *, by: str, reason: str = "", fence: Lease | None = None
    ) -> Tombstone:
        """Delete everything of ``key`` in one transaction and leave its tombstone.

        ``LeaseHeld`` while another holder has a live lease (pass that lease as ``fence``
        to delete under it). Deleting a deleted session returns the first tombstone.
        """
        key = _key(key)
        check_id(by, "by")
        if not isinstance(reason, str) or len(reason) > MAX_TITLE:
            raise InvalidInput(f"reason must be text of at most {MAX_TITLE} characters")
        check_chars(reason, "reason")
        if fence is not None:
            check_lease(fence)
            if fence.key != key:
                raise InvalidInput(f"fence is a lease of session {fence.key}, not of {key}")
        tombstone = self._delete_session(key, by, reason, fence, self.clock.now())
        self._inbox_seen.pop(key, None)
        self._heads_seen.pop(key, None)
        self._notify()
        return tombstone

    @_guarded
    def tombstone(self, key: SessionKey) -> Tombstone | None:
        """The tombstone of a deleted session, or None."""
        return self._tombstone(_key(key))

    @_guarded
    def tombstones(self, *, after: int = 0, limit: int = 100) -> list[Tombstone]:
        """Up to ``limit`` tombstones with ``seq > after``, in the order of the deletions.

        The next page starts after the last one's ``seq``; deletions committed later always
        come after it (see the module docstring).
        """
        _check_seq(after, "after")
        return self._tombstones(after, _check_limit(limit))

    @_guarded
    def tombstone_watermark(self, sink: str) -> int:
        """The ``seq`` of the last tombstone the export sink named ``sink`` applied (0: none)."""
        check_id(sink, "sink")
        return self._tombstone_watermark(sink)

    @_guarded
    def advance_tombstone_watermark(self, sink: str, seq: int) -> int:
        """Record that ``sink`` applied every tombstone through ``seq``; never backwards.
        Returns the value now stored. ``InvalidInput`` past the last deletion."""
        check_id(sink, "sink")
        _check_seq(seq, "seq")
        return self._advance_tombstone_watermark(sink, seq)

    @_guarded
    def set_archived(
        self, key: SessionKey, archived: bool = True, *, expected_inbox: int | None = None
    ) -> SessionRecord:
        """Archive the session (``archived=False``: bring it back); returns the record.

        Idempotent: archiving an archived session keeps its first ``archived_at``. With
        ``expected_inbox`` the change commits only while the inbox head is that seq (else
        ``InboxChanged``, nothing written).
        """
        key = _key(key)
        if not isinstance(archived, bool):
            raise InvalidInput(f"archived must be True or False, got {archived!r}")
        if expected_inbox is not None:
            _check_seq(expected_inbox, "expected_inbox")
        return self._set_archived(key, archived, expected_inbox, self.clock.now())

    # -- access tokens ----------------------------------------------------------------------

    @_guarded
    def add_token(
        self,
        token_id: str,
        user_id: str,
        digest: str,
        *,
        label: str = "",
        expires_at: float | None = None,
        parent: str | None = None,
    ) -> TokenRecord:
        """Record a new token (its digest, not the token); ``InvalidInput`` for an id in use."""
        check_token_fields(token_id, user_id, digest, label, expires_at, parent)
        return self._add_token(
            TokenRecord(
                token_id,
                user_id,
                label,
                self.clock.now(),
                expires_at=None if expires_at is None else float(expires_at),
                parent=parent,
                digest=digest,
            )
        )

    @_guarded
    def get_token(self, token_id: str) -> TokenRecord | None:
        """The record of ``token_id`` (revoked or not), or None."""
        return self._get_token(check_id(token_id, "token_id"))

    @_guarded
    def list_tokens(self, user_id: str | None = None) -> list[TokenRecord]:
        """Every token record (of ``user_id`` if given), sign-ins included, oldest first."""
        return self._list_tokens(None if user_id is None else check_id(user_id, "user_id"))

    @_guarded
    def touch_token(self, token_id: str) -> None:
        """Record that the token was used now (``last_used_at`` never moves back)."""
        self._touch_token(check_id(token_id, "token_id"), self.clock.now())

    @_guarded
    def revoke_token(self, token_id: str) -> TokenRecord:
        """Revoke the token and the sign-ins made with it, in one transaction; returns its
        record. Revoking twice keeps the first time. ``InvalidInput`` for an unknown id."""
        return self._revoke_token(check_id(token_id, "token_id"), self.clock.now())

    # -- execution log ----------------------------------------------------------------------

    @_guarded
    def head(self, key: SessionKey) -> int:
        """Last committed seq (0 when empty). ``SessionNotFound`` for unknown sessions."""
        return self._head(_key(key))

    @_guarded
    def heads(self, key: SessionKey) -> tuple[int, int]:
        """(``head``, ``inbox_head``) read together, in one read where the backend can: a
        reader that folds both logs reads a log only when its head moved."""
        key = _key(key)
        head, inbox_head = self._read_heads(key)
        self._saw_inbox(key, inbox_head)
        return head, inbox_head

    @_guarded
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
        key = _key(key)
        check_id(batch_id, "batch_id")
        _check_seq(expected_seq, "expected_seq")
        if fence is not None and not isinstance(fence, Lease):
            raise InvalidInput(f"fence must be a Lease, got {type(fence).__name__}")
        if fence is not None and fence.key != key:
            raise InvalidInput(f"fence is a lease of session {fence.key}, not of {key}")
        if expected_inbox is not None:
            _check_seq(expected_inbox, "expected_inbox")
        batch = _stamp(events, expected_seq, execution=True)
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

    @_guarded
    def read_after(self, key: SessionKey, after: int, limit: int) -> list[Event]:
        """Up to ``limit`` committed events with seq > ``after``."""
        key = _key(key)
        _check_seq(after, "after")
        _check_limit(limit)
        return _checked(key, after, self._read(key, after, after + limit))

    @_guarded
    def read_raw(self, key: SessionKey, after: int, limit: int) -> list[RawEvent]:
        """Like ``read_after``, but events stay in their stored form (for exporters).

        Rows are checked (checksum, gaps, unknown required types) but payloads are not
        parsed: ``RawEvent.payload_json`` is the canonical JSON text that was committed.
        """
        key = _key(key)
        _check_seq(after, "after")
        _check_limit(limit)
        return _checked(key, after, self._read_raw(key, after, after + limit))

    def _read_raw(self, key: SessionKey, after: int, through: int) -> list[RawEvent]:
        """Backends with a cheaper stored form override this."""
        return [RawEvent.of(e) for e in self._read(key, after, through)]

    @_guarded
    def read_arrow(self, key: SessionKey, after: int, limit: int) -> pa.Table:
        """Like ``read_raw``, as one Arrow table (needs pyarrow): the fast path of exporters.

        Columns: ``seq``, ``event_id``, ``type``, ``turn_id``, ``run_id``, ``required``,
        ``occurred_at`` (UTC microseconds), ``schema_version`` and ``payload`` (the committed
        canonical JSON text). Checked like ``read_raw``: checksums, gaps, required types.
        """
        key = _key(key)
        _check_seq(after, "after")
        _check_limit(limit)
        table = self._read_arrow(key, after, after + limit)
        n = table.num_rows
        # Seqs are unique and sorted (the key of the log): n of them in (after, after + n]
        # with the last one at after + n leaves no room for a gap.
        if n and (table["seq"][0].as_py() != after + 1 or table["seq"][-1].as_py() != after + n):
            raise _gap(key, after, table["seq"].to_pylist())
        return table

    def _read_arrow(self, key: SessionKey, after: int, through: int) -> pa.Table:
        """Backends that can fetch columns directly override this."""
        from agentnb.stores._arrow import from_raw

        return from_raw(self._read_raw(key, after, through))

    def scan(self, key: SessionKey, after: int = 0, through: int | None = None) -> Iterator[Event]:
        """Committed events in ``(after, through]`` (through defaults to the head now)."""
        key = _key(key)
        _check_seq(after, "after")
        with self._operation():
            head = self._head(key)
        end = head if through is None else _check_seq(through, "through")
        if end > head:
            # Not a gap: those events were never committed. Saying Corrupt would mislead.
            raise InvalidInput(f"session {key}: through={end} is past the head {head}")
        pos = after
        while pos < end:
            with self._operation():
                page = _checked(key, pos, self._read(key, pos, min(end, pos + SCAN_PAGE)))
            if not page:
                raise Corrupt(
                    f"session {key}: events after seq {pos} are missing (expected up to {end})"
                )
            yield from page
            pos = page[-1].seq

    # -- inbox -------------------------------------------------------------------------------

    @_guarded
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
        key, stamped, dedupe_key, digest = _inbox_item(key, event, dedupe_key, fingerprint)
        record = self._inbox_append(key, stamped, dedupe_key, digest, self.clock.now())
        if record[1]:
            self.bus.publish(key, (record[0],), inbox=True)
        self._saw_inbox(key, record[0].seq)
        if record[1]:
            self._notify(key)  # both logs' waiters: a record in the inbox can settle a turn
        return record

    @_guarded
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
        prepared = [_inbox_item(*item) for item in items]
        records = self._inbox_append_many(prepared, self.clock.now())
        for (key, *_), (record, created) in zip(prepared, records, strict=True):
            if created:
                self.bus.publish(key, (record,), inbox=True)
            self._saw_inbox(key, record.seq)
            if created:
                self._notify(key)
        return records

    @_guarded
    def inbox_head(self, key: SessionKey) -> int:
        """Last inbox seq (0 when empty)."""
        key = _key(key)
        return self._saw_inbox(key, self._inbox_head(key))

    @_guarded
    def inbox_read_after(self, key: SessionKey, after: int, limit: int) -> list[Event]:
        """Up to ``limit`` inbox events with inbox seq > ``after``."""
        key = _key(key)
        _check_seq(after, "after")
        _check_limit(limit)
        events = _checked(key, after, self._inbox_read(key, after, after + limit))
        if events:
            self._saw_inbox(key, events[-1].seq)
        return events

    def inbox_head_hint(self, key: SessionKey) -> int:
        """The highest inbox seq of ``key`` this store object has appended or read (0: none).

        Never a database call: a lower bound of the inbox head, exact for commands accepted
        through this object, and as fresh for other writers' as the last read (a
        ``wait_for_inbox`` reads at least every ``poll_interval``, or on their notification).
        A reader that knows every command up to the hint may skip a read whose result only
        decides *when* it sees another writer's command, never *whether*.
        """
        return self._inbox_seen.get(key, 0)

    def head_hint(self, key: SessionKey) -> int:
        """The last execution-log seq of ``key`` this store object committed (0: none).

        Never a database call; a lower bound of the head, exact while every append of the
        session goes through this object (its lease holder's, say).
        """
        return self._heads_seen.get(key, 0)

    def _saw_inbox(self, key: SessionKey, seq: int) -> int:
        return self._saw(self._inbox_seen, key, seq)

    def _saw(self, seen: dict[SessionKey, int], key: SessionKey, seq: int) -> int:
        if seq > seen.get(key, 0):
            with self._hints_lock:  # never lowered by a slower thread's older value
                if seq > seen.get(key, 0):
                    seen[key] = seq
        return seq

    # -- leases ------------------------------------------------------------------------------

    @_guarded
    def acquire_lease(self, key: SessionKey, owner: str, ttl: float = 10.0) -> Lease:
        """Take (or extend, for the same owner) the execution lease; ``LeaseHeld`` if taken."""
        key = _key(key)
        check_id(owner, "owner")
        return self._acquire_lease(key, owner, check_ttl(ttl), self.clock.now())

    @_guarded
    def renew_lease(self, lease: Lease, ttl: float = 10.0) -> Lease:
        """Extend a live lease; ``Fenced`` if it is stale or expired."""
        check_lease(lease)
        return self._renew_lease(lease, check_ttl(ttl), self.clock.now())

    @_guarded
    def release_lease(self, lease: Lease) -> None:
        """Give the lease up now so another holder need not wait; ``Fenced`` if stale."""
        check_lease(lease)
        self._release_lease(lease, self.clock.now())

    @_guarded
    def current_lease(self, key: SessionKey) -> Lease | None:
        """The live lease, or None when nobody holds one."""
        key = _key(key)
        row = self._lease_row(key)
        now = self.clock.now()
        if row is None or row.owner is None or row.expires_at <= now:
            return None
        return Lease(key, row.owner, row.epoch, row.expires_at)

    # -- export watermarks -------------------------------------------------------------------

    @_guarded
    def watermark(self, key: SessionKey, sink: str) -> int:
        """Highest seq the sink named ``sink`` holds durably (0 if none)."""
        key = _key(key)
        check_id(sink, "sink")
        return self._watermark(key, sink)

    @_guarded
    def advance_watermark(self, key: SessionKey, sink: str, seq: int) -> int:
        """Move the watermark up to ``seq``; never backwards. Returns the value now stored."""
        key = _key(key)
        check_id(sink, "sink")
        _check_seq(seq, "seq")
        head = self._head(key)
        if seq > head:
            raise InvalidInput(f"session {key}: watermark {seq} is past the head {head}")
        return self._advance_watermark(key, sink, seq)

    @_guarded
    def watermarks(self, key: SessionKey) -> dict[str, int]:
        """Every export sink's watermark of the session, by sink name (what a backup or a
        migration carries over, ``agentnb.ops``)."""
        return self._watermarks(_key(key))

    @_guarded
    def inbox_keys(self, key: SessionKey, after: int, limit: int) -> list[tuple[int, str, str]]:
        """``(seq, dedupe_key, fingerprint)`` of the inbox records after ``after`` (up to
        ``limit`` seqs on) that were accepted under a ``dedupe_key``: what a backup or a
        migration needs so that a re-sent command is recognised on the copy too."""
        key = _key(key)
        _check_seq(after, "after")
        _check_limit(limit)
        return self._inbox_keys(key, after, after + limit)

    @_guarded
    def blob_usage(self, key: SessionKey) -> dict[str, int]:
        """The blobs the session's events and commands are stored in, by digest, with the
        bytes each holds: each distinct text once, however many events carry it (what
        deleting the session frees, unless another session's rows name it too)."""
        return self._blob_usage(_key(key))

    # -- misc --------------------------------------------------------------------------------

    @_guarded
    def put_snapshot(self, key: SessionKey, name: str, seq: int, data: bytes) -> None:
        """Cache a projection of the log through ``seq`` under ``name``.

        A snapshot is a cache, never the truth: readers fold the log after ``seq`` on top of
        it, and may ignore it. An older ``seq`` than the stored one is a no-op. The data is
        stored sealed: an HMAC, keyed by the store's ``secret()``, over the session, the
        name, ``seq``, the digest of the committed event at ``seq`` (its envelope and
        payload) and the data. ``get_snapshot`` checks it.
        """
        key = _key(key)
        check_id(name, "name")
        _check_seq(seq, "seq")
        if not isinstance(data, bytes):
            raise InvalidInput(f"snapshot data must be bytes, got {type(data).__name__}")
        head = self._head(key)
        if seq > head:
            raise InvalidInput(f"session {key}: snapshot seq {seq} is past the head {head}")
        anchor = event_anchor(self._read_raw(key, seq - 1, seq) if seq else [])
        self._put_snapshot(
            key, name, seq, seal_snapshot(self._secret(), key, name, seq, anchor, data)
        )

    @_guarded
    def get_snapshot(self, key: SessionKey, name: str) -> tuple[int, bytes] | None:
        """The newest snapshot ``name`` as (seq, data), or None.

        None also when the stored snapshot does not match its seal (see ``put_snapshot``):
        its bytes were altered, it was moved from another session or name, it is past the
        head, or the event at its ``seq`` is not the one it summarised (the log was rolled
        back or rewritten, or that event does not read back).
        """
        key = _key(key)
        check_id(name, "name")
        found = self._get_snapshot(key, name)
        if found is None:
            return None
        seq, stored = found
        if seq > self._head(key):
            return None
        try:
            anchor = event_anchor(self._read_raw(key, seq - 1, seq) if seq else [])
        except Corrupt:
            return None  # the reader folds from scratch and meets the damage itself
        data = open_snapshot(self._secret(), key, name, seq, anchor, stored)
        return None if data is None else (seq, data)

    @_guarded
    def secret(self) -> bytes:
        """A random per-store secret (created once) for signing cursors."""
        return self._secret()

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
        key = _key(key)
        poll = self._poll(poll)
        read = self._hinted(self._heads_seen, key, after, local, lambda: self._head(key), poll)
        return self._wait(
            read, after, timeout, stop, key=key, inbox=False, settling=settling, poll=poll
        )

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
        key = _key(key)
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

    def _poll(self, poll: float | None) -> float:
        if poll is None:
            return self.poll_interval
        if not isinstance(poll, int | float) or isinstance(poll, bool) or not 0 < poll <= 3600:
            raise InvalidInput(f"poll must be seconds in (0, 3600], got {poll!r}")
        return float(poll)

    def _hinted(
        self,
        seen: dict[SessionKey, int],
        key: SessionKey,
        after: int,
        local: bool,
        read_db: Callable[[], int],
        poll: float,
    ) -> Callable[[], int]:
        """A waiter's read: a seq past ``after`` that this object committed, accepted or
        read (``seen``) needs no query; the database is read at most every ``poll``
        seconds, the first time too when ``local``."""
        checked = time.monotonic() if local else -math.inf

        def read() -> int:
            nonlocal checked
            known = seen.get(key, 0)
            if known > after:
                return known
            now = time.monotonic()
            if now - checked < poll:
                return after
            checked = now
            return read_db()

        return read

    def wake_waiters(
        self, key: SessionKey | None = None, *, inbox: bool | None = None, minor: bool = False
    ) -> None:
        """Wake the waiters of ``key`` (and those of no session in particular); None wakes
        every waiter of this store, so those whose ``stop`` is set return now.

        ``inbox`` wakes only the waiters of that log of ``key`` (True: ``wait_for_inbox``,
        False: ``wait_for_head``); None wakes both. ``minor``: the commit cannot settle a
        turn (only events inside a step), so ``wait_for_head(settling=True)`` sleeps on.
        """
        self._notify(None if key is None else _key(key), inbox=inbox, minor=minor)

    def close(self) -> None:
        """Release resources; committed data stays. Waiters wake up.

        Calls already running in other threads finish first; later calls raise
        ``StorageError``. Backends release their resources after this returns.
        """
        with self._ops_done:
            self._closed = True
        self._notify()
        with self._ops_done:
            self._ops_done.wait_for(lambda: self._ops == 0, timeout=60)

    @contextlib.contextmanager
    def _operation(self) -> Iterator[None]:
        """Count a call in flight, so ``close`` waits for it (and refuses new ones)."""
        with self._ops_done:
            if self._closed:
                raise StorageError(f"store {self.url} is closed; open it again to use it")
            self._ops += 1
        try:
            yield
        finally:
            with self._ops_done:
                self._ops -= 1
                if not self._ops and self._closed:
                    self._ops_done.notify_all()

    def __enter__(self) -> SessionStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- helpers for backends ----------------------------------------------------------------

    def _notify(
        self, key: SessionKey | None = None, *, inbox: bool | None = None, minor: bool = False
    ) -> None:
        """Wake the waiters of ``key`` (a commit of that session: of its inbox when
        ``inbox``, of its execution log when not, of either when None) and those of no
        session in particular; no key wakes every waiter (close, ``wake_waiters``, a remote
        commit nobody could place).

        Every commit calls this: the lock is skipped when nobody waits (a waiter counts
        itself before it reads, and the generations tell it a commit slipped in before it
        slept). Waking only the waiters of the log that moved keeps a commit's cost flat
        however many sessions run at once, and a run's inbox watcher asleep through its own
        run's commits. A ``minor`` commit of the execution log leaves its "settle" waiters
        asleep.
        """
        if self._wake_watchers:
            self._tell_wake_watchers(key, inbox)
        if not self._waiting:
            return
        with self._wake_lock:
            if key is None:
                self._generation += 1
                for cond in self._key_conds.values():
                    cond.notify_all()
            else:
                kinds: list[str] = []
                if inbox is not True:  # the execution log moved
                    kinds += ["log"] if minor else ["log", "settle"]
                if inbox is not False:
                    kinds.append("inbox")
                for kind in kinds:
                    slot = (key, kind)
                    self._key_generations[slot] = self._key_generations.get(slot, 0) + 1
                    waiting = self._key_conds.get(slot)
                    if waiting is not None:
                        waiting.notify_all()
            self._unkeyed += 1
            self._cond.notify_all()

    def watch_wakes(
        self, key: SessionKey, callback: Callable[[bool | None], None]
    ) -> Callable[[], None]:
        """Call ``callback(inbox)`` at each wake-up of ``key``'s waiters: a commit of this
        object, once its readers have it (``inbox``: True for the inbox, False for the
        execution log), a notification of another process's commit where the backend has
        them (PostgreSQL), or a wake-up of every waiter (``inbox`` None: close,
        ``wake_waiters()``). A waiter that never sleeps in a thread (an event loop's task)
        follows a session this way; commits of other processes that no notification
        brings are its poll's to find. The callback runs on the waker's thread and must
        only hand the news over (an exception it raises is dropped). Returns the unwatch.
        """
        key = _key(key)
        with self._hints_lock:
            self._wake_watchers[key] = (*self._wake_watchers.get(key, ()), callback)

        def unwatch() -> None:
            with self._hints_lock:
                left = tuple(c for c in self._wake_watchers.get(key, ()) if c is not callback)
                if left:
                    self._wake_watchers[key] = left
                else:
                    self._wake_watchers.pop(key, None)

        return unwatch

    def _tell_wake_watchers(self, key: SessionKey | None, inbox: bool | None) -> None:
        if key is None:
            told = [c for callbacks in list(self._wake_watchers.values()) for c in callbacks]
        else:
            told = list(self._wake_watchers.get(key, ()))
        for callback in told:
            with contextlib.suppress(Exception):
                callback(None if key is None else inbox)

    def _notify_unkeyed(self) -> None:
        """Wake only the waiters of no session in particular: for a commit of a session
        this object never resolved (a waiter's first read resolves its session, so such a
        session has no waiter of its own)."""
        if not self._waiting:
            return
        with self._wake_lock:
            self._unkeyed += 1
            self._cond.notify_all()

    def _wait(
        self,
        read: Callable[[], int],
        after: int,
        timeout: float | None,
        stop: threading.Event | None = None,
        *,
        key: SessionKey | None = None,
        inbox: bool = False,
        settling: bool = False,
        poll: float | None = None,
    ) -> int:
        """Read until the value passes ``after``, sleeping between reads until a commit of
        ``key``'s inbox (``inbox``) or execution log (any commit, without a key; with
        ``settling``, not a minor one) or the poll interval for other processes' commits."""
        kind = "inbox" if inbox else "settle" if settling else "log"
        slot = None if key is None else (key, kind)
        with self._wake_lock:
            self._waiting += 1
            cond = self._cond
            if slot is not None:
                self._key_waiting[slot] = self._key_waiting.get(slot, 0) + 1
                cond = self._key_conds.setdefault(slot, threading.Condition(self._wake_lock))
        try:
            return self._wait_loop(
                read, after, timeout, stop, slot, cond, self.poll_interval if poll is None else poll
            )
        finally:
            with self._wake_lock:
                self._waiting -= 1
                if slot is not None:
                    left = self._key_waiting[slot] - 1
                    if left:
                        self._key_waiting[slot] = left
                    else:  # nobody waits for this log: forget it (keys come and go)
                        del self._key_waiting[slot]
                        self._key_conds.pop(slot, None)
                        self._key_generations.pop(slot, None)

    def _generations(self, slot: _Slot | None) -> tuple[int, int]:
        return self._generation, (
            self._unkeyed if slot is None else self._key_generations.get(slot, 0)
        )

    def _wait_loop(
        self,
        read: Callable[[], int],
        after: int,
        timeout: float | None,
        stop: threading.Event | None,
        slot: _Slot | None,
        cond: threading.Condition,
        poll: float,
    ) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        value = after
        while True:
            generation = self._generations(slot)
            try:
                with self._operation():
                    value = read()
            except StorageError:
                if self._closed:
                    return value  # closed while waiting: the waiter just needs to wake
                raise
            if value > after or self._closed or (stop is not None and stop.is_set()):
                return value
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return value
            step = poll if remaining is None else min(remaining, poll)
            self._idle()
            with self._wake_lock:
                # Checked under the lock that close() and wake_waiters() notify with.
                if (
                    not self._closed
                    and not (stop is not None and stop.is_set())
                    and generation == self._generations(slot)
                ):
                    cond.wait(step)
            if self._closed:
                # Reading again could fail on a closed backend; the waiter just needs to wake.
                return value

    def _idle(self) -> None:  # noqa: B027 - a hook whose default is to do nothing
        """This thread is about to sleep in a wait: a backend may lend its connection to
        other threads meanwhile (SQLite does; the default keeps it)."""

    # -- what a backend implements -----------------------------------------------------------

    @abstractmethod
    def _create_session(self, key: SessionKey, now: float) -> SessionRecord: ...

    @abstractmethod
    def _get_session(self, key: SessionKey) -> SessionRecord | None: ...

    @abstractmethod
    def _list_sessions(
        self, namespace: str | None, user_id: str | None, agent_id: str | None
    ) -> list[SessionRecord]: ...

    @abstractmethod
    def _find_sessions(self, query: SessionQuery) -> list[SessionRecord]:
        """Live records matching ``query``, newest (last_activity, row) first, each with its
        ``cursor``; an index range, never a scan of the logs."""

    @abstractmethod
    def _update_session(
        self,
        key: SessionKey,
        title: str | Unset | None,
        labels: dict[str, str | None],
        now: float,
    ) -> SessionRecord:
        """Atomically: set the title unless ``UNSET``, ``merge_labels``, set ``updated_at``."""

    @abstractmethod
    def _delete_session(
        self, key: SessionKey, by: str, reason: str, fence: Lease | None, now: float
    ) -> Tombstone:
        """Atomically: ``check_fence``, delete every row of the session, leave the tombstone."""

    @abstractmethod
    def _tombstone(self, key: SessionKey) -> Tombstone | None: ...

    @abstractmethod
    def _tombstones(self, after: int, limit: int) -> list[Tombstone]:
        """Tombstones with after < seq, by seq, at most ``limit``."""

    @abstractmethod
    def _tombstone_watermark(self, sink: str) -> int: ...

    @abstractmethod
    def _advance_tombstone_watermark(self, sink: str, seq: int) -> int:
        """Atomically: ``InvalidInput`` past the highest tombstone seq, else max(old, seq)."""

    @abstractmethod
    def _set_archived(
        self, key: SessionKey, archived: bool, expected_inbox: int | None, now: float
    ) -> SessionRecord:
        """Atomically: ``check_inbox``, then set ``archived_at`` (kept if already set) or clear
        it; ``SessionDeleted`` / ``SessionNotFound`` for a key that is not live."""

    @abstractmethod
    def _add_token(self, record: TokenRecord) -> TokenRecord:
        """Insert ``record``; ``InvalidInput`` (nothing written) if its id exists."""

    @abstractmethod
    def _get_token(self, token_id: str) -> TokenRecord | None: ...

    @abstractmethod
    def _list_tokens(self, user_id: str | None) -> list[TokenRecord]:
        """By ``created_at`` then id."""

    @abstractmethod
    def _touch_token(self, token_id: str, now: float) -> None:
        """``last_used_at = max(last_used_at, now)``; nothing for an unknown id."""

    @abstractmethod
    def _revoke_token(self, token_id: str, now: float) -> TokenRecord:
        """Atomically set ``revoked_at`` (kept if set) on the token and on every token whose
        ``parent`` it is; ``InvalidInput`` if there is no such token."""

    @abstractmethod
    def _head(self, key: SessionKey) -> int: ...

    def _read_heads(self, key: SessionKey) -> tuple[int, int]:
        """Both heads; a backend overrides it to read them in one statement."""
        return self._head(key), self._inbox_head(key)

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
    def _lease_row(self, key: SessionKey) -> LeaseRow | None: ...

    @abstractmethod
    def _acquire_lease(self, key: SessionKey, owner: str, ttl: float, now: float) -> Lease: ...

    @abstractmethod
    def _renew_lease(self, lease: Lease, ttl: float, now: float) -> Lease: ...

    @abstractmethod
    def _release_lease(self, lease: Lease, now: float) -> None: ...

    @abstractmethod
    def _watermark(self, key: SessionKey, sink: str) -> int: ...

    @abstractmethod
    def _advance_watermark(self, key: SessionKey, sink: str, seq: int) -> int: ...

    @abstractmethod
    def _watermarks(self, key: SessionKey) -> dict[str, int]: ...

    @abstractmethod
    def _inbox_keys(
        self, key: SessionKey, after: int, through: int
    ) -> list[tuple[int, str, str]]: ...

    @abstractmethod
    def put_blob(self, data: bytes) -> str:
        """Store bytes under their SHA-256 hex digest (idempotent); returns the digest."""

    @abstractmethod
    def get_blob(self, digest: str) -> bytes:
        """The bytes stored under ``digest``; ``Corrupt`` if missing or not matching."""

    @abstractmethod
    def _blob_usage(self, key: SessionKey) -> dict[str, int]: ...

    @abstractmethod
    def _secret(self) -> bytes: ...

    @abstractmethod
    def _put_snapshot(self, key: SessionKey, name: str, seq: int, data: bytes) -> None: ...

    @abstractmethod
    def _get_snapshot(self, key: SessionKey, name: str) -> tuple[int, bytes] | None: ...


# --------------------------------------------------------------------------------------------
# argument checks


def _key(key: object) -> SessionKey:
    if not isinstance(key, SessionKey):
        raise InvalidInput(f"expected a SessionKey, got {type(key).__name__}")
    return key


def _check_seq(value: object, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InvalidInput(f"{name} must be a non-negative int, got {value!r}")
    return value


def _check_limit(limit: object) -> int:
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_READ_LIMIT:
        raise InvalidInput(
            f"limit must be an int in 1..{MAX_READ_LIMIT}, got {limit!r}; page with after= for more"
        )
    return limit


def check_ttl(ttl: object) -> float:
    if not isinstance(ttl, int | float) or isinstance(ttl, bool) or not 0 < ttl <= 86_400:
        raise InvalidInput(f"ttl must be seconds in (0, 86400], got {ttl!r}")
    return float(ttl)


MAX_TOKEN_LABEL = 256
"""Longest token label, in characters."""


def check_token_fields(
    token_id: object,
    user_id: object,
    digest: object,
    label: object,
    expires_at: object,
    parent: object,
) -> None:
    """``InvalidInput`` unless the fields of a new token record are usable."""
    check_id(token_id, "token_id")
    check_id(user_id, "user_id")
    if not isinstance(digest, str) or len(digest) != 64 or digest.strip("0123456789abcdef"):
        raise InvalidInput("digest must be a SHA-256 hex digest (64 lowercase hex characters)")
    if not isinstance(label, str) or len(label) > MAX_TOKEN_LABEL:
        raise InvalidInput(f"label must be text of at most {MAX_TOKEN_LABEL} characters")
    if expires_at is not None and (
        not isinstance(expires_at, int | float)
        or isinstance(expires_at, bool)
        or not math.isfinite(expires_at)
    ):
        raise InvalidInput(
            f"expires_at must be seconds since the epoch or None, got {expires_at!r}"
        )
    if parent is not None:
        check_id(parent, "parent")


def check_lease(lease: object) -> None:
    if not isinstance(lease, Lease):
        raise InvalidInput(f"expected a Lease, got {type(lease).__name__}")


def check_pending_scope(limit: object, agent_id: object, namespace: object) -> int:
    """The ``limit`` (1..1000), ``agent_id`` and ``namespace`` of a backend's
    ``claim_pending`` / ``held_pending``; ``InvalidInput`` for anything else."""
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 1000:
        raise InvalidInput(f"limit must be an int in 1..1000, got {limit!r}")
    for value, name in ((agent_id, "agent_id"), (namespace, "namespace")):
        if value is not None:
            check_id(value, name)
    return limit


def leases_of(rows: Iterable[Sequence[Any]]) -> list[Lease]:
    """Leases from rows of (namespace, user, agent, session, owner, epoch, expires)."""
    return [
        Lease(SessionKey(ns, user, agent, session), owner, int(epoch), float(expires))
        for ns, user, agent, session, owner, epoch, expires in rows
    ]


def _inbox_item(
    key: SessionKey, event: Event, dedupe_key: str | None, fingerprint: str | None
) -> tuple[SessionKey, Event, str | None, str]:
    """One inbox record checked and stamped: the key, the event, its dedupe key and the
    digest a re-send must repeat (the fingerprint, else the whole event; a long one as its
    SHA-256, ``stored_fingerprint``)."""
    key = _key(key)
    if dedupe_key is not None:
        check_id(dedupe_key, "dedupe_key")
    if fingerprint is not None and not isinstance(fingerprint, str):
        raise InvalidInput("fingerprint must be a string")
    (stamped,) = _stamp([event], 0, execution=False)
    meta_update(stamped)  # an update's title and labels are checked before anything
    return key, stamped, dedupe_key, stored_fingerprint(fingerprint or event_digest([stamped]))


def _stamp(events: Sequence[Event], expected_seq: int, *, execution: bool) -> list[Event]:
    if isinstance(events, Event) or not isinstance(events, Sequence):
        raise InvalidInput("events must be a list of Event")
    if not events:
        raise InvalidInput("an append needs at least one event")
    if len(events) > MAX_BATCH:
        raise InvalidInput(f"a batch holds at most {MAX_BATCH} events, got {len(events)}")
    out: list[Event] = []
    seen: set[str] = set()
    for i, event in enumerate(events, start=expected_seq + 1):
        if not isinstance(event, Event):
            raise InvalidInput(f"events must be Event instances, got {type(event).__name__}")
        if (event.type in INBOX_TYPES) == execution:
            where = "the inbox" if execution else "the execution log"
            raise InvalidInput(f"{event.type!r} events belong in {where}")
        check_writable(event.type, event.required)
        if type(event.payload) is not FrozenDict:
            event = _frozen(event)  # noqa: PLW2901 - the frozen copy replaces it from here on
        if event.event_id in seen:
            raise InvalidInput(f"event id {event.event_id} appears twice in one batch")
        seen.add(event.event_id)
        if not execution:
            if event.seq != 0:
                raise InvalidInput("inbox events must have seq 0; the store assigns it")
            out.append(event)
            continue
        if event.seq not in (0, i):
            raise InvalidInput(
                f"event {event.event_id} has seq {event.seq}, expected {i}; "
                "leave seq at 0 and let the store assign it"
            )
        out.append(event if event.seq == i else event.with_seq(i))
    return out


def _frozen(event: Event) -> Event:
    # An event built with model_construct around a plain dict: commit a frozen copy, so the
    # caller cannot change a committed fact through the object it still holds.
    payload = freeze_json(event.payload)
    if not isinstance(payload, FrozenDict):
        raise InvalidInput(f"event {event.event_id}: payload must be a JSON object")
    copy = event.__copy__()
    copy.__dict__["payload"] = payload
    return copy


_E = TypeVar("_E", Event, RawEvent)


def _checked(key: SessionKey, after: int, events: list[_E]) -> list[_E]:
    """``events`` if their seqs run gaplessly from ``after + 1``; else ``Corrupt``."""
    seqs = [event.seq for event in events]
    if seqs != list(range(after + 1, after + 1 + len(seqs))):
        raise _gap(key, after, seqs)
    return events


def _gap(key: SessionKey, after: int, seqs: list[int]) -> Corrupt:
    expected = after + 1
    for seq in seqs:
        if seq != expected:
            break
        expected += 1
    return Corrupt(
        f"session {key}: gap in the log, expected seq {expected} but found {seq}; the store "
        "was altered outside agentnb"
    )
