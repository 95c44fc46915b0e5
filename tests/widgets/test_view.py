"""SessionView without a browser: buttons call the right operation, the widgets show it."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from html.parser import HTMLParser
from typing import Any

import pytest

import agentnb as nb
from agentnb.errors import install_hint
from agentnb.projections.chat import ChatItem
from agentnb.records import Interaction, Task
from agentnb.widgets import SessionView
from agentnb.widgets import view as view_module
from tests.remote import DOORS, through_doors
from tests.widgets.helpers import WAIT, PausingModel, committed, text_pieces, until

MakeRuntime = Callable[..., nb.Runtime]


@nb.tool(confirm=True)
def create_order(item: str, qty: int) -> str:
    """Create a purchase order.

    Args:
        item: what to buy
        qty: how many
    """
    return f"ordered {qty} x {item}"


# -- helpers ----------------------------------------------------------------------------------


def find(widget: Any, cls: str) -> list[Any]:
    """Widgets under ``widget`` (itself included) that carry the CSS class ``cls``."""
    found = [widget] if cls in getattr(widget, "_dom_classes", ()) else []
    for child in getattr(widget, "children", ()):
        found += find(child, cls)
    return found


def one(widget: Any, cls: str) -> Any:
    (found,) = find(widget, cls)
    return found


def items_of(view: SessionView) -> list[Any]:
    """The transcript's items (the rating bars under answers left out)."""
    return [c for c in view.transcript.children if "agentnb-rating" not in c._dom_classes]


def transcript_text(view: SessionView) -> str:
    parts = []
    for child in items_of(view):
        if hasattr(child, "titles"):
            parts.append(" ".join(child.titles))
            parts.append(child.children[0].value)
        else:
            parts.append(child.value)
    return "\n".join(parts)


class Spy:
    """Records calls to one Session operation and passes them on."""

    def __init__(self, session: nb.Session, name: str) -> None:
        self.calls: list[tuple[Any, ...]] = []
        real = getattr(session, name)

        def spy(*args: Any) -> Any:
            self.calls.append(args)
            return real(*args)

        setattr(session, name, spy)


@pytest.fixture
def make_runtime(
    make_runtime: MakeRuntime, door: str, request: pytest.FixtureRequest
) -> MakeRuntime:
    """The runtime, with sessions (and so views) reached through the door: a SessionView of a
    RemoteSession works as one of a local Session."""
    return through_doors(make_runtime, request)


@pytest.fixture
def views() -> Iterator[list[SessionView]]:
    """Views made by a test are closed after it."""
    made: list[SessionView] = []
    yield made
    for view in made:
        view.close()


def make_view(views: list[SessionView], session: nb.Session, **kwargs: Any) -> SessionView:
    view = SessionView(session, **kwargs)
    views.append(view)
    return view


def _suspended(make_runtime: MakeRuntime, *replies: Any) -> nb.Session:
    script = [nb.ToolCall("create_order", {"item": "desk", "qty": 2}), *replies]
    session = make_runtime(nb.ScriptedModel(script), [create_order]).session("s1")
    assert session.run("order two desks", timeout=WAIT).status == "suspended"
    return session


# -- tests ------------------------------------------------------------------------------------


class TestSubmit:
    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_submit_button_submits_the_input_and_shows_the_reply(
        self, make_runtime: MakeRuntime, views: list[SessionView]
    ) -> None:
        """Submit calls session.submit(text), clears the box; the reply streams into view."""
        session = make_runtime(nb.ScriptedModel(["Hello from the agent."])).session("s1")
        spy = Spy(session, "submit")
        view = make_view(views, session)
        view.input.value = "say hello"
        one(view.widget, "agentnb-submit").click()
        assert spy.calls == [("say hello",)]
        assert view.input.value == ""
        assert "say hello" in view.tasks.value
        until(lambda: "Hello from the agent." in transcript_text(view), what="the reply")
        until(lambda: "completed" in view.tasks.value, what="the task to complete")

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_streamed_text_appears_before_the_reply_completes(
        self, make_runtime: MakeRuntime, views: list[SessionView]
    ) -> None:
        """While the model streams, the committed prefix shows with a streaming cursor."""
        model = PausingModel([text_pieces("Thinking about it carefully.")], {0: 3})
        session = make_runtime(model).session("s1")
        view = make_view(views, session)
        view.submit("think")
        until(model.paused.is_set, what="the model to pause")
        until(lambda: committed(session, "model/chunk"), what="committed chunks")
        text = until(
            lambda: "\u258c" in transcript_text(view) and transcript_text(view),
            what="a streaming draft",
        )
        assert "Thinking" in text
        assert "carefully." not in text
        model.release()
        until(lambda: "carefully." in transcript_text(view), what="the final reply")
        assert "\u258c" not in transcript_text(view)


