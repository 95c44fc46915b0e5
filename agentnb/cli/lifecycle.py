"""A session's lifecycle: ``archive``, ``unarchive``, ``delete`` and ``prune``."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentnb import states
from agentnb.cli.args import (
    common_arguments,
    count_arg,
    duration_arg,
    labels_arg,
    open_existing_store,
    session_keys,
    who_deletes,
)
from agentnb.cli.format import EXIT_OK, print_json
from agentnb.errors import (
    LeaseHeld,
    SessionBusy,
)
from agentnb.runtime.catalogue import (
    SESSION_STATUSES,
    archive_session,
    prunable,
    session_info,
    unarchive_session,
)
from agentnb.workspace import remove_workspace


def _archive(args: argparse.Namespace) -> int:
    """Archive one session (``Runtime.archive``, without an agent)."""
    return _shelve(args, archive=True)


def _unarchive(args: argparse.Namespace) -> int:
    """Take one session out of the archive (``Runtime.unarchive``)."""
    return _shelve(args, archive=False)


def _shelve(args: argparse.Namespace, *, archive: bool) -> int:
    store = open_existing_store(args.store)
    try:
        key = session_keys(store, args.session, args.user, args.agent)
        info = archive_session(store, key) if archive else unarchive_session(store, key)
    finally:
        store.close()
    if args.json:
        print_json(info)
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
    store = open_existing_store(args.store)
    try:
        key = session_keys(store, args.session, args.user, args.agent)
        record = store.get_session(key)
        if record is not None and session_info(record, now=store.clock.now()).status == ("running"):
            raise SessionBusy(
                f"session {key} has a turn running; interrupt it from its notebook or worker "
                "(session.interrupt()), or delete it there with session.delete(force=True)"
            )
        with states.read(store, key) as (state, _):
            bound = state.workspace
        tombstone = store.delete_session(key, by=who_deletes(), reason=args.reason)
        _remove_workspace(bound)
    finally:
        store.close()
    if args.json:
        print_json(tombstone)
    else:
        print(f"deleted session {key} ({tombstone.events} events) as {tombstone.deleted_by}")
    return EXIT_OK


def _remove_workspace(bound: dict[str, Any] | None) -> None:
    """A deleted session's working files go with it (``nb.Workspace``; never a shared root)."""
    if bound is not None:
        remove_workspace(Path(bound["path"]), Path(bound["root"]))


def _prune(args: argparse.Namespace) -> int:
    """Delete (or with the default dry run, list) sessions a retention rule selects."""
    store = open_existing_store(args.store)
    deleted = 0
    try:
        found = prunable(
            store,
            duration_arg(args.older_than),
            status=args.status or "idle",
            labels=labels_arg(args.label),
            agent_id=args.agent,
            user_id=args.user,
        )
        if args.apply:
            for info in found:
                with states.read(store, info.key) as (state, _):
                    bound = state.workspace
                try:
                    store.delete_session(info.key, by=who_deletes(), reason=args.reason)
                except LeaseHeld:
                    continue  # it came back to life since it was listed: keep it
                _remove_workspace(bound)
                deleted += 1
    finally:
        store.close()
    if args.json:
        print_json({"dry_run": not args.apply, "deleted": deleted, "sessions": found})
        return EXIT_OK
    verb = "deleted" if args.apply else "would delete (dry run; --apply deletes)"
    print(f"{verb}: {deleted if args.apply else len(found)} session(s)")
    for info in found:
        print(f"  {info.key}  {info.status}  last activity {info.last_activity:%Y-%m-%d %H:%M}")
    return EXIT_OK


def lifecycle_commands(
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
    sessions.add_argument("--limit", type=count_arg, default=50, help="sessions per page")
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
        common_arguments(command(name, func, verb, description))

    delete = command(
        "delete",
        _delete,
        "delete a session's data, leaving a tombstone",
        "Delete one session: its events, commands, blobs, snapshots, lease and export "
        "watermarks, in one transaction; a tombstone (who, when, why) stays. Refused while "
        "a turn runs. Example: agentnb delete conversation-001 --user alice "
        '--reason "erasure request 42"',
    )
    common_arguments(delete)
    delete.add_argument("--reason", default="", help="why, kept in the tombstone")

    prune = command(
        "prune",
        _prune,
        "delete sessions idle for longer than a duration (dry run unless --apply)",
        "Apply a retention rule: sessions with no activity for --older-than, in --status "
        "(default idle; never running or queued), with every --label. Lists them; --apply "
        "deletes them. Example: agentnb prune --older-than 30d --label env=scratch --apply",
    )
    common_arguments(prune, session=False)
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
