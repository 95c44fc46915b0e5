"""``SessionView``: a chat view of one session, built with standard ipywidgets.

The view is a pure function of the session's committed log: it folds the log once
(``read_fold``: the same read ``Session.snapshot()`` makes), renders the newest items, then
follows committed events after its cursor on a daemon thread and redraws at most
``1 / redraw_interval`` times a second from a second one. The kernel's loop is never blocked
and re-running the cell after a kernel restart shows the same conversation.

The view speaks in the user's words: a task is named by its own text (cut to a line), a
request by what it waits for ("waiting for your approval below"); ids stay on hover (the
``title`` of the task's text) and in ``inspect()``; errors show their message, not their
class, with ids replaced by what they name. The status line is always the current state;
the notice under the controls says what the person's last click did, in the past tense, so
it never goes stale. After a process stopped under a tool call (a kernel restart), the
recovery box offers the ways out as buttons: for each uncertain call "it ran — here is its
result" or "it did not run" (``reconcile``, then ``resume``), or "continue, recording it as
unknown" (``resume(uncertain="unknown")``). Every ``HTML`` widget sits under the
``mathjax_ignore`` class, so "$5 ... $10" stays text. ``close()`` stops following and
leaves the last drawing on screen, its controls disabled; when the session's runtime
closes, the view says so the same way.

Buttons only call ``Session`` operations; what they return or raise shows in the view. The
view reads the session through ``ViewedSession`` (``agentnb.widgets.source``): a local
``Session`` and a ``RemoteSession`` of an agentnb service both satisfy it.
Everything that came from the model, a tool or a person is escaped with ``html.escape``
before it goes into an ``HTML`` widget; the only markup is this module's constant tags.
Assistant replies are Markdown: ``markdown-it-py`` renders them in CommonMark with raw HTML
disabled (so ``<script>`` in a reply stays text), images off (no remote fetches from a
reply) and links checked by markdown-it (no ``javascript:``); it escapes every text it
outputs. ``SessionView`` is itself an ipywidgets ``VBox``, so it goes inside layouts. Only
standard widgets are used (no custom JavaScript), so the view works in JupyterLab 4,
Notebook 7 and VS Code.

Why it is long: one widget: its layout, its rendering of each chat item kind, and the
controls that send commands, all reading the same fold.
"""

from __future__ import annotations

import base64
import html
import json
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from agentnb.answers import Answer, ToolOutcome
from agentnb.errors import (
    AgentnbError,
    CannotResume,
    InvalidAnswer,
    InvalidInput,
    NotRunning,
    UncertainToolCalls,
    install_hint,
)
from agentnb.html import (
    INERT_MATH,
    STATUS_COLORS,
    BlockSrc,
    blocks_html,
    inline_src,
    markdown_html,
    thinking_html,
)
from agentnb.projections.chat import (
    ChatItem,
    ChatSnapshot,
    ChatState,
    interactions_of,
    tasks_of,
)
from agentnb.projections.decisions import check_resume, effective_status, latest_unfinished
from agentnb.projections.state import PARKING, InboxState, SessionState
from agentnb.records import Child, Interaction, Task, ToolCallRef
from agentnb.runtime.runtime import EXIT_REASON
from agentnb.widgets.rating import rating_bar
from agentnb.widgets.source import ViewedSession

try:
    import ipywidgets as w
    import markdown_it  # noqa: F401 - markdown_html renders with it
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "SessionView needs ipywidgets and markdown-it-py: " + install_hint("widgets")
    ) from exc

__all__ = ["SessionView", "markdown_html"]

_MAX_TASK_TEXT = 200
_LINE = 60
"""Characters of a task's text where the view names the task (status line, notices)."""
_IDLE_CHECK = 0.5
"""Seconds between the painter's idle checks (inbox moved elsewhere, lease expired)."""
_IDLE_REDRAW = 2.0
"""Seconds after which an idle painter redraws anyway (statuses that depend on the lease)."""


def _esc(value: object) -> str:
    """Text (from the model, a tool or a person) made inert for HTML."""
    return html.escape(value if isinstance(value, str) else str(value), quote=True)


def _json_text(value: Any) -> str:
    """Indented JSON for display; non-JSON values as their ``repr`` (escaped by the caller)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=repr)


# -- markup (constant tags and styles; every value goes through _esc) --------------------------

_BOX = (
    "border-radius:6px;padding:6px 10px;margin:2px 0;white-space:pre-wrap;"
    "word-break:break-word;line-height:1.4;"
)
_ROLE_STYLE = {
    "user": "background:var(--jp-layout-color2,#eef3fb);border-left:3px solid #4a7bd0;",
    "assistant": "background:var(--jp-layout-color1,#fafafa);border-left:3px solid #3b9c5a;",
    "system": "background:var(--jp-layout-color3,#eee);border-left:3px solid #999;",
}
_LABEL = "font-size:0.85em;opacity:0.7;margin-right:6px;"
_PRE = (
    "margin:2px 0 6px;padding:4px 6px;background:var(--jp-layout-color2,#f3f3f3);"
    "white-space:pre-wrap;word-break:break-word;font-family:var(--jp-code-font-family,monospace);"
)
_STATUS_COLOR = STATUS_COLORS
_SOURCE_LABEL = {"steer": "steer", "inject": "material", "answer": "answer"}
_DRAFTING = frozenset({"waiting", "streaming", "finishing"})


def _badge(status: str) -> str:
    color = _STATUS_COLOR.get(status, "#777")
    return (
        f'<span style="font-size:0.8em;padding:0 5px;border-radius:8px;'
        f'border:1px solid {color};color:{color};">{_esc(status)}</span>'
    )


def message_html(item: ChatItem) -> str:
    """A user, assistant or system message (assistant drafts show their streamed prefix)."""
    role = item.role
    label = role if item.source in {None, "submit"} else _SOURCE_LABEL.get(item.source or "", role)
    markdown = role == "assistant" and bool(item.text)
    text = markdown_html(item.text) if markdown else _esc(item.text)
    tail = ""
    if item.status in _DRAFTING:
        tail = '<span style="opacity:0.6;">\u258c</span>'
    elif item.status != "completed":
        tail = " " + _badge(item.status)
    if item.error:
        tail += f'<div style="color:#c0392b;">{_esc(item.error)}</div>'
    thinking = thinking_html(item.reasoning) if role == "assistant" else ""
    if not text and not tail and not thinking and role == "assistant":
        return ""  # a reply that only calls tools: its cards say it
    style = _BOX + _ROLE_STYLE.get(role, _ROLE_STYLE["system"])
    if markdown or thinking:  # blocks from the renderer: newlines between them are not text
        style += "white-space:normal;"
    return (
        f'<div class="agentnb-msg" style="{style}">'
        f'<span style="{_LABEL}">{_esc(label)}</span>{thinking}{text}{tail}</div>'
    )


def tool_title(item: ChatItem) -> str:
    """The card's title: plain text (ipywidgets renders titles as text, never as HTML)."""
    return f"{item.tool_name or 'tool'} \u00b7 {item.status}"


