"""MCP toolsets over stdio: the test server (tests/mcp/server.py) as a real subprocess.

One runtime (one server process) serves the module; each test uses its own session.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import agentnb as nb
from tests.mcp.helpers import agent, effects, events, server_toolset, task, wait_for

pytest.importorskip("mcp")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mcp")


@pytest.fixture(scope="module")
def store_url(workdir: Path) -> str:
    return f"sqlite:///{workdir / 'agentnb.sqlite'}"


@pytest.fixture(scope="module")
def runtime(workdir: Path, store_url: str) -> Iterator[nb.Runtime]:
    with nb.Runtime(agent(server_toolset(workdir)), store=store_url) as rt:
        yield rt


@pytest.fixture
def session(runtime: nb.Runtime, request: pytest.FixtureRequest) -> nb.Session:
    return runtime.session(request.node.name[:60].replace("[", "-").strip("]"), user_id="u")


def run(session: nb.Session, tool_name: str, **arguments: object) -> nb.Outcome:
    return session.run(task(tool_name, **arguments), timeout=60)


class TestListing:
    def test_server_tools_enter_the_fingerprint(self, runtime: nb.Runtime) -> None:
        """The server's tools, with their input schemas, are in the agent's fingerprint."""
        tools = runtime.agent.fingerprint["tools"]
        assert {"lookup", "delete_item", "slow_read", "book"} <= set(tools)
        assert tools["lookup"]["properties"]["city"]["type"] == "string"
        assert list(tools["lookup"]["required"]) == ["city"]

    def test_annotations_decide_idempotent_and_confirm(self, runtime: nb.Runtime) -> None:
        """readOnlyHint/idempotentHint make a tool idempotent; destructiveHint asks first."""
        flags = {t.name: (t.idempotent, t.confirm) for t in runtime.agent.tools}
        assert flags["lookup"] == (True, False)
        assert flags["set_flag"] == (True, False)
        assert flags["delete_item"] == (False, True)
        assert flags["append_note"] == (False, False)

    def test_names_a_model_cannot_take_are_made_safe(self, session: nb.Session) -> None:
        """A server tool named notes.count is offered as notes_count and calls the original."""
        outcome = run(session, "notes_count")
        assert outcome.status == "completed"
        assert outcome.output is not None
        assert outcome.output.removeprefix("result: ").isdigit()

    def test_a_changed_tool_list_is_an_agent_change(
        self, runtime: nb.Runtime, session: nb.Session, workdir: Path, store_url: str
    ) -> None:
        """A session bound to the server's tools refuses new work when the tools differ."""
        assert run(session, "lookup", city="Oslo").status == "completed"
        fewer = agent(server_toolset(workdir, exclude=["delete_item"]))
        with nb.Runtime(fewer, store=store_url) as other:
            again = other.open(session.key.session_id, user_id="u")
            with pytest.raises(nb.AgentChanged, match="tools removed: delete_item"):
                again.submit(task("lookup", city="Bergen"))

    def test_a_server_that_will_not_start_is_a_typed_error(self) -> None:
        """A server that exits at once raises ToolsetUnavailable with its stderr."""
        broken = nb.mcp.stdio(
            sys.executable, ["-c", "import sys; print('no config file', file=sys.stderr); exit(3)"]
        )
        with pytest.raises(nb.ToolsetUnavailable, match="no config file"):
            nb.Runtime(agent(broken), store="memory://")

    def test_a_tool_listed_twice_is_refused(self, workdir: Path) -> None:
        """A server tool whose name is taken is refused, naming prefix= as the way out."""

        @nb.tool
        def lookup(city: str) -> str:
            """A local lookup."""
            return city

        with pytest.raises(nb.InvalidInput, match="prefix="):
            nb.Runtime(agent(lookup, server_toolset(workdir)), store="memory://")

    def test_bad_options_are_refused(self) -> None:
        """Options of the wrong shape raise InvalidInput before anything starts."""
        with pytest.raises(nb.InvalidInput):
            nb.mcp.stdio("")
        with pytest.raises(nb.InvalidInput):
            nb.mcp.stdio("server", "one-string")  # type: ignore[arg-type]
        with pytest.raises(nb.InvalidInput):
            nb.mcp.stdio("server", include="lookup")  # type: ignore[arg-type]
        with pytest.raises(nb.InvalidInput):
            nb.mcp.stdio("server", confirm={"x": "yes"})  # type: ignore[dict-item]
        with pytest.raises(nb.InvalidInput):
            nb.mcp.http("localhost:8000")

    def test_an_unopened_agent_has_no_fingerprint(self, workdir: Path) -> None:
        """An agent whose toolsets are not open refuses to give a partial fingerprint."""
        with pytest.raises(nb.InvalidInput, match="Runtime opens them"):
            _ = agent(server_toolset(workdir)).fingerprint


