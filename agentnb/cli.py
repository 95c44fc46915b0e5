"""The agentnb command line: the demo, reading sessions, exports, audit queries, workers.

Why it is long: one parser and one short function per command of DESIGN §9, each with its
help text and example.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import agentnb as nb
from agentnb import states
from agentnb.children import children_of
from agentnb.errors import (
    AgentnbError,
    AppendConflict,
    Corrupt,
    Fenced,
    InvalidInput,
    LeaseHeld,
    SessionBusy,
    SessionNotFound,
    StorageError,
)
from agentnb.live import LiveEvent
from agentnb.ops.cli import add_commands as ops_commands
from agentnb.ops.cli import add_schedule_option, add_webhook_options, webhooks_of
from agentnb.projections.chat import interactions_of, tasks_of
from agentnb.runtime.runtime import (
    SESSION_STATUSES,
    archive_session,
    find_sessions,
    prunable,
    session_info,
    unarchive_session,
)
from agentnb.stores import default_store_url, split_url
from agentnb.workspace import remove_workspace

__all__ = [
    "EXIT_DATA",
    "EXIT_FAILED",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_USAGE",
    "exit_code",
    "main",
]

EXIT_OK = 0
EXIT_FAILED = 1
"""Refused or failed for another reason (the message says which), e.g. a lease is held."""
EXIT_USAGE = 2
"""A bad option or argument value (argparse's own code); nothing was read or written."""
EXIT_NOT_FOUND = 3
"""No such session, task, token, store or export."""
EXIT_DATA = 4
"""The store or export cannot be read, or holds data agentnb did not write (corrupt)."""

_EXIT_CODES = f"""\
exit codes:
  {EXIT_OK}  success
  {EXIT_FAILED}  refused or failed for another reason (the message says which)
  {EXIT_USAGE}  usage error: a bad option or argument value; nothing was read or written
  {EXIT_NOT_FOUND}  not found: no such session, task, token, store or export
  {EXIT_DATA}  data error: the store or export cannot be read, or is corrupt
Errors print one line on stderr ("error: ..."), never a traceback.
"""

_STORE_HELP = "store URL or SQLite file path (default: SQLite in ./.agentnb/)"

NULL = "-"
"""How every command's text output shows a missing value (JSON output uses null)."""
_CUT = "…"


def _not_found(message: str) -> int:
    """Print the ``error:`` line of something named that does not exist; its exit code."""
    print(f"error: {_visible(message)}", file=sys.stderr)
    return EXIT_NOT_FOUND


def exit_code(exc: AgentnbError) -> int:
    """The exit code of a command that stopped with ``exc`` (see ``agentnb --help``)."""
    if isinstance(exc, SessionNotFound):
        return EXIT_NOT_FOUND
    if isinstance(exc, ValueError):  # InvalidInput, InvalidLimit, InvalidCursor, ...
        return EXIT_USAGE
    if isinstance(exc, StorageError) and not isinstance(exc, LeaseHeld | Fenced | AppendConflict):
        return EXIT_DATA  # Corrupt, RecoveryLimitExceeded, a file that cannot be opened
    return EXIT_FAILED


# -- output helpers ----------------------------------------------------------------------------


_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
"""Characters a terminal acts on instead of showing (C0 and C1 controls: escape sequences
that set window titles, clear the screen, colour text; bidirectional overrides)."""
_BIDI = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
"""Bidirectional controls, escaped in ``--json`` output."""


def _visible(text: str) -> str:
    """``text`` with every character a terminal would act on shown escaped (``\x1b``)."""
    return _UNSAFE.sub(lambda m: repr(m.group())[1:-1], text)


def _fit(text: str, width: int) -> tuple[str, bool]:
    """``text`` on one line, its control characters escaped (untrusted text never reaches
    the terminal raw), at most ``width`` characters (0: no limit), ending in … if cut; and
    whether it was cut."""
    text = " ".join(text.split()) if "\n" in text or "\r" in text else text
    text = _visible(text)
    if width <= 0 or len(text) <= width:
        return text, False
    return text[: width - 1] + _CUT, True


def _cut(text: str, width: int) -> str:
    return _fit(text, width)[0]


def _is_null(value: Any) -> bool:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return True
    # pandas' NaT and NA, without importing pandas here (it is an optional dependency).
    return type(value).__name__ in {"NaTType", "NAType"}


def _jsonable(value: Any) -> Any:
    """``value`` as JSON-native data: nulls as None, times as ISO text, records as objects."""
    if _is_null(value):
        return None
    if isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        return _rounded(value) if math.isfinite(value) else str(value)
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if hasattr(value, "model_dump"):  # pydantic records (Message, Event)
        return _jsonable(value.model_dump(mode="json"))
    if hasattr(value, "tolist"):  # numpy scalars and arrays in dataframes
        return _jsonable(value.tolist())
    if isinstance(value, Iterable) and not isinstance(value, bytes):
        return [_jsonable(v) for v in value]
    return str(value)


def _rounded(value: float) -> float:
    """A float for JSON output: three decimals (a millisecond of a duration in seconds, a
    microsecond of one in ms), or three significant digits when it is smaller than that."""
    if value == 0:
        return 0.0
    return round(value, max(3, 2 - math.floor(math.log10(abs(value)))))


def _text(value: Any, width: int = 0) -> str:
    """One cell of text output: nulls as ``NULL``, structures as compact JSON, cut to width."""
    if _is_null(value):
        return NULL
    if isinstance(value, str):
        shown = value
    elif isinstance(value, datetime):
        shown = value.isoformat(sep=" ", timespec="milliseconds")
    elif isinstance(value, bool | int | float | date):
        shown = str(value)
    else:
        shown = json.dumps(
            _without_nulls(_jsonable(value)), ensure_ascii=False, separators=(",", ":")
        )
    return _cut(shown, width)


def _without_nulls(value: Any) -> Any:
    """JSON data with null fields left out, so text output spells a null only as ``NULL``."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [NULL if v is None else _without_nulls(v) for v in value]
    return value


def _print_json(value: Any) -> None:
    # Bidirectional controls as \\u escapes (the same JSON value): raw, they would show a
    # terminal's neighbouring text reversed.
    text = json.dumps(_jsonable(value), ensure_ascii=False, indent=2)
    print(_BIDI.sub(lambda m: f"\\u{ord(m.group()):04x}", text))


def _table(columns: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """Left-aligned columns, two spaces apart."""
    rows = [list(r) for r in rows]
    widths = [max([len(c), *(len(r[i]) for r in rows)]) for i, c in enumerate(columns)]
    lines = [list(columns), *rows]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in lines
    ]


# -- argument checks -----------------------------------------------------------------------------


def _count(text: str) -> int:
    """argparse type: a whole number >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected 0 or more, got {value}")
    return value


def _seconds(text: str) -> float:
    """argparse type: seconds >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not 0 <= value < math.inf:
        raise argparse.ArgumentTypeError(f"expected 0 or more seconds, got {text!r}")
    return value


def _local_path(target: str) -> str | None:
    """The local file or folder a store URL or a query source names; None when remote."""
    for prefix in ("parquet:", "duckdb:"):
        if target.startswith(prefix) and not target.startswith(f"{prefix}//"):
            return os.path.expanduser(target[len(prefix) :])
    if target.startswith("sqlite:"):
        path = split_url(target).path
        return os.path.expanduser(path[1:] if path.startswith("/") else path) or None
    if "://" in target or target.startswith(("memory:", "postgres")):
        return None
    return os.path.expanduser(target)


def _store_url(text: str) -> str:
    """argparse type of ``--store``: a store URL, or a plain file path, which names an SQLite
    file (``.agentnb/agentnb.sqlite`` is ``sqlite:///.agentnb/agentnb.sqlite``)."""
    if "://" in text or text.startswith(("memory:", "sqlite:")):
        return text
    path = os.path.expanduser(text)
    if os.path.isdir(path):
        raise argparse.ArgumentTypeError(
            f"{text!r} is a folder: pass the SQLite file in it (e.g. "
            f"{os.path.join(text, 'agentnb.sqlite')}) or a store URL"
        )
    return f"sqlite:///{path}"


def _open_existing_store(url: str | None) -> nb.SessionStore:
    """Open a store to read it; a store file that does not exist is not created."""
    url = url or default_store_url()
    path = _local_path(url)
    if path is not None and not os.path.exists(path):
        raise SessionNotFound(
            f"no store at {path}: nothing was recorded there; run `agentnb demo` to make one, "
            "or pass --store URL"
        )
    return nb.open_store(url)


def _keys(store: nb.SessionStore, session_id: str, user: str | None, agent: str | None) -> Any:
    keys = [
        r.key
        for r in store.list_sessions(user_id=user, agent_id=agent)
        if r.key.session_id == session_id
    ]
    if not keys:
        named = (("of user", user), ("for agent", agent))
        whose = "".join(f" {what} {value!r}" for what, value in named if value)
        listing = "agentnb sessions" + (f" --user {user}" if user else "")
        raise SessionNotFound(f"no session {session_id!r}{whose} in {store.url}; see {listing}")
    if len(keys) > 1:
        raise InvalidInput(
            f"{len(keys)} sessions are called {session_id!r} "
            f"({', '.join(map(str, keys))}); narrow with --user/--agent"
        )
    return keys[0]


def _executing(store: nb.SessionStore, key: nb.SessionKey) -> bool:
    """Whether a live holder executes the session (a holder known dead does not count)."""
    from agentnb.holders import holder_alive

    lease = store.current_lease(key)
    return lease is not None and holder_alive(lease.owner) is not False


def _parked(state: Any, inbox: Any, executing: bool) -> dict[str, Any] | None:
    """The turn queued work waits behind, its status and the ways out; None if none."""
    from agentnb.projections.queue import blocking_turn, ways_out

    blocking = blocking_turn(state, inbox, executing=executing)
    if blocking is None:
        return None
    turn, status = blocking
    return {"turn_id": turn.turn_id, "status": status, "ways_out": ways_out(state, turn, status)}


# -- commands ------------------------------------------------------------------------------------


def _demo(args: argparse.Namespace) -> int:
    """Run the scripted demo session on the embedded default store."""
    from agentnb.demo import run_demo

    run_demo(args.store)
    return EXIT_OK


def _export(args: argparse.Namespace) -> int:
    """Drain committed events of one session or every session into a sink."""
    from agentnb.export import Exporter, open_sink  # optional: the export extra

    destination = args.to if args.to is not None else f"otlp:{args.otlp}"
    store = _open_existing_store(args.store)
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
            _print_json([{"name": n, "question": load_query(n).question} for n in list_queries()])
        else:
            for name in list_queries():
                print(f"{name:<24} {load_query(name).question}")
        return EXIT_OK
    if args.source is None:
        raise InvalidInput("--source is needed: a Parquet folder, a DuckDB file or a store URL")
    query = load_query(args.name)
    params = _query_params(args.name, args.param)
    path = _local_path(args.source)
    if path is not None and not os.path.exists(path):
        raise SessionNotFound(
            f"no export or store at {path}; export one first, e.g. "
            f"agentnb export --to parquet:{path}"
        )
    frame = _run_query(args.name, args.source, params)
    rows = [dict(zip(frame.columns, r, strict=True)) for r in frame.itertuples(index=False)]
    if args.json:
        _print_json(rows)
    elif not rows:
        print(f"(no rows) {query.question}")
    else:
        cells = ([_text(r[c], args.width) for c in frame.columns] for r in rows)
        print("\n".join(_table([str(c) for c in frame.columns], cells)))
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


def _common(parser: argparse.ArgumentParser, *, session: bool = True) -> None:
    if session:
        parser.add_argument("session", help="the session id")
    parser.add_argument("--store", default=None, type=_store_url, help=_STORE_HELP)
    parser.add_argument("--user", default=None, help="only sessions of this user")
    parser.add_argument("--agent", default=None, help="only sessions of this agent id")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def _sessions(args: argparse.Namespace) -> int:
    """List sessions, newest activity first, from the catalogue (one page of ``--limit``)."""
    store = _open_existing_store(args.store)
    try:
        infos = find_sessions(
            store,
            agent_id=args.agent,
            user_id=args.user,
            status=args.status or None,
            labels=_labels(args.label),
            since=_when(args.since, "--since"),
            until=_when(args.until, "--until"),
            search=args.search,
            limit=args.limit,
            before=args.before,
            archived=None if args.all else args.archived,
        )
        out: list[dict[str, Any]] = []
        for info in infos:  # one page: folding each of its logs stays bounded
            key = info.key
            with states.read(store, key) as (state, inbox):
                executing = _executing(store, key)
                tasks = tasks_of(state, inbox, executing=executing)
            started = [t for t in tasks if t.status != "queued"]
            out.append(
                {
                    **dataclasses.asdict(key),
                    "title": info.title,
                    "labels": dict(info.labels),
                    "status": info.status,
                    "created_at": info.created_at,
                    "updated_at": info.updated_at,
                    "last_activity": info.last_activity,
                    "archived_at": info.archived_at,
                    "events": state.seq,
                    "turns": info.counts.turns,
                    "bytes": info.counts.bytes,
                    "tasks": len(tasks),
                    "latest_status": started[-1].status if started else None,
                    "queued": sum(1 for t in tasks if t.status == "queued"),
                    "parked_behind": _parked(state, inbox, executing),
                    "cursor": info.cursor,
                }
            )
    finally:
        store.close()
    if args.json:
        _print_json(out)
        return EXIT_OK
    if not out:
        print("(no sessions)")
        return EXIT_OK
    rows = [
        [
            s["session_id"],
            s["user_id"],
            s["agent_id"],
            _cut(s["title"] or "", 40) + (" (archived)" if s["archived_at"] else ""),
            str(s["events"]),
            _text(s["latest_status"])
            + (f" (+{s['queued']} queued" if s["queued"] else "")
            + (
                f", parked behind {s['parked_behind']['turn_id']})"
                if s["queued"] and s["parked_behind"]
                else (")" if s["queued"] else "")
            ),
        ]
        for s in out
    ]
    print("\n".join(_table(["session", "user", "agent", "title", "events", "latest task"], rows)))
    if len(out) == args.limit:
        print(f"(more: agentnb sessions --before {out[-1]['cursor']})")
    return EXIT_OK


def _archive(args: argparse.Namespace) -> int:
    """Archive one session (``Runtime.archive``, without an agent)."""
    return _shelve(args, archive=True)


def _unarchive(args: argparse.Namespace) -> int:
    """Take one session out of the archive (``Runtime.unarchive``)."""
    return _shelve(args, archive=False)


def _shelve(args: argparse.Namespace, *, archive: bool) -> int:
    store = _open_existing_store(args.store)
    try:
        key = _keys(store, args.session, args.user, args.agent)
        info = archive_session(store, key) if archive else unarchive_session(store, key)
    finally:
        store.close()
    if args.json:
        _print_json(info)
    elif archive:
        print(
            f"archived session {key}: agentnb sessions --archived lists it; "
            f"agentnb unarchive {key.session_id} --user {key.user_id} brings it back"
        )
    else:
        print(f"session {key} is out of the archive: it takes new work again")
    return EXIT_OK


def _delete(args: argparse.Namespace) -> int:
    """Delete one session's data, leaving a tombstone; refused while a turn runs."""
    store = _open_existing_store(args.store)
    try:
        key = _keys(store, args.session, args.user, args.agent)
        record = store.get_session(key)
        if record is not None and session_info(record, now=store.clock.now()).status == ("running"):
            raise SessionBusy(
                f"session {key} has a turn running; interrupt it from its notebook or worker "
                "(session.interrupt()), or delete it there with session.delete(force=True)"
            )
        with states.read(store, key) as (state, _):
            bound = state.workspace
        tombstone = store.delete_session(key, by=_who(), reason=args.reason)
        _remove_workspace(bound)
    finally:
        store.close()
    if args.json:
        _print_json(tombstone)
    else:
        print(f"deleted session {key} ({tombstone.events} events) as {tombstone.deleted_by}")
    return EXIT_OK


def _remove_workspace(bound: dict[str, Any] | None) -> None:
    """A deleted session's working files go with it (``nb.Workspace``; never a shared root)."""
    if bound is not None:
        remove_workspace(Path(bound["path"]), Path(bound["root"]))


def _prune(args: argparse.Namespace) -> int:
    """Delete (or with the default dry run, list) sessions a retention rule selects."""
    store = _open_existing_store(args.store)
    deleted = 0
    try:
        found = prunable(
            store,
            _duration(args.older_than),
            status=args.status or "idle",
            labels=_labels(args.label),
            agent_id=args.agent,
            user_id=args.user,
        )
        if args.apply:
            for info in found:
                with states.read(store, info.key) as (state, _):
                    bound = state.workspace
                try:
                    store.delete_session(info.key, by=_who(), reason=args.reason)
                except LeaseHeld:
                    continue  # it came back to life since it was listed: keep it
                _remove_workspace(bound)
                deleted += 1
    finally:
        store.close()
    if args.json:
        _print_json({"dry_run": not args.apply, "deleted": deleted, "sessions": found})
        return EXIT_OK
    verb = "deleted" if args.apply else "would delete (dry run; --apply deletes)"
    print(f"{verb}: {deleted if args.apply else len(found)} session(s)")
    for info in found:
        print(f"  {info.key}  {info.status}  last activity {info.last_activity:%Y-%m-%d %H:%M}")
    return EXIT_OK


def _labels(items: Sequence[str] | None) -> dict[str, str] | None:
    """``--label k=v`` values as a dict (None without any)."""
    if not items:
        return None
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InvalidInput(f"--label takes key=value, got {item!r}")
        out[key] = value
    return out


def _when(text: str | None, option: str) -> datetime | None:
    """An ISO date or date-time (UTC unless it says otherwise), or None."""
    if text is None:
        return None
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidInput(
            f"{option} takes an ISO date or date-time such as 2026-01-31 or "
            f"2026-01-31T12:00+01:00, got {text!r}"
        ) from None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}


def _duration(text: str) -> float:
    """``30d``, ``12h``, ``90m``, ``45s``, ``2w`` or plain seconds."""
    number, unit = (text[:-1], text[-1]) if text[-1:] in _UNITS else (text, "s")
    try:
        value = float(number)
    except ValueError:
        raise InvalidInput(
            f"--older-than takes a duration such as 30d, 12h, 90m or seconds, got {text!r}"
        ) from None
    return value * _UNITS[unit]


def _who() -> str:
    """Who deletes from the command line, for the tombstone."""
    import getpass

    try:
        return f"cli:{getpass.getuser()}"
    except (OSError, KeyError):  # no login name (a container without a passwd entry)
        return "cli"


def _show(args: argparse.Namespace) -> int:
    """Print a session's tasks, open requests and transcript."""
    store = _open_existing_store(args.store)
    try:
        key = _keys(store, args.session, args.user, args.agent)
        with states.read(store, key) as (state, inbox):
            executing = _executing(store, key)
            tasks = tasks_of(state, inbox, executing=executing)
            parked = _parked(state, inbox, executing)
            pending = list(interactions_of(state).values())
            messages = list(state.context)
            spawned = state.children_of(None)
        children = children_of(store, spawned)
    finally:
        store.close()
    if args.json:
        _print_json(
            {
                "session": dataclasses.asdict(key),
                "events": state.seq,
                "tasks": tasks,
                "parked_behind": parked,
                "pending": pending,
                "subagents": children,
                "messages": messages,
            }
        )
        return EXIT_OK
    width = args.width
    cut = 0

    def line(text: str) -> None:
        nonlocal cut
        shown, was_cut = _fit(text, width)
        cut += was_cut
        print(shown)

    print(f"session {key}  ({state.seq} events)\n")
    print("tasks:" if tasks else "tasks: (none)")
    for task in tasks:
        runs = len(task.run_ids)
        line(
            f"  {task.turn_id}  {task.status:<11} {runs} run{'s' if runs != 1 else ''}  "
            f"{task.input!r}"
        )
    queued = sum(1 for t in tasks if t.status == "queued")
    if parked is not None and queued:
        line(
            f"\n{queued} queued task{'s' if queued != 1 else ''} parked behind turn "
            f"{parked['turn_id']}, which is {parked['status']}: {parked['ways_out']}"
        )
    if pending:
        print("\nwaiting for an answer:")
    for request in pending:
        line(f"  {request.request_id}  {request.kind}: {_text(request.prompt)}")
    if children:
        print("\nsub-agents (agentnb show <session>/<call id> opens one):")
    for child in children:
        said = child.output if child.output is not None else child.error
        line(
            f"  {child.call_id}  {child.status:<11} {child.name or child.agent_id}  "
            f"{child.task!r}" + (f" -> {_text(said)}" if said is not None else "")
        )
    print("\ntranscript:" if messages else "\ntranscript: (empty)")
    for message in messages:
        calls = ", ".join(f"{c.name}({_text(c.arguments)})" for c in message.tool_calls)
        text = message.text or (f"-> {calls}" if calls else NULL)
        line(f"{message.role:>9}: {text}")
    if cut:
        print(
            f"\n({cut} line{'s were' if cut != 1 else ' was'} cut at {width} characters, "
            "marked …; --width 0 prints them whole, --json prints everything)"
        )
    return EXIT_OK


def _tail(args: argparse.Namespace) -> int:
    """Print committed events of a session, and keep following with --follow."""
    store = _open_existing_store(args.store)
    try:
        key = _keys(store, args.session, args.user, args.agent)
        log = nb.SessionLog(store, key)
        start = max(0, log.head() - args.lines)
        follow = log.follow(after=start, idle_timeout=None if args.follow else 0.0)
        # Events are ordered by seq, not by time: one made a moment before the event above it
        # (in the same commit) shows that event's time, so the column never runs backwards.
        shown_at: datetime | None = None
        try:
            for event in follow:
                if args.json:
                    print(json.dumps(_jsonable(event), ensure_ascii=False), flush=True)
                    continue
                shown_at = max(shown_at or event.occurred_at, event.occurred_at)
                shown = [(k, v) for k, v in event.payload.items() if not _is_null(v)][:3]
                brief = ", ".join(f"{k}={_text(v)}" for k, v in shown)
                print(
                    f"{event.seq:>7}  {shown_at:%H:%M:%S.%f}  {event.type:<22} "
                    f"{_cut(brief, 90)}".rstrip(),
                    flush=True,
                )
        except KeyboardInterrupt:
            follow.close()
    finally:
        store.close()
    return EXIT_OK


def _resume(args: argparse.Namespace) -> int:
    """Accept a resume of a session's interrupted turn; a worker carries it out."""
    from agentnb.commands import Commands, StoreHost
    from agentnb.projections.decisions import latest_unfinished

    store = _open_existing_store(args.store)
    try:
        key = _keys(store, args.session, args.user, args.agent)
        turn_id = args.turn
        if turn_id is None:
            with states.read(store, key) as (state, _):
                latest = latest_unfinished(state)
            if latest is None:
                raise nb.CannotResume(
                    f"session {key} has no unfinished turn to resume; see agentnb show"
                )
            turn_id = latest.turn_id
        command_id = Commands(StoreHost(store, key)).resume(turn_id).command_id
        result = _carried_out(store, key, command_id, args.wait)
    finally:
        store.close()
    return _report("resume", key, turn_id, command_id, result, args, store.url)


def _cancel(args: argparse.Namespace) -> int:
    """Cancel a session's queued, parked or running turn (a running one is interrupted)."""
    from agentnb.commands import Commands, StoreHost

    store = _open_existing_store(args.store)
    try:
        key = _keys(store, args.session, args.user, args.agent)
        with states.read(store, key) as (state, inbox):
            submitted = (c.turn_id for c in inbox.commands.values() if c.kind == "submit")
            if args.turn not in state.turns and args.turn not in submitted:
                return _not_found(
                    f"session {key.session_id} has no task {args.turn!r}; agentnb show "
                    f"{key.session_id} lists its tasks and their turn ids"
                )
        command_id = Commands(StoreHost(store, key)).cancel(args.turn)
        result = "done" if command_id is None else _carried_out(store, key, command_id, args.wait)
    finally:
        store.close()
    return _report("cancel", key, args.turn, command_id, result, args, store.url)


def _carried_out(store: nb.SessionStore, key: nb.SessionKey, command_id: str, wait: float) -> str:
    """Wait up to ``wait`` seconds for a runtime to carry the accepted command out: "done",
    "rejected: <why>", or "waiting" (nobody took it up yet)."""
    import time

    deadline = time.monotonic() + wait
    while True:
        with states.read(store, key) as (state, inbox):
            if command_id in inbox.rejected:
                return f"rejected: {inbox.rejected[command_id]}"
            if command_id in state.handled or command_id in state.run_of_command:
                return "done"
            seen = state.seq
        left = deadline - time.monotonic()
        if left <= 0:
            return "waiting"
        store.wait_for_head(key, seen, min(0.5, left))


def _report(
    verb: str,
    key: nb.SessionKey,
    turn_id: str,
    command_id: str | None,
    result: str,
    args: argparse.Namespace,
    url: str,
) -> int:
    """Print what became of a command a door accepted; a refusal exits 1."""
    if args.json:
        _print_json(
            {"session": key, "turn_id": turn_id, "command_id": command_id, "result": result}
        )
    elif result == "done":
        print(f"{verb}: turn {turn_id} of session {key}: done")
    elif result == "waiting":
        print(
            f"{verb} of turn {turn_id} accepted (command {command_id}); no worker has carried "
            f"it out yet. Start one on this store: agentnb worker --store {url} --agent "
            "module:attribute"
        )
    else:
        print(f"{verb} of turn {turn_id}: {_visible(result)}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def _worker(args: argparse.Namespace) -> int:
    """Run a headless runtime that executes queued work of the agent's sessions.

    SIGTERM and SIGINT stop it cooperatively: the runs it executes are interrupted at their
    next boundary, their ends committed and their leases released (a turn stopped so, with
    nothing uncertain, is resumed by the next worker that claims its session); then it
    exits 0. A second signal exits at once.
    """
    agent = _load_agent(args.agent)
    limits = _worker_limits(args)
    store = _worker_store(args.store, args.concurrency)
    try:
        runtime = nb.Runtime(
            agent,
            store=store,
            auto_resume=_AUTO_RESUME[args.auto_resume],
            lease_ttl=args.lease,
            accept_agent_change=args.accept_agent_change,
            limits=limits,
            schedules=args.schedules,
        )
    except BaseException:
        if isinstance(store, nb.SessionStore):
            store.close()
        raise
    stop = threading.Event()

    def on_signal(*_: object) -> None:
        if stop.is_set():  # a second signal: leave now; the runs are recovered later
            print("worker: stopping at once (second signal)", file=sys.stderr, flush=True)
            os._exit(130)
        stop.set()

    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, on_signal)
    print(f"worker for {agent.agent_id!r} on {runtime.store.url}; Ctrl-C to stop", flush=True)
    report = None if args.quiet else _TaskLines(runtime)
    try:
        runtime.serve(poll=args.poll, stop=stop, concurrency=args.concurrency)
    except KeyboardInterrupt:
        pass
    finally:
        runtime.close()
        if report is not None:
            report.close()
        if isinstance(store, nb.SessionStore):
            store.close()
    return EXIT_OK


def _load_agent(spec: str, command: str = "worker") -> nb.Agent:
    """``module:attribute``, imported with the current directory first on the import path
    (as uvicorn does), so ``agentnb worker --agent mymodule:agent`` works from the folder
    that holds ``mymodule.py``. ``command`` names the command in the advice."""
    import importlib

    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise InvalidInput(
            f"--agent takes module:attribute, got {spec!r} (the demo's: agentnb.demo:agent)"
        )
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.insert(0, here)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InvalidInput(
            f"--agent {spec}: cannot import {module_name} ({exc}); run agentnb {command} from "
            "the folder that holds the module, or put that folder on PYTHONPATH (the demo's "
            "agent: --agent agentnb.demo:agent)"
        ) from None
    try:
        agent = getattr(module, attr)
    except AttributeError:
        agents = sorted(k for k, v in vars(module).items() if isinstance(v, nb.Agent))
        found = f"its agents: {', '.join(agents)}" if agents else "it defines no nb.Agent"
        raise InvalidInput(
            f"--agent {spec}: {module_name} has no attribute {attr!r} ({found})"
        ) from None
    if not isinstance(agent, nb.Agent):
        raise InvalidInput(f"--agent {spec}: {attr} is a {type(agent).__name__}, not an nb.Agent")
    return agent


_LIMIT_FLAGS = {
    "max_queued": "max_queued_commands",
    "max_steers": "max_pending_steers",
    "max_recovery_events": "max_recovery_events",
    "max_recovery_bytes": "max_recovery_bytes",
    "max_session_events": "max_session_events",
    "max_session_bytes": "max_session_bytes",
    "max_reply_chars": "max_reply_chars",
    "max_tool_calls": "max_tool_calls_per_reply",
    "max_tool_result_chars": "max_tool_result_chars",
}
"""``agentnb worker`` flag (``--max-queued``...) -> the ``nb.Limits`` field it sets."""


def _worker_limits(args: argparse.Namespace) -> nb.Limits:
    """The ``nb.Limits`` of the worker's flags (defaults for those not given)."""
    given = {
        field: getattr(args, flag)
        for flag, field in _LIMIT_FLAGS.items()
        if getattr(args, flag) is not _UNSET
    }
    return nb.Limits(**given)


_UNSET: Any = object()


def _limit(text: str) -> int | None:
    """argparse type of a limit: a whole number >= 1, or ``none`` for no bound."""
    if text.strip().lower() == "none":
        return None
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a whole number (or none), got {text!r}"
        ) from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected 1 or more, got {value}")
    return value


