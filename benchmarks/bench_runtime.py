"""Durable agent steps per second: agentnb vs LangGraph + SqliteSaver, in one run.

Both sides run the same agent loop: per turn, three model steps, the first two calling a
no-op tool, on a file-backed SQLite store with WAL and ``synchronous=FULL``. agentnb keeps
commit-before-side-effect (``model/dispatch`` and ``tool/dispatch`` are durable before each
call); it merges the commits that sit between two side effects.

Also reported: commits per step, and commits for one 2,000-chunk streamed reply. For the
small-state shape, what a turn costs: CPU time per turn of each side (all threads, user and
system), and the storage floor, the time bare ``sqlite3`` takes to commit agentnb's very rows
in the very transactions it used (``storage_floor``), against agentnb's whole turn. A ratio
target over LangGraph's turn time leaves, for all of agentnb's Python, the target's turn time
minus that floor.

The small-state shape runs ``--rounds`` times (default 3), each round both sides in turn,
who goes first alternating; its lines report medians, and the ratio is the median of the
rounds' ratios (the machine's speed drifts over the minutes a round takes).

    python benchmarks/bench_runtime.py [--turns 200] [--rounds 3] [--quick]
"""

from __future__ import annotations

import argparse
import json
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_store import RawSide

import agentnb as nb
from agentnb.stores import _rows

STEPS_PER_TURN = 3


@nb.tool
def noop(n: int) -> str:
    """Do nothing (the benchmark's tool)."""
    return "ok"


def _three_step_script(messages: list[nb.Message]) -> Any:
    """Two tool calls, then a final answer, counted from the last user message."""
    since_user = 0
    for message in reversed(messages):
        if message.role == "user":
            break
        if message.role == "tool":
            since_user += 1
    if since_user < STEPS_PER_TURN - 1:
        return nb.ToolCall("noop", {"n": since_user})
    return "done"


