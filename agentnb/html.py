"""HTML for notebooks: the ``_repr_html_`` of the records a ``Session`` returns.

``Task``, ``Transcript``, ``HistoryPage``, ``Inspection``, ``Outcome`` and ``ChatSnapshot``
show as tables in Jupyter: statuses coloured, long text folded into ``<details>``, every
value from the model, a tool or a person escaped with ``html.escape`` (the only markup is
this module's constant tags and styles). ``show(value)`` does the same for a list of tasks
(``session.tasks()``), pending requests (``session.pending()``) or any of the records.

Every repr is wrapped in an element of class ``mathjax_ignore`` (and ``tex2jax_ignore``,
MathJax 2's name): JupyterLab typesets ``$...$`` in HTML outputs as LaTeX, which turned
"basic $5, pro $10" into "basic 5, pro10". Tables keep words whole (columns of text get a
minimum width and break only between words, or inside a word too long for the line), times
on one line, and ids short (``turn_…9e6ba8``; the whole id on hover, in the ``title``).
Assistant text is Markdown rendered as ``SessionView`` renders it (``markdown_html``: raw
HTML off, images off), when ``markdown-it-py`` (the widgets extra) is installed.

This module sits beside ``events``/``ids``/``errors``, below ``records.py`` (whose classes
call it), so it takes the records as plain objects and reads their documented fields.
"""

from __future__ import annotations

import functools
import html
import json
import re
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

from agentnb.errors import InvalidInput
from agentnb.events import Message

__all__ = [
    "HTML",
    "INERT_MATH",
    "STATUS_COLORS",
    "badge",
    "chat_snapshot_html",
    "child_html",
    "children_html",
    "esc",
    "fold",
    "history_page_html",
    "input_receipt_html",
    "inspection_html",
    "interactions_html",
    "markdown_html",
    "messages_html",
    "outcome_html",
    "permissions_html",
    "receipt_html",
    "short_id",
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
    "rejected": "#c62828",
}
"""The colour of each status, shared by these tables, ``SessionView`` and the timeline."""

FOLD_AT = 160
"""Texts longer than this many characters are folded: their start shows, the rest opens."""

_TABLE = "border-collapse:collapse;font-size:0.9em;margin:2px 0;"
_CELL = "padding:2px 8px;border-bottom:1px solid #ddd;text-align:left;vertical-align:top;"
_HEAD = _CELL + "font-weight:600;white-space:nowrap;"
# Breaks between words; inside a word only when it alone is wider than the line (a URL).
# overflow-wrap (not word-break) leaves a column's narrowest width at its longest word.
_TEXT = "white-space:pre-wrap;overflow-wrap:break-word;"
_WIDE = "min-width:16em;max-width:48em;"
"""Columns of text: wide enough that a sentence never wraps word by word."""
_MUTED = "opacity:0.65;font-size:0.9em;"
_NOWRAP = "white-space:nowrap;"
INERT_MATH = "agentnb-html mathjax_ignore tex2jax_ignore"
"""The classes of every repr's outer element: MathJax leaves what is inside alone."""
_ID = re.compile(r"^([a-z]{2,5})_([0-9a-f]{12,})$")


def _inert_math(render: Callable[..., str]) -> Callable[..., str]:
    """Wrap a repr's markup in an element that MathJax skips ($ stays a dollar)."""

    @functools.wraps(render)
    def wrapped(*args: Any, **kwargs: Any) -> str:
        return f'<div class="{INERT_MATH}">{render(*args, **kwargs)}</div>'

    return wrapped


def short_id(value: object) -> str:
    """An id as a reader sees it: ``turn_…9e6ba8`` (its prefix and last six characters)
    in ``<code>``, the whole id in the ``title`` (shown on hover); anything else escaped."""
    text = "" if value is None else str(value)
    found = _ID.match(text)
    if found is None:
        return f"<code>{esc(text)}</code>" if text else ""
    prefix, hexa = found.groups()
    return f'<code style="{_NOWRAP}" title="{esc(text)}">{prefix}_\u2026{hexa[-6:]}</code>'


