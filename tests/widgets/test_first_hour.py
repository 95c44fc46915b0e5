"""The notebook user's first hour: records that show as tables, one answer per request, the
recovery buttons after a kernel restart mid-tool, words that say what is true, warnings for
the common mistakes (a setup cell run twice, a relative SQLite path), the smaller cards."""

from __future__ import annotations

import re
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

import agentnb as nb
from agentnb import tokens
from agentnb.runtime.runtime import SecondRuntimeWarning
from agentnb.widgets import SessionView
from tests.remote import DOORS, through_doors
from tests.widgets import _restart_child as child
from tests.widgets.helpers import WAIT, committed, until
from tests.widgets.test_view import create_order, find, one, transcript_text

MakeRuntime = Callable[..., nb.Runtime]
REPO = Path(nb.__file__).resolve().parent.parent


@pytest.fixture
def make_runtime(
    make_runtime: MakeRuntime, door: str, request: pytest.FixtureRequest
) -> MakeRuntime:
    """Sessions (and their views) through the door: local, or a RemoteSession."""
    return through_doors(make_runtime, request)


@pytest.fixture
def views() -> Iterator[list[SessionView]]:
    made: list[SessionView] = []
    yield made
    for view in made:
        view.close()


def view_of(views: list[SessionView], session: Any) -> SessionView:
    view = SessionView(session)
    views.append(view)
    return view


class _Text(HTMLParser):
    """The text a reader sees in markup (attributes such as ``title`` are hover, not text)."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []

    def handle_data(self, data: str) -> None:
        self.parts.append(data)


def visible(markup: str) -> str:
    parser = _Text()
    parser.feed(markup)
    return " ".join(" ".join(parser.parts).split())


def suspended(make_runtime: MakeRuntime, *replies: Any) -> Any:
    """A session (through the door) whose task waits for the approval of create_order."""
    return suspended_with_runtime(make_runtime, *replies)[1]


def suspended_with_runtime(make_runtime: MakeRuntime, *replies: Any) -> tuple[nb.Runtime, Any]:
    """The local runtime and the session (through the door) of ``suspended``."""
    script = [nb.ToolCall("create_order", {"item": "desk", "qty": 2}), *replies]
    made = make_runtime(nb.ScriptedModel(script), [create_order])
    session = made.session("s1")
    assert session.run("order two desks", timeout=WAIT).status == "suspended"
    return getattr(made, "runtime", made), session


def hold_lease(runtime: nb.Runtime, key: nb.SessionKey) -> Any:
    """Another holder takes the session's lease, so an accepted answer stays unapplied."""
    deadline = time.monotonic() + WAIT
    while True:
        try:
            return runtime.store.acquire_lease(key, "elsewhere:1:rt_test", 60.0)
        except nb.LeaseHeld:
            assert time.monotonic() < deadline, "the runtime never released the lease"
            time.sleep(0.05)


# -- item 3: records show as tables, with a short text form ----------------------------------


class TestRecordsShowAsTables:
    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_tasks_are_a_table_and_a_few_short_lines(self, make_runtime: MakeRuntime) -> None:
        """session.tasks() displays as a table; its text form is one line per task."""
        session = make_runtime(nb.ScriptedModel(["Done.", "Done again."])).session("s1")
        session.run("Compare the plans", timeout=WAIT)
        session.run("Order two desks", timeout=WAIT)
        tasks = session.tasks()
        assert tasks == list(tasks)
        assert len(tasks) == 2
        assert "<table" in tasks._repr_html_()
        assert repr(tasks).splitlines() == [
            "2 tasks",
            "  completed   \u201cCompare the plans\u201d",
            "  completed   \u201cOrder two desks\u201d",
        ]
        assert "Task(" not in repr(tasks)

    def test_ipython_prints_the_short_form(self, make_runtime: MakeRuntime) -> None:
        """A cell ending in session.tasks() prints the short form, not a wall of Task(...)."""
        from IPython.lib.pretty import pretty

        session = make_runtime(nb.ScriptedModel(["Done."])).session("s1")
        session.run("Compare the plans", timeout=WAIT)
        assert pretty(session.tasks()) == repr(session.tasks())
        assert pretty(session.pending()) == "0 pending requests"

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_pending_is_a_table_and_names_the_call(self, make_runtime: MakeRuntime) -> None:
        """session.pending() displays as a table; its text form says what waits for whom."""
        session = suspended(make_runtime, "ok")
        pending = session.pending()
        assert isinstance(pending, dict)
        assert len(pending) == 1
        assert "<table" in pending._repr_html_()
        assert repr(pending).splitlines() == [
            "1 pending request",
            "  waits for your approval: create_order(item='desk', qty=2)",
        ]

    def test_permissions_sessions_children_and_history_are_short(
        self, make_runtime: MakeRuntime
    ) -> None:
        """permissions(), runtime.sessions(), children() and history() show short forms."""
        session = suspended(make_runtime, "ok")
        rid = next(iter(session.pending()))
        session.respond(rid, nb.Answer.approve(remember="session")).wait(timeout=WAIT)
        rules = session.permissions()
        assert "<table" in rules._repr_html_()
        assert repr(rules).splitlines() == [
            "1 permission rule",
            "  create_order runs without asking (session)",
        ]
        infos = session.runtime.sessions()
        assert "<table" in infos._repr_html_()
        assert repr(infos).splitlines()[0] == "1 session"
        assert repr(session.children()) == "0 sub-agent calls"
        page = session.history()
        assert re.fullmatch(r"HistoryPage\(\d+ messages, the last page\)", repr(page))