class TestRequests:
    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_approve_calls_respond_true_and_the_task_completes(
        self, make_runtime: MakeRuntime, views: list[SessionView]
    ) -> None:
        """Approve on the pending card calls respond(id, True); the card goes, the task ends."""
        session = _suspended(make_runtime, "Ordered.")
        request_id = next(iter(session.pending()))
        spy = Spy(session, "respond")
        view = make_view(views, session)
        card = one(view.requests, "agentnb-request")
        assert "create_order" in card.children[0].value
        one(card, "agentnb-approve").click()
        assert spy.calls == [(request_id, True)]
        until(lambda: not view.requests.children, what="the card to go")
        until(lambda: "Ordered." in transcript_text(view), what="the final reply")
        until(lambda: "completed" in view.tasks.value, what="the task to complete")
        assert "create_order \u00b7 success" in transcript_text(view)

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_reject_sends_the_reason(
        self, make_runtime: MakeRuntime, views: list[SessionView]
    ) -> None:
        """Reject with a reason calls respond(id, Answer.reject(reason)); the card is denied."""
        session = _suspended(make_runtime, "No order then.")
        request_id = next(iter(session.pending()))
        spy = Spy(session, "respond")
        view = make_view(views, session)
        one(view.requests, "agentnb-reason").value = "over budget"
        one(view.requests, "agentnb-reject").click()
        assert spy.calls == [(request_id, nb.Answer.reject("over budget"))]
        until(lambda: "create_order \u00b7 denied" in transcript_text(view), what="denied card")
        assert "over budget" in transcript_text(view)

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_reject_without_a_reason_answers_false(
        self, make_runtime: MakeRuntime, views: list[SessionView]
    ) -> None:
        """Reject with an empty reason box calls respond(id, False)."""
        session = _suspended(make_runtime, "No order then.")
        request_id = next(iter(session.pending()))
        spy = Spy(session, "respond")
        view = make_view(views, session)
        one(view.requests, "agentnb-reject").click()
        assert spy.calls == [(request_id, False)]

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_answer_box_answers_a_question(
        self, make_runtime: MakeRuntime, views: list[SessionView]
    ) -> None:
        """A question gets an answer box; Answer calls respond(id, text)."""
        script = [nb.ToolCall("ask_user", {"question": "Which plan?"}), "Pro it is."]
        session = make_runtime(nb.ScriptedModel(script), [nb.ask_user]).session("s1")
        session.run("pick a plan", timeout=WAIT)
        request_id = next(iter(session.pending()))
        spy = Spy(session, "respond")
        view = make_view(views, session)
        assert "Which plan?" in one(view.requests, "agentnb-request").children[0].value
        assert not find(view.requests, "agentnb-approve")
        one(view.requests, "agentnb-answer-input").value = "pro"
        one(view.requests, "agentnb-answer").click()
        assert spy.calls == [(request_id, "pro")]
        until(lambda: "Pro it is." in transcript_text(view), what="the final reply")


