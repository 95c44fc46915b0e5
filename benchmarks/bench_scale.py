"""Does a long conversation stay fast? One session, 1,000 turns in a row, built by the runtime.

Each turn is model -> tool -> model -> tool -> model (a scripted model, a no-op tool) on the
default SQLite store (WAL, ``synchronous=FULL``). Reported, side by side in one run:

* turns/s over the first 100 turns and over the last 100 (turns 900-1,000) of the same
  session: the ratio last/first says whether the per-turn cost grows with history
  (target >= 0.9: flat);
* reopening the session the way a notebook does after a kernel restart (a fresh
  ``Runtime``, ``session()``, ``inspect()``, ``pending()``, ``snapshot()`` and a
  ``SessionView`` build) after 1,000 turns vs after 100 turns of the same conversation
  (target ratio <= 1.5): the two reopened in turn, the ratio the median of the pairs'.

Also printed: the two windows compared by their median turn, which a burst of load on a
shared machine hardly moves (the window totals above are what the target is set on).

    python benchmarks/bench_scale.py [--turns 1000] [--window 100] [--quick]
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import agentnb as nb

TOOL_CALLS_PER_TURN = 2


@nb.tool
def noop(n: int) -> str:
    """Do nothing (the benchmark's tool)."""
    return "ok"


def five_step_script(messages: list[nb.Message]) -> Any:
    """Two tool calls, then a final answer, counted from the last user message."""
    since_user = 0
    for message in reversed(messages):
        if message.role == "user":
            break
        if message.role == "tool":
            since_user += 1
    if since_user < TOOL_CALLS_PER_TURN:
        return nb.ToolCall("noop", {"n": since_user})
    return "done"


def make_agent() -> nb.Agent:
    """The agent: its scripted model keeps no record of requests (that record is a test
    double's, and grows with the square of the conversation)."""
    return nb.Agent(
        name="Scale",
        agent_id="scale",
        model=nb.ScriptedModel(five_step_script, keep_requests=0),
        tools=[noop],
    )


def build(db: Path, turns: int, window: int, snapshot_at: int, copy_to: Path) -> dict[str, Any]:
    """Run ``turns`` turns in one session; time the first and last ``window`` turns."""
    runtime = nb.Runtime(make_agent(), store=f"sqlite:///{db}")
    marks: dict[int, float] = {}
    try:
        session = runtime.session("long")
        marks[0] = time.perf_counter()
        for i in range(turns):
            outcome = session.run(f"task {i}", timeout=120)
            if outcome.status != "completed":
                raise RuntimeError(f"turn {i} ended {outcome.status}: {outcome.error}")
            done = i + 1
            marks[done] = time.perf_counter()
            if done == snapshot_at:
                # The same conversation as it stood after ``snapshot_at`` turns.
                pause = time.perf_counter()
                _copy_store(db, copy_to)
                shift = time.perf_counter() - pause
                for k in marks:
                    marks[k] += shift
        events = session.log.head()
    finally:
        runtime.close()
    first = window / (marks[window] - marks[0])
    last = window / (marks[turns] - marks[turns - window])

    def median_turn(start: int) -> float:
        return statistics.median(marks[i + 1] - marks[i] for i in range(start, start + window))

    return {
        "first_turns_per_s": first,
        "last_turns_per_s": last,
        "first_median_turns_per_s": 1 / median_turn(0),
        "last_median_turns_per_s": 1 / median_turn(turns - window),
        "events": events,
    }


def _copy_store(db: Path, target: Path) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(FULL)")
    shutil.copyfile(db, target)
    for suffix in ("-wal", "-shm"):
        if Path(f"{db}{suffix}").exists():
            shutil.copyfile(f"{db}{suffix}", f"{target}{suffix}")
    target.chmod(0o600)


def reopen(db: Path) -> float:
    """Seconds: fresh runtime, session, inspect, pending, snapshot, SessionView."""
    from agentnb.widgets import SessionView

    start = time.perf_counter()
    runtime = nb.Runtime(make_agent(), store=f"sqlite:///{db}")
    try:
        session = runtime.session("long")
        session.inspect()
        session.pending()
        session.snapshot()
        view = SessionView(session)
        seconds = time.perf_counter() - start
        view.close()
    finally:
        runtime.close()
    return seconds


def reopens(early: Path, late: Path, repeats: int) -> tuple[float, float, float]:
    """(median seconds early, median late, median of the pairs' late/early ratios): the two
    reopened in turn, who goes first alternating, after one unmeasured reopen of each."""
    reopen(early), reopen(late)  # first uses: imports, caches
    pairs: list[tuple[float, float]] = []
    for i in range(repeats):
        if i % 2:
            b = reopen(late)
            a = reopen(early)
        else:
            a = reopen(early)
            b = reopen(late)
        pairs.append((a, b))
    return (
        statistics.median(a for a, _ in pairs),
        statistics.median(b for _, b in pairs),
        statistics.median(b / a for a, b in pairs),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--window", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=7, help="reopen pairs")
    parser.add_argument("--quick", action="store_true", help="100 turns, windows of 20")
    args = parser.parse_args()
    turns, window = (100, 20) if args.quick else (args.turns, args.window)
    print(
        f"python {platform.python_version()}, sqlite {sqlite3.sqlite_version}: one session, "
        f"{turns} turns of model -> tool -> model -> tool -> model"
    )
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        db, early = work / "long.sqlite", work / "early.sqlite"
        built = build(db, turns, window, window, early)
        reopen_early, reopen_late, reopen_ratio = reopens(early, db, args.repeats)
    rows = [
        {
            "metric": f"turns/s, turns {turns - window}-{turns} vs 0-{window}",
            "value": built["last_turns_per_s"],
            "baseline": built["first_turns_per_s"],
            "ratio": built["last_turns_per_s"] / built["first_turns_per_s"],
            "target": ">= 0.9",
        },
        {
            # The same windows by their median turn: a burst of load on a shared machine
            # moves a window's total, hardly its median.
            "metric": f"median turn, turns {turns - window}-{turns} vs 0-{window} (turns/s)",
            "value": built["last_median_turns_per_s"],
            "baseline": built["first_median_turns_per_s"],
            "ratio": built["last_median_turns_per_s"] / built["first_median_turns_per_s"],
            "target": "informational",
        },
        {
            "metric": f"reopen ms after {turns} turns vs after {window}",
            "value": reopen_late * 1000,
            "baseline": reopen_early * 1000,
            "ratio": reopen_ratio,
            "target": "<= 1.5",
        },
    ]
    print(f"{'metric':<44} {'agentnb':>10} {'baseline':>10} {'ratio':>7}  target")
    for row in rows:
        print(
            f"{row['metric']:<44} {row['value']:>10.1f} {row['baseline']:>10.1f} "
            f"{row['ratio']:>7.2f}  {row['target']}"
        )
    print(f"({built['events']} events in the session after {turns} turns)")
    for row in rows:
        print(json.dumps({"bench": "scale", **row, "events": built["events"]}))


if __name__ == "__main__":
    sys.exit(main())
