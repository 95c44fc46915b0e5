"""A turn's commands: ``resume`` and ``cancel``, written with the command client for a
worker to carry out (``agentnb.commands``)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

import agentnb as nb
from agentnb import states
from agentnb.cli.args import _seconds, common_arguments, open_existing_store, session_keys
from agentnb.cli.format import EXIT_FAILED, EXIT_OK, _not_found, print_json, visible
from agentnb.commands import Commands, StoreHost
from agentnb.projections.decisions import latest_unfinished


def _resume(args: argparse.Namespace) -> int:
    """Accept a resume of a session's interrupted turn; a worker carries it out."""
    store = open_existing_store(args.store)
    try:
        key = session_keys(store, args.session, args.user, args.agent)
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
    store = open_existing_store(args.store)
    try:
        key = session_keys(store, args.session, args.user, args.agent)
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
        print_json({"session": key, "turn_id": turn_id, "command_id": command_id, "result": result})
    elif result == "done":
        print(f"{verb}: turn {turn_id} of session {key}: done")
    elif result == "waiting":
        print(
            f"{verb} of turn {turn_id} accepted (command {command_id}); no worker has carried "
            f"it out yet. Start one on this store: agentnb worker --store {url} --agent "
            "module:attribute"
        )
    else:
        print(f"{verb} of turn {turn_id}: {visible(result)}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def turn_commands(
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
    common_arguments(resume)
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
    common_arguments(cancel)
    cancel.add_argument("turn", help="the turn id (see agentnb show)")
    cancel.add_argument(
        "--wait", type=_seconds, default=10.0, help="seconds to wait for a worker (default 10)"
    )