class _TaskLines:
    """One line on stdout when the worker starts a task's run and one when that run ends:
    when, whose session, the status and the task's own text (``--quiet`` turns it off)."""

    def __init__(self, runtime: nb.Runtime) -> None:
        self._runtime = runtime
        self._events = runtime.all_events()
        self._started: dict[str, float] = {}
        self._thread = threading.Thread(target=self._run, name="agentnb-worker-lines", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._events.close()
        self._thread.join(2.0)

    def _run(self) -> None:
        for event in self._events:
            if not isinstance(event, LiveEvent) or event.kind != "status":
                continue
            status, key, run_id = event.data.get("status"), event.session, event.run_id or ""
            if key is None or not isinstance(status, str):
                continue
            now = time.monotonic()
            if status == "running":
                self._started[run_id] = now
                tail = ""
            else:
                began = self._started.pop(run_id, None)
                tail = f"  ({now - began:.1f} s)" if began is not None else ""
            text = self._task_text(key, event.turn_id, event.data.get("task"))
            when = datetime.now().astimezone().strftime("%H:%M:%S")
            print(f"{when}  {key.user_id}/{key.session_id}  {status:<11} {text}{tail}", flush=True)

    def _task_text(self, key: nb.SessionKey, turn_id: str | None, sent: object) -> str:
        """The task's own text on one line: as the notification brought it (``sent``), else
        read back from the session (its turn id when it cannot be read). Reading back costs
        store reads for every line, a few statements per turn on PostgreSQL."""
        if isinstance(sent, str):
            return f'"{_cut(sent, 60)}"'
        try:
            session = self._runtime.open(key.session_id, user_id=key.user_id)
            task = next((t for t in session.tasks() if t.turn_id == turn_id), None)
        except AgentnbError:
            task = None
        if task is None:
            return str(turn_id)
        return f'"{_cut(task.input, 60)}"'


_AUTO_RESUME: dict[str, bool | str] = {"safe": True, "unknown": "unknown", "off": False}
"""``worker --auto-resume``: what a worker does with turns a crash cut off."""


def _worker_store(url: str | None, concurrency: int) -> str | nb.SessionStore | None:
    """The worker's store: on PostgreSQL, a pool with a connection for each session it
    executes at once, plus two (lease renewals, claims), so that sessions do not queue for
    a connection between their commits; any other URL as given."""
    if url is None or split_url(url).scheme.lower() not in ("postgresql", "postgres"):
        return url
    from agentnb.stores.postgres import PostgresStore  # the postgres extra

    return PostgresStore(url, pool_size=max(10, concurrency + 2))


def _serve(args: argparse.Namespace) -> int:
    """Serve the agent's sessions over HTTP: the /v1 API, its stream and the chat page.

    SIGTERM and SIGINT stop it: streams end, runs in flight are interrupted and recorded
    (as ``Runtime.close`` does), then it exits 0.
    """
    from agentnb.server import serve  # the server extra

    agent = _load_agent(args.agent, "serve")
    store = _worker_store(args.store, args.concurrency)
    try:
        runtime = nb.Runtime(
            agent,
            store=store,
            execute=not args.no_execute,
            auto_resume=args.auto_resume,
            accept_agent_change=args.accept_agent_change,
            webhooks=webhooks_of(args),
            schedules=args.schedules,
        )
    except BaseException:
        if isinstance(store, nb.SessionStore):
            store.close()
        raise
    auth = args.auth == "token"
    where = "localhost" if args.host in {"127.0.0.1", "::1"} else args.host
    sign_in = None
    if auth and args.token_for is not None:
        from agentnb import tokens

        sign_in = tokens.issue(
            runtime.store,
            args.token_for,
            label="agentnb serve --token-for",
            expires_at=runtime.store.clock.now() + _TOKEN_FOR_SECONDS,
        )

    def ready(port: int) -> None:
        mode = "API only; workers execute" if args.no_execute else "executing"
        print(
            f"agentnb serving {agent.agent_id!r} on {runtime.store.url} ({mode}): "
            f"http://{where}:{port}/ (API /v1, docs /docs); Ctrl-C to stop",
            flush=True,
        )
        if sign_in is not None:
            print(
                f"sign in on the page as {args.token_for!r} with this token (it is revoked "
                f"when this server stops): {sign_in[0]}",
                flush=True,
            )
        elif auth and not runtime.store.list_tokens():
            print("no tokens yet: agentnb token add USER --store ...", flush=True)

    try:
        serve(
            runtime,
            host=args.host,
            port=args.port,
            auth=auth,
            cors_origins=args.cors_origin or (),
            max_body=args.max_body,
            allowed_hosts=args.allowed_host or (),
            ready=ready,
            log_level=args.log_level,
            proxy_headers=True,
            forwarded_allow_ips=args.forwarded_allow_ips,
        )
    finally:
        runtime.close()
        if isinstance(store, nb.SessionStore):
            store.close()
        if sign_in is not None:
            _revoke_quietly(args.store, sign_in[1].token_id)
    return EXIT_OK


_TOKEN_FOR_SECONDS = 24 * 3600.0
"""How long a ``serve --token-for`` token lasts if its server dies before revoking it."""


def _revoke_quietly(url: str | None, token_id: str) -> None:
    """Revoke the token ``serve --token-for`` issued (a memory store went with its server)."""
    url = url or default_store_url()
    if split_url(url).scheme.lower() == "memory":
        return
    try:
        with contextlib.closing(nb.open_store(url)) as store:
            store.revoke_token(token_id)
    except AgentnbError as exc:
        print(f"warning: the sign-in token {token_id} was not revoked: {exc}", file=sys.stderr)


def _token(args: argparse.Namespace) -> int:
    """``agentnb token add|list|revoke``: the service's bearer tokens in a store."""
    from agentnb import tokens

    store = nb.open_store(args.store or default_store_url())
    try:
        if args.action == "add":
            token, record = tokens.issue(store, args.user, label=args.label)
            if args.json:
                _print_json({"token": token, **tokens.record_fields(record)})
            else:
                print(token)
                print(
                    f"(token {record.token_id} for user {record.user_id!r}: shown once, "
                    "the store keeps only its digest)",
                    file=sys.stderr,
                )
            return EXIT_OK
        if args.action == "revoke":
            if all(t.token_id != args.token_id for t in store.list_tokens()):
                return _not_found(
                    f"no token {args.token_id!r} in {store.url}; agentnb token list shows them"
                )
            record = tokens.revoke(store, args.token_id)
            if args.json:
                _print_json(tokens.record_fields(record))
            else:
                print(f"revoked {record.token_id} (user {record.user_id!r}) and its sign-ins")
            return EXIT_OK
        records = [t for t in store.list_tokens(args.user) if args.all or t.parent is None]
    finally:
        store.close()
    rows = [tokens.record_fields(t) for t in records]
    if args.json:
        _print_json(rows)
        return EXIT_OK
    if not rows:
        print("(no tokens)")
        return EXIT_OK

    def when(seconds: float | None) -> str:
        if seconds is None:
            return NULL
        return datetime.fromtimestamp(seconds, UTC).isoformat(sep=" ", timespec="seconds")

    table = [
        [
            r["token_id"],
            r["user_id"],
            _cut(r["label"], 32) or NULL,
            when(r["created_at"]),
            when(r["last_used_at"]),
            "revoked " + when(r["revoked_at"]) if r["revoked_at"] else "active",
        ]
        for r in rows
    ]
    print("\n".join(_table(["token", "user", "label", "created", "last used", "state"], table)))
    return EXIT_OK


def _service_commands(
    command: Callable[[str, Callable[[argparse.Namespace], int], str, str], Any],
) -> None:
    """``serve`` and ``token``; the operations (``backup``, ``verify``, ``restore``,
    ``migrate``) from ``agentnb.ops.cli``."""
    ops_commands(command, _store_url, _STORE_HELP)
    serve = command(
        "serve",
        _serve,
        "serve an agent's sessions over HTTP: the /v1 API, its stream and a chat page",
        "Serve the sessions of an agent: a JSON API under /v1 with Server-Sent Events, a "
        "browser chat at /, OpenAPI docs at /docs. Every request needs a token (agentnb "
        "token add). With --no-execute this server only accepts and reads, while agentnb "
        "worker processes on PostgreSQL execute. Example: agentnb serve --agent "
        "myproject.agents:cost_agent --store sqlite:///.agentnb/agentnb.sqlite --port 8000",
    )
    serve.add_argument("--agent", required=True, help="module:attribute of an nb.Agent")
    serve.add_argument("--store", default=None, help="store URL (default: SQLite in ./.agentnb/)")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on")
    serve.add_argument("--port", type=int, default=8000, help="port (0: a free one)")
    serve.add_argument(
        "--no-execute",
        action="store_true",
        help="accept and read only; agentnb worker processes execute (PostgreSQL)",
    )
    serve.add_argument(
        "--auth",
        choices=["token", "none"],
        default="token",
        help="token (default): bearer tokens and the page's sign-in; none: every request "
        "acts for user 'default' (loopback hosts only)",
    )
    serve.add_argument(
        "--allowed-host",
        action="append",
        metavar="NAME",
        help="with --auth none, a host name the service answers to besides localhost, "
        "127.0.0.1 and [::1] (repeat)",
    )
    serve.add_argument(
        "--cors-origin",
        action="append",
        metavar="ORIGIN",
        help="an origin other pages may call the API from, e.g. https://app.example.com "
        "(repeat; default none)",
    )
    serve.add_argument(
        "--max-body", type=int, default=1 << 20, help="largest request body in bytes (1 MiB)"
    )
    serve.add_argument(
        "--auto-resume",
        action="store_true",
        help="resume turns a crash cut off when nothing uncertain blocks them",
    )
    serve.add_argument(
        "--concurrency", type=int, default=16, help="PostgreSQL connections for sessions"
    )
    serve.add_argument(
        "--accept-agent-change",
        action="store_true",
        help="take over sessions bound to another version of the agent",
    )
    serve.add_argument(
        "--forwarded-allow-ips",
        default="127.0.0.1",
        help="proxies whose X-Forwarded-* headers are trusted (https behind a proxy)",
    )
    add_webhook_options(serve)
    add_schedule_option(serve)
    serve.add_argument(
        "--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"]
    )
    serve.add_argument(
        "--token-for",
        metavar="USER",
        default=None,
        help="issue a token for USER as the server starts, print it, and revoke it when the "
        "server stops (for trying the page: make serve; agentnb token add for lasting ones)",
    )

    token = command(
        "token",
        _token,
        "add, list or revoke the service's bearer tokens",
        "Manage the tokens agentnb serve accepts. The store keeps only a digest: a token is "
        "printed once, by add. Examples: agentnb token add alice --label laptop; agentnb "
        "token list; agentnb token revoke tok_0123456789abcdef",
    )
    actions = token.add_subparsers(dest="action", required=True, metavar="ACTION")
    add = actions.add_parser(
        "add",
        help="issue a token for a user (printed once)",
        description="Issue a token for USER and print it once. "
        "Example: agentnb token add alice --label laptop",
    )
    add.add_argument("user", help="the user the token acts for")
    add.add_argument("--label", default="", help="what the token is for")
    listing = actions.add_parser(
        "list",
        help="list tokens (never the tokens themselves)",
        description="List the tokens (ids, users, labels, last use). "
        "Example: agentnb token list --user alice",
    )
    listing.add_argument("--user", default=None, help="only this user's tokens")
    listing.add_argument("--all", action="store_true", help="also the browser sign-ins")
    revoke = actions.add_parser(
        "revoke",
        help="revoke a token and its browser sign-ins",
        description="Revoke a token; the pages signed in with it are signed out. "
        "Example: agentnb token revoke tok_0123456789abcdef",
    )
    revoke.add_argument("token_id", help="the token's id (tok_...), from agentnb token list")
    for p in (add, listing, revoke):
        p.add_argument("--store", default=None, help="store URL (default: SQLite in ./.agentnb/)")
        p.add_argument("--json", action="store_true", help="print JSON instead of text")


