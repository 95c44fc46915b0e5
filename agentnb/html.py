"""HTML for notebooks: the ``_repr_html_`` of the records a ``Session`` returns.

``Task``, ``Transcript``, ``HistoryPage``, ``Inspection``, ``Outcome`` and ``ChatSnapshot``
show as tables in Jupyter: statuses coloured, long text folded into ``<details>``, every
value from the model, a tool or a person escaped with ``html.escape`` (the only markup is
this module's constant tags and styles). ``show(value)`` does the same for a list of tasks
(``session.tasks()``), pending requests (``session.pending()``) or any of the records.

This module sits beside ``events``/``ids``/``errors``, below ``records.py`` (whose classes
call it), so it takes the records as plain objects and reads their documented fields.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from agentnb.errors import InvalidInput
from agentnb.events import Message

__all__ = [
    "HTML",
    "STATUS_COLORS",
    "badge",
    "chat_snapshot_html",
    "esc",
    "fold",
    "history_page_html",
    "inspection_html",
    "interactions_html",
    "messages_html",
    "outcome_html",
    "show",
    "task_html",
    "tasks_html",
    "transcript_html",
]

STATUS_COLORS = {
    "completed": "#2e7d32",
    "success": "#2e7d32",
    "answered": "#2e7d32",
    "running": "#1565c0",
    "streaming": "#1565c0",
    "queued": "#616161",
    "waiting": "#b26a00",
    "suspended": "#b26a00",
    "pending": "#b26a00",
    "interrupted": "#e65100",
    "failed": "#c62828",
    "error": "#c62828",
    "denied": "#c62828",
    "unknown": "#c62828",
    "cancelled": "#616161",
}
"""The colour of each status, shared by these tables, ``SessionView`` and the timeline."""

FOLD_AT = 160
"""Texts longer than this many characters are folded: their start shows, the rest opens."""

_TABLE = "border-collapse:collapse;font-size:0.9em;margin:2px 0;"
_CELL = "padding:2px 8px;border-bottom:1px solid #ddd;text-align:left;vertical-align:top;"
_HEAD = _CELL + "font-weight:600;"
_TEXT = "white-space:pre-wrap;word-break:break-word;max-width:60em;"
_MUTED = "opacity:0.65;font-size:0.9em;"


def esc(value: object) -> str:
    """Any value as inert HTML text."""
    return html.escape(value if isinstance(value, str) else str(value), quote=True)


def badge(status: object) -> str:
    """A status as a coloured pill."""
    text = "" if status is None else str(status)
    color = STATUS_COLORS.get(text, "#616161")
    return (
        f'<span style="font-size:0.85em;padding:0 6px;border-radius:8px;'
        f'border:1px solid {color};color:{color};white-space:nowrap;">{esc(text)}</span>'
    )


def fold(text: object, limit: int = FOLD_AT) -> str:
    """Text, escaped; when longer than ``limit`` characters, its start with the rest folded."""
    if text is None:
        return ""
    value = text if isinstance(text, str) else str(text)
    if len(value) <= limit:
        return f'<span style="{_TEXT}">{esc(value)}</span>'
    return (
        f'<details><summary style="cursor:pointer;{_TEXT}">{esc(value[:limit])}\u2026 '
        f'<span style="{_MUTED}">({len(value)} characters)</span></summary>'
        f'<div style="{_TEXT}">{esc(value)}</div></details>'
    )


def _when(value: datetime | None) -> str:
    if value is None:
        return ""
    return esc(value.isoformat(sep=" ", timespec="milliseconds"))


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=repr)


def _table(headers: Iterable[str], rows: Iterable[Iterable[str]], caption: str = "") -> str:
    """A table of already-escaped cells."""
    head = "".join(f'<th style="{_HEAD}">{esc(h)}</th>' for h in headers)
    body = "".join(
        "<tr>" + "".join(f'<td style="{_CELL}">{cell}</td>' for cell in row) + "</tr>"
        for row in rows
    )
    title = f'<caption style="text-align:left;{_MUTED}">{caption}</caption>' if caption else ""
    return (
        f'<table style="{_TABLE}">{title}<thead><tr>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table>"
    )


def _fields(pairs: Iterable[tuple[str, str]]) -> str:
    """A two-column table of (name, already-escaped value)."""
    rows = "".join(
        f'<tr><th style="{_HEAD}">{esc(name)}</th><td style="{_CELL}">{value}</td></tr>'
        for name, value in pairs
    )
    return f'<table style="{_TABLE}"><tbody>{rows}</tbody></table>'


def _title(text: str) -> str:
    return f'<div style="font-weight:600;margin:4px 0 2px;">{text}</div>'


# -- tasks ------------------------------------------------------------------------------------

_TASK_HEADERS = ("turn", "status", "input", "runs", "created", "started", "ended", "error")


def _task_row(task: Any) -> list[str]:
    runs = tuple(task.run_ids)
    return [
        f"<code>{esc(task.turn_id)}</code>",
        badge(task.status),
        fold(task.input),
        f'{len(runs)}<div style="{_MUTED}">{"<br>".join(esc(r) for r in runs)}</div>',
        _when(task.created_at),
        _when(task.started_at),
        _when(task.ended_at),
        f'<span style="color:#c62828;">{fold(task.error)}</span>' if task.error else "",
    ]


def task_html(task: Any) -> str:
    """One ``Task`` as a one-row table."""
    return _table(_TASK_HEADERS, [_task_row(task)])


def tasks_html(tasks: Iterable[Any]) -> str:
    """A list of ``Task`` (``session.tasks()``) as one table, oldest first."""
    tasks = tuple(tasks)
    rows = [_task_row(t) for t in tasks]
    if not rows:
        return f'<div style="{_MUTED}">No tasks.</div>'
    counts: dict[str, int] = {}
    for task in tasks:
        counts[task.status] = counts.get(task.status, 0) + 1
    summary = ", ".join(f"{n} {esc(s)}" for s, n in counts.items())
    return _table(_TASK_HEADERS, rows, caption=f"{len(rows)} task(s): {summary}")


# -- messages ---------------------------------------------------------------------------------


def _message_text(message: Message) -> str:
    parts = []
    if message.text:
        parts.append(fold(message.text))
    for call in message.tool_calls:
        parts.append(
            f'<div><code>{esc(call.name)}</code> <span style="{_MUTED}">'
            f"{fold(_json(dict(call.arguments)), 120)}</span></div>"
        )
    return "".join(parts)


def messages_html(messages: Iterable[Message], caption: str = "") -> str:
    """Messages as a table: role, text (and the tool calls an assistant message makes)."""
    rows = []
    for n, message in enumerate(messages, 1):
        role = message.role if message.role != "tool" else f"tool \u00b7 {message.name or ''}"
        rows.append(
            [
                f'<span style="{_MUTED}">{n}</span>',
                f"<b>{esc(role)}</b>",
                _message_text(message),
                f'<span style="{_MUTED}">{esc(message.turn_id or "")}</span>',
            ]
        )
    if not rows:
        return f'<div style="{_MUTED}">No messages.</div>'
    return _table(("#", "role", "text", "turn"), rows, caption=caption)


def transcript_html(transcript: Any) -> str:
    """A ``Transcript``: its messages as of one seq."""
    messages = tuple(transcript.messages)
    return messages_html(
        messages, caption=f"Transcript: {len(messages)} message(s) as of seq {transcript.as_of_seq}"
    )


def history_page_html(page: Any) -> str:
    """A ``HistoryPage``: its messages, and whether more pages follow."""
    messages = tuple(page.messages)
    more = "more pages follow (next_cursor)" if page.next_cursor else "the last page"
    return messages_html(messages, caption=f"History page: {len(messages)} message(s), {more}")


# -- outcomes, requests, inspection ----------------------------------------------------------


def outcome_html(outcome: Any) -> str:
    """An ``Outcome``: how a run ended, its output or error."""
    pairs = [
        ("status", badge(outcome.status)),
        ("turn", f"<code>{esc(outcome.turn_id)}</code>"),
        ("run", f"<code>{esc(outcome.run_id or '')}</code>"),
    ]
    if outcome.output is not None:
        pairs.append(("output", fold(outcome.output)))
    if outcome.error is not None:
        pairs.append(("error", f'<span style="color:#c62828;">{fold(outcome.error)}</span>'))
    return _fields(pairs)


def interactions_html(pending: Mapping[str, Any]) -> str:
    """Open requests (``session.pending()``): kind, tool, arguments, prompt."""
    rows = [
        [
            f"<code>{esc(rid)}</code>",
            badge(i.kind),
            f"<code>{esc(i.tool_name or '')}</code>",
            fold(_json(dict(i.arguments)) if i.arguments else ""),
            fold(i.prompt or ""),
            f'<span style="{_MUTED}">{esc(i.turn_id)}</span>',
        ]
        for rid, i in pending.items()
    ]
    if not rows:
        return f'<div style="{_MUTED}">No pending requests.</div>'
    headers = ("request", "kind", "tool", "arguments", "prompt", "turn")
    return _table(headers, rows, caption=f"{len(rows)} pending request(s)")


def _holder(holder: Any) -> str:
    if holder is None:
        return f'<span style="{_MUTED}">nobody holds the lease</span>'
    alive = {True: "alive", False: "dead", None: "on another host"}.get(holder.alive, "")
    where = "this runtime" if holder.local else esc(holder.owner)
    return (
        f"{where} \u00b7 epoch {esc(holder.epoch)} \u00b7 {esc(alive)} \u00b7 "
        f"lease expires in {holder.expires_in:.1f} s"
    )


def inspection_html(inspection: Any) -> str:
    """An ``Inspection``: what runs, what is uncertain, what the next model call sees."""
    blocked = ""
    if inspection.blocked_by:
        blocked = f"<code>{esc(inspection.blocked_by)}</code> {badge(inspection.blocked_status)}"
    pairs = [
        ("active runs", esc(", ".join(inspection.active_runs)) or "none"),
        ("interrupted turn", f"<code>{esc(inspection.interrupted_turn or '')}</code>"),
        ("queue blocked by", blocked or "nothing"),
        ("lease holder", _holder(inspection.holder)),
    ]
    parts = [_title(f"Inspection as of seq {esc(inspection.as_of_seq)}"), _fields(pairs)]
    calls = tuple(inspection.uncertain_tool_calls)
    if calls:
        rows = [
            [
                f"<code>{esc(c.call_id)}</code>",
                f"<code>{esc(c.tool_name)}</code>",
                fold(_json(dict(c.arguments))),
                f'<span style="{_MUTED}">{esc(c.turn_id or "")}</span>',
            ]
            for c in calls
        ]
        parts.append(_title(f"{len(calls)} uncertain tool call(s): reconcile before resuming"))
        parts.append(_table(("call", "tool", "arguments", "turn"), rows))
    context = tuple(inspection.next_context)
    parts.append(
        f"<details><summary>next context: {len(context)} message(s)</summary>"
        f"{messages_html(context)}</details>"
    )
    return "".join(parts)


def chat_snapshot_html(snapshot: Any) -> str:
    """A ``ChatSnapshot``: tasks, pending requests and the conversation at one cursor."""
    messages = tuple(snapshot.messages)
    return "".join(
        [
            _title(f"Chat snapshot at seq {esc(snapshot.cursor)}: {len(snapshot.items)} item(s)"),
            tasks_html(snapshot.tasks),
            interactions_html(snapshot.pending) if snapshot.pending else "",
            (
                f"<details><summary>{len(messages)} message(s)</summary>"
                f"{messages_html(messages)}</details>"
            ),
        ]
    )


# -- anything -------------------------------------------------------------------------------


class HTML:
    """Markup that Jupyter displays (``_repr_html_``); its text form is a short summary."""

    __slots__ = ("markup", "summary")

    def __init__(self, markup: str, summary: str) -> None:
        self.markup = markup
        self.summary = summary

    def _repr_html_(self) -> str:
        return self.markup

    def __repr__(self) -> str:
        return self.summary


_SESSION_HEADERS = ("session", "user", "title", "status", "labels", "turns", "events", "active")


def _session_row(info: Any) -> list[str]:
    labels = ", ".join(f"{k}={v}" for k, v in sorted(info.labels.items()))
    return [
        f"<code>{esc(info.key.session_id)}</code>",
        esc(info.key.user_id),
        fold(info.title or ""),
        badge(info.status),
        esc(labels),
        esc(info.counts.turns),
        esc(info.counts.events),
        _when(info.last_activity),
    ]


def session_info_html(info: Any) -> str:
    """One ``SessionInfo`` as a one-row table."""
    return _table(_SESSION_HEADERS, [_session_row(info)])


def sessions_html(infos: Iterable[Any]) -> str:
    """A page of ``runtime.sessions()`` as one table, newest activity first."""
    rows = [_session_row(i) for i in infos]
    if not rows:
        return f'<div style="{_MUTED}">No sessions.</div>'
    return _table(_SESSION_HEADERS, rows, caption=f"{len(rows)} session(s)")


def show(value: Any) -> HTML:
    """Rich display of what a ``Session`` returns: a list of tasks (``session.tasks()``), a
    dict of pending requests (``session.pending()``), or a record with ``_repr_html_``.
    Anything else raises ``InvalidInput``."""
    if isinstance(value, list | tuple) and all(hasattr(v, "run_ids") for v in value):
        return HTML(tasks_html(value), f"{len(value)} task(s)")
    if isinstance(value, list | tuple) and all(hasattr(v, "counts") for v in value):
        return HTML(sessions_html(value), f"{len(value)} session(s)")
    if isinstance(value, Mapping) and all(hasattr(v, "request_id") for v in value.values()):
        return HTML(interactions_html(value), f"{len(value)} pending request(s)")
    render = getattr(value, "_repr_html_", None)
    if callable(render):
        return HTML(str(render()), type(value).__name__)
    raise InvalidInput(
        f"show() takes session.tasks(), session.pending() or a record; got {type(value).__name__}"
    )
