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
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, overload

from agentnb.errors import install_hint
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
    "RawColumns",
    "connect",
    "create_table_sql",
    "empty_table",
    "flatten",
    "require_export_deps",
    "to_arrow",
]

Batch = Mapping[SessionKey, Sequence[Event | RawEvent]]
"""What a sink accepts: committed events grouped by session, each group in seq order.

A group is a sequence of ``Event`` or ``RawEvent``; the exporter passes ``RawColumns`` (a
sequence of ``RawEvent`` backed by Arrow columns)."""

_INSTALL = install_hint("export")


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


def empty_table() -> pa.Table:
    """A table of no rows with ``COLUMNS`` and their types."""
    con = connect()
    try:
        cols = ", ".join(f"CAST(NULL AS {kind}) AS {name}" for name, kind in COLUMNS)
        return con.sql(f"SELECT {cols} LIMIT 0").to_arrow_table()
    finally:
        con.close()


def create_table_sql(table: str) -> str:
    """DDL of the raw table keyed by ``event_id`` (used by the DuckDB sink)."""
    cols = ",\n  ".join(
        f"{name} {kind}{' PRIMARY KEY' if name == 'event_id' else ''}" for name, kind in COLUMNS
    )
    return f"CREATE TABLE IF NOT EXISTS {table} (\n  {cols}\n)"


class RawColumns(Sequence[RawEvent]):
    """Committed events of one session held as Arrow columns (``SessionStore.read_arrow``).

    What the exporter hands sinks: a read-only sequence of ``RawEvent`` built on demand, so
    a sink written against events works unchanged, while the built-in sinks take ``table``
    as it is and never make a Python object per event.
    """

    __slots__ = ("table",)

    def __init__(self, table: pa.Table) -> None:
        self.table = table

    def __len__(self) -> int:
        return int(self.table.num_rows)

    @overload
    def __getitem__(self, index: int) -> RawEvent: ...
    @overload
    def __getitem__(self, index: slice) -> RawColumns: ...
    def __getitem__(self, index: int | slice) -> RawEvent | RawColumns:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step != 1:
                return RawColumns(self.table.take(list(range(start, stop, step))))
            return RawColumns(self.table.slice(start, stop - start))
        n = len(self)
        if not -n <= index < n:
            raise IndexError(index)
        return next(self._rows(self.table.slice(index % n, 1)))

    def __iter__(self) -> Iterator[RawEvent]:
        return self._rows(self.table)

    @staticmethod
    def _rows(table: pa.Table) -> Iterator[RawEvent]:
        import pyarrow as pa

        micros = table.column("occurred_at").cast(pa.int64())
        for batch in table.set_column(6, "occurred_at", micros).to_batches():
            for row in zip(*(c.to_pylist() for c in batch.columns), strict=True):
                yield RawEvent(*row)

    def is_run(self) -> bool:
        """Whether the seqs increase by one from the first to the last."""
        import pyarrow.compute as pc

        seq = self.table.column("seq")
        n = len(seq)
        if n < 2:
            return True
        steps = pc.subtract(seq.slice(1), seq.slice(0, n - 1))
        return bool(pc.all(pc.equal(steps, 1)).as_py())

    @staticmethod
    def table_of(events: Sequence[Event]) -> pa.Table:
        """Committed events held in memory as the table ``read_arrow`` would read for them
        (their payloads' canonical text, which a frozen payload keeps: nothing re-encoded)."""
        from agentnb.stores._arrow import from_raw

        return from_raw([RawEvent.of(e) for e in events])

    @classmethod
    def concat(cls, parts: Sequence[pa.Table]) -> RawColumns:
        """The tables of ``read_arrow`` pages as one (no pages: no events)."""
        import pyarrow as pa

        from agentnb.stores._arrow import schema

        if not parts:
            return cls(schema().empty_table())
        return cls(parts[0] if len(parts) == 1 else pa.concat_tables(parts))


def to_arrow(batch: Batch) -> pa.Table:
    """The session key, envelope columns and payload JSON of ``batch`` as one Arrow table."""
    require_export_deps()
    import pyarrow as pa

    from agentnb.stores._arrow import from_raw

    tables = []
    for key, events in batch.items():
        if isinstance(events, RawColumns):
            table = events.table
        else:
            table = from_raw([e if isinstance(e, RawEvent) else RawEvent.of(e) for e in events])
        n = table.num_rows
        if not n:
            continue
        for i, name in enumerate(("namespace", "user_id", "agent_id", "session_id")):
            value = getattr(key, name)
            table = table.add_column(i, name, pa.repeat(pa.scalar(value, pa.string()), n))
        tables.append(table)
    if not tables:
        return _envelope_schema().empty_table()
    return pa.concat_tables(tables).select(list(_ENVELOPE))


def _envelope_schema() -> pa.Schema:
    import pyarrow as pa

    from agentnb.stores._arrow import schema

    keys = [pa.field(k, pa.string()) for k in ("namespace", "user_id", "agent_id", "session_id")]
    fields = [*keys, *schema()]
    return pa.schema(sorted(fields, key=lambda f: _ENVELOPE.index(f.name)))


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