def tool_html(item: ChatItem, src: BlockSrc = inline_src) -> str:
    """A tool card's body: arguments (also while streaming), progress, result, request
    (a rich result's blocks through ``blocks_html``, ``src`` giving their images' URLs)."""
    parts = [f"<div>{_badge(item.status)} <code>{_esc(item.tool_name or '')}</code></div>"]
    # Complete (or edited) arguments as JSON; while the model streams them, the raw text.
    done = item.arguments is not None
    arguments = _json_text(item.arguments) if done else item.arguments_text
    parts.append(
        f'<div style="{_LABEL}">arguments</div><pre style="{_PRE}">{_esc(arguments)}</pre>'
    )
    if item.progress:
        shown = "\n".join(_json_text(p) for p in item.progress)
        parts.append(f'<div style="{_LABEL}">progress</div><pre style="{_PRE}">{_esc(shown)}</pre>')
    if item.request is not None:
        request = item.request
        parts.append(
            f'<div style="{_LABEL}">{_esc(request.get("kind", ""))} '
            f"({_esc(request.get('status', ''))})</div>"
            f'<pre style="{_PRE}">{_esc(request.get("prompt") or "")}</pre>'
        )
    if item.result is not None:
        result = item.result
        shown = (
            blocks_html(result["blocks"], src)
            if result.get("blocks")
            else f'<pre style="{_PRE}">{_esc(result.get("output", ""))}</pre>'
        )
        parts.append(
            f'<div style="{_LABEL}">result {_badge(str(result.get("status", "")))}</div>{shown}'
        )
        if result.get("traceback"):  # on demand: folded until opened
            parts.append(
                f'<details class="agentnb-traceback"><summary style="{_LABEL}">traceback'
                f'</summary><pre style="{_PRE}">{_esc(result["traceback"])}</pre></details>'
            )
    if item.error:
        parts.append(f'<div style="color:#c0392b;">{_esc(item.error)}</div>')
    return f'<div class="agentnb-tool-body">{"".join(parts)}</div>'


def subagent_title(item: ChatItem) -> str:
    """A sub-agent card's title (plain text)."""
    info = item.subagent or {}
    name = info.get("name") or info.get("agent_id") or item.tool_name or "sub-agent"
    return f"sub-agent {name} \u00b7 {item.status}"


def subagent_html(item: ChatItem, live: Child | None = None) -> str:
    """A sub-agent card's body: the task, where the child's task stands (``live``: read
    from the child's own log now), and its answer once it ended."""
    info = item.subagent or {}
    status = live.status if live is not None else str(info.get("status", item.status))
    child = info.get("child") or {}
    parts = [
        (
            f"<div>{_badge(status)} <code>{_esc(info.get('agent_id', ''))}</code> "
            f'<span style="{_LABEL}">{_esc(child.get("session_id", ""))}</span></div>'
        ),
        f'<div style="{_LABEL}">task</div><pre style="{_PRE}">{_esc(info.get("task", ""))}</pre>',
    ]
    if live is not None and live.usage is not None:
        used = live.usage
        progress = []
        if used.steps:
            progress.append(f"{used.steps} step(s)")
        if used.tool_calls:
            progress.append(f"{used.tool_calls} tool call(s)")
        if used.total_tokens:
            progress.append(f"{used.total_tokens} tokens")
        if progress:
            parts.append(f'<div style="{_LABEL}">progress: {_esc(" · ".join(progress))}</div>')
    output = live.output if live is not None and live.output else info.get("output")
    error = live.error if live is not None and live.error else info.get("error")
    if output:
        parts.append(
            f'<div style="{_LABEL}">answer</div>'
            f'<div class="agentnb-subagent-answer" style="{_BOX}{_ROLE_STYLE["assistant"]}'
            f'white-space:normal;">{markdown_html(str(output))}</div>'
        )
    if error:
        parts.append(f'<div style="color:#c0392b;">{_esc(error)}</div>')
    return f'<div class="agentnb-subagent-body">{"".join(parts)}</div>'


def plan_title(item: ChatItem) -> str:
    """A ``todo`` card's title (plain text)."""
    n = len(item.plan)
    return f"plan \u00b7 {n} step{'' if n == 1 else 's'}"


def plan_html(item: ChatItem) -> str:
    """A ``todo`` card's body: the plan it recorded, one line per step."""
    marks = {"completed": "\u2611", "in_progress": "\u25b6", "pending": "\u2610"}
    rows = [
        f"<div>{marks.get(str(step.get('status')), '')} {_esc(step.get('content', ''))} "
        f'<span style="{_LABEL}">{_esc(step.get("status", ""))}</span></div>'
        for step in item.plan
    ]
    return f'<div class="agentnb-plan-body">{"".join(rows) or "(empty plan)"}</div>'


def request_html(request: Interaction) -> str:
    """The text of a pending-request card."""
    kind = {
        "confirmation": "Approval needed",
        "external_execution": "External result needed",
        "ask_user": "Question",
    }.get(request.kind, request.kind)
    shown = dict(request.arguments or {})
    if request.kind == "ask_user":  # the question is the prompt: no JSON repeating it
        shown = {k: v for k, v in shown.items() if v != request.prompt and k != "question"}
    arguments = _json_text(shown) if shown else ""
    body = f'<pre style="{_PRE}">{_esc(arguments)}</pre>' if arguments else ""
    path = ""
    if request.path:  # a sub-agent's request, answered here and routed to it
        via = " \u203a ".join(request.path)
        path = f' <span class="agentnb-request-path" style="{_LABEL}">from {_esc(via)}</span>'
    return (
        f'<div style="{_BOX}border-left:3px solid #c77d00;">'
        f"<b>{_esc(kind)}</b> <code>{_esc(request.tool_name or '')}</code>{path}"
        f"<div>{_esc(request.prompt or '')}</div>{body}</div>"
    )


def tasks_html(tasks: Iterable[Task], reasons: dict[str, str] | None = None) -> str:
    """The task list: status, the task's text and its runs (its id on hover); ``reasons``:
    turn id -> why it stopped, in plain words (instead of the recorded error)."""
    rows = []
    for task in tasks:
        text = task.input if len(task.input) <= _MAX_TASK_TEXT else task.input[:_MAX_TASK_TEXT]
        more = "\u2026" if len(task.input) > _MAX_TASK_TEXT else ""
        why = (reasons or {}).get(task.turn_id) or task.error
        error = f' <span style="color:#c0392b;">{_esc(why)}</span>' if why else ""
        runs = len(task.run_ids)
        when = f" \u00b7 started {task.started_at:%H:%M:%S}" if task.started_at else ""
        rows.append(
            f'<tr title="{_esc(task.turn_id)}"><td style="padding:1px 6px;">'
            f"{_badge(task.status)}</td>"
            f'<td style="padding:1px 6px;white-space:pre-wrap;overflow-wrap:break-word;'
            f'line-height:1.4;">'
            f"{_esc(text)}{more}{error}</td>"
            f'<td style="padding:1px 6px;opacity:0.6;font-size:0.8em;white-space:nowrap;">'
            f"{runs} run{'s' if runs != 1 else ''}{when}</td></tr>"
        )
    if not rows:
        return '<div style="opacity:0.6;">No tasks yet.</div>'
    return f'<table class="agentnb-task-table">{"".join(rows)}</table>'


def task_name(text: str, width: int = _LINE) -> str:
    """A task as the view names it: its own text on one line, quoted, cut with an ellipsis."""
    line = " ".join(text.split())
    if len(line) > width:
        line = line[: width - 1].rstrip() + "\u2026"
    return f"\u201c{line}\u201d"


def stopped_words(error: str | None, tools: Iterable[str] = ()) -> str:
    """Why a task stopped, in plain words: a process exit is a kernel restart in a notebook."""
    names = ", ".join(dict.fromkeys(tools))
    if error == EXIT_REASON:
        return f"the kernel restarted while {names} ran" if names else "the kernel restarted"
    if names:
        return f"its process stopped while {names} ran"
    return error or "it was interrupted"


_WAITS_FOR = {
    "confirmation": "your approval",
    "ask_user": "your answer",
    "external_execution": "an external result",
}