# -- item 6: one answer per request -----------------------------------------------------------


@pytest.mark.parametrize("door", DOORS, indirect=True)
class TestOneAnswerPerRequest:
    def test_a_second_different_answer_is_refused(self, make_runtime: MakeRuntime) -> None:
        """Approve, then Reject before it applied: InvalidAnswer "already answered", unwritten."""
        runtime, session = suspended_with_runtime(make_runtime, "ok")
        rid = next(iter(session.pending()))
        lease = hold_lease(runtime, session.key)
        first = session.respond(rid, True)
        head = runtime.store.inbox_head(session.key)
        assert session.respond(rid, True) == first  # a retried request gets its receipt
        with pytest.raises(nb.InvalidAnswer, match="already answered"):
            session.respond(rid, False)
        with pytest.raises(nb.InvalidAnswer, match="already answered"):
            session.respond(rid, nb.Answer.reject("changed my mind"))
        assert runtime.store.inbox_head(session.key) == head
        runtime.store.release_lease(lease)

    def test_an_answer_after_it_applied_is_refused(self, make_runtime: MakeRuntime) -> None:
        """Once the answer applied, any other answer is refused with "already answered"."""
        session = suspended(make_runtime, "ok")
        rid = next(iter(session.pending()))
        session.respond(rid, True).wait(timeout=WAIT)
        with pytest.raises(nb.InvalidAnswer, match="already answered"):
            session.respond(rid, True)

    def test_a_double_click_on_approve_says_already_answered(
        self, make_runtime: MakeRuntime, views: list[SessionView]
    ) -> None:
        """Two clicks on Approve send one answer; the second click says it was answered."""
        local, session = suspended_with_runtime(make_runtime, "ok")
        view = view_of(views, session)
        rid = next(iter(session.pending()))
        lease = hold_lease(local, session.key)
        approve = one(view, "agentnb-approve")
        approve.click()
        assert "You approved create_order for \u201corder two desks\u201d." in view.notice.value
        view.approve(rid)  # the second click of a double click
        assert "Already answered" in view.notice.value
        responds = [
            e for e in local.store.inbox_read_after(session.key, 0, 1000) if _kind(e) == "respond"
        ]
        assert len(responds) == 1
        local.store.release_lease(lease)


def _kind(event: nb.Event) -> str | None:
    return event.payload.get("kind") if event.type == "inbox/accepted" else None


# -- item 4: recovery buttons after a kernel restart mid-tool ----------------------------------


@pytest.fixture
def restarted(tmp_path: Path) -> Iterator[tuple[nb.Runtime, nb.Session]]:
    """A kernel that exited while ``research`` ran (its run ended with the exit reason,
    the call without a result), then this process's runtime on the same store."""
    db = tmp_path / "restart.sqlite"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.widgets._restart_child", str(db)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "RUNNING"
        runtime = nb.Runtime(child.agent(), store=f"sqlite:///{db}")
        session = runtime.session(child.SESSION_ID)
        # The exiting interpreter records why its run ended; the blocked tool thread keeps
        # it alive after that, until the kernel manager kills it (as Jupyter does).
        until(lambda: committed(session, "run/end"), what="the exiting kernel's run/end")
    finally:
        proc.kill()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()
    try:
        yield runtime, session
    finally:
        runtime.close()


