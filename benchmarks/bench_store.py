"""SQLiteStore throughput and read-cost benchmark, side by side with raw sqlite3.

Run with ``make bench`` (default sizes) or ``python benchmarks/bench_store.py --quick``.
Prints the environment, a table, then one JSON line per metric with the keys ``metric``,
``value``, ``baseline``, ``ratio``, ``unit``, ``target`` and ``ok``.

Metrics:

``single_commit``
    Durable commits/s of ``SQLiteStore.append`` with one event per call (``synchronous=FULL``)
    against a raw ``sqlite3`` loop that inserts the very rows the store writes (same table,
    same values from the store's own encoder), one row per ``BEGIN IMMEDIATE``/``COMMIT``,
    with the same pragmas (WAL, ``synchronous=FULL``). Target ratio >= 0.8.
``batch100_commit``
    Events/s with 100 events per ``append`` against raw sqlite3 inserting 100 rows per
    transaction. Target ratio >= 0.6.
``read_after_end_vs_start``
    Median time of ``read_after(seq, 100)`` near the end of a long session over the median
    near its start. Target ratio <= 1.5: a read costs the same however long the history is.
``list_newest50_10k_vs_100``
    Median time of ``find_sessions(limit=50)`` (the newest activity first, as
    ``runtime.sessions()`` reads it) on a store of 10,000 sessions over the same on 100
    sessions. Target ratio <= 2.0: the first page reads an index range, not the catalogue.
``delete_<n>_events_in_10k_vs_100`` (``10k``; ``1k`` with ``--quick``)
    Median time of ``delete_session`` of one session holding 10,000 events (1,000 with
    ``--quick``), WAL checkpoint included, in a store of 10,000 sessions over the same in a
    store of 100. Target ratio <= 2.0: a delete touches only that session's rows.
``cold_open_<long>_vs_<short>`` (``cold_open_1m_vs_1k``; ``100k`` with ``--quick``)
    Median time to open a session cold (a new ``SQLiteStore`` on the file, ``head()``, first
    ``read_after`` of the last 100 events) for the long session over a 1,000-event one.
    "Cold" means a new store object and connection in this process, not an empty OS page
    cache. Target ratio <= 2.0: opening does not scan the history.

Both sides of a comparison run the same loop shape over pre-built inputs (events for the
store, the encoded rows for raw sqlite3), after a warm-up, in interleaved rounds so that disk
and CPU drift hit both sides alike. Rates are medians over the rounds; a commit ratio is the
median of the per-round ratios (store over raw, measured back to back). The raw side gets rows
already encoded, batch id and digest on each batch's first row as the store writes them (so
both maintain the same replay index), and the store's own work (validation and stamping,
batch digest, JSON and checksum encoding, the guarded lease/head check) is exactly what the
ratio charges it for.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from agentnb.events import Event, event_digest
from agentnb.ids import SessionKey, new_id
from agentnb.stores import _rows
from agentnb.stores.base import MAX_BATCH
from agentnb.stores.sqlite import _SCHEMA, SQLiteStore

KEY = SessionKey("bench", "user", "agent", "session")
READ_LIMIT = 100


@dataclass(frozen=True)
class Sizes:
    single_commits: int
    batches: int
    batch_size: int
    rounds: int
    long_session: int
    short_session: int
    reads: int
    opens: int
    deleted_events: int = 10_000


DEFAULT = Sizes(
    single_commits=3_000,
    batches=300,
    batch_size=100,
    rounds=10,
    long_session=1_000_000,
    short_session=1_000,
    reads=2_000,
    opens=30,
)
QUICK = Sizes(
    single_commits=300,
    batches=30,
    batch_size=100,
    rounds=4,
    long_session=100_000,
    short_session=1_000,
    reads=200,
    opens=5,
    deleted_events=1_000,
)


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

    @property
    def ok(self) -> bool:
        return self.ratio >= self.bound if self.higher_is_better else self.ratio <= self.bound

    def as_json(self) -> str:
        return json.dumps(
            {
                "metric": self.metric,
                "value": round(self.value, 3),
                "baseline": round(self.baseline, 3),
                "ratio": round(self.ratio, 3),
                "unit": self.unit,
                "target": self.target,
                "ok": self.ok,
            }
        )


# --------------------------------------------------------------------------------------------
# Realistic small events


def make_events(n: int) -> list[Event]:
    """``n`` fresh events alternating ``tool/result`` and ``model/end`` (a few hundred bytes)."""
    turn, run = new_id("turn"), new_id("run")
    out: list[Event] = []
    for i in range(n):
        if i % 2:
            out.append(
                Event.create(
                    "model/end",
                    {
                        "model_call_id": f"mc_{i:08d}",
                        "status": "completed",
                        "model": "gpt-4.1-mini",
                        "input_tokens": 1_200 + i % 500,
                        "output_tokens": 180 + i % 90,
                        "latency_ms": 812.5 + i % 300,
                        "finish_reason": "tool_calls",
                    },
                    turn_id=turn,
                    run_id=run,
                )
            )
        else:
            out.append(
                Event.create(
                    "tool/result",
                    {
                        "call_id": f"call_{i:08d}",
                        "name": "search_docs",
                        "status": "success",
                        "output": "Found 3 matching sections: installation, quickstart, "
                        f"configuration (result {i}). " + "lorem ipsum dolor sit amet " * 6,
                        "duration_ms": 41.7 + i % 50,
                    },
                    turn_id=turn,
                    run_id=run,
                )
            )
    return out


def clone(template: Event) -> Event:
    """A copy of ``template`` under a fresh event id (cheap: no re-validation)."""
    return Event.model_construct(**{**template.__dict__, "event_id": new_id("evt")})


def _no_blob(data: bytes) -> str:
    raise AssertionError("benchmark payloads are small; no blobs expected")


def encoded_rows(
    events: Sequence[Event], first_seq: int, sid: int, batch_id: str
) -> list[tuple[object, ...]]:
    """The rows the store writes for ``events`` at ``first_seq...`` (its own encoder).

    Like the store, the batch's first row carries the batch id and digest (the replay index
    entry); the others carry none.
    """
    digest = event_digest(events)
    return [
        (
            sid,
            *_rows.encode(e, first_seq + i, _no_blob),
            batch_id if i == 0 else None,
            digest if i == 0 else None,
        )
        for i, e in enumerate(events)
    ]


# --------------------------------------------------------------------------------------------
# The two sides


_INSERT_ROW = (
    f"INSERT INTO events (session, {_rows.COLUMNS}, batch_id, digest) "
    "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
)


class RawSide:
    """Plain sqlite3 on the store's schema, the store's pragmas, autocommit mode."""

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        self.conn.executescript(_SCHEMA)

    def commit(self, rows: Sequence[tuple[object, ...]]) -> None:
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(_INSERT_ROW, rows[0])
        if len(rows) > 1:
            conn.executemany(_INSERT_ROW, rows[1:])
        conn.execute("COMMIT")

    def close(self) -> None:
        self.conn.close()


class StoreSide:
    """``SQLiteStore.append`` with the caller's bookkeeping (expected head, batch ids)."""

    def __init__(self, path: Path) -> None:
        self.store = SQLiteStore(path, synchronous="FULL")
        self.store.create_session(KEY)
        self.head = self.store.head(KEY)

    def commit(self, events: tuple[list[Event], str]) -> None:
        batch, batch_id = events
        self.store.append(KEY, batch, expected_seq=self.head, batch_id=batch_id)
        self.head += len(batch)

    def close(self) -> None:
        self.store.close()


