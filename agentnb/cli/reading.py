"""Reading sessions: ``sessions`` (the listing), ``show`` (tasks and transcript), ``tail``."""

from __future__ import annotations

import argparse
import dataclasses
import json
from datetime import datetime
from typing import Any

import agentnb as nb
from agentnb import states
from agentnb.children import children_of
from agentnb.cli.args import (
    AddCommand,
    common_arguments,
    count_arg,
    labels_arg,
    open_existing_store,
    parked_turn,
    session_keys,
    when_arg,
)
from agentnb.cli.format import (
    EXIT_OK,
    NULL,
    cell_text,
    cut,
    fit,
    is_null,
    jsonable,
    print_json,
    table_lines,
)
from agentnb.holders import lease_alive
from agentnb.projections.chat import interactions_of, tasks_of
from agentnb.runtime.catalogue import (
    find_sessions,
)


def _sessions(args: argparse.Namespace) -> int:
    """List sessions, newest activity first, from the catalogue (one page of ``--limit``)."""
    store = open_existing_store(args.store)
    try:
        infos = find_sessions(
            store,
            agent_id=args.agent,
            user_id=args.user,
            status=args.status or None,
            labels=labels_arg(args.label),
            since=when_arg(args.since, "--since"),
            until=when_arg(args.until, "--until"),
            search=args.search,
            limit=args.limit,
            before=args.before,
            archived=None if args.all else args.archived,
        )
        out: list[dict[str, Any]] = []
        for info in infos:  # one page: folding each of its logs stays bounded
            key = info.key
            with states.read(store, key) as (state, inbox):
                executing = lease_alive(store, key)
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
                    "parked_behind": parked_turn(state, inbox, executing),
                    "cursor": info.cursor,
                }
            )
    finally:
        store.close()
    if args.json:
        print_json(out)
        return EXIT_OK
    if not out:
        print("(no sessions)")
        return EXIT_OK
    rows = [
        [
            s["session_id"],
            s["user_id"],
            s["agent_id"],
            cut(s["title"] or "", 40) + (" (archived)" if s["archived_at"] else ""),
            str(s["events"]),
            cell_text(s["latest_status"])
            + (f" (+{s['queued']} queued" if s["queued"] else "")
            + (
                f", parked behind {s['parked_behind']['turn_id']})"
                if s["queued"] and s["parked_behind"]
                else (")" if s["queued"] else "")
            ),
        ]
        for s in out
    ]
    print(
        "\n".join(table_lines(["session", "user", "agent", "title", "events", "latest task"], rows))
    )
    if len(out) == args.limit:
        print(f"(more: agentnb sessions --before {out[-1]['cursor']})")
    return EXIT_OK


def _show(args: argparse.Namespace) -> int:
    """Print a session's tasks, open requests and transcript."""
    store = open_existing_store(args.store)
    try:
        key = session_keys(store, args.session, args.user, args.agent)
        with states.read(store, key) as (state, inbox):
            executing = lease_alive(store, key)
            tasks = tasks_of(state, inbox, executing=executing)
            parked = parked_turn(state, inbox, executing)
            pending = list(interactions_of(state).values())
            messages = list(state.context)
            spawned = state.children_of(None)
        children = children_of(store, spawned)
    finally:
        store.close()
    if args.json:
        print_json(
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
        shown, was_cut = fit(text, width)
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
        line(f"  {request.request_id}  {request.kind}: {cell_text(request.prompt)}")
    if children:
        print("\nsub-agents (agentnb show <session>/<call id> opens one):")
    for child in children:
        said = child.output if child.output is not None else child.error
        line(
            f"  {child.call_id}  {child.status:<11} {child.name or child.agent_id}  "
            f"{child.task!r}" + (f" -> {cell_text(said)}" if said is not None else "")
        )
    print("\ntranscript:" if messages else "\ntranscript: (empty)")
    for message in messages:
        calls = ", ".join(f"{c.name}({cell_text(c.arguments)})" for c in message.tool_calls)
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
    store = open_existing_store(args.store)
    try:
        key = session_keys(store, args.session, args.user, args.agent)
        log = nb.SessionLog(store, key)
        start = max(0, log.head() - args.lines)
        follow = log.follow(after=start, idle_timeout=None if args.follow else 0.0)
        # Events are ordered by seq, not by time: one made a moment before the event above it
        # (in the same commit) shows that event's time, so the column never runs backwards.
        shown_at: datetime | None = None
        try:
            for event in follow:
                if args.json:
                    print(json.dumps(jsonable(event), ensure_ascii=False), flush=True)
                    continue
                shown_at = max(shown_at or event.occurred_at, event.occurred_at)
                shown = [(k, v) for k, v in event.payload.items() if not is_null(v)][:3]
                brief = ", ".join(f"{k}={cell_text(v)}" for k, v in shown)
                print(
                    f"{event.seq:>7}  {shown_at:%H:%M:%S.%f}  {event.type:<22} "
                    f"{cut(brief, 90)}".rstrip(),
                    flush=True,
                )
        except KeyboardInterrupt:
            follow.close()
    finally:
        store.close()
    return EXIT_OK


def sessions_command(command: AddCommand) -> argparse.ArgumentParser:
    """``sessions`` (its filters come with the lifecycle commands)."""
    sessions = command(
        "sessions",
        _sessions,
        "list sessions",
        "List sessions, newest activity first, one page at a time. Example: agentnb "
        "sessions --user alice --status parked --since 2026-01-01 --label team=fin",
    )
    common_arguments(sessions, session=False)
    return sessions


def reading_commands(command: AddCommand) -> None:
    """``show`` and ``tail``."""
    show = command(
        "show",
        _show,
        "print a session's tasks and transcript",
        "Print a session's tasks, open requests and transcript. "
        "Example: agentnb show conversation-001 --user alice",
    )
    common_arguments(show)
    show.add_argument(
        "--width", type=count_arg, default=120, help="characters per line, 0 for no limit"
    )

    tail = command(
        "tail",
        _tail,
        "print a session's latest events (and follow new ones)",
        "Print committed events; --json prints one JSON object per line. "
        "Example: agentnb tail conversation-001 --follow",
    )
    common_arguments(tail)
    tail.add_argument("-n", "--lines", type=count_arg, default=20, help="events to show first")
    tail.add_argument("-f", "--follow", action="store_true", help="keep printing new events")