class TestRecoveryButtons:
    def test_row_and_status_say_the_kernel_restarted(
        self, restarted: tuple[nb.Runtime, nb.Session], views: list[SessionView]
    ) -> None:
        """The status line and the task row say "the kernel restarted while research ran"."""
        _, session = restarted
        view = view_of(views, session)
        assert "the kernel restarted while research ran" in view.status.value
        assert "the kernel restarted while research ran" in view.tasks.value
        assert "record what happened from code" not in view.status.value
        assert "resume() continues it" not in view.tasks.value
        calls = find(view, "agentnb-uncertain-call")
        assert len(calls) == 1
        assert "research(topic=&#x27;rust&#x27;)" in calls[0].children[0].value
        assert view.resume_button.disabled

    def test_it_did_not_run_reconciles_and_the_task_completes(
        self, restarted: tuple[nb.Runtime, nb.Session], views: list[SessionView]
    ) -> None:
        """ "It did not run" records the call as not run, resumes, and the task completes."""
        _, session = restarted
        view = view_of(views, session)
        one(view, "agentnb-not-run").click()
        assert view.error.value == ""
        until(lambda: session.tasks()[-1].status == "completed", what="the task to complete")
        (result,) = list(committed(session, "tool/result"))
        assert result.payload["status"] == "error"
        assert "did not run" in result.payload["output"]
        until(lambda: "Rust is fast." in transcript_text(view), what="the answer in view")
        until(lambda: not find(view, "agentnb-uncertain-call"), what="the recovery box to go")

    def test_it_ran_records_the_given_result(
        self, restarted: tuple[nb.Runtime, nb.Session], views: list[SessionView]
    ) -> None:
        """ "It ran — here is its result" records that text as the call's result and goes on."""
        _, session = restarted
        view = view_of(views, session)
        one(view, "agentnb-ran-result").value = "notes on rust, from the log"
        one(view, "agentnb-ran").click()
        until(lambda: session.tasks()[-1].status == "completed", what="the task to complete")
        (result,) = committed(session, "tool/result")
        assert result.payload["status"] == "success"
        assert result.payload["output"] == "notes on rust, from the log"

    def test_continue_records_it_as_unknown(
        self, restarted: tuple[nb.Runtime, nb.Session], views: list[SessionView]
    ) -> None:
        """ "Continue, recording it as unknown" resumes with the call recorded unknown."""
        _, session = restarted
        view = view_of(views, session)
        one(view, "agentnb-continue-unknown").click()
        until(lambda: session.tasks()[-1].status == "completed", what="the task to complete")
        (result,) = committed(session, "tool/result")
        assert result.payload["status"] == "unknown"
        assert "You continued \u201cLook into rust\u201d" in view.notice.value


# -- items 5 and 9: one status line, the current state; words on screen, ids on hover -------


@pytest.mark.parametrize("door", DOORS, indirect=True)
class TestWordsSayWhatIsTrue:
    def test_the_first_submit_names_the_task_by_its_text(
        self, make_runtime: MakeRuntime, views: list[SessionView]
    ) -> None:
        """The first Submit's notice names the task; it never says "Task the task"."""
        session = make_runtime(nb.ScriptedModel(["Hello."])).session("s1")
        view = view_of(views, session)
        view.input.value = "Order two desks"
        one(view, "agentnb-submit").click()
        assert "You submitted \u201cOrder two desks\u201d." in view.notice.value
        assert "the task" not in view.notice.value
        assert "queue" not in view.notice.value

    def test_a_waiting_approval_is_below_the_status_line(
        self, make_runtime: MakeRuntime, views: list[SessionView]
    ) -> None:
        """The status line points down to the card (the card is below it)."""
        view = view_of(views, suspended(make_runtime, "ok"))
        assert "is waiting for your approval below" in view.status.value
        children = list(view.children)
        assert children.index(view.status) < children.index(view.requests)

    def test_after_approve_a_new_approval_is_what_the_status_says(
        self, make_runtime: MakeRuntime, views: list[SessionView]
    ) -> None:
        """Approve, and the next approval waits: nothing on screen says the task "goes on"."""
        session = suspended(
            make_runtime, nb.ToolCall("create_order", {"item": "chair", "qty": 1}), "ok"
        )
        view = view_of(views, session)
        one(view, "agentnb-approve").click()
        until(lambda: "chair" in repr(session.pending()), what="the second approval")
        view.refresh()
        shown = view.status.value + view.notice.value
        assert "goes on" not in shown
        assert "is waiting for your approval below" in view.status.value

    def test_a_closed_view_never_says_ready(
        self, make_runtime: MakeRuntime, views: list[SessionView]
    ) -> None:
        """A closed view says it is closed, not "Ready for a task"."""
        session = make_runtime(nb.ScriptedModel(["Hello."])).session("s1")
        view = view_of(views, session)
        view.close()
        text = visible(view.children[0].value)
        assert "Ready for a task" not in text
        assert "Closed" in text

    def test_interrupt_says_what_was_asked(
        self, make_runtime: MakeRuntime, views: list[SessionView]
    ) -> None:
        """Nothing running: Interrupt says "Nothing was running." (never "Stopping...")."""
        session = make_runtime(nb.ScriptedModel(["Hello."])).session("s1")
        view = view_of(views, session)
        view.interrupt()
        assert "Stopping" not in view.notice.value + view.error.value


