"""One size limit for every text that enters a session: tasks, material, answers, reconcile."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

import agentnb as nb
from agentnb import limits
from agentnb.limits import MAX_INPUT_CHARS, check_json_size, check_text
from tests.runtime.helpers import WAIT, Gate

MakeRuntime = Callable[..., nb.Runtime]
SMALL = 40
"""The limit most tests shrink to, so an oversized text is cheap to build."""


@pytest.fixture
def small_limit(monkeypatch: pytest.MonkeyPatch) -> int:
    """Shrink the one limit; every entry point must follow it (it is read at call time)."""
    monkeypatch.setattr(limits, "MAX_INPUT_CHARS", SMALL)
    return SMALL


@nb.tool(confirm=True)
def create_order(item: str, qty: int) -> str:
    """Create a purchase order.

    Args:
        item: what to buy
        qty: how many
    """
    return f"ordered {qty} x {item}"


@nb.tool(external=True)
def annual_quote(vendor: str) -> str:
    """Ask a vendor for an annual quote (answered outside)."""
    raise AssertionError("external tools never run here")


def _suspended(make_runtime: MakeRuntime, call: nb.ToolCall, tool: nb.Tool) -> nb.Session:
    """A session whose only turn waits on one request made by ``call``."""
    session = make_runtime(nb.ScriptedModel([call, "done"]), [tool]).session("s1")
    assert session.run("go", timeout=WAIT).status == "suspended"
    return session


def _refused_without_writing(
    session: nb.Session, error: type[Exception], action: Callable[[], object]
) -> None:
    """``action`` raises ``error`` naming the limit, and neither log moved."""
    inbox, log = session.inbox.head(), session.log.head()
    with pytest.raises(error, match=r"the limit is"):
        action()
    assert (session.inbox.head(), session.log.head()) == (inbox, log)


class TestCheckText:
    def test_text_within_the_limit_is_returned(self) -> None:
        """A string of exactly MAX_INPUT_CHARS passes unchanged."""
        text = "x" * MAX_INPUT_CHARS
        assert check_text(text, "input") is text

    def test_text_over_the_limit_says_what_to_do(self) -> None:
        """One character over the limit raises InvalidInput with the sizes and a way out."""
        with pytest.raises(nb.InvalidInput, match=r"1,000,001 characters.*inject\(\)"):
            check_text("x" * (MAX_INPUT_CHARS + 1), "input")

    def test_non_string_is_refused(self) -> None:
        """A value that is not a str is refused, naming its type."""
        with pytest.raises(nb.InvalidInput, match="must be a string, got bytes"):
            check_text(b"x", "input")

    def test_blank_text_is_refused_unless_allowed(self) -> None:
        """Blank text is refused by default and accepted with allow_empty=True."""
        with pytest.raises(nb.InvalidInput, match="empty"):
            check_text("  ", "input")
        assert check_text("", "output", allow_empty=True) == ""

    def test_error_class_is_the_callers(self) -> None:
        """error= picks the typed error of the caller's contract (respond: InvalidAnswer)."""
        with pytest.raises(nb.InvalidAnswer):
            check_text(5, "the answer", error=nb.InvalidAnswer)

    def test_structured_value_is_measured_as_json(self, small_limit: int) -> None:
        """check_json_size refuses a mapping whose JSON text is over the limit."""
        check_json_size({"a": "x" * (small_limit - 10)}, "edited_args")
        with pytest.raises(nb.InvalidInput, match="as JSON"):
            check_json_size({"a": "x" * small_limit}, "edited_args")


class TestTaskInputs:
    def test_submit_over_the_limit_is_refused(
        self, make_runtime: MakeRuntime, small_limit: int
    ) -> None:
        """submit() of a text over the limit raises InvalidInput; nothing is written."""
        session = make_runtime(nb.ScriptedModel([])).session("s1")
        _refused_without_writing(
            session, nb.InvalidInput, lambda: session.submit("x" * (small_limit + 1))
        )

    def test_send_steer_and_inject_share_the_limit(
        self, make_runtime: MakeRuntime, small_limit: int
    ) -> None:
        """send(), steer() and inject() refuse the same size submit() refuses."""
        session = make_runtime(nb.ScriptedModel([])).session("s1")
        big = "x" * (small_limit + 1)
        for action in (session.send, session.steer, session.inject):
            _refused_without_writing(session, nb.InvalidInput, lambda a=action: a(big))


