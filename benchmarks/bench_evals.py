"""What a replay costs, and how fast a dataset is built, in one run.

* **Replay vs fresh.** 200 turns are recorded (a scripted model -> tool -> model loop, one
  turn per session), built into a dataset, then replayed with ``nb.evals.replay`` (recorded
  tools, ``ScriptedModel``, ``concurrency=4``, no evaluators) into a throwaway store; the
  baseline runs the same 200 turns fresh (real tools) in 200 new sessions of a runtime on the
  same kind of store (``memory://``), four at a time. Target: replay <= 1.2x fresh.
* **Dataset build.** 10,000 completed turns (1,000 sessions of 10 turns, each turn seven
  events as the runtime writes them: start, model end, tool call and result, model end,
  output, completed) appended to an SQLite store, then ``nb.evals.dataset(url)`` timed.
  Target: <= 2 s on the project's machines; the rows/s are printed beside it. The same
  turns exported to Parquet (``ParquetSink``) and built from the export, timed too.

Prints a table and one JSON line per metric (``value``, ``baseline``, ``ratio``).

    python benchmarks/bench_evals.py [--turns 200] [--dataset-turns 10000] [--quick]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import agentnb as nb
from agentnb.events import Event
from agentnb.ids import SessionKey, new_id
from agentnb.stores import open_store


def make_agent() -> nb.Agent:
    @nb.tool
    def lookup(plan: str) -> str:
        """Price of a plan."""
        return f"{plan} costs 10 EUR"

    def reply(messages: list[nb.Message]) -> object:
        last = messages[-1]
        if last.role == "user":
            return nb.ToolCall("lookup", {"plan": last.text.split()[-1]})
        return f"Answer: {last.text}"

    return nb.Agent(name="bench", agent_id="bench", model=nb.ScriptedModel(reply), tools=[lookup])


def fresh(turns: int, store: str) -> float:
    """Seconds to run ``turns`` turns fresh, one per session, four at a time."""
    with nb.Runtime(make_agent(), store=store) as rt:
        started = time.perf_counter()
        with ThreadPoolExecutor(4) as pool:
            outcomes = list(
                pool.map(lambda i: rt.session(f"f{i}").run(f"price of plan{i}"), range(turns))
            )
        took = time.perf_counter() - started
    assert all(o.status == "completed" for o in outcomes)
    return took


def replay_cost(turns: int) -> float:
    """Seconds ``nb.evals.replay`` takes for ``turns`` recorded turns (memory:// both ways)."""
    store = nb.MemoryStore()
    with nb.Runtime(make_agent(), store=store) as rt:
        for i in range(turns):
            rt.session(f"r{i}").run(f"price of plan{i}")
        dataset = nb.evals.dataset(rt)
    assert len(dataset) == turns
    started = time.perf_counter()
    experiment = nb.evals.replay(dataset, make_agent(), concurrency=4, progress=False)
    took = time.perf_counter() - started
    assert sum(r.unrecorded_calls for r in experiment.results) == 0
    return took


def synthetic_turn(turn_id: str, i: int) -> list[Event]:
    call = new_id("call")
    usage = {"model": "scripted", "status": "completed", "input_tokens": 150, "output_tokens": 9}
    message = {"id": new_id("msg"), "role": "assistant", "text": f"Answer {i}", "turn_id": turn_id}
    specs = [
        ("turn/start", {"input": f"price of plan{i}"}),
        ("model/end", {"model_call_id": new_id("mc"), **usage}),
        ("tool/requested", {"call_id": call, "name": "lookup", "arguments": {"plan": f"p{i}"}}),
        ("tool/result", {"call_id": call, "name": "lookup", "status": "success", "output": "10"}),
        ("model/end", {"model_call_id": new_id("mc"), **usage}),
        ("turn/output", {"message": message}),
        ("turn/completed", {}),
    ]
    return [Event.create(t, p, turn_id=turn_id) for t, p in specs]


def dataset_cost(turns: int, root: Path) -> tuple[float, int]:
    """Seconds ``nb.evals.dataset`` takes over ``turns`` turns in an SQLite store; cases."""
    url = f"sqlite:///{root / 'big.sqlite'}"
    store = open_store(url)
    try:
        per_session = 10
        for s in range(turns // per_session):
            key = SessionKey("default", "default", "bench", f"s{s:05d}")
            store.create_session(key)
            events = [
                e
                for t in range(per_session)
                for e in synthetic_turn(new_id("turn"), s * per_session + t)
            ]
            store.append(key, events, expected_seq=0, batch_id=f"b{s}")
    finally:
        store.close()
    started = time.perf_counter()
    cases = len(nb.evals.dataset(url))
    return time.perf_counter() - started, cases


def export_cost(root: Path) -> tuple[float, int]:
    """The same, from a Parquet export of that store (what an analyst usually holds)."""
    from agentnb.export import Exporter
    from agentnb.export.parquet import ParquetSink

    store = open_store(f"sqlite:///{root / 'big.sqlite'}")
    sink = ParquetSink(root / "export")
    try:
        for record in store.list_sessions():
            Exporter(nb.SessionLog(store, record.key), sink).drain()
    finally:
        store.close()
    started = time.perf_counter()
    cases = len(nb.evals.dataset(root / "export"))
    return time.perf_counter() - started, cases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--dataset-turns", type=int, default=10_000)
    parser.add_argument("--quick", action="store_true", help="20 replayed, 1,000 built")
    args = parser.parse_args()
    turns, big = (20, 1_000) if args.quick else (args.turns, args.dataset_turns)
    with tempfile.TemporaryDirectory() as tmp:
        replayed = replay_cost(turns)
        baseline = fresh(turns, "memory://")
        built, cases = dataset_cost(big, Path(tmp))
        exported, from_export = export_cost(Path(tmp))
    assert cases == from_export == big
    rows = [
        {
            "metric": f"replay of {turns} recorded turns (s)",
            "value": round(replayed, 3),
            "baseline": round(baseline, 3),
            "ratio": round(replayed / baseline, 3),
            "target": "<= 1.2x fresh",
        },
        {
            "metric": f"dataset from {big} turns (s)",
            "value": round(built, 3),
            "baseline": 2.0,
            "ratio": round(built / 2.0, 3),
            "target": "<= 2 s",
            "rows_per_s": round(big / built),
        },
        {
            "metric": f"dataset from {big} exported turns (s)",
            "value": round(exported, 3),
            "baseline": 2.0,
            "ratio": round(exported / 2.0, 3),
            "target": "<= 2 s",
            "rows_per_s": round(big / exported),
        },
    ]
    print(f"{'metric':<40} {'value':>9} {'baseline':>9} {'ratio':>7}  target")
    for row in rows:
        print(
            f"{row['metric']:<40} {row['value']:>9} {row['baseline']:>9} {row['ratio']:>7}  "
            f"{row['target']}"
        )
    print(
        f"dataset build: {rows[1]['rows_per_s']:,} turns/s from SQLite, "
        f"{rows[2]['rows_per_s']:,} turns/s from Parquet"
    )
    for row in rows:
        print(json.dumps(row))


if __name__ == "__main__":
    main()
