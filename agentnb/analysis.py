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
``interactions``, ``inputs``, ``sessions`` (each with its place in a tree of sub-agents:
``parent_key``, ``root_key``, ``depth``), ``subagent_calls``, ``plan_changes`` and
``verifications`` (the views
of ``exporters/schema.sql``; columns documented there), each optionally narrowed with
``namespace=``, ``user_id=``, ``agent_id=``, ``session_id=``; ``turns(source,
subagents=True)`` rolls each turn's sub-agents up into it.
``query(name, source, **params)`` runs ``exporters/queries/NAME.sql`` with its parameters
bound; ``connection(source)`` gives a DuckDB connection over the views for SQL of one's own.
``timeline(source)`` draws turns, runs, tool calls and waits for a person on a time axis
(a sub-agent's turns nested under the turn that called it),
``timeline_chart(source)`` the same as an interactive Altair chart, and ``timeline_data``
returns the segments both draw.

Every frame has the same dtypes whatever the source and whether or not a column holds a
null: pandas' nullable dtypes (``string``, ``Int64``/``Int32``, ``Float64``, ``boolean``),
``datetime64[us, UTC]`` for every time (``event_date`` too: midnight UTC of the event's
day), and Arrow-backed lists (``input_ids``); ``normalise`` does it.

``timeline`` uses matplotlib: a static image with no browser or JavaScript, so it works
headless, in CI, in ``agentnb demo`` and in nbval-checked notebooks. ``timeline_chart`` adds
tooltips and zoom with Altair (both in the ``export`` extra) and draws offline: it returns a
``TimelineChart`` that displays as a Vega-Lite 5 spec, which JupyterLab 4, Notebook 7 and
VS Code draw with the Vega they ship. (Altair 6 writes Vega-Lite 6, for which JupyterLab 4
has no renderer, so Altair's own display loads Vega from a CDN. The other ways out cost
more: Altair's inline-script HTML and its widget ``JupyterChart`` offline both need
vl-convert, about 35 MB, and scripts in HTML outputs run only in trusted notebooks; pinning
Altair 5 would hold back every user's Altair. The chart uses only what Vega-Lite 5 has, and
tests/widgets/test_browser_notebooks.py draws it in JupyterLab with the network cut.)

Why it is long: one query layer: the views, their dtypes and the charts analysts call
share one connection and one normalisation.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentnb.errors import InvalidInput, install_hint
from agentnb.export.columns import FLATTEN_SQL, RawColumns, connect, require_export_deps, to_arrow
from agentnb.export.sql import load_query, schema_sql
from agentnb.ids import SessionKey
from agentnb.log import SessionLog
from agentnb.stores.base import MAX_READ_LIMIT, SessionStore

if TYPE_CHECKING:
    import altair as alt
    import duckdb
    import pandas as pd
    import pyarrow as pa
    from matplotlib.figure import Figure

__all__ = [
    "TimelineChart",
    "compactions",
    "connection",
    "events",
    "inputs",
    "interactions",
    "model_calls",
    "normalise",
    "plan_changes",
    "query",
    "runs",
    "sessions",
    "steps",
    "subagent_calls",
    "timeline",
    "timeline_chart",
    "timeline_data",
    "tool_calls",
    "turns",
    "verifications",
]

VIEWS = (
    "events",
    "turns",
    "runs",
    "steps",
    "model_calls",
    "tool_calls",
    "interactions",
    "inputs",
    "compactions",
    "sessions",
    "subagent_calls",
    "plan_changes",
    "verifications",
)
_ORDER = {
    "events": "namespace, user_id, agent_id, session_id, seq",
    "turns": "started_at, turn_id",
    "runs": "started_at, run_id",
    "steps": "started_at, step_id",
    "model_calls": "started_at, model_call_id",
    "tool_calls": "requested_at, call_id",
    "interactions": "requested_at, request_id",
    "inputs": "received_at, input_id",
    "compactions": "ended_at, compaction_id",
    "sessions": "first_event_at, session_key",
    "subagent_calls": "spawned_at, call_id",
    "turn_totals": "started_at, turn_id",
    "plan_changes": "namespace, user_id, agent_id, session_id, seq",
    "verifications": "namespace, user_id, agent_id, session_id, seq",
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


def turns(source: Any, *, subagents: bool = False, **filters: str | None) -> pd.DataFrame:
    """One row per turn: status, timings, counts, tokens, error and output.

    ``subagents=True`` rolls the turn's sub-agent calls up into it (the ``turn_totals``
    view): ``subagent_calls``, ``subagent_input_tokens``, ``subagent_output_tokens`` and
    ``total_input_tokens`` / ``total_output_tokens`` (own plus its sub-agents', their whole
    tree included).
    """
    return _frame("turn_totals" if subagents else "turns", source, filters)


def sessions(source: Any, **filters: str | None) -> pd.DataFrame:
    """One row per session, with ``parent_key``, ``root_key`` and ``depth`` in its tree of
    sub-agents (read from the log alone), counts and tokens."""
    return _frame("sessions", source, filters)


def subagent_calls(source: Any, **filters: str | None) -> pd.DataFrame:
    """One row per sub-agent call: the calling turn, the child session, task, status,
    answer, tokens (the child's whole tree) and duration."""
    return _frame("subagent_calls", source, filters)


def plan_changes(source: Any, **filters: str | None) -> pd.DataFrame:
    """One row per step of a plan (the built-in ``todo`` tool) that was added, changed
    status or wording, or was removed."""
    return _frame("plan_changes", source, filters)


def verifications(source: Any, **filters: str | None) -> pd.DataFrame:
    """One row per check of a turn's answer by the agent's ``verify`` hook: passed, the
    reason, the attempt and whether the turn went back to the model."""
    return _frame("verifications", source, filters)


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


def compactions(source: Any, **filters: str | None) -> pd.DataFrame:
    """One row per compaction: messages and tokens before and after, tokens saved, summary."""
    return _frame("compactions", source, filters)


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
    "rejected": "#8e24aa",
}
"""Run and turn colours by status (the legend shows only the statuses drawn). ``rejected``
is a turn that completed after one of its calls was refused (a person rejected the
approval, or a permission rule denied it), and the run that answered the refusal: its
order did not go through, so it is not drawn as a green success."""
TOOL_COLORS = {"ok": "#37474f", "error": "#c62828", "uncertain": "#9e9e9e"}
WAIT_COLOR = "#f9a825"
PAGE_SIZE = 50
"""Turns per page of ``timeline``: the figure grows with the rows up to this many turns."""
_MIN_WIDTH = 0.006
"""The shortest bar drawn, as a share of the time axis: a 40 ms approval stays visible."""
_LANE = 0.5
"""Height of one tool-call lane, in turn rows (a turn row is 1)."""
_LABEL_ROOM = 0.008
"""Room a tool call's label takes after its bar, per character, as a share of the axis."""


def timeline_data(
    source: Any,
    *,
    session_id: str | None = None,
    user_id: str | None = None,
    relative_to: str = "session",
    page: int = 1,
    page_size: int = PAGE_SIZE,
) -> pd.DataFrame:
    """The segments both timelines draw, one row each, for the turns of one page.

    Columns: ``session`` (``user/session``), ``turn_id``, ``row`` (the turn's position,
    0 at the top), ``kind`` (``turn``, ``run``, ``wait``, ``tool``), ``lane`` (tool calls:
    0, 1, ... so calls that overlap in time never share one), ``label`` (the turn's input,
    ``run N · reason``, the wait's kind, the tool's name), ``status`` (a turn or run that
    completed after one of its calls was refused says ``rejected``), ``start_s`` and
    ``end_s`` (seconds since the session's, or with ``relative_to="turn"`` the turn's,
    start; an open segment ends at the last event), ``shown_end_s`` (at least a minimum
    width later than ``start_s``, so short waits and calls stay visible), ``started_at``,
    ``ended_at`` (UTC), ``run_id``, ``call_id``, ``detail`` (text for tooltips),
    ``depth`` and ``parent_call_id``. Sessions follow each other in order of their first
    turn; so do turns within one. A sub-agent's child session is nested: its turns follow
    the turn whose call made it, with ``depth`` 1 (2 for a grandchild...), the sub-agent
    call's id, and the root's ``session`` and time origin, so its bars sit under that call.
    """
    import pandas as pd

    _check_page(relative_to, page, page_size)
    t, r, tc, ia, ss = _frames(
        source, ("turns", "runs", "tool_calls", "interactions", "sessions"),
        {"user_id": user_id},
    )  # fmt: skip
    columns = [
        "session", "turn_id", "row", "kind", "lane", "label", "status", "start_s", "end_s",
        "shown_end_s", "started_at", "ended_at", "run_id", "call_id", "detail", "depth",
        "parent_call_id",
    ]  # fmt: skip
    t = _nested_turns(t[t["started_at"].notna()].copy(), ss, session_id)
    pages = max(1, -(-len(t) // page_size))
    if page > pages:
        raise InvalidInput(f"page {page} is past the last page ({pages} of {page_size} turns)")
    session_start = dict(zip(t["session"], t["_first"], strict=False))
    t = t.iloc[(page - 1) * page_size : page * page_size]
    if t.empty:
        empty = pd.DataFrame({c: pd.Series(dtype=object) for c in columns})
        empty.attrs.update(page=page, pages=pages)
        return empty
    last = max(x for x in (t["last_event_at"].max(), r["ended_at"].max()) if pd.notna(x))
    rows: list[dict[str, Any]] = []
    by_turn = {turn.turn_id: turn for turn in t.itertuples(index=False)}
    origin = {
        turn.turn_id: turn.started_at if relative_to == "turn" else session_start[turn.session]
        for turn in by_turn.values()
    }
    row_of = {turn_id: n for n, turn_id in enumerate(by_turn)}

    def add(turn_id: str, kind: str, start: Any, end: Any, **fields: Any) -> None:
        open_end = end if pd.notna(end) else last
        rows.append(
            {
                "session": by_turn[turn_id].session,
                "turn_id": turn_id,
                "row": row_of[turn_id],
                "kind": kind,
                "lane": fields.pop("lane", 0),
                "start_s": (start - origin[turn_id]).total_seconds(),
                "end_s": (max(open_end, start) - origin[turn_id]).total_seconds(),
                "started_at": start,
                "ended_at": end if pd.notna(end) else pd.NaT,
                "depth": by_turn[turn_id].depth,
                "parent_call_id": by_turn[turn_id].parent_call_id,
                **fields,
            }
        )

    runs = r[r["turn_id"].isin(by_turn) & r["started_at"].notna()]
    refused = _refused(tc, runs, by_turn)
    for turn in by_turn.values():
        end = turn.ended_at if pd.notna(turn.ended_at) else turn.last_event_at
        text = "" if pd.isna(turn.input) else str(turn.input)
        if turn.depth:  # a sub-agent's task, under the call that made it
            text = f"{'  ' * (int(turn.depth) - 1)}\u21b3 {turn.agent_id}: {text}"
        status, said = _shown(turn.status, refused.get(turn.turn_id))
        add(turn.turn_id, "turn", turn.started_at, end, label=text, status=status,
            run_id=None, call_id=None, detail=f"{said}: {text}")  # fmt: skip
    for run in runs.itertuples(index=False):
        label = f"run {run.run_index} \u00b7 {run.reason}"
        status, said = _shown(run.status, refused.get(run.run_id))
        add(run.turn_id, "run", run.started_at, run.ended_at, label=label, status=status,
            run_id=run.run_id, call_id=None, detail=f"{label}: {said}")  # fmt: skip
    for wait in ia[ia["turn_id"].isin(by_turn)].itertuples(index=False):
        what = {"confirmation": "approval", "ask_user": "question"}.get(wait.kind, wait.kind)
        add(wait.turn_id, "wait", wait.requested_at, wait.resolved_at, label=str(what),
            status=wait.status, run_id=wait.run_id, call_id=wait.call_id,
            detail=f"{what} of {wait.tool_name or 'a person'}: {wait.status}")  # fmt: skip
    calls = tc[tc["turn_id"].isin(by_turn) & tc["dispatched_at"].notna()]
    for call in calls.sort_values(["dispatched_at", "call_id"]).itertuples(index=False):
        kind = "error" if call.outcome == "error" else "uncertain" if call.uncertain else "ok"
        add(call.turn_id, "tool", call.dispatched_at, call.ended_at, label=str(call.tool_name),
            status=kind, run_id=call.run_id, call_id=call.call_id,
            detail=f"{call.tool_name}({call.arguments}): {call.status}")  # fmt: skip
    frame = pd.DataFrame(rows, columns=columns)
    span = max(float(frame["end_s"].max() - frame["start_s"].min()), 1e-3)
    # Waits and tool calls are drawn at least _MIN_WIDTH of the axis wide; turns and runs
    # as they are.
    shortest = frame["start_s"] + span * _MIN_WIDTH
    brief = frame["kind"].isin(["wait", "tool"]) & (frame["end_s"] < shortest)
    frame["shown_end_s"] = frame["end_s"].where(~brief, shortest)
    _assign_lanes(frame, span)
    frame["lane"] = frame["lane"].astype("Int64")
    frame["row"] = frame["row"].astype("Int64")
    frame["depth"] = frame["depth"].astype("Int64")
    frame["parent_call_id"] = frame["parent_call_id"].astype("string")
    frame = frame.reset_index(drop=True)
    frame.attrs.update(page=page, pages=pages)
    return frame


def _refused(tc: pd.DataFrame, runs: pd.DataFrame, turns: dict[str, Any]) -> dict[str, str]:
    """The words for the refused calls (``create_order rejected: over budget``: calls whose
    confirmation a person rejected or that a rule denied), keyed by their turn's id and by
    the id of the turn's last run (the one that answered the refusal)."""
    import pandas as pd

    denied = tc[tc["turn_id"].isin(turns) & (tc["decision"] == "denied")]
    words: dict[str, list[str]] = {}
    for call in denied.sort_values(["requested_at", "call_id"]).itertuples(index=False):
        why = "" if pd.isna(call.decision_reason) else f": {call.decision_reason}"
        words.setdefault(str(call.turn_id), []).append(f"{call.tool_name} rejected{why}")
    said = {turn_id: "; ".join(w) for turn_id, w in words.items()}
    last = runs.sort_values(["started_at", "run_index"]).groupby("turn_id")["run_id"].last()
    return {**said, **{str(last[t]): w for t, w in said.items() if t in last.index}}


def _shown(status: Any, refusal: str | None) -> tuple[str, str]:
    """The status a turn or run is drawn with, and the words its tooltip says: a turn that
    completed after a refused call is ``rejected``, saying what was refused."""
    if str(status) == "completed" and refusal is not None:
        return "rejected", f"rejected ({refusal}), then completed"
    return str(status), str(status)


def _check_page(relative_to: str, page: int, page_size: int) -> None:
    if relative_to not in {"session", "turn"}:
        raise InvalidInput(f"relative_to must be 'session' or 'turn', got {relative_to!r}")
    if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size < 1:
        raise InvalidInput(f"page_size must be a positive integer, got {page_size!r}")
    if isinstance(page, bool) or not isinstance(page, int) or page < 1:
        raise InvalidInput(f"page must be 1 or more, got {page!r}")


def _keys_of(frame: pd.DataFrame) -> pd.Series:
    """Each row's session key, as the ``sessions`` view writes it."""
    return (
        frame["namespace"].astype(str)
        + "/"
        + frame["user_id"].astype(str)
        + "/"
        + frame["agent_id"].astype(str)
        + "/"
        + frame["session_id"].astype(str)
    )


def _nested_turns(t: pd.DataFrame, ss: pd.DataFrame, session_id: str | None) -> pd.DataFrame:
    """The turns in timeline order: trees of sessions in order of their roots' first turn;
    in a tree, a session's turns in time order, each followed by the turns of the child
    sessions its sub-agent calls made (depth first). Adds ``session`` (the root's
    ``user/session``: one group per tree), ``_first`` (the root's first turn), ``_key``,
    ``depth`` and ``parent_call_id``; with ``session_id``, only the trees holding it."""
    import pandas as pd

    t["_key"] = _keys_of(t) if len(t) else pd.Series([], dtype=str, index=t.index)
    known = set(t["_key"])
    links: dict[str, tuple[str, str, str]] = {}  # key -> (parent key, parent turn, call id)
    for row in ss.itertuples(index=False):
        if pd.notna(row.parent_key) and row.session_key in known and row.parent_key in known:
            links[str(row.session_key)] = (
                str(row.parent_key),
                str(row.parent_turn_id),
                str(row.parent_call_id),
            )  # a child whose parent is not in the data is drawn as a root

    def ancestry(key: str) -> list[str]:
        chain = [key]
        while chain[-1] in links and len(chain) < 64:
            chain.append(links[chain[-1]][0])
        return chain

    roots = {k: ancestry(k)[-1] for k in known}
    names = t.drop_duplicates("_key").set_index("_key")
    group = {k: f"{names.at[k, 'user_id']}/{names.at[k, 'session_id']}" for k in known}
    t["session"] = t["_key"].map(lambda k: group[roots[k]])
    t["depth"] = t["_key"].map(lambda k: len(ancestry(k)) - 1).astype("Int64")
    t["parent_call_id"] = t["_key"].map(lambda k: links[k][2] if k in links else None)
    t["_root"] = t["_key"].map(roots)
    t = t.assign(_first=t.groupby("_root")["started_at"].transform("min"))
    if session_id is not None:
        t = t[t["_root"].isin(set(t.loc[t["session_id"] == session_id, "_root"]))]
    turns_of = {k: g.sort_values(["started_at", "turn_id"]) for k, g in t.groupby("_key")}
    start = {k: g["started_at"].min() for k, g in turns_of.items()}
    under: dict[str, list[str]] = {}
    for child in sorted((k for k in links if k in turns_of), key=lambda k: (start[k], k)):
        under.setdefault(links[child][1], []).append(child)
    order: list[Any] = []

    def visit(key: str) -> None:
        frame = turns_of[key]
        for index, turn_id in zip(frame.index, frame["turn_id"], strict=True):
            order.append(index)
            for child in under.get(str(turn_id), ()):
                visit(child)

    for top in sorted((k for k in turns_of if k not in links), key=lambda k: (start[k], group[k])):
        visit(top)
    return t.loc[order]


def _assign_lanes(frame: pd.DataFrame, span: float) -> None:
    """Tool calls of one turn that overlap in time get different lanes; so does a call
    that starts where the previous one's label is still written."""
    tools = frame[frame["kind"] == "tool"].sort_values(["turn_id", "start_s", "call_id"])
    ends: dict[str, list[float]] = {}
    for index, call in tools.iterrows():
        lanes = ends.setdefault(str(call["turn_id"]), [])
        free = next((n for n, end in enumerate(lanes) if end <= call["start_s"]), len(lanes))
        if free == len(lanes):
            lanes.append(0.0)
        label = span * _LABEL_ROOM * (len(str(call["label"])) + 2)
        lanes[free] = float(call["shown_end_s"]) + label
        frame.loc[index, "lane"] = free


def _row_layout(data: pd.DataFrame) -> tuple[dict[str, float], float, list[tuple[str, float]]]:
    """The y of each turn's row (rows with parallel calls are taller), the total height in
    rows, and where each session's group starts."""
    lanes = data[data["kind"] == "tool"].groupby("turn_id")["lane"].max().to_dict()
    y = 0.0
    groups: list[tuple[str, float]] = []
    top: dict[str, float] = {}
    session = None
    for turn in data[data["kind"] == "turn"].itertuples(index=False):
        if turn.session != session:
            session = turn.session
            y += 0.6 if groups else 0.0
            groups.append((str(session), y))
        top[str(turn.turn_id)] = y
        n = lanes.get(turn.turn_id)
        y += 1.0 + (0.0 if n is None else (int(n) + 1) * _LANE)
    return top, y, groups


def timeline(
    source: Any,
    *,
    session_id: str | None = None,
    user_id: str | None = None,
    ax: Any = None,
    max_label: int = 28,
    relative_to: str = "session",
    page: int = 1,
    page_size: int = PAGE_SIZE,
) -> Figure:
    """A chart of turns (one row each), their runs, tool calls and waits for a person.

    The x axis is time since the session started (``relative_to="turn"``: since each
    turn started). Each turn's row has a thin line from its start to its end and a bar per
    run coloured by the run's status; below it, one bar per tool call labelled with the
    tool's name (dark: done, red: error, grey: uncertain), calls that overlap in time on
    lanes of their own; hatched yellow spans are waits for a person, drawn at least a
    minimum width so a quick approval still shows. Several sessions are grouped, each under
    its ``user/session`` label. The legend lists only what is drawn. The figure grows with
    the rows; past ``page_size`` turns, ``page=2, 3, ...`` draws the next ones (the title
    says which). Returns the matplotlib ``Figure`` (``fig.savefig(...)`` to save).
    ``timeline_chart`` draws the same data as an interactive Altair chart with tooltips.
    """
    require_export_deps()
    import matplotlib

    if ax is None and not os.environ.get("MPLBACKEND"):
        with contextlib.suppress(Exception):
            matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    data = timeline_data(
        source, session_id=session_id, user_id=user_id, relative_to=relative_to,
        page=page, page_size=page_size,
    )  # fmt: skip
    top, height, groups = _row_layout(data)
    if ax is None:
        fig = Figure(figsize=(11, min(2.0 + 0.42 * height, 60.0)))
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    turns = data[data["kind"] == "turn"]
    span = float(data["shown_end_s"].max()) if len(data) else 1.0
    scale, unit = (1.0, "seconds")
    if span > 7200:
        scale, unit = (3600.0, "hours")
    elif span > 180:
        scale, unit = (60.0, "minutes")

    statuses, tools = _draw_segments(ax, data, top, scale)
    labels = [_two_lines(str(v), max_label) for v in turns["label"]]
    ax.set_yticks([top[str(t)] for t in turns["turn_id"]], labels)
    ax.set_ylim(height + 0.2, -1.1 if len(groups) > 1 else -0.8)
    if len(groups) > 1:
        for n, (session, y) in enumerate(groups):
            if n:
                ax.axhline(y - 0.75, color="#bdbdbd", lw=0.8)
            ax.text(0.0, y - 0.55, f" {session}", transform=ax.get_yaxis_transform(),
                    va="bottom", ha="left", fontsize="small", color="#616161")  # fmt: skip
    ax.set_xlim(left=0)
    since = "its session" if relative_to == "session" else "its turn"
    ax.set_xlabel(f"{unit} since {since} started")
    total = int(data.attrs.get("pages", 1))
    title = "agentnb timeline: turns (rows), runs (bars), tool calls and waits"
    if total > 1:
        title += f" \u00b7 page {page} of {total}"
    ax.set_title(title, fontsize="medium")
    _legend(ax, data, statuses, tools)
    fig.tight_layout()
    return fig


def _draw_segments(
    ax: Any, data: pd.DataFrame, top: dict[str, float], scale: float
) -> tuple[set[str], set[str]]:
    """Draw every segment; returns the run/turn statuses and tool-call kinds drawn."""

    def x(value: Any) -> float:
        return float(value) / scale

    statuses: set[str] = set()
    tools: set[str] = set()
    for seg in data.itertuples(index=False):
        y = top[str(seg.turn_id)]
        a, b = x(seg.start_s), x(seg.shown_end_s)
        if seg.kind == "turn":
            color = STATUS_COLORS.get(str(seg.status), "black")
            ax.plot([a, b], [y, y], color=color, lw=1)
            statuses.add(str(seg.status))
        elif seg.kind == "run":
            color = STATUS_COLORS.get(str(seg.status), "black")
            ax.broken_barh([(a, b - a)], (y - 0.3, 0.6), facecolors=color, alpha=0.85)
            statuses.add(str(seg.status))
        elif seg.kind == "wait":
            ax.broken_barh([(a, b - a)], (y - 0.38, 0.76), facecolors="none",
                           edgecolors=WAIT_COLOR, hatch="//", lw=1.2)  # fmt: skip
        else:
            lane_y = y + 0.45 + int(seg.lane) * _LANE
            ax.broken_barh([(a, b - a)], (lane_y, _LANE * 0.8),
                           facecolors=TOOL_COLORS[str(seg.status)])  # fmt: skip
            ax.text(b, lane_y + _LANE * 0.4, f" {seg.label}", va="center", ha="left",
                    fontsize="x-small", clip_on=True)  # fmt: skip
            tools.add(str(seg.status))
    return statuses, tools


def _legend(ax: Any, data: pd.DataFrame, statuses: set[str], tools: set[str]) -> None:
    """A legend of what is drawn only."""
    from matplotlib.patches import Patch

    handles = [Patch(color=c, label=s) for s, c in STATUS_COLORS.items() if s in statuses]
    handles += [Patch(color="black", label=s) for s in sorted(statuses - set(STATUS_COLORS))]
    if (data["kind"] == "wait").any():
        handles.append(Patch(facecolor="none", edgecolor=WAIT_COLOR, hatch="//",
                             label="waiting for a person"))  # fmt: skip
    names = {"ok": "tool call", "error": "tool error", "uncertain": "uncertain call"}
    handles += [Patch(color=TOOL_COLORS[k], label=names[k]) for k in TOOL_COLORS if k in tools]
    if handles:
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small")


_TOOL_NAMES = {"ok": "tool call", "error": "tool error", "uncertain": "uncertain call"}
_WAIT_FILL = "#ffe49a"
"""Waits in the interactive chart: a paler amber than a suspended run's, legend included."""


VEGALITE5_MIME = "application/vnd.vegalite.v5+json"
"""The mimetype JupyterLab 4, Notebook 7 and VS Code draw with their own Vega, offline."""
VEGALITE5_SCHEMA = "https://vega.github.io/schema/vega-lite/v5.json"


class TimelineChart:
    """The interactive timeline as ``timeline_chart`` returns it: the Altair chart
    (``.chart``), displayed offline as a Vega-Lite 5 spec (see the module docstring).

    Everything else is the Altair chart's: ``save("timeline.html")``, ``to_dict()``,
    ``properties(...)`` and the other Altair methods pass through (what they return is
    plain Altair, displayed the way Altair displays it).
    """

    def __init__(self, chart: alt.Chart | alt.FacetChart) -> None:
        self.chart = chart

    def to_vegalite5(self) -> dict[str, Any]:
        """The chart's spec under the Vega-Lite 5 schema (it uses nothing newer)."""
        spec: dict[str, Any] = self.chart.to_dict()
        spec["$schema"] = VEGALITE5_SCHEMA
        return spec

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return {VEGALITE5_MIME: self.to_vegalite5(), "text/plain": repr(self)}

    def __getattr__(self, name: str) -> Any:
        if name == "chart":  # not set yet (copying, unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.chart, name)

    def __repr__(self) -> str:
        return (
            "TimelineChart (interactive: draws in JupyterLab, Notebook 7 and VS Code; "
            "chart.save('timeline.html') for a browser)"
        )


def timeline_chart(
    source: Any,
    *,
    session_id: str | None = None,
    user_id: str | None = None,
    relative_to: str = "session",
    page: int = 1,
    page_size: int = PAGE_SIZE,
    width: int = 520,
) -> TimelineChart:
    """The timeline as an interactive Altair chart: the same segments as ``timeline``
    (``timeline_data``), with tooltips (turn input, run, tool and arguments, status,
    times, duration), zoom and pan on the time axis, and one panel per session when there
    are several. Runs, waits and tool calls share each turn's band; tool calls that overlap
    sit on lanes below the run. Returns a ``TimelineChart``, which displays offline; its
    ``.chart`` is the Altair chart. Needs ``altair`` (in the ``export`` extra).
    """
    try:
        import altair as alt
    except ImportError as exc:
        raise ImportError(f"timeline_chart needs altair: {install_hint('export')} ({exc})") from exc
    import pandas as pd

    data = timeline_data(
        source, session_id=session_id, user_id=user_id, relative_to=relative_to,
        page=page, page_size=page_size,
    )  # fmt: skip
    turns = data[data["kind"] == "turn"].set_index("turn_id")["label"].to_dict()
    shown = data[data["kind"] != "turn"].copy()
    shown["turn"] = [
        f"{int(row) + 1}. {_short(turns.get(t, ''), 40)}"
        for row, t in zip(shown["row"], shown["turn_id"], strict=True)
    ]
    shown["what"] = [
        str(status) if kind == "run"
        else "waiting for a person" if kind == "wait"
        else _TOOL_NAMES.get(str(status), str(status))
        for kind, status in zip(shown["kind"], shown["status"], strict=True)
    ]  # fmt: skip
    shown["band"] = [
        "0" if kind != "tool" else str(int(lane) + 1)
        for kind, lane in zip(shown["kind"], shown["lane"], strict=True)
    ]
    shown["duration_s"] = (shown["end_s"] - shown["start_s"]).round(3)
    for column in ("started_at", "ended_at"):
        shown[column] = [
            "" if pd.isna(v) else v.isoformat(timespec="milliseconds") for v in shown[column]
        ]
    plain = shown[
        ["session", "turn", "kind", "what", "band", "label", "status", "start_s", "shown_end_s",
         "duration_s", "started_at", "ended_at", "run_id", "call_id", "detail"]
    ].astype(object).where(shown.notna(), None)  # fmt: skip
    for column in plain.columns:  # the spec is embedded in a <script> by to_html()
        plain[column] = [_inert(v) for v in plain[column]]
    present = list(dict.fromkeys(plain["what"]))
    palette = {
        **STATUS_COLORS,
        "waiting for a person": _WAIT_FILL,
        **{_TOOL_NAMES[k]: c for k, c in TOOL_COLORS.items()},
    }
    order = sorted(dict.fromkeys(plain["turn"]), key=lambda t: int(t.split(".", 1)[0]))
    since = "session" if relative_to == "session" else "turn"
    chart = (
        alt.Chart(plain)
        .mark_bar(cornerRadius=2)
        .encode(
            x=alt.X("start_s:Q", title=f"seconds since the {since} started"),
            x2="shown_end_s:Q",
            y=alt.Y("turn:N", sort=order, title=None),
            yOffset=alt.YOffset("band:N"),
            color=alt.Color(
                "what:N",
                title=None,
                scale=alt.Scale(domain=present, range=[palette.get(w, "#000") for w in present]),
                # Below the chart: beside it, the legend is the first thing a narrow output
                # area cuts off.
                legend=alt.Legend(orient="bottom", columns=4),
            ),
            opacity=alt.value(0.95),
            tooltip=[
                alt.Tooltip("turn:N"),
                alt.Tooltip("kind:N"),
                alt.Tooltip("label:N"),
                alt.Tooltip("status:N"),
                alt.Tooltip("detail:N"),
                alt.Tooltip("duration_s:Q", title="seconds"),
                alt.Tooltip("started_at:N"),
                alt.Tooltip("ended_at:N"),
                alt.Tooltip("run_id:N"),
                alt.Tooltip("call_id:N"),
            ],
        )
        .properties(width=width, height=alt.Step(12))
        .interactive(bind_y=False)
    )
    if plain["session"].nunique() > 1:
        sessions = list(dict.fromkeys(plain["session"]))  # in order of their first turn
        facets: alt.FacetChart = chart.facet(row=alt.Row("session:N", title=None, sort=sessions))
        resolved: alt.FacetChart = facets.resolve_scale(y="independent")
        return TimelineChart(resolved)
    return TimelineChart(chart)


def _two_lines(text: str, width: int) -> str:
    """A row label: the text on up to two lines of ``width``, cut with … only past that."""
    import textwrap

    lines = textwrap.wrap(" ".join(text.split()), width) or [""]
    if len(lines) <= 2:
        return "\n".join(lines)
    return lines[0] + "\n" + _short(" ".join(lines[1:]), width)


def _inert(value: Any) -> Any:
    """Text that cannot end or open an HTML element where it is embedded: a zero-width space
    after each ``<`` (shown the same; ``</script>`` in a task's text no longer closes the
    chart's script element)."""
    return value.replace("<", "<\u200b") if isinstance(value, str) else value


def _short(text: str, width: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "\u2026"
