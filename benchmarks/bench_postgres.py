"""PostgresStore throughput and wake-up latency, side by side with raw psycopg.

Run with ``python benchmarks/bench_postgres.py`` (``--quick`` for smoke-test sizes). It starts
a throwaway PostgreSQL cluster with fsync on (``tests/pg.py``: ``initdb`` + ``pg_ctl`` on a
unix socket), or uses ``--url postgresql://...`` (two databases are created there). Prints
the environment, a table, then one JSON line per metric with the keys ``metric``, ``value``,
``baseline``, ``ratio``, ``unit``, ``target`` and ``ok`` (latency lines add ``p95`` and
``baseline_p95``).

Metrics:

``single_commit``
    Durable commits/s of ``PostgresStore.append`` with one event per call against raw
    psycopg inserting the very rows the store writes (the store's own encoder, batch id and
    digest on the first row, same table and indexes), one autocommit ``INSERT`` per commit.
    Both at ``synchronous_commit=on`` with fsync on. Target ratio >= 0.8.
``batch100_commit``
    Events/s with 100 events per ``append`` against raw psycopg ``executemany`` of the same
    100 rows in one transaction (psycopg pipelines it). Target ratio >= 0.6.
``wake_ms``
    Commit-to-wake latency in another process: a child process commits single events a few
    ms apart; this process blocks in ``wait_for_head`` (how ``follow()``, ``Session.wait``,
    the widgets and the live exporter wait) and notes when it wakes. Latency is the wake
    time minus the moment the child called ``append`` (same machine clock), so it includes
    the durable commit itself; ``commit_ms`` says how long the child's commits took.
    Baseline: raw psycopg, the child inserting and ``NOTIFY``-ing in one statement, this
    process blocked in a bare ``Connection.notifies()``. Median (``value``) and p95 (the
    JSON line's ``p95``, ``baseline_p95``); target ratio <= 3.
``read_arrow_10k``
    Milliseconds for ``read_arrow`` of 10,000 events (``COPY ... (FORMAT csv)`` parsed by
    pyarrow, then checked) against the port's row-by-row default (``read_raw`` then Arrow).
    Target ratio <= 1.0. Skipped without pyarrow.

Both sides of a commit comparison run the same loop shape over pre-built inputs, after a
warm-up, in interleaved rounds so that disk and CPU drift hit both alike; a ratio is the
median of per-round ratios. What the store is charged for beyond the raw insert: argument
checks and stamping, JSON and checksum encoding, the guarded update of the session's head
row (expected head, lease fence, inbox head) and the ``NOTIFY`` in the same transaction.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests.pg (the throwaway cluster), benchmarks.bench_store

import psycopg  # noqa: E402

from agentnb.events import Event  # noqa: E402
from agentnb.ids import SessionKey, new_id  # noqa: E402
from agentnb.stores import _rows  # noqa: E402
from agentnb.stores.base import SessionStore  # noqa: E402
from agentnb.stores.postgres import PostgresStore  # noqa: E402
from benchmarks.bench_store import make_events  # noqa: E402

KEY = SessionKey("bench", "user", "agent", "session")
_INSERT_ROW = (
    f"INSERT INTO agentnb.events (session, {_rows.COLUMNS}, batch_id, digest) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
)


@dataclass(frozen=True)
class Sizes:
    single_commits: int
    batches: int
    batch_size: int
    rounds: int
    wakes: int
    read_events: int
    reads: int


DEFAULT = Sizes(3_000, 300, 100, 10, 300, 10_000, 20)
QUICK = Sizes(300, 30, 100, 4, 40, 10_000, 5)


@dataclass(frozen=True)
class Result:
    metric: str
    value: float
    baseline: float
    ratio: float
    unit: str
    target: str
    higher_is_better: bool
    bound: float
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.ratio >= self.bound if self.higher_is_better else self.ratio <= self.bound

    def as_json(self) -> str:
        record: dict[str, Any] = {
            "metric": self.metric,
            "value": round(self.value, 3),
            "baseline": round(self.baseline, 3),
            "ratio": round(self.ratio, 3),
            "unit": self.unit,
            "target": self.target,
            "ok": self.ok,
        }
        record.update({k: round(v, 3) for k, v in self.extra.items()})
        return json.dumps(record)


# --------------------------------------------------------------------------------------------
# The two sides of a commit comparison


def encoded_rows(
    events: Sequence[Event], first_seq: int, sid: int, batch_id: str
) -> list[tuple[object, ...]]:
    """The rows the store writes for ``events`` (its encoder; batch id and digest first)."""
    import hashlib

    hasher = hashlib.sha256()
    rows = [_rows.encode(e, first_seq + i, _no_blob, hasher) for i, e in enumerate(events)]
    digest = hasher.hexdigest()
    return [
        (sid, *row, batch_id if i == 0 else None, digest if i == 0 else None)
        for i, row in enumerate(rows)
    ]


def _no_blob(data: bytes) -> str:
    raise AssertionError("benchmark payloads are small; no blobs expected")


class RawSide:
    """Plain psycopg on the store's schema: autocommit inserts, a transaction per batch."""

    def __init__(self, url: str) -> None:
        PostgresStore(url).close()  # the same schema and indexes as the store side
        self.conn = psycopg.connect(url, autocommit=True)
        self.conn.execute("SET synchronous_commit = on")
        self.sid = 1

    def commit(self, rows: Sequence[tuple[object, ...]]) -> None:
        if len(rows) == 1:
            self.conn.execute(_INSERT_ROW, rows[0])
            return
        with self.conn.transaction(), self.conn.cursor() as cur:
            cur.executemany(_INSERT_ROW, rows)

    def close(self) -> None:
        self.conn.close()