def _batches(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        # Each committed batch marks its first event with the batch id.
        row = conn.execute("SELECT count(*) FROM events WHERE batch_id IS NOT NULL").fetchone()
        return int(row[0])


def run_agentnb(turns: int, workdir: Path) -> dict[str, float]:
    db = workdir / "agentnb.sqlite"
    model = nb.ScriptedModel(_three_step_script)
    agent = nb.Agent(name="Bench", agent_id="bench", model=model, tools=[noop])
    runtime = nb.Runtime(agent, store=f"sqlite:///{db}")
    try:
        warm = runtime.session("warmup")
        warm.run("warm up", timeout=60)
        session = runtime.session("timed")
        before = _batches(db)
        start = time.perf_counter()
        for i in range(turns):
            outcome = session.run(f"task {i}", timeout=60)
            if outcome.status != "completed":
                raise RuntimeError(f"turn {i} ended {outcome.status}: {outcome.error}")
        seconds = time.perf_counter() - start
        commits = _batches(db) - before
    finally:
        runtime.close()
    steps = turns * STEPS_PER_TURN
    return {
        "turns": turns,
        "steps": steps,
        "seconds": seconds,
        "steps_per_s": steps / seconds,
        "commits": commits,
        "commits_per_step": commits / steps,
    }


def _five_step_script(messages: list[nb.Message]) -> Any:
    """The small-state shape's loop: model, tool, model, tool, model."""
    since_user = 0
    for message in reversed(messages):
        if message.role == "user":
            break
        if message.role == "tool":
            since_user += 1
    return nb.ToolCall("noop", {"n": since_user}) if since_user < 2 else "done"


def storage_floor(db: Path, workdir: Path) -> float:
    """Seconds per turn that SQLite alone takes to commit what agentnb committed in ``db``.

    The events and inbox rows of the file's sessions are written again by ``bench_store``'s
    raw side (bare ``sqlite3`` on the store's schema and pragmas: WAL, ``synchronous=FULL``):
    each accepted command in a transaction of its own (a submit), each batch of events in one
    (a batch starts at a row that carries a batch id). What is left of a turn's time above
    this is agentnb's Python and the thread hops between the notebook, the loop and the store.
    """
    source = sqlite3.connect(db)
    (turns,) = source.execute(
        "SELECT count(*) FROM events WHERE type = 'turn/completed'"
    ).fetchone()
    events = source.execute(
        f"SELECT session, {_rows.COLUMNS}, batch_id, digest FROM events ORDER BY session, seq"
    ).fetchall()
    submits = source.execute("SELECT * FROM inbox ORDER BY session, seq").fetchall()
    source.close()
    batches: list[list[tuple[object, ...]]] = []
    for row in events:
        if row[-2] is not None or not batches:  # its batch id: a commit starts here
            batches.append([])
        batches[-1].append(row)
    raw = RawSide(workdir / "floor.sqlite")
    try:
        insert_submit = f"INSERT INTO inbox VALUES ({','.join('?' * len(submits[0]))})"
        per_submit = max(1, len(batches) // max(1, len(submits)))
        start = time.perf_counter()
        for i, batch in enumerate(batches):
            if i % per_submit == 0 and i // per_submit < len(submits):
                raw.conn.execute("BEGIN IMMEDIATE")
                raw.conn.execute(insert_submit, submits[i // per_submit])
                raw.conn.execute("COMMIT")
            raw.commit(batch)
        seconds = time.perf_counter() - start
    finally:
        raw.close()
    return seconds / max(1, turns)


def run_agentnb_windows(turns: int, window: int, workdir: Path) -> dict[str, float]:
    """agentnb on the small-state shape's loop: turns/s over the first and last windows,
    and the process's CPU time per turn over each (user and system, all threads)."""
    db = workdir / "agentnb-windows.sqlite"
    model = nb.ScriptedModel(_five_step_script, keep_requests=0)
    agent = nb.Agent(name="Bench", agent_id="bench-small", model=model, tools=[noop])
    runtime = nb.Runtime(agent, store=f"sqlite:///{db}")
    try:
        session = runtime.session("timed")
        marks = [time.perf_counter()]
        cpu = {0: time.process_time()}
        for i in range(turns):
            outcome = session.run(f"task {i}", timeout=60)
            if outcome.status != "completed":
                raise RuntimeError(f"turn {i} ended {outcome.status}: {outcome.error}")
            marks.append(time.perf_counter())
            if i + 1 in (window, turns - window, turns):
                cpu[i + 1] = time.process_time()
    finally:
        runtime.close()
    return {
        "first_turns_per_s": window / (marks[window] - marks[0]),
        "last_turns_per_s": window / (marks[turns] - marks[turns - window]),
        "first_cpu_s_per_turn": (cpu[window] - cpu[0]) / window,
        "last_cpu_s_per_turn": (cpu[turns] - cpu[turns - window]) / window,
        "first_s_per_turn": (marks[window] - marks[0]) / window,
    }


def small_state_rounds(
    turns: int, window: int, rounds: int, workdir: Path
) -> dict[str, tuple[float, float | None, float | None]]:
    """Both sides of the small-state shape, ``rounds`` times, who goes first alternating:
    for each window, (agentnb's median turns/s, LangGraph's median, median of the rounds'
    ratios). One machine's speed drifts over a minute; pairing rounds keeps the ratio fair.
    Also ``first_cpu`` and ``last_cpu``: each side's CPU seconds per turn over the windows;
    and ``floor``: seconds per turn of SQLite alone writing agentnb's rows (``storage_floor``,
    last round), against agentnb's time per turn over the first window.
    """
    try:
        from _langgraph_baseline import run_langgraph_small as langgraph
    except ImportError:
        langgraph = None  # type: ignore[assignment]
    ours: list[dict[str, float]] = []
    theirs: list[dict[str, float]] = []
    here = workdir
    for r in range(rounds):
        here = workdir / f"small-{r}"
        here.mkdir()
        first_ours = r % 2 == 0 or langgraph is None
        if first_ours:
            ours.append(run_agentnb_windows(turns, window, here))
        if langgraph is not None:
            theirs.append(langgraph(turns, window, db_path=str(here / "langgraph-small.sqlite")))
        if not first_ours:
            ours.append(run_agentnb_windows(turns, window, here))
    floor = storage_floor(here / "agentnb-windows.sqlite", here)
    out: dict[str, tuple[float, float | None, float | None]] = {}
    for part, key in (
        ("first", "first_turns_per_s"),
        ("last", "last_turns_per_s"),
        ("first_cpu", "first_cpu_s_per_turn"),
        ("last_cpu", "last_cpu_s_per_turn"),
    ):
        mine = statistics.median(o[key] for o in ours)
        if not theirs:
            out[part] = (mine, None, None)
            continue
        base = statistics.median(t[key] for t in theirs)
        ratio = statistics.median(o[key] / t[key] for o, t in zip(ours, theirs, strict=True))
        out[part] = (mine, base, ratio)
    whole = statistics.median(o["first_s_per_turn"] for o in ours)
    out["floor"] = (floor, whole, floor / whole)
    return out


def run_context(turns: int, workdir: Path) -> dict[str, float]:
    """Tokens of the next context after ``turns`` one-step turns, with and without a
    compactor (window 4,000 tokens); and a compaction's cost against a normal step."""

    def summary(messages: list[nb.Message]) -> str:
        return "a summary of the conversation so far"

    out: dict[str, float] = {}
    for label, compaction in (
        ("plain", None),
        ("compacted", nb.SummaryCompactor(keep_last=20, model=nb.ScriptedModel(summary))),
    ):
        model = nb.ScriptedModel(lambda messages: "done", keep_requests=0)
        agent = nb.Agent(
            name="Ctx",
            agent_id=f"ctx-{label}",
            model=model,
            context_window=4000 if compaction else None,
            compaction=compaction,
        )
        runtime = nb.Runtime(agent, store=f"sqlite:///{workdir / f'ctx-{label}.sqlite'}")
        try:
            session = runtime.session("s")
            for i in range(turns):
                session.run(f"task {i}", timeout=60)
            tokens = session.inspect().context_tokens
            out[f"{label}_tokens"] = float(tokens or 0)
            if compaction is not None:
                start = time.perf_counter()
                for i in range(20):
                    session.run(f"more {i}", timeout=60)
                out["step_s"] = (time.perf_counter() - start) / 20
                start = time.perf_counter()
                session.compact(timeout=60)
                out["compaction_s"] = time.perf_counter() - start
        finally:
            runtime.close()
    return out


def run_streaming(workdir: Path, chunks: int, chunk_delay: float) -> dict[str, float]:
    db = workdir / f"stream-{chunk_delay}.sqlite"
    model = nb.ScriptedModel(["x" * chunks], chunk_size=1, chunk_delay=chunk_delay)
    runtime = nb.Runtime(
        nb.Agent(name="Stream", agent_id="stream", model=model), store=f"sqlite:///{db}"
    )
    try:
        session = runtime.session("s")
        start = time.perf_counter()
        outcome = session.run("stream", timeout=600)
        seconds = time.perf_counter() - start
        assert outcome.output == "x" * chunks
        commits = _batches(db)
        chunk_events = sum(1 for e in session.log.scan() if e.type == "model/chunk")
    finally:
        runtime.close()
    return {"chunks": chunks, "seconds": seconds, "commits": commits, "chunk_events": chunk_events}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="20 turns, short stream")
    parser.add_argument("--long-turns", type=int, default=1000, help="small-state shape turns")
    parser.add_argument("--window", type=int, default=100, help="small-state shape window")
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="small-state shape: rounds of both sides, in alternating order (medians)",
    )
    args = parser.parse_args()
    turns = 20 if args.quick else args.turns

    print(
        f"python {platform.python_version()}, sqlite {sqlite3.sqlite_version}, "
        f"{turns} turns x {STEPS_PER_TURN} steps"
    )
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        ours = run_agentnb(turns, work)
        try:
            from _langgraph_baseline import langgraph_versions, run_langgraph

            theirs: dict[str, float] | None = run_langgraph(
                turns, STEPS_PER_TURN, db_path=str(work / "langgraph.sqlite")
            )
            print(f"baseline: {langgraph_versions()}")
        except ImportError as exc:
            print(f"LangGraph baseline skipped ({exc}); install with pip install -e '.[bench]'")
            theirs = None
        long_turns, window = (100, 20) if args.quick else (args.long_turns, args.window)
        small = small_state_rounds(long_turns, window, 1 if args.quick else args.rounds, work)
        context = run_context(100 if args.quick else long_turns, work)
        fast = run_streaming(work, 2000, 0.0)
        paced = run_streaming(work, 2000 if not args.quick else 400, 0.001)

    def metric(
        name: str, value: float, baseline: float | None, unit: str, target: str, ok: bool | None
    ) -> None:
        ratio = value / baseline if baseline else None
        results.append(
            {
                "metric": name,
                "value": round(value, 3),
                "baseline": None if baseline is None else round(baseline, 3),
                "ratio": None if ratio is None else round(ratio, 3),
                "unit": unit,
                "target": target,
                "ok": ok,
            }
        )

    lg_rate = theirs["steps_per_s"] if theirs else None
    metric(
        "durable_steps_per_s",
        ours["steps_per_s"],
        lg_rate,
        "steps/s (baseline LangGraph)",
        "ratio >= 2.0",
        None if lg_rate is None else ours["steps_per_s"] / lg_rate >= 2.0,
    )
    for part, label in (
        ("first", f"turns 0-{window}"),
        ("last", f"turns {long_turns - window}-{long_turns}"),
    ):
        mine, lg_small, paired = small[part]
        rounds = 1 if args.quick else args.rounds
        rounds_note = f", medians of {rounds} rounds" if rounds > 1 else ""
        metric(
            f"small_state_{part}_window",
            mine,
            lg_small,
            f"turns/s, {label} of one session (baseline LangGraph small state{rounds_note})",
            "ratio >= 2.0",
            None if paired is None else paired >= 2.0,
        )
        if paired is not None:
            results[-1]["ratio"] = round(paired, 3)  # the median of the rounds' own ratios
    for part, label in (
        ("first", f"turns 0-{window}"),
        ("last", f"turns {long_turns - window}-{long_turns}"),
    ):
        mine, lg_cpu, _ = small[f"{part}_cpu"]
        metric(
            f"small_state_{part}_cpu",
            mine * 1000,
            None if lg_cpu is None else lg_cpu * 1000,
            f"ms of CPU per turn, all threads, {label} (baseline LangGraph small state)",
            "informational",
            None,
        )
    floor, whole, _ = small["floor"]
    metric(
        "small_state_storage_floor",
        floor * 1000,
        whole * 1000,
        "ms per turn for bare sqlite3 to commit the same rows in the same transactions "
        f"(baseline: agentnb's turn, turns 0-{window})",
        "informational",
        None,
    )
    metric(
        "next_context_tokens_compacted",
        context["compacted_tokens"],
        context["plain_tokens"],
        f"tokens of the next context after {100 if args.quick else long_turns} turns "
        "(baseline: the same without compaction)",
        "below the 4,000-token window",
        context["compacted_tokens"] <= 4000,
    )
    metric(
        "compaction_vs_step",
        context["compaction_s"] * 1000,
        context["step_s"] * 1000,
        "ms of a session.compact() with a scripted summariser (baseline: a one-step turn)",
        "informational",
        None,
    )
    metric(
        "commits_per_step",
        ours["commits_per_step"],
        theirs["writes_per_step"] if theirs else None,
        "commits/step (baseline: LangGraph checkpoints/step)",
        "informational",
        None,
    )
    metric(
        "commits_2000_chunk_reply",
        fast["commits"],
        None,
        "commits (no delay)",
        "<= 40",
        fast["commits"] <= 40,
    )
    metric(
        "commits_paced_reply",
        paced["commits"],
        None,
        f"commits ({paced['chunks']} chunks, 1 ms apart, {paced['seconds']:.1f} s)",
        "a few per 100 ms",
        None,
    )

    print()
    print(f"{'metric':<28}{'value':>12}{'baseline':>12}{'ratio':>9}  target        unit")
    for r in results:
        base = "-" if r["baseline"] is None else f"{r['baseline']:.2f}"
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}"
        print(
            f"{r['metric']:<28}{r['value']:>12.2f}{base:>12}{ratio:>9}  {r['target']:<13} "
            f"{r['unit']}"
        )
    print()
    for r in results:
        print(json.dumps(r))


if __name__ == "__main__":
    main()
