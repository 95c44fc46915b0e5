"""Exporting committed events to analytics sinks (Parquet, DuckDB) at least once.

``ExportSink`` is the protocol, ``Exporter`` moves events from a store to a sink and keeps the
store's watermark, ``LiveExporter`` drains in the background for ``Runtime(export_to=...)``.
``ParquetSink`` and ``DuckDBSink`` need the ``export`` extra (``pip install -e ".[export]"``),
``OTelSink`` the ``otel`` extra; all are imported on first use, so importing this package
stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentnb.export.base import Exporter, ExportSink, SinkMismatch
from agentnb.export.live import LiveExporter

if TYPE_CHECKING:
    from agentnb.export.duckdb import DuckDBSink
    from agentnb.export.otel import OTelSink
    from agentnb.export.parquet import ParquetSink

__all__ = [
    "DuckDBSink",
    "ExportSink",
    "Exporter",
    "LiveExporter",
    "OTelSink",
    "ParquetSink",
    "SinkMismatch",
    "open_sink",
]


def __getattr__(name: str) -> Any:
    if name == "ParquetSink":
        from agentnb.export.parquet import ParquetSink

        return ParquetSink
    if name == "DuckDBSink":
        from agentnb.export.duckdb import DuckDBSink

        return DuckDBSink
    if name == "OTelSink":
        from agentnb.export.otel import OTelSink

        return OTelSink
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def open_sink(spec: str, *, name: str | None = None) -> ExportSink:
    """A sink from ``parquet:DIR`` (or a pyarrow URI after ``parquet:``), ``duckdb:FILE`` or
    ``otlp:URL`` (OTLP over HTTP to a collector's traces endpoint)."""
    from agentnb.errors import InvalidInput

    kind, _, target = spec.partition(":")
    if kind == "parquet" and target:
        from agentnb.export.parquet import ParquetSink

        return ParquetSink(target, name=name)
    if kind == "duckdb" and target:
        from agentnb.export.duckdb import DuckDBSink

        return DuckDBSink(target, name=name)
    if kind == "otlp" and target:
        from agentnb.export.otel import otlp_sink

        return otlp_sink(target, name=name)
    raise InvalidInput(
        f"unknown export destination {spec!r}; use parquet:DIR or duckdb:FILE (or otlp:URL)"
    )
