"""Row encoding shared by the SQL backends: one event <-> one row with a checksum."""

from __future__ import annotations

import hashlib
import hmac
import zlib
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, NamedTuple

from agentnb.errors import Corrupt
from agentnb.events import (
    BLOB_THRESHOLD,
    Event,
    canonical_json,
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
            canonical_json(event.payload),
        )

    @property
    def occurred_at(self) -> datetime:
        return datetime.fromtimestamp(self.occurred_us / 1_000_000, UTC)

    @property
    def payload(self) -> Any:
        return decode_payload(self.payload_json)

    def to_event(self) -> Event:
        """The decoded ``Event``."""
        return Event.model_construct(
            schema_version=self.schema_version,
            event_id=self.event_id,
            seq=self.seq,
            occurred_at=self.occurred_at,
            type=self.type,
            turn_id=self.turn_id,
            run_id=self.run_id,
            required=self.required,
            payload=self.payload,
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
    """The row for ``event`` at ``seq``; large payloads go to a blob (by digest).

    With ``digest`` (a hashlib object) the row's checksummed text is also fed to it: the
    batch digest then costs no second encoding of the events.
    """
    body = canonical_json(event.payload)
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
        blob = put_blob(body.encode())
        payload = None
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
    return Event.model_construct(
        schema_version=version,
        event_id=event_id,
        seq=seq,
        occurred_at=datetime.fromtimestamp(occurred_us / 1_000_000, UTC),
        type=type_,
        turn_id=turn_id,
        run_id=run_id,
        required=required,
        payload=payload,
    )


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
        if payload is not None:
            body = payload
        elif blob is not None:
            body = get_blob(blob).decode()
        else:
            raise ValueError("row has neither payload nor blob")
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
