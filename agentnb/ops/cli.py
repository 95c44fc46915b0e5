"""The operations' commands: ``agentnb backup|verify|restore|migrate``. Thin: each parses
its arguments, calls the one ``agentnb.ops`` function and prints what it did; errors go
to ``agentnb.cli``'s one mapping (message line, exit code)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

from agentnb.errors import InvalidInput, SessionNotFound
from agentnb.ids import SessionKey
from agentnb.ops.backup import backup, restore, verify
from agentnb.ops.migrate import migrate
from agentnb.ops.schedules import (
    CATCH_UPS,
    OVERLAPS,
    Schedule,
    add_schedule,
    remove_schedule,
    schedules_of,
)
from agentnb.ops.webhooks import Webhook, parse_events
from agentnb.stores import SessionStore, open_store

__all__ = ["add_commands", "add_schedule_option", "add_webhook_options", "webhooks_of"]

WEBHOOK_SECRET_ENV = "AGENTNB_WEBHOOK_SECRET"  # noqa: S105 - the name of a variable, not a secret

Command = Callable[[str, Callable[[argparse.Namespace], int], str, str], argparse.ArgumentParser]


def add_commands(command: Command, store_url: Callable[[str], str], store_help: str) -> None:
    """Register the commands through ``agentnb.cli``'s ``command`` helper."""
    p = command(
        "backup",
        _backup,
        "write a consistent archive of a store while its sessions run",
        "Copy every session (events, inbox, catalogue, watermarks), token and deletion of "
        "the store into one archive with a manifest of heads and digests. SQLite is copied "
        "with its online backup API first. Example: agentnb backup --store "
        "sqlite:///.agentnb/agentnb.sqlite backups/agentnb-2026-12-02.anb",
    )
    p.add_argument("--store", default=None, type=store_url, help=store_help)
    p.add_argument("out", help="the archive file to write")
    p = command(
        "verify",
        _verify,
        "check an archive's checksums, heads and digests",
        "Read an archive alone and check every line and every session against its "
        "manifest; a damaged one names the session and the byte. Example: agentnb verify "
        "backups/agentnb-2026-12-02.anb",
    )
    p.add_argument("archive", help="the archive file `agentnb backup` wrote")
    p = command(
        "restore",
        _restore,
        "restore an archive into an empty store (leases released: sessions run at once)",
        "Verify the archive, then write it into the store, which must be empty (with "
        "--merge: hold none of the archive's sessions). Example: agentnb restore "
        "backups/agentnb-2026-12-02.anb --store sqlite:///restored.sqlite",
    )
    p.add_argument("archive", help="the archive file `agentnb backup` wrote")
    p.add_argument("--store", default=None, type=store_url, help=store_help)
    p.add_argument(
        "--merge",
        action="store_true",
        help="add the archive's sessions to a store that holds others (none may overlap)",
    )
    p = command(
        "migrate",
        _migrate,
        "move sessions' whole logs to another store (resumable; run it again to finish)",
        "Copy sessions with every seq, event id and digest from one store to another "
        "(memory, SQLite, PostgreSQL), in batches; a session running at the source is "
        "refused. Example: agentnb migrate --from sqlite:///.agentnb/agentnb.sqlite --to "
        "postgresql://agentnb@db/agentnb --session conversation-001",
    )
    p.add_argument("--from", dest="source", required=True, type=store_url, help="source store")
    p.add_argument("--to", dest="target", required=True, type=store_url, help="target store")
    p.add_argument(
        "--session",
        dest="sessions",
        action="append",
        default=None,
        metavar="ID",
        help="a session id to copy (repeatable; default: all, with tokens and deletions)",
    )
    p.add_argument(
        "--labels",
        nargs="+",
        default=None,
        metavar="KEY=VALUE",
        help="copy only sessions carrying all of these labels",
    )
    _schedule_command(command, store_url, store_help)


def _schedule_command(command: Command, store_url: Callable[[str], str], store_help: str) -> None:
    p = command(
        "schedule",
        _schedule,
        "add, list or remove a session's schedules (tasks submitted at due times)",
        "Schedules submit a task at each due time (cron, every N seconds, or once at a "
        "time); runtimes made with schedules=True and `agentnb worker --schedules` fire "
        "them, each due time once. Example: agentnb schedule add conversation-001 "
        "'send the daily report' --cron '0 9 * * 1-5' --tz Europe/Paris --user alice",
    )
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    add = actions.add_parser("add", help="add a schedule to a session")
    add.add_argument("session", help="the session id")
    add.add_argument("text", help="the task to submit at each due time")
    when = add.add_mutually_exclusive_group(required=True)
    when.add_argument("--cron", help="a cron expression, e.g. '*/15 * * * *'")
    when.add_argument("--every", type=float, metavar="SECONDS", help="seconds between due times")
    when.add_argument("--at", help="one due time, ISO 8601 (e.g. 2026-12-24T18:00:00+01:00)")
    add.add_argument("--tz", default="UTC", help="the time zone cron and --at are read in")
    add.add_argument("--overlap", choices=OVERLAPS, default="skip", help="while a turn runs")
    add.add_argument("--catch-up", choices=CATCH_UPS, default="one", help="after downtime")
    add.add_argument("--key", default=None, help="an idempotency key for this schedule")
    listing = actions.add_parser("list", help="list a session's active schedules")
    listing.add_argument("session", help="the session id")
    remove = actions.add_parser("remove", help="remove a schedule")
    remove.add_argument("session", help="the session id")
    remove.add_argument("schedule_id", help="the schedule id (see agentnb schedule list)")
    for each in (add, listing, remove):
        each.add_argument("--store", default=None, type=store_url, help=store_help)
        each.add_argument("--user", default=None, help="the session's user")
        each.add_argument("--agent", default=None, help="the session's agent id")


