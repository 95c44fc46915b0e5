"""Notebook-native records: ``_repr_html_`` tables that colour statuses, fold long text and
escape everything that came from a model, a tool or a person."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from html.parser import HTMLParser

import pytest

import agentnb as nb
from agentnb import html
from agentnb.errors import InvalidInput
from agentnb.events import Message, ToolCallData
from agentnb.history import HistoryPage
from agentnb.projections.chat import ChatSnapshot
from agentnb.records import (
    Holder,
    InputReceipt,
    Inspection,
    Interaction,
    Outcome,
    Receipt,
    Task,
    ToolCallRef,
    Transcript,
)

MakeRuntime = Callable[..., nb.Runtime]
HOSTILE = '<script>alert(1)</script><img src=x onerror="alert(2)">'
_ALLOWED = {
    "table", "caption", "thead", "tbody", "tr", "th", "td", "span", "div", "code", "b",
    "details", "summary", "br",
    # Markdown of assistant text (markdown-it: raw HTML and images off)
    "strong", "em", "pre", "ul", "ol", "li", "blockquote", "hr", "a",
    "h1", "h2", "h3", "h4", "h5", "h6",
}  # fmt: skip
_ATTRIBUTES = {"style", "class", "title", "href", "target", "rel"}
WHEN = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


class _Parsed(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def inert(markup: str) -> str:
    """Only the module's own tags with style attributes; returns the text a browser shows."""
    parsed = _Parsed()
    parsed.feed(markup)
    parsed.close()
    for tag, attrs in parsed.tags:
        assert tag in _ALLOWED, f"unexpected <{tag}>"
        assert {name for name, _ in attrs} <= _ATTRIBUTES, attrs
        if tag != "a":
            assert {name for name, _ in attrs} <= {"style", "class", "title"}, attrs
    return "".join(parsed.text)


def _task(**changes: object) -> Task:
    fields: dict[str, object] = {
        "turn_id": "turn_1",
        "status": "completed",
        "input": "compare the plans",
        "run_ids": ("run_1",),
        "created_at": WHEN,
        "started_at": WHEN,
        "ended_at": WHEN,
        "error": None,
    }
    fields.update(changes)
    return Task(**fields)  # type: ignore[arg-type]


def _message(role: str = "assistant", text: str = "hello") -> Message:
    return Message(id="msg_1", role=role, text=text, turn_id="turn_1")  # type: ignore[arg-type]


def _hostile_records() -> list[object]:
    message = Message(
        id=HOSTILE,
        role="assistant",
        text=HOSTILE,
        tool_calls=(ToolCallData(call_id=HOSTILE, name=HOSTILE, arguments={HOSTILE: HOSTILE}),),
        turn_id=HOSTILE,
    )
    task = Task(HOSTILE, HOSTILE, HOSTILE * 10, (HOSTILE,), WHEN, None, None, HOSTILE)
    request = Interaction(HOSTILE, HOSTILE, HOSTILE, HOSTILE, HOSTILE, {HOSTILE: 1}, HOSTILE)
    call = ToolCallRef(HOSTILE, HOSTILE, {HOSTILE: HOSTILE}, HOSTILE, HOSTILE)
    holder = Holder(HOSTILE, 3, 2.5, False, local=False)
    return [
        task,
        Transcript((message,), 7),
        HistoryPage((message,), HOSTILE),
        Outcome(HOSTILE, HOSTILE, HOSTILE, HOSTILE, HOSTILE),
        Inspection(7, (call,), (HOSTILE,), HOSTILE, (message,), (), HOSTILE, HOSTILE, holder),
        ChatSnapshot((), (message,), {HOSTILE: request}, (task,), 7),
    ]


class TestEscaping:
    @pytest.mark.parametrize("record", _hostile_records(), ids=lambda r: type(r).__name__)
    def test_every_field_of_every_record_shows_as_text(self, record: object) -> None:
        """Hostile strings in any field render inert: the script shows, it never runs."""
        markup = record._repr_html_()  # type: ignore[attr-defined]
        shown = inert(markup)
        assert "<script>alert(1)</script>" in shown

    def test_show_escapes_lists_of_tasks_and_pending_requests(self) -> None:
        """show() of session.tasks() and session.pending() is escaped the same way."""
        request = Interaction(HOSTILE, "ask_user", "t", None, None, {}, HOSTILE)
        for value in ([_task(input=HOSTILE)], {HOSTILE: request}):
            assert "<script>" in inert(html.show(value)._repr_html_())


