"""``SessionView``: a chat view of one session, built with standard ipywidgets.

The view is a pure function of the session's committed log: it folds the log once
(``read_fold``: the same read ``Session.snapshot()`` makes), renders the newest items, then
follows committed events after its cursor on a daemon thread and redraws at most
``1 / redraw_interval`` times a second from a second one. The kernel's loop is never blocked
and re-running the cell after a kernel restart shows the same conversation.

Buttons only call ``Session`` operations; what they return or raise shows in the view.
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

import html
import json
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from agentnb.answers import Answer
from agentnb.errors import CannotResume
from agentnb.html import STATUS_COLORS
from agentnb.projections.chat import (
    ChatItem,
    ChatSnapshot,
    ChatState,
    interactions_of,
    tasks_of,
)
from agentnb.projections.decisions import check_resume, effective_status, latest_unfinished
from agentnb.projections.queue import ways_out
from agentnb.projections.state import PARKING, InboxState
from agentnb.records import Interaction, Task
from agentnb.session import Session

try:
    import ipywidgets as w
    from markdown_it import MarkdownIt
    from markdown_it.rules_core import StateCore
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        'SessionView needs ipywidgets and markdown-it-py: pip install "agentnb[widgets]"'
    ) from exc

__all__ = ["SessionView"]

_MAX_TASK_TEXT = 200
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


def _restyle(state: StateCore) -> None:
    """Paragraphs as ``<div>`` blocks (a one-paragraph reply, the usual case, is one block
    in the bubble, without the theme's ``<p>`` margins); links open in a new tab."""
    for token in state.tokens:
        if token.type in {"paragraph_open", "paragraph_close"}:
            token.tag = "div"
        for child in token.children or ():
            if child.type == "link_open":
                child.attrSet("target", "_blank")
                child.attrSet("rel", "noopener noreferrer")


_MARKDOWN = MarkdownIt("commonmark", {"html": False, "breaks": True}).disable("image")
_MARKDOWN.core.ruler.push("agentnb_restyle", _restyle)


def markdown_html(text: str) -> str:
    """Assistant Markdown as HTML: raw HTML off, images off, every text escaped."""
    rendered: str = _MARKDOWN.render(text)
    return rendered.strip()


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
    if not text and not tail and role == "assistant":
        return ""  # a reply that only calls tools: its cards say it
    style = _BOX + _ROLE_STYLE.get(role, _ROLE_STYLE["system"])
    if markdown:  # blocks from the renderer: newlines between them are not text
        style += "white-space:normal;"
    return (
        f'<div class="agentnb-msg" style="{style}">'
        f'<span style="{_LABEL}">{_esc(label)}</span>{text}{tail}</div>'
    )


def tool_title(item: ChatItem) -> str:
    """The card's title: plain text (ipywidgets renders titles as text, never as HTML)."""
    return f"{item.tool_name or 'tool'} \u00b7 {item.status}"


def tool_html(item: ChatItem) -> str:
    """A tool card's body: arguments (also while streaming), progress, result, request."""
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
        parts.append(
            f'<div style="{_LABEL}">result {_badge(str(result.get("status", "")))}</div>'
            f'<pre style="{_PRE}">{_esc(result.get("output", ""))}</pre>'
        )
    if item.error:
        parts.append(f'<div style="color:#c0392b;">{_esc(item.error)}</div>')
    return f'<div class="agentnb-tool-body">{"".join(parts)}</div>'


def request_html(request: Interaction) -> str:
    """The text of a pending-request card."""
    kind = {
        "confirmation": "Approval needed",
        "external_execution": "External result needed",
        "ask_user": "Question",
    }.get(request.kind, request.kind)
    arguments = _json_text(request.arguments) if request.arguments else ""
    body = f'<pre style="{_PRE}">{_esc(arguments)}</pre>' if arguments else ""
    return (
        f'<div style="{_BOX}border-left:3px solid #c77d00;">'
        f"<b>{_esc(kind)}</b> <code>{_esc(request.tool_name or '')}</code>"
        f"<div>{_esc(request.prompt or '')}</div>{body}</div>"
    )


def tasks_html(tasks: Iterable[Task]) -> str:
    """The task list: status, input and runs of each turn."""
    rows = []
    for task in tasks:
        text = task.input if len(task.input) <= _MAX_TASK_TEXT else task.input[:_MAX_TASK_TEXT]
        more = "\u2026" if len(task.input) > _MAX_TASK_TEXT else ""
        error = f' <span style="color:#c0392b;">{_esc(task.error)}</span>' if task.error else ""
        rows.append(
            f'<tr><td style="padding:1px 6px;">{_badge(task.status)}</td>'
            f'<td style="padding:1px 6px;white-space:pre-wrap;">{_esc(text)}{more}{error}</td>'
            f'<td style="padding:1px 6px;opacity:0.6;font-size:0.8em;">'
            f"{_esc(task.turn_id)} \u00b7 {len(task.run_ids)} run(s)</td></tr>"
        )
    if not rows:
        return '<div style="opacity:0.6;">No tasks yet.</div>'
    return f'<table class="agentnb-task-table">{"".join(rows)}</table>'


def status_html(
    cursor: int, running: tuple[str, str] | None, parked: str | None, queued: int
) -> str:
    """The status line: head seq, the running turn/run, why the queue is parked."""
    parts = [f"seq {cursor}"]
    if running is not None:
        parts.append(f"running turn {_esc(running[0])} run {_esc(running[1])}")
    else:
        parts.append("idle")
    if parked:
        parts.append(_esc(parked))
    if queued:
        parts.append(f"{queued} queued")
    joined = " \u00b7 ".join(parts)
    return f'<div style="font-size:0.85em;opacity:0.8;">{joined}</div>'


def error_html(text: str) -> str:
    if not text:
        return ""
    return f'<div style="{_BOX}color:#c0392b;border-left:3px solid #c0392b;">{_esc(text)}</div>'


def notice_html(text: str) -> str:
    return f'<div style="font-size:0.85em;opacity:0.8;">{_esc(text)}</div>' if text else ""


def _parked_reason(state: ChatState, executing: bool) -> str | None:
    """Why queued work waits, with the ways out; None when the queue can move."""
    latest = state.session.latest_turn
    if latest is None:
        return None
    status = effective_status(state.session, latest, executing=executing)
    if status not in PARKING:
        return None
    return f"parked behind turn {latest.turn_id}, which is {status}: " + ways_out(
        state.session, latest, status
    )


# -- the view ---------------------------------------------------------------------------------


class _View:
    """Everything one render needs, computed under the state lock (immutable values)."""

    __slots__ = ("cursor", "items", "parked", "pending", "resumable", "running", "tasks", "total")

    def __init__(
        self,
        cursor: int,
        items: tuple[ChatItem, ...],
        total: int,
        pending: dict[str, Interaction],
        tasks: list[Task],
        running: tuple[str, str] | None,
        resumable: str | None,
        parked: str | None,
    ) -> None:
        self.cursor = cursor
        self.items = items
        self.total = total
        self.pending = pending
        self.tasks = tasks
        self.running = running
        self.resumable = resumable
        self.parked = parked


def read_fold(session: Session) -> tuple[ChatState, InboxState]:
    """The view's one read: exactly ``(0, head]`` of the log (a copy of the session's cached
    chat fold) and a copy of its inbox fold at the inbox head."""
    return session.chat_copy()


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
        session: Session,
        *,
        max_items: int = 50,
        page: int = 50,
        follow: bool = True,
        redraw_interval: float = 0.1,
    ) -> None:
        if not isinstance(session, Session):
            raise TypeError(f"SessionView needs an agentnb Session, got {type(session).__name__}")
        super().__init__()
        self.session = session
        self.max_items = max(1, int(max_items))
        self.page = max(1, int(page))
        self.redraw_interval = max(0.0, float(redraw_interval))
        self._limit = self.max_items
        self._lock = threading.RLock()
        """Guards the fold (``_state``, ``_inbox``): the follower and actions both feed it."""
        self._draw_lock = threading.Lock()
        self._state, self._inbox = read_fold(session)
        self._stop = threading.Event()
        self._dirty = threading.Event()
        self._threads: list[threading.Thread] = []
        self._closed = False
        self._item_widgets: dict[str, tuple[ChatItem, Any]] = {}
        self._request_widgets: dict[str, Any] = {}
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

        self.status = classed(w.HTML(), "agentnb-status")
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
                layout=w.Layout(width="100%", height="4em"),
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
        self.children = (
            self.status,
            self.earlier,
            self.transcript,
            self.requests,
            self.tasks,
            self.input,
            controls,
            self.error,
            self.notice,
        )
        self.add_class("agentnb-view")

    @property
    def widget(self) -> SessionView:
        """The view itself (it is the ``VBox``); kept for code written when it held one."""
        return self

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        if self._closed:
            return {"text/plain": f"{self!r} (closed)"}
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
    def cursor(self) -> int:
        """The seq of the last committed event folded into the view."""
        return self._state.seq

    def _catch_up(self) -> None:
        """Fold what was committed since the cursor (both logs); caller holds the lock."""
        session = self.session
        while events := session.log.read_after(self._state.seq, 256):
            for event in events:
                self._state.apply(event)
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

    def _compute(self) -> _View:
        live = self.session.executing()
        with self._lock:
            self._fold_inbox()
            state = self._state
            pending = interactions_of(state.session)
            active = state.session.active_run if live else None
            running = (state.session.runs[active].turn_id, active) if active else None
            return _View(
                cursor=state.seq,
                items=state.last_items(self._limit),
                total=len(state),
                pending=pending,
                tasks=tasks_of(state.session, self._inbox, executing=live),
                running=running,
                resumable=self._resumable(live),
                parked=_parked_reason(state, live),
            )

    def _resumable(self, live: bool) -> str | None:
        """The turn Resume would continue, if resume() would accept it now."""
        latest = latest_unfinished(self._state.session)
        if latest is None:
            return None
        try:
            check_resume(
                self._state.session,
                latest.turn_id,
                executing=live,
                tool=self.session.runtime.agent.tool_named,
            )
        except CannotResume:
            return None
        return latest.turn_id

    def _render(self) -> None:
        view = self._compute()
        with self._draw_lock:
            if self._closed:
                return
            self._draw_items(view)
            self._draw_requests(view.pending)
            _set(self.tasks, "value", tasks_html(view.tasks))
            queued = sum(1 for t in view.tasks if t.status == "queued")
            _set(self.status, "value", status_html(view.cursor, view.running, view.parked, queued))
            _set(self.steer_button, "disabled", view.running is None)
            _set(self.interrupt_button, "disabled", view.running is None)
            _set(self.resume_button, "disabled", view.resumable is None)
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
                if known[0] is not item:
                    self._update_item_widget(widget, item)
            new[item.id] = (item, widget)
            children.append(widget)
        for key, (_, widget) in old.items():
            if key not in new:
                _close_tree(widget)
        self._item_widgets = new
        if tuple(children) != tuple(self.transcript.children):
            self.transcript.children = tuple(children)

    def _item_widget(self, item: ChatItem) -> Any:
        if item.kind == "summary":  # where the working context was compacted
            body = w.HTML(f'<div style="white-space:pre-wrap;">{_esc(item.text)}</div>')
            card = w.Accordion(children=[body], titles=("earlier messages summarised",))
            card.add_class("agentnb-item")
            card.add_class("agentnb-summary")
            return card
        if item.kind == "tool":
            body = w.HTML(tool_html(item))
            card = w.Accordion(children=[body], titles=(tool_title(item),))
            card.add_class("agentnb-item")
            card.add_class("agentnb-tool")
            return card
        widget = w.HTML(message_html(item))
        widget.add_class("agentnb-item")
        widget.add_class(f"agentnb-{item.role}")
        return widget

    def _update_item_widget(self, widget: Any, item: ChatItem) -> None:
        if item.kind == "summary":
            return  # a compaction marker never changes
        if item.kind == "tool":
            _set(widget.children[0], "value", tool_html(item))
            _set(widget, "titles", (tool_title(item),))
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
            approve.on_click(lambda _: self.approve(rid))
            reject.on_click(lambda _: self.reject(rid, reason.value))
            controls = w.HBox([approve, reject, reason])
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

    def show_earlier(self) -> None:
        """Show ``page`` more of the older items."""
        self._limit += self.page
        self._render()

    # -- actions (each calls one Session operation; errors show in the view) ------------------

    def _act(self, what: str, operation: Callable[[], Any]) -> Any:
        try:
            result = operation()
        except Exception as exc:  # noqa: BLE001 - errors show in the view, never as a traceback
            _set(self.error, "value", error_html(f"{what}: {type(exc).__name__}: {exc}"))
            _set(self.notice, "value", "")
            self._render()
            return None
        _set(self.error, "value", "")
        self.refresh()
        return result

    def _say(self, text: str) -> None:
        _set(self.notice, "value", notice_html(text))

    def _text(self, text: str | None) -> str:
        return self.input.value if text is None else text

    def submit(self, text: str | None = None) -> Any:
        """``session.submit`` with the input box's text (or ``text``); clears the box."""
        receipt = self._act("Submit", lambda: self.session.submit(self._text(text)))
        if receipt is not None:
            self.input.value = ""
            self._say(f"Task {receipt.turn_id} accepted ({receipt.status}).")
        return receipt

    def steer(self, text: str | None = None) -> Any:
        """``session.steer``: guidance for the running task."""
        receipt = self._act("Steer", lambda: self.session.steer(self._text(text)))
        if receipt is not None:
            self.input.value = ""
            self._say(f"Guidance for {receipt.turn_id} accepted.")
        return receipt

    def inject(self, text: str | None = None) -> Any:
        """``session.inject``: material for whatever step comes next."""
        receipt = self._act("Inject", lambda: self.session.inject(self._text(text)))
        if receipt is not None:
            self.input.value = ""
            self._say("Material accepted; the next step reads it.")
        return receipt

    def interrupt(self) -> Any:
        """``session.interrupt`` of the run this view shows as running."""
        with self._lock:
            run_id = self._state.session.active_run
        stopped = self._act("Interrupt", lambda: self.session.interrupt(run_id))
        if stopped is not None:
            self._say("Interrupt requested." if stopped else "Nothing is running.")
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
            self._say(f"Turn {receipt.turn_id} resumes.")
        return receipt

    def approve(self, request_id: str) -> Any:
        """``session.respond(request_id, True)``."""
        receipt = self._act("Approve", lambda: self.session.respond(request_id, True))
        if receipt is not None:
            self._say(f"Approved; turn {receipt.turn_id} goes on.")
        return receipt

    def reject(self, request_id: str, reason: str = "") -> Any:
        """``session.respond(request_id, Answer.reject(reason))`` (``False`` without one)."""
        answer: object = Answer.reject(reason) if reason.strip() else False
        receipt = self._act("Reject", lambda: self.session.respond(request_id, answer))
        if receipt is not None:
            self._say(f"Rejected; turn {receipt.turn_id} goes on.")
        return receipt

    def answer(self, request_id: str, text: str) -> Any:
        """``session.respond(request_id, text)`` for a question or an external result."""
        receipt = self._act("Answer", lambda: self.session.respond(request_id, text))
        if receipt is not None:
            self._say(f"Answered; turn {receipt.turn_id} goes on.")
        return receipt

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
        """Stop following and close every widget of the view."""
        self.stop()
        with self._draw_lock:
            if self._closed:
                return
            self._closed = True
            for child in self.children:
                _close_tree(child)
            self._item_widgets.clear()
            self._request_widgets.clear()
            self.layout.close()
            super().close()

    def _follow(self) -> None:
        follow = self.session.log.follow(after=self._state.seq, stop=self._stop)
        try:
            for event in follow:
                with self._lock:
                    self._state.apply(event)  # at or below the cursor: ignored
                self._dirty.set()
        except Exception as exc:  # noqa: BLE001 - a broken follow shows in the view
            _set(self.error, "value", error_html(f"Following the log stopped: {exc}"))
        finally:
            # The follow ends on stop() or when the store is closed: the painter stops too.
            self._stop.set()
            self._dirty.set()

    def _paint(self) -> None:
        last = 0.0
        while not self._stop.is_set():
            if not self._dirty.wait(_IDLE_CHECK):
                idle = time.monotonic() - last >= _IDLE_REDRAW
                try:
                    moved = self.session.inbox.head() != self._inbox.seq
                except Exception:  # noqa: BLE001 - a closed store: keep the last drawing
                    moved = False
                if not (idle or moved):
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