def _hover(ids: Iterable[tuple[str, object]]) -> str:
    """A ``title`` attribute holding ids (``turn turn_… · run run_…``): words on screen, ids
    on hover."""
    shown = " \u00b7 ".join(f"{name} {value}" for name, value in ids if value)
    return f' title="{esc(shown)}"' if shown else ""


def plural(n: int, noun: str, many: str | None = None) -> str:
    """``1 task``, ``2 tasks`` (``many``: an irregular plural)."""
    return f"{n} {noun if n == 1 else (many or noun + 's')}"


def markdown_html(text: str) -> str:
    """Assistant Markdown as ``SessionView`` shows it: CommonMark with raw HTML and images
    off, every text escaped, paragraphs as ``<div>``; escaped plain text without
    ``markdown-it-py``."""
    renderer = _markdown()
    if renderer is None:
        return f'<span style="{_TEXT}">{esc(text)}</span>'
    rendered: str = renderer.render(text)
    return rendered.strip()


@functools.cache
def _markdown() -> Any:
    try:
        from markdown_it import MarkdownIt
    except ImportError:  # the widgets extra brings it; without it, plain text
        return None

    def restyle(state: Any) -> None:
        """Paragraphs as ``<div>`` blocks (no theme margins); links open in a new tab."""
        for token in state.tokens:
            if token.type in {"paragraph_open", "paragraph_close"}:
                token.tag = "div"
            for child in token.children or ():
                if child.type == "link_open":
                    child.attrSet("target", "_blank")
                    child.attrSet("rel", "noopener noreferrer")

    renderer = MarkdownIt("commonmark", {"html": False, "breaks": True}).disable("image")
    renderer.core.ruler.push("agentnb_restyle", restyle)
    return renderer


BIDI_CONTROLS = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
"""Bidirectional controls: text holding them (U+202E, right-to-left override, ...) would
show its neighbours reversed, so the HTML shows them as ``[U+202E]``."""


def esc(value: object) -> str:
    """Any value as inert HTML text (bidirectional controls shown by their code)."""
    text = html.escape(value if isinstance(value, str) else str(value), quote=True)
    return BIDI_CONTROLS.sub(lambda m: f"[U+{ord(m.group()):04X}]", text)


BlockSrc = Callable[[Mapping[str, Any]], str | None]
"""An image or file part -> the URL its bytes are shown from (None: not at hand)."""


def inline_src(part: Mapping[str, Any]) -> str | None:
    """The data URL of a part whose bytes are inline in the log; None for a blob's."""
    data = part.get("data")
    return f"data:{part.get('mime')};base64,{data}" if isinstance(data, str) else None


def blocks_html(blocks: Iterable[Mapping[str, Any]], src: BlockSrc = inline_src) -> str:
    """A rich result's blocks: text, JSON, images as thumbnails (opening the full image),
    files as download links; a block whose bytes ``src`` cannot give shows its stand-in."""
    out = []
    for part in blocks:
        kind = part.get("type")
        if kind == "text":
            out.append(f'<div style="{_TEXT}">{esc(part.get("text", ""))}</div>')
            continue
        if kind == "json":
            out.append(f'<pre style="{_TEXT}margin:2px 0;">{esc(_json(part.get("data")))}</pre>')
            continue
        name = str(part.get("name") or kind or "file")
        about = f"{name} ({part.get('mime')}, {part.get('size')} bytes)"
        url = src(part) if kind in ("image", "file") else None
        if url is None:
            out.append(f'<div style="{_MUTED}">[{esc(kind)}: {esc(about)}]</div>')
        elif kind == "image" and str(part.get("mime", "")).startswith("image/"):
            out.append(
                f'<a class="agentnb-thumb" href="{esc(url)}" target="_blank" rel="noopener">'
                f'<img src="{esc(url)}" alt="{esc(name)}" title="{esc(about)}" '
                'style="max-width:240px;max-height:160px;border:1px solid #ddd;'
                'border-radius:4px;"></a>'
            )
        else:
            out.append(f'<a href="{esc(url)}" download="{esc(name)}">{esc(about)}</a>')
    return f'<div class="agentnb-blocks">{"".join(out)}</div>'


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