def timed(op: Callable[[object], None], items: Sequence[object]) -> float:
    start = time.perf_counter()
    for item in items:
        op(item)
    return time.perf_counter() - start


def compare_commits(
    tmp: Path, name: str, commits: int, batch_size: int, rounds: int
) -> tuple[float, float, float]:
    """Median events/s of (store, raw) and median per-round ratio; ``commits`` per side.

    Each round runs both sides back to back (alternating which goes first), so the per-round
    ratio compares two measurements taken under the same machine load.
    """
    store = StoreSide(tmp / f"{name}-store.sqlite")
    raw = RawSide(tmp / f"{name}-raw.sqlite")
    raw_seq = 1
    per_round = max(1, commits // rounds)
    warmup = max(2, per_round // 10)

    def inputs(n: int) -> tuple[list[object], list[object]]:
        nonlocal raw_seq
        store_items: list[object] = []
        raw_items: list[object] = []
        for _ in range(n):
            events = make_events(batch_size)
            batch_id = new_id("batch")
            store_items.append((events, batch_id))
            raw_items.append(encoded_rows(events, raw_seq, 1, batch_id))
            raw_seq += batch_size
        return store_items, raw_items

    store_in, raw_in = inputs(warmup)
    timed(store.commit, store_in)  # type: ignore[arg-type]
    timed(raw.commit, raw_in)  # type: ignore[arg-type]
    store_rates: list[float] = []
    raw_rates: list[float] = []
    for r in range(rounds):
        store_in, raw_in = inputs(per_round)
        sides = [(store.commit, store_in, store_rates), (raw.commit, raw_in, raw_rates)]
        if r % 2:
            sides.reverse()
        for op, items, rates in sides:
            rates.append(per_round * batch_size / timed(op, items))  # type: ignore[arg-type]
    store.close()
    raw.close()
    ratios = [s / r for s, r in zip(store_rates, raw_rates, strict=True)]
    return statistics.median(store_rates), statistics.median(raw_rates), statistics.median(ratios)


# --------------------------------------------------------------------------------------------
# Long sessions


def build_session(path: Path, n: int) -> float:
    """Append ``n`` events to a fresh store file in MAX_BATCH batches; returns seconds taken.

    Setup only: the store runs with ``synchronous=OFF`` here, and events are clones of a few
    validated templates (fresh ids, no re-validation), so a million events take seconds. The
    rows still go through ``SQLiteStore.append`` and its encoder.
    """
    start = time.perf_counter()
    templates = make_events(64)
    store = SQLiteStore(path, synchronous="OFF")
    store.create_session(KEY)
    head = 0
    while head < n:
        size = min(MAX_BATCH, n - head)
        batch = [clone(templates[i % len(templates)]) for i in range(size)]
        store.append(KEY, batch, expected_seq=head, batch_id=new_id("batch"))
        head += size
    store.close()
    return time.perf_counter() - start


def compare_reads(path: Path, n: int, reads: int) -> tuple[float, float]:
    """Median seconds of ``read_after(after, 100)`` near the end and near the start."""
    store = SQLiteStore(path)
    rng = random.Random(7)
    window = min(1_000, n // 10)
    starts = [rng.randrange(0, window) for _ in range(reads)]
    ends = [rng.randrange(n - window, n - READ_LIMIT) for _ in range(reads)]
    for after in starts[:50] + ends[:50]:  # warm up
        store.read_after(KEY, after, READ_LIMIT)
    start_times: list[float] = []
    end_times: list[float] = []
    for i, (a, b) in enumerate(zip(starts, ends, strict=True)):
        pairs = [(a, start_times), (b, end_times)]
        if i % 2:
            pairs.reverse()
        for after, times in pairs:
            t0 = time.perf_counter()
            events = store.read_after(KEY, after, READ_LIMIT)
            times.append(time.perf_counter() - t0)
            assert len(events) == READ_LIMIT
    store.close()
    return statistics.median(end_times), statistics.median(start_times)


def cold_open(path: Path) -> float:
    t0 = time.perf_counter()
    store = SQLiteStore(path)
    head = store.head(KEY)
    events = store.read_after(KEY, max(0, head - READ_LIMIT), READ_LIMIT)
    elapsed = time.perf_counter() - t0
    assert events[-1].seq == head
    store.close()
    return elapsed


def compare_opens(long: Path, short: Path, opens: int) -> tuple[float, float]:
    cold_open(long)
    cold_open(short)
    long_times: list[float] = []
    short_times: list[float] = []
    for i in range(opens):
        pairs = [(long, long_times), (short, short_times)]
        if i % 2:
            pairs.reverse()
        for path, times in pairs:
            times.append(cold_open(path))
    return statistics.median(long_times), statistics.median(short_times)


# --------------------------------------------------------------------------------------------


def run(sizes: Sizes) -> list[Result]:
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="agentnb-bench-") as tmp_name:
        tmp = Path(tmp_name)
        print(f"single-event commits: {sizes.single_commits} per side ...", flush=True)
        store, raw, ratio = compare_commits(tmp, "single", sizes.single_commits, 1, sizes.rounds)
        results.append(Result("single_commit", store, raw, ratio, "commits/s", ">= 0.8", True, 0.8))
        size = sizes.batch_size
        print(f"{size}-event batch commits: {sizes.batches} per side ...", flush=True)
        store, raw, ratio = compare_commits(tmp, "batch", sizes.batches, size, sizes.rounds)
        results.append(
            Result(f"batch{size}_commit", store, raw, ratio, "events/s", ">= 0.6", True, 0.6)
        )

        long, short = tmp / "long.sqlite", tmp / "short.sqlite"
        print(f"building a {sizes.long_session:,}-event session ...", flush=True)
        build_s = build_session(long, sizes.long_session)
        build_session(short, sizes.short_session)
        print(
            f"  built in {build_s:.1f} s (setup only: SQLiteStore.append in "
            f"{MAX_BATCH:,}-event batches with synchronous=OFF)",
            flush=True,
        )
        print(f"read_after(seq, {READ_LIMIT}): {sizes.reads} reads near each end ...", flush=True)
        end_s, start_s = compare_reads(long, sizes.long_session, sizes.reads)
        results.append(
            Result(
                "read_after_end_vs_start",
                end_s * 1e6,
                start_s * 1e6,
                end_s / start_s,
                "us/read",
                "<= 1.5",
                False,
                1.5,
            )
        )
        print("catalogues of 10,000 and 100 sessions ...", flush=True)
        rounds = max(3, sizes.rounds)
        big, small = tmp / "big.sqlite", tmp / "small.sqlite"
        big_keys = build_catalogue(big, 10_000, rounds, sizes.deleted_events)
        small_keys = build_catalogue(small, 100, rounds, sizes.deleted_events)
        big_s, small_s = compare_listing(big, small, sizes.reads)
        results.append(
            Result(
                "list_newest50_10k_vs_100",
                big_s * 1e3,
                small_s * 1e3,
                big_s / small_s,
                "ms/page",
                "<= 2.0",
                False,
                2.0,
            )
        )
        big_s, small_s = compare_deletes((big, big_keys), (small, small_keys))
        results.append(
            Result(
                f"delete_{_count(sizes.deleted_events)}_events_in_10k_vs_100",
                big_s * 1e3,
                small_s * 1e3,
                big_s / small_s,
                "ms/delete",
                "<= 2.0",
                False,
                2.0,
            )
        )
        print(f"cold opens: {sizes.opens} per session ...", flush=True)
        long_s, short_s = compare_opens(long, short, sizes.opens)
        results.append(
            Result(
                f"cold_open_{_count(sizes.long_session)}_vs_{_count(sizes.short_session)}",
                long_s * 1e3,
                short_s * 1e3,
                long_s / short_s,
                "ms/open",
                "<= 2.0",
                False,
                2.0,
            )
        )
    return results


def build_catalogue(path: Path, sessions: int, targets: int, events: int) -> list[SessionKey]:
    """A store of ``sessions`` small sessions plus ``targets`` of ``events`` events each
    (the ones the delete benchmark removes); setup with ``synchronous=OFF``."""
    templates = make_events(64)
    store = SQLiteStore(path, synchronous="OFF")
    for i in range(sessions):
        key = SessionKey("bench", f"user{i % 50}", "agent", f"s{i}")
        store.create_session(key)
        store.append(key, [clone(templates[i % 64])], expected_seq=0, batch_id=new_id("batch"))
    keys = []
    for i in range(targets):
        key = SessionKey("bench", "user0", "agent", f"target{i}")
        store.create_session(key)
        head = 0
        while head < events:
            size = min(MAX_BATCH, events - head)
            batch = [clone(templates[j % 64]) for j in range(size)]
            store.append(key, batch, expected_seq=head, batch_id=new_id("batch"))
            head += size
        keys.append(key)
    store.close()
    return keys


def compare_listing(big: Path, small: Path, reads: int) -> tuple[float, float]:
    """Median seconds of the first page of 50 on each store."""
    out = []
    for path in (big, small):
        store = SQLiteStore(path)
        for _ in range(10):
            store.find_sessions(limit=50)
        times = []
        for _ in range(reads):
            start = time.perf_counter()
            page = store.find_sessions(limit=50)
            times.append(time.perf_counter() - start)
        assert len(page) == 50
        store.close()
        out.append(statistics.median(times))
    return out[0], out[1]


def compare_deletes(
    big: tuple[Path, list[SessionKey]], small: tuple[Path, list[SessionKey]]
) -> tuple[float, float]:
    """Median seconds of deleting one target session, alternating between the stores."""
    stores = [SQLiteStore(big[0]), SQLiteStore(small[0])]
    times: list[list[float]] = [[], []]
    for a, b in zip(big[1], small[1], strict=True):
        for side, key in ((0, a), (1, b)):
            start = time.perf_counter()
            stores[side].delete_session(key, by="bench")
            times[side].append(time.perf_counter() - start)
    for store in stores:
        store.close()
    return statistics.median(times[0]), statistics.median(times[1])


def _count(n: int) -> str:
    return f"{n // 1_000_000}m" if n >= 1_000_000 else f"{n // 1_000}k"


def table(results: Sequence[Result]) -> str:
    header = ("metric", "value", "baseline", "unit", "ratio", "target", "ok")
    rows = [header] + [
        (
            r.metric,
            f"{r.value:,.1f}",
            f"{r.baseline:,.1f}",
            r.unit,
            f"{r.ratio:.3f}",
            r.target,
            "yes" if r.ok else "NO",
        )
        for r in results
    ]
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
    parser.add_argument(
        "--quick", action="store_true", help="small sizes (100k-event session) for smoke tests"
    )
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else DEFAULT
    print(
        f"python {platform.python_version()} ({platform.python_implementation()}), "
        f"sqlite {sqlite3.sqlite_version}, {platform.system()} {platform.machine()}, "
        f"{'quick' if args.quick else 'default'} sizes",
        flush=True,
    )
    results = run(sizes)
    print()
    print(table(results))
    print()
    for r in results:
        print(r.as_json())
    return 0


if __name__ == "__main__":
    sys.exit(main())
