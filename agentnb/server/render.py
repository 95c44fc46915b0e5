"""What the chat page shows, computed on the server from the same folds ``SessionView`` reads.

* ``item_json``: a ``ChatItem`` as JSON, plus ``html`` for an assistant reply: its Markdown
  rendered here, CommonMark with raw HTML disabled (``<script>`` in a reply stays text),
  images off (no fetches from a reply) and links checked by markdown-it (no
  ``javascript:``); markdown-it escapes every text it writes. The page inserts only this
  ``html`` as markup; every other text it shows (user messages, tool arguments, progress,
  results, requests) goes in as text nodes.
* ``panel``: the session's state beside the chat: its status, the running run (what
  Interrupt names), the turn Resume would continue, why the queue is parked, the pending
  requests (its sub-agents' too, each with its ``path`` of agents: answered here, they are
  routed), the newest tasks, and ``children``: where each sub-agent call still open stands
  (a ``Child`` by call id: the child's status and usage so far), for the live cards.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.rules_core import StateCore

from agentnb import wire
from agentnb.errors import CannotResume
from agentnb.projections.chat import ChatItem, ChatState, interactions_of, tasks_of
from agentnb.projections.decisions import check_resume, effective_status, latest_unfinished
from agentnb.projections.queue import blocking_turn
from agentnb.projections.state import PARKING, InboxState
from agentnb.records import Child, Interaction, Task

__all__ = ["PANEL_TASKS", "item_json", "markdown_html", "panel", "status_of"]

PANEL_TASKS = 20
"""The newest tasks the page's panel lists."""


def _restyle(state: StateCore) -> None:
    """Links open in a new tab, without a referrer."""
    for token in state.tokens:
        for child in token.children or ():
            if child.type == "link_open":
                child.attrSet("target", "_blank")
                child.attrSet("rel", "noopener noreferrer")


_MARKDOWN = MarkdownIt("commonmark", {"html": False, "breaks": True}).disable("image")
_MARKDOWN.core.ruler.push("agentnb_links", _restyle)


@functools.lru_cache(maxsize=4096)
def markdown_html(text: str) -> str:
    """Assistant Markdown as safe HTML (raw HTML disabled; every text escaped)."""
    return str(_MARKDOWN.render(text))


def item_json(item: ChatItem, *, html: bool = True) -> dict[str, Any]:
    """A chat item as the page takes it: its fields, and ``html`` for assistant text."""
    data: dict[str, Any] = wire.dump(item)
    if html and item.kind == "message" and item.role == "assistant":
        data["html"] = markdown_html(item.text).rstrip() if item.text else ""
    return data


def status_of(tasks: list[Task]) -> str:
    """The session's status from its tasks (``SessionInfo.status``'s rule, at one read)."""
    queued = any(t.status == "queued" for t in tasks)
    started = [t for t in tasks if t.status != "queued"]
    latest = started[-1].status if started else None
    if latest == "running":
        return "running"
    if latest in PARKING:
        return "parked" if queued else str(latest)
    return "queued" if queued else "idle"


def _task_words(text: str | None) -> str:
    """A task named by its first line, as the page names tasks (never by its turn id)."""
    line = (text or "").strip().split("\n")[0]
    return f"“{line[:59]}…”" if len(line) > 60 else f"“{line}”"


def _parked_words(queued: int, task: str, why: str) -> str:
    """Why queued tasks wait, in the page's words (``blocked_by`` has the turn id)."""
    tasks = "1 queued task waits" if queued == 1 else f"{queued} queued tasks wait"
    state, todo = {
        "suspended": ("is waiting for you", "answer it above"),
        "failed": ("failed", "resume it to try again"),
        "interrupted": ("was interrupted", "resume it"),
    }.get(why, (f"is {why}", "resume it"))
    return f"{tasks} for {task}, which {state}: {todo}, or cancel it."


def panel(
    chat: ChatState,
    inbox: InboxState,
    *,
    executing: bool,
    tool: Any,
    descendants: Mapping[str, Interaction] | None = None,
    children: Sequence[Child] = (),
) -> dict[str, Any]:
    """The page's session panel at the fold's position (see the module docstring);
    ``descendants``: the sub-agents' open requests, ``children``: the open calls' children."""
    state = chat.session
    tasks = tasks_of(state, inbox, executing=executing)
    active = state.active_run if executing else None
    running = None
    if active is not None:
        running = {"turn_id": state.runs[active].turn_id, "run_id": active}
    resumable = None
    latest = latest_unfinished(state)
    if latest is not None:
        try:
            check_resume(state, latest.turn_id, executing=executing, tool=tool)
            resumable = latest.turn_id
        except CannotResume:
            resumable = None
    parked = None
    blocked_by = None
    queued = sum(1 for t in tasks if t.status == "queued")
    blocking = blocking_turn(state, inbox, executing=executing)
    if blocking is not None and queued:
        turn, why = blocking
        blocked_by = turn.turn_id
        parked = _parked_words(queued, _task_words(turn.input), why)
    pending = interactions_of(state)
    pending.update({r: i for r, i in (descendants or {}).items() if r not in pending})
    last = state.latest_turn
    return {
        "seq": chat.seq,
        "status": status_of(tasks),
        "executing": executing,
        "running": running,
        "resumable": resumable,
        "latest_status": (
            effective_status(state, last, executing=executing) if last is not None else None
        ),
        "parked": parked,
        "blocked_by": blocked_by,
        "queued": queued,
        "materials": [
            {"id": c.command_id, "text": c.input or ""}
            for c in inbox.injects()
            if c.command_id not in state.applied_inputs
            and c.command_id not in state.discarded_inputs
        ],
        "pending": {rid: wire.dump(i) for rid, i in pending.items()},
        "tasks": [wire.dump(t) for t in tasks[-PANEL_TASKS:]],
        "children": {c.call_id: wire.dump(c) for c in children},
    }