# -- the parser ------------------------------------------------------------------------------


class _Formatter(argparse.HelpFormatter):
    """Wraps descriptions as usual, and keeps the exit-code table's lines as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith("exit codes:"):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def _lifecycle_commands(
    sessions: argparse.ArgumentParser,
    command: Callable[[str, Callable[[argparse.Namespace], int], str, str], Any],
) -> None:
    """The listing filters of ``sessions``, and the ``delete`` and ``prune`` commands."""
    sessions.add_argument(
        "--status",
        action="append",
        choices=sorted(SESSION_STATUSES),
        help="only sessions in this status (repeat for several)",
    )
    sessions.add_argument(
        "--label", action="append", metavar="K=V", help="only sessions with this label (repeat)"
    )
    sessions.add_argument("--since", help="last activity at or after (ISO date, UTC)")
    sessions.add_argument("--until", help="last activity before (ISO date, UTC)")
    sessions.add_argument("--search", help="text in the title or first task (any case)")
    sessions.add_argument("--limit", type=_count, default=50, help="sessions per page")
    sessions.add_argument("--before", metavar="CURSOR", help="the page after this cursor")
    shelf = sessions.add_mutually_exclusive_group()
    shelf.add_argument(
        "--archived", action="store_true", help="only archived sessions (default: not archived)"
    )
    shelf.add_argument("--all", action="store_true", help="archived sessions and the others")

    for name, func, verb, description in (
        (
            "archive",
            _archive,
            "shelve a finished session: hidden from the listing, still readable",
            (
                "Archive one session: agentnb sessions leaves it out (--archived lists it), "
                "it stays readable and exported, and new work for it is refused until it is "
                "unarchived. Refused while a run is open or commands wait. "
                "Example: agentnb archive conversation-001 --user alice"
            ),
        ),
        (
            "unarchive",
            _unarchive,
            "bring an archived session back: listed again, it takes new work",
            (
                "Take one session out of the archive. "
                "Example: agentnb unarchive conversation-001 --user alice"
            ),
        ),
    ):
        _common(command(name, func, verb, description))

    delete = command(
        "delete",
        _delete,
        "delete a session's data, leaving a tombstone",
        "Delete one session: its events, commands, blobs, snapshots, lease and export "
        "watermarks, in one transaction; a tombstone (who, when, why) stays. Refused while "
        "a turn runs. Example: agentnb delete conversation-001 --user alice "
        '--reason "erasure request 42"',
    )
    _common(delete)
    delete.add_argument("--reason", default="", help="why, kept in the tombstone")

    prune = command(
        "prune",
        _prune,
        "delete sessions idle for longer than a duration (dry run unless --apply)",
        "Apply a retention rule: sessions with no activity for --older-than, in --status "
        "(default idle; never running or queued), with every --label. Lists them; --apply "
        "deletes them. Example: agentnb prune --older-than 30d --label env=scratch --apply",
    )
    _common(prune, session=False)
    prune.add_argument("--older-than", required=True, help="e.g. 30d, 12h, 90m, or seconds")
    prune.add_argument(
        "--status",
        action="append",
        choices=sorted(SESSION_STATUSES - {"running", "queued"}),
        help="only sessions in this status (repeat; default idle)",
    )
    prune.add_argument("--label", action="append", metavar="K=V", help="only with this label")
    prune.add_argument("--apply", action="store_true", help="delete (default: dry run)")
    prune.add_argument("--reason", default="retention", help="why, kept in the tombstones")


def _turn_commands(
    command: Callable[[str, Callable[[argparse.Namespace], int], str, str], Any],
) -> None:
    """The ``resume`` and ``cancel`` commands: a turn's commands, for a worker to carry out."""
    resume = command(
        "resume",
        _resume,
        "resume a session's interrupted turn (a worker carries it out)",
        "Accept a resume of the session's latest unfinished turn (or TURN) in its inbox, "
        "checked as session.resume() checks it: refused while requests wait for answers "
        "or tool calls are uncertain. A worker of the session's agent carries it out; this "
        "waits --wait seconds to say what became of it. "
        "Example: agentnb resume conversation-001 --user alice",
    )
    _common(resume)
    resume.add_argument("turn", nargs="?", help="the turn id (default: the latest unfinished)")
    resume.add_argument(
        "--wait", type=_seconds, default=10.0, help="seconds to wait for a worker (default 10)"
    )

    cancel = command(
        "cancel",
        _cancel,
        "cancel a session's queued, parked or running turn",
        "Cancel a turn as session.cancel() does: a queued task is dropped at once; a turn "
        "waiting for a person, or interrupted, is closed by a worker; a running one is "
        "interrupted first. Example: agentnb cancel conversation-001 turn_01... --user alice",
    )
    _common(cancel)
    cancel.add_argument("turn", help="the turn id (see agentnb show)")
    cancel.add_argument(
        "--wait", type=_seconds, default=10.0, help="seconds to wait for a worker (default 10)"
    )