def waiting_words(state: SessionState, executing: bool) -> tuple[str, str] | None:
    """Why the latest task stopped and what a person does next, in plain words, with the
    turn id (for the hover); None when nothing waits for a person."""
    latest = state.latest_turn
    if latest is None:
        return None
    status = effective_status(state, latest, executing=executing)
    if status not in PARKING:
        return None
    name = task_name(latest.input)
    if status == "suspended" and not state.pending_of(latest.turn_id):
        working = [c for c in state.children_of(latest.turn_id) if c.get("status") == "running"]
        if working:
            names = ", ".join(dict.fromkeys(str(c.get("name") or c["agent_id"]) for c in working))
            return f"{name} is waiting for its sub-agent {names}, which waits for you below", (
                latest.turn_id
            )
    if status == "suspended":
        kinds = [r.get("kind") for r in state.pending_of(latest.turn_id)]
        wanted = [_WAITS_FOR.get(str(k), "an answer") for k in dict.fromkeys(kinds)]
        what = " and ".join(wanted) or "an answer"
        return f"{name} is waiting for {what} below", latest.turn_id
    if status == "failed":
        why = f": {latest.error}" if latest.error else ""
        return f"{name} failed{why}. Resume tries it again", latest.turn_id
    uncertain = state.uncertain_calls(latest.turn_id)
    error = latest.error
    if uncertain:
        why = stopped_words(error, sorted({c.name for c in uncertain}))
        return (
            f"{name} stopped: {why}. Say below whether it ran, or continue recording it as unknown",
            latest.turn_id,
        )
    if error == EXIT_REASON:
        return f"{name} stopped: {stopped_words(error)}. Resume continues it", latest.turn_id
    return f"{name} was interrupted. Resume continues it", latest.turn_id


def status_html(
    running: tuple[str, str] | None,
    waiting: tuple[str, str] | None,
    queued: int,
    idle: str = "Ready for a task",
) -> str:
    """The status line: the task at work (by its text) or what the latest one waits for,
    and how many tasks wait in the queue. Ids are on hover."""
    parts = []
    if running is not None:
        text, turn_id = running
        parts.append(f'Working on <span title="{_esc(turn_id)}">{_esc(text)}</span>')
    elif waiting is not None:
        text, turn_id = waiting
        parts.append(f'<span title="{_esc(turn_id)}">{_esc(text)}</span>')
    else:
        parts.append(idle)
    if queued:
        behind = " behind it" if running is None and waiting is not None else ""
        parts.append(f"{queued} more task{'s' if queued != 1 else ''} queued{behind}")
    joined = " \u00b7 ".join(parts)
    return f'<div style="font-size:0.85em;opacity:0.8;">{joined}.</div>'


def error_html(text: str) -> str:
    if not text:
        return ""
    return f'<div style="{_BOX}color:#c0392b;border-left:3px solid #c0392b;">{_esc(text)}</div>'


def notice_html(text: str) -> str:
    return f'<div style="font-size:0.85em;opacity:0.8;">{_esc(text)}</div>' if text else ""


def marker_html(item: ChatItem) -> str:
    """A line across the conversation where the agent changed, saying what changed."""
    what = f": {_esc(item.text)}" if item.text else ""
    return (
        '<div class="agentnb-marker" style="display:flex;align-items:center;gap:8px;'
        'margin:6px 0;font-size:0.85em;opacity:0.75;">'
        '<span style="flex:1;border-top:1px dashed #999;"></span>'
        f"<span>the agent changed here{what}</span>"
        '<span style="flex:1;border-top:1px dashed #999;"></span></div>'
    )


def steers_html(steers: Iterable[str]) -> str:
    """Guidance accepted for the task that its next step has not read yet (shown waiting)."""
    return "".join(
        f'<div class="agentnb-msg agentnb-steer-waiting" style="{_BOX}'
        f'{_ROLE_STYLE["user"]}opacity:0.75;"><span style="{_LABEL}">steer</span>'
        f"{_esc(text)} {_badge('waiting')}</div>"
        for text in steers
    )


def header_html(session: ViewedSession) -> str:
    """The view's header: the session, and where it lives (the store's resolved file, or
    the service), so a wrong store path shows at a glance."""
    runtime = session.runtime
    store = getattr(runtime, "store", None)
    where = ""
    if store is not None:
        path = getattr(store, "path", None)
        where = f"store {os.path.abspath(path)}" if path is not None else f"store {store.url}"
    elif url := getattr(runtime, "url", None):
        where = f"service {url}"
    key = session.key
    return (
        f'<div style="font-size:0.8em;opacity:0.6;" title="{_esc(key)}">'
        f"session {_esc(key.session_id)}" + (f" \u00b7 {_esc(where)}" if where else "") + "</div>"
    )


def call_words(call: ToolCallRef | Interaction) -> str:
    """A tool call as a person reads it: ``research(topic='rust')``."""
    args = ", ".join(f"{k}={v!r}" for k, v in (call.arguments or {}).items())
    if len(args) > _LINE:
        args = args[: _LINE - 1] + "\u2026"
    return f"{call.tool_name}({args})"


_STYLE = """<style>
.agentnb-view { box-sizing: border-box; max-width: 100%; overflow-x: hidden; }
.agentnb-view .agentnb-input, .agentnb-view .agentnb-args-input { box-sizing: border-box;
  max-width: 100%; }
.agentnb-view .agentnb-input textarea, .agentnb-view .agentnb-args-input textarea {
  box-sizing: border-box; width: 100%; }
.agentnb-view button:disabled, .agentnb-view .jupyter-button:disabled,
.agentnb-view .widget-button:disabled { opacity: 0.4; filter: grayscale(1);
  cursor: not-allowed; box-shadow: none; }
</style>"""
"""The view's own rules, scoped to it: its boxes never overflow sideways, disabled buttons
look disabled (grey, faint) in JupyterLab, Notebook 7 and VS Code alike."""


_IDS = re.compile(r"\b(?:(?:turn|task) )?((turn|run|call|req|cmd|inp)_[0-9a-f]{12,})\b")
"""An id in an error message (with the word "turn"/"task" before it, which the task's
quoted text replaces too)."""
_CLOSED = (
    "This view is closed: it shows the conversation as it was. Display the session again "
    "to follow it."
)


# -- the view ---------------------------------------------------------------------------------


def _still_html(view: _View | None, why: str) -> str:
    """A closed view's last drawing as one piece of markup (tool cards as ``<details>``)."""
    if view is None:
        return notice_html(why)
    items = []
    for item in view.items:
        if item.kind == "tool":
            items.append(
                f'<details class="agentnb-tool"><summary>{_esc(tool_title(item))}</summary>'
                f"{tool_html(item)}</details>"
            )
        elif item.kind == "subagent":
            items.append(
                f'<details class="agentnb-subagent"><summary>{_esc(subagent_title(item))}'
                f"</summary>{subagent_html(item)}</details>"
            )
        elif item.kind == "plan":
            items.append(
                f'<details class="agentnb-plan" open><summary>{_esc(plan_title(item))}</summary>'
                f"{plan_html(item)}</details>"
            )
        elif item.kind == "agent_changed":
            items.append(marker_html(item))
        elif item.kind == "summary":
            items.append(
                "<details><summary>earlier messages summarised</summary>"
                f'<div style="white-space:pre-wrap;">{_esc(item.text)}</div></details>'
            )
        else:
            items.append(message_html(item))
    queued = sum(1 for t in view.tasks if t.status == "queued")
    requests = "".join(request_html(r) for r in view.pending.values())
    idle = f"Closed while {view.working_on[0]} was running" if view.working_on else "Closed"
    status = status_html(None, view.waiting, queued, idle=idle)
    return (
        f'<div class="agentnb-status">{status}</div>'
        f'<div class="agentnb-transcript">{"".join(items)}</div>'
        f'<div class="agentnb-pending">{requests}</div>'
        f'<div class="agentnb-tasks">{tasks_html(view.tasks, view.reasons)}</div>'
        f'<div class="agentnb-notice">{notice_html(why)}</div>'
    )