class StoreSide:
    """``PostgresStore.append`` with the caller's bookkeeping (expected head, batch ids)."""

    def __init__(self, url: str) -> None:
        self.store = PostgresStore(url)
        self.store.create_session(KEY)
        self.head = self.store.head(KEY)

    def commit(self, item: tuple[list[Event], str]) -> None:
        batch, batch_id = item
        self.store.append(KEY, batch, expected_seq=self.head, batch_id=batch_id)
        self.head += len(batch)

    def close(self) -> None:
        self.store.close()


def timed(op: Any, items: Sequence[Any]) -> float:
    start = time.perf_counter()
    for item in items:
        op(item)
    return time.perf_counter() - start


def compare_commits(
    store_url: str, raw_url: str, commits: int, batch_size: int, rounds: int
) -> tuple[float, float, float]:
    """Median events/s of (store, raw) and the median per-round ratio."""
    store = StoreSide(store_url)
    raw = RawSide(raw_url)
    raw_seq = 1 + _max_seq(raw_url)
    per_round = max(1, commits // rounds)
    warmup = max(5, per_round // 10)

    def inputs(n: int) -> tuple[list[Any], list[Any]]:
        nonlocal raw_seq
        store_items: list[Any] = []
        raw_items: list[Any] = []
        for _ in range(n):
            events = make_events(batch_size)
            batch_id = new_id("batch")
            store_items.append((events, batch_id))
            raw_items.append(encoded_rows(events, raw_seq, raw.sid, batch_id))
            raw_seq += batch_size
        return store_items, raw_items

    store_in, raw_in = inputs(warmup)
    timed(store.commit, store_in)
    timed(raw.commit, raw_in)
    store_rates: list[float] = []
    raw_rates: list[float] = []
    for r in range(rounds):
        store_in, raw_in = inputs(per_round)
        sides = [(store.commit, store_in, store_rates), (raw.commit, raw_in, raw_rates)]
        if r % 2:
            sides.reverse()
        for op, items, rates in sides:
            rates.append(per_round * batch_size / timed(op, items))
    store.close()
    raw.close()
    ratios = [s / r for s, r in zip(store_rates, raw_rates, strict=True)]
    return statistics.median(store_rates), statistics.median(raw_rates), statistics.median(ratios)


def _max_seq(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT coalesce(max(seq), 0) FROM agentnb.events").fetchone()
        return int(row[0]) if row else 0


# --------------------------------------------------------------------------------------------
# Wake-up latency across processes


def writer_child(url: str, mode: str, count: int) -> None:
    """The other process: ``count`` single commits a few ms apart; prints when each returned."""
    import random

    rng = random.Random(5)
    calls: dict[int, tuple[float, float]] = {}
    if mode == "store":
        store = PostgresStore(url)
        head = store.head(KEY)
        for _ in range(count):
            time.sleep(rng.uniform(0.005, 0.015))
            events = make_events(1)
            start = time.time()
            store.append(KEY, events, expected_seq=head, batch_id=new_id("batch"))
            calls[head + 1] = (start, time.time())
            head += 1
        store.close()
    else:
        with psycopg.connect(url, autocommit=True) as conn:
            for seq in range(1, count + 1):
                time.sleep(rng.uniform(0.005, 0.015))
                start = time.time()
                conn.execute(
                    "WITH i AS (INSERT INTO wake (seq) VALUES (%s) RETURNING seq) "
                    "SELECT pg_notify('wake', seq::text) FROM i",
                    (seq,),
                )
                calls[seq] = (start, time.time())
    print(json.dumps(calls), flush=True)


def _spawn_writer(url: str, mode: str, count: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, __file__, "--writer", mode, "--url", url, "--count", str(count)],
        stdout=subprocess.PIPE,
        text=True,
    )


def _latencies(wakes: dict[int, float], out: str) -> tuple[list[float], list[float]]:
    """(commit call to wake, commit call to return) in ms, per commit that woke us."""
    calls = {int(k): v for k, v in json.loads(out.strip().splitlines()[-1]).items()}
    seqs = [seq for seq in sorted(calls) if seq in wakes]
    return (
        [(wakes[seq] - calls[seq][0]) * 1000 for seq in seqs],
        [(calls[seq][1] - calls[seq][0]) * 1000 for seq in seqs],
    )


def wake_store(url: str, count: int) -> tuple[list[float], list[float]]:
    store = PostgresStore(url)
    store.create_session(KEY)
    store.poll_interval = 60.0  # woken by NOTIFY only
    head = store.head(KEY)
    store.wait_for_head(KEY, head, 0.01)  # the listener starts
    time.sleep(0.5)
    wakes: dict[int, float] = {}
    child = _spawn_writer(url, "store", count)
    while head < count:
        new = store.wait_for_head(KEY, head, 30.0)
        now = time.time()
        if new == head:
            break
        for seq in range(head + 1, new + 1):
            wakes[seq] = now
        head = new
    out, _ = child.communicate(timeout=60)
    store.close()
    return _latencies(wakes, out)


def wake_raw(url: str, count: int) -> tuple[list[float], list[float]]:
    wakes: dict[int, float] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS wake (seq bigint PRIMARY KEY)")
        conn.execute("LISTEN wake")
        child = _spawn_writer(url, "raw", count)
        for note in conn.notifies(timeout=60):
            wakes[int(note.payload)] = time.time()
            if len(wakes) == count:
                break
    out, _ = child.communicate(timeout=60)
    return _latencies(wakes, out)


def p95(values: Sequence[float]) -> float:
    return sorted(values)[max(0, round(len(values) * 0.95) - 1)]


# --------------------------------------------------------------------------------------------


def compare_read_arrow(url: str, n: int, reads: int) -> tuple[float, float] | None:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return None
    store = PostgresStore(url)
    key = SessionKey("bench", "user", "agent", "reads")
    store.create_session(key)
    head = 0
    while head < n:
        size = min(1000, n - head)
        store.append(key, make_events(size), expected_seq=head, batch_id=new_id("batch"))
        head += size
    copy_times: list[float] = []
    row_times: list[float] = []

    def by_copy() -> Any:
        return store.read_arrow(key, 0, n)

    def row_by_row() -> Any:  # the port's default, which PostgresStore overrides
        return SessionStore._read_arrow(store, key, 0, n)

    for i in range(reads + 1):
        pairs = [(by_copy, copy_times), (row_by_row, row_times)]
        if i % 2:
            pairs.reverse()
        for read, times in pairs:
            t0 = time.perf_counter()
            table = read()
            times.append(time.perf_counter() - t0)
            assert table.num_rows == n
    store.close()
    return statistics.median(copy_times[1:]) * 1e3, statistics.median(row_times[1:]) * 1e3


def run(sizes: Sizes, url: str | None) -> list[Result]:
    from tests.pg import Cluster

    cluster = None
    if url is None:
        cluster = Cluster(Path(tempfile.mkdtemp(prefix="agentnb-bench-pg-")), fsync=True)
        cluster.start()

        def database() -> str:
            return cluster.database()

    else:
        base = url

        def database() -> str:
            name = f"agentnb_bench_{new_id('db').split('_')[-1].lower()}"
            with psycopg.connect(base, autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{name}"')
            return psycopg.conninfo.make_conninfo(base, dbname=name)

    try:
        with psycopg.connect(database()) as conn:
            row = conn.execute("SELECT version(), current_setting('fsync')").fetchone()
            print(f"server: {row[0].split(',')[0] if row else '?'}; fsync={row and row[1]}")
        results: list[Result] = []
        print(f"single-event commits: {sizes.single_commits} per side ...", flush=True)
        store, raw, ratio = compare_commits(
            database(), database(), sizes.single_commits, 1, sizes.rounds
        )
        results.append(Result("single_commit", store, raw, ratio, "commits/s", ">= 0.8", True, 0.8))
        size = sizes.batch_size
        print(f"{size}-event batch commits: {sizes.batches} per side ...", flush=True)
        store, raw, ratio = compare_commits(
            database(), database(), sizes.batches, size, sizes.rounds
        )
        results.append(
            Result(f"batch{size}_commit", store, raw, ratio, "events/s", ">= 0.6", True, 0.6)
        )
        print(f"commit-to-wake in another process: {sizes.wakes} commits per side ...", flush=True)
        ours, our_commits = wake_store(database(), sizes.wakes)
        theirs, their_commits = wake_raw(database(), sizes.wakes)
        med, base_med = statistics.median(ours), statistics.median(theirs)
        results.append(
            Result(
                "wake_ms",
                med,
                base_med,
                med / base_med,
                "ms",
                "<= 3",
                False,
                3.0,
                {
                    "p95": p95(ours),
                    "baseline_p95": p95(theirs),
                    "commit_ms": statistics.median(our_commits),
                    "baseline_commit_ms": statistics.median(their_commits),
                    "samples": len(ours),
                },
            )
        )
        print(f"read_arrow of {sizes.read_events:,} events: {sizes.reads} reads ...", flush=True)
        reads = compare_read_arrow(database(), sizes.read_events, sizes.reads)
        if reads is not None:
            copy_ms, row_ms = reads
            results.append(
                Result(
                    "read_arrow_10k", copy_ms, row_ms, copy_ms / row_ms, "ms", "<= 1.0", False, 1.0
                )
            )
        return results
    finally:
        if cluster is not None:
            cluster.remove()


def table(results: Sequence[Result]) -> str:
    header = ("metric", "agentnb", "raw psycopg", "unit", "ratio", "target", "ok")
    rows = [header]
    for r in results:
        rows.append(
            (
                r.metric,
                f"{r.value:,.2f}",
                f"{r.baseline:,.2f}",
                r.unit,
                f"{r.ratio:.3f}",
                r.target,
                "yes" if r.ok else "NO",
            )
        )
        for label, ours, theirs in (
            ("  p95", "p95", "baseline_p95"),
            ("  (of which commit)", "commit_ms", "baseline_commit_ms"),
        ):
            if ours in r.extra:
                rows.append(
                    (label, f"{r.extra[ours]:,.2f}", f"{r.extra[theirs]:,.2f}", r.unit, "", "", "")
                )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [
        "  ".join(
            cell.ljust(w) if i in (0, 3, 5, 6) else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small sizes for smoke tests")
    parser.add_argument(
        "--url",
        help="an existing server to use (databases are created there); default: "
        "a throwaway cluster with fsync on",
    )
    parser.add_argument("--writer", choices=["store", "raw"], help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.writer:
        writer_child(args.url, args.writer, args.count)
        return 0
    sizes = QUICK if args.quick else DEFAULT
    print(
        f"python {platform.python_version()}, psycopg {psycopg.__version__} "
        f"(libpq {psycopg.pq.version()}), {platform.system()} {platform.machine()}, "
        f"{'quick' if args.quick else 'default'} sizes",
        flush=True,
    )
    results = run(sizes, args.url)
    print()
    print(table(results))
    print()
    for r in results:
        print(r.as_json())
    return 0


if __name__ == "__main__":
    sys.exit(main())
