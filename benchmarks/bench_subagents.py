"""What does delegating to a sub-agent cost, and what does fanning out buy? In one run.

One runtime, the default SQLite store (WAL, ``synchronous=FULL``), scripted models. The child
agent's work is one tool that waits on I/O (``asyncio.sleep``) for ``--work`` seconds, then
answers. Measured side by side:

* **call overhead**: a turn whose model calls the sub-agent (a child session: created,
  linked, its task submitted, run under its own lease, its answer recorded in the parent)
  vs a turn whose model calls the same tool itself (target: <= 1.5x the wall time per turn,
  with a child whose work takes ``--work`` = 0.1 s); the extra milliseconds per call are
  printed too: they are what delegating costs whatever the work (mostly the child's own
  durable commits: its catalogue record, link, task, lease and run, each an fsync), so the
  ratio falls as the work grows;
* **fan-out**: one step calling the sub-agent 16 times at once vs 16 steps calling it one
  after another, tools waiting on I/O for ``--fan-work`` seconds (target: >= 3x children/s).

Rounds alternate the two sides of each comparison; the median round is reported.

    python benchmarks/bench_subagents.py [--turns 30] [--work 0.1] [--children 16]
                                         [--fan-work 0.2] [--rounds 3] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import agentnb as nb


def child_agent(seconds: float) -> nb.Agent:
    """The sub-agent: one tool that waits on I/O, then its answer."""

    @nb.tool
    async def work(part: str) -> str:
        """Wait on I/O for a while (the work)."""
        await asyncio.sleep(seconds)
        return f"worked on {part}"

    def script(messages: list[nb.Message]) -> Any:
        if messages[-1].role == "tool":
            return f"done: {messages[-1].text}"
        return nb.ToolCall("work", {"part": "it"})

    return nb.Agent(name="Worker", agent_id="worker", model=nb.ScriptedModel(script), tools=[work])


def delegating(seconds: float) -> nb.Agent:
    """A turn: the model calls the sub-agent once, then answers."""
    child = child_agent(seconds)

    def script(messages: list[nb.Message]) -> Any:
        return "ok" if messages[-1].role == "tool" else nb.ToolCall("worker", {"task": "do it"})

    return nb.Agent(
        name="Boss", agent_id="boss", model=nb.ScriptedModel(script), tools=[child.as_tool()]
    )


def doing_it_itself(seconds: float) -> nb.Agent:
    """The same work as a plain tool of the parent: the model calls it, then answers."""
    child = child_agent(seconds)
    work = child.tools[0]

    def script(messages: list[nb.Message]) -> Any:
        return "ok" if messages[-1].role == "tool" else nb.ToolCall("work", {"part": "it"})

    return nb.Agent(name="Boss", agent_id="boss", model=nb.ScriptedModel(script), tools=[work])


def fanning(seconds: float, children: int, *, at_once: bool) -> nb.Agent:
    """One turn calling the sub-agent ``children`` times: in one step, or one per step."""
    child = child_agent(seconds)
    calls = [nb.ToolCall("worker", {"task": f"part {i}"}) for i in range(children)]

    def script(messages: list[nb.Message]) -> Any:
        task = max(i for i, m in enumerate(messages) if m.role == "user")
        done = sum(1 for m in messages[task:] if m.role == "tool")
        if done >= children:
            return "ok"
        return calls if at_once else calls[done]

    return nb.Agent(
        name="Boss",
        agent_id="boss",
        model=nb.ScriptedModel(script),
        tools=[child.as_tool()],
        max_steps=children + 5,
    )


def seconds_per_turn(db: Path, agent: nb.Agent, turns: int) -> float:
    """Wall seconds per turn of ``turns`` turns run one after another in one session."""
    with nb.Runtime(agent, store=f"sqlite:///{db}") as runtime:
        session = runtime.session("bench")
        session.run("warm up", timeout=600)  # the runtime's first turn pays for imports
        start = time.perf_counter()
        for t in range(turns):
            outcome = session.run(f"task {t}", timeout=600)
            if outcome.status != "completed":
                raise RuntimeError(f"turn {t} ended {outcome.status}: {outcome.error}")
        return (time.perf_counter() - start) / turns


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--work", type=float, default=0.1, help="seconds of a child's tool")
    parser.add_argument("--children", type=int, default=16)
    parser.add_argument("--fan-work", type=float, default=0.2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="fewer turns, 4 children, 1 round")
    args = parser.parse_args()
    turns, children, rounds = args.turns, args.children, args.rounds
    if args.quick:
        turns, children, rounds = 5, 4, 1
    print(
        f"python {platform.python_version()}, sqlite {sqlite3.sqlite_version}: "
        f"{turns} turns with a {args.work:g} s child tool; fan-out of {children} children "
        f"with {args.fan_work:g} s tools; {rounds} round(s)"
    )
    sub, plain, fan, seq = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for r in range(rounds):
            plain.append(
                seconds_per_turn(work / f"plain{r}.sqlite", doing_it_itself(args.work), turns)
            )
            sub.append(seconds_per_turn(work / f"sub{r}.sqlite", delegating(args.work), turns))
            fan.append(
                seconds_per_turn(
                    work / f"fan{r}.sqlite", fanning(args.fan_work, children, at_once=True), 1
                )
            )
            seq.append(
                seconds_per_turn(
                    work / f"seq{r}.sqlite", fanning(args.fan_work, children, at_once=False), 1
                )
            )
    sub_s, plain_s = statistics.median(sub), statistics.median(plain)
    fan_s, seq_s = statistics.median(fan), statistics.median(seq)
    rows = [
        {
            "bench": "subagents",
            "metric": "subagent_call_vs_plain_tool",
            "unit": "ms per turn",
            "value": round(sub_s * 1000, 3),
            "baseline": round(plain_s * 1000, 3),
            "ratio": round(sub_s / plain_s, 3),
            "target": "<= 1.5",
            "overhead_ms_per_call": round((sub_s - plain_s) * 1000, 3),
        },
        {
            "bench": "subagents",
            "metric": f"fan_out_{children}_vs_sequential",
            "unit": "children/s",
            "value": round(children / fan_s, 3),
            "baseline": round(children / seq_s, 3),
            "ratio": round(seq_s / fan_s, 3),
            "target": ">= 3",
        },
    ]
    print(f"{'metric':<40} {'agentnb':>10} {'baseline':>10} {'ratio':>7}  target")
    for row in rows:
        name = f"{row['metric']} ({row['unit']})"
        print(
            f"{name:<40} {row['value']:>10.1f} {row['baseline']:>10.1f} "
            f"{row['ratio']:>7.2f}  {row['target']}"
        )
    print(f"  sub-agent overhead per call: {rows[0]['overhead_ms_per_call']:.1f} ms")
    for row in rows:
        print(json.dumps(row))


if __name__ == "__main__":
    main()
