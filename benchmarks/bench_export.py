"""Export and analysis benchmark: agentnb's Parquet export and ``turns`` view vs raw tools.

Run with ``make bench`` or ``python benchmarks/bench_export.py [--quick] [--events N]``.
Prints the environment, a table, then one JSON line per metric with the keys ``metric``,
``value``, ``baseline``, ``ratio``, ``unit``, ``target`` and ``ok``.

Metrics (same run, same machine, same files):

``export_parquet``
    Seconds for ``Exporter(store, ParquetSink(dir)).drain()`` of N events (default 1,000,000;
    100,000 with ``--quick``) from an SQLite store: reading the log through the store API
    (checksums, decoding), flattening, writing partitioned files with the staging/rename/
    manifest protocol and fsyncs. Baseline: raw pyarrow writing the very same rows (the
    exported columns, held in memory as Python column lists) as a Hive-partitioned dataset
    (``pa.table`` + ``pq.write_to_dataset``). Target ratio <= 3.
``turns_view``
    Seconds to materialise ``SELECT * FROM turns`` (agentnb's view: status, input and output,
    timings, counts, tokens) over the export, opened the way analysts open it
    (``agentnb.analysis.connection``), against a raw DuckDB ``GROUP BY turn_id`` (min/max
    time, count) over the export's data files. The view combines the turn rollups the sink
    committed with each data file. Median of interleaved rounds. Target ratio <= 1.5.
``turns_from_events`` (for information, no target)
    The same view with its partial aggregates rolled up from the events at query time (what
    it costs over a DuckDB export, a live store, or a Parquet export without rollups).

The sessions are realistic: turns of 24 events (model calls with usage, tool calls with
results, checkpoints), 10,000 events per session.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agentnb.events import Event
from agentnb.export import Exporter, ParquetSink
from agentnb.ids import SessionKey, new_id
from agentnb.stores import open_store

PER_SESSION = 10_000


def _turn(turn: str, run: str, i: int) -> list[Event]:
    def ev(type_: str, payload: dict[str, Any]) -> Event:
        return Event.create(type_, payload, turn_id=turn, run_id=run)

    cmd, step, mc, call = new_id("cmd"), new_id("step"), new_id("mc"), f"call_{i}"
    mc2, step2 = new_id("mc"), new_id("step")
    msg = {"id": f"msg_{cmd}", "role": "user", "text": f"task {i}", "turn_id": turn}
    return [
        ev("turn/start", {"input": f"task {i}", "command_id": cmd}),
        ev("run/start", {"reason": "submit", "command_id": cmd}),
        ev("input/received", {"input_id": cmd, "kind": "submit", "text": f"task {i}"}),
        ev("message/user", {"message": msg}),
        ev("step/start", {"step_id": step, "iteration": 1}),
        ev("model/dispatch", {"model_call_id": mc}),
        ev("model/chunk", {"model_call_id": mc, "index": 0, "text": "let me look"}),
        ev("model/end", {"model_call_id": mc, "status": "completed", "model": "m",
                         "input_tokens": 100 + i % 50, "output_tokens": 20, "latency_ms": 35.0,
                         "finish_reason": "tool_calls"}),
        ev("tool/requested", {"call_id": call, "name": "lookup", "arguments": {"q": i}}),
        ev("tool/decision", {"call_id": call, "decision": "allowed"}),
        ev("tool/dispatch", {"call_id": call, "name": "lookup", "arguments": {"q": i}}),
        ev("action/start", {"call_id": call, "name": "lookup"}),
        ev("action/end", {"call_id": call, "name": "lookup", "status": "returned"}),
        ev("tool/result", {"call_id": call, "name": "lookup", "status": "success",
                           "output": f"result {i}", "duration_ms": 12.5}),
        ev("state/checkpoint", {"reason": "step", "state": {"turn_id": turn, "step": 1}}),
        ev("input/applied", {"input_ids": [cmd]}),
        ev("step/end", {"step_id": step, "status": "continued"}),
        ev("step/start", {"step_id": step2, "iteration": 2}),
        ev("model/dispatch", {"model_call_id": mc2}),
        ev("model/end", {"model_call_id": mc2, "status": "completed", "model": "m",
                         "input_tokens": 150, "output_tokens": 30, "latency_ms": 40.0,
                         "finish_reason": "stop"}),
        ev("turn/output", {"message": {"id": f"msg_{mc2}", "role": "assistant",
                                       "text": f"answer {i}", "turn_id": turn}}),
        ev("step/end", {"step_id": step2, "status": "terminal"}),
        ev("turn/completed", {}),
        ev("run/end", {"status": "completed"}),
    ]  # fmt: skip


def build_store(path: Path, events: int) -> tuple[Any, int]:
    store = open_store(f"sqlite:///{path}?synchronous=OFF")
    written = 0
    session = 0
    while written < events:
        key = SessionKey("bench", f"user{session % 7}", "agent", f"s{session}")
        store.create_session(key)
        head = 0
        target = min(PER_SESSION, events - written)
        batch: list[Event] = []
        i = 0
        while head + len(batch) < target:
            batch += _turn(new_id("turn"), new_id("run"), i)[: target - head - len(batch)]
            i += 1
            if len(batch) >= 2_000 or head + len(batch) >= target:
                store.append(key, batch, expected_seq=head, batch_id=new_id("batch"))
                head += len(batch)
                batch = []
        written += head
        session += 1
    return store, session


def _median_pair(run_a: Any, run_b: Any, rounds: int) -> tuple[float, float]:
    a, b = [], []
    for _ in range(rounds):
        t = time.perf_counter()
        run_a()
        a.append(time.perf_counter() - t)
        t = time.perf_counter()
        run_b()
        b.append(time.perf_counter() - t)
    return statistics.median(a), statistics.median(b)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="100,000 events instead of 1,000,000")
    parser.add_argument("--events", type=int, default=None, help="number of events to export")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of the query comparison")
    args = parser.parse_args(argv)
    events = args.events or (100_000 if args.quick else 1_000_000)

    import duckdb
    import pyarrow as pa
    import pyarrow.parquet as pq

    from agentnb.export.columns import connect

    tmp = Path(tempfile.mkdtemp(prefix="agentnb-bench-export-"))
    try:
        versions = f"duckdb {duckdb.__version__}, pyarrow {pa.__version__}"
        print(f"python {platform.python_version()} on {platform.platform()}; {versions}")
        print(f"{events:,} events")
        t = time.perf_counter()
        store, sessions = build_store(tmp / "store.sqlite", events)
        print(f"setup: {sessions} sessions written in {time.perf_counter() - t:.1f}s")

        # Warm-up on a small store, so first-use imports (pyarrow.compute, duckdb internals)
        # are not charged to one side: the baseline's pyarrow is already loaded too.
        warm_store, _ = build_store(tmp / "warm.sqlite", 2_000)
        Exporter(warm_store, ParquetSink(tmp / "warm-export"), progress=False).drain()
        warm_store.close()

        root = tmp / "export"
        t = time.perf_counter()
        delivered = Exporter(store, ParquetSink(root), progress=False).drain()
        export_s = time.perf_counter() - t
        assert delivered == events, delivered
        sink = ParquetSink(root)
        files = sink.files()

        # The same rows, in memory as Python column lists (what a program would hand pyarrow).
        table = pa.concat_tables([pq.read_table(f) for f in files])
        con = connect()
        con.register("t", table)
        table = con.sql(
            "SELECT *, CAST(occurred_at AT TIME ZONE 'UTC' AS DATE) AS event_date FROM t"
        ).to_arrow_table()
        con.close()
        schema = table.schema
        columns = {name: table.column(name).to_pylist() for name in schema.names}
        del table
        raw_root = tmp / "raw"
        t = time.perf_counter()
        raw = pa.table(columns, schema=schema)
        pq.write_to_dataset(raw, str(raw_root), partition_cols=["event_date"])
        raw_s = time.perf_counter() - t
        del raw, columns

        from agentnb import analysis

        with analysis.connection(root) as q_con:

            def turns_view() -> None:
                q_con.sql("SELECT * FROM turns").to_arrow_table()

            def raw_group_by() -> None:
                q_con.sql(
                    "SELECT turn_id, min(occurred_at) AS started_at, "
                    "max(occurred_at) AS ended_at, count(*) AS events "
                    f"FROM read_parquet({files!r}) GROUP BY turn_id"
                ).to_arrow_table()

            turns_view()
            raw_group_by()  # warm both (file metadata, OS cache)
            view_s, group_s = _median_pair(turns_view, raw_group_by, args.rounds)
            n_turns = q_con.execute("SELECT count(*) FROM turns").fetchone()
            # The same view, its turn parts rolled up from the events at query time.
            q_con.execute("CREATE OR REPLACE VIEW turn_parts AS SELECT * FROM turn_rollup")
            turns_view()
            events_s, group2_s = _median_pair(turns_view, raw_group_by, args.rounds)
        store.close()

        turns = f"{n_turns[0] if n_turns else 0:,} turns"
        metrics = [
            ("export_parquet", export_s, raw_s, "s", 3.0, f"{events:,} events, {len(files)} files"),
            ("turns_view", view_s, group_s, "s", 1.5, f"{turns}, from the committed rollups"),
            ("turns_from_events", events_s, group2_s, "s", None, f"{turns}, rolled up at query"),
        ]
        print(f"\n{'metric':<18} {'agentnb':>10} {'baseline':>10} {'ratio':>7} {'target':>8}  note")
        for name, value, base, unit, target, note in metrics:
            ratio = value / base
            goal = "-" if target is None else f"<= {target}"
            print(f"{name:<18} {value:>9.3f}{unit} {base:>9.3f}{unit} {ratio:>7.2f} "
                  f"{goal:>8}  {note}")  # fmt: skip
        for name, value, base, unit, target, _ in metrics:
            ratio = value / base
            print(json.dumps({
                "metric": name, "value": round(value, 4), "baseline": round(base, 4),
                "ratio": round(ratio, 3), "unit": unit,
                "target": None if target is None else f"<= {target}",
                "ok": None if target is None else ratio <= target,
            }))  # fmt: skip
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
