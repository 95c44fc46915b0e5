"""The ``agentnb`` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def _demo(args: argparse.Namespace) -> int:
    """Run the scripted demo session on the embedded default store."""
    from agentnb.demo import run_demo

    run_demo(args.store)
    return 0


def _export(args: argparse.Namespace) -> int:
    """Drain committed events of one session or every session into a sink."""
    import agentnb as nb
    from agentnb.export import Exporter, open_sink

    sink = open_sink(args.to, name=args.name)
    store = nb.open_store(args.store)
    try:
        if args.session is None:
            exporters = [Exporter(store, sink, progress=None if args.progress else False)]
        else:
            keys = [r.key for r in store.list_sessions() if r.key.session_id == args.session]
            if not keys:
                raise nb.SessionNotFound(
                    f"no session {args.session!r} in {store.url}; list them with --all"
                )
            exporters = [
                Exporter(nb.SessionLog(store, key), sink, progress=None if args.progress else False)
                for key in keys
            ]
        delivered = sum(exporter.drain() for exporter in exporters)
    finally:
        store.close()
    print(f"exported {delivered} events to {args.to} (sink {sink.name!r})")
    return 0


def _query(args: argparse.Namespace) -> int:
    """Run an audit query from exporters/queries/ and print the result as a table."""
    import agentnb as nb
    from agentnb import analysis
    from agentnb.export.sql import list_queries, load_query

    if args.list or args.name is None:
        for name in list_queries():
            print(f"{name:<24} {load_query(name).question}")
        return 0
    if args.source is None:
        raise nb.InvalidInput("--source is needed: a Parquet folder, a DuckDB file or a store URL")
    params: dict[str, str] = {}
    for item in args.param:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise nb.InvalidInput(f"--param takes key=value, got {item!r}")
        params[key] = value
    frame = analysis.query(args.name, args.source, **params)
    if frame.empty:
        print(f"(no rows) {load_query(args.name).question}")
    else:
        print(frame.to_string(index=False, max_colwidth=48))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="agentnb", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser(
        "demo",
        help="run the demo on the embedded default store",
        description="Run the demo. Example: agentnb demo --store sqlite:///.agentnb/demo.sqlite",
    )
    demo.add_argument("--store", default=None, help="store URL (default: SQLite in ./.agentnb/)")
    demo.set_defaults(func=_demo)

    export = sub.add_parser(
        "export",
        help="export committed events to Parquet or DuckDB (resumable, at least once)",
        description=(
            "Export committed events to an analytics sink; a second run exports only what is "
            "new. Example: agentnb export --to parquet:exports/agentnb --all "
            "--store sqlite:///.agentnb/agentnb.sqlite"
        ),
    )
    export.add_argument("--to", required=True, metavar="DEST", help="parquet:DIR or duckdb:FILE")
    which = export.add_mutually_exclusive_group()
    which.add_argument("--session", metavar="ID", help="only the session(s) with this id")
    which.add_argument("--all", action="store_true", help="every session of the store (default)")
    export.add_argument("--store", default=None, help="store URL (default: SQLite in ./.agentnb/)")
    export.add_argument("--name", default=None, help="sink name keying the watermark")
    export.add_argument(
        "--no-progress", dest="progress", action="store_false", help="no progress bar"
    )
    export.set_defaults(func=_export)

    query = sub.add_parser(
        "query",
        help="run an audit query (exporters/queries/NAME.sql) and print a table",
        description=(
            "Run an audit query over an export or a live store. Example: agentnb query "
            "approvals --source exports/agentnb --param since=2026-01-01. "
            "List the queries: agentnb query --list"
        ),
    )
    query.add_argument("name", nargs="?", help="query name (see --list)")
    query.add_argument(
        "--source", help="Parquet folder, duckdb:FILE, or a store URL (sqlite:///...)"
    )
    query.add_argument(
        "--param", action="append", default=[], metavar="K=V", help="a query parameter"
    )
    query.add_argument("--list", action="store_true", help="list the queries and exit")
    query.set_defaults(func=_query)

    args = parser.parse_args(argv)
    from agentnb.errors import AgentnbError

    try:
        result: int = args.func(args)
    except AgentnbError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return result


if __name__ == "__main__":
    sys.exit(main())
