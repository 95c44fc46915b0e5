"""PostgresStore throughput and wake-up latency against raw psycopg; worker scaling.

Run with ``python benchmarks/bench_postgres.py`` (``--quick`` for smoke-test sizes, ``--only
GROUP`` for one group: commits, wake, read, workers). It starts a throwaway PostgreSQL cluster
with fsync on (``tests/pg.py``: ``initdb`` + ``pg_ctl`` on a unix socket), or uses ``--url
postgresql://...`` (databases are created there). Prints the environment, a table per group
kind, then one JSON line per metric with the keys ``metric``, ``value``, ``baseline``,
``ratio``, ``unit``, ``target`` and ``ok`` (None where there is no target; latency lines add
``p95`` and ``baseline_p95``, worker lines where the CPU went).

Metrics:

``single_commit``
    Durable commits/s of ``PostgresStore.append`` with one event per call against raw
    psycopg inserting the very rows the store writes (the store's own encoder, batch id and
    digest on the first row, same table and indexes), one autocommit ``INSERT`` per commit.
    Both at ``synchronous_commit=on`` with fsync on. Target ratio >= 0.8.
    The line also reports ``statement`` and ``statement_ratio``: the store's own append
    statements, recorded from a store run on a scratch database and sent again by bare
    psycopg on a database in the same state. That is the database's price of a guarded
    commit (head check and update, lease fence, insert, ``NOTIFY``) with none of the
    store's Python, so its ratio is the most any client code of this statement can reach.
``batch100_commit``
    Events/s with 100 events per ``append`` against raw psycopg ``executemany`` of the same
    100 rows in one transaction (psycopg pipelines it). Target ratio >= 0.6. Also with
    ``statement`` and ``statement_ratio``, as above.
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
``workers_1``, ``workers_2``, ``workers_4``
    Scripted turns/s (bench_scale's agent: model -> tool -> model -> tool -> model) with 1, 2
    and 4 ``agentnb worker`` processes (``--concurrency 16`` each) on one machine and one
    server, each against 1 worker. 128 sessions x 3 tasks are submitted by a client runtime
    (``execute=False``) while the workers, ready, are stopped (SIGSTOP); all are released at
    once (SIGCONT), and the time runs from the first ``run/start`` to the last
    ``turn/completed`` in the committed log. The median of 3 runs per count, the counts in a
    different order each round. Target for 4 workers: >= 2.5. Each line also says where the
    CPU went (the workers', the server's processes' and the client's, from /proc and
    getrusage), how busy the workers and the whole machine were, and what the database paid
    per turn (transactions, WAL, and statements: every statement the server ran for the run,
    BEGIN and COMMIT included, counted by ``pg_stat_statements``, which the throwaway server
    preloads; -1 on a server given by ``--url`` without it). ``worker_statements_per_turn``
    are the workers' own (they connect as their own role, ``agentnb_worker``, on the
    throwaway server), ``statements_per_turn`` those of the workers and the client together
    (the client's are its waits for the last tasks; the reads that check the run after it
    are left out).
    ``cpu_bound_ratio``: CPUs / CPU time per turn of the 1-worker run, the most any number of
    workers can reach on this machine; where it is below 2.5, 4 workers cannot show the
    target here, however well they scale.
``statements_per_turn``
    The statements a worker turn costs the server: the workers' own per turn in the 1-worker
    run (the one its line reports), against the figure recorded before the statements were
    cut (``RECORDED_STATEMENTS_PER_TURN``: 12.1, the workers' own on this shape at commit
    ``39ce18b``). Target: at most 10 (the value, not the ratio). Without a role of their own
    (``--url``) the workers' and the client's statements are counted together.

Both sides of a commit comparison run the same loop shape over pre-built inputs, after a
warm-up, in interleaved rounds so that disk and CPU drift hit both alike; a ratio is the
median of per-round ratios. What the store is charged for beyond the raw insert: argument
checks and stamping, JSON and checksum encoding, the guarded update of the session's head
row (expected head, lease fence, inbox head) and the ``NOTIFY`` in the same transaction.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import platform
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests.pg (the throwaway cluster), benchmarks.bench_store

import psycopg  # noqa: E402

import agentnb as nb  # noqa: E402
from agentnb.events import Event  # noqa: E402
from agentnb.ids import SessionKey, new_id  # noqa: E402
from agentnb.stores import _rows  # noqa: E402
from agentnb.stores.base import SessionStore  # noqa: E402
from agentnb.stores.postgres import PostgresStore  # noqa: E402
from benchmarks.bench_scale import make_agent  # noqa: E402
from benchmarks.bench_store import make_events  # noqa: E402
from tests.pg import statement_counts  # noqa: E402

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
    pool_sessions: int
    pool_tasks: int
    concurrency: int
    pool_rounds: int


DEFAULT = Sizes(3_000, 300, 100, 10, 300, 10_000, 20, 128, 3, 16, 3)
QUICK = Sizes(300, 30, 100, 4, 40, 10_000, 5, 8, 2, 4, 1)


@dataclass(frozen=True)
class Result:
    metric: str
    value: float
    baseline: float
    ratio: float
    unit: str
    target: str
    higher_is_better: bool
    bound: float | None
    """None: reported for information, no target."""
    extra: dict[str, float] = field(default_factory=dict)
    absolute: bool = False
    """The bound is on the value itself, not on the ratio."""

    @property
    def ok(self) -> bool | None:
        if self.bound is None:
            return None
        measured = self.value if self.absolute else self.ratio
        return measured >= self.bound if self.higher_is_better else measured <= self.bound

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


_GUARDED_APPEND = "WITH s AS (UPDATE agentnb.sessions"
"""How the store's append statement starts (``PostgresStore._append``)."""