class TestRunningTask:
    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_buttons_that_do_not_apply_are_disabled(
        self, make_runtime: MakeRuntime, views: list[SessionView]
    ) -> None:
        """Idle: Steer, Interrupt and Resume are disabled; Submit and Inject are enabled."""
        view = make_view(views, make_runtime(nb.ScriptedModel([])).session("s1"))
        assert view.steer_button.disabled
        assert view.interrupt_button.disabled
        assert view.resume_button.disabled
        assert not view.submit_button.disabled
        assert not view.inject_button.disabled
        assert "Ready for a task" in view.status.value

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_steer_while_running(self, make_runtime: MakeRuntime, views: list[SessionView]) -> None:
        """While a run streams, Steer is enabled and calls session.steer(text)."""
        model = PausingModel([text_pieces("Working on it."), text_pieces("Focused.")], {0: 2})
        session = make_runtime(model).session("s1")
        spy = Spy(session, "steer")
        view = make_view(views, session)
        view.submit("work")
        until(model.paused.is_set, what="the model to pause")
        until(lambda: not view.steer_button.disabled, what="Steer to be enabled")
        assert not view.interrupt_button.disabled
        assert "Working on" in view.status.value
        assert "\u201cwork\u201d" in view.status.value
        view.input.value = "focus on cost"
        view.steer_button.click()
        assert spy.calls == [("focus on cost",)]
        assert view.error.value == ""
        model.release()
        until(lambda: "Focused." in transcript_text(view), what="the steered step")
        assert "steer</span>focus on cost" in transcript_text(view)
        until(lambda: view.steer_button.disabled, what="Steer to be disabled again")

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_inject_calls_inject(self, make_runtime: MakeRuntime, views: list[SessionView]) -> None:
        """Inject calls session.inject(text); the material joins the next run."""
        session = make_runtime(nb.ScriptedModel(["Noted."])).session("s1")
        spy = Spy(session, "inject")
        view = make_view(views, session)
        view.input.value = "Budget is $50."
        view.inject_button.click()
        assert spy.calls == [("Budget is $50.",)]
        view.submit("go")
        until(lambda: "material</span>Budget is $50." in transcript_text(view), what="material")

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_interrupt_then_resume(
        self, make_runtime: MakeRuntime, views: list[SessionView]
    ) -> None:
        """Interrupt stops the run (Resume becomes enabled); Resume continues the same turn."""
        model = PausingModel(
            [text_pieces("Long work ahead."), text_pieces("Resumed, done.")], {0: 2}
        )
        session = make_runtime(model).session("s1")
        interrupts, resumes = Spy(session, "interrupt"), Spy(session, "resume")
        view = make_view(views, session)
        receipt = view.submit("work")
        until(model.paused.is_set, what="the model to pause")
        until(lambda: not view.interrupt_button.disabled, what="Interrupt to be enabled")
        (run_id,) = session.inspect().active_runs
        view.interrupt_button.click()
        assert interrupts.calls == [(run_id,)]
        model.release()
        until(lambda: not view.resume_button.disabled, what="Resume to be enabled")
        assert view.interrupt_button.disabled
        assert "interrupted" in view.tasks.value
        assert "\u201cwork\u201d was interrupted. Resume continues it" in view.status.value
        assert f'title="{receipt.turn_id}"' in view.status.value
        view.resume_button.click()
        assert resumes.calls == [(receipt.turn_id,)]
        until(lambda: "Resumed, done." in transcript_text(view), what="the resumed reply")
        until(lambda: "completed" in view.tasks.value, what="the task to complete")
        assert view.resume_button.disabled


class TestWords:
    def test_the_view_marks_where_the_agent_changed(
        self, make_runtime: MakeRuntime, views: list[SessionView]
    ) -> None:
        """An accepted agent change shows as a line in the chat saying what changed."""
        first = make_runtime(nb.ScriptedModel(["one"]))
        first.session("s1").run("first task", timeout=WAIT)
        first.close()
        changed = make_runtime(
            nb.ScriptedModel(["two"]), instructions="Answer in French.", accept_agent_change=True
        )
        session = changed.open("s1")
        session.run("second task", timeout=WAIT)
        view = make_view(views, session, follow=False)
        (marker,) = find(view, "agentnb-agent-changed")
        assert "the agent changed here: instructions changed" in marker.value
        items = [c for c in view.transcript.children if "agentnb-item" in c._dom_classes]
        texts = [getattr(c, "value", "") for c in items]
        place = next(i for i, t in enumerate(texts) if "the agent changed here" in t)
        assert "first task" in " ".join(texts[:place])
        assert "second task" in " ".join(texts[place:])

    def test_status_names_the_task_and_what_it_waits_for(
        self, make_runtime: MakeRuntime, views: list[SessionView]
    ) -> None:
        """A suspended task: its own text and 'waiting for your approval below', no ids."""
        session = _suspended(make_runtime, "ok")
        view = make_view(views, session, follow=False)
        status = view.status.value
        assert "\u201corder two desks\u201d is waiting for your approval below" in status
        shown = assert_inert(status)
        for word in ("seq", "turn_", "call_", "session.", "idle", "parked"):
            assert word not in shown

    def test_notices_name_tasks_by_their_text(
        self, make_runtime: MakeRuntime, views: list[SessionView]
    ) -> None:
        """After Approve, the notice names the task by its text, not its id."""
        session = _suspended(make_runtime, "ok")
        view = make_view(views, session, follow=False)
        view.approve(next(iter(session.pending())))
        assert "You approved create_order for \u201corder two desks\u201d." in view.notice.value
        assert "turn_" not in view.notice.value

    def test_errors_name_tasks_by_their_text_not_their_ids(
        self, make_runtime: MakeRuntime, views: list[SessionView]
    ) -> None:
        """An error message that names a turn shows the task's text instead, no class name."""
        session = make_runtime(nb.ScriptedModel(["done"])).session("s1")
        receipt = session.submit("quick task")
        receipt.wait(WAIT)
        view = make_view(views, session, follow=False)
        view.resume()
        error = view.error.value
        assert "Resume: \u201cquick task\u201d is completed" in error
        assert receipt.turn_id not in error
        assert "CannotResume" not in error


