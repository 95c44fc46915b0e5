"""The operations' commands: ``agentnb backup|verify|restore|migrate``. Thin: each parses
its arguments, calls the one ``agentnb.ops`` function and prints what it did; errors go
to ``agentnb.cli``'s one mapping (message line, exit code)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

from agentnb.errors import InvalidInput
from agentnb.ops.backup import backup, restore, verify
from agentnb.ops.migrate import migrate
from agentnb.ops.webhooks import Webhook, parse_events

__all__ = ["add_commands", "add_webhook_options", "webhooks_of"]

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
