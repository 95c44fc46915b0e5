"""Does concurrency buy throughput? 16 sessions at once against one session, in one run.

One runtime, the default SQLite store (WAL, ``synchronous=FULL``), the scripted loop of
``bench_scale.py`` (model -> tool -> model -> tool -> model). Measured side by side:

* 16 sessions with 20 turns each, all submitted at once (each session runs its turns in
  order; sessions run concurrently on the runtime's loop);
* one session running the same 320 turns one after another.

Target: the 16 sessions together make >= 2x the turns/s of the single session (goal 3x).

And the same 16 sessions in one runtime with ``processes=2`` (two forked worker processes
claim the sessions from the shared SQLite file, the runtime only submits and waits): target
>= 1.6x the single session in one process. Its CPU figures add the worker processes' (they
are reaped when the runtime closes).

Also reported, for each side: CPU time per turn (user and system, all threads of the process)
and ``user_busy``, user CPU seconds per second of the run. One process runs its Python on one
thread at a time, so a side whose ``user_busy`` is near 1 is bound by one core of Python:
more sessions at once can then only help by making each turn cheaper.

The three sides run ``--rounds`` times (default 3), back to back in each round, in an
order that turns round; figures are medians, a ratio the median of the rounds' ratios (its
range printed beside it in the JSON line).

    python benchmarks/bench_sessions.py [--sessions 16] [--turns 20] [--rounds 3] [--quick]
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_scale import make_agent

import agentnb as nb


def _cpu() -> tuple[float, float]:
    """(user, system) CPU seconds of this process and of its reaped children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + children.ru_utime, own.ru_stime + children.ru_stime


class Usage:
    """CPU time (user, system) and wall time of the ``with`` block, for the whole process
    and the child processes it reaped (the workers of ``processes=N``)."""

    def __enter__(self) -> Usage:
        self._start = _cpu(), time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        (user, system), began = _cpu(), time.perf_counter()
        (user0, system0), start = self._start
        self.user = user - user0
        self.system = system - system0
        self.wall = began - start


def concurrent(db: Path, sessions: int, turns: int, processes: int = 1) -> float:
    """Turns/s of ``sessions`` sessions with ``turns`` queued turns each, submitted at once
    (executed in ``processes`` worker processes when more than one)."""
    runtime = nb.Runtime(make_agent(), store=f"sqlite:///{db}", processes=processes)
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
    parser.add_argument("--processes", type=int, default=2, help="worker processes (side 2)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the three sides")
    parser.add_argument("--quick", action="store_true", help="4 sessions x 5 turns")
    args = parser.parse_args()
    sessions, turns = (4, 5) if args.quick else (args.sessions, args.turns)
    if args.quick:
        args.rounds = 1
    total = sessions * turns
    print(
        f"python {platform.python_version()}, sqlite {sqlite3.sqlite_version}: "
        f"{sessions} sessions x {turns} turns at once vs one session x {total} turns"
    )
    sides: dict[str, list[tuple[float, Usage]]] = {"many": [], "spread": [], "one": []}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for r in range(args.rounds):
            # Each round runs the three sides back to back, in an order that turns round:
            # the machine's speed drifts over minutes, and each ratio pairs one round's sides.
            order = ["many", "spread", "one"]
            for name in order[r % 3 :] + order[: r % 3]:
                db = work / f"{name}-{r}.sqlite"
                with Usage() as usage:
                    if name == "one":
                        rate = sequential(db, total)
                    else:
                        rate = concurrent(
                            db, sessions, turns, args.processes if name == "spread" else 1
                        )
                sides[name].append((rate, usage))
    print(f"{'metric':<52} {'agentnb':>9} {'baseline':>9} {'ratio':>7}  target")
    report(
        f"turns/s, {sessions} sessions at once vs one session",
        ">= 2 (goal 3)",
        sides["many"],
        sides["one"],
        total,
    )
    report(
        f"turns/s, {sessions} sessions in {args.processes} processes vs one session",
        ">= 1.6",
        sides["spread"],
        sides["one"],
        total,
        processes=args.processes,
    )


def report(
    metric: str,
    target: str,
    side: list[tuple[float, Usage]],
    base: list[tuple[float, Usage]],
    total: int,
    **extra: object,
) -> None:
    """One comparison over the rounds (medians; the ratio is the median of the rounds'
    ratios, each with the range over the rounds): its table lines, then its JSON line."""
    ratios = [s[0] / b[0] for s, b in zip(side, base, strict=True)]

    def median(values: list[float]) -> float:
        return statistics.median(values)

    rate, base_rate = median([s[0] for s in side]), median([b[0] for b in base])
    ratio = median(ratios)
    row: dict[str, object] = {
        "bench": "sessions",
        "metric": metric,
        "value": round(rate, 2),
        "baseline": round(base_rate, 2),
        "ratio": round(ratio, 3),
        "ratio_range": [round(min(ratios), 3), round(max(ratios), 3)],
        "rounds": len(ratios),
        "target": target,
        **extra,
    }
    lines = [(metric, f"{rate:.1f}", f"{base_rate:.1f}", f"{ratio:.2f}")]
    for name, unit, attr in (
        ("user_ms_per_turn", "user CPU ms per turn", "user"),
        ("sys_ms_per_turn", "system CPU ms per turn", "system"),
    ):
        ours = median([getattr(u, attr) for _, u in side])
        theirs = median([getattr(u, attr) for _, u in base])
        row[name], row[f"baseline_{name}"] = (round(x * 1000 / total, 3) for x in (ours, theirs))
        lines.append((f"  {unit}", f"{row[name]:.2f}", f"{row[f'baseline_{name}']:.2f}", ""))
    row["user_busy"] = round(median([u.user / u.wall for _, u in side]), 3)
    row["baseline_user_busy"] = round(median([u.user / u.wall for _, u in base]), 3)
    lines.append(
        ("  user CPU s per s", f"{row['user_busy']:.2f}", f"{row['baseline_user_busy']:.2f}", "")
    )
    for i, (name, value, baseline, shown) in enumerate(lines):
        print(f"{name:<52} {value:>9} {baseline:>9} {shown:>7}  {target if i == 0 else ''}")
    print(json.dumps(row))


if __name__ == "__main__":
    main()
