"""The ``agentnb`` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any


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


def _keys(store: Any, session_id: str, user: str | None, agent: str | None) -> Any:
    import agentnb as nb

    keys = [
        r.key
        for r in store.list_sessions(user_id=user, agent_id=agent)
        if r.key.session_id == session_id
    ]
    if not keys:
        raise nb.SessionNotFound(f"no session {session_id!r} in {store.url}; see agentnb sessions")
    if len(keys) > 1:
        raise nb.InvalidInput(
            f"{len(keys)} sessions are called {session_id!r} "
            f"({', '.join(map(str, keys))}); narrow with --user/--agent"
        )
    return keys[0]


def _common(parser: argparse.ArgumentParser, *, session: bool = True) -> None:
    if session:
        parser.add_argument("session", help="the session id")
    parser.add_argument("--store", default=None, help="store URL (default: SQLite in ./.agentnb/)")
    parser.add_argument("--user", default=None, help="only sessions of this user")
    parser.add_argument("--agent", default=None, help="only sessions of this agent id")


def _sessions(args: argparse.Namespace) -> int:
    """List sessions with their size and the status of their latest task."""
    import agentnb as nb
    from agentnb.folds import Folds

    store = nb.open_store(args.store)
    try:
        records = store.list_sessions(user_id=args.user, agent_id=args.agent)
        print(f"{'session':<28} {'user':<14} {'agent':<20} {'events':>8}  latest task")
        for record in records:
            key = record.key
            state, inbox = Folds(store, key).refresh()
            latest = state.latest_turn
            queued = sum(
                1
                for c in inbox.commands.values()
                if c.kind == "submit"
                and c.turn_id not in state.turns
                and c.command_id not in inbox.rejected
            )
            status = latest.status if latest else "-"
            if queued:
                status += f" (+{queued} queued)"
            print(
                f"{key.session_id:<28} {key.user_id:<14} {key.agent_id:<20} "
                f"{state.seq:>8}  {status}"
            )
        if not records:
            print("(no sessions)")
    finally:
        store.close()
    return 0


def _show(args: argparse.Namespace) -> int:
    """Print a session's tasks, open requests and transcript."""
    import agentnb as nb
    from agentnb.folds import Folds

    store = nb.open_store(args.store)
    try:
        key = _keys(store, args.session, args.user, args.agent)
        state, _ = Folds(store, key).refresh()
        print(f"{key}  ({state.seq} events)\n")
        for turn in state.turns.values():
            print(
                f"task {turn.turn_id}  {turn.status:<11} runs={len(turn.run_ids)}  "
                f"{turn.input[:60]!r}"
            )
        for request_id, request in state.pending.items():
            print(f"waiting: {request['kind']} {request_id}: {request.get('prompt')}")
        print()
        for message in state.context:
            calls = ", ".join(f"{c.name}({c.arguments})" for c in message.tool_calls)
            text = message.text or (f"-> {calls}" if calls else "")
            print(f"{message.role:>9}: {text[: args.width]}")
    finally:
        store.close()
    return 0


def _tail(args: argparse.Namespace) -> int:
    """Print committed events of a session, and keep following with --follow."""
    import agentnb as nb

    store = nb.open_store(args.store)
    try:
        key = _keys(store, args.session, args.user, args.agent)
        log = nb.SessionLog(store, key)
        start = max(0, log.head() - args.lines)
        follow = log.follow(after=start, idle_timeout=None if args.follow else 0.0)
        try:
            for event in follow:
                brief = ", ".join(f"{k}={v}" for k, v in list(event.payload.items())[:3])
                print(
                    f"{event.seq:>7}  {event.occurred_at:%H:%M:%S.%f}  {event.type:<22} "
                    f"{brief[:90]}",
                    flush=True,
                )
        except KeyboardInterrupt:
            follow.close()
    finally:
        store.close()
    return 0


def _worker(args: argparse.Namespace) -> int:
    """Run a headless runtime that executes queued work of every session of the agent."""
    import importlib

    import agentnb as nb

    module_name, _, attr = args.agent.partition(":")
    if not module_name or not attr:
        raise nb.InvalidInput(f"--agent takes module:attribute, got {args.agent!r}")
    agent = getattr(importlib.import_module(module_name), attr)
    runtime = nb.Runtime(agent, store=args.store, auto_resume=True, lease_ttl=args.lease)
    print(f"worker for {agent.agent_id!r} on {runtime.store.url}; Ctrl-C to stop", flush=True)
    try:
        runtime.serve(poll=args.poll)
    except KeyboardInterrupt:
        pass
    finally:
        runtime.close()
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

    sessions = sub.add_parser(
        "sessions",
        help="list sessions",
        description="List sessions. Example: agentnb sessions --user alice",
    )
    _common(sessions, session=False)
    sessions.set_defaults(func=_sessions)

    show = sub.add_parser(
        "show",
        help="print a session's tasks and transcript",
        description="Print a session. Example: agentnb show conversation-001 --user alice",
    )
    _common(show)
    show.add_argument("--width", type=int, default=120, help="characters per message line")
    show.set_defaults(func=_show)

    tail = sub.add_parser(
        "tail",
        help="print a session's latest events (and follow new ones)",
        description="Print committed events. Example: agentnb tail conversation-001 --follow",
    )
    _common(tail)
    tail.add_argument("-n", "--lines", type=int, default=20, help="events to show first")
    tail.add_argument("-f", "--follow", action="store_true", help="keep printing new events")
    tail.set_defaults(func=_tail)

    worker = sub.add_parser(
        "worker",
        help="execute queued work of an agent's sessions (headless runtime)",
        description=(
            "Run a worker; crashed turns with nothing uncertain are resumed. Example: "
            "agentnb worker --store sqlite:///.agentnb/agentnb.sqlite "
            "--agent myproject.agents:cost_agent"
        ),
    )
    worker.add_argument("--store", default=None, help="store URL (default: SQLite in ./.agentnb/)")
    worker.add_argument("--agent", required=True, help="module:attribute of an nb.Agent")
    worker.add_argument("--poll", type=float, default=1.0, help="seconds between scans")
    worker.add_argument("--lease", type=float, default=10.0, help="lease seconds")
    worker.set_defaults(func=_worker)

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