class TestTables:
    def test_statuses_are_coloured(self) -> None:
        """A task's status is a pill in its status colour."""
        markup = _task(status="failed", error="boom")._repr_html_()
        assert html.STATUS_COLORS["failed"] in markup
        assert "boom" in inert(markup)

    def test_long_text_is_folded_and_kept_whole(self) -> None:
        """Text over FOLD_AT characters shows its start; the whole text is in <details>."""
        long = "word " * 100
        markup = _task(input=long)._repr_html_()
        assert "<details>" in markup
        assert long.strip() in inert(markup)
        assert "<details>" not in _task(input="short")._repr_html_()

    def test_transcript_lists_roles_texts_and_tool_calls(self) -> None:
        """Each message is a row: its role, its text and the tool calls it makes."""
        call = ToolCallData(call_id="call_1", name="lookup_price", arguments={"plan": "pro"})
        transcript = Transcript(
            (
                _message("user", "How much is pro?"),
                Message(id="m2", role="assistant", tool_calls=(call,)),
                _message("assistant", "$10"),
            ),
            as_of_seq=12,
        )
        shown = inert(transcript._repr_html_())
        assert "Transcript: 3 messages" in shown
        assert 'title="as of seq 12"' in transcript._repr_html_()
        assert "How much is pro?" in shown
        assert "lookup_price" in shown
        assert '{"plan": "pro"}' in shown

    def test_history_page_says_whether_more_follow(self) -> None:
        """A page says 'more pages follow' while it has a next_cursor, else 'the last page'."""
        assert "more pages follow" in inert(HistoryPage((_message(),), "c")._repr_html_())
        assert "the last page" in inert(HistoryPage((_message(),), None)._repr_html_())

    def test_outcome_shows_status_output_and_error(self) -> None:
        """An Outcome shows its status, output and error; its turn and run on hover."""
        markup = Outcome("failed", "turn_1", "run_1", None, "model down")._repr_html_()
        for part in ("failed", "model down"):
            assert part in inert(markup)
        assert 'title="turn turn_1 \u00b7 run run_1"' in markup

    def test_inspection_lists_uncertain_calls_and_the_holder(self) -> None:
        """Uncertain calls get a table; the holder says whether it is alive."""
        call = ToolCallRef("call_9", "charge_card", {"amount": 5}, "turn_1", "run_1")
        holder = Holder("host:1:rt_x", 2, 4.0, False, local=False)
        inspection = Inspection(9, (call,), (), "turn_1", (), (), "turn_1", "interrupted", holder)
        shown = inert(inspection._repr_html_())
        assert "1 tool call uncertain" in shown
        assert "charge_card" in shown
        assert "stopped" in shown
        assert "interrupted" in shown

    def test_empty_lists_say_so(self) -> None:
        """No tasks, no pending requests and no messages each say so in words."""
        assert "No tasks." in inert(html.show([])._repr_html_())
        assert "No messages." in inert(Transcript((), 0)._repr_html_())

    def test_show_refuses_what_it_cannot_show(self) -> None:
        """show() of something that is no record raises InvalidInput naming what it takes."""
        with pytest.raises(InvalidInput, match=r"session\.tasks\(\)"):
            html.show(42)
        with pytest.raises(InvalidInput):
            html.show(["not a task"])

    def test_show_has_a_short_text_form(self) -> None:
        """Outside a notebook, show() prints a one-line summary."""
        assert repr(html.show([_task(), _task()])) == "2 task(s)"


class TestFromASession:
    def test_a_real_session_renders_every_record(self, make_runtime: MakeRuntime) -> None:
        """tasks, transcript, history, inspect, snapshot and an outcome all render."""
        session = make_runtime(nb.ScriptedModel(["**Pro** costs $10."])).session("s1")
        outcome = session.run("How much is pro?", timeout=20)
        rendered = [
            outcome._repr_html_(),
            html.show(session.tasks())._repr_html_(),
            session.transcript()._repr_html_(),
            session.history()._repr_html_(),
            session.inspect()._repr_html_(),
            session.snapshot()._repr_html_(),
        ]
        for markup in rendered:
            inert(markup)
        assert "How much is pro?" in inert(rendered[1])
        assert "Pro costs $10." in inert(rendered[2])
        assert "<strong>Pro</strong>" in rendered[2]

    def test_importing_the_records_stays_light(self) -> None:
        """agentnb.html imports no optional dependency (pandas, ipywidgets, markdown-it)."""
        import subprocess
        import sys

        code = (
            "import sys, agentnb, agentnb.html; "
            "print(sorted(m for m in ('pandas', 'ipywidgets', 'markdown_it', 'altair') "
            "if m in sys.modules))"
        )
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        )
        assert done.stdout.strip() == "[]"


