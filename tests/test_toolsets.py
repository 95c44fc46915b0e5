"""The generic parts MCP stands on: Toolset (opened and closed by the runtime), Tool.from_schema,
ctx.ask (a question in the middle of a call) and ToolOutcomeUnknown."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import agentnb as nb
from agentnb.tools import InvalidToolArguments, OpenToolset, ToolContext, ToolOutcomeUnknown


class CountingToolset(nb.Toolset):
    """A toolset with one schema tool, counting opens and closes."""

    def __init__(self, fail: bool = False) -> None:
        self.opened = 0
        self.closed = 0
        self.fail = fail

    @property
    def label(self) -> str:
        return "counting toolset"

    async def open(self) -> OpenToolset:
        if self.fail:
            raise nb.ToolsetUnavailable("counting toolset would not start", toolset="counting")
        self.opened += 1

        async def call(arguments: dict[str, Any], ctx: ToolContext) -> str:
            return f"echo {arguments['word']}"

        def check(arguments: dict[str, Any]) -> None:
            if not isinstance(arguments.get("word"), str):
                raise InvalidToolArguments("word must be a string", tool_name="echo")

        schema = {"type": "object", "properties": {"word": {"type": "string"}}}
        tool = nb.Tool.from_schema("echo", "Echo a word.", schema, call, check=check)

        async def close() -> None:
            self.closed += 1

        return OpenToolset(tools=(tool,), close=close)


def agent(*tools: Any, script: Any = None) -> nb.Agent:
    model = nb.ScriptedModel(script or [nb.ToolCall("echo", {"word": "hi"}), "done"])
    return nb.Agent(name="T", agent_id="t", model=model, tools=list(tools))


class TestToolsets:
    def test_the_runtime_opens_and_closes_each_toolset_once(self) -> None:
        """A runtime opens its agent's toolsets when made and closes them at close()."""
        toolset = CountingToolset()
        runtime = nb.Runtime(agent(toolset), store="memory://")
        assert (toolset.opened, toolset.closed) == (1, 0)
        assert runtime.session("s", user_id="u").run("go", timeout=30).output == "done"
        runtime.close()
        assert (toolset.opened, toolset.closed) == (1, 1)

    def test_a_sub_agents_toolsets_are_opened_and_its_child_session_uses_them(self) -> None:
        """A sub-agent whose agent has a toolset runs its child with the toolset's tools, and
        the runtime closes that toolset too."""
        toolset = CountingToolset()
        helper = nb.Agent(
            name="Helper",
            agent_id="helper",
            model=nb.ScriptedModel([nb.ToolCall("echo", {"word": "deep"}), "helped"]),
            tools=[toolset],
        )
        boss = nb.Agent(
            name="Boss",
            agent_id="boss",
            model=nb.ScriptedModel([nb.ToolCall("helper", {"task": "echo"}), "done"]),
            tools=[nb.subagent(helper)],
        )
        runtime = nb.Runtime(boss, store="memory://")
        try:
            assert toolset.opened == 1
            parent = runtime.session("s", user_id="u")
            assert parent.run("go", timeout=30).output == "done"
            (child,) = parent.children()
            results = [e for e in parent.child(child.call_id).log.scan() if e.type == "tool/result"]
            assert [e.payload["output"] for e in results] == ["echo deep"]
        finally:
            runtime.close()
        assert toolset.closed == 1

    def test_listed_tools_enter_the_fingerprint(self) -> None:
        """The opened toolset's tools are in runtime.agent's fingerprint."""
        with nb.Runtime(agent(CountingToolset()), store="memory://") as runtime:
            assert set(runtime.agent.fingerprint["tools"]) == {"echo"}

    def test_a_toolset_that_fails_to_open_fails_the_runtime(self) -> None:
        """ToolsetUnavailable from open() rises from Runtime(); what opened is closed."""
        good = CountingToolset()
        with pytest.raises(nb.ToolsetUnavailable, match="would not start"):
            nb.Runtime(agent(good, CountingToolset(fail=True)), store="memory://")
        assert (good.opened, good.closed) == (1, 1)

    def test_schema_tools_check_their_arguments(self) -> None:
        """A from_schema tool's check() refuses bad arguments before the call."""
        model_script = [nb.ToolCall("echo", {"word": 3}), "done"]
        toolset = CountingToolset()
        with nb.Runtime(agent(toolset, script=model_script), store="memory://") as runtime:
            session = runtime.session("s", user_id="u")
            session.run("go", timeout=30)
            decisions = [e.payload for e in session.log.scan(0, None) if e.type == "tool/decision"]
            assert decisions[0]["decision"] == "denied"
            assert "word must be a string" in decisions[0]["reason"]

    def test_tools_must_be_a_list(self) -> None:
        """Passing one toolset instead of a list is refused with InvalidInput."""
        with pytest.raises(nb.InvalidInput, match="list"):
            nb.Agent(name="T", agent_id="t", model=nb.ScriptedModel(["x"]), tools=CountingToolset())  # type: ignore[arg-type]


