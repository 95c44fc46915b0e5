"""End to end into Arize Phoenix, started here on loopback: its spans agree with agentnb's own
``turns``, ``tool_calls`` and ``model_calls`` frames.

Opt-in: ``arize-phoenix`` is a large install (about 850 MB and over two minutes of pip on the
project's machines), so CI does not install it. Set ``AGENTNB_PHOENIX`` to the Python of an
environment that has it (``python -m venv /tmp/phx && /tmp/phx/bin/pip install arize-phoenix``,
then ``AGENTNB_PHOENIX=/tmp/phx/bin/python``) to run this test.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import agentnb as nb
from agentnb import analysis
from agentnb.export import Exporter

PHOENIX = os.environ.get("AGENTNB_PHOENIX")
pytestmark = pytest.mark.skipif(
    not PHOENIX, reason="set AGENTNB_PHOENIX to a Python with arize-phoenix (opt-in, heavy)"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    import httpx

    work = tmp_path_factory.mktemp("phoenix")
    port = free_port()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(work),
        "PHOENIX_WORKING_DIR": str(work),
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(free_port()),
        "PHOENIX_TELEMETRY_ENABLED": "false",
    }
    log = (work / "phoenix.log").open("w")
    proc = subprocess.Popen(
        [str(PHOENIX), "-m", "phoenix.server.main", "serve"], env=env, stdout=log, stderr=log
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, (work / "phoenix.log").read_text()[-2000:]
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "Phoenix did not start"
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()


@nb.tool
def lookup_price(plan: str) -> str:
    """The price of a plan.

    Args:
        plan: basic or pro
    """
    time.sleep(0.02)
    return {"basic": "$5", "pro": "$10"}.get(plan, "unknown")


def phoenix_spans(url: str, expected: int) -> list[dict[str, Any]]:
    import httpx

    deadline = time.monotonic() + 30
    while True:
        data = httpx.get(f"{url}/v1/projects/default/spans", params={"limit": 1000}).json()
        spans: list[dict[str, Any]] = data["data"]
        if len(spans) >= expected or time.monotonic() > deadline:
            return spans
        time.sleep(0.2)


def ms(span: dict[str, Any]) -> float:
    from datetime import datetime

    start = datetime.fromisoformat(span["start_time"])
    end = datetime.fromisoformat(span["end_time"])
    return (end - start).total_seconds() * 1000


def test_phoenix_spans_agree_with_the_frames(phoenix: str, tmp_path: Path) -> None:
    """Traces, tool calls, durations and tokens in Phoenix match agentnb's dataframes."""
    from agentnb.export.otel import otlp_sink

    model = nb.ScriptedModel(
        [
            nb.ToolCall("lookup_price", {"plan": "pro"}),
            "Pro is $10.",
            nb.Reply(
                tool_calls=[nb.ToolCall("lookup_price", {"plan": p}) for p in ("basic", "pro")]
            ),
            "Basic $5, pro $10.",
        ]
    )
    agent = nb.Agent(name="Cost", agent_id="cost", model=model, tools=[lookup_price])
    with nb.Runtime(agent, store=f"sqlite:///{tmp_path / 'a.sqlite'}") as runtime:
        session = runtime.session("phoenix", user_id="u")
        session.run("pro?", timeout=30)
        session.run("both?", timeout=30)
        sink = otlp_sink(phoenix)
        Exporter(runtime.store, sink).drain()
        sink.shutdown()
        turns = analysis.turns(runtime.store)
        tools = analysis.tool_calls(runtime.store)
        models = analysis.model_calls(runtime.store)

    spans = phoenix_spans(phoenix, expected=len(turns) + len(tools) + len(models))
    runs = [s for s in spans if s["name"].startswith("invoke_agent")]
    executes = [s for s in spans if s["name"].startswith("execute_tool")]
    chats = [s for s in spans if s["name"].startswith("chat")]
    assert len({s["context"]["trace_id"] for s in runs}) == len(turns)
    assert len(executes) == len(tools)
    assert len(chats) == len(models)
    by_call = {s["attributes"]["gen_ai.tool.call.id"]: s for s in executes}
    for call in tools.itertuples():
        span = by_call[call.call_id]
        assert span["attributes"]["agentnb.tool.status"] == call.status
        # The span runs from tool/dispatch to tool/result; the frame's duration is the
        # tool's own time inside that, so the span is never shorter.
        assert ms(span) >= call.duration_ms - 1
    tokens = sum(s["attributes"].get("gen_ai.usage.input_tokens", 0) for s in chats)
    assert tokens == int(turns["input_tokens"].sum())
    out_tokens = sum(s["attributes"].get("gen_ai.usage.output_tokens", 0) for s in chats)
    assert out_tokens == int(turns["output_tokens"].sum())
