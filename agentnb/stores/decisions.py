"""The decisions every backend makes alike, as pure functions, and the argument checks.

A backend calls the ``decide_*`` and ``check_*`` functions inside its own transaction, on the
rows it read, so that fences, appends, leases, the catalogue, tombstones and cursors are decided
the same way whatever the database. The argument checks (``check_key``, ``stamp``, ...) are
what the roles of the port (``agentnb.stores.ports``) run before any backend is called.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import math
import re
from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

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
)
from agentnb.events import (
    INBOX_TYPES,
    Event,
    FrozenDict,
    check_writable,
    event_digest,
    freeze_json,
)
from agentnb.ids import SessionKey, check_id
from agentnb.limits import check_chars
from agentnb.stores._rows import RawEvent, stored_fingerprint
from agentnb.stores.values import (
    MAX_BATCH,
    MAX_LABEL_KEY,
    MAX_LABEL_VALUE,
    MAX_LABELS,
    MAX_READ_LIMIT,
    MAX_TITLE,
    MAX_TOKEN_LABEL,
    UNSET,
    WORK_KINDS,
    CatalogueDelta,
    Lease,
    LeaseRow,
    Tombstone,
    Unset,
)

__all__ = [
    "check_archived",
    "check_fence",
    "check_inbox",
    "check_key",
    "check_labels",
    "check_lease",
    "check_limit",
    "check_pending_scope",
    "check_seq",
    "check_title",
    "check_token_fields",
    "check_tombstone",
    "check_ttl",
    "checked",
    "decide_acquire",
    "decide_append",
    "decide_catalogue",
    "decide_release",
    "decide_tombstone_mark",
    "decode_cursor",
    "does_work",
    "encode_cursor",
    "first_line",
    "gap",
    "inbox_item",
    "leases_of",
    "merge_labels",
    "meta_update",
    "stamp",
    "submit_delta",
    "submit_text",
]

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
# argument checks


def check_key(key: object) -> SessionKey:
    """``key`` if it is a ``SessionKey``, else ``InvalidInput``."""
    if not isinstance(key, SessionKey):
        raise InvalidInput(f"expected a SessionKey, got {type(key).__name__}")
    return key


def check_seq(value: object, name: str) -> int:
    """``value`` if it is a non-negative int (a seq), else ``InvalidInput`` naming ``name``."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InvalidInput(f"{name} must be a non-negative int, got {value!r}")
    return value


def check_limit(limit: object) -> int:
    """A read's ``limit`` (1..``MAX_READ_LIMIT``), else ``InvalidInput``."""
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_READ_LIMIT:
        raise InvalidInput(
            f"limit must be an int in 1..{MAX_READ_LIMIT}, got {limit!r}; page with after= for more"
        )
    return limit


def check_ttl(ttl: object) -> float:
    """A lease's ``ttl`` in seconds, (0, 86400], else ``InvalidInput``."""
    if not isinstance(ttl, int | float) or isinstance(ttl, bool) or not 0 < ttl <= 86_400:
        raise InvalidInput(f"ttl must be seconds in (0, 86400], got {ttl!r}")
    return float(ttl)


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
    """``InvalidInput`` unless ``lease`` is a ``Lease``."""
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


def inbox_item(
    key: SessionKey, event: Event, dedupe_key: str | None, fingerprint: str | None
) -> tuple[SessionKey, Event, str | None, str]:
    """One inbox record checked and stamped: the key, the event, its dedupe key and the
    digest a re-send must repeat (the fingerprint, else the whole event; a long one as its
    SHA-256, ``stored_fingerprint``)."""
    key = check_key(key)
    if dedupe_key is not None:
        check_id(dedupe_key, "dedupe_key")
    if fingerprint is not None and not isinstance(fingerprint, str):
        raise InvalidInput("fingerprint must be a string")
    (stamped,) = stamp([event], 0, execution=False)
    meta_update(stamped)  # an update's title and labels are checked before anything
    return key, stamped, dedupe_key, stored_fingerprint(fingerprint or event_digest([stamped]))


def stamp(events: Sequence[Event], expected_seq: int, *, execution: bool) -> list[Event]:
    """The batch checked and given its seqs after ``expected_seq`` (``execution``: events of
    the execution log; else inbox events, whose seq the store assigns); ``InvalidInput``."""
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


def checked(key: SessionKey, after: int, events: list[_E]) -> list[_E]:
    """``events`` if their seqs run gaplessly from ``after + 1``; else ``Corrupt``."""
    seqs = [event.seq for event in events]
    if seqs != list(range(after + 1, after + 1 + len(seqs))):
        raise gap(key, after, seqs)
    return events


def gap(key: SessionKey, after: int, seqs: list[int]) -> Corrupt:
    """The ``Corrupt`` of a read whose seqs after ``after`` are not gapless."""
    expected = after + 1
    for seq in seqs:
        if seq != expected:
            break
        expected += 1
    return Corrupt(
        f"session {key}: gap in the log, expected seq {expected} but found {seq}; the store "
        "was altered outside agentnb"
    )