class _View:
    """Everything one render needs, computed under the state lock (immutable values)."""

    __slots__ = (
        "children",
        "cursor",
        "items",
        "pending",
        "reasons",
        "resumable",
        "running",
        "steers",
        "tasks",
        "total",
        "uncertain",
        "waiting",
        "working_on",
    )

    def __init__(
        self,
        cursor: int,
        items: tuple[ChatItem, ...],
        total: int,
        pending: dict[str, Interaction],
        tasks: list[Task],
        running: tuple[str, str] | None,
        resumable: str | None,
        waiting: tuple[str, str] | None,
        working_on: tuple[str, str] | None,
        children: dict[str, Child] | None = None,
        uncertain: tuple[ToolCallRef, ...] = (),
        reasons: dict[str, str] | None = None,
        steers: tuple[str, ...] = (),
    ) -> None:
        self.uncertain = uncertain
        """The calls whose outcome a person must say before the latest task goes on."""
        self.reasons = reasons or {}
        """turn_id -> why that task stopped, in plain words."""
        self.steers = steers
        """Guidance accepted for the running task that its next step has not read yet."""
        self.children = children or {}
        """call_id -> the live state of a sub-agent call still at work."""
        self.cursor = cursor
        self.items = items
        self.total = total
        self.pending = pending
        self.tasks = tasks
        self.running = running
        """(turn_id, run_id) of the run at work, if any."""
        self.resumable = resumable
        self.waiting = waiting
        """What the latest task waits for, in words, and its turn id; None if nothing."""
        self.working_on = working_on
        """The running task's name (its text) and turn id."""


class _Fold(Protocol):
    """A chat fold the view reads under ``lock``: the session's shared one (``ChatFolds``,
    fed by the commit bus) or the view's own (``_OwnFold``)."""

    @property
    def lock(self) -> threading.RLock: ...

    def feed(self, events: Sequence[Any]) -> None: ...

    def current(self, at_least: int) -> ChatState: ...


class _OwnFold:
    """The view's own chat fold, for a session that shares none with it (a
    ``RemoteSession``): the face of the shared one, folded from the session's log."""

    def __init__(self, chat: ChatState, session: ViewedSession) -> None:
        self.lock = threading.RLock()
        self.chat = chat
        self._log = session.log

    def feed(self, events: Sequence[Any]) -> None:
        with self.lock:
            for event in events:
                self.chat.apply(event)  # at or below the fold: ignored

    def current(self, at_least: int) -> ChatState:
        with self.lock:
            while self.chat.seq < at_least and (events := self._log.read_after(self.chat.seq, 256)):
                self.feed(events)
            return self.chat


def read_fold(session: ViewedSession) -> tuple[_Fold, InboxState]:
    """The view's one read: the session's chat fold (shared with every reader of this
    process when the session offers it, ``shared_chat``; else a copy of exactly ``(0,
    head]`` of the log) and a copy of its inbox fold at the inbox head."""
    shared = getattr(session, "shared_chat", None)
    if shared is not None:
        fold, inbox = shared()
        return fold, inbox
    chat, inbox = session.chat_copy()
    return _OwnFold(chat, session), inbox


