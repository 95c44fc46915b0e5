"""``Limits`` bound a model reply's size, its number of tool calls and a tool result's size,
by default: past a bound the run ends with a clear stop reason, or the model gets a tool
error, and memory and the log stay bounded."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

import agentnb as nb
from agentnb.errors import InvalidInput
from agentnb.models import Finish, ModelRequest, StreamItem, TextDelta, ToolCallDelta
from tests.runtime.helpers import WAIT, events_of

Make = Callable[..., nb.Runtime]
MB = 1_000_000


class Endless(nb.Model):
    """Streams ``pieces`` then "done" for its first call (counting what it yielded), then
    answers "done"."""

    name = "endless"

    def __init__(self, pieces: Callable[[], Any]) -> None:
        self.pieces = pieces
        self.calls = 0
        self.yielded = 0

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        self.calls += 1
        if self.calls == 1:
            for piece in self.pieces():
                self.yielded += 1
                yield piece
        yield TextDelta("done")
        yield Finish("stop")


@nb.tool
def noop() -> str:
    """Do nothing."""
    return "ok"


@nb.tool
def dump() -> str:
    """Return a lot."""
    return "x" * (MB + 1)


class TestReplySize:
    def test_a_reply_past_the_default_bound_ends_the_run(self, make_runtime: Make) -> None:
        """A reply streaming past 2,000,000 characters is stopped there: the run fails with
        stop_reason reply_too_large and the model is not read further."""
        model = Endless(lambda: (TextDelta("x" * MB) for _ in range(100)))
        session = make_runtime(model).session("s")
        outcome = session.run("talk", timeout=WAIT)
        assert outcome.status == "failed"
        assert outcome.stop_reason == "reply_too_large"
        assert "max_reply_chars" in str(outcome.error)
        assert model.yielded == 3
        ends = [e.payload["status"] for e in events_of(session, "model/end")]
        assert ends == ["failed"]
        recorded = sum(len(e.payload["text"]) for e in events_of(session, "model/chunk"))
        assert recorded <= 2 * MB

    def test_the_bound_is_a_limit_of_the_runtime(self, make_runtime: Make) -> None:
        """Limits(max_reply_chars=) sets the bound; tool-call arguments count toward it."""
        model = Endless(
            lambda: [ToolCallDelta(index=0, name="noop", arguments_delta='{"a": "' + "y" * 200)]
        )
        runtime = make_runtime(model, [noop], limits=nb.Limits(max_reply_chars=100))
        outcome = runtime.session("s").run("talk", timeout=WAIT)
        assert outcome.stop_reason == "reply_too_large"

    def test_a_reply_within_the_bound_is_untouched(self, make_runtime: Make) -> None:
        """A reply at the bound completes as usual."""
        model = Endless(lambda: [TextDelta("x" * 96)])
        runtime = make_runtime(model, limits=nb.Limits(max_reply_chars=100))
        assert runtime.session("s").run("talk", timeout=WAIT).status == "completed"


class TestToolCallsPerReply:
    def test_more_calls_than_the_default_end_the_run(self, make_runtime: Make) -> None:
        """A reply asking for more than 128 tool calls ends the run before any of them runs,
        with stop_reason too_many_tool_calls."""
        model = Endless(
            lambda: (ToolCallDelta(index=i, name="noop", arguments_delta="{}") for i in range(5000))
        )
        session = make_runtime(model, [noop]).session("s")
        outcome = session.run("go", timeout=WAIT)
        assert outcome.status == "failed"
        assert outcome.stop_reason == "too_many_tool_calls"
        assert "max_tool_calls_per_reply" in str(outcome.error)
        assert model.yielded == 129
        assert events_of(session, "tool/dispatch") == []

    def test_as_many_calls_as_the_bound_run(self, make_runtime: Make) -> None:
        """Exactly max_tool_calls_per_reply calls run as usual."""
        model = Endless(
            lambda: [ToolCallDelta(index=i, name="noop", arguments_delta="{}") for i in range(3)]
        )
        runtime = make_runtime(model, [noop], limits=nb.Limits(max_tool_calls_per_reply=3))
        session = runtime.session("s")
        assert session.run("go", timeout=WAIT).status == "completed"
        assert len(events_of(session, "tool/result")) == 3


class TestToolResultSize:
    def test_a_result_past_the_default_bound_is_a_tool_error(self, make_runtime: Make) -> None:
        """A tool returning more than 1,000,000 characters records an error the model sees,
        not the result, and the turn goes on."""
        model = nb.ScriptedModel([nb.ToolCall("dump", {}), "told"])
        session = make_runtime(model, [dump]).session("s")
        outcome = session.run("go", timeout=WAIT)
        assert outcome.status == "completed"
        (result,) = [e.payload for e in events_of(session, "tool/result")]
        assert result["status"] == "error"
        assert "max_tool_result_chars" in result["output"]
        assert len(result["output"]) < 1000
        assert "max_tool_result_chars" in model.requests[-1][-1].text


class TestLimitsCheckTheirValues:
    @pytest.mark.parametrize(
        "name", ["max_reply_chars", "max_tool_calls_per_reply", "max_tool_result_chars"]
    )
    @pytest.mark.parametrize("bad", [0, -1, None, 1.5, True])
    def test_each_bound_is_a_positive_int(self, name: str, bad: Any) -> None:
        """Each new bound takes a positive int; anything else is InvalidInput naming it."""
        with pytest.raises(InvalidInput, match=name):
            nb.Limits(**{name: bad})

    def test_defaults(self) -> None:
        """The defaults bound every reply, call count and result."""
        limits = nb.Limits()
        assert limits.max_reply_chars == 2_000_000
        assert limits.max_tool_calls_per_reply == 128
        assert limits.max_tool_result_chars == 1_000_000
