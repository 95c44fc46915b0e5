"""Bounded, resumable pages of a session's committed messages (``history`` / ``history_pages``).

A page lists the same messages ``Session.transcript()`` does (``message/user``,
``message/assistant`` and ``tool/result`` events, plus the messages a
``migration/baseline`` event carries), oldest first, in seq order, at most ``limit`` of them.

Guarantees:

* ``limit`` is an int in ``1..MAX_LIMIT``; anything else raises ``InvalidLimit`` before any I/O.
* The first page pins a **snapshot**: the head seq when it was read (the high-water mark).
  Every later page of the same walk reads only events up to that mark, so messages committed
  after a walk started never appear in it; a new walk (``after=None``) sees them.
* ``next_cursor`` is returned only when another message exists in the snapshot after the page,
  so a walk never ends with an empty page. An empty session gives one empty page.
* Cursors are opaque, signed with the store's secret and bound to one session. A malformed or
  altered cursor, or one signed by another store, raises ``InvalidCursor``; a cursor of another
  session ``CrossSessionCursor``; a cursor whose snapshot is ahead of the log (the log was
  replaced or restored from a backup) ``ExpiredCursor``. Error messages never echo the token.
* A page reads events in bounded batches starting at the cursor's position, never from seq 1,
  and counts every event it examines (the look-ahead for ``next_cursor`` included); more than
  ``replay_limit`` raises ``HistoryTooLarge``.
* Unknown sessions raise ``SessionNotFound``; a damaged log raises ``Corrupt``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from agentnb import html
from agentnb.errors import (
    Corrupt,
    CrossSessionCursor,
    ExpiredCursor,
    HistoryTooLarge,
    InvalidCursor,
    InvalidInput,
    InvalidLimit,
)
from agentnb.events import Event, Message, canonical_json
from agentnb.ids import SessionKey
from agentnb.projections.state import tool_message
from agentnb.stores.base import SessionStore

__all__ = [
    "DEFAULT_LIMIT",
    "DEFAULT_REPLAY_LIMIT",
    "MAX_CURSOR_LENGTH",
    "MAX_LIMIT",
    "HistoryPage",
    "HistoryPages",
    "read_history",
]

MAX_LIMIT = 256
"""Largest number of messages one page holds."""
DEFAULT_LIMIT = 100
DEFAULT_REPLAY_LIMIT = 100_000
"""Events one page may examine before it gives up with ``HistoryTooLarge``."""
MAX_CURSOR_LENGTH = 4096
"""Longest cursor accepted; longer strings are refused without being decoded."""

_READ_BATCH = 1_000
"""Most events asked of the store in one read."""
_PREFIX = "h1"
_TOKEN = re.compile(r"h1\.([A-Za-z0-9_-]+)\.([A-Za-z0-9_-]+)")
_SIG_BYTES = 32
_KEY_BYTES = 16
_CURSOR_FIELDS = frozenset({"k", "a", "o", "h"})
_MESSAGE_TYPES = frozenset({"message/user", "message/assistant"})
_RESTART = "pass a next_cursor from this session's history unchanged, or after=None to start over"


@dataclass(frozen=True, slots=True)
class HistoryPage:
    """One page of committed messages, oldest first.

    ``next_cursor`` continues the same walk (same snapshot); None when this is the last page.
    """

    messages: tuple[Message, ...]
    next_cursor: str | None

    def _repr_html_(self) -> str:
        return html.history_page_html(self)

    def __repr__(self) -> str:
        n = len(self.messages)
        more = "more pages follow (next_cursor)" if self.next_cursor else "the last page"
        return f"HistoryPage({n} message{'' if n == 1 else 's'}, {more})"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))


def read_history(
    store: SessionStore,
    key: SessionKey,
    limit: int = DEFAULT_LIMIT,
    after: str | None = None,
    *,
    replay_limit: int = DEFAULT_REPLAY_LIMIT,
) -> HistoryPage:
    """One page of ``key``'s messages: the first page, or the one after the cursor ``after``.

    See the module docstring for the guarantees and the errors.
    """
    _check_limit(limit)
    _check_replay_limit(replay_limit)
    signing_key = _signing_key(store.secret())
    if after is None:
        position = _Position(after_seq=0, offset=0)
        hwm = store.head(key)
    else:
        cursor = _decode(signing_key, after)
        if cursor.key_hash != _key_hash(key):
            raise CrossSessionCursor(
                f"this cursor belongs to another session, not {key}; use the next_cursor "
                "that session's history returned, or after=None to start over"
            )
        head = store.head(key)
        if cursor.hwm > head:
            raise ExpiredCursor(
                f"session {key}: the cursor's snapshot (seq {cursor.hwm}) is past the log's "
                f"head ({head}); the log was replaced or restored - start over with after=None"
            )
        position, hwm = cursor.position, cursor.hwm
    messages, next_position = _read_page(store, key, limit, position, hwm, replay_limit)
    next_cursor = None
    if next_position is not None:
        next_cursor = _encode(signing_key, _Cursor(_key_hash(key), next_position, hwm))
    return HistoryPage(tuple(messages), next_cursor)


class HistoryPages(Iterator[HistoryPage]):
    """Every page of one walk, read lazily: ``for page in HistoryPages(store, key): ...``.

    Holds only the next cursor, never earlier pages. After the last page it stays exhausted
    without touching the store again. If reading a page raises, the position is kept, so
    calling ``next()`` again retries the same page.
    """

    def __init__(
        self,
        store: SessionStore,
        key: SessionKey,
        limit: int = DEFAULT_LIMIT,
        *,
        replay_limit: int = DEFAULT_REPLAY_LIMIT,
    ) -> None:
        _check_limit(limit)
        _check_replay_limit(replay_limit)
        self._store = store
        self._key = key
        self._limit = limit
        self._replay_limit = replay_limit
        self._cursor: str | None = None
        self._done = False

    def __iter__(self) -> HistoryPages:
        return self

    def __next__(self) -> HistoryPage:
        if self._done:
            raise StopIteration
        page = read_history(
            self._store, self._key, self._limit, self._cursor, replay_limit=self._replay_limit
        )
        # Only a page that was read moves the walk on: an error above leaves it where it was.
        self._cursor = page.next_cursor
        self._done = page.next_cursor is None
        return page


# --------------------------------------------------------------------------------------------
# Page building


@dataclass(frozen=True, slots=True)
class _Position:
    """Where a walk continues: skip ``offset`` messages of event ``after_seq + 1``, then on.

    Every message of events up to ``after_seq`` has been returned. ``offset`` is non-zero only
    inside an event that carries several messages (a ``migration/baseline``).
    """

    after_seq: int
    offset: int


def _read_page(
    store: SessionStore,
    key: SessionKey,
    limit: int,
    start: _Position,
    hwm: int,
    replay_limit: int,
) -> tuple[list[Message], _Position | None]:
    """Up to ``limit`` messages after ``start`` within ``(start, hwm]``, and where the next
    page starts (None when no message is left in the snapshot)."""
    messages: list[Message] = []
    pos = start.after_seq
    skip = start.offset
    examined = 0
    size = 0
    while pos < hwm:
        # Ask for what the page still needs (one message per event at best, plus one for the
        # look-ahead) and double that while events turn out to be sparse in messages, so a
        # page costs O(events it spans) in O(log) reads, never a fixed 1,000-event slab.
        needed = limit - len(messages) + 1
        size = min(_READ_BATCH, max(needed, 2 * size), hwm - pos, replay_limit - examined + 1)
        batch = store.read_after(key, pos, size)
        if not batch:
            raise Corrupt(
                f"session {key}: events after seq {pos} are missing (expected up to {hwm})"
            )
        examined += len(batch)
        if examined > replay_limit:
            raise HistoryTooLarge(
                f"session {key}: this page would examine more than {replay_limit} events "
                f"(from seq {start.after_seq}); pass a larger bound, e.g. "
                f"session.history(limit, after, replay_limit={2 * replay_limit}) or "
                f"session.history_pages(limit, replay_limit={2 * replay_limit}), "
                "or ask for a smaller limit"
            )
        for event in batch:
            found = _messages(key, event)
            for index in range(skip, len(found)):
                if len(messages) == limit:
                    # The look-ahead found one more message: the next page starts right
                    # before it, so the events in between are not examined twice.
                    return messages, _Position(event.seq - 1, index)
                messages.append(found[index])
            skip = 0
            pos = event.seq
    return messages, None


def _messages(key: SessionKey, event: Event) -> list[Message]:
    """The conversation messages one committed event contributes (most contribute none)."""
    p = event.payload
    try:
        if event.type in _MESSAGE_TYPES:
            return [Message.model_validate(p["message"])]
        if event.type == "tool/result":
            output = p.get("output", "")
            return [tool_message(p["call_id"], p["name"], output, event.turn_id, p.get("blocks"))]
        if event.type == "migration/baseline":
            carried = p["state"].get("messages", ())
            if not isinstance(carried, list | tuple):
                raise TypeError("state.messages is not a list")
            return [Message.model_validate(m) for m in carried]
    except (KeyError, TypeError, AttributeError, ValidationError) as exc:
        raise Corrupt(
            f"session {key} seq {event.seq}: {event.type} does not hold valid messages "
            f"({type(exc).__name__}); the log was altered outside agentnb"
        ) from None
    return []


# --------------------------------------------------------------------------------------------
# Cursors: "h1." + base64url(canonical JSON) + "." + base64url(HMAC-SHA256 of "h1.<payload>")
# JSON fields: k = hash of the session key, a = after_seq, o = offset, h = high-water mark.


@dataclass(frozen=True, slots=True)
class _Cursor:
    key_hash: str
    position: _Position
    hwm: int


def _signing_key(secret: bytes) -> bytes:
    # Derived, so the store secret signs nothing else under the same key.
    return hmac.new(secret, b"agentnb/history-cursor/v1", hashlib.sha256).digest()


def _key_hash(key: SessionKey) -> str:
    parts = canonical_json([key.namespace, key.user_id, key.agent_id, key.session_id])
    return _b64(hashlib.sha256(parts.encode()).digest()[:_KEY_BYTES])


def _encode(signing_key: bytes, cursor: _Cursor) -> str:
    payload = canonical_json(
        {
            "k": cursor.key_hash,
            "a": cursor.position.after_seq,
            "o": cursor.position.offset,
            "h": cursor.hwm,
        }
    )
    signed = f"{_PREFIX}.{_b64(payload.encode())}"
    return f"{signed}.{_b64(_sign(signing_key, signed))}"


def _decode(signing_key: bytes, token: object) -> _Cursor:
    """Parse and verify a cursor; ``InvalidCursor`` for anything this store did not issue."""
    if not isinstance(token, str):
        raise InvalidCursor(f"a cursor is a string, got {type(token).__name__}; {_RESTART}")
    if len(token) > MAX_CURSOR_LENGTH:
        raise InvalidCursor(
            f"the cursor is {len(token)} characters, more than {MAX_CURSOR_LENGTH}; {_RESTART}"
        )
    match = _TOKEN.fullmatch(token)
    if match is None:
        raise InvalidCursor(f"the cursor is malformed; {_RESTART}")
    payload, sig = _unb64(match.group(1)), _unb64(match.group(2))
    if payload is None or sig is None or len(sig) != _SIG_BYTES:
        raise InvalidCursor(f"the cursor is malformed; {_RESTART}")
    signed = token[: match.end(1)]
    if not hmac.compare_digest(sig, _sign(signing_key, signed)):
        raise InvalidCursor(
            f"the cursor was altered or issued by another store (its signature does not "
            f"verify); {_RESTART}"
        )
    # Signed by this store, so the checks below only guard against our own older formats.
    try:
        data: Any = json.loads(payload)
    except (UnicodeDecodeError, ValueError):
        data = None
    if not (
        isinstance(data, dict)
        and data.keys() == _CURSOR_FIELDS
        and isinstance(data["k"], str)
        and all(_is_seq(data[f]) for f in ("a", "o", "h"))
    ):
        raise InvalidCursor(f"the cursor's content is malformed; {_RESTART}")
    after_seq, offset, hwm = data["a"], data["o"], data["h"]
    if after_seq + (1 if offset else 0) > hwm:
        raise ExpiredCursor(
            f"the cursor's position is past its snapshot (seq {hwm}); start over with after=None"
        )
    return _Cursor(data["k"], _Position(after_seq, offset), hwm)


def _sign(signing_key: bytes, signed: str) -> bytes:
    return hmac.new(signing_key, signed.encode("ascii"), hashlib.sha256).digest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes | None:
    try:
        data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        return None
    # Exactly one spelling per value: unused trailing bits must be zero.
    return data if _b64(data) == text else None


def _is_seq(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


# --------------------------------------------------------------------------------------------
# Argument checks (before any I/O)


def _check_limit(limit: object) -> None:
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_LIMIT:
        shown = repr(limit) if isinstance(limit, int) else f"a {type(limit).__name__}"
        raise InvalidLimit(
            f"limit must be an int in 1..{MAX_LIMIT}, got {shown}; "
            "follow next_cursor for more messages"
        )


def _check_replay_limit(replay_limit: object) -> None:
    if not isinstance(replay_limit, int) or isinstance(replay_limit, bool) or replay_limit < 1:
        raise InvalidInput(f"replay_limit must be a positive int, got {replay_limit!r}")
