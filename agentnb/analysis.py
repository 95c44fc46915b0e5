"""Analysis: pandas dataframes and charts of what agents did, from an export or a live store.

Every function takes a ``source``:

* a Parquet export: its folder (or ``"parquet:DIR"``, a pyarrow URI, or a ``ParquetSink``);
  exactly the files the manifest lists are read, so a concurrent export never shows through;
* a DuckDB export: its file (or ``"duckdb:FILE"``, or a ``DuckDBSink``); opened read-only for
  the length of one call, so the exporting process is never locked out for long;
* a live store: a ``SessionStore``, a store URL (``sqlite:///...``), an SQLite store file, a
  ``SessionLog`` or a ``Session`` (just that session). Nothing is exported or written.

Reading never creates anything: a store URL or export path that names nothing raises
``InvalidInput`` (no folder, file or store appears), and a file that is not what its prefix
says (``duckdb:`` naming an SQLite store, say) raises ``InvalidInput`` before DuckDB opens it.

Frames: ``events``, ``turns``, ``runs``, ``steps``, ``model_calls``, ``tool_calls``,
``interactions``, ``inputs`` (the views of ``exporters/schema.sql``; columns documented there),
each optionally narrowed with ``namespace=``, ``user_id=``, ``agent_id=``, ``session_id=``.
``query(name, source, **params)`` runs ``exporters/queries/NAME.sql`` with its parameters
bound; ``connection(source)`` gives a DuckDB connection over the views for SQL of one's own.
``timeline(source)`` draws turns and runs on a time axis.

Every frame has the same dtypes whatever the source and whether or not a column holds a
null: pandas' nullable dtypes (``string``, ``Int64``/``Int32``, ``Float64``, ``boolean``),
``datetime64[us, UTC]`` for every time (``event_date`` too: midnight UTC of the event's
day), and Arrow-backed lists (``input_ids``); ``normalise`` does it.

The chart uses matplotlib rather than Altair: it is already a dependency of the ``export``
extra, renders to a static image with no browser or JavaScript (so it works headless, in CI,
in ``agentnb demo`` and in nbval-checked notebooks), and the picture is a handful of bars.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentnb.errors import InvalidInput
from agentnb.export.columns import FLATTEN_SQL, RawColumns, connect, require_export_deps, to_arrow
from agentnb.export.sql import load_query, schema_sql
from agentnb.ids import SessionKey
from agentnb.log import SessionLog
from agentnb.stores.base import MAX_READ_LIMIT, SessionStore

if TYPE_CHECKING:
    import duckdb
    import pandas as pd
    import pyarrow as pa
    from matplotlib.figure import Figure

__all__ = [
    "connection",
    "events",
    "inputs",
    "interactions",
    "model_calls",
    "normalise",
    "query",
    "runs",
    "steps",
    "timeline",
    "tool_calls",
    "turns",
]

VIEWS = ("events", "turns", "runs", "steps", "model_calls", "tool_calls", "interactions", "inputs")
_ORDER = {
    "events": "namespace, user_id, agent_id, session_id, seq",
    "turns": "started_at, turn_id",
    "runs": "started_at, run_id",
    "steps": "started_at, step_id",
    "model_calls": "started_at, model_call_id",
    "tool_calls": "requested_at, call_id",
    "interactions": "requested_at, request_id",
    "inputs": "received_at, input_id",
}
_FILTERS = ("namespace", "user_id", "agent_id", "session_id")
_SQLITE_MAGIC = b"SQLite format 3\x00"


@contextlib.contextmanager
def connection(source: Any) -> Iterator[duckdb.DuckDBPyConnection]:
    """A DuckDB connection where the views of ``schema.sql`` read ``source``, for SQL of
    one's own::

        with analysis.connection("exports/agentnb") as con:
            con.sql("SELECT agent_id, count(*) FROM turns GROUP BY ALL").df()

    Closed (and a DuckDB file or store released) when the block ends.
    """
    require_export_deps()
    from agentnb.export.duckdb import DuckDBSink
    from agentnb.export.parquet import ParquetSink

    if isinstance(source, DuckDBSink):
        source = f"duckdb:{source.path}"
    if isinstance(source, ParquetSink):
        con = connect()
        try:
            _register_parquet(con, source)
            yield con
        finally:
            con.close()
        return
    if isinstance(source, SessionStore | SessionLog) or isinstance(
        getattr(source, "log", None), SessionLog
    ):
        con = connect()
        try:
            _register_live(con, source if not hasattr(source, "log") else source.log)
            yield con
        finally:
            con.close()
        return
    if isinstance(source, os.PathLike):
        source = os.fspath(source)
    if not isinstance(source, str) or not source:
        raise InvalidInput(
            "source must be a Parquet folder, a DuckDB file, a store URL, a SessionStore, "
            f"a SessionLog or a Session; got {type(source).__name__}"
        )
    with _opened_path(*_classify(source)) as con:
        yield con


@contextlib.contextmanager
def _opened_path(kind: str, target: str) -> Iterator[duckdb.DuckDBPyConnection]:
    from agentnb.export.duckdb import open_duckdb
    from agentnb.export.parquet import ParquetSink

    if kind == "duckdb":
        if not os.path.isfile(target):
            raise InvalidInput(f"DuckDB export {target!r} does not exist")
        con = open_duckdb(target, read_only=True)
        try:
            yield con
        finally:
            con.close()
    elif kind == "parquet":
        if "://" not in target and not os.path.isdir(target):
            raise InvalidInput(
                f"Parquet export {target!r} is not a folder (a path that is a file, or missing)"
            )
        con = connect()
        try:
            _register_parquet(con, ParquetSink(target, read_only=True))
            yield con
        finally:
            con.close()
    else:
        from agentnb.stores import open_store

        store = open_store(target, create=False)
        con = connect()
        try:
            _register_live(con, store)
            yield con
        finally:
            con.close()
            store.close()


def _classify(source: str) -> tuple[str, str]:
    for prefix in ("parquet", "duckdb"):
        if source.startswith(f"{prefix}:") and not source.startswith(f"{prefix}://"):
            return prefix, source[len(prefix) + 1 :]
    if source.startswith(("sqlite:", "memory:", "postgresql:", "postgres:")):
        return "store", source
    if "://" in source:
        return "parquet", source
    path = Path(source).expanduser()
    if path.is_dir():
        return "parquet", str(path)
    if path.is_file():
        with path.open("rb") as f:
            head = f.read(16)
        if head == _SQLITE_MAGIC:
            return "store", f"sqlite:///{path.resolve()}"
        return "duckdb", str(path)
    raise InvalidInput(f"no export or store at {source!r}")


def _register_parquet(con: duckdb.DuckDBPyConnection, sink: Any) -> None:
    from agentnb.export.parquet import FILE_COLUMNS

    files = sink.files()
    if not files:
        table = sink.read_arrow()
        con.register("raw_files", table)
    elif sink.local:
        con.read_parquet(files, hive_partitioning=False, union_by_name=True).create_view(
            "raw_files"
        )
    else:
        import pyarrow.dataset as ds

        con.register("raw_files", ds.dataset(files, filesystem=sink.fs, format="parquet"))
    cols = ", ".join(FILE_COLUMNS)
    con.execute(
        f"CREATE OR REPLACE TEMP VIEW raw_events AS SELECT {cols}, "
        "CAST(occurred_at AT TIME ZONE 'UTC' AS DATE) AS event_date FROM raw_files"
    )
    con.execute(schema_sql())
    parts = sink.turn_part_files() if files else None
    if parts == []:  # events, but not one of a turn
        con.execute("CREATE OR REPLACE VIEW turn_parts AS FROM turn_rollup LIMIT 0")
    elif parts:  # the turns view reads the committed rollups instead of rescanning events
        if sink.local:
            con.read_parquet(parts, hive_partitioning=False).create_view("turn_part_files")
        else:
            import pyarrow.dataset as ds

            con.register("turn_part_files", ds.dataset(parts, filesystem=sink.fs, format="parquet"))
        con.execute("CREATE OR REPLACE VIEW turn_parts AS SELECT * FROM turn_part_files")


def _register_live(con: duckdb.DuckDBPyConnection, source: SessionStore | SessionLog) -> None:
    if isinstance(source, SessionLog):
        store, keys = source.store, [source.key]
    else:
        store, keys = source, [r.key for r in source.list_sessions()]
    batch = {k: _columns(store, k) for k in keys}
    con.register("batch", to_arrow(batch))
    con.execute(f"CREATE TEMP TABLE raw_events AS {FLATTEN_SQL}")
    con.unregister("batch")
    con.execute(schema_sql())


def _columns(store: SessionStore, key: SessionKey) -> RawColumns:
    """Every committed event of the session, read a page of columns at a time."""
    head = store.head(key)
    pages = range(0, head, MAX_READ_LIMIT)
    return RawColumns.concat(
        [store.read_arrow(key, p, min(MAX_READ_LIMIT, head - p)) for p in pages]
    )


def _frames(source: Any, views: tuple[str, ...], filters: dict[str, str | None]) -> list[Any]:
    """Several views read in one opening of ``source`` (one consistent read)."""
    where = [f"{k} = ?" for k, v in filters.items() if v is not None]
    params = [v for v in filters.values() if v is not None]
    clause = (" WHERE " + " AND ".join(where)) if where else ""
    with connection(source) as con:
        return [
            _to_pandas(
                con.sql(f"SELECT * FROM {view}{clause} ORDER BY {_ORDER[view]}", params=params)
            )
            for view in views
        ]


def _frame(view: str, source: Any, filters: dict[str, str | None]) -> pd.DataFrame:
    unknown = set(filters) - set(_FILTERS)
    if unknown:
        raise InvalidInput(f"unknown filter(s) {sorted(unknown)}; use {', '.join(_FILTERS)}")
    where = [f"{k} = ?" for k, v in filters.items() if v is not None]
    params = [v for v in filters.values() if v is not None]
    sql = f"SELECT * FROM {view}"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += f" ORDER BY {_ORDER[view]}"
    with connection(source) as con:
        return _to_pandas(con.sql(sql, params=params))


def events(source: Any, **filters: str | None) -> pd.DataFrame:
    """Every committed event once, in seq order per session (the flat export columns)."""
    return _frame("events", source, filters)


def turns(source: Any, **filters: str | None) -> pd.DataFrame:
    """One row per turn: status, timings, counts, tokens, error and output."""
    return _frame("turns", source, filters)


def runs(source: Any, **filters: str | None) -> pd.DataFrame:
    """One row per run: why it started, how it ended, timings, counts and tokens."""
    return _frame("runs", source, filters)


def steps(source: Any, **filters: str | None) -> pd.DataFrame:
    """One row per step of a run."""
    return _frame("steps", source, filters)


def model_calls(source: Any, **filters: str | None) -> pd.DataFrame:
    """One row per model call: model, attempts, retries, tokens, latency, finish reason."""
    return _frame("model_calls", source, filters)


def tool_calls(source: Any, **filters: str | None) -> pd.DataFrame:
    """One row per tool call: tool, arguments, decision, status, outcome, duration, approval."""
    return _frame("tool_calls", source, filters)


def interactions(source: Any, **filters: str | None) -> pd.DataFrame:
    """One row per human-in-the-loop request: kind, answer, who answered, wait time."""
    return _frame("interactions", source, filters)


def inputs(source: Any, **filters: str | None) -> pd.DataFrame:
    """One row per input (task, steering, injected material, answer) and whether it applied."""
    return _frame("inputs", source, filters)


def query(name: str, source: Any, **params: Any) -> pd.DataFrame:
    """Run the audit query ``exporters/queries/NAME.sql`` on ``source``.

    Parameters are bound as DuckDB variables (``SET VARIABLE p = ?``), never formatted into
    the SQL. Unknown query names, unknown parameters and missing required parameters raise
    ``InvalidInput`` naming what is allowed.
    """
    q = load_query(name)
    declared = {p.name: p for p in q.params}
    unknown = set(params) - set(declared)
    if unknown:
        allowed = ", ".join(declared) or "none"
        raise InvalidInput(
            f"query {name!r} has no parameter(s) {sorted(unknown)}; its parameters: {allowed}"
        )
    missing = [p.name for p in q.params if p.required and params.get(p.name) is None]
    if missing:
        raise InvalidInput(
            f"query {name!r} needs parameter(s) {missing}: "
            + "; ".join(f"{p.name}: {p.description}" for p in q.params if p.name in missing)
        )
    with connection(source) as con:
        for p in q.params:
            con.execute(f"SET VARIABLE {p.name} = ?", [params.get(p.name)])
        return _to_pandas(con.sql(q.sql))


# -- dtypes ----------------------------------------------------------------------------------


def _to_pandas(relation: duckdb.DuckDBPyRelation) -> pd.DataFrame:
    """The relation as a dataframe with the normalised dtypes of the module docstring."""
    return normalise(relation.to_arrow_table())


def normalise(table: pa.Table) -> pd.DataFrame:
    """An Arrow table as a dataframe with agentnb's dtypes: nullable pandas dtypes for
    strings, integers, floats and booleans; tz-aware UTC microsecond times (dates become
    midnight UTC); integral decimals (DuckDB's ``HUGEINT`` sums) as ``Int64``, others as
    ``Float64``; lists and structs Arrow-backed. The dtype of a column never depends on
    whether it holds a null."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.types as pat

    utc = pa.timestamp("us", tz="UTC")
    columns = []
    for column in table.columns:
        kind = column.type
        if pat.is_date(kind):
            columns.append(column.cast(pa.timestamp("us")).cast(utc))
        elif pat.is_timestamp(kind):
            columns.append(column.cast(pa.timestamp("us", tz=kind.tz)).cast(utc))
        elif pat.is_decimal(kind):
            columns.append(column.cast(pa.int64() if kind.scale == 0 else pa.float64()))
        elif pat.is_large_string(kind) or pat.is_string_view(kind):
            columns.append(column.cast(pa.string()))
        else:
            columns.append(column)
    table = pa.table(columns, names=table.column_names)
    nullable = {arrow: pd.api.types.pandas_dtype(name) for arrow, name in _NULLABLE.items()}

    def mapper(kind: pa.DataType) -> Any:
        if pat.is_timestamp(kind):
            return None  # pyarrow's own conversion: datetime64[us, UTC]
        if pat.is_nested(kind):
            return pd.ArrowDtype(kind)
        return nullable.get(str(kind))

    frame: pd.DataFrame = table.to_pandas(types_mapper=mapper)
    return frame


_NULLABLE = {
    # Arrow type name -> pandas nullable dtype name
    "string": "string",
    "bool": "boolean",
    "int8": "Int8",
    "int16": "Int16",
    "int32": "Int32",
    "int64": "Int64",
    "uint8": "UInt8",
    "uint16": "UInt16",
    "uint32": "UInt32",
    "uint64": "UInt64",
    "float": "Float32",
    "double": "Float64",
}


# -- the timeline --------------------------------------------------------------------------

STATUS_COLORS = {
    "completed": "#2e7d32",
    "running": "#1565c0",
    "suspended": "#f9a825",
    "interrupted": "#ef6c00",
    "failed": "#c62828",
    "cancelled": "#757575",
}


def timeline(
    source: Any,
    *,
    session_id: str | None = None,
    user_id: str | None = None,
    ax: Any = None,
    max_label: int = 28,
) -> Figure:
    """A chart of turns (one row each) and their runs on a time axis, coloured by status.

    Each turn's row has a thin line from its start to its end, a bar per run (colour = the
    run's status), short black ticks for tool calls (red for errors, hatched grey for calls
    whose outcome was uncertain) and hatched yellow spans for human-in-the-loop waits.
    Returns the matplotlib ``Figure`` (displayed by Jupyter; ``fig.savefig(...)`` to save).
    """
    require_export_deps()
    import matplotlib

    if ax is None and not os.environ.get("MPLBACKEND"):
        with contextlib.suppress(Exception):
            matplotlib.use("Agg", force=False)
    import matplotlib.dates as mdates
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    t, r, tc, ia = _frames(
        source, ("turns", "runs", "tool_calls", "interactions"),
        {"session_id": session_id, "user_id": user_id},
    )  # fmt: skip
    if ax is None:
        fig = Figure(figsize=(10, max(2.0, 0.55 * len(t) + 1.2)))
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    row = {turn: i for i, turn in enumerate(t["turn_id"])}
    end_of_data = max(
        [x for x in (t["last_event_at"].max(), r["ended_at"].max()) if x is not None] or [None]
    )

    def num(x: Any) -> float:
        return float(mdates.date2num(x))  # type: ignore[no-untyped-call]

    def span(start: Any, end: Any) -> tuple[float, float]:
        a = num(start)
        b = num(end if end is not None and str(end) != "NaT" else end_of_data)
        return a, max(b - a, 1e-7)

    for _, turn in t.iterrows():
        y = row[turn["turn_id"]]
        a, w = span(
            turn["started_at"],
            turn["ended_at"] if turn["ended_at"] is not None else turn["last_event_at"],
        )
        ax.plot([a, a + w], [y, y], color=STATUS_COLORS.get(turn["status"], "black"), lw=1)
    for _, run in r.iterrows():
        if run["turn_id"] not in row or run["started_at"] is None:
            continue
        a, w = span(run["started_at"], run["ended_at"])
        ax.broken_barh(
            [(a, w)],
            (row[run["turn_id"]] - 0.3, 0.6),
            facecolors=STATUS_COLORS.get(run["status"], "black"),
            alpha=0.85,
        )
    for _, i in ia.iterrows():
        if i["turn_id"] not in row:
            continue
        a, w = span(i["requested_at"], i["resolved_at"])
        ax.broken_barh(
            [(a, w)],
            (row[i["turn_id"]] - 0.2, 0.4),
            facecolors="none",
            edgecolors="#f9a825",
            hatch="//",
        )
    for _, c in tc.iterrows():
        if (
            c["turn_id"] not in row
            or c["dispatched_at"] is None
            or str(c["dispatched_at"]) == "NaT"
        ):
            continue
        a, w = span(c["dispatched_at"], c["ended_at"])
        color = "#c62828" if c["outcome"] == "error" else ("#9e9e9e" if c["uncertain"] else "black")
        ax.broken_barh([(a, w)], (row[c["turn_id"]] + 0.3, 0.15), facecolors=color)
    labels = [
        (text if len(text) <= max_label else text[: max_label - 1] + "…")
        for text in (str(x) if x is not None else "" for x in t["input"])
    ]
    ax.set_yticks(range(len(labels)), labels)
    ax.invert_yaxis()
    ax.xaxis_date()
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S"))  # type: ignore[no-untyped-call]
    ax.set_xlabel("time (UTC)")
    ax.set_title("agentnb timeline: turns (rows) and runs (bars) by status")
    handles = [Patch(color=c, label=s) for s, c in STATUS_COLORS.items()]
    handles.append(Patch(facecolor="none", edgecolor="#f9a825", hatch="//", label="HITL wait"))
    handles.append(Patch(color="black", label="tool call"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small")
    fig.tight_layout()
    return fig