class StatementSide:
    """The store's own append statements, sent by bare psycopg: what no client code can beat.

    ``capture`` runs a batch of commits through a ``PostgresStore`` on a scratch database and
    records the statements and parameters it sends (the guarded head update, the insert and
    the ``NOTIFY``); ``commit`` sends one of them again, unchanged, on a database in the same
    state. So this side pays what the database does for a guarded commit, and none of the
    store's Python (stamping, encoding, checksums, the catalogue delta, the pool).
    """

    def __init__(self, scratch_url: str, url: str) -> None:
        self.capturer = StoreSide(scratch_url)
        with PostgresStore(url) as store:  # the schema, and the same session row, id and head
            store.create_session(KEY)
        self.conn = psycopg.connect(url, autocommit=True)
        self.conn.execute("SET synchronous_commit = on")

    def capture(self, items: Sequence[tuple[list[Event], str]]) -> list[tuple[Any, Any]]:
        sent: list[tuple[Any, Any]] = []
        execute = psycopg.Connection.execute

        def recording(conn: Any, query: Any, params: Any = None, **kw: Any) -> Any:
            if isinstance(query, str) and query.startswith(_GUARDED_APPEND):
                sent.append((query, params))
            return execute(conn, query, params, **kw)

        psycopg.Connection.execute = recording  # type: ignore[method-assign]
        try:
            for item in items:
                self.capturer.commit(item)
        finally:
            psycopg.Connection.execute = execute  # type: ignore[method-assign]
        if len(sent) != len(items):
            raise RuntimeError(f"captured {len(sent)} append statements for {len(items)} commits")
        return sent

    def commit(self, statement: tuple[Any, Any]) -> None:
        if self.conn.execute(*statement).fetchone() is None:
            raise RuntimeError("a replayed append statement was refused: the states differ")

    def close(self) -> None:
        self.capturer.close()
        self.conn.close()


def timed(op: Any, items: Sequence[Any]) -> float:
    start = time.perf_counter()
    for item in items:
        op(item)
    return time.perf_counter() - start


