"""MCP over streamable HTTP (the test server on a loopback port), and a published server
nobody here wrote (``mcp-server-time`` from PyPI, over stdio)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import agentnb as nb
from tests.mcp.helpers import SERVER, agent, effects, events, task, wait_for

pytest.importorskip("mcp")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def http_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    directory = tmp_path_factory.mktemp("mcp-http")
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, SERVER, "--http", str(port)],
        env={"MCP_TEST_DIR": str(directory), "PATH": "/usr/bin:/bin"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: listening(port) or proc.poll() is not None, what="the HTTP server")
        assert proc.poll() is None, "the test server did not start"
        yield f"http://127.0.0.1:{port}/mcp", directory
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.fixture(scope="module")
def runtime(http_server: tuple[str, Path]) -> Iterator[nb.Runtime]:
    url, _ = http_server
    toolset = nb.mcp.http(url, headers={"X-Test": "agentnb", "Authorization": "Bearer s3cret"})
    with nb.Runtime(agent(toolset, agent_id="mcp-http"), store="memory://") as rt:
        yield rt


class TestStreamableHTTP:
    def test_tools_are_listed_with_their_annotations(self, runtime: nb.Runtime) -> None:
        """Over HTTP too, the server's tools come with idempotent/confirm from annotations."""
        flags = {t.name: (t.idempotent, t.confirm) for t in runtime.agent.tools}
        assert flags["lookup"] == (True, False)
        assert flags["delete_item"] == (False, True)

    def test_a_call_returns_its_result(self, runtime: nb.Runtime) -> None:
        """A tool call over HTTP returns the server's text."""
        session = runtime.session("http-call", user_id="u")
        assert session.run(task("lookup", city="Oslo"), timeout=60).output == (
            "result: sunny in Oslo"
        )

    def test_headers_go_with_every_request(self, runtime: nb.Runtime) -> None:
        """The headers given to mcp.http reach the server with the call, and not the log."""
        session = runtime.session("http-headers", user_id="u")
        outcome = session.run(task("header", name="X-Test"), timeout=60)
        assert outcome.output == "result: agentnb"
        assert all("s3cret" not in str(e.payload) for e in session.log.scan(0, None))

    def test_progress_arrives_over_http(self, runtime: nb.Runtime) -> None:
        """Progress notifications over HTTP become tool/chunk events."""
        session = runtime.session("http-progress", user_id="u")
        session.run(task("slow_read", label="h", seconds=0.1), timeout=60)
        assert [c["data"]["message"] for c in events(session, "tool/chunk")] == [
            "started",
            "half way",
        ]

    def test_elicitation_over_http_is_asked_and_answered(
        self, runtime: nb.Runtime, http_server: tuple[str, Path]
    ) -> None:
        """A question from an HTTP server becomes a request; the answer completes the call."""
        _, directory = http_server
        session = runtime.session("http-ask", user_id="u")
        assert session.run(task("book", table="3"), timeout=60).status == "suspended"
        (request_id,) = session.pending()
        outcome = session.respond(request_id, "yes").wait(60)
        assert outcome.output == "result: booked table 3"
        assert effects(directory).count("book 3") == 1

    def test_an_unreachable_url_is_a_typed_error(self) -> None:
        """A URL nobody answers raises ToolsetUnavailable naming it."""
        url = f"http://127.0.0.1:{free_port()}/mcp"
        with pytest.raises(nb.ToolsetUnavailable, match="would not start"):
            nb.Runtime(agent(nb.mcp.http(url, start_timeout=10)), store="memory://")


class TestPublishedServer:
    @pytest.fixture(scope="class")
    @classmethod
    def time_runtime(cls) -> Iterator[nb.Runtime]:
        pytest.importorskip("mcp_server_time")
        toolset = nb.mcp.stdio(
            sys.executable, ["-m", "mcp_server_time", "--local-timezone", "UTC"], prefix="time_"
        )
        with nb.Runtime(agent(toolset, agent_id="mcp-time"), store="memory://") as rt:
            yield rt

    def test_its_tools_are_offered(self, time_runtime: nb.Runtime) -> None:
        """mcp-server-time's tools are listed (prefixed), read-only ones idempotent."""
        tools = {t.name: t for t in time_runtime.agent.tools}
        assert {"time_get_current_time", "time_convert_time"} <= set(tools)
        assert tools["time_get_current_time"].idempotent

    def test_a_call_answers_from_the_server(self, time_runtime: nb.Runtime) -> None:
        """Converting a time through the published server returns its structured answer."""
        session = time_runtime.session("time", user_id="u")
        arguments = {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}
        outcome = session.run(task("time_convert_time", **arguments), timeout=60)
        assert outcome.status == "completed"
        answer = json.loads((outcome.output or "").removeprefix("result: "))
        assert answer["target"]["timezone"] == "Asia/Tokyo"
        assert answer["target"]["datetime"].endswith("T21:00:00+09:00")