def _when(value: datetime | None, since: datetime | None = None, hover: str = "") -> str:
    """A time on one line, to the second (the milliseconds and the zone on hover); only the
    time of day when it falls on the day of ``since``."""
    if value is None:
        return ""
    whole = hover + value.isoformat(sep=" ", timespec="milliseconds")
    same_day = since is not None and since.date() == value.date()
    shown = value.strftime("%H:%M:%S" if same_day else "%Y-%m-%d %H:%M:%S")
    return f'<span style="{_NOWRAP}" title="{esc(whole)}">{esc(shown)}</span>'


def _folded_markdown(text: str) -> str:
    """Assistant text rendered as Markdown; past FOLD_AT characters its start (as text)
    opens the whole."""
    rendered = f'<div style="{_TEXT}">{markdown_html(text)}</div>'
    if len(text) <= FOLD_AT:
        return rendered
    start = " ".join(text[:FOLD_AT].split())
    return (
        f'<details><summary style="cursor:pointer;{_TEXT}">{esc(start)}\u2026 '
        f'<span style="{_MUTED}">({len(text)} characters)</span></summary>{rendered}</details>'
    )


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=repr)


def _table(
    headers: Iterable[str],
    rows: Iterable[Iterable[str]],
    caption: str = "",
    wide: Iterable[str] = (),
) -> str:
    """A table of already-escaped cells; the ``wide`` columns hold running text."""
    headers = tuple(headers)
    wide = frozenset(wide)
    styles = [_CELL + (_WIDE if h in wide else "") for h in headers]
    head = "".join(f'<th style="{_HEAD}">{esc(h)}</th>' for h in headers)
    body = "".join(
        "<tr>"
        + "".join(f'<td style="{st}">{cell}</td>' for st, cell in zip(styles, row, strict=True))
        + "</tr>"
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
        f'<tr><th style="{_HEAD}">{esc(name)}</th><td style="{_CELL}{_WIDE}">{value}</td></tr>'
        for name, value in pairs
    )
    return f'<table style="{_TABLE}"><tbody>{rows}</tbody></table>'


def _title(text: str) -> str:
    return f'<div style="font-weight:600;margin:4px 0 2px;">{text}</div>'


# -- tasks ------------------------------------------------------------------------------------

_TASK_HEADERS = ("task", "status", "runs", "started", "ended")


def _task_row(task: Any) -> list[str]:
    runs = tuple(task.run_ids)
    error = f'<div style="color:#c62828;">{fold(task.error)}</div>' if task.error else ""
    return [
        f"<div{_hover([('turn', task.turn_id)])}>{fold(task.input)}{error}</div>",
        badge(task.status),
        f"<span{_hover([('runs', ' '.join(runs))])}>{len(runs)}</span>" if runs else "0",
        _when(task.started_at or task.created_at, hover=_created(task)),
        _when(task.ended_at, since=task.started_at),
    ]


def _created(task: Any) -> str:
    """Hover text of a task's start: when it was accepted (and that it has not started)."""
    if task.created_at is None:
        return ""
    created = task.created_at.isoformat(sep=" ", timespec="milliseconds")
    return f"accepted {created}" + ("; started " if task.started_at else "; not started; ")


@_inert_math
def task_html(task: Any) -> str:
    """One ``Task`` as a one-row table."""
    return _table(_TASK_HEADERS, [_task_row(task)], wide=("task",))


@_inert_math
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
    caption = f"{plural(len(rows), 'task')}: {summary}"
    return _table(_TASK_HEADERS, rows, caption=caption, wide=("task",))


# -- messages ---------------------------------------------------------------------------------


def thinking_html(text: str, *, redacted: bool = False) -> str:
    """Reasoning (thinking) as a closed fold titled "Thinking": escaped text, never Markdown.

    ``redacted``: the provider sent the reasoning encrypted only (nothing to show)."""
    if not text:
        if not redacted:
            return ""
        return f'<div class="agentnb-thinking" style="{_MUTED}">Thinking (redacted)</div>'
    return (
        f'<details class="agentnb-thinking"><summary style="cursor:pointer;{_MUTED}">'
        f"Thinking ({len(text)} characters)</summary>"
        f'<div style="{_TEXT}{_MUTED}">{esc(text)}</div></details>'
    )