def compare_commits(
    database: Any, commits: int, batch_size: int, rounds: int
) -> tuple[float, float, float, float, float]:
    """Median events/s of (store, raw) and their median per-round ratio; then the same two
    for the store's own statements replayed by bare psycopg (``StatementSide``)."""
    store = StoreSide(database())
    raw_url = database()
    raw = RawSide(raw_url)
    floor = StatementSide(database(), database())
    raw_seq = 1 + _max_seq(raw_url)
    per_round = max(1, commits // rounds)
    warmup = max(5, per_round // 10)

    def inputs(n: int) -> tuple[list[Any], list[Any], list[Any]]:
        nonlocal raw_seq
        store_items: list[Any] = []
        raw_items: list[Any] = []
        for _ in range(n):
            events = make_events(batch_size)
            batch_id = new_id("batch")
            store_items.append((events, batch_id))
            raw_items.append(encoded_rows(events, raw_seq, raw.sid, batch_id))
            raw_seq += batch_size
        return store_items, raw_items, floor.capture(store_items)

    store_in, raw_in, floor_in = inputs(warmup)
    timed(store.commit, store_in)
    timed(raw.commit, raw_in)
    timed(floor.commit, floor_in)
    rates: dict[str, list[float]] = {"store": [], "raw": [], "floor": []}
    for r in range(rounds):
        store_in, raw_in, floor_in = inputs(per_round)
        sides = [("store", store.commit, store_in), ("raw", raw.commit, raw_in)]
        sides.insert(r % 3, ("floor", floor.commit, floor_in))
        if r % 2:
            sides.reverse()
        for name, op, items in sides:
            rates[name].append(per_round * batch_size / timed(op, items))
    store.close()
    raw.close()
    floor.close()

    def ratio(side: str) -> float:
        return statistics.median(s / r for s, r in zip(rates[side], rates["raw"], strict=True))

    medians = {side: statistics.median(values) for side, values in rates.items()}
    return medians["store"], medians["raw"], ratio("store"), medians["floor"], ratio("floor")


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


# --------------------------------------------------------------------------------------------
# Worker scaling: scripted turns/s with 1, 2 and 4 ``agentnb worker`` processes

worker_agent = make_agent()
"""What the benchmark's workers run: bench_scale's model -> tool -> model -> tool -> model."""
_WORKER_AGENT = "benchmarks.bench_postgres:worker_agent"
_TICK = os.sysconf("SC_CLK_TCK")


def _cpu_of(pid: int, *, children: bool = False) -> float:
    """CPU seconds (user + system) of a live process; with ``children``, plus those of its
    children it has reaped."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:
        return 0.0
    ticks = int(fields[11]) + int(fields[12])  # utime, stime
    if children:
        ticks += int(fields[13]) + int(fields[14])  # cutime, cstime
    return ticks / _TICK


def _server_cpu(data: Path) -> float:
    """CPU seconds of a local server: the postmaster, its live processes and the exited
    ones it reaped (backends of closed connections)."""
    postmaster = int((data / "postmaster.pid").read_text().split()[0])
    total = _cpu_of(postmaster, children=True)
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat") as f:
                    ppid = int(f.read().rpartition(")")[2].split()[1])
            except OSError:
                continue
            if ppid == postmaster:
                total += _cpu_of(int(entry.name))
    return total


@dataclass(frozen=True)
class PoolRun:
    """One run of ``workers`` worker processes over the same queued work."""

    workers: int
    turns: int
    seconds: float
    """First ``run/start`` to last ``turn/completed``, read from the committed log."""
    worker_cpu: list[float]
    server_cpu: float | None
    """CPU seconds of the database server (None: a server elsewhere, ``--url``)."""
    client_cpu: float
    transactions: int
    wal_bytes: int
    statements: int | None = None
    """Statements the server ran (``pg_stat_statements``), None when it cannot count."""
    worker_statements: int | None = None
    """Of those, the workers' own (None: they share the client's role, ``--url``)."""

    @property
    def turns_per_s(self) -> float:
        return self.turns / self.seconds

    @property
    def cpu_ms_per_turn(self) -> float:
        """Worker, server and client CPU per turn: what a turn costs wherever it runs."""
        total = sum(self.worker_cpu) + (self.server_cpu or 0.0) + self.client_cpu
        return total / self.turns * 1000


WORKER_ROLE = "agentnb_worker"
"""The database role the workers connect as on the throwaway server: their statements are
counted apart from the client's."""
RECORDED_STATEMENTS_PER_TURN = 12.1
"""The workers' own statements per turn on this shape (128 sessions x 3 tasks, 1 worker)
before they were cut: measured at commit 39ce18b (11.6-13.2 over runs), the figure the
issue starts from. The print of a task's line read the session back then."""


def _statements(url: str, user: str | None = None) -> int | None:
    """Statements the server ran in this database so far (by ``user`` only, if given), from
    ``pg_stat_statements`` (utility statements such as BEGIN and COMMIT too); None without
    the extension. The counts of these reads are left out."""
    try:
        return sum(statement_counts(url, user).values())
    except psycopg.Error:
        return None


def _db_counters(url: str) -> tuple[int, int]:
    """(transactions committed in the database, WAL position in bytes)."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT xact_commit, pg_current_wal_lsn() - '0/0'::pg_lsn FROM pg_stat_database "
            "WHERE datname = current_database()"
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


class _Worker:
    """One ``agentnb worker`` process, its stderr kept in a file (a chatty worker never
    blocks on a full pipe)."""

    def __init__(self, url: str, concurrency: int) -> None:
        self.err = tempfile.TemporaryFile("w+")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "agentnb.cli",
                "worker",
                "--store",
                url,
                "--agent",
                _WORKER_AGENT,
                "--concurrency",
                str(concurrency),
            ],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=self.err,
            text=True,
        )
        self.pid = self.proc.pid
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # printed once it serves
        if "worker for" not in line:
            self.proc.kill()
            raise RuntimeError(f"the worker did not start: {line}{self.stop()}")

    def signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signum)

    def stop(self) -> str:
        """SIGTERM (it stops cleanly), wait; its stderr if it did not exit 0."""
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        self.proc.communicate(timeout=120)
        self.err.seek(0)
        err = self.err.read()
        self.err.close()
        return "" if self.proc.returncode == 0 else f"exit {self.proc.returncode}: {err[-2000:]}"


def run_pool(
    url: str,
    workers: int,
    sessions: int,
    tasks: int,
    concurrency: int,
    data: Path | None,
    worker_user: str | None = None,
) -> PoolRun:
    """``workers`` workers serve ``sessions`` x ``tasks`` scripted turns, all queued while
    the workers wait (stopped), then released at once; timed from the committed log. The
    workers connect as ``worker_user`` when given (their statements are counted apart)."""
    client = nb.Runtime(worker_agent, store=url, execute=False)
    worker_url = url if worker_user is None else _as_user(url, worker_user)
    procs: list[_Worker] = []
    try:
        handles = [client.session(f"s{i}") for i in range(sessions)]
        for _ in range(workers):
            procs.append(_Worker(worker_url, concurrency))
            procs[-1].signal(signal.SIGSTOP)  # the work is queued while they wait
        last = [[h.submit(f"task {t}") for t in range(tasks)][-1] for h in handles]
        cpu0 = [_cpu_of(p.pid) for p in procs]
        server0 = _server_cpu(data) if data is not None else 0.0
        client0 = resource.getrusage(resource.RUSAGE_SELF)
        xacts0, wal0 = _db_counters(url)
        statements0 = _statements(url)
        mine0 = _statements(url, worker_user) if worker_user is not None else None
        for proc in procs:
            proc.signal(signal.SIGCONT)
        for receipt in last:  # a session runs its tasks in order: its last one ends last
            receipt.wait(timeout=600)
        # Counted before the checks below read the log back: those reads are no turn's.
        statements1 = _statements(url)
        mine1 = _statements(url, worker_user) if worker_user is not None else None
        client1 = resource.getrusage(resource.RUSAGE_SELF)
        worker_cpu = [_cpu_of(p.pid) - c for p, c in zip(procs, cpu0, strict=True)]
        server_cpu = _server_cpu(data) - server0 if data is not None else None
        wal1 = _db_counters(url)[1]
        starts: list[float] = []
        ends: list[float] = []
        for handle in handles:
            for task in handle.tasks():
                if task.status != "completed":
                    raise RuntimeError(f"a turn ended {task.status}: {task.error}")
            for event in handle.log.scan(0, handle.log.head()):
                if event.type == "run/start":
                    starts.append(event.occurred_at.timestamp())
                elif event.type == "turn/completed":
                    ends.append(event.occurred_at.timestamp())
        if len(ends) != sessions * tasks:
            raise RuntimeError(f"{len(ends)} turns completed, expected {sessions * tasks}")
    finally:
        for proc in procs:
            failed = proc.stop()
            if failed:
                print(f"a worker failed: {failed}", file=sys.stderr)
        client.close()
    xacts1 = _db_counters(url)[0]  # the backends are gone: their counts are in
    statements = None if statements0 is None or statements1 is None else statements1 - statements0
    mine = None if mine0 is None or mine1 is None else mine1 - mine0
    return PoolRun(
        workers,
        len(ends),
        max(ends) - min(starts),
        worker_cpu,
        server_cpu,
        (client1.ru_utime + client1.ru_stime) - (client0.ru_utime + client0.ru_stime),
        xacts1 - xacts0,
        wal1 - wal0,
        statements,
        mine,
    )


def _as_user(url: str, user: str) -> str:
    """``url`` (``postgresql://user@...``) connecting as ``user`` instead."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}@{host}"))


WORKER_COUNTS = (1, 2, 4)


def worker_scaling(
    database: Any, sizes: Sizes, data: Path | None, worker_user: str | None
) -> list[Result]:
    """Turns/s of 1, 2 and 4 workers on the same work, each against 1 worker: the median
    of ``pool_rounds`` runs each, the counts taken in a different order every round; then
    the statements per turn of the 1-worker run against the recorded figure."""
    runs: dict[int, list[PoolRun]] = {n: [] for n in WORKER_COUNTS}
    for round_ in range(sizes.pool_rounds):
        for n in WORKER_COUNTS if round_ % 2 == 0 else WORKER_COUNTS[::-1]:
            runs[n].append(
                run_pool(
                    database(),
                    n,
                    sizes.pool_sessions,
                    sizes.pool_tasks,
                    sizes.concurrency,
                    data,
                    worker_user,
                )
            )
    median = {n: sorted(rs, key=lambda x: x.turns_per_s)[len(rs) // 2] for n, rs in runs.items()}
    base = median[1]
    cpus = os.cpu_count() or 1
    # With every core busy, turns/s cannot pass cores / (CPU per turn): the most this
    # machine allows, whatever the number of workers.
    ceiling = cpus * 1000 / base.cpu_ms_per_turn / base.turns_per_s
    results = []
    for n, r in median.items():
        target, bound = (">= 2.5", 2.5) if n == 4 else ("", None)
        cpu = sum(r.worker_cpu) + (r.server_cpu or 0.0) + r.client_cpu
        results.append(
            Result(
                f"workers_{n}",
                r.turns_per_s,
                base.turns_per_s,
                r.turns_per_s / base.turns_per_s,
                "turns/s",
                target,
                True,
                bound,
                {
                    "cpus": float(cpus),
                    "turns": float(r.turns),
                    "seconds": r.seconds,
                    "worker_busy": sum(r.worker_cpu) / r.seconds / n,
                    "machine_busy": cpu / r.seconds / cpus,
                    "worker_cpu_s": sum(r.worker_cpu),
                    "server_cpu_s": r.server_cpu if r.server_cpu is not None else -1.0,
                    "client_cpu_s": r.client_cpu,
                    "cpu_ms_per_turn": r.cpu_ms_per_turn,
                    "cpu_bound_ratio": ceiling,
                    "transactions_per_turn": r.transactions / r.turns,
                    "statements_per_turn": -1.0 if r.statements is None else r.statements / r.turns,
                    "worker_statements_per_turn": -1.0
                    if r.worker_statements is None
                    else r.worker_statements / r.turns,
                    "wal_kb_per_turn": r.wal_bytes / r.turns / 1024,
                    "runs": float(len(runs[n])),
                },
            )
        )
    own = base.worker_statements if base.worker_statements is not None else base.statements
    if own is not None:
        results.append(
            Result(
                "statements_per_turn",
                own / base.turns,
                RECORDED_STATEMENTS_PER_TURN,
                own / base.turns / RECORDED_STATEMENTS_PER_TURN,
                "statements",
                "<= 10",
                False,
                10.0,
                {
                    "turns": float(base.turns),
                    "workers_only": float(base.worker_statements is not None),
                    "with_client": -1.0
                    if base.statements is None
                    else base.statements / base.turns,
                },
                absolute=True,
            )
        )
    return results


def statements_table(result: Result) -> str:
    """Statements per worker turn against the recorded figure."""
    e = result.extra
    whose = "the workers' own" if e["workers_only"] else "workers' and client's"
    rows = [
        ("statements per turn (1 worker)", "now", "recorded", "ratio", "target", "ok"),
        (
            whose,
            f"{result.value:.2f}",
            f"{result.baseline:.2f}",
            f"{result.ratio:.3f}",
            result.target,
            "yes" if result.ok else "NO",
        ),
    ]
    if e["workers_only"] and e["with_client"] >= 0:
        rows.append(("with the client's waits", f"{e['with_client']:.2f}", "", "", "", ""))
    return "\n".join(_align(rows, left=(0, 4, 5)))


def worker_table(results: Sequence[Result]) -> str:
    """The worker-scaling lines side by side: throughput, and where the CPU went."""
    header = (
        "workers",
        "turns/s",
        "x 1 worker",
        "worker busy",
        "machine busy",
        "CPU ms/turn",
        "of which server",
        "xacts/turn",
        "stmts/turn",
        "of which workers'",
        "WAL KB/turn",
    )
    rows = [header]
    for r in results:
        e = r.extra
        server = e["server_cpu_s"] / e["turns"] * 1000 if e["server_cpu_s"] >= 0 else None
        rows.append(
            (
                r.metric.removeprefix("workers_"),
                f"{r.value:,.1f}",
                f"{r.ratio:.2f}" + (f" ({r.target})" if r.target else ""),
                f"{e['worker_busy']:.0%}",
                f"{e['machine_busy']:.0%}",
                f"{e['cpu_ms_per_turn']:.1f}",
                "?" if server is None else f"{server:.1f}",
                f"{e['transactions_per_turn']:.1f}",
                "?" if e["statements_per_turn"] < 0 else f"{e['statements_per_turn']:.1f}",
                "?"
                if e["worker_statements_per_turn"] < 0
                else f"{e['worker_statements_per_turn']:.1f}",
                f"{e['wal_kb_per_turn']:.1f}",
            )
        )
    lines = _align(rows, left=(0,))
    first = results[0].extra
    lines.append(
        f"{first['cpus']:.0f} CPUs: with every one busy this machine allows at most "
        f"{first['cpu_bound_ratio']:.2f}x one worker (CPUs / CPU per turn of the 1-worker run)"
    )
    return "\n".join(lines)


def _align(rows: Sequence[Sequence[str]], left: Sequence[int]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(
            cell.ljust(w) if i in left else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


GROUPS = ("commits", "wake", "read", "workers")


def run(sizes: Sizes, url: str | None, groups: Sequence[str] = GROUPS) -> list[Result]:
    from tests.pg import Cluster

    cluster = None
    worker_user = None
    if url is None:
        # pg_stat_statements counts every statement the workers and the client send; the
        # workers connect as a role of their own, so that theirs are counted apart.
        cluster = Cluster(
            Path(tempfile.mkdtemp(prefix="agentnb-bench-pg-")),
            fsync=True,
            preload=("pg_stat_statements",),
        )
        cluster.start()
        cluster.sql(f"CREATE ROLE {WORKER_ROLE} LOGIN SUPERUSER")
        worker_user = WORKER_ROLE

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
        if "commits" in groups:
            results += commits(database, sizes)
        if "wake" in groups:
            results.append(wake(database, sizes))
        if "read" in groups:
            print(
                f"read_arrow of {sizes.read_events:,} events: {sizes.reads} reads ...", flush=True
            )
            reads = compare_read_arrow(database(), sizes.read_events, sizes.reads)
            if reads is not None:
                copy_ms, row_ms = reads
                results.append(
                    Result(
                        "read_arrow_10k",
                        copy_ms,
                        row_ms,
                        copy_ms / row_ms,
                        "ms",
                        "<= 1.0",
                        False,
                        1.0,
                    )
                )
        if "workers" in groups:
            print(
                f"worker scaling: {sizes.pool_sessions} sessions x {sizes.pool_tasks} tasks "
                f"with 1, 2 and 4 workers ({sizes.concurrency} sessions at once each) ...",
                flush=True,
            )
            linux = Path("/proc/self/stat").exists()  # where the server's CPU can be read
            data = cluster.data if cluster is not None and linux else None
            results += worker_scaling(database, sizes, data, worker_user)
        return results
    finally:
        if cluster is not None:
            cluster.remove()


def commits(database: Any, sizes: Sizes) -> list[Result]:
    print(f"single-event commits: {sizes.single_commits} per side ...", flush=True)
    store, raw, ratio, floor, floor_ratio = compare_commits(
        database, sizes.single_commits, 1, sizes.rounds
    )
    single = Result(
        "single_commit",
        store,
        raw,
        ratio,
        "commits/s",
        ">= 0.8",
        True,
        0.8,
        {"statement": floor, "statement_ratio": floor_ratio},
    )
    size = sizes.batch_size
    print(f"{size}-event batch commits: {sizes.batches} per side ...", flush=True)
    store, raw, ratio, floor, floor_ratio = compare_commits(
        database, sizes.batches, size, sizes.rounds
    )
    batch = Result(
        f"batch{size}_commit",
        store,
        raw,
        ratio,
        "events/s",
        ">= 0.6",
        True,
        0.6,
        {"statement": floor, "statement_ratio": floor_ratio},
    )
    return [single, batch]


def wake(database: Any, sizes: Sizes) -> Result:
    print(f"commit-to-wake in another process: {sizes.wakes} commits per side ...", flush=True)
    ours, our_commits = wake_store(database(), sizes.wakes)
    theirs, their_commits = wake_raw(database(), sizes.wakes)
    med, base_med = statistics.median(ours), statistics.median(theirs)
    return Result(
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


def table(results: Sequence[Result]) -> str:
    """The store metrics side by side with raw psycopg."""
    rows = [("metric", "agentnb", "raw psycopg", "unit", "ratio", "target", "ok")]
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
        if "statement" in r.extra:
            rows.append(
                (
                    "  (its statement, bare)",
                    f"{r.extra['statement']:,.2f}",
                    f"{r.baseline:,.2f}",
                    r.unit,
                    f"{r.extra['statement_ratio']:.3f}",
                    "",
                    "",
                )
            )
    return "\n".join(_align(rows, left=(0, 3, 5, 6)))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small sizes for smoke tests")
    parser.add_argument(
        "--url",
        help="an existing server to use (databases are created there); default: "
        "a throwaway cluster with fsync on",
    )
    parser.add_argument(
        "--only",
        action="append",
        choices=GROUPS,
        help="run only this group of metrics (repeatable); default: all",
    )
    parser.add_argument(
        "--sessions", type=int, help="worker scaling: sessions (default 128, quick 8)"
    )
    parser.add_argument(
        "--tasks", type=int, help="worker scaling: tasks per session (default 3, quick 2)"
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        help="worker scaling: sessions each worker executes at once (default 16, quick 4)",
    )
    parser.add_argument(
        "--rounds", type=int, help="worker scaling: runs per worker count (default 3, quick 1)"
    )
    parser.add_argument("--writer", choices=["store", "raw"], help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.writer:
        writer_child(args.url, args.writer, args.count)
        return 0
    sizes = QUICK if args.quick else DEFAULT
    sizes = dataclasses.replace(
        sizes,
        pool_sessions=args.sessions or sizes.pool_sessions,
        pool_tasks=args.tasks or sizes.pool_tasks,
        concurrency=args.concurrency or sizes.concurrency,
        pool_rounds=args.rounds or sizes.pool_rounds,
    )
    print(
        f"python {platform.python_version()}, psycopg {psycopg.__version__} "
        f"(libpq {psycopg.pq.version()}), {platform.system()} {platform.machine()}, "
        f"{'quick' if args.quick else 'default'} sizes",
        flush=True,
    )
    results = run(sizes, args.url, args.only or GROUPS)
    workers = [r for r in results if r.metric.startswith("workers_")]
    own = [r for r in results if r.metric == "statements_per_turn"]
    store = [r for r in results if r not in workers and r not in own]
    texts = ([table(store)] if store else []) + ([worker_table(workers)] if workers else [])
    texts += [statements_table(r) for r in own]
    for text in texts:
        print()
        print(text)
    print()
    for r in results:
        print(r.as_json())
    return 0


if __name__ == "__main__":
    sys.exit(main())
