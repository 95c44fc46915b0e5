"""The flat row every sink writes: one row per committed event, typed columns plus the payload.

Columns (the same in Parquet files, the DuckDB table and dataframes from a live store):

* envelope: ``event_id``, ``seq``, ``occurred_at`` (TIMESTAMPTZ, UTC), ``type``, ``turn_id``,
  ``run_id``, ``required``, ``schema_version``;
* session key: ``namespace``, ``user_id``, ``agent_id``, ``session_id`` (``session_id`` is
  OpenTelemetry's ``gen_ai.conversation.id``);
* ``event_date``: the UTC date of ``occurred_at`` (the Hive partition of a Parquet export);
* payload fields, flattened where an analyst filters or aggregates on them (NULL where the
  event type has no such field): ``command_id``, ``reason``, ``status``, ``error``,
  ``step_id``, ``iteration``, ``model_call_id``, ``model``, ``attempt``, ``input_tokens``,
  ``output_tokens``, ``latency_ms``, ``finish_reason``, ``delay_s``, ``call_id``,
  ``tool_name`` (``name`` of tool/action events), ``arguments`` (JSON text), ``output``,
  ``duration_ms``, ``synthetic``, ``reconciled``, ``decision``, ``idempotent``,
  ``request_id``, ``kind``, ``prompt``, ``answer`` (JSON text), ``input_id``, ``input_ids``,
  ``text`` (input text, ``turn/start`` input, or the message text), ``message_id``, ``role``,
  ``inbox_seq``;
* ``payload``: the whole payload as canonical JSON text (nothing is lost by flattening).

Flattening is one SQL statement (``FLATTEN_SQL``) run by an in-memory DuckDB over an Arrow
batch, so every sink and every reader derives the columns the same way.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agentnb.events import Event
from agentnb.ids import SessionKey
from agentnb.stores.base import RawEvent

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa

__all__ = [
    "COLUMNS",
    "FLATTEN_SQL",
    "Batch",
    "connect",
    "create_table_sql",
    "flatten",
    "require_export_deps",
    "to_arrow",
]

Batch = Mapping[SessionKey, Sequence[Event | RawEvent]]
"""Events grouped by session: ``Event`` objects, or ``RawEvent`` rows as exporters read them."""
"""What a sink accepts: committed events grouped by session, each group in seq order."""

_INSTALL = 'pip install "agentnb[export]"'


def require_export_deps() -> None:
    """Raise a clear ``ImportError`` when the ``export`` extra is not installed."""
    try:
        import duckdb  # noqa: F401
        import pyarrow  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            f"agentnb export and analysis need pyarrow and duckdb: {_INSTALL}"
        ) from exc


# (name, DuckDB type) in table order. ``event_date`` is a Hive partition in Parquet exports.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("event_id", "VARCHAR"),
    ("namespace", "VARCHAR"),
    ("user_id", "VARCHAR"),
    ("agent_id", "VARCHAR"),
    ("session_id", "VARCHAR"),
    ("seq", "BIGINT"),
    ("occurred_at", "TIMESTAMPTZ"),
    ("event_date", "DATE"),
    ("type", "VARCHAR"),
    ("turn_id", "VARCHAR"),
    ("run_id", "VARCHAR"),
    ("required", "BOOLEAN"),
    ("schema_version", "INTEGER"),
    ("command_id", "VARCHAR"),
    ("reason", "VARCHAR"),
    ("status", "VARCHAR"),
    ("error", "VARCHAR"),
    ("step_id", "VARCHAR"),
    ("iteration", "BIGINT"),
    ("model_call_id", "VARCHAR"),
    ("model", "VARCHAR"),
    ("attempt", "BIGINT"),
    ("input_tokens", "BIGINT"),
    ("output_tokens", "BIGINT"),
    ("latency_ms", "DOUBLE"),
    ("finish_reason", "VARCHAR"),
    ("delay_s", "DOUBLE"),
    ("call_id", "VARCHAR"),
    ("tool_name", "VARCHAR"),
    ("arguments", "VARCHAR"),
    ("output", "VARCHAR"),
    ("duration_ms", "DOUBLE"),
    ("synthetic", "BOOLEAN"),
    ("reconciled", "BOOLEAN"),
    ("decision", "VARCHAR"),
    ("idempotent", "BOOLEAN"),
    ("request_id", "VARCHAR"),
    ("kind", "VARCHAR"),
    ("prompt", "VARCHAR"),
    ("answer", "VARCHAR"),
    ("input_id", "VARCHAR"),
    ("input_ids", "VARCHAR[]"),
    ("text", "VARCHAR"),
    ("message_id", "VARCHAR"),
    ("role", "VARCHAR"),
    ("inbox_seq", "BIGINT"),
    ("payload", "VARCHAR"),
)

# json_transform is lenient: a field of another JSON type becomes NULL, never an error, so
# application events (``vendor/name``) with fields of the same names cannot break an export.
_PAYLOAD_SHAPE = {
    "command_id": "VARCHAR",
    "reason": "VARCHAR",
    "status": "VARCHAR",
    "error": "VARCHAR",
    "step_id": "VARCHAR",
    "iteration": "BIGINT",
    "model_call_id": "VARCHAR",
    "model": "VARCHAR",
    "attempt": "BIGINT",
    "input_tokens": "BIGINT",
    "output_tokens": "BIGINT",
    "latency_ms": "DOUBLE",
    "finish_reason": "VARCHAR",
    "delay_s": "DOUBLE",
    "call_id": "VARCHAR",
    "name": "VARCHAR",
    "tool_name": "VARCHAR",
    "arguments": "JSON",
    "output": "VARCHAR",
    "duration_ms": "DOUBLE",
    "synthetic": "BOOLEAN",
    "reconciled": "BOOLEAN",
    "decision": "VARCHAR",
    "idempotent": "BOOLEAN",
    "request_id": "VARCHAR",
    "kind": "VARCHAR",
    "prompt": "VARCHAR",
    "answer": "JSON",
    "input_id": "VARCHAR",
    "input_ids": ["VARCHAR"],
    "text": "VARCHAR",
    "input": "VARCHAR",
    "message": {"id": "VARCHAR", "role": "VARCHAR", "text": "VARCHAR"},
    "inbox_seq": "BIGINT",
}

_DERIVED = {
    "event_date": "CAST(b.occurred_at AT TIME ZONE 'UTC' AS DATE)",
    "tool_name": (
        "coalesce(p.tool_name, CASE WHEN b.type LIKE 'tool/%' OR b.type LIKE 'action/%' "
        "THEN p.name END)"
    ),
    "arguments": "CAST(p.arguments AS VARCHAR)",
    "answer": "CAST(p.answer AS VARCHAR)",
    "text": "coalesce(p.text, p.input, p.message.text)",
    "message_id": "p.message.id",
    "role": "p.message.role",
}
_ENVELOPE = (
    "event_id",
    "namespace",
    "user_id",
    "agent_id",
    "session_id",
    "seq",
    "occurred_at",
    "type",
    "turn_id",
    "run_id",
    "required",
    "schema_version",
    "payload",
)


def _select_list() -> str:
    parts = []
    for name, _ in COLUMNS:
        if name in _DERIVED:
            parts.append(f"{_DERIVED[name]} AS {name}")
        elif name in _ENVELOPE:
            parts.append(f"b.{name}")
        else:
            parts.append(f"p.{name} AS {name}")
    return ",\n  ".join(parts)


FLATTEN_SQL = (
    f"SELECT\n  {_select_list()}\nFROM (SELECT *, json_transform(payload, "
    f"'{json.dumps(_PAYLOAD_SHAPE, separators=(',', ':'))}') AS p FROM batch) AS b"
)
"""Turns the Arrow relation ``batch`` (``to_arrow``) into the table's columns."""