def _message_text(message: Message) -> str:
    parts = []
    if message.reasoning:
        text = "\n\n".join(part.text for part in message.reasoning if part.text)
        parts.append(thinking_html(text, redacted=True))
    if message.text:
        assistant = message.role == "assistant"
        parts.append(_folded_markdown(message.text) if assistant else fold(message.text))
    for call in message.tool_calls:
        parts.append(
            f'<div><code>{esc(call.name)}</code> <span style="{_MUTED}">'
            f"{fold(_json(dict(call.arguments)), 120)}</span></div>"
        )
    return "".join(parts)


def _messages_table(
    messages: Iterable[Message], caption: str = "", sources: Mapping[str, str] | None = None
) -> str:
    rows = []
    for n, message in enumerate(messages, 1):
        role = message.role if message.role != "tool" else f"tool \u00b7 {message.name or ''}"
        role = (sources or {}).get(message.id, role)  # a steer or material, not a task
        hover = _hover([("turn", message.turn_id), ("message", message.id)])
        rows.append(
            [
                f'<span style="{_MUTED}">{n}</span>',
                f'<b style="{_NOWRAP}"{hover}>{esc(role)}</b>',
                _message_text(message),
            ]
        )
    if not rows:
        return f'<div style="{_MUTED}">No messages.</div>'
    return _table(("#", "role", "text"), rows, caption=caption, wide=("text",))


@_inert_math
def messages_html(messages: Iterable[Message], caption: str = "") -> str:
    """Messages as a table: role, text (and the tool calls an assistant message makes)."""
    return _messages_table(messages, caption)


@_inert_math
def transcript_html(transcript: Any) -> str:
    """A ``Transcript``: its messages as of one seq."""
    messages = tuple(transcript.messages)
    at = _hover([("as of seq", transcript.as_of_seq)])
    caption = f"<span{at}>Transcript: {plural(len(messages), 'message')}</span>"
    return _messages_table(messages, caption=caption, sources=getattr(transcript, "sources", {}))


@_inert_math
def history_page_html(page: Any) -> str:
    """A ``HistoryPage``: its messages, and whether more pages follow."""
    messages = tuple(page.messages)
    more = "more pages follow (next_cursor)" if page.next_cursor else "the last page"
    caption = f"History page: {plural(len(messages), 'message')}, {more}"
    return _messages_table(messages, caption=caption)


# -- outcomes, requests, inspection ----------------------------------------------------------


@_inert_math
def outcome_html(outcome: Any) -> str:
    """An ``Outcome``: how a run ended, its output (Markdown, as in the view) or error."""
    hover = _hover([("turn", outcome.turn_id), ("run", outcome.run_id)])
    pairs = [("status", f"<span{hover}>{badge(outcome.status)}</span>")]
    if outcome.output is not None:
        pairs.append(("output", _folded_markdown(outcome.output)))
    if outcome.error is not None:
        pairs.append(("error", f'<span style="color:#c62828;">{fold(outcome.error)}</span>'))
    return _fields(pairs)


_KINDS = {
    "confirmation": "approval",
    "external_execution": "external result",
    "ask_user": "question",
}


@_inert_math
def interactions_html(pending: Mapping[str, Any]) -> str:
    """Open requests (``session.pending()``): what is asked, of which tool, with what, and
    (a column shown only when one did) the sub-agents a request came through."""
    via = any(getattr(i, "path", ()) for i in pending.values())
    rows = [
        [
            (
                f"<span{_hover([('request', rid), ('turn', i.turn_id)])}>"
                f"{badge(_KINDS.get(i.kind, i.kind))}</span>"
            ),
            f"<code>{esc(i.tool_name or '')}</code>",
            fold(_json(dict(i.arguments)) if i.arguments else ""),
            fold(i.prompt or ""),
            *([esc(" \u203a ".join(i.path))] if via else []),
        ]
        for rid, i in pending.items()
    ]
    if not rows:
        return f'<div style="{_MUTED}">Nothing waits for you.</div>'
    headers = ("waits for", "tool", "arguments", "prompt", *(["from"] if via else []))
    wide = ("arguments", "prompt")
    caption = f"{plural(len(rows), 'request waits', 'requests wait')} for you"
    return _table(headers, rows, caption=caption, wide=wide)


