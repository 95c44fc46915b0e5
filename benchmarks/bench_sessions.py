"""Does concurrency buy throughput? 16 sessions at once against one session, in one run.

One runtime, the default SQLite store (WAL, ``synchronous=FULL``), the scripted loop of
``bench_scale.py`` (model -> tool -> model -> tool -> model). Measured side by side:

* 16 sessions with 20 turns each, all submitted at once (each session runs its turns in
  order; sessions run concurrently on the runtime's loop);
* one session running the same 320 turns one after another.

Target: the 16 sessions together make >= 2x the turns/s of the single session (goal 3x).

Also reported, for each side: CPU time per turn (user and system, all threads of the process)
and ``user_busy``, user CPU seconds per second of the run. One process runs its Python on one
thread at a time, so a side whose ``user_busy`` is near 1 is bound by one core of Python:
more sessions at once can then only help by making each turn cheaper.

    python benchmarks/bench_sessions.py [--sessions 16] [--turns 20] [--quick]
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_scale import make_agent

import agentnb as nb


class Usage:
    """CPU time (user, system) and wall time of the ``with`` block, for the whole process."""

    def __enter__(self) -> Usage:
        self._start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        end = resource.getrusage(resource.RUSAGE_SELF)
        start, began = self._start
        self.user = end.ru_utime - start.ru_utime
        self.system = end.ru_stime - start.ru_stime
        self.wall = time.perf_counter() - began


def concurrent(db: Path, sessions: int, turns: int) -> float:
    """Turns/s of ``sessions`` sessions with ``turns`` queued turns each, submitted at once."""
    runtime = nb.Runtime(make_agent(), store=f"sqlite:///{db}")
    try:
        handles = [runtime.session(f"s{i}") for i in range(sessions)]
        start = time.perf_counter()
        receipts = [h.submit(f"task {t}") for t in range(turns) for h in handles]
        for receipt in receipts:
            outcome = receipt.wait(timeout=600)
            if outcome.status != "completed":
                raise RuntimeError(f"a turn ended {outcome.status}: {outcome.error}")
        return len(receipts) / (time.perf_counter() - start)
    finally:
        runtime.close()


def sequential(db: Path, turns: int) -> float:
    """Turns/s of one session running ``turns`` turns one after another."""
    runtime = nb.Runtime(make_agent(), store=f"sqlite:///{db}")
    try:
        session = runtime.session("one")
        start = time.perf_counter()
        for t in range(turns):
            outcome = session.run(f"task {t}", timeout=600)
            if outcome.status != "completed":
                raise RuntimeError(f"turn {t} ended {outcome.status}: {outcome.error}")
        return turns / (time.perf_counter() - start)
    finally:
        runtime.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=16)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="4 sessions x 5 turns")
    args = parser.parse_args()
    sessions, turns = (4, 5) if args.quick else (args.sessions, args.turns)
    total = sessions * turns
    print(
        f"python {platform.python_version()}, sqlite {sqlite3.sqlite_version}: "
        f"{sessions} sessions x {turns} turns at once vs one session x {total} turns"
    )
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        with Usage() as many_usage:
            many = concurrent(work / "many.sqlite", sessions, turns)
        with Usage() as one_usage:
            one = sequential(work / "one.sqlite", total)
    row: dict[str, object] = {
        "bench": "sessions",
        "metric": f"turns/s, {sessions} sessions at once vs one session",
        "value": round(many, 2),
        "baseline": round(one, 2),
        "ratio": round(many / one, 3),
        "target": ">= 2 (goal 3)",
    }
    lines = [(str(row["metric"]), f"{many:.1f}", f"{one:.1f}", f"{many / one:.2f}")]
    for name, unit, ours, theirs in (
        ("user_ms_per_turn", "user CPU ms per turn", many_usage.user, one_usage.user),
        ("sys_ms_per_turn", "system CPU ms per turn", many_usage.system, one_usage.system),
    ):
        row[name], row[f"baseline_{name}"] = (round(u * 1000 / total, 3) for u in (ours, theirs))
        lines.append((f"  {unit}", f"{row[name]:.2f}", f"{row[f'baseline_{name}']:.2f}", ""))
    row["user_busy"] = round(many_usage.user / many_usage.wall, 3)
    row["baseline_user_busy"] = round(one_usage.user / one_usage.wall, 3)
    lines.append(
        ("  user CPU s per s", f"{row['user_busy']:.2f}", f"{row['baseline_user_busy']:.2f}", "")
    )
    print(f"{'metric':<44} {'agentnb':>9} {'baseline':>9} {'ratio':>7}  target")
    for i, (metric, value, baseline, ratio) in enumerate(lines):
        target = row["target"] if i == 0 else ""
        print(f"{metric:<44} {value:>9} {baseline:>9} {ratio:>7}  {target}")
    print(json.dumps(row))


if __name__ == "__main__":
    main()
