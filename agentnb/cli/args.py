"""What the commands share: argument types, the store a command opens, the session it names."""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import agentnb as nb
from agentnb.errors import (
    InvalidInput,
    SessionNotFound,
)
from agentnb.stores import default_store_url, split_url

AddCommand = Callable[[str, Callable[[argparse.Namespace], int], str, str], argparse.ArgumentParser]
"""``command(name, handler, help, description)``: adds a subcommand to the parser, returns it."""


_STORE_HELP = "store URL or SQLite file path (default: SQLite in ./.agentnb/)"


def count_arg(text: str) -> int:
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


def local_path(target: str) -> str | None:
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


def store_url(text: str) -> str:
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


def open_existing_store(url: str | None) -> nb.SessionStore:
    """Open a store to read it; a store file that does not exist is not created."""
    url = url or default_store_url()
    path = local_path(url)
    if path is not None and not os.path.exists(path):
        raise SessionNotFound(
            f"no store at {path}: nothing was recorded there; run `agentnb demo` to make one, "
            "or pass --store URL"
        )
    return nb.open_store(url)


def session_keys(
    store: nb.SessionStore, session_id: str, user: str | None, agent: str | None
) -> Any:
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


def parked_turn(state: Any, inbox: Any, executing: bool) -> dict[str, Any] | None:
    """The turn queued work waits behind, its status and the ways out; None if none."""
    from agentnb.projections.queue import blocking_turn, ways_out

    blocking = blocking_turn(state, inbox, executing=executing)
    if blocking is None:
        return None
    turn, status = blocking
    return {"turn_id": turn.turn_id, "status": status, "ways_out": ways_out(state, turn, status)}


def common_arguments(parser: argparse.ArgumentParser, *, session: bool = True) -> None:
    if session:
        parser.add_argument("session", help="the session id")
    parser.add_argument("--store", default=None, type=store_url, help=_STORE_HELP)
    parser.add_argument("--user", default=None, help="only sessions of this user")
    parser.add_argument("--agent", default=None, help="only sessions of this agent id")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def labels_arg(items: Sequence[str] | None) -> dict[str, str] | None:
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


def when_arg(text: str | None, option: str) -> datetime | None:
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


def duration_arg(text: str) -> float:
    """``30d``, ``12h``, ``90m``, ``45s``, ``2w`` or plain seconds."""
    number, unit = (text[:-1], text[-1]) if text[-1:] in _UNITS else (text, "s")
    try:
        value = float(number)
    except ValueError:
        raise InvalidInput(
            f"--older-than takes a duration such as 30d, 12h, 90m or seconds, got {text!r}"
        ) from None
    return value * _UNITS[unit]


def who_deletes() -> str:
    """Who deletes from the command line, for the tombstone."""
    import getpass

    try:
        return f"cli:{getpass.getuser()}"
    except (OSError, KeyError):  # no login name (a container without a passwd entry)
        return "cli"


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
