"""MCP benchmark: a tool call through an MCP server over stdio vs the same Python function as
a plain tool.

Run with ``make bench`` or ``python benchmarks/bench_mcp.py [--quick] [--calls N]``. Prints
the environment, a table, then one JSON line per metric with the keys ``metric``, ``value``,
``baseline``, ``ratio``, ``unit``, ``target`` and ``ok`` (and ``extra_ms``).

``mcp_call_in_a_turn``
    Milliseconds per tool call inside real turns: a scripted model asks for 20 calls of
    ``add(a, b)`` in one reply, the runtime commits each ``tool/dispatch`` before the call
    and records each result (in-memory store, so the store's fsync does not drown the
    difference), N calls in all. One side calls the function as an ``@nb.tool``; the other
    calls the same function served by an ``MCPServer`` (the official SDK) in a subprocess
    over stdio. Target: at most 2 ms extra per call.
``mcp_invoke``
    Milliseconds per ``Tool.invoke`` alone (validation, the call, the result as text), on the
    runtime's loop, without the log: the adapter's and the protocol's own cost. Target: at
    most 2 ms extra per call.
``mcp_adapter_over_sdk`` (for information, no target)
    ``Tool.invoke`` of the MCP tool against the SDK alone (``mcp.Client.call_tool`` in a loop,
    no agentnb): what agentnb's adapter adds to the protocol's round trip.

The cross-process round trip is sensitive to the machine's load (a busy scheduler delays the
hop to the server and back); the header prints the load average.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

import agentnb as nb
from agentnb.tools import ToolContext

SERVER = '''
from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("bench")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


if __name__ == "__main__":
    server.run()
'''
PER_REPLY = 20


def add(a: int, b: int) -> int:
    """Add two numbers.

    Args:
        a: one number
        b: another
    """
    return a + b


def script(messages: list[Any]) -> Any:
    if messages[-1].role == "tool":
        return "done"
    return nb.Reply(tool_calls=[nb.ToolCall("add", {"a": i, "b": 1}) for i in range(PER_REPLY)])


def per_call_in_turns(tools: list[Any], calls: int) -> float:
    """Milliseconds per tool call over turns of ``PER_REPLY`` calls (median of turns)."""
    agent = nb.Agent(name="B", agent_id="bench", model=nb.ScriptedModel(script), tools=tools)
    with nb.Runtime(agent, store="memory://") as runtime:
        session = runtime.session("bench", user_id="u")
        session.run("warm up", timeout=120)
        times = []
        for i in range(max(1, calls // PER_REPLY)):
            t = time.perf_counter()
            outcome = session.run(f"turn {i}", timeout=120)
            times.append((time.perf_counter() - t) * 1000 / PER_REPLY)
            assert outcome.status == "completed", outcome
    return statistics.median(times)


def per_invoke(tools: list[Any], calls: int) -> float:
    """Milliseconds per ``Tool.invoke`` on the runtime's loop (median of rounds of 50)."""
    agent = nb.Agent(name="B", agent_id="bench", model=nb.ScriptedModel(["x"]), tools=tools)
    with nb.Runtime(agent, store="memory://") as runtime:
        tool = runtime.agent.tool_named("add")
        assert tool is not None
        ctx = ToolContext(
            nb.SessionKey("n", "u", "bench", "s"), "t", "r", "c", lambda *a: None, lambda d: None
        )

        async def rounds() -> list[float]:
            out = []
            for _ in range(max(1, calls // 50)):
                t = time.perf_counter()
                for i in range(50):
                    assert (await tool.invoke({"a": i, "b": 1}, ctx)) == str(i + 1)
                out.append((time.perf_counter() - t) * 1000 / 50)
            return out

        loop = runtime._loop
        times = asyncio.run_coroutine_threadsafe(rounds(), loop).result()
    return statistics.median(times)


def sdk_floor(server: Path, calls: int) -> float:
    """Milliseconds per ``mcp.Client.call_tool`` of the same server, no agentnb at all."""
    from mcp import Client, StdioServerParameters

    async def run() -> float:
        params = StdioServerParameters(command=sys.executable, args=[str(server)])
        async with Client(params) as client:
            for i in range(20):
                await client.call_tool("add", {"a": i, "b": 1})
            times = []
            for _ in range(max(1, calls // 50)):
                t = time.perf_counter()
                for i in range(50):
                    await client.call_tool("add", {"a": i, "b": 1})
                times.append((time.perf_counter() - t) * 1000 / 50)
            return statistics.median(times)

    return asyncio.run(run())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="200 calls instead of 2,000")
    parser.add_argument("--calls", type=int, default=None, help="tool calls per side")
    args = parser.parse_args(argv)
    calls = args.calls or (200 if args.quick else 2_000)

    tmp = Path(tempfile.mkdtemp(prefix="agentnb-bench-mcp-"))
    try:
        (tmp / "server.py").write_text(SERVER)
        print(f"python {platform.python_version()} on {platform.platform()}; mcp {version('mcp')}")
        load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
        print(f"{calls:,} calls per side, {PER_REPLY} per model reply; load average {load}")
        plain = [nb.tool(add)]

        def served() -> list[Any]:
            return [nb.mcp.stdio(sys.executable, [str(tmp / "server.py")])]

        metrics = []
        mcp_turn, plain_turn = per_call_in_turns(served(), calls), per_call_in_turns(plain, calls)
        metrics.append(("mcp_call_in_a_turn", mcp_turn, plain_turn))
        mcp_invoke, plain_invoke = per_invoke(served(), calls), per_invoke(plain, calls)
        metrics.append(("mcp_invoke", mcp_invoke, plain_invoke))
        floor = sdk_floor(tmp / "server.py", calls)

        print(f"\n{'metric':<22} {'mcp':>9} {'baseline':>9} {'extra':>9} {'target':>10}")
        rows = [(*m, "plain tool", 2.0) for m in metrics]
        rows.append(("mcp_adapter_over_sdk", mcp_invoke, floor, "SDK alone", None))
        for name, value, base, what, target in rows:
            goal = "-" if target is None else f"<= {target:g} ms"
            print(f"{name:<22} {value:>7.3f}ms {base:>7.3f}ms {value - base:>7.3f}ms "
                  f"{goal:>10}  baseline: {what}")  # fmt: skip
        for name, value, base, _, target in rows:
            print(json.dumps({
                "metric": name, "value": round(value, 4), "baseline": round(base, 4),
                "ratio": round(value / base, 3), "unit": "ms", "extra_ms": round(value - base, 4),
                "target": None if target is None else f"extra <= {target:g} ms",
                "ok": None if target is None else value - base <= target,
            }))  # fmt: skip
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
