"""Turn rollups: the ``turn_rollup`` view of ``exporters/schema.sql`` computed as sinks commit.

``turns`` is a projection of ``turn_parts``, one row of aggregates per turn. Computed over the
events at query time that is a scan of every event; the sinks instead keep the rows as they
commit: the rollup of a batch's new events (``Rollups.of``), combined with the row committed
before for the same turn (``Rollups.combine``). Each "latest/first of" value of a row carries
the seq it was taken at, so two rows of one turn combine exactly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentnb.export.columns import connect, empty_table, require_export_deps
from agentnb.export.sql import schema_sql

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["COMBINE_SQL", "Rollups"]

COMBINE_SQL = """
SELECT
  any_value(namespace) AS namespace, any_value(user_id) AS user_id,
  any_value(agent_id) AS agent_id, any_value(session_id) AS session_id,
  turn_id,
  arg_min(input, input_seq) AS input, min(input_seq) AS input_seq,
  min(started_at) AS started_at,
  arg_max(status, status_seq) AS status, arg_max(status_at, status_seq) AS status_at,
  max(status_seq) AS status_seq,
  arg_max(error, error_seq) AS error, max(error_seq) AS error_seq,
  arg_max(output, output_seq) AS output, max(output_seq) AS output_seq,
  CAST(sum(runs) AS BIGINT) AS runs, CAST(sum(steps) AS BIGINT) AS steps,
  CAST(sum(model_calls) AS BIGINT) AS model_calls,
  CAST(sum(tool_calls) AS BIGINT) AS tool_calls,
  CAST(sum(tool_errors) AS BIGINT) AS tool_errors, CAST(sum(steers) AS BIGINT) AS steers,
  CAST(sum(interactions) AS BIGINT) AS interactions,
  CAST(sum(interrupts) AS BIGINT) AS interrupts,
  CAST(sum(input_tokens) AS BIGINT) AS input_tokens,
  CAST(sum(output_tokens) AS BIGINT) AS output_tokens,
  max(last_event_at) AS last_event_at
FROM parts
GROUP BY turn_id
"""
"""Rows of ``turn_rollup`` for the same turns (from several parts of the log) as one row per
turn: each "latest/first of" value is taken at the highest/lowest seq it carries."""


class Rollups:
    """An in-memory DuckDB holding the views of ``schema.sql``, over rows handed to it.

    Not thread-safe: each sink keeps one and uses it under its own lock.
    """

    def __init__(self) -> None:
        require_export_deps()
        self.con = connect()
        self.con.register("raw_events", empty_table())  # the views bind as they are made
        self.con.execute(schema_sql())
        self.con.unregister("raw_events")

    def of(self, rows: pa.Table) -> pa.Table:
        """``turn_rollup`` of flat event rows (the export columns): one row per turn."""
        self.con.register("raw_events", rows)
        try:
            return self.con.sql("SELECT * FROM turn_rollup").to_arrow_table()
        finally:
            self.con.unregister("raw_events")

    def combine(self, parts: list[pa.Table]) -> pa.Table:
        """Rollup rows of the same turns (from several parts of the log) as one row per turn."""
        import pyarrow as pa

        names = parts[-1].schema.names
        self.con.register("parts", pa.concat_tables([p.select(names) for p in parts]))
        try:
            return self.con.sql(COMBINE_SQL).to_arrow_table()
        finally:
            self.con.unregister("parts")