class TestErrors:
    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_empty_submit_shows_invalid_input(
        self, make_runtime: MakeRuntime, views: list[SessionView]
    ) -> None:
        """Submit with an empty box shows InvalidInput in the view, raises nothing."""
        view = make_view(views, make_runtime(nb.ScriptedModel([])).session("s1"))
        view.submit_button.click()
        assert "the box is empty" in view.error.value
        assert "InvalidInput" not in view.error.value
        view.input.value = "now with text"
        view.submit_button.click()
        assert view.error.value == ""

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_steering_a_finished_task_shows_not_running(
        self, make_runtime: MakeRuntime, views: list[SessionView]
    ) -> None:
        """A steer that arrives after the task finished shows NotRunning in the view."""
        session = make_runtime(nb.ScriptedModel(["done"])).session("s1")
        session.run("quick", timeout=WAIT)
        view = make_view(views, session)
        assert view.steer("too late") is None
        assert "nothing is running now" in view.error.value

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_interrupting_a_stale_run_shows_not_running(
        self, make_runtime: MakeRuntime, views: list[SessionView]
    ) -> None:
        """A view that still shows a finished run as running reports NotRunning."""
        model = PausingModel([text_pieces("Soon done, really soon.")], {0: 2})
        session = make_runtime(model).session("s1")
        session.submit("work")
        until(model.paused.is_set, what="the model to pause")
        view = make_view(views, session, follow=False)
        assert not view.interrupt_button.disabled
        model.release()
        until(lambda: committed(session, "turn/completed"), what="completion")
        time.sleep(0.6)  # the idle lease is released
        view.interrupt_button.click()
        assert "nothing is running" in (view.error.value + view.notice.value).lower()

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_resume_of_a_completed_task_shows_cannot_resume(
        self, make_runtime: MakeRuntime, views: list[SessionView]
    ) -> None:
        """Resume when nothing can be resumed shows CannotResume in the view."""
        session = make_runtime(nb.ScriptedModel(["done"])).session("s1")
        session.run("quick", timeout=WAIT)
        view = make_view(views, session)
        view.resume()
        assert view.error.value.count("Resume: ") == 1
        assert "CannotResume" not in view.error.value

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_approving_an_answered_request_shows_invalid_answer(
        self, make_runtime: MakeRuntime, views: list[SessionView]
    ) -> None:
        """A second Approve on a request answered elsewhere shows InvalidAnswer."""
        session = _suspended(make_runtime, "ok")
        view = make_view(views, session, follow=False)
        request_id = next(iter(session.pending()))
        session.respond(request_id, True).wait(WAIT)
        view.approve(request_id)
        assert "Approve: " in view.error.value
        assert "InvalidAnswer" not in view.error.value


