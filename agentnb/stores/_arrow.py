"""Committed events as Arrow columns, for exporters (``SessionStore.read_arrow``).

Exporting a million events one Python object at a time costs more than writing the Parquet
files. This module keeps a read columnar: a backend fetches its rows straight into Arrow
(SQLite through ADBC), and ``verified`` checks what ``decode_raw`` checks row by row — the
checksum of every row, blobs, readable types — with the text to checksum built in Arrow and
one ``zlib.crc32`` call per row over its bytes. Only pyarrow is needed, imported on use.
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from agentnb.errors import Corrupt, UnknownRequiredEvent
from agentnb.events import check_readable
from agentnb.ids import SessionKey
from agentnb.stores._rows import RawEvent, stored_text

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["ENVELOPE", "from_raw", "verified"]

ENVELOPE = (
    "seq",
    "event_id",
    "type",
    "turn_id",
    "run_id",
    "required",
    "occurred_at",
    "schema_version",
    "payload",
)
"""Columns of ``read_arrow``'s table, in order (``payload`` is the canonical JSON text)."""


def schema() -> pa.Schema:
    import pyarrow as pa

    text = pa.string()
    return pa.schema(
        [
            ("seq", pa.int64()),
            ("event_id", text),
            ("type", text),
            ("turn_id", text),
            ("run_id", text),
            ("required", pa.bool_()),
            ("occurred_at", pa.timestamp("us", tz="UTC")),
            ("schema_version", pa.int32()),
            ("payload", text),
        ]
    )


def from_raw(events: Sequence[RawEvent]) -> pa.Table:
    """The table of events already read (and checked) as ``RawEvent`` rows."""
    import pyarrow as pa

    out = schema()
    if not events:
        return out.empty_table()
    # Transpose once (in C) instead of one comprehension per column.
    columns = list(zip(*events, strict=True))
    arrays = []
    for field, values in zip(out, columns, strict=True):
        if field.name == "occurred_at":
            arrays.append(pa.array(values, pa.int64()).cast(field.type))
        else:
            arrays.append(pa.array(values, field.type))
    return pa.Table.from_arrays(arrays, schema=out)


class Unreadable(Exception):
    """The fetched columns do not have the stored types: read the rows one by one instead
    (that path names the damaged row)."""


def verified(key: SessionKey, rows: pa.Table, get_blob: Callable[[str], bytes]) -> pa.Table:
    """``rows`` (the stored columns, ``_rows.COLUMNS``) checked and shaped like ``schema()``.

    Raises ``Corrupt`` naming the first row whose checksum fails, ``UnknownRequiredEvent``
    for a required type this reader lacks, and ``Unreadable`` when a column holds values of
    another type than the store writes.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    n = rows.num_rows
    if n == 0:
        return schema().empty_table()
    try:
        seq = _column(rows, "seq", pa.int64())
        event_id = _column(rows, "event_id", pa.string())
        type_ = _column(rows, "type", pa.string())
        turn_id = _column(rows, "turn_id", pa.string())
        run_id = _column(rows, "run_id", pa.string())
        required = _column(rows, "required", pa.int64())
        occurred_us = _column(rows, "occurred_us", pa.int64())
        version = _column(rows, "schema_version", pa.int64())
        payload = _column(rows, "payload", pa.string())
        blob = _column(rows, "blob", pa.string())
        crc = _column(rows, "crc", pa.int64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise Unreadable(str(exc)) from None
    if blob.null_count < n:
        payload = _with_blobs(key, seq, payload, blob, get_blob)
    as_text = pa.string()
    text = pc.binary_join_element_wise(
        seq.cast(as_text),
        event_id,
        type_,
        pc.fill_null(turn_id, "None"),
        pc.fill_null(run_id, "None"),
        required.cast(as_text),
        occurred_us.cast(as_text),
        version.cast(as_text),
        payload,
        "\x1f",
    )
    if text.null_count:  # a NOT NULL column read as NULL
        raise Unreadable("a required column is NULL")
    bad = _first_mismatch(text, crc.to_pylist())
    if bad is not None:
        raise Corrupt(
            f"session {key} seq {seq[bad].as_py()}: stored event is damaged (checksum "
            "mismatch); restore the store from a backup or export what precedes it"
        )
    flags = pc.not_equal(required, 0)
    _check_types(key, seq, type_, flags)
    return pa.Table.from_arrays(
        [
            seq,
            event_id,
            type_,
            turn_id,
            run_id,
            flags,
            occurred_us.cast(pa.timestamp("us", tz="UTC")),
            version.cast(pa.int32()),
            payload,
        ],
        schema=schema(),
    )


def _column(rows: pa.Table, name: str, kind: pa.DataType) -> pa.Array:
    column = rows.column(name).combine_chunks()
    # A column NULL in every row is typed int64 by the driver; any column may be all NULL.
    return column if column.type == kind else column.cast(kind)


def _with_blobs(
    key: SessionKey,
    seq: pa.Array,
    payload: pa.Array,
    blob: pa.Array,
    get_blob: Callable[[str], bytes],
) -> pa.Array:
    """``payload`` with the rows stored in blobs (``blob`` set) filled from the blob table."""
    import pyarrow as pa
    import pyarrow.compute as pc

    stored = pc.is_valid(blob)
    bodies = []
    for i in pc.indices_nonzero(stored).to_pylist():
        try:
            bodies.append(stored_text(payload[i].as_py(), blob[i].as_py(), get_blob))
        except Corrupt:
            raise
        except (UnicodeDecodeError, ValueError) as exc:
            raise Corrupt(
                f"session {key} seq {seq[i].as_py()}: stored event is damaged ({exc}); "
                "restore the store from a backup"
            ) from None
    filled = pc.replace_with_mask(payload, stored, pa.array(bodies, pa.string()))
    if filled.null_count:
        bad = pc.indices_nonzero(pc.is_null(filled))[0].as_py()
        raise Corrupt(
            f"session {key} seq {seq[bad].as_py()}: stored event is damaged (row has "
            "neither payload nor blob); restore the store from a backup"
        )
    return filled


def _first_mismatch(text: pa.Array, crcs: list[int]) -> int | None:
    """Index of the first row whose text does not have its stored CRC, else ``None``."""
    _, offsets_buf, data_buf = text.buffers()
    if data_buf is None:
        return None
    offsets = memoryview(offsets_buf).cast("i")[text.offset : text.offset + len(text) + 1]
    data = memoryview(data_buf)
    crc32 = zlib.crc32
    got = [crc32(data[a:b]) for a, b in itertools.pairwise(offsets)]
    if got == crcs:
        return None
    return next(i for i, (g, c) in enumerate(zip(got, crcs, strict=True)) if g != c)


def _check_types(key: SessionKey, seq: pa.Array, type_: pa.Array, required: pa.Array) -> None:
    """``check_readable`` once per distinct (type, required) pair, naming its first seq."""
    import pyarrow as pa
    import pyarrow.compute as pc

    pairs = pa.table({"type": type_, "required": required}).group_by(["type", "required"])
    for row in pairs.aggregate([]).to_pylist():
        try:
            check_readable(row["type"], row["required"], session=key, seq=0)
        except UnknownRequiredEvent:
            mask = pc.and_(pc.equal(type_, row["type"]), required)
            check_readable(row["type"], True, session=key, seq=seq.filter(mask)[0].as_py())