class TestIdsOnHover:
    def test_records_show_words_and_keep_ids_on_hover(self, make_runtime: MakeRuntime) -> None:
        """Tables and sentences of the records carry no ids or log words in their text."""
        session = suspended(make_runtime, "ok")
        receipt = session.submit("and a lamp")
        shown = [
            session.tasks()._repr_html_(),
            session.pending()._repr_html_(),
            session.transcript()._repr_html_(),
            receipt._repr_html_(),
            session.inspect()._repr_html_(),
        ]
        for markup in shown:
            text = visible(markup)
            for word in ("turn_", "cmd_", "(s)", "as of seq", "epoch", "rt_"):
                assert word not in text, f"{word!r} on screen: {text}"
        assert f'title="turn {receipt.turn_id}' in shown[3]
        assert "queued" not in visible(shown[3])  # a receipt says accepted, never stale

    def test_errors_in_the_view_name_things_not_ids(
        self, make_runtime: MakeRuntime, views: list[SessionView]
    ) -> None:
        """An error naming a request shows what it asks, not its id."""
        session = suspended(make_runtime, "ok")
        view = view_of(views, session)
        view.resume()
        assert "call_" not in view.error.value
        assert "req_" not in view.error.value
        assert "turn_" not in view.error.value


# -- item 8: mistakes with a word ------------------------------------------------------------