def _child_row(child: Any) -> list[str]:
    used = child.usage
    hover = _hover([("call", child.call_id), ("child session", child.key.session_id)])
    return [
        f"<code{hover}>{esc(child.name or child.agent_id)}</code>",
        badge(child.status),
        fold(child.task),
        fold(child.output or child.error or ""),
        "" if used is None else esc(used.total_tokens),
    ]


_CHILD_HEADERS = ("sub-agent", "status", "task", "answer", "tokens")


@_inert_math
def child_html(child: Any) -> str:
    """One ``Child`` (a sub-agent call) as a one-row table."""
    return _table(_CHILD_HEADERS, [_child_row(child)], wide=("task", "answer"))


@_inert_math
def children_html(children: Iterable[Any]) -> str:
    """``session.children()``: each sub-agent call, where its child stands, its answer."""
    rows = [_child_row(c) for c in children]
    if not rows:
        return f'<div style="{_MUTED}">No sub-agent calls.</div>'
    caption = plural(len(rows), "sub-agent call")
    return _table(_CHILD_HEADERS, rows, caption=caption, wide=("task", "answer"))


@_inert_math
def permissions_html(rules: Iterable[Any]) -> str:
    """``session.permissions()``: which tool runs without asking, for which arguments, where."""
    rows = [
        [
            f"<code>{esc(r.tool_name)}</code>",
            fold(_json(dict(r.match))) if r.match else f'<span style="{_MUTED}">every call</span>',
            esc(r.scope),
            f'<span style="{_MUTED}">{esc(r.session_id)}</span>',
            short_id(r.rule_id),
        ]
        for r in rules
    ]
    if not rows:
        return f'<div style="{_MUTED}">No permission rules.</div>'
    headers = ("runs without asking", "when the arguments are", "scope", "granted in", "rule")
    return _table(headers, rows, caption=f"{len(rows)} permission rule(s)")


def _sentence(text: str, ids: Iterable[tuple[str, object]]) -> str:
    return f"<div{_hover(ids)}>{text}</div>"


@_inert_math
def receipt_html(receipt: Any) -> str:
    """A ``Receipt`` as a sentence: what was accepted and where it stands."""
    # A receipt is as of when it was made: it says what was accepted, never a status that
    # the task has long left (tasks() and the view say where it stands now).
    what = {
        "steered": "Steering accepted: the running task reads it at its next step.",
        "started": "Task accepted: it started.",
        "queued": "Task accepted: it went into the queue.",
    }.get(receipt.disposition or "", "Accepted.")
    return _sentence(
        f"{badge('accepted')} {what}",
        [("turn", receipt.turn_id), ("run", receipt.run_id), ("command", receipt.command_id)],
    )


@_inert_math
def input_receipt_html(receipt: Any) -> str:
    """An ``InputReceipt`` as a sentence: steering for a task, or material for the next step."""
    if receipt.turn_id is None:
        text = "Material accepted: the next step of whatever runs reads it, once."
    else:
        text = "Steering accepted: the task reads it at its next step."
    return _sentence(text, [("turn", receipt.turn_id), ("input", receipt.input_id)])


def _holder(holder: Any) -> str:
    if holder is None:
        return f'<span style="{_MUTED}">nobody holds the lease</span>'
    if holder.local:
        where = "this runtime"
    else:
        host, _, rest = str(holder.owner).partition(":")
        pid = rest.split(":", 1)[0]
        alive = {True: "running", False: "stopped", None: "on another machine"}.get(
            holder.alive, ""
        )
        where = f"a runtime in process {esc(pid)} on {esc(host)} ({alive})"
    hover = _hover([("owner", holder.owner), ("epoch", holder.epoch)])
    return f"<span{hover}>{where}, for {holder.expires_in:.1f} s more unless renewed</span>"


