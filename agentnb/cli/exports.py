"""``export`` (events to Parquet, DuckDB or OpenTelemetry) and ``query`` (audit queries)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import agentnb as nb
from agentnb.cli.args import (
    _STORE_HELP,
    AddCommand,
    count_arg,
    local_path,
    open_existing_store,
    store_url,
)
from agentnb.cli.format import EXIT_OK, cell_text, print_json, table_lines
from agentnb.errors import (
    Corrupt,
    InvalidInput,
    SessionNotFound,
)


def _export(args: argparse.Namespace) -> int:
    """Drain committed events of one session or every session into a sink."""
    from agentnb.export import Exporter, open_sink  # optional: the export extra

    destination = args.to if args.to is not None else f"otlp:{args.otlp}"
    store = open_existing_store(args.store)
    sink = None
    try:
        sink = open_sink(destination, name=args.name)
        progress = None if args.progress else False
        if args.session is None:
            exporters = [Exporter(store, sink, progress=progress)]
        else:
            keys = [r.key for r in store.list_sessions() if r.key.session_id == args.session]
            if not keys:
                raise SessionNotFound(
                    f"no session {args.session!r} in {store.url}; list them with agentnb sessions"
                )
            exporters = [
                Exporter(nb.SessionLog(store, key), sink, progress=progress) for key in keys
            ]
        delivered = sum(exporter.drain() for exporter in exporters)
        print(f"exported {delivered} events to {destination} (sink {sink.name!r})")
    finally:
        shutdown = getattr(sink, "shutdown", None)
        if shutdown is not None:
            shutdown()  # the OTLP exporter's connections
        store.close()
    return EXIT_OK


def _query_params(name: str, items: Sequence[str]) -> dict[str, Any]:
    """``--param k=v`` values, converted to the type the query file declares for ``k``."""
    from agentnb.export.sql import load_query

    declared = {p.name: p for p in load_query(name).params}
    params: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InvalidInput(f"--param takes key=value, got {item!r}")
        param = declared.get(key)
        kind = param.type.upper() if param else "VARCHAR"
        try:
            if kind.startswith("TIMESTAMP"):
                params[key] = datetime.fromisoformat(value)
            elif kind in {"INTEGER", "BIGINT"}:
                params[key] = int(value)
            else:
                params[key] = value
        except ValueError:
            example = "2026-01-31 or 2026-01-31T09:00+00:00" if "TIME" in kind else "42"
            raise InvalidInput(
                f"--param {key}={value!r}: {name} takes {key} as {kind}, e.g. {key}={example}"
            ) from None
    return params


def _query(args: argparse.Namespace) -> int:
    """Run an audit query from exporters/queries/ and print the result."""
    from agentnb.export.sql import list_queries, load_query  # optional: the export extra

    if args.list or args.name is None:
        if args.json:
            print_json([{"name": n, "question": load_query(n).question} for n in list_queries()])
        else:
            for name in list_queries():
                print(f"{name:<24} {load_query(name).question}")
        return EXIT_OK
    if args.source is None:
        raise InvalidInput("--source is needed: a Parquet folder, a DuckDB file or a store URL")
    query = load_query(args.name)
    params = _query_params(args.name, args.param)
    path = local_path(args.source)
    if path is not None and not os.path.exists(path):
        raise SessionNotFound(
            f"no export or store at {path}; export one first, e.g. "
            f"agentnb export --to parquet:{path}"
        )
    frame = _run_query(args.name, args.source, params)
    rows = [dict(zip(frame.columns, r, strict=True)) for r in frame.itertuples(index=False)]
    if args.json:
        print_json(rows)
    elif not rows:
        print(f"(no rows) {query.question}")
    else:
        cells = ([cell_text(r[c], args.width) for c in frame.columns] for r in rows)
        print("\n".join(table_lines([str(c) for c in frame.columns], cells)))
    return EXIT_OK


def _run_query(name: str, source: str, params: Mapping[str, Any]) -> Any:
    """``analysis.query``, with DuckDB's own errors turned into the package's typed ones."""
    import duckdb  # optional: the export extra

    from agentnb import analysis

    try:
        return analysis.query(name, source, **params)
    except (duckdb.ConversionException, duckdb.InvalidInputException, duckdb.BinderException) as e:
        first = str(e).splitlines()[0]
        raise InvalidInput(f"query {name!r} cannot use these parameters: {first}") from None
    except duckdb.Error as e:
        first = str(e).splitlines()[0]
        raise Corrupt(f"{source}: could not be read as an agentnb export ({first})") from None


def export_commands(command: AddCommand) -> None:
    """``export`` and ``query``."""
    export = command(
        "export",
        _export,
        "export committed events to Parquet, DuckDB or OpenTelemetry (resumable, at least once)",
        "Export committed events to an analytics sink; a second run exports only what is "
        "new. Example: agentnb export --to parquet:exports/agentnb --all "
        "--store sqlite:///.agentnb/agentnb.sqlite. OpenTelemetry traces go to an OTLP "
        "collector with --otlp URL, e.g. agentnb export --otlp http://localhost:4318",
    )
    dest = export.add_mutually_exclusive_group(required=True)
    dest.add_argument("--to", metavar="DEST", help="parquet:DIR or duckdb:FILE")
    dest.add_argument(
        "--otlp",
        metavar="URL",
        help="OTLP/HTTP collector (http://host:4318, or its /v1/traces endpoint): spans of "
        "each run, model call and tool call (GenAI conventions; no message contents)",
    )
    which = export.add_mutually_exclusive_group()
    which.add_argument("--session", metavar="ID", help="only the session(s) with this id")
    which.add_argument("--all", action="store_true", help="every session of the store (default)")
    export.add_argument("--store", default=None, type=store_url, help=_STORE_HELP)
    export.add_argument("--name", default=None, help="sink name keying the watermark")
    export.add_argument(
        "--no-progress", dest="progress", action="store_false", help="no progress bar"
    )

    query = command(
        "query",
        _query,
        "run an audit query (exporters/queries/NAME.sql) and print a table",
        "Run an audit query over an export or a live store. Example: agentnb query "
        "approvals --source exports/agentnb --param since=2026-01-01. "
        "List the queries: agentnb query --list",
    )
    query.add_argument("name", nargs="?", help="query name (see --list)")
    query.add_argument(
        "--source", help="Parquet folder, duckdb:FILE, or a store URL (sqlite:///...)"
    )
    query.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="K=V",
        help="a query parameter, e.g. since=2026-01-01 (repeat for more)",
    )
    query.add_argument("--list", action="store_true", help="list the queries and exit")
    query.add_argument("--json", action="store_true", help="print the rows as a JSON array")
    query.add_argument(
        "--width", type=count_arg, default=48, help="characters per cell, 0 for no limit"
    )