@pytest.fixture(scope="module")
def filtered(workdir: Path) -> Iterator[nb.Runtime]:
    toolset = server_toolset(
        workdir,
        include=["lookup", "delete_item"],
        prefix="t_",
        confirm={"delete_item": False},
        idempotent={"lookup": False},
    )
    with nb.Runtime(agent(toolset), store="memory://") as rt:
        yield rt


class TestFilters:
    def test_include_and_prefix_pick_and_rename(self, filtered: nb.Runtime) -> None:
        """include= picks server tools and prefix= goes before the names the model sees."""
        assert sorted(t.name for t in filtered.agent.tools) == ["t_delete_item", "t_lookup"]

    def test_overrides_win_over_annotations(self, filtered: nb.Runtime) -> None:
        """confirm= and idempotent= override what the server's annotations say."""
        flags = {t.name: (t.idempotent, t.confirm) for t in filtered.agent.tools}
        assert flags == {"t_lookup": (False, False), "t_delete_item": (False, False)}

    def test_prefixed_tools_call_the_server_names(self, filtered: nb.Runtime) -> None:
        """A prefixed tool calls the server's tool by its own name."""
        session = filtered.session("prefixed", user_id="u")
        outcome = session.run(task("t_lookup", city="Oslo"), timeout=60)
        assert outcome.output == "result: sunny in Oslo"

    def test_including_an_unknown_tool_is_a_typed_error(self, workdir: Path) -> None:
        """include= of a tool the server does not list names what it does list."""
        toolset = server_toolset(workdir, include=["lookup", "nope"])
        with pytest.raises(nb.ToolsetUnavailable, match="no tools named nope"):
            nb.Runtime(agent(toolset), store="memory://")


class TestCalls:
    def test_text_output_is_the_result(self, session: nb.Session) -> None:
        """A text result becomes the tool's result, after tool/dispatch was committed."""
        assert run(session, "lookup", city="Oslo").output == "result: sunny in Oslo"
        types = [e.type for e in session.log.scan(0, None)]
        assert types.index("tool/dispatch") < types.index("tool/result")

    def test_structured_output_is_json(self, session: nb.Session) -> None:
        """Structured content reaches the model as JSON."""
        assert run(session, "forecast", city="Oslo").output == (
            'result: {\n  "city": "Oslo",\n  "celsius": 21\n}'
        )

    def test_images_are_kept_as_content_events(self, session: nb.Session) -> None:
        """An image is recorded as an mcp/content event and named in the result."""
        outcome = run(session, "picture")
        assert "image image/png" in (outcome.output or "")
        (content,) = events(session, "mcp/content")
        assert content["mime_type"] == "image/png"
        assert content["bytes"] == 70

    def test_a_tool_error_is_the_tool_result(self, session: nb.Session) -> None:
        """A result marked isError becomes an error result the model reads; the turn goes on."""
        outcome = run(session, "broken")
        assert outcome.status == "completed"
        (result,) = events(session, "tool/result")
        assert result["status"] == "error"
        assert "the weather service is down" in result["output"]

    def test_progress_becomes_tool_chunks(self, session: nb.Session) -> None:
        """Progress notifications are recorded as tool/chunk events of the call."""
        run(session, "slow_read", label="progress", seconds=0.1)
        chunks = [c["data"] for c in events(session, "tool/chunk")]
        assert chunks == [
            {"progress": 0.0, "total": 2.0, "message": "started"},
            {"progress": 1.0, "total": 2.0, "message": "half way"},
        ]

    def test_arguments_that_break_the_schema_go_back_to_the_model(
        self, session: nb.Session, workdir: Path
    ) -> None:
        """Arguments that violate the input schema are refused with the reason, unsent."""
        outcome = run(session, "append_note", text=5)
        assert "5 is not of type 'string'" in (outcome.output or "")
        assert events(session, "tool/dispatch") == []
        assert "append_note 5" not in effects(workdir)

    def test_destructive_tools_ask_for_approval(self, session: nb.Session, workdir: Path) -> None:
        """A destructiveHint tool waits for approval, then runs once approved."""
        outcome = run(session, "delete_item", item="cart-1")
        assert outcome.status == "suspended"
        ((request_id, request),) = session.pending().items()
        assert request.kind == "confirmation"
        assert session.respond(request_id, True).wait(60).output == "result: deleted cart-1"
        assert effects(workdir).count("delete_item cart-1") == 1

    def test_an_interrupt_cancels_the_call_on_the_server(
        self, session: nb.Session, workdir: Path
    ) -> None:
        """Interrupting a running MCP call sends MCP cancellation: the server stops it."""
        receipt = session.submit(task("slow_read", label="interrupted", seconds=60))
        wait_for((workdir / "started-interrupted").exists, what="the call to start")
        assert session.interrupt()
        assert receipt.wait(30).status == "interrupted"
        wait_for((workdir / "cancelled-interrupted").exists, what="the server's cancel")

    def test_a_vanished_tool_is_an_error_for_the_model(self, session: nb.Session) -> None:
        """A tool the server no longer has fails its call with the server's reason."""
        assert "retired ephemeral" in (run(session, "retire", name="ephemeral").output or "")
        outcome = run(session, "ephemeral")
        assert outcome.status == "completed"
        assert "ephemeral" in (outcome.output or "")
        assert events(session, "tool/result")[-1]["status"] == "error"


