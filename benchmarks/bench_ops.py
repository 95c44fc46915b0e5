"""Operations: backup and migration throughput against raw SQLite, and the scheduler's cost.

Run with ``python benchmarks/bench_ops.py`` (``--quick`` for smoke-test sizes; ``--events N``
to change the log size, 1,000,000 by default; ``--schedules N``, 10,000 by default). Prints
the environment, a table, then one JSON line per metric with the keys ``metric``,
``value``, ``baseline``, ``ratio``, ``unit``, ``target`` and ``ok``. The store is built once
per run through the port (appends of 10,000 events); its size and the seconds it took are
on the backup line (``events``, ``build_s``).

Metrics:

``backup_events_per_s``
    Events/s of ``nb.backup`` of an SQLite store holding ``--events`` events in 100
    sessions (200-byte payloads): the physical archive (format 2): SQLite's online backup
    of the file into the archive, then the CRC-32 of every 64 KiB block of the copy and
    every session's heads and digests computed by SQLite from the copy (on two threads
    beside the hashing), the manifest appended and the file flushed to disk. Baseline: a
    raw ``sqlite3`` backup of the same file (``Connection.backup``, the first part of
    ours). Target ratio >= 0.5.
``migrate_events_per_s``
    Events/s of ``nb.migrate`` of that store into a new SQLite store (SQLite to SQLite: the
    rows read as stored, each checked against its checksum, and appended as rows in
    atomic batches of 5,000, catalogue, inbox and watermarks included; see
    ``agentnb.ops._load``). Baseline: raw ``sqlite3`` copying the same rows
    (``executemany`` of the event rows into a table of the store's shape, 1,000 per
    transaction). Target ratio >= 0.5.
``scheduler_idle_cpu``
    CPU seconds per second of a ``Scheduler`` holding ``--schedules`` schedules (10 per
    session, none due) over 5 idle seconds, against one core (baseline 1.0). Its listing
    answers as a runtime's does (every session at first, then those active since the last
    look: none, as nothing else writes). Target <= 0.05.
``schedule_lateness_p95``
    Seconds between due time and firing (the claim durable: measured after its commit), p95,
    while ``--schedules`` schedules spread over a 20-second period all come due once (SQLite
    store, the sessions stubbed); claims are durable commits (SQLite ``synchronous=FULL``,
    the default), the due ones of a pass committed together (``CLAIM_BATCH`` per
    transaction). Baseline: the 1-second bound of the issue. Target <= 1.0.
``schedule_lateness_p95_normal``
    The same with the store at ``synchronous=NORMAL`` (commits not flushed to disk one by
    one): how much of the lateness is the flush of each claim.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import agentnb as nb
from agentnb.ops.schedules import Scheduler, add_schedule

SESSIONS = 100


def _fill(url: str, events: int) -> None:
    store = nb.open_store(url)
    per = events // SESSIONS
    try:
        for s in range(SESSIONS):
            key = nb.SessionKey("default", "bench", "ops-agent", f"s{s:03}")
            store.create_session(key)
            store.inbox_append(
                key, nb.Event.create("inbox/accepted", _submit(s)), dedupe_key=f"k{s}"
            )
            done = 0
            while done < per:
                n = min(10_000, per - done)
                store.append(
                    key,
                    [
                        nb.Event.create("acme/row", {"n": done + i, "text": "x" * 180})
                        for i in range(n)
                    ],
                    expected_seq=done,
                    batch_id=f"b{done}",
                )
                done += n
            store.advance_watermark(key, "bench-sink", done)
    finally:
        store.close()


def _submit(s: int) -> dict[str, Any]:
    return {
        "command_id": f"cmd_{s:06}",
        "kind": "submit",
        "input": f"task {s}",
        "key": f"k{s}",
        "data": {},
    }


def _raw_backup(path: Path, out: Path) -> float:
    started = time.perf_counter()
    src = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    dst = sqlite3.connect(out)
    src.backup(dst)
    dst.close()
    src.close()
    return time.perf_counter() - started


def _raw_copy(path: Path, out: Path) -> float:
    src = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    dst = sqlite3.connect(out)
    dst.execute(
        "CREATE TABLE events (session INTEGER NOT NULL, seq INTEGER NOT NULL, event_id TEXT "
        "NOT NULL, type TEXT NOT NULL, turn_id TEXT, run_id TEXT, required INTEGER NOT NULL, "
        "occurred_us INTEGER NOT NULL, schema_version INTEGER NOT NULL, payload TEXT, blob "
        "TEXT, crc INTEGER NOT NULL, batch_id TEXT, digest TEXT, PRIMARY KEY (session, seq))"
    )
    started = time.perf_counter()
    rows = src.execute("SELECT * FROM events ORDER BY session, seq")
    while batch := rows.fetchmany(1_000):
        with dst:
            dst.executemany("INSERT INTO events VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)", batch)
    elapsed = time.perf_counter() - started
    dst.close()
    src.close()
    return elapsed


class _Stub:
    def submit(self, input: str, key: str | None = None) -> None:
        pass

    def steer(self, input: str) -> None:
        pass

    def tasks(self) -> list[Any]:
        return []


def _schedules(
    url: str, count: int, every: float, spread: float, start: float
) -> list[nb.SessionKey]:
    """``count`` schedules, 10 per session, whose first due times fall in ``start`` ..
    ``start + spread`` (written at synchronous=NORMAL: the set-up is not measured)."""
    store = nb.open_store(url + "?synchronous=NORMAL")
    keys = []
    try:
        for s in range(max(1, count // 10)):
            key = nb.SessionKey("default", "bench", "ops-agent", f"sched{s:05}")
            store.create_session(key)
            keys.append(key)
            for _ in range(10):
                add_schedule(
                    store, key, "tick", every=every, now=start - every + random.uniform(0, spread)
                )
    finally:
        store.close()
    return keys


def _listing(keys: list[nb.SessionKey]) -> Any:
    """What a runtime's scheduler lists: every session at first, then those active since
    the last look (none here: nothing else writes)."""
    return lambda since: keys if since is None else []


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke-test sizes")
    parser.add_argument("--events", type=int, default=None)
    parser.add_argument("--schedules", type=int, default=None)
    args = parser.parse_args()
    events = args.events or (20_000 if args.quick else 1_000_000)
    count = args.schedules or (1_000 if args.quick else 10_000)
    period = 5.0 if args.quick else 20.0
    print(f"# python {platform.python_version()}, {platform.platform()}, {os.cpu_count()} cpus")
    print(f"# {events:_} events in {SESSIONS} sessions; {count:_} schedules")
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        src = root / "src.db"
        url = f"sqlite:///{src}"
        started = time.perf_counter()
        _fill(url, events)
        filled = time.perf_counter() - started
        print(f"# built the {events:_}-event store in {filled:.1f} s", flush=True)
        started = time.perf_counter()
        nb.backup(url, root / "a.anb")
        ours = time.perf_counter() - started
        raw = _raw_backup(src, root / "raw.db")
        results.append(
            _line(
                "backup_events_per_s",
                events / ours,
                events / raw,
                0.5,
                ">=",
                extra={"events": events, "build_s": round(filled, 1)},
            )
        )
        started = time.perf_counter()
        nb.migrate(url, f"sqlite:///{root / 'dst.db'}")
        ours = time.perf_counter() - started
        raw = _raw_copy(src, root / "rawcopy.db")
        results.append(_line("migrate_events_per_s", events / ours, events / raw, 0.5, ">="))

        sched_url = f"sqlite:///{root / 'sched.db'}"
        keys = _schedules(sched_url, count, 3600.0, 0.0, time.time() + 3600)  # none due
        store = nb.open_store(sched_url)
        scheduler = Scheduler(store, lambda k: _Stub(), _listing(keys), refresh=2.0)
        scheduler.tick()  # the first load, not idle
        scheduler.start()
        time.sleep(0.5)
        cpu, wall = _cpu(), time.perf_counter()
        time.sleep(5.0)
        idle = (_cpu() - cpu) / (time.perf_counter() - wall)
        scheduler.stop()
        store.close()
        results.append(_line("scheduler_idle_cpu", idle, 1.0, 0.05, "<=", unit="cpu_s/s"))

        for name, query in (
            ("schedule_lateness_p95", ""),
            ("schedule_lateness_p95_normal", "?synchronous=NORMAL"),
        ):
            results.append(_lateness(name, root / f"{name}.db", query, count, period))
    print(f"{'metric':<26}{'value':>14}{'baseline':>14}{'ratio':>9}  target   ok")
    for r in results:
        print(
            f"{r['metric']:<26}{r['value']:>14.4g}{r['baseline']:>14.4g}{r['ratio']:>9.3f}"
            f"  {r['target']:<8} {r['ok']}"
        )
    for r in results:
        print(json.dumps(r))
    return 0


def _lateness(name: str, path: Path, query: str, count: int, period: float) -> dict[str, Any]:
    """p95 seconds from due time to claim while every schedule comes due once within
    ``period`` seconds (the store at the synchronous level ``query`` names)."""
    start = time.time() + 3 + count * 0.003  # after the set-up
    keys = _schedules(f"sqlite:///{path}", count, 3600.0, period, start)
    store = nb.open_store(f"sqlite:///{path}{query}")
    scheduler = Scheduler(store, lambda k: _Stub(), _listing(keys), refresh=2.0)
    scheduler.tick()
    scheduler.start()
    deadline = time.monotonic() + (start - time.time()) + period + 120
    while scheduler.fired < count and time.monotonic() < deadline:
        time.sleep(0.2)
    scheduler.stop()
    store.close()
    late = sorted(scheduler.lateness)
    p95 = late[int(0.95 * (len(late) - 1))] if late else float("inf")
    extra = {"fired": scheduler.fired, "median": statistics.median(late) if late else None}
    return _line(name, max(p95, 1e-6), 1.0, 1.0, "<=", unit="s", extra=extra)


def _line(
    metric: str,
    value: float,
    baseline: float,
    target: float,
    sense: str,
    *,
    unit: str = "events/s",
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    ratio = value / baseline
    if sense == ">=":
        ok, shown = ratio >= target, f">={target:g}x"
    else:
        ok, shown = (value <= target), f"<={target:g}"
    record = {
        "metric": metric,
        "value": round(value, 6),
        "baseline": round(baseline, 6),
        "ratio": round(ratio, 4),
        "unit": unit,
        "target": shown,
        "ok": ok,
        **(extra or {}),
    }
    print(f"# measured {metric}: {value:.4g} {unit}", file=sys.stderr, flush=True)
    return record


if __name__ == "__main__":
    threading.current_thread().name = "bench"
    sys.exit(main())
