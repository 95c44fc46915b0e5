"""Row encoding shared by the SQL backends: one event <-> one row with a checksum."""

from __future__ import annotations

import hashlib
import hmac
import zlib
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any, NamedTuple

import orjson

from agentnb.errors import Corrupt
from agentnb.events import (
    BLOB_THRESHOLD,
    Event,
    check_readable,
    decode_payload,
)
from agentnb.ids import SessionKey


class RawEvent(NamedTuple):
    """A committed event as stored: the envelope plus the payload's canonical JSON text.

    Exporters read these (``SessionStore.read_raw``) to skip decoding payloads they only
    copy; ``occurred_at`` and ``payload`` decode on demand.
    """

    seq: int
    event_id: str
    type: str
    turn_id: str | None
    run_id: str | None
    required: bool
    occurred_us: int
    """``occurred_at`` as microseconds since the epoch (UTC)."""
    schema_version: int
    payload_json: str

    @classmethod
    def of(cls, event: Event) -> RawEvent:
        return cls(
            event.seq,
            event.event_id,
            event.type,
            event.turn_id,
            event.run_id,
            event.required,
            round(event.occurred_at.timestamp() * 1_000_000),
            event.schema_version,
            event.payload_json,
        )

    @property
    def occurred_at(self) -> datetime:
        return datetime.fromtimestamp(self.occurred_us / 1_000_000, UTC)

    @property
    def payload(self) -> Any:
        return decode_payload(self.payload_json)

    def to_event(self) -> Event:
        """The decoded ``Event``, carrying this row's payload text as its canonical JSON."""
        return Event.stored(
            self.schema_version,
            self.event_id,
            self.seq,
            self.occurred_at,
            self.type,
            self.turn_id,
            self.run_id,
            self.required,
            self.payload,
            self.payload_json,
        )


COLUMNS = (
    "seq, event_id, type, turn_id, run_id, required, occurred_us, schema_version, "
    "payload, blob, crc"
)


class Row(NamedTuple):
    seq: int
    event_id: str
    type: str
    turn_id: str | None
    run_id: str | None
    required: int
    occurred_us: int
    schema_version: int
    payload: str | None
    blob: str | None
    crc: int


def _text(
    seq: int,
    event_id: str,
    type_: str,
    turn_id: str | None,
    run_id: str | None,
    required: int,
    occurred_us: int,
    schema_version: int,
    body: str,
) -> bytes:
    """What a row's checksum (and the batch digest) covers."""
    return (
        f"{seq}\x1f{event_id}\x1f{type_}\x1f{turn_id}\x1f{run_id}\x1f{required}"
        f"\x1f{occurred_us}\x1f{schema_version}\x1f{body}"
    ).encode()


def _damaged(key: SessionKey, seq: object, exc: Exception) -> Corrupt:
    return Corrupt(
        f"session {key} seq {seq}: stored event is damaged ({exc}); "
        "restore the store from a backup or export what precedes it"
    )


def encode(event: Event, seq: int, put_blob: Callable[[bytes], str], digest: Any = None) -> Row:
    """The row for ``event`` at ``seq``; large payloads go to blobs (``stored_body``).

    With ``digest`` (a hashlib object) the row's checksummed text is also fed to it: the
    batch digest then costs no second encoding of the events.
    """
    body = event.payload_json
    occurred_us = round(event.occurred_at.timestamp() * 1_000_000)
    required = int(event.required)
    text = _text(
        seq,
        event.event_id,
        event.type,
        event.turn_id,
        event.run_id,
        required,
        occurred_us,
        event.schema_version,
        body,
    )
    crc = zlib.crc32(text)
    if digest is not None:
        digest.update(text)
        digest.update(b"\x1e")
    payload: str | None = body
    blob: str | None = None
    if len(body) > BLOB_THRESHOLD:
        payload, blob = stored_body(body, event.payload, put_blob)
    return Row(
        seq,
        event.event_id,
        event.type,
        event.turn_id,
        event.run_id,
        required,
        occurred_us,
        event.schema_version,
        payload,
        blob,
        crc,
    )