runs: list[str] = []


@nb.tool
def book(table: str, ctx: nb.ToolContext) -> str:
    """Book a table after asking.

    Args:
        table: which table
    """
    runs.append(table)
    answer = ctx.ask(f"Book table {table}?")
    if answer.kind == "reject":
        return f"not booked: {answer.reason}"
    return f"booked {table}: {answer.text}"


@nb.tool
def lost() -> str:
    """Its effect is unknown."""
    raise ToolOutcomeUnknown("the payment service hung up")


def asker(messages: list[Any]) -> Any:
    if messages[-1].role == "tool":
        return f"result: {messages[-1].text}"
    if messages[-1].text.startswith("book"):
        return nb.ToolCall("book", {"table": "4"})
    return nb.ToolCall("lost")


@pytest.fixture
def runtime(tmp_path: Path) -> Any:
    runs.clear()
    tools_agent = nb.Agent(
        name="A", agent_id="a", model=nb.ScriptedModel(asker), tools=[book, lost, nb.ask_user]
    )
    with nb.Runtime(tools_agent, store=f"sqlite:///{tmp_path / 'a.sqlite'}") as rt:
        yield rt


class TestAskMidCall:
    def test_a_question_suspends_the_turn(self, runtime: nb.Runtime) -> None:
        """ctx.ask stops the call and suspends the turn with an ask_user request."""
        session = runtime.session("s", user_id="u")
        assert session.run("book", timeout=30).status == "suspended"
        ((request_id, request),) = session.pending().items()
        assert request.kind == "ask_user"
        assert request.prompt == "Book table 4?"
        assert request_id.startswith(request.call_id)

    def test_the_answer_re_runs_the_call_which_gets_it(self, runtime: nb.Runtime) -> None:
        """Answering runs the call again; ask() then returns the answer at once."""
        session = runtime.session("s", user_id="u")
        session.run("book", timeout=30)
        (request_id,) = session.pending()
        outcome = session.respond(request_id, "for two").wait(30)
        assert outcome.output == "result: booked 4: for two"
        assert runs == ["4", "4"]

    def test_a_declined_question_reaches_the_tool(self, runtime: nb.Runtime) -> None:
        """Answer.reject(reason) makes ask() return a reject answer."""
        session = runtime.session("s", user_id="u")
        session.run("book", timeout=30)
        (request_id,) = session.pending()
        outcome = session.respond(request_id, nb.Answer.reject("full")).wait(30)
        assert outcome.output == "result: not booked: full"

    def test_ask_without_a_runtime_is_refused(self) -> None:
        """A ToolContext built by hand cannot ask."""
        ctx = ToolContext(
            nb.SessionKey("n", "u", "a", "s"), "t", "r", "c", lambda *a: None, lambda d: None
        )
        with pytest.raises(nb.InvalidInput, match="cannot ask"):
            ctx.ask("well?")

    def test_the_builtin_ask_user_can_be_declined(self, tmp_path: Path) -> None:
        """nb.ask_user takes Answer.reject(reason); the model reads that it was declined."""
        model = nb.ScriptedModel([nb.ToolCall("ask_user", {"question": "Budget?"}), "ok"])
        a = nb.Agent(name="Q", agent_id="q", model=model, tools=[nb.ask_user])
        with nb.Runtime(a, store="memory://") as rt:
            session = rt.session("s", user_id="u")
            session.run("go", timeout=30)
            (request_id,) = session.pending()
            session.respond(request_id, nb.Answer.reject("private")).wait(30)
            (result,) = [e.payload for e in session.log.scan(0, None) if e.type == "tool/result"]
            assert result["output"] == "The user declined to answer: private"


class TestOutcomeUnknown:
    def test_the_call_is_left_uncertain_and_the_run_stops(self, runtime: nb.Runtime) -> None:
        """ToolOutcomeUnknown records no result: the call is uncertain, the run interrupted."""
        session = runtime.session("s", user_id="u")
        outcome = session.run("lost", timeout=30)
        assert outcome.status == "interrupted"
        assert outcome.stop_reason == "tool_outcome_unknown"
        assert "the payment service hung up" in (outcome.error or "")
        (call,) = session.inspect().uncertain_tool_calls
        assert call.tool_name == "lost"
        with pytest.raises(nb.UncertainToolCalls):
            session.resume(outcome.turn_id)