class TestSessionInfoHtml:
    def test_a_listed_session_renders_as_an_escaped_row(self) -> None:
        """SessionInfo and a page of them render as tables, every field escaped."""
        agent = nb.Agent(name="H", agent_id="html", model=nb.ScriptedModel(["<b>hi</b>"]))
        with nb.Runtime(agent, store="memory://") as runtime:
            session = runtime.session("s1")
            session.run("<script>alert(1)</script>", timeout=20)
            session.update(labels={"team": "<ops>"})
            (info,) = runtime.sessions()
            row = info._repr_html_()
            assert "<script>" not in row
            assert "&lt;ops&gt;" in row
            assert "s1" in row
            page = html.show(runtime.sessions())
            assert "1 session(s)" in page._repr_html_()


class TestReadable:
    @pytest.mark.parametrize("record", _hostile_records(), ids=lambda r: type(r).__name__)
    def test_every_record_is_skipped_by_mathjax(self, record: object) -> None:
        """Each repr's outer element has MathJax's ignore classes, so $5 ... $10 stays text."""
        markup = record._repr_html_()  # type: ignore[attr-defined]
        assert markup.startswith('<div class="agentnb-html mathjax_ignore tex2jax_ignore">')

    def test_lists_shown_with_show_are_skipped_by_mathjax(self) -> None:
        """show(tasks) and show(pending) carry the same classes."""
        request = Interaction("req_1", "ask_user", "t", None, None, {}, "price: $5 or $10?")
        for value in ([_task(input="basic $5, pro $10")], {"req_1": request}):
            assert "mathjax_ignore" in html.show(value)._repr_html_()

    def test_ids_are_shortened_with_the_whole_id_on_hover(self) -> None:
        """turn_<32 hex> shows as turn_…<last six>; the title holds the whole id."""
        turn = "turn_01a2323efad6742aa4fadb07f681cc81"
        assert f'title="{turn}"' in html.short_id(turn)
        assert f"turn_\u2026{turn[-6:]}" in inert(html.short_id(turn))
        markup = _task(turn_id=turn)._repr_html_()  # a task: its text, its turn on hover
        assert f'title="turn {turn}"' in markup
        assert "turn_" not in inert(markup)

    def test_text_columns_break_between_words_and_times_stay_on_one_line(self) -> None:
        """The task column has a minimum width and overflow-wrap; times are nowrap."""
        markup = _task(input="How much is the pro plan?")._repr_html_()
        assert "min-width:16em" in markup
        assert "overflow-wrap:break-word" in markup
        assert "word-break:break-word" not in markup
        assert '<span style="white-space:nowrap;" title="2026-11-30 12:00:00.000+00:00">' in markup

    def test_assistant_markdown_is_rendered_in_outcomes(self) -> None:
        """An Outcome's output is Markdown rendered as in the view, raw HTML still text."""
        output = "**Basic** is `$5`. <b>x</b>"
        markup = Outcome("completed", "turn_1", "run_1", output)._repr_html_()
        assert "<strong>Basic</strong>" in markup
        assert "<code>$5</code>" in markup
        assert "&lt;b&gt;x&lt;/b&gt;" in markup

    def test_receipts_read_as_sentences(self) -> None:
        """A Receipt and an InputReceipt show a sentence, not their dataclass repr."""
        steer = InputReceipt("inp_1", "turn_1")._repr_html_()
        material = InputReceipt("inp_2", None)._repr_html_()
        queued = Receipt("cmd_1", "turn_1", None, "queued", "queued")._repr_html_()
        assert "Steering accepted" in inert(steer)
        assert "Material accepted" in inert(material)
        assert "went into the queue" in inert(queued)
        assert "queued" not in inert(queued)  # as of when it was made: accepted
        for markup in (steer, material, queued):
            assert "Receipt(" not in inert(markup)