def create_table_sql(table: str) -> str:
    """DDL of the raw table keyed by ``event_id`` (used by the DuckDB sink)."""
    cols = ",\n  ".join(
        f"{name} {kind}{' PRIMARY KEY' if name == 'event_id' else ''}" for name, kind in COLUMNS
    )
    return f"CREATE TABLE IF NOT EXISTS {table} (\n  {cols}\n)"


def _envelope_schema() -> pa.Schema:
    import pyarrow as pa

    text = pa.string()
    return pa.schema(
        [
            ("event_id", text),
            ("namespace", text),
            ("user_id", text),
            ("agent_id", text),
            ("session_id", text),
            ("seq", pa.int64()),
            ("occurred_at", pa.timestamp("us", tz="UTC")),
            ("type", text),
            ("turn_id", text),
            ("run_id", text),
            ("required", pa.bool_()),
            ("schema_version", pa.int32()),
            ("payload", text),
        ]
    )


def to_arrow(batch: Batch) -> pa.Table:
    """The envelope columns and payload JSON of ``batch`` as an Arrow table (seq order)."""
    require_export_deps()
    import pyarrow as pa

    cols: dict[str, list[Any]] = {name: [] for name in _ENVELOPE}
    for key, events in batch.items():
        n = len(events)
        cols["namespace"] += [key.namespace] * n
        cols["user_id"] += [key.user_id] * n
        cols["agent_id"] += [key.agent_id] * n
        cols["session_id"] += [key.session_id] * n
        raw = [e if isinstance(e, RawEvent) else RawEvent.of(e) for e in events]
        if not raw:
            continue
        # Transpose the rows once (in C) instead of one comprehension per column.
        seq, event_id, type_, turn_id, run_id, required, occurred, version, payload = zip(
            *raw, strict=True
        )
        cols["event_id"] += event_id
        cols["seq"] += seq
        cols["occurred_at"] += occurred
        cols["type"] += type_
        cols["turn_id"] += turn_id
        cols["run_id"] += run_id
        cols["required"] += required
        cols["schema_version"] += version
        cols["payload"] += payload
    schema = _envelope_schema()
    arrays = []
    for field in schema:
        if field.name == "occurred_at":
            arrays.append(pa.array(cols["occurred_at"], pa.int64()).cast(field.type))
        else:
            arrays.append(pa.array(cols[field.name], field.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def connect(database: str = ":memory:", *, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection that shows times in UTC (so dataframes are UTC-aware)."""
    require_export_deps()
    import duckdb

    con = duckdb.connect(database, read_only=read_only)
    con.execute("SET TimeZone = 'UTC'")
    return con


def flatten(con: duckdb.DuckDBPyConnection, envelope: pa.Table) -> pa.Table:
    """Apply ``FLATTEN_SQL`` to an envelope table (from ``to_arrow``)."""
    con.register("batch", envelope)
    try:
        return con.sql(FLATTEN_SQL).to_arrow_table()
    finally:
        con.unregister("batch")