class TestFollowing:
    def test_redraws_are_throttled(
        self, make_runtime: MakeRuntime, views: list[SessionView]
    ) -> None:
        """A reply streamed over many commits is drawn at most about ten times a second."""
        model = nb.ScriptedModel(["x" * 400], chunk_size=2, chunk_delay=0.005)
        session = make_runtime(model).session("s1")
        view = make_view(views, session)
        before, started = view.renders, time.monotonic()
        receipt = session.submit("stream")
        session.wait(receipt, WAIT)
        until(lambda: view.rendered_seq == session.log.head(), what="the last drawing")
        elapsed = time.monotonic() - started
        assert len(committed(session, "model/chunk")) > 5
        assert view.renders - before <= elapsed * 10 + 3

    def test_close_stops_the_follower(
        self, make_runtime: MakeRuntime, views: list[SessionView]
    ) -> None:
        """close() stops both threads; later commits no longer redraw."""
        session = make_runtime(nb.ScriptedModel(["one", "two"])).session("s1")
        view = make_view(views, session)
        assert view.following
        view.close()
        assert not view.following
        renders = view.renders
        session.run("more", timeout=WAIT)
        time.sleep(0.3)
        assert view.renders == renders

    def test_a_closed_runtime_ends_the_follower_quietly(
        self, make_runtime: MakeRuntime, views: list[SessionView]
    ) -> None:
        """When the store closes, following stops and the view shows no error."""
        session = make_runtime(nb.ScriptedModel(["done"])).session("s1")
        session.run("quick", timeout=WAIT)
        view = make_view(views, session)
        session.runtime.close()
        session.runtime.store.close()  # a shared memory:// store outlives its runtime
        until(lambda: not view.following, what="the follower to stop")
        assert view.error.value == ""
        assert "done" in transcript_text(view)

    def test_a_new_view_after_a_restart_shows_the_same_conversation(
        self, make_runtime: MakeRuntime, views: list[SessionView]
    ) -> None:
        """A view built by a new runtime on the same store draws the same transcript."""
        session = _suspended(make_runtime, "ok")
        first = make_view(views, session, follow=False)
        drawn = transcript_text(first)
        requests = [c.children[0].value for c in first.requests.children]
        session.runtime.close()
        again = make_runtime(nb.ScriptedModel(["unused"]), [create_order]).open("s1")
        second = make_view(views, again, follow=False)
        assert transcript_text(second) == drawn
        assert [c.children[0].value for c in second.requests.children] == requests
        assert second.cursor == first.cursor

    def test_long_conversations_show_the_last_items_and_earlier_on_demand(
        self, make_runtime: MakeRuntime, views: list[SessionView]
    ) -> None:
        """Only the newest max_items are built; Show earlier adds a page."""
        session = make_runtime(nb.ScriptedModel(lambda messages: "ok")).session("s1")
        for n in range(8):
            session.run(f"task {n}", timeout=WAIT)
        view = make_view(views, session, max_items=5, page=4, follow=False)
        assert len(items_of(view)) == 5
        assert view.earlier.layout.display is None
        assert "11 more" in view.earlier.description
        assert "task 7" in transcript_text(view)
        assert "task 0" not in transcript_text(view)
        view.earlier.click()
        assert len(items_of(view)) == 9
        view.show_earlier()
        view.show_earlier()
        assert len(items_of(view)) == 16
        assert view.earlier.layout.display == "none"
        assert "task 0" in transcript_text(view)


def test_import_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without ipywidgets, SessionView raises ImportError saying what to install."""
    import sys

    monkeypatch.setitem(sys.modules, "ipywidgets", None)
    monkeypatch.delitem(sys.modules, "agentnb.widgets.view")
    with pytest.raises(ImportError, match=re.escape(install_hint("widgets"))):
        from agentnb.widgets import SessionView  # noqa: F401
    monkeypatch.setitem(sys.modules, "agentnb.widgets.view", view_module)


# -- escaping ---------------------------------------------------------------------------------

HOSTILE = '<script>alert(1)</script><img src=x onerror="alert(2)">&amp;'
_ALLOWED_TAGS = {"div", "span", "pre", "code", "b", "table", "tr", "td"}


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def assert_inert(markup: str) -> str:
    """Only this module's own tags and attributes; returns the text a browser would show."""
    parser = _Tags()
    parser.feed(markup)
    parser.close()
    for tag, attrs in parser.tags:
        assert tag in _ALLOWED_TAGS, f"unexpected <{tag}> in {markup!r}"
        for name, value in attrs:
            assert name in {"style", "class", "title"}, f"unexpected attribute {name} in {markup!r}"
            assert "javascript:" not in (value or "")
    return "".join(parser.text)