class TestElicitation:
    def test_a_question_from_the_server_is_an_ask_user_request(self, session: nb.Session) -> None:
        """The server's elicitation suspends the turn with an ask_user request for it."""
        outcome = run(session, "book", table="7")
        assert outcome.status == "suspended"
        ((request_id, request),) = session.pending().items()
        assert request.kind == "ask_user"
        assert request.tool_name == "book"
        assert request.prompt.startswith("Book table 7?")
        assert request_id.startswith(request.call_id)

    def test_the_answer_runs_the_call_again_and_answers_it(
        self, session: nb.Session, workdir: Path
    ) -> None:
        """respond() re-asks the call; the server gets the recorded answer and goes on."""
        run(session, "book", table="8")
        (request_id,) = session.pending()
        assert session.respond(request_id, "yes").wait(60).output == "result: booked table 8"
        assert effects(workdir).count("book 8") == 1
        assert [d["attempt"] for d in events(session, "tool/dispatch")] == [1, 2]
        assert session.inspect().uncertain_tool_calls == ()

    def test_a_declined_question_tells_the_server(self, session: nb.Session) -> None:
        """Answer.reject declines the elicitation; the server decides what that means."""
        run(session, "book", table="9")
        (request_id,) = session.pending()
        outcome = session.respond(request_id, nb.Answer.reject("not tonight")).wait(60)
        assert outcome.output is not None
        assert "booked table 9" not in outcome.output

    def test_an_answer_that_does_not_fit_fails_the_call(self, session: nb.Session) -> None:
        """An answer the server's form cannot take is a tool error saying why."""
        run(session, "book", table="10")
        (request_id,) = session.pending()
        outcome = session.respond(request_id, "maybe").wait(60)
        assert "confirm takes yes or no" in (outcome.output or "")

    def test_a_waiting_call_is_not_uncertain(self, session: nb.Session) -> None:
        """A call stopped at a question is not listed as uncertain while it waits."""
        run(session, "book", table="11")
        assert session.inspect().uncertain_tool_calls == ()


class TestServerLife:
    def test_stderr_goes_to_the_logger_not_the_log(
        self, runtime: nb.Runtime, session: nb.Session, caplog: pytest.LogCaptureFixture
    ) -> None:
        """What the server writes to stderr reaches the agentnb.mcp logger, never the log."""
        with caplog.at_level(logging.INFO, logger="agentnb.mcp"):
            pid = int(run(session, "whoami").output.split()[-1])  # type: ignore[union-attr]
            wait_for(
                lambda: any(f"whoami called in {pid}" in r.getMessage() for r in caplog.records),
                what="the server's stderr line",
            )
        assert all("whoami called" not in str(e.payload) for e in session.log.scan(0, None))