def add_schedule_option(parser: argparse.ArgumentParser) -> None:
    """``--schedules`` of ``agentnb worker`` and ``agentnb serve``."""
    parser.add_argument(
        "--schedules",
        action="store_true",
        help="fire the due schedules of the agent's sessions (each due time once, "
        "whichever worker)",
    )


def _key(store: SessionStore, args: argparse.Namespace) -> SessionKey:
    keys = [
        r.key
        for r in store.list_sessions(user_id=args.user, agent_id=args.agent)
        if r.key.session_id == args.session
    ]
    if not keys:
        raise SessionNotFound(
            f"no session {args.session!r} in {store.url}; see agentnb sessions (or pass --user)"
        )
    if len(keys) > 1:
        raise InvalidInput(
            f"{len(keys)} sessions are called {args.session!r}; narrow with --user/--agent"
        )
    return keys[0]


def _line(s: Schedule) -> str:
    when = s.cron or (f"every {s.every:g}s" if s.every is not None else f"at {s.at}")
    due = s.next_due_at.isoformat(timespec="seconds") if s.next_due_at else "-"
    return f"{s.schedule_id}  {when} ({s.tz}, overlap {s.overlap})  next {due}  {s.text}"


def _schedule(args: argparse.Namespace) -> int:
    from agentnb.stores import default_store_url

    store = open_store(args.store or default_store_url(), create=False)
    try:
        key = _key(store, args)
        if args.action == "add":
            made = add_schedule(
                store,
                key,
                args.text,
                cron=args.cron,
                every=args.every,
                at=args.at,
                tz=args.tz,
                overlap=args.overlap,
                catch_up=args.catch_up,
                idempotency_key=args.key,
            )
            _say(f"added {_line(made)}")
        elif args.action == "list":
            for each in schedules_of(store, key):
                _say(_line(each))
        else:
            remove_schedule(store, key, args.schedule_id)
            _say(f"removed {args.schedule_id}")
    finally:
        store.close()
    return 0


def _say(text: str) -> None:
    print(text, flush=True)


def _progress(key: str, events: int) -> None:
    print(f"  {key}: {events:_} events", file=sys.stderr, flush=True)


def _backup(args: argparse.Namespace) -> int:
    report = backup(args.store, args.out, progress=_progress)
    _say(
        f"backed up {report.sessions} sessions ({report.events:_} events, {report.inbox:_} "
        f"inbox records) to {report.path} ({report.bytes:_} bytes, {report.method}) in "
        f"{report.seconds:.1f}s"
    )
    return 0


def _verify(args: argparse.Namespace) -> int:
    report = verify(args.archive)
    _say(
        f"{report.path}: ok, {report.format} ({report.method}): {report.sessions} sessions, "
        f"{report.events:_} events, {report.inbox:_} inbox records, {report.tokens} tokens, "
        f"{report.tombstones} deletions; every checksum, head and digest agrees"
    )
    return 0


def _restore(args: argparse.Namespace) -> int:
    report = restore(args.archive, args.store, merge=args.merge, progress=_progress)
    _say(
        f"restored {report.sessions} sessions ({report.events:_} events, {report.inbox:_} "
        f"inbox records, {report.tokens} tokens, {report.tombstones} deletions) in "
        f"{report.seconds:.1f}s"
    )
    return 0


def _labels(items: list[str] | None) -> dict[str, str] | None:
    if items is None:
        return None
    labels: dict[str, Any] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise InvalidInput(f"--labels takes KEY=VALUE pairs, got {item!r}")
        labels[name] = value
    return labels


def _migrate(args: argparse.Namespace) -> int:
    report = migrate(
        args.source,
        args.target,
        sessions=args.sessions,
        labels=_labels(args.labels),
        progress=_progress,
    )
    _say(
        f"migrated {report.sessions} sessions: wrote {report.events:_} events, "
        f"{report.inbox:_} inbox records, {report.tokens} tokens, {report.tombstones} "
        f"deletions in {report.seconds:.1f}s"
    )
    return 0


def add_webhook_options(parser: argparse.ArgumentParser) -> None:
    """``--webhook URL`` (repeatable) and ``--webhook-events`` of ``agentnb serve``."""
    parser.add_argument(
        "--webhook",
        action="append",
        metavar="URL",
        help="POST committed events to this URL (repeatable; signed with "
        f"${WEBHOOK_SECRET_ENV} when set)",
    )
    parser.add_argument(
        "--webhook-events",
        default=None,
        metavar="TYPES",
        help="comma-separated event types the webhooks deliver (default turn/completed,"
        "turn/failed,interaction/requested; * for every event)",
    )


def webhooks_of(args: argparse.Namespace) -> list[Webhook]:
    """The webhooks ``--webhook`` asks for (none without it)."""
    urls = getattr(args, "webhook", None) or []
    secret = os.environ.get(WEBHOOK_SECRET_ENV) or None
    events = parse_events(getattr(args, "webhook_events", None))
    return [Webhook(url, events=events, secret=secret) for url in urls]
