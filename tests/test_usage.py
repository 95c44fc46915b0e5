"""Usage accounting, stop reasons and token budgets (what a turn consumed, and why it stopped)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import agentnb as nb
from tests.runtime.helpers import WAIT, events_of


@nb.tool
def look(q: str) -> str:
    """Look something up.

    Args:
        q: what
    """
    return "found"


@nb.tool(confirm=True)
def order(item: str) -> str:
    """Order an item.

    Args:
        item: what
    """
    return "ordered"


def _reply(text: str | None = None, call: nb.ToolCall | None = None) -> nb.Reply:
    return nb.Reply(text=text or "", tool_calls=[call] if call else [], usage=(100, 10))


def _session(script: Any, tools: list[Any] | None = None, **agent: Any) -> nb.Session:
    runtime = nb.Runtime(
        nb.Agent(
            name="U",
            agent_id="usage",
            model=nb.ScriptedModel(script),
            tools=[look, order] if tools is None else tools,
            **agent,
        ),
        store="memory://",
    )
    return runtime.session("s")


class TestUsage:
    def test_totals_equal_the_sum_of_model_end_usage_in_the_log(self) -> None:
        """Outcome, Task and inspect() report exactly what the log's model/end events hold."""
        session = _session([_reply(call=nb.ToolCall("look", {"q": "a"})), _reply("done")])
        try:
            outcome = session.run("go", timeout=WAIT)
            ends = events_of(session, "model/end")
            assert outcome.usage is not None
            assert outcome.usage.input_tokens == sum(e.payload["input_tokens"] for e in ends)
            assert outcome.usage.output_tokens == sum(e.payload["output_tokens"] for e in ends)
            assert outcome.usage.model_calls == len(ends) == 2
            assert outcome.usage.tool_calls == 1
            assert outcome.usage.steps == 2
            assert outcome.usage.total_tokens == 220
            assert session.tasks()[-1].usage == outcome.usage
            assert session.inspect().usage == outcome.usage
        finally:
            session.runtime.close()  # type: ignore[attr-defined]

    def test_session_totals_add_up_every_turn(self) -> None:
        """The session's totals are the sum of its turns'."""
        session = _session([_reply("one"), _reply("two")])
        try:
            first = session.run("a", timeout=WAIT)
            second = session.run("b", timeout=WAIT)
            assert first.usage is not None
            assert second.usage is not None
            total = session.inspect().usage
            assert total is not None
            assert total.total_tokens == first.usage.total_tokens + second.usage.total_tokens
        finally:
            session.runtime.close()  # type: ignore[attr-defined]

    def test_inspect_reports_the_context_size_and_window(self) -> None:
        """inspect() gives the next context's tokens (the model's count) and the window."""
        session = _session(["hello there"], context_window=1000)
        try:
            session.run("hi", timeout=WAIT)
            inspection = session.inspect()
            assert inspection.context_window == 1000
            model = session.runtime.agent.model  # type: ignore[attr-defined]
            tools = [t.spec() for t in session.runtime.agent.tools]  # type: ignore[attr-defined]
            assert inspection.context_tokens == model.count_tokens(
                list(inspection.next_context), tools
            )
        finally:
            session.runtime.close()  # type: ignore[attr-defined]


class TestBudgets:
    def test_max_turn_tokens_stops_the_turn_with_the_reason(self) -> None:
        """A turn that used its budget fails at the next step, the reason recorded."""
        script = [_reply(call=nb.ToolCall("look", {"q": str(i)})) for i in range(5)]
        session = _session(script, max_turn_tokens=150)
        try:
            outcome = session.submit("go").wait(timeout=WAIT)
            assert outcome.status == "failed"
            assert outcome.stop_reason == "max_turn_tokens"
            assert "max_turn_tokens=150" in (outcome.error or "")
            assert events_of(session, "run/end")[-1].payload["stop_reason"] == "max_turn_tokens"
            assert len(events_of(session, "model/end")) == 2  # 110 < 150, then 220: stop
        finally:
            session.runtime.close()  # type: ignore[attr-defined]

    def test_max_session_tokens_stops_a_later_turn(self) -> None:
        """The session's budget counts every turn: the turn that finds it used stops."""
        session = _session([_reply("one"), _reply("two"), _reply("three")], max_session_tokens=200)
        try:
            assert session.run("a", timeout=WAIT).status == "completed"
            assert session.run("b", timeout=WAIT).status == "completed"
            third = session.submit("c").wait(timeout=WAIT)
            assert third.status == "failed"
            assert third.stop_reason == "max_session_tokens"
        finally:
            session.runtime.close()  # type: ignore[attr-defined]

    def test_bad_budgets_are_refused(self) -> None:
        """A budget or window that is not a positive int raises InvalidInput."""
        for name in ("max_turn_tokens", "max_session_tokens", "context_window"):
            for bad in [0, -5, 1.5, True, "100"]:
                with pytest.raises(nb.InvalidInput):
                    nb.Agent(name="B", agent_id="b", model=nb.ScriptedModel([]), **{name: bad})


class TestStopReasons:
    def test_each_ending_names_its_reason(self) -> None:
        """final_answer, needs_person, max_steps and error: the code says why a run stopped."""
        session = _session([_reply("done")])
        try:
            assert session.run("a", timeout=WAIT).stop_reason == "final_answer"
        finally:
            session.runtime.close()  # type: ignore[attr-defined]
        session = _session([_reply(call=nb.ToolCall("order", {"item": "desk"}))])
        try:
            assert session.run("b", timeout=WAIT).stop_reason == "needs_person"
        finally:
            session.runtime.close()  # type: ignore[attr-defined]
        loop = [_reply(call=nb.ToolCall("look", {"q": str(i)})) for i in range(5)]
        session = _session(loop, max_steps=2)
        try:
            assert session.run("c", timeout=WAIT).stop_reason == "max_steps"
        finally:
            session.runtime.close()  # type: ignore[attr-defined]
        session = _session([nb.ModelError("boom")])
        try:
            assert session.run("d", timeout=WAIT).stop_reason == "error"
        finally:
            session.runtime.close()  # type: ignore[attr-defined]

    def test_a_time_limit_is_its_own_reason(self) -> None:
        """A task stopped by its time limit says time_limit."""

        @nb.tool
        async def slow() -> str:
            """Sleeps."""
            await asyncio.sleep(30)
            return "late"

        session = _session([nb.ToolCall("slow", {})], tools=[slow], max_turn_seconds=0.2)
        try:
            outcome = session.submit("go").wait(timeout=WAIT)
            assert outcome.status == "interrupted"
            assert outcome.stop_reason == "time_limit"
        finally:
            session.runtime.close()  # type: ignore[attr-defined]


class TestSessionInfo:
    def test_a_listed_session_has_its_usage_totals(self) -> None:
        """runtime.sessions() records give the session's totals, as inspect() does."""
        session = _session([_reply("one"), _reply("two")])
        try:
            session.run("a", timeout=WAIT)
            session.run("b", timeout=WAIT)
            (info,) = session.runtime.sessions()  # type: ignore[attr-defined]
            assert info.usage == session.inspect().usage
            assert info.usage is not None
            assert info.usage.total_tokens == 220
        finally:
            session.runtime.close()  # type: ignore[attr-defined]
