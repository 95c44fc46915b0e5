"""Row encoding shared by the SQL backends: one event <-> one row with a checksum."""

from __future__ import annotations

import hashlib
import json
import math
import zlib
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, NamedTuple

from agentnb.errors import Corrupt
from agentnb.events import BLOB_THRESHOLD, Event, FrozenDict, canonical_json, check_readable
from agentnb.ids import SessionKey

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


def _crc(
    seq: int,
    event_id: str,
    type_: str,
    turn_id: str | None,
    run_id: str | None,
    required: int,
    occurred_us: int,
    schema_version: int,
    body: str,
) -> int:
    text = (
        f"{seq}\x1f{event_id}\x1f{type_}\x1f{turn_id}\x1f{run_id}\x1f{required}"
        f"\x1f{occurred_us}\x1f{schema_version}\x1f{body}"
    )
    return zlib.crc32(text.encode())


def encode(event: Event, seq: int, put_blob: Callable[[bytes], str], digest: Any = None) -> Row:
    """The row for ``event`` at ``seq``; large payloads go to a blob (by digest).

    With ``digest`` (a hashlib object) the row's checksummed text is also fed to it: the
    batch digest then costs no second encoding of the events.
    """
    body = canonical_json(event.payload)
    occurred_us = round(event.occurred_at.timestamp() * 1_000_000)
    required = int(event.required)
    text = (
        f"{seq}\x1f{event.event_id}\x1f{event.type}\x1f{event.turn_id}\x1f{event.run_id}"
        f"\x1f{required}\x1f{occurred_us}\x1f{event.schema_version}\x1f{body}"
    ).encode()
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


def _tuples(items: list[Any]) -> tuple[Any, ...]:
    return tuple([_tuples(v) if type(v) is list else v for v in items])


def _frozen_object(obj: dict[str, Any]) -> FrozenDict:
    # Called innermost first, so nested objects are frozen already; only arrays are left.
    return FrozenDict({k: _tuples(v) if type(v) is list else v for k, v in obj.items()})


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text} is out of range")
    return value


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")


# Freezes while parsing (what ``freeze_json(json.loads(...))`` does, in one pass).
_DECODER = json.JSONDecoder(
    object_hook=_frozen_object, parse_float=_finite, parse_constant=_no_constant
)


def decode(key: SessionKey, row: tuple[object, ...], get_blob: Callable[[str], bytes]) -> Event:
    """The event stored in ``row``; ``Corrupt`` (naming session and seq) if it is damaged."""
    try:
        r = Row(*row)  # type: ignore[arg-type]
        if r.payload is not None:
            body = r.payload
        elif r.blob is not None:
            body = get_blob(r.blob).decode()
        else:
            raise ValueError("row has neither payload nor blob")
        if (
            _crc(
                r.seq,
                r.event_id,
                r.type,
                r.turn_id,
                r.run_id,
                r.required,
                r.occurred_us,
                r.schema_version,
                body,
            )
            != r.crc
        ):
            raise ValueError("checksum mismatch")
        payload = _DECODER.decode(body)
        if not isinstance(payload, dict):
            raise ValueError("payload is not a JSON object")
    except Corrupt:
        raise
    except Exception as exc:  # noqa: BLE001 - any decode failure means the row is damaged
        seq = row[0] if row else "?"
        raise Corrupt(
            f"session {key} seq {seq}: stored event is damaged ({exc}); "
            "restore the store from a backup or export what precedes it"
        ) from None
    check_readable(r.type, bool(r.required), session=key, seq=r.seq)
    return Event.model_construct(
        schema_version=r.schema_version,
        event_id=r.event_id,
        seq=r.seq,
        occurred_at=datetime.fromtimestamp(r.occurred_us / 1_000_000, UTC),
        type=r.type,
        turn_id=r.turn_id,
        run_id=r.run_id,
        required=bool(r.required),
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
    seq, event_id, type_, turn_id, run_id, required, occurred_us, version, payload, blob, crc = row
    try:
        body = payload if payload is not None else get_blob(blob).decode()
        if _crc(seq, event_id, type_, turn_id, run_id, required, occurred_us, version, body) != crc:
            raise ValueError("checksum mismatch")
    except Corrupt:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure here means the row is damaged
        raise Corrupt(
            f"session {key} seq {seq}: stored event is damaged ({exc}); "
            "restore the store from a backup or export what precedes it"
        ) from None
    check_readable(type_, bool(required), session=key, seq=seq)
    return (seq, event_id, type_, turn_id, run_id, bool(required), occurred_us, version, body)