class TestAnswers:
    def test_fifty_megabyte_ask_user_answer_is_refused(self, make_runtime: MakeRuntime) -> None:
        """A 50 MB answer to ask_user raises InvalidAnswer; the question stays pending."""
        call = nb.ToolCall("ask_user", {"question": "Which plan?"})
        session = _suspended(make_runtime, call, nb.ask_user)
        (request_id,) = session.pending()
        big = "x" * 50_000_000
        _refused_without_writing(
            session, nb.InvalidAnswer, lambda: session.respond(request_id, big)
        )
        assert list(session.pending()) == [request_id]

    def test_answer_output_over_the_limit_is_refused_when_built(self, small_limit: int) -> None:
        """nb.Answer.output(text) refuses a text over the limit at once."""
        with pytest.raises(nb.InvalidInput, match="the limit is"):
            nb.Answer.output("x" * (small_limit + 1))

    def test_external_result_over_the_limit_is_refused(
        self, make_runtime: MakeRuntime, small_limit: int
    ) -> None:
        """An external_execution result over the limit raises InvalidAnswer, even hand-built."""
        session = _suspended(
            make_runtime, nb.ToolCall("annual_quote", {"vendor": "a"}), annual_quote
        )
        (request_id,) = session.pending()
        big = "x" * (small_limit + 1)
        hand_built = nb.Answer("output", text=big)
        _refused_without_writing(
            session, nb.InvalidAnswer, lambda: session.respond(request_id, hand_built)
        )

    def test_rejection_reason_over_the_limit_is_refused(
        self, make_runtime: MakeRuntime, small_limit: int
    ) -> None:
        """A rejection reason over the limit is refused when built and when hand-built."""
        big = "x" * (small_limit + 1)
        with pytest.raises(nb.InvalidInput, match="reason"):
            nb.Answer.reject(big)
        session = _suspended(
            make_runtime, nb.ToolCall("create_order", {"item": "desk", "qty": 1}), create_order
        )
        (request_id,) = session.pending()
        hand_built = nb.Answer("reject", reason=big)
        _refused_without_writing(
            session, nb.InvalidAnswer, lambda: session.respond(request_id, hand_built)
        )

    def test_edited_arguments_over_the_limit_are_refused(
        self, make_runtime: MakeRuntime, small_limit: int
    ) -> None:
        """Edited arguments whose JSON is over the limit are refused, built or hand-built."""
        edited = {"item": "x" * small_limit, "qty": 1}
        with pytest.raises(nb.InvalidInput, match="edited_args"):
            nb.Answer.approve(edited_args=edited)
        session = _suspended(
            make_runtime, nb.ToolCall("create_order", {"item": "desk", "qty": 1}), create_order
        )
        (request_id,) = session.pending()
        hand_built = nb.Answer("approve", edited_args=edited)
        _refused_without_writing(
            session, nb.InvalidAnswer, lambda: session.respond(request_id, hand_built)
        )


class TestReconcile:
    @pytest.fixture
    def uncertain(self, make_runtime: MakeRuntime) -> tuple[nb.Session, str]:
        """A session with one interrupted, uncertain tool call: (session, call_id)."""
        started = Gate()

        @nb.tool
        async def long_job(n: int) -> str:
            """Takes a long time."""
            started.arrived.set()
            await asyncio.sleep(30)
            return "never"

        model = nb.ScriptedModel([nb.ToolCall("long_job", {"n": 1})])
        session = make_runtime(model, [long_job]).session("s1")
        receipt = session.submit("run the job")
        started.wait_arrived()
        session.interrupt()
        assert receipt.wait(timeout=WAIT).status == "interrupted"
        (call,) = session.inspect().uncertain_tool_calls
        return session, call.call_id

    def test_outcome_text_over_the_limit_is_refused(
        self, uncertain: tuple[nb.Session, str], small_limit: int
    ) -> None:
        """A reconcile outcome over the limit is refused, built or hand-built; nothing written."""
        session, call_id = uncertain
        big = "x" * (small_limit + 1)
        with pytest.raises(nb.InvalidInput, match="the limit is"):
            nb.ToolOutcome.success(big)
        hand_built = nb.ToolOutcome("success", big)
        _refused_without_writing(
            session, nb.InvalidInput, lambda: session.reconcile({call_id: hand_built}, "checked")
        )

    def test_reason_over_the_limit_is_refused(
        self, uncertain: tuple[nb.Session, str], small_limit: int
    ) -> None:
        """A reconcile reason over the limit raises InvalidInput; nothing is written."""
        session, call_id = uncertain
        outcomes = {call_id: nb.ToolOutcome.unknown()}
        _refused_without_writing(
            session,
            nb.InvalidInput,
            lambda: session.reconcile(outcomes, "x" * (small_limit + 1)),
        )