def all_markup(widget: Any) -> list[str]:
    out = []
    # The view's own stylesheet (constant, no value in it) is the one <style>.
    if type(widget).__name__ == "HTML" and "agentnb-style" not in widget._dom_classes:
        out.append(widget.value)
    for child in getattr(widget, "children", ()):
        out += all_markup(child)
    return out


class TestEscaping:
    def test_every_rendered_field_is_inert(self) -> None:
        """Hostile strings in each field of each renderer show as text, never as markup."""
        item = ChatItem(
            id=HOSTILE,
            kind="tool",
            role="tool",
            turn_id=HOSTILE,
            run_id=HOSTILE,
            seq=1,
            status=HOSTILE,
            text=HOSTILE,
            source=HOSTILE,
            tool_name=HOSTILE,
            arguments={HOSTILE: [HOSTILE]},
            arguments_text=HOSTILE,
            progress=(HOSTILE, {HOSTILE: HOSTILE}),
            result={"status": HOSTILE, "output": HOSTILE},
            request={"kind": HOSTILE, "status": HOSTILE, "prompt": HOSTILE},
            error=HOSTILE,
        )
        streaming = ChatItem(HOSTILE, "message", "assistant", None, None, 1, "streaming", HOSTILE)
        markup = [
            view_module.tool_html(item),
            view_module.tool_html(ChatItem(**{**item.to_dict(), "arguments": None})),  # type: ignore[arg-type]
            view_module.message_html(
                ChatItem(**{**item.to_dict(), "kind": "message", "role": HOSTILE})
            ),  # type: ignore[arg-type]
            view_module.message_html(streaming),
            view_module.request_html(
                Interaction(
                    HOSTILE, HOSTILE, HOSTILE, HOSTILE, HOSTILE, {HOSTILE: HOSTILE}, HOSTILE
                )
            ),
            view_module.tasks_html(
                [Task(HOSTILE, HOSTILE, HOSTILE, (HOSTILE,), None, None, None, HOSTILE)]
            ),
            view_module.status_html((HOSTILE, HOSTILE), None, 1),
            view_module.status_html(None, (HOSTILE, HOSTILE), 1),
            view_module.marker_html(ChatItem(**{**item.to_dict(), "kind": "agent_changed"})),  # type: ignore[arg-type]
            view_module.error_html(HOSTILE),
            view_module.notice_html(HOSTILE),
        ]
        for text in markup:
            shown = assert_inert(text)
            assert "<script>alert(1)</script>" in shown, text

    def test_a_hostile_session_renders_inert(
        self, make_runtime: MakeRuntime, views: list[SessionView]
    ) -> None:
        """Model text, tool names, arguments, progress, results, prompts, inputs and errors."""

        @nb.tool
        def probe(text: str, ctx: nb.ToolContext) -> str:
            """Echo hostile progress and output."""
            ctx.progress(text)
            ctx.progress({text: text})
            return text

        script = [
            nb.Reply(
                text=HOSTILE,
                tool_calls=[
                    nb.ToolCall(HOSTILE, {HOSTILE: HOSTILE}),
                    nb.ToolCall("probe", {"text": HOSTILE}),
                ],
            ),
            nb.ToolCall("create_order", {"item": HOSTILE, "qty": 1}),
            nb.ToolCall("ask_user", {"question": HOSTILE}),
            nb.ModelError(HOSTILE),
        ]
        session = make_runtime(
            nb.ScriptedModel(script), [probe, create_order, nb.ask_user]
        ).session("s1")
        session.inject(HOSTILE)
        session.run(HOSTILE, timeout=WAIT)
        view = make_view(views, session, follow=False)
        confirm = view.snapshot().pending
        markup = all_markup(view.widget)
        session.respond(next(iter(confirm)), True).wait(WAIT)
        view.refresh()
        markup += all_markup(view.widget)
        session.respond(next(iter(session.pending())), HOSTILE).wait(WAIT)
        view.refresh()
        markup += all_markup(view.widget)
        shown = [assert_inert(m) for m in markup]
        assert sum("<script>alert(1)</script>" in s for s in shown) >= 8
        assert any("failed" in s and "<script>" in s for s in shown)  # the task's error
        titles = [w.titles[0] for w in find(view.widget, "agentnb-tool")]
        assert any("<script>" in t for t in titles)  # titles are text, not HTML