def decode(key: SessionKey, row: tuple[Any, ...], get_blob: Callable[[str], bytes]) -> Event:
    """The event stored in ``row``; ``Corrupt`` (naming session and seq) if it is damaged."""
    seq, event_id, type_, turn_id, run_id, required, occurred_us, version, body = decode_raw(
        key, row, get_blob
    )
    try:
        payload = decode_payload(body)
    except Exception as exc:  # noqa: BLE001 - any decode failure means the row is damaged
        raise _damaged(key, seq, exc) from None
    return Event.stored(
        version,
        event_id,
        seq,
        datetime.fromtimestamp(occurred_us / 1_000_000, UTC),
        type_,
        turn_id,
        run_id,
        required,
        payload,
        body,
    )


# -- payloads stored in blobs -----------------------------------------------------------------
#
# A payload over BLOB_THRESHOLD is stored as a skeleton and parts. Each JSON string of
# PART_MIN characters or more in it is a part: its JSON text (quotes and escapes included)
# is a content-addressed blob, and the skeleton holds HOLE where it stood. The same text in
# many events of a session (a task's input in inbox/accepted, turn/start, input/received,
# message/user and request/prepared) is then one blob. The row keeps the skeleton in
# ``payload`` (or, still over the threshold, in a blob of its own: ``payload`` NULL and the
# skeleton's digest first) and the digests, space-separated in the order of the holes, in
# ``blob``. A row written before parts existed (``payload`` NULL, one digest) reads the same
# way: a skeleton with no holes. The checksum and the digests cover the payload's canonical
# text, whichever way it is stored.

PART_MIN = 4096
"""A JSON string at least this long, in a payload stored in blobs, is a blob of its own."""
HOLE = "\x01"
"""Where a part stood in a skeleton: canonical JSON escapes every control character, so it
never holds this one."""


def long_strings(value: Any) -> Iterator[str]:
    """The strings of ``value`` of ``PART_MIN`` characters or more, in the order its
    canonical JSON (sorted keys) writes them."""
    if isinstance(value, str):
        if len(value) >= PART_MIN:
            yield value
    elif isinstance(value, dict):
        for k in sorted(value):
            yield from long_strings(value[k])
    elif isinstance(value, list | tuple):
        for v in value:
            yield from long_strings(v)


def split_parts(
    body: str, payload: Any, part: Callable[[bytes], str | None]
) -> tuple[str, list[str]]:
    """``body`` (the JSON text of ``payload``) with a ``HOLE`` for each long text that
    ``part`` takes (given its JSON text, it returns the blob's digest, or None to leave the
    text where it is), and those digests in the order of the holes."""
    pieces: list[str] = []
    digests: list[str] = []
    pos = 0
    for text in long_strings(payload):
        literal = orjson.dumps(text).decode()
        # Found where the encoder wrote it; a text spelled another way stays in the skeleton.
        # Either way the skeleton with its holes filled is exactly ``body``.
        at = body.find(literal, pos)
        if at < 0:
            continue
        digest = part(literal.encode())
        if digest is None:
            continue
        pieces += (body[pos:at], HOLE)
        digests.append(digest)
        pos = at + len(literal)
    pieces.append(body[pos:])
    return "".join(pieces), digests


def stored_body(
    body: str, payload: Any, put_blob: Callable[[bytes], str]
) -> tuple[str | None, str]:
    """The ``payload`` and ``blob`` columns of a row whose canonical text ``body`` is over
    ``BLOB_THRESHOLD``; ``put_blob`` stores each blob and returns its digest."""
    skeleton, digests = split_parts(body, payload, put_blob)
    if len(skeleton) > BLOB_THRESHOLD:
        return None, " ".join([put_blob(skeleton.encode()), *digests])
    return skeleton, " ".join(digests)


def blob_digests(blob: str | None) -> list[str]:
    """The digests a row's ``blob`` column names (none for an inline row)."""
    return blob.split(" ") if blob else []


def stored_text(payload: str | None, blob: str | None, get_blob: Callable[[str], bytes]) -> str:
    """A row's payload text from its ``payload`` and ``blob`` columns (``ValueError`` when
    they do not fit together)."""
    digests = blob_digests(blob)
    if payload is None:
        if not digests:
            raise ValueError("row has neither payload nor blob")
        payload = get_blob(digests.pop(0)).decode()
    if not digests:
        return payload
    pieces = payload.split(HOLE)
    if len(pieces) != len(digests) + 1:
        raise ValueError(f"row has {len(pieces) - 1} holes for {len(digests)} blobs")
    out = [pieces[0]]
    for digest, after in zip(digests, pieces[1:], strict=True):
        out += (get_blob(digest).decode(), after)
    return "".join(out)