class TestMistakesGetAWord:
    def test_a_second_runtime_on_the_same_store_warns(self, tmp_path: Path) -> None:
        """Running the setup cell twice (a second Runtime on the same file) warns."""
        agent = child.agent()
        url = f"sqlite:///{tmp_path / 'x.sqlite'}"
        first = nb.Runtime(agent, store=url)
        try:
            with pytest.warns(SecondRuntimeWarning, match="close the first|Close the first"):
                second = nb.Runtime(agent, store=url)
            second.close()
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                first.close()
                nb.Runtime(agent, store=url).close()  # once the first closed: no warning
        finally:
            first.close()

    def test_the_store_repr_is_the_resolved_file(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """print(runtime.store) names the file it opened, resolved."""
        monkeypatch.chdir(tmp_path)
        store = nb.open_store("sqlite:///data.sqlite")
        try:
            assert repr(store) == f"SQLiteStore({str(tmp_path / 'data.sqlite')!r})"
        finally:
            store.close()

    def test_a_relative_path_under_a_root_folder_warns(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """sqlite:///tmp/x.db opens ./tmp/x.db: the warning says so and names sqlite:////."""
        monkeypatch.chdir(tmp_path)
        with pytest.warns(UserWarning, match=re.escape("write sqlite:////tmp/first/x.db")):
            store = nb.open_store("sqlite:///tmp/first/x.db")
        store.close()
        assert (tmp_path / "tmp" / "first" / "x.db").exists()

    def test_the_view_header_shows_the_resolved_file(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, views: list[SessionView]
    ) -> None:
        """The view's header names the session and the store's resolved file."""
        monkeypatch.chdir(tmp_path)
        runtime = nb.Runtime(child.agent(), store="sqlite:///chat.sqlite")
        try:
            view = view_of(views, runtime.session("s1"))
            assert str(tmp_path / "chat.sqlite") in view.header.value
            assert "session s1" in view.header.value
        finally:
            runtime.close()


# -- item 11: the smaller ones ---------------------------------------------------------------


@nb.tool(confirm=True)
def create_order_checked(item: str, qty: int) -> str:
    """Create a purchase order.

    Args:
        item: what to buy
        qty: how many
    """
    return f"ordered {qty} x {item}"


class TestSmallerCards:
    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_edit_arguments_approves_the_edited_call(
        self, make_runtime: MakeRuntime, views: list[SessionView]
    ) -> None:
        """The approval card's Edit arguments approves the call with the arguments typed."""
        local, session = suspended_with_runtime(make_runtime, "ok")
        view = view_of(views, session)
        one(view, "agentnb-edit").click()
        box = one(view, "agentnb-args-input")
        assert box.layout.display is None
        assert '"qty": 2' in box.value
        box.value = '{"item": "desk", "qty": 3}'
        one(view, "agentnb-approve-edited").click()
        until(lambda: session.tasks()[-1].status == "completed", what="the task to complete")
        dispatch = committed(local.open("s1"), "tool/dispatch")[-1]
        assert dispatch.payload["arguments"] == {"item": "desk", "qty": 3}

    def test_edited_arguments_that_are_not_json_say_so(
        self, make_runtime: MakeRuntime, views: list[SessionView]
    ) -> None:
        """Arguments that are not a JSON object show an error; nothing is sent."""
        session = suspended(make_runtime, "ok")
        view = view_of(views, session)
        head = session.inbox.head()
        view.approve_edited(next(iter(session.pending())), "{not json")
        assert "not JSON" in view.error.value
        view.approve_edited(next(iter(session.pending())), "[1, 2]")
        assert "JSON object" in view.error.value
        assert session.inbox.head() == head

    def test_a_question_card_does_not_repeat_the_question_as_json(
        self, make_runtime: MakeRuntime, views: list[SessionView]
    ) -> None:
        """An ask_user card shows the question once, as text."""
        script = [nb.ToolCall("ask_user", {"question": "Which colour?"}), "ok"]
        session = make_runtime(nb.ScriptedModel(script), [nb.ask_user]).session("s1")
        assert session.run("paint it", timeout=WAIT).status == "suspended"
        view = view_of(views, session)
        card = one(view, "agentnb-request").children[0].value
        assert visible(card).count("Which colour?") == 1
        assert "{" not in visible(card)

    def test_a_steer_accepted_during_a_run_shows_as_waiting(
        self, make_runtime: MakeRuntime, views: list[SessionView]
    ) -> None:
        """Guidance accepted while a tool runs shows at once as a waiting steer."""
        from tests.widgets.helpers import PausingModel, text_pieces

        replies = [text_pieces("Working on it, slowly."), text_pieces("Short: done.")]
        model = PausingModel(replies, pause_at={0: 2})
        session = make_runtime(model).session("s1")
        view = view_of(views, session)
        session.submit("write a report")
        until(model.paused.is_set, what="the model to pause")
        session.steer("make it short")
        view.refresh()
        assert "make it short" in view.steers.value
        assert "waiting" in view.steers.value
        model.release()
        until(lambda: session.tasks()[-1].status == "completed", what="the task to complete")
        view.refresh()
        assert "make it short" not in view.steers.value  # applied: it is in the chat now
        assert "make it short" in transcript_text(view)

    def test_the_transcript_table_labels_steers_and_material(
        self, make_runtime: MakeRuntime
    ) -> None:
        """session.transcript() says "steer" and "material" where the view does, not "user"."""
        from tests.widgets.helpers import PausingModel, text_pieces

        replies = [text_pieces("Working on it, slowly."), text_pieces("Short: done.")]
        model = PausingModel(replies, pause_at={0: 2})
        session = make_runtime(model).session("s1")
        session.inject("the price list")
        session.submit("write a report")
        until(model.paused.is_set, what="the model to pause")
        session.steer("make it short")
        model.release()
        until(lambda: session.tasks()[-1].status == "completed", what="the task to complete")
        rows = visible(session.transcript()._repr_html_())
        assert "user write a report" in rows
        assert "material the price list" in rows
        assert "steer make it short" in rows


class TestRemoteViewFollowsTheStream:
    def test_an_idle_remote_view_does_not_poll_the_inbox(
        self, make_runtime: MakeRuntime, views: list[SessionView]
    ) -> None:
        """A remote view that waits reads the stream: no GET .../inbox while nothing moves."""
        from tests.service.helpers import ServerThread

        runtime = make_runtime(nb.ScriptedModel(["Hello."]))
        runtime.session("s1").run("hi", timeout=WAIT)
        server = ServerThread(runtime).start()
        try:
            token, _ = tokens.issue(runtime.store, "default")
            remote = nb.connect(server.url, token)
            session = remote.session("s1")
            calls: list[str] = []
            real = session._call

            def spy(method: str, path: str, *args: Any, **kwargs: Any) -> Any:
                calls.append(path)
                return real(method, path, *args, **kwargs)

            session._call = spy  # type: ignore[method-assign]
            view = view_of(views, session)
            until(lambda: view.renders >= 1 and session._streamed_inbox_head() is not None)
            calls.clear()
            time.sleep(3.0)  # several idle redraws (every 2 s) and checks (every 0.5 s)
            assert [c for c in calls if c == "/inbox"] == []
            remote.close()
        finally:
            server.stop()
