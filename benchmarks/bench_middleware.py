"""What middleware costs a turn, in one run.

The same scripted turns (model -> tool -> model, one session, SQLite) run three ways, in
alternating blocks: with no middleware (the baseline); with one middleware whose four hooks
each record an application event (committed with the run's own commits); and with the same
middleware flushing in ``before_tool`` (one more commit per tool call, the durability the
seed asks for before a side effect). No target: the ratios say what each costs per turn.

Prints a table and one JSON line per metric (``value``, ``baseline``, ``ratio``).

    python benchmarks/bench_middleware.py [--turns 100] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import agentnb as nb

NOTE = "bench.mw/note"


class Recording:
    def __init__(self, flush: bool) -> None:
        self.flush = flush

    def before_model(self, ctx: nb.MiddlewareContext, request: Any) -> None:
        ctx.record(NOTE, {"hook": "before_model"})

    async def after_model(self, ctx: nb.MiddlewareContext, reply: Any) -> None:
        ctx.record(NOTE, {"hook": "after_model"})

    async def before_tool(self, ctx: nb.MiddlewareContext, call: Any) -> None:
        ctx.record(NOTE, {"hook": "before_tool", "tool": call.name})
        if self.flush:
            await ctx.aflush()

    async def after_tool(self, ctx: nb.MiddlewareContext, call: Any, result: Any) -> None:
        ctx.record(NOTE, {"hook": "after_tool", "status": result.status})


@nb.tool
def lookup(plan: str) -> str:
    """Price of a plan."""
    return f"{plan} costs 10 EUR"


def _reply(messages: list[nb.Message]) -> object:
    if messages[-1].role == "user":
        return nb.ToolCall("lookup", {"plan": "A"})
    return f"Answer: {messages[-1].text}"


def per_turn(folder: Path, name: str, middleware: list[object], turns: int) -> float:
    """Seconds per turn of ``turns`` turns in one session with ``middleware``."""
    agent = nb.Agent(
        name="bench",
        agent_id=f"bench-{name}",
        model=nb.ScriptedModel(_reply),
        tools=[lookup],
        middleware=middleware,
    )
    with nb.Runtime(agent, store=f"sqlite:///{folder / (name + '.sqlite')}") as runtime:
        session = runtime.session("s1")
        session.run("warm up", timeout=60)
        started = time.perf_counter()
        for i in range(turns):
            session.run(f"turn {i}", timeout=60)
        return (time.perf_counter() - started) / turns


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    nb.register_event_type(NOTE)
    cases = {
        "bare": list,
        "recording": lambda: [Recording(flush=False)],
        "recording+aflush": lambda: [Recording(flush=True)],
    }
    seconds: dict[str, list[float]] = {name: [] for name in cases}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for name, make in cases.items():
                folder = Path(tmp) / f"{r}"
                folder.mkdir(exist_ok=True)
                seconds[name].append(per_turn(folder, name, make(), args.turns))
    base = statistics.median(seconds["bare"])
    rows = []
    for name in ("recording", "recording+aflush"):
        value = statistics.median(seconds[name])
        rows.append(
            {
                "metric": f"ms per turn, {name} middleware",
                "value": round(value * 1000, 3),
                "baseline": round(base * 1000, 3),
                "ratio": round(value / base, 3),
                "turns": args.turns,
                "rounds": args.rounds,
            }
        )
    print(f"{'metric':<44} {'value':>9} {'baseline':>9} {'ratio':>7}")
    for row in rows:
        print(f"{row['metric']:<44} {row['value']:>9} {row['baseline']:>9} {row['ratio']:>7}")
    for row in rows:
        print(json.dumps(row))


if __name__ == "__main__":
    main()