FINGERPRINT_INLINE = 256
"""A command's fingerprint longer than this is stored as its SHA-256 (``stored_fingerprint``)."""


def stored_fingerprint(fingerprint: str) -> str:
    """What the inbox keeps of a command's fingerprint: itself when short, else
    ``sha256:<hex>``, so a large task's text is not kept beside its blob once more. Stored
    values map to themselves, and a fingerprint kept whole by an older agentnb compares
    equal through this function."""
    if len(fingerprint) <= FINGERPRINT_INLINE:
        return fingerprint
    return "sha256:" + hashlib.sha256(fingerprint.encode()).hexdigest()


def same_fingerprint(stored: str | None, fingerprint: str) -> bool:
    """Whether a re-sent command (its ``stored_fingerprint``) repeats the stored one."""
    return stored is not None and stored_fingerprint(stored) == fingerprint


def blob_digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check_blob(digest: str, data: bytes | None) -> bytes:
    if data is None:
        raise Corrupt(f"blob {digest} is missing from the store")
    if blob_digest(data) != digest:
        raise Corrupt(f"blob {digest} does not match its digest")
    return data


def decode_raw(
    key: SessionKey, row: tuple[Any, ...], get_blob: Callable[[str], bytes]
) -> tuple[Any, ...]:
    """``row`` as the fields of a ``RawEvent`` (payload left as text), checksum verified."""
    try:
        (
            seq,
            event_id,
            type_,
            turn_id,
            run_id,
            required,
            occurred_us,
            version,
            payload,
            blob,
            crc,
        ) = row
    except (TypeError, ValueError) as exc:
        raise _damaged(key, row[0] if row else "?", exc) from None
    try:
        body = stored_text(payload, blob, get_blob)
        if (
            zlib.crc32(
                _text(seq, event_id, type_, turn_id, run_id, required, occurred_us, version, body)
            )
            != crc
        ):
            raise ValueError("checksum mismatch")
    except Corrupt:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure here means the row is damaged
        raise _damaged(key, seq, exc) from None
    check_readable(type_, bool(required), session=key, seq=seq)
    return (seq, event_id, type_, turn_id, run_id, bool(required), occurred_us, version, body)


# -- snapshot seals ----------------------------------------------------------------------------

SNAPSHOT_SEAL = b"agentnb-snapshot/1\n"
"""What a sealed snapshot starts with; a 32-byte HMAC follows, then the data."""
_MAC = 32


def event_anchor(events: list[Any]) -> str:
    """The digest of the committed event a snapshot is bound to (``""`` for seq 0).

    ``events`` holds that one ``RawEvent`` (or none): every field of its envelope and its
    payload text, so a log rewritten at that seq no longer matches.
    """
    if not events:
        return ""
    text = "\x1f".join("" if field is None else str(field) for field in events[0])
    return hashlib.sha256(text.encode()).hexdigest()


def _snapshot_mac(
    secret: bytes, key: SessionKey, name: str, seq: int, anchor: str, data: bytes
) -> bytes:
    parts = (key.namespace, key.user_id, key.agent_id, key.session_id, name, str(seq), anchor)
    head = "\x1f".join(parts).encode()
    return hmac.new(secret, head + b"\x1e" + data, hashlib.sha256).digest()


def seal_snapshot(
    secret: bytes, key: SessionKey, name: str, seq: int, anchor: str, data: bytes
) -> bytes:
    """``data`` as stored: the seal, an HMAC over session, name, seq, anchor and data."""
    return SNAPSHOT_SEAL + _snapshot_mac(secret, key, name, seq, anchor, data) + data


def open_snapshot(
    secret: bytes, key: SessionKey, name: str, seq: int, anchor: str, stored: bytes
) -> bytes | None:
    """The data of a sealed snapshot, or None when its seal does not match (altered,
    moved from another session or name, or bound to an event the log no longer has)."""
    if not stored.startswith(SNAPSHOT_SEAL):
        return None
    mac = stored[len(SNAPSHOT_SEAL) : len(SNAPSHOT_SEAL) + _MAC]
    data = stored[len(SNAPSHOT_SEAL) + _MAC :]
    if not hmac.compare_digest(mac, _snapshot_mac(secret, key, name, seq, anchor, data)):
        return None
    return data