def _parser() -> argparse.ArgumentParser:  # noqa: PLR0915 - one statement group per command
    parser = argparse.ArgumentParser(
        prog="agentnb",
        description=(
            "Durable, steerable AI-agent sessions: run the demo, read sessions, export them "
            "and query the exports. Example: agentnb demo, then agentnb sessions"
        ),
        epilog=_EXIT_CODES,
        formatter_class=_Formatter,
    )
    parser.add_argument("--version", action="version", version=f"agentnb {nb.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(
        name: str, func: Callable[[argparse.Namespace], int], help: str, description: str
    ) -> argparse.ArgumentParser:
        p = sub.add_parser(
            name,
            help=help,
            description=description,
            epilog=_EXIT_CODES,
            formatter_class=_Formatter,
        )
        p.set_defaults(func=func, command_parser=p)
        return p

    demo = command(
        "demo",
        _demo,
        "run the demo on the embedded default store",
        "Run the scripted, offline demo; running it again continues the same store. "
        "Example: agentnb demo --store sqlite:///.agentnb/demo.sqlite",
    )
    demo.add_argument("--store", default=None, type=_store_url, help=_STORE_HELP)

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
    export.add_argument("--store", default=None, type=_store_url, help=_STORE_HELP)
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
        "--width", type=_count, default=48, help="characters per cell, 0 for no limit"
    )

    sessions = command(
        "sessions",
        _sessions,
        "list sessions",
        "List sessions, newest activity first, one page at a time. Example: agentnb "
        "sessions --user alice --status parked --since 2026-01-01 --label team=fin",
    )
    _common(sessions, session=False)
    _lifecycle_commands(sessions, command)

    show = command(
        "show",
        _show,
        "print a session's tasks and transcript",
        "Print a session's tasks, open requests and transcript. "
        "Example: agentnb show conversation-001 --user alice",
    )
    _common(show)
    show.add_argument(
        "--width", type=_count, default=120, help="characters per line, 0 for no limit"
    )

    tail = command(
        "tail",
        _tail,
        "print a session's latest events (and follow new ones)",
        "Print committed events; --json prints one JSON object per line. "
        "Example: agentnb tail conversation-001 --follow",
    )
    _common(tail)
    tail.add_argument("-n", "--lines", type=_count, default=20, help="events to show first")
    tail.add_argument("-f", "--follow", action="store_true", help="keep printing new events")

    _turn_commands(command)

    worker = command(
        "worker",
        _worker,
        "execute queued work of an agent's sessions (headless runtime)",
        "Run a worker; crashed turns with nothing uncertain are resumed, and so are turns "
        "a worker's SIGTERM stopped (by the next worker). It claims sessions "
        "with queued work, so many workers share a store: processes of one machine on an "
        "SQLite file, processes and machines on PostgreSQL. SIGTERM stops it cleanly. "
        "--agent is imported with the current directory first on the import path (as "
        "uvicorn does), so a module in the folder you start it from is found. It prints a "
        "line when a task's run starts and when it ends (--quiet: none). "
        "Example: agentnb worker --store postgresql://app@db/agentnb "
        "--agent myproject.agents:cost_agent --concurrency 8 --max-queued 16",
    )
    worker.add_argument("--store", default=None, type=_store_url, help=_STORE_HELP)
    add_schedule_option(worker)
    worker.add_argument(
        "--agent",
        required=True,
        help="module:attribute of an nb.Agent (the current directory is on the import path)",
    )
    worker.add_argument(
        "--poll",
        type=float,
        default=1.0,
        help="seconds between fallback claims (woken by NOTIFY on PostgreSQL, by a watcher "
        "of the file on SQLite)",
    )
    worker.add_argument("--lease", type=float, default=10.0, help="lease seconds")
    worker.add_argument(
        "--auto-resume",
        choices=sorted(_AUTO_RESUME),
        default="safe",
        help="turns a crash cut off: 'safe' resumes them when no tool call's outcome is "
        "unknown (idempotent calls run again); 'unknown' records such calls as unknown, "
        "tells the model and resumes; 'off' leaves them to a person (default: safe)",
    )
    worker.add_argument(
        "--concurrency", type=int, default=16, help="sessions executing at once (default 16)"
    )
    worker.add_argument(
        "--accept-agent-change",
        action="store_true",
        help="run sessions bound to another version of the agent (the change is recorded); "
        "without it their work is rejected with what changed",
    )
    worker.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="no line per task (by default one when a run starts and one when it ends)",
    )
    bounds = worker.add_argument_group(
        "limits", "bounds on each session (nb.Limits; a number, or none for no bound)"
    )
    for flag, field, what in (
        ("--max-queued", "max_queued_commands", "commands waiting in one session's inbox"),
        ("--max-steers", "max_pending_steers", "unapplied steering inputs of one turn"),
        ("--max-recovery-events", "max_recovery_events", "events replayed to open a session"),
        ("--max-recovery-bytes", "max_recovery_bytes", "bytes replayed to open a session"),
        ("--max-session-events", "max_session_events", "events one session may hold"),
        ("--max-session-bytes", "max_session_bytes", "bytes one session may hold"),
        ("--max-reply-chars", "max_reply_chars", "characters of one model reply"),
        ("--max-tool-calls", "max_tool_calls_per_reply", "tool calls in one model reply"),
        ("--max-tool-result-chars", "max_tool_result_chars", "characters of one tool result"),
    ):
        default = getattr(nb.Limits(), field)
        shown = "none" if default is None else f"{default:_}"
        bounds.add_argument(
            flag, type=_limit, default=_UNSET, metavar="N", help=f"{what} (default {shown})"
        )
    _service_commands(command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns its exit code (argparse exits 2 itself on usage errors)."""
    args, unknown = _parser().parse_known_args(argv)
    if unknown:  # a misspelt option of a command: that command's usage, not the top one's
        args.command_parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        result: int = args.func(args)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader stopped early (`agentnb show ID | head`): what it read is what it
        # wanted. Point stdout at nothing, so the interpreter's last flush is quiet too.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_OK
    except AgentnbError as exc:
        print(f"error: {_visible(str(exc))}", file=sys.stderr)
        return exit_code(exc)
    except OSError as exc:  # a file the command needed could not be read or written
        print(f"error: {_visible(str(exc))}", file=sys.stderr)
        return EXIT_FAILED
    except ImportError as exc:  # an extra the command needs is not installed; exc says which
        print(f"error: {_visible(str(exc))}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return 130
    return result


if __name__ == "__main__":
    sys.exit(main())