@_inert_math
def inspection_html(inspection: Any) -> str:
    """An ``Inspection``: what runs, what is uncertain, what the next model call sees."""
    blocked = ""
    if inspection.blocked_by:
        hover = _hover([("turn", inspection.blocked_by)])
        blocked = f"<span{hover}>a task, {badge(inspection.blocked_status)}</span>"
    runs = tuple(inspection.active_runs)
    interrupted = inspection.interrupted_turn
    pairs = [
        ("active runs", f"<span{_hover([('runs', ' '.join(runs))])}>{len(runs)}</span>"),
        (
            "interrupted task",
            f"<span{_hover([('turn', interrupted)])}>yes</span>" if interrupted else "none",
        ),
        ("queue blocked by", blocked or "nothing"),
        ("lease holder", _holder(inspection.holder)),
    ]
    at = _hover([("as of seq", inspection.as_of_seq)])
    parts = [_title(f"<span{at}>What the runtime would do next</span>"), _fields(pairs)]
    for calls, title in (
        (tuple(getattr(inspection, "running_tool_calls", ())), "running"),
        (tuple(inspection.uncertain_tool_calls), "uncertain: reconcile before resuming"),
    ):
        if not calls:
            continue
        rows = [
            [
                (
                    f"<code{_hover([('call', c.call_id), ('turn', c.turn_id)])}>"
                    f"{esc(c.tool_name)}</code>"
                ),
                fold(_json(dict(c.arguments))),
            ]
            for c in calls
        ]
        parts.append(_title(f"{plural(len(calls), 'tool call')} {title}"))
        parts.append(_table(("tool", "arguments"), rows, wide=("arguments",)))
    children = tuple(getattr(inspection, "children", ()))
    if children:
        parts.append(_title(f"{plural(len(children), 'sub-agent')} at work"))
        parts.append(
            _table(_CHILD_HEADERS, [_child_row(c) for c in children], wide=("task", "answer"))
        )
    context = tuple(inspection.next_context)
    parts.append(
        f"<details><summary>next context: {plural(len(context), 'message')}</summary>"
        f"{_messages_table(context)}</details>"
    )
    return "".join(parts)


@_inert_math
def chat_snapshot_html(snapshot: Any) -> str:
    """A ``ChatSnapshot``: tasks, pending requests and the conversation at one cursor."""
    messages = tuple(snapshot.messages)
    return "".join(
        [
            _title(f"Chat snapshot at seq {esc(snapshot.cursor)}: {len(snapshot.items)} item(s)"),
            tasks_html(snapshot.tasks),
            interactions_html(snapshot.pending) if snapshot.pending else "",
            (
                f"<details><summary>{plural(len(messages), 'message')}</summary>"
                f"{_messages_table(messages)}</details>"
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


@_inert_math
def session_info_html(info: Any) -> str:
    """One ``SessionInfo`` as a one-row table."""
    return _table(_SESSION_HEADERS, [_session_row(info)], wide=("title",))


@_inert_math
def sessions_html(infos: Iterable[Any]) -> str:
    """A page of ``runtime.sessions()`` as one table, newest activity first."""
    rows = [_session_row(i) for i in infos]
    if not rows:
        return f'<div style="{_MUTED}">No sessions.</div>'
    return _table(_SESSION_HEADERS, rows, caption=f"{len(rows)} session(s)", wide=("title",))


def show(value: Any) -> HTML:
    """Rich display of what a ``Session`` returns: a list of tasks (``session.tasks()``), of
    sub-agent calls (``session.children()``), a dict of pending requests
    (``session.pending()``), or a record with ``_repr_html_``.
    Anything else raises ``InvalidInput``."""
    if isinstance(value, list | tuple) and all(hasattr(v, "run_ids") for v in value):
        return HTML(tasks_html(value), f"{len(value)} task(s)")
    if isinstance(value, list | tuple) and value and all(hasattr(v, "call_id") for v in value):
        return HTML(children_html(value), f"{len(value)} sub-agent call(s)")
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