class SessionView(w.VBox):  # type: ignore[misc]  # ipywidgets ships no type information
    """A live chat view of ``session``, an ipywidgets ``VBox``: display it, or put it in a
    layout (``widgets.HBox([view, other])``).

    Shows the newest ``max_items`` items (``Show earlier`` adds ``page`` more), pending
    requests with Approve / Reject (with a reason) or an answer box, the task list and a
    status line; the input box has Submit, Steer and Inject, next to Interrupt and Resume,
    which are enabled only when they apply. ``follow=False`` draws once and only redraws on
    ``refresh()`` and after its own actions. ``close()`` stops following and closes the
    widgets.
    """

    def __init__(
        self,
        session: ViewedSession,
        *,
        max_items: int = 50,
        page: int = 50,
        follow: bool = True,
        redraw_interval: float = 0.1,
    ) -> None:
        if not isinstance(session, ViewedSession):
            raise TypeError(
                "SessionView needs an agentnb Session (or a RemoteSession), got "
                f"{type(session).__name__}"
            )
        super().__init__()
        self.session = session
        self._thumbs: dict[str, str | None] = {}  # blob thumbnails by digest (_block_src)
        self.max_items = max(1, int(max_items))
        self.page = max(1, int(page))
        self.redraw_interval = max(0.0, float(redraw_interval))
        self._limit = self.max_items
        self._fold, self._inbox = read_fold(session)
        self._lock = self._fold.lock
        """Guards the fold (``_state``, ``_inbox``): the follower and actions both feed it."""
        self._seen = self._fold.current(0).seq
        """The newest seq the view was told of (its follower's, or a refresh's head)."""
        self._shown_run: str | None = None
        """The run the view last drew as running (what Interrupt stops)."""
        self._draw_lock = threading.Lock()
        self._stop = threading.Event()
        self._dirty = threading.Event()
        self._threads: list[threading.Thread] = []
        self._closed = False
        self._item_widgets: dict[str, tuple[ChatItem, Any]] = {}
        self._request_widgets: dict[str, Any] = {}
        self._rating_bars: dict[str, Any] = {}
        """Answer item id -> its thumbs and comment box (``agentnb.widgets.rating``)."""
        self._live_children: dict[str, Child] = {}
        """The sub-agent calls at work at the last drawing (their cards follow the child)."""
        self.nested: dict[str, SessionView] = {}
        """call_id -> the child's own chat, opened in its sub-agent card."""
        self._last: _View | None = None
        """What the last drawing showed (a closed view keeps it as static markup)."""
        self.renders = 0
        """How many times the view was drawn."""
        self.rendered_seq = 0
        """The cursor of the last drawing."""
        self.on_render: Callable[[int], None] | None = None
        """Called (from the drawing thread) with the cursor after every drawing."""
        self._build()
        self._render()
        if follow:
            self.start()

    # -- widgets -----------------------------------------------------------------------------

    def _build(self) -> None:
        def classed(widget: Any, name: str) -> Any:
            widget.add_class(name)
            return widget

        self.style = classed(w.HTML(_STYLE), "agentnb-style")
        self.header = classed(w.HTML(header_html(self.session)), "agentnb-header")
        self.status = classed(w.HTML(), "agentnb-status")
        self.recovery = classed(w.VBox(), "agentnb-recovery")
        self._recovery_for: tuple[str, ...] = ()
        self._settled: dict[str, ToolOutcome] = {}
        """call_id -> what a person said about an uncertain call (reconciled once all are)."""
        self._answered: dict[str, str] = {}
        """request_id -> the command id of the answer this view sent for it."""
        self.steers = classed(w.HTML(), "agentnb-steers")
        self.error = classed(w.HTML(), "agentnb-error")
        self.notice = classed(w.HTML(), "agentnb-notice")
        self.earlier = classed(
            w.Button(description="Show earlier", layout=w.Layout(display="none")),
            "agentnb-earlier",
        )
        self.earlier.on_click(lambda _: self.show_earlier())
        self.transcript = classed(w.VBox(), "agentnb-transcript")
        self.requests = classed(w.VBox(), "agentnb-pending")
        self.tasks = classed(w.HTML(), "agentnb-tasks")
        self.input = classed(
            w.Textarea(
                placeholder="Ask the agent, steer it, or hand it material\u2026",
                layout=w.Layout(width="auto", height="4em"),
            ),
            "agentnb-input",
        )
        self.submit_button = classed(
            w.Button(description="Submit", button_style="primary", tooltip="Start a new task"),
            "agentnb-submit",
        )
        self.steer_button = classed(
            w.Button(description="Steer", tooltip="Guide the running task"), "agentnb-steer"
        )
        self.inject_button = classed(
            w.Button(description="Inject", tooltip="Hand the agent reference material"),
            "agentnb-inject",
        )
        self.interrupt_button = classed(
            w.Button(description="Interrupt", button_style="warning"), "agentnb-interrupt"
        )
        self.resume_button = classed(w.Button(description="Resume"), "agentnb-resume")
        self.submit_button.on_click(lambda _: self.submit())
        self.steer_button.on_click(lambda _: self.steer())
        self.inject_button.on_click(lambda _: self.inject())
        self.interrupt_button.on_click(lambda _: self.interrupt())
        self.resume_button.on_click(lambda _: self.resume())
        controls = w.HBox(
            [
                self.submit_button,
                self.steer_button,
                self.inject_button,
                self.interrupt_button,
                self.resume_button,
            ]
        )
        parts: list[Any] = [
            self.style,
            self.header,
            self.status,
            self.earlier,
            self.transcript,
            self.steers,
            self.requests,
            self.recovery,
            self.tasks,
            self.input,
            controls,
            self.error,
            self.notice,
        ]
        self.children = tuple(parts)
        self.add_class("agentnb-view")
        for name in INERT_MATH.split():  # MathJax leaves the view's text alone ($5 ... $10)
            self.add_class(name)

    @property
    def widget(self) -> SessionView:
        """The view itself (it is the ``VBox``); kept for code written when it held one."""
        return self

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        bundle = super()._repr_mimebundle_(**kwargs)
        # A stable text form (the widget's own repr lists its changing children).
        bundle["text/plain"] = f"SessionView({self.session.key})"
        return bundle

    def __repr__(self) -> str:
        return f"SessionView({self.session.key}, seq={self.rendered_seq})"

    # -- reading -----------------------------------------------------------------------------

    def snapshot(self) -> ChatSnapshot:
        """The ``ChatSnapshot`` the view holds now (its cursor is what it has folded)."""
        live = self.session.executing()
        with self._lock:
            return self._state.snapshot(self._inbox, executing=live)

    @property
    def _state(self) -> ChatState:
        """The chat fold, holding at least what the view was told of; read under the lock."""
        return self._fold.current(self._seen)

    @property
    def cursor(self) -> int:
        """The seq of the last committed event folded into the view."""
        with self._lock:
            return self._state.seq

    def _catch_up(self) -> None:
        """Fold what was committed since the cursor (both logs); caller holds the lock."""
        self._seen = max(self._seen, self.session.log.head())
        self._fold.current(self._seen)
        self._fold_inbox()

    def _fold_inbox(self) -> None:
        """Fold the commands accepted since the last look; caller holds the lock."""
        while commands := self.session.inbox.read_after(self._inbox.seq, 1000):
            for event in commands:
                self._inbox.apply(event)

    def refresh(self) -> None:
        """Fold everything committed now and redraw (also without a follower)."""
        with self._lock:
            self._catch_up()
        self._render()

    # -- drawing -----------------------------------------------------------------------------

    def _compute(self, *, offline: bool = False) -> _View:
        """What to draw, from the fold; ``offline``: without reading the store (closed)."""
        live = False if offline else self.session.executing()
        with self._lock:
            if not offline:
                self._fold_inbox()
            state = self._state
            pending = interactions_of(state.session)
            working = {
                c["turn_id"] for c in state.session.children.values() if c["status"] == "running"
            }
        children: dict[str, Child] = {}
        if working and not offline:  # sub-agents at work: their cards and requests, live
            for turn_id in working:
                for child in self.session.children(turn_id):
                    if child.status not in {"completed", "failed", "cancelled"} or any(
                        c["call_id"] == child.call_id and c["status"] == "running"
                        for c in state.session.children.values()
                    ):
                        children[child.call_id] = child
            pending = pending | {
                rid: r for rid, r in self.session.pending().items() if r.path and rid not in pending
            }
        with self._lock:
            active = state.session.active_run if live else None
            self._shown_run = active
            running = (state.session.runs[active].turn_id, active) if active else None
            working_on = None
            if running is not None:
                turn = state.session.turns.get(running[0])
                working_on = (task_name(turn.input if turn else ""), running[0])
            resumable, uncertain = self._resumable(live)
            latest = latest_unfinished(state.session)
            steers: tuple[str, ...] = ()
            if latest is not None:
                done = state.session.applied_inputs | state.session.discarded_inputs
                steers = tuple(
                    c.input or ""
                    for c in self._inbox.steers_for(latest.turn_id)
                    if c.command_id not in done
                )
            reasons = {}
            for turn in state.session.turns.values():
                calls = state.session.uncertain_calls(turn.turn_id) if not live else []
                if turn.error == EXIT_REASON or calls:
                    reasons[turn.turn_id] = stopped_words(turn.error, [c.name for c in calls])
            return _View(
                cursor=state.seq,
                items=state.last_items(self._limit),
                total=len(state),
                pending=pending,
                tasks=tasks_of(state.session, self._inbox, executing=live),
                running=running,
                resumable=resumable,
                waiting=None if running else waiting_words(state.session, live),
                working_on=working_on,
                children=children,
                uncertain=uncertain,
                reasons=reasons,
                steers=steers,
            )

    def _resumable(self, live: bool) -> tuple[str | None, tuple[ToolCallRef, ...]]:
        """The turn Resume would continue, if resume() would accept it now; else the calls
        a person must settle first, if that is what stops it."""
        latest = latest_unfinished(self._state.session)
        if latest is None:
            return None, ()
        try:
            check_resume(
                self._state.session,
                latest.turn_id,
                executing=live,
                tool=self.session.runtime.agent.tool_named,
            )
        except UncertainToolCalls as exc:
            return None, tuple(exc.calls)
        except CannotResume:
            return None, ()
        return latest.turn_id, ()

    def _render(self) -> None:
        view = self._compute()
        with self._draw_lock:
            if self._closed:
                return
            self._live_children = view.children
            self._draw_items(view)
            self._draw_requests(view.pending)
            self._draw_recovery(view.uncertain)
            _set(self.steers, "value", steers_html(view.steers))
            _set(self.tasks, "value", tasks_html(view.tasks, view.reasons))
            queued = sum(1 for t in view.tasks if t.status == "queued")
            status = status_html(view.working_on, view.waiting, queued)
            _set(self.status, "value", status)
            _set(self.steer_button, "disabled", view.running is None)
            _set(self.interrupt_button, "disabled", view.running is None)
            _set(self.resume_button, "disabled", view.resumable is None)
            self._last = view
            self.renders += 1
            self.rendered_seq = view.cursor
        if self.on_render is not None:
            self.on_render(view.cursor)

    def _draw_items(self, view: _View) -> None:
        hidden = view.total - len(view.items)
        _set(self.earlier, "description", f"Show earlier ({hidden} more)")
        _set(self.earlier.layout, "display", None if hidden > 0 else "none")
        old = self._item_widgets
        new: dict[str, tuple[ChatItem, Any]] = {}
        children = []
        for item in view.items:
            known = old.get(item.id)
            if known is None:
                widget = self._item_widget(item)
            else:
                widget = known[1]
                if known[0].kind != item.kind:  # a tool card that became a sub-agent or plan
                    _close_tree(widget)
                    widget = self._item_widget(item)
                elif known[0] is not item or item.id in view.children:
                    self._update_item_widget(widget, item)
            new[item.id] = (item, widget)
            children.append(widget)
            bar = rating_bar(self, item, self._rating_bars)
            if bar is not None:
                children.append(bar)
        for key, (_, widget) in old.items():
            if key not in new:
                nested = self.nested.pop(key, None)
                if nested is not None:
                    nested.close()
                _close_tree(widget)
        self._item_widgets = new
        if tuple(children) != tuple(self.transcript.children):
            self.transcript.children = tuple(children)

    def _block_src(self, part: Mapping[str, Any]) -> str | None:
        """A thumbnail's URL: the inline bytes, or a blob's read once through the session
        (kept per digest: the bytes behind a digest never change)."""
        url = inline_src(part)
        if url is not None or part.get("type") != "image":
            return url
        sha = str(part.get("sha256"))
        cache = self._thumbs
        if sha not in cache:
            try:
                data, _ = self.session.block_bytes(sha)
            except AgentnbError:
                cache[sha] = None  # shown as its stand-in
            else:
                cache[sha] = f"data:{part.get('mime')};base64,{base64.b64encode(data).decode()}"
        return cache[sha]

    def _item_widget(self, item: ChatItem) -> Any:
        if item.kind == "agent_changed":
            marker = w.HTML(marker_html(item))
            marker.add_class("agentnb-item")
            marker.add_class("agentnb-agent-changed")
            return marker
        if item.kind == "summary":  # where the working context was compacted
            body = w.HTML(f'<div style="white-space:pre-wrap;">{_esc(item.text)}</div>')
            card = w.Accordion(children=[body], titles=("earlier messages summarised",))
            card.add_class("agentnb-item")
            card.add_class("agentnb-summary")
            return card
        if item.kind == "tool":
            body = w.HTML(tool_html(item, self._block_src))
            card = w.Accordion(children=[body], titles=(tool_title(item),))
            card.add_class("agentnb-item")
            card.add_class("agentnb-tool")
            return _apply_hint(card, item)
        if item.kind == "subagent":
            return _apply_hint(self._subagent_card(item), item)
        if item.kind == "plan":
            body = w.HTML(plan_html(item))
            card = w.Accordion(children=[body], titles=(plan_title(item),))
            card.selected_index = 0  # a plan shows open
            card.add_class("agentnb-item")
            card.add_class("agentnb-plan")
            return card
        widget = w.HTML(message_html(item))
        widget.add_class("agentnb-item")
        widget.add_class(f"agentnb-{item.role}")
        return widget

    def _subagent_card(self, item: ChatItem) -> Any:
        """A sub-agent call: its child's task and live progress, and a button that opens the
        child's own chat (a nested ``SessionView``) inside the card."""
        call_id = item.id
        body = w.HTML(subagent_html(item, self._live_children.get(call_id)))
        toggle = w.Button(description="Open its chat", tooltip="The sub-agent's own chat")
        toggle.add_class("agentnb-subagent-open")
        holder = w.VBox()
        holder.add_class("agentnb-subagent-chat")
        toggle.on_click(lambda _: self.toggle_child(call_id))
        card = w.Accordion(
            children=[w.VBox([body, toggle, holder])], titles=(subagent_title(item),)
        )
        card.add_class("agentnb-item")
        card.add_class("agentnb-subagent")
        if item.status in {"running", "waiting"}:
            card.selected_index = 0  # a sub-agent at work shows open
        return card

    def toggle_child(self, call_id: str) -> SessionView | None:
        """Open the child's own chat in its sub-agent card (or close it): the nested view."""
        known = self._item_widgets.get(call_id)
        if known is None:
            return None
        box = known[1].children[0]
        toggle, holder = box.children[1], box.children[2]
        nested = self.nested.pop(call_id, None)
        if nested is not None:
            nested.close()
            holder.children = ()
            toggle.description = "Open its chat"
            return None
        child = self._act("Open", lambda: self.session.child(call_id))
        if child is None:
            return None
        nested = SessionView(child, max_items=20, redraw_interval=self.redraw_interval)
        nested.add_class("agentnb-nested")
        nested.layout.border_left = "3px solid #8e7cc3"  # the child's chat, one level in
        nested.layout.padding = "0 0 0 8px"
        self.nested[call_id] = nested
        holder.children = (nested,)
        toggle.description = "Close its chat"
        return nested

    def _update_item_widget(self, widget: Any, item: ChatItem) -> None:
        if item.kind in {"summary", "agent_changed"}:
            return  # a marker never changes
        if item.kind == "subagent":
            if not isinstance(widget.children[0], w.VBox):  # a tool card that became one
                return
            body = widget.children[0].children[0]
            _set(body, "value", subagent_html(item, self._live_children.get(item.id)))
            _set(widget, "titles", (subagent_title(item),))
            _apply_hint(widget, item)
            return
        if item.kind == "plan":
            _set(widget.children[0], "value", plan_html(item))
            _set(widget, "titles", (plan_title(item),))
            return
        if item.kind == "tool":
            _set(widget.children[0], "value", tool_html(item, self._block_src))
            _set(widget, "titles", (tool_title(item),))
            _apply_hint(widget, item)
        else:
            _set(widget, "value", message_html(item))

    def _draw_requests(self, pending: dict[str, Interaction]) -> None:
        cards = self._request_widgets
        for request_id in [r for r in cards if r not in pending]:
            _close_tree(cards.pop(request_id))
        for request_id, request in pending.items():
            if request_id not in cards:
                cards[request_id] = self._request_card(request)
        children = tuple(cards[r] for r in pending)
        if children != tuple(self.requests.children):
            self.requests.children = children

    def _request_card(self, request: Interaction) -> Any:
        rid = request.request_id
        text = w.HTML(request_html(request))
        if request.kind == "confirmation":
            reason = w.Text(placeholder="Reason (sent with Reject)")
            reason.add_class("agentnb-reason")
            approve = w.Button(description="Approve", button_style="success")
            approve.add_class("agentnb-approve")
            reject = w.Button(description="Reject", button_style="danger")
            reject.add_class("agentnb-reject")
            edit = w.Button(description="Edit arguments", tooltip="Approve with changed arguments")
            edit.add_class("agentnb-edit")
            arguments = w.Textarea(
                value=json.dumps(request.arguments, indent=2, ensure_ascii=False),
                layout=w.Layout(width="auto", height="6em", display="none"),
            )
            arguments.add_class("agentnb-args-input")
            edited = w.Button(description="Approve with these arguments", button_style="success")
            edited.add_class("agentnb-approve-edited")
            edited.layout.display = "none"

            def toggle(_: Any) -> None:
                shown = arguments.layout.display != "none"
                arguments.layout.display = edited.layout.display = "none" if shown else None

            approve.on_click(lambda _: self.approve(rid))
            reject.on_click(lambda _: self.reject(rid, reason.value))
            edit.on_click(toggle)
            edited.on_click(lambda _: self.approve_edited(rid, arguments.value))
            controls = w.VBox(
                [w.HBox([approve, reject, edit, reason]), arguments, w.HBox([edited])]
            )
        else:
            answer = w.Textarea(placeholder="Your answer", layout=w.Layout(width="60%"))
            answer.add_class("agentnb-answer-input")
            send = w.Button(description="Answer", button_style="primary")
            send.add_class("agentnb-answer")
            send.on_click(lambda _: self.answer(rid, answer.value))
            controls = w.HBox([answer, send])
        card = w.VBox([text, controls])
        card.add_class("agentnb-request")
        return card

    def _draw_recovery(self, calls: tuple[ToolCallRef, ...]) -> None:
        """The ways out after a process stopped under tool calls: one card per call (it ran,
        with its result / it did not run) and "continue, recording it as unknown"."""
        ids = tuple(c.call_id for c in calls)
        if ids == self._recovery_for:
            return
        self._recovery_for = ids
        self._settled = {k: v for k, v in self._settled.items() if k in ids}
        old = self.recovery.children
        if not calls:
            self.recovery.children = ()
        else:
            cards: list[Any] = [
                w.HTML(
                    f'<div style="{_BOX}border-left:3px solid #e65100;"><b>Did '
                    f"{'these calls' if len(calls) > 1 else 'this call'} run?</b> The process "
                    "running the task stopped while it ran, so nobody recorded how it ended. "
                    "Check, then say what happened; the task goes on from there.</div>"
                )
            ]
            cards += [self._recovery_card(call) for call in calls]
            go_on = w.Button(
                description="Continue, recording it as unknown",
                tooltip="The model is told the outcome is unknown and that it was not run again",
            )
            go_on.add_class("agentnb-continue-unknown")
            go_on.layout.width = "auto"  # its words in full
            go_on.on_click(lambda _: self.continue_unknown())
            cards.append(w.HBox([go_on]))
            self.recovery.children = tuple(cards)
        for widget in old:
            _close_tree(widget)

    def _recovery_card(self, call: ToolCallRef) -> Any:
        cid = call.call_id
        text = w.HTML(f'<div title="{_esc(cid)}"><code>{_esc(call_words(call))}</code></div>')
        result = w.Text(placeholder="What it returned (its result)", layout=w.Layout(width="auto"))
        result.add_class("agentnb-ran-result")
        ran = w.Button(description="It ran \u2014 here is its result", button_style="success")
        ran.add_class("agentnb-ran")
        ran.layout.width = "auto"
        not_run = w.Button(description="It did not run")
        not_run.add_class("agentnb-not-run")
        not_run.layout.width = "auto"
        ran.on_click(lambda _: self.settle(cid, ran=True, result=result.value))
        not_run.on_click(lambda _: self.settle(cid, ran=False))
        card = w.VBox([text, w.HBox([result, ran, not_run])])
        card.add_class("agentnb-uncertain-call")
        return card

    def show_earlier(self) -> None:
        """Show ``page`` more of the older items."""
        self._limit += self.page
        self._render()

    # -- actions (each calls one Session operation; errors show in the view) ------------------

    def _act(self, what: str, operation: Callable[[], Any]) -> Any:
        try:
            result = operation()
        except Exception as exc:  # noqa: BLE001 - errors show in the view, never as a traceback
            _set(self.error, "value", error_html(f"{what}: {self._words(exc)}"))
            _set(self.notice, "value", "")
            self._render()
            return None
        _set(self.error, "value", "")
        self.refresh()
        return result

    def _words(self, exc: Exception) -> str:
        """An error as the view says it: its message (never its class), tasks by their text."""
        if isinstance(exc, InvalidInput) and not self.input.value.strip():
            return "the box is empty: type a task, guidance or material first."
        if isinstance(exc, NotRunning):
            return "nothing is running now, so there is nothing to steer or stop."
        if isinstance(exc, InvalidAnswer) and "already answered" in str(exc):
            return "this request is already answered; the task goes on with that answer."
        if not isinstance(exc, AgentnbError):
            return f"it did not work ({exc})."
        return _IDS.sub(self._name_of, str(exc))

    def _name_of(self, found: re.Match[str]) -> str:
        """An id as what it names: a task by its text, a tool call by its tool and
        arguments, a request by what it asks; other ids (runs, commands) as "it"."""
        kind, value = found.group(2), found.group(1)
        with self._lock:
            state = self._state.session
            if kind == "turn":
                turn = state.turns.get(value)
                return task_name(turn.input) if turn is not None else "that task"
            if kind == "call":
                call = state.tool_calls.get(value)
                return f"the call {call.name}" if call is not None else "that call"
            if kind == "req":
                request = state.interactions.get(value)
                tool = request.get("tool_name") if request else None
                return f"the request of {tool}" if tool else "that request"
        return "it"

    def _task(self, turn_id: str | None) -> str:
        """The task ``turn_id`` by its text (after a refresh, the view knows it)."""
        with self._lock:
            turn = self._state.session.turns.get(turn_id or "")
        return task_name(turn.input) if turn is not None else "the task"

    def _say(self, text: str) -> None:
        _set(self.notice, "value", notice_html(text))

    def _text(self, text: str | None) -> str:
        return self.input.value if text is None else text

    # Notices say what the click did, in the past tense: the status line above says where
    # things stand now, so a notice never contradicts it as the task moves on.

    def submit(self, text: str | None = None) -> Any:
        """``session.submit`` with the input box's text (or ``text``); clears the box."""
        submitted = self._text(text)
        receipt = self._act("Submit", lambda: self.session.submit(submitted))
        if receipt is not None:
            self.input.value = ""
            self._say(f"You submitted {task_name(submitted)}.")
        return receipt

    def steer(self, text: str | None = None) -> Any:
        """``session.steer``: guidance for the running task."""
        receipt = self._act("Steer", lambda: self.session.steer(self._text(text)))
        if receipt is not None:
            self.input.value = ""
            self._say(f"You steered {self._task(receipt.turn_id)}.")
        return receipt

    def inject(self, text: str | None = None) -> Any:
        """``session.inject``: material for whatever step comes next."""
        receipt = self._act("Inject", lambda: self.session.inject(self._text(text)))
        if receipt is not None:
            self.input.value = ""
            self._say("You handed the agent material: its next step reads it.")
        return receipt

    def interrupt(self) -> Any:
        """``session.interrupt`` of the run this view shows as running."""
        with self._lock:
            # What the person sees: the shared fold may be ahead of a view that does not
            # follow, and the run it shows may have ended since (NotRunning says so).
            run_id = self._shown_run
            run = self._state.session.runs.get(run_id or "")
        name = self._task(run.turn_id if run else None)
        stopped = self._act("Interrupt", lambda: self.session.interrupt(run_id))
        if stopped is not None:
            self._say(f"You asked {name} to stop." if stopped else "Nothing was running.")
        return stopped

    def resume(self) -> Any:
        """``session.resume`` of the latest unfinished turn."""
        with self._lock:
            state = self._state.session
            latest = latest_unfinished(state) or state.latest_turn

        def resume() -> Any:
            if latest is None:
                raise CannotResume("there is no task to resume yet; submit one")
            return self.session.resume(latest.turn_id)

        receipt = self._act("Resume", resume)
        if receipt is not None:
            self._say(f"You resumed {self._task(receipt.turn_id)}.")
        return receipt

    def settle(self, call_id: str, *, ran: bool, result: str = "") -> Any:
        """Say what became of the uncertain call ``call_id``: it ran (``result``: what it
        returned) or it did not. Once every uncertain call of the task is settled, the view
        records them (``reconcile``) and resumes the task."""
        calls = {c.call_id: c for c in (self._last.uncertain if self._last else ())}
        call = calls.get(call_id)
        if call is None:
            _set(self.error, "value", error_html("That call is settled already."))
            return None
        self._settled[call_id] = (
            ToolOutcome.success(result or "(it ran; a person recorded no result)")
            if ran
            else ToolOutcome.error(
                "It did not run: the process stopped before the call happened "
                "(a person checked). It was not run again."
            )
        )
        if set(calls) - set(self._settled):
            left = len(set(calls) - set(self._settled))
            self._say(f"Noted for {call.tool_name}; {left} more call(s) to settle.")
            return None
        outcomes = {cid: self._settled[cid] for cid in calls}
        name = self._task(call.turn_id)

        def reconcile_and_resume() -> Any:
            self.session.reconcile(outcomes, "settled by a person in the notebook view")
            return self.session.resume(call.turn_id or "")

        receipt = self._act("Settle", reconcile_and_resume)
        self._settled.clear()
        if receipt is not None:
            said = "ran" if ran else "did not run"
            self._say(f"You said {call.tool_name} {said}; {name} went on.")
        return receipt

    def continue_unknown(self) -> Any:
        """``session.resume(turn, uncertain="unknown")``: the uncertain calls are recorded
        as unknown (the model is told they were not run again) and the task goes on."""
        calls = self._last.uncertain if self._last else ()
        if not calls:
            _set(self.error, "value", error_html("Nothing waits to be settled."))
            return None
        turn_id = calls[0].turn_id or ""
        receipt = self._act("Continue", lambda: self.session.resume(turn_id, uncertain="unknown"))
        if receipt is not None:
            self._say(f"You continued {self._task(turn_id)}, recording the call as unknown.")
        return receipt

    def _respond(self, what: str, request_id: str, answer: object, said: str) -> Any:
        """One answer to ``request_id``; a second click on the same card says it was
        answered already instead of sending another."""
        first = self._answered.get(request_id)
        receipt = self._act(what, lambda: self.session.respond(request_id, answer))
        if receipt is None:
            return None
        if first is not None and receipt.command_id == first:
            self._say("Already answered: your first click was sent; it is not sent twice.")
            return receipt
        self._answered[request_id] = receipt.command_id
        card = self._request_widgets.get(request_id)
        for button in find_buttons(card):
            button.disabled = True  # answered: it stays until the runtime applies it
        self._say(f"{said} {self._task(receipt.turn_id)}.")
        return receipt

    def rate(self, turn_id: str, score: float, comment: str = "") -> str | None:
        """``session.feedback(turn_id, score=, comment=)`` (the thumbs under an answer)."""
        result: str | None = self._act(
            "Feedback",
            lambda: self.session.feedback(turn_id, score=score, comment=comment.strip() or None),
        )
        return result

    def approve(self, request_id: str) -> Any:
        """``session.respond(request_id, True)``."""
        tool = self._tool_of(request_id)
        return self._respond("Approve", request_id, True, f"You approved {tool} for")

    def approve_edited(self, request_id: str, arguments: str) -> Any:
        """``session.respond(request_id, Answer.approve(edited_args=...))`` with the card's
        edited arguments (JSON)."""
        try:
            edited = json.loads(arguments)
        except ValueError as exc:
            _set(self.error, "value", error_html(f"Approve: the arguments are not JSON ({exc})."))
            return None
        if not isinstance(edited, dict):
            _set(self.error, "value", error_html("Approve: the arguments must be a JSON object."))
            return None
        tool = self._tool_of(request_id)
        answer = Answer.approve(edited_args=edited)
        return self._respond(
            "Approve", request_id, answer, f"You approved {tool} with changed arguments for"
        )

    def reject(self, request_id: str, reason: str = "") -> Any:
        """``session.respond(request_id, Answer.reject(reason))`` (``False`` without one)."""
        answer: object = Answer.reject(reason) if reason.strip() else False
        tool = self._tool_of(request_id)
        return self._respond("Reject", request_id, answer, f"You rejected {tool} for")

    def answer(self, request_id: str, text: str) -> Any:
        """``session.respond(request_id, text)`` for a question or an external result."""
        return self._respond("Answer", request_id, text, "You answered")

    def _tool_of(self, request_id: str) -> str:
        request = self._last.pending.get(request_id) if self._last else None
        return (request.tool_name if request is not None else None) or "the call"

    # -- following ---------------------------------------------------------------------------

    @property
    def following(self) -> bool:
        return any(t.is_alive() for t in self._threads)

    def start(self) -> None:
        """Follow committed events after the cursor (two daemon threads); idempotent."""
        if self._closed or self.following:
            return
        self._stop = threading.Event()
        name = f"agentnb-view-{self.session.key.session_id}"
        self._threads = [
            threading.Thread(target=self._follow, name=f"{name}-follow", daemon=True),
            threading.Thread(target=self._paint, name=f"{name}-paint", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        """Stop following (the widgets stay); ``start()`` follows again."""
        self._stop.set()
        self._dirty.set()
        current = threading.current_thread()
        for thread in self._threads:
            if thread is not current:
                thread.join(timeout)
        self._threads = []

    def close(self) -> None:
        """Stop following and close the view's widgets, leaving in their place one static
        copy of its last drawing with a line saying it is closed (an output left empty reads
        as data lost). The view itself stays displayed; ``refresh()`` and the actions draw
        nothing more. Display the session again to follow it."""
        self.stop()
        self._freeze(_CLOSED)

    def _freeze(self, why: str, *, offline: bool = False) -> None:
        """Replace the live widgets by a static copy of the last drawing, saying ``why``
        (``offline``: the store is closed, so the fold alone says what to draw)."""
        with self._draw_lock:
            if self._closed:
                return
            try:  # everything the follower folded, drawn or not yet
                last: _View | None = self._compute(offline=offline)
            except Exception:  # noqa: BLE001 - a fold that cannot be read: the last drawing
                last = self._last
            still = w.HTML(_still_html(last, why))
            still.add_class("agentnb-closed")
            for nested in self.nested.values():  # each leaves its own still copy
                nested.close()
            self.nested.clear()
            live = self.children
            self.children = (still,)
            for child in live:
                _close_tree(child)
            self._item_widgets.clear()
            self._request_widgets.clear()
            self._closed = True  # last: whoever sees it closed sees the still copy too

    @property
    def closed(self) -> bool:
        """Whether the view stopped for good (``close()``, or its runtime closed)."""
        return self._closed

    def _follow(self) -> None:
        follow = self.session.log.follow(after=self._state.seq, stop=self._stop)
        try:
            for event in follow:
                # The session's shared fold has it from the bus already (this process's
                # commits); another process's commits are handed over here.
                self._fold.feed((event,))
                self._seen = max(self._seen, event.seq)
                self._dirty.set()
        except Exception as exc:  # noqa: BLE001 - a broken follow shows in the view
            _set(self.error, "value", error_html(f"Following the log stopped: {exc}"))
        finally:
            # The follow ends on stop() or when the store is closed: the painter stops too.
            self._stop.set()
            self._dirty.set()
        if self._runtime_closed():
            self._freeze(
                "The runtime of this session is closed: this is the conversation as it was "
                "then. Open the session in a new runtime to go on.",
                offline=True,
            )

    def _runtime_closed(self) -> bool:
        try:
            self.session.runtime.check_open()
        except AgentnbError:
            return True
        return False

    def _paint(self) -> None:
        last = 0.0
        while not self._stop.is_set():
            if not self._dirty.wait(_IDLE_CHECK):
                idle = time.monotonic() - last >= _IDLE_REDRAW
                try:
                    moved = self.session.inbox.head() != self._inbox.seq
                except Exception:  # noqa: BLE001 - a closed store: keep the last drawing
                    moved = False
                # Sub-agents at work move in their own logs: their cards redraw each check.
                if not (idle or moved or self._live_children):
                    continue
            if self._stop.is_set():
                return
            delay = last + self.redraw_interval - time.monotonic()
            if delay > 0 and self._stop.wait(delay):
                return
            self._dirty.clear()
            try:
                self._render()
            except Exception as exc:  # noqa: BLE001 - drawing errors show in the view
                _set(self.error, "value", error_html(f"Redraw failed: {exc}"))
            last = time.monotonic()


def find_buttons(widget: Any) -> list[Any]:
    """Every button under ``widget``."""
    if widget is None:
        return []
    found = [widget] if isinstance(widget, w.Button) else []
    for child in getattr(widget, "children", ()):
        found += find_buttons(child)
    return found


def _apply_hint(card: Any, item: ChatItem) -> Any:
    """A card opens or closes as the newest ``presentation/hint`` about it says."""
    if item.hint == "expand":
        _set(card, "selected_index", 0)
    elif item.hint == "collapse":
        _set(card, "selected_index", None)
    return card


def _set(widget: Any, name: str, value: Any) -> None:
    """Set a trait only when it changes (every set is one message to the front end)."""
    if getattr(widget, name) != value:
        setattr(widget, name, value)


def _close_tree(widget: Any) -> None:
    """Close a widget, its children, and their layout and style models."""
    for child in getattr(widget, "children", ()):
        _close_tree(child)
    for part in ("layout", "style"):
        model = getattr(widget, part, None)
        if isinstance(model, w.Widget):
            model.close()
    widget.close()
