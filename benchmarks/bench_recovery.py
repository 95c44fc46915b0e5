"""Reopening a session after a crash: a 10,000-turn conversation vs a 100-turn one, one run.

Both sessions are built by the real runtime in a child process (model -> tool -> model per
turn, the default SQLite store), which is then killed with SIGKILL while one more turn's tool
runs: each log ends with a run left open and a tool call dispatched without a result. The
metric is what a notebook needs ready after a restart, from a fresh runtime: ``session()``,
``inspect()`` (the holder is dead, the turn interrupted, the call uncertain), ``pending()``,
the newest tasks (``tasks(limit=20)``) and ``snapshot()``. Target: the long session reopens
in at most 2x the short one's time. For information: reading the whole history
(``transcript()`` and ``tasks()``), which grows with the conversation by nature.

    python benchmarks/bench_recovery.py [--turns 10000] [--short 100] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import agentnb as nb

AGENT_ID = "recovery"


@nb.tool
def lookup(n: int) -> str:
    """Look something up (the last turn's call sleeps until the process is killed).

    Args:
        n: which
    """
    if n < 0:
        time.sleep(600)
    return "found"


def _script(messages: list[nb.Message]) -> Any:
    last = messages[-1]
    if last.role == "tool":
        return "done"
    n = -1 if last.text == "the last one" else 1
    return nb.ToolCall("lookup", {"n": n})


def make_agent() -> nb.Agent:
    return nb.Agent(
        name="Recovery",
        agent_id=AGENT_ID,
        model=nb.ScriptedModel(_script, keep_requests=0),
        tools=[lookup],
    )


def child(db: str, turns: int) -> None:
    """Run ``turns`` turns, start one more whose tool hangs, say READY, wait to be killed."""
    runtime = nb.Runtime(make_agent(), store=f"sqlite:///{db}")
    session = runtime.session("s")
    for i in range(turns):
        outcome = session.run(f"task {i}", timeout=120)
        if outcome.status != "completed":
            raise SystemExit(f"turn {i} ended {outcome.status}: {outcome.error}")
    session.submit("the last one")
    for event in session.log.follow(session.log.head() - 1, idle_timeout=60):
        if event.type == "action/start":
            break
    print("READY", flush=True)
    time.sleep(600)


def build(db: Path, turns: int) -> None:
    """The crashed session: the child builds it, then dies by SIGKILL mid-tool."""
    proc = subprocess.Popen(
        [sys.executable, __file__, "--child", str(db), str(turns)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if line.strip() != "READY":
            raise RuntimeError(f"the child did not get ready: {line!r}")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()


def reopen(db: Path, repeats: int) -> tuple[float, int]:
    """Median seconds for what a notebook shows after a restart; and the session's head."""
    times = []
    head = 0
    for _ in range(repeats):
        start = time.perf_counter()
        runtime = nb.Runtime(make_agent(), store=f"sqlite:///{db}")
        try:
            session = runtime.session("s")
            inspection = session.inspect()
            assert inspection.interrupted_turn is not None
            assert [c.tool_name for c in inspection.uncertain_tool_calls] == ["lookup"]
            session.pending()
            session.tasks(limit=20)
            session.snapshot()
            times.append(time.perf_counter() - start)
            head = inspection.as_of_seq
        finally:
            runtime.close()
    return statistics.median(times), head


def whole_history(db: Path) -> float:
    """Seconds to read the whole history: every message and every task."""
    runtime = nb.Runtime(make_agent(), store=f"sqlite:///{db}")
    try:
        session = runtime.session("s")
        start = time.perf_counter()
        session.transcript()
        session.tasks()
        return time.perf_counter() - start
    finally:
        runtime.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=10_000)
    parser.add_argument("--short", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="1,000 turns vs 100")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]))
        return
    long_turns = 1000 if args.quick else args.turns
    print(
        f"python {platform.python_version()}, sqlite {sqlite3.sqlite_version}: a crashed "
        f"session of {long_turns} turns vs one of {args.short}, built by the runtime"
    )
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        build(work / "short.sqlite", args.short)
        build(work / "long.sqlite", long_turns)
        short, short_head = reopen(work / "short.sqlite", args.repeats)
        long, long_head = reopen(work / "long.sqlite", args.repeats)
        history = whole_history(work / "long.sqlite")
    rows = [
        {
            "metric": f"reopen ms, {long_turns} turns vs {args.short}",
            "value": round(long * 1000, 2),
            "baseline": round(short * 1000, 2),
            "ratio": round(long / short, 3),
            "target": "<= 2",
            "events": long_head,
            "baseline_events": short_head,
        },
        {
            "metric": f"read the whole history ms ({long_turns} turns, information)",
            "value": round(history * 1000, 2),
            "baseline": None,
            "ratio": None,
            "target": "-",
        },
    ]
    print(f"{'metric':<52} {'agentnb':>10} {'baseline':>10} {'ratio':>7}  target")
    for r in rows:
        base = "-" if r["baseline"] is None else f"{r['baseline']:.1f}"
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}"
        print(f"{r['metric']:<52} {r['value']:>10.1f} {base:>10} {ratio:>7}  {r['target']}")
    print(f"({long_head} vs {short_head} events)")
    print(json.dumps({"bench": "recovery", **rows[0]}))  # the informational row has no baseline


if __name__ == "__main__":
    main()
