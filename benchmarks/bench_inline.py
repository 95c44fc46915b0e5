"""What does an inline confirmation cost? In one run, beside the same turn without one.

One runtime per side, the default SQLite store (WAL, ``synchronous=FULL``), a scripted model:
each turn calls one tool, then answers. The person (this script) answers ``--delay`` seconds
(50 ms) after the request is committed. Measured side by side, wall time per turn:

* **inline**: ``Agent(wait_inline=30)`` and a ``confirm=True`` tool: the run commits the
  request, waits in place, and goes on in the same run once ``respond`` arrives;
* **baseline**: the same turn with no confirmation, the tool itself taking ``--delay``
  seconds (as long as the person takes), so both sides wait the same time (target: inline
  <= 1.2x the baseline);
* **suspended**: today's suspension (``wait_inline=0``): the run ends suspended, the answer
  starts a new run that carries the call out (printed beside it, for information).

Rounds alternate the sides; the median round is reported.

    python benchmarks/bench_inline.py [--turns 30] [--delay 0.05] [--rounds 3] [--quick]
"""

from __future__ import annotations

import argparse
import json
import platform
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import agentnb as nb


def _script(messages: list[nb.Message]) -> Any:
    return "ok" if messages[-1].role == "tool" else nb.ToolCall("order", {"item": "desk"})


def agent(*, confirm: bool, wait_inline: float, delay: float) -> nb.Agent:
    """A turn: the model calls ``order`` (approved by a person, or taking ``delay`` itself)."""

    @nb.tool(confirm=confirm)
    def order(item: str) -> str:
        """Order an item."""
        if not confirm:
            time.sleep(delay)  # the baseline's tool takes as long as the person does
        return f"ordered {item}"

    return nb.Agent(
        name="Orders",
        agent_id="orders",
        model=nb.ScriptedModel(_script),
        tools=[order],
        wait_inline=wait_inline,
    )


def _request(session: nb.Session, after: int) -> str:
    """The id of the first request committed after ``after``."""
    follow = session.log.follow(after, idle_timeout=60)
    try:
        for event in follow:
            if event.type == "interaction/requested":
                return str(event.payload["request_id"])
    finally:
        follow.close()
    raise RuntimeError("no request was committed")


def one_turn(session: nb.Session, text: str, *, confirm: bool, delay: float) -> nb.Outcome:
    """Submit ``text`` and, when the tool needs it, answer ``delay`` s after the request."""
    if not confirm:
        return session.run(text, timeout=600)
    head = session.log.head()
    session.submit(text)
    request_id = _request(session, head)
    time.sleep(delay)
    return session.respond(request_id, True).wait(600)


def seconds_per_turn(
    db: Path, *, confirm: bool, wait_inline: float, delay: float, turns: int
) -> float:
    """Wall seconds per turn of ``turns`` turns one after another in one session."""
    a = agent(confirm=confirm, wait_inline=wait_inline, delay=delay)
    with nb.Runtime(a, store=f"sqlite:///{db}") as runtime:
        session = runtime.session("bench")
        one_turn(session, "warm up", confirm=confirm, delay=delay)  # imports, the first lease
        start = time.perf_counter()
        for t in range(turns):
            outcome = one_turn(session, f"task {t}", confirm=confirm, delay=delay)
            if outcome.status != "completed":
                raise RuntimeError(f"turn {t} ended {outcome.status}: {outcome.error}")
        elapsed = (time.perf_counter() - start) / turns
        if confirm:
            runs = sum(1 for e in session.log.scan() if e.type == "run/start")
            expected = (turns + 1) * (1 if wait_inline else 2)
            if runs != expected:
                raise RuntimeError(f"{runs} runs for {turns + 1} turns, expected {expected}")
        return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--delay", type=float, default=0.05, help="seconds the person takes")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="5 turns, 1 round")
    args = parser.parse_args()
    turns, rounds, delay = args.turns, args.rounds, args.delay
    if args.quick:
        turns, rounds = 5, 1
    print(
        f"python {platform.python_version()}, sqlite {sqlite3.sqlite_version}: {turns} turns "
        f"per side, the answer {delay * 1000:g} ms after the request; {rounds} round(s)"
    )
    inline, plain, suspended = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for r in range(rounds):
            plain.append(
                seconds_per_turn(
                    work / f"plain{r}.sqlite",
                    confirm=False,
                    wait_inline=0,
                    delay=delay,
                    turns=turns,
                )
            )
            inline.append(
                seconds_per_turn(
                    work / f"inline{r}.sqlite",
                    confirm=True,
                    wait_inline=30,
                    delay=delay,
                    turns=turns,
                )
            )
            suspended.append(
                seconds_per_turn(
                    work / f"susp{r}.sqlite", confirm=True, wait_inline=0, delay=delay, turns=turns
                )
            )
    inline_s, plain_s = statistics.median(inline), statistics.median(plain)
    suspended_s = statistics.median(suspended)
    rows = [
        {
            "bench": "inline",
            "metric": "inline_confirmation_vs_no_confirmation",
            "unit": "ms per turn",
            "value": round(inline_s * 1000, 3),
            "baseline": round(plain_s * 1000, 3),
            "ratio": round(inline_s / plain_s, 3),
            "target": "<= 1.2",
            "delay_ms": delay * 1000,
        },
        {
            "bench": "inline",
            "metric": "suspended_and_resumed_vs_no_confirmation",
            "unit": "ms per turn",
            "value": round(suspended_s * 1000, 3),
            "baseline": round(plain_s * 1000, 3),
            "ratio": round(suspended_s / plain_s, 3),
            "target": "information",
            "delay_ms": delay * 1000,
        },
    ]
    print(f"{'metric':<56} {'agentnb':>9} {'baseline':>9} {'ratio':>6}  target")
    for row in rows:
        name = f"{row['metric']} ({row['unit']})"
        print(
            f"{name:<56} {row['value']:>9.1f} {row['baseline']:>9.1f} "
            f"{row['ratio']:>6.2f}  {row['target']}"
        )
    print(
        f"  inline vs suspended-and-resumed: {inline_s * 1000:.1f} vs "
        f"{suspended_s * 1000:.1f} ms per turn ({suspended_s / inline_s:.2f}x)"
    )
    for row in rows:
        print(json.dumps(row))


if __name__ == "__main__":
    main()
