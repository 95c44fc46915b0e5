"""What a large task costs on disk: 100 tasks of 1 MB through a real runtime on SQLite,
store size after, beside the baseline of main's row format (issue 39, item 7).

Run with ``python benchmarks/bench_blobs.py`` (``--quick``: 10 tasks). Prints the
environment, a table, then one JSON line per metric with the keys ``metric``, ``value``,
``baseline``, ``ratio``, ``unit``, ``target`` and ``ok``.

Metrics:

``store_bytes_per_input_byte``
    The store file's size (WAL checkpointed, then ``VACUUM``) over the bytes of task text
    submitted. The baseline is the very same store rewritten in main's row format (format
    5): each payload over ``BLOB_THRESHOLD`` one blob of its whole text, and each command's
    fingerprint kept whole in the inbox row, then vacuumed the same way: what main's code
    wrote for these tasks (its six copies of each text; measured directly on main, ten such
    tasks took 60.3 MB). Target value <= 1.5.
``store_mb``
    The same two sizes in MB.
``log_bytes_per_input_byte``
    Both sizes without the runtime's fold snapshots (``put_snapshot``: caches of the
    session's folded state, the same in both, shown in the table as ``fold_snapshots_mb``),
    per byte of text: what the logs and their blobs take.

For information the table also shows the median wall time of one 1 MB task (``run``),
submit to completed.

The tasks are distinct texts of random letters and digits (1,000,000 characters each, the
input limit) answered at once by a ``ScriptedModel``.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import shutil
import sqlite3
import statistics
import string
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import agentnb as nb
from agentnb.events import canonical_json
from agentnb.stores._rows import blob_digest, stored_text

TASK_CHARS = 1_000_000
BOUND = 1.5


def run_tasks(path: Path, tasks: int) -> list[float]:
    """Run ``tasks`` tasks of ``TASK_CHARS`` characters in one session; each one's ms."""
    rng = random.Random(39)
    letters = string.ascii_letters + string.digits
    agent = nb.Agent(name="Echo", agent_id="echo", model=nb.ScriptedModel(lambda m: "done"))
    times = []
    with nb.Runtime(agent, store=f"sqlite:///{path}") as runtime:
        session = runtime.session("large", user_id="bench")
        for i in range(tasks):
            text = (f"task {i}: " + "".join(rng.choices(letters, k=TASK_CHARS)))[:TASK_CHARS]
            start = time.perf_counter()
            outcome = session.run(text, timeout=120)
            times.append((time.perf_counter() - start) * 1000)
            if outcome.status != "completed":
                raise SystemExit(f"task {i} ended {outcome.status}: {outcome.error}")
    return times


def as_main_format(path: Path) -> None:
    """Rewrite the store at ``path`` the way main's code stores the same rows."""
    conn = sqlite3.connect(path)

    def get(digest: str) -> bytes:
        return bytes(conn.execute("SELECT data FROM blobs WHERE digest=?", (digest,)).fetchone()[0])

    for table in ("events", "inbox"):
        rows = conn.execute(
            f"SELECT session, seq, payload, blob FROM {table} WHERE blob IS NOT NULL"
        ).fetchall()
        for session, seq, payload, blob in rows:
            body = stored_text(payload, blob, get)
            digest = blob_digest(body.encode())
            conn.execute("INSERT OR IGNORE INTO blobs VALUES (?, ?)", (digest, body.encode()))
            conn.execute(
                f"UPDATE {table} SET payload=NULL, blob=? WHERE session=? AND seq=?",
                (digest, session, seq),
            )
    # Main keeps every command's fingerprint whole (key or none): its kind, target, run,
    # input and data.
    for session, seq, payload, blob in conn.execute(
        "SELECT session, seq, payload, blob FROM inbox WHERE type = 'inbox/accepted'"
    ).fetchall():
        p = json.loads(stored_text(payload, blob, get))
        target = None if p["kind"] == "submit" else p["turn_id"]
        whole = canonical_json([p["kind"], target, p["run_id"], p["input"], p["data"] or {}])
        conn.execute("UPDATE inbox SET digest=? WHERE session=? AND seq=?", (whole, session, seq))
    conn.execute(
        "DELETE FROM blobs WHERE digest NOT IN (SELECT blob FROM events WHERE blob IS NOT "
        "NULL UNION SELECT blob FROM inbox WHERE blob IS NOT NULL)"
    )
    conn.execute("DROP TABLE blob_refs")
    conn.execute("CREATE INDEX events_blob ON events (blob) WHERE blob IS NOT NULL")
    conn.execute("CREATE INDEX inbox_blob ON inbox (blob) WHERE blob IS NOT NULL")
    conn.commit()
    conn.close()


def compacted_size(path: Path) -> int:
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("VACUUM")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*") if p.is_file())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="10 tasks instead of 100")
    parser.add_argument("--tasks", type=int, default=None, help="how many 1 MB tasks")
    args = parser.parse_args(argv)
    tasks = args.tasks or (10 if args.quick else 100)
    print(f"python {platform.python_version()}, sqlite {sqlite3.sqlite_version}, {tasks} tasks")
    with tempfile.TemporaryDirectory(prefix="bench-blobs-") as tmp:
        path = Path(tmp) / "after" / "store.sqlite"
        path.parent.mkdir()
        times = run_tasks(path, tasks)
        after = compacted_size(path)
        conn = sqlite3.connect(path)
        (snapshots,) = conn.execute("SELECT coalesce(sum(length(data)), 0) FROM snapshots")
        snap = int(snapshots[0])
        conn.close()
        main_path = Path(tmp) / "main" / "store.sqlite"
        main_path.parent.mkdir()
        shutil.copy(path, main_path)
        as_main_format(main_path)
        before = compacted_size(main_path)
    text = tasks * TASK_CHARS
    rows = [
        ("store_bytes_per_input_byte", after / text, before / text, "bytes/byte", "<= 1.5"),
        ("store_mb", after / 1e6, before / 1e6, "MB", "info"),
        (
            "log_bytes_per_input_byte",
            (after - snap) / text,
            (before - snap) / text,
            "bytes/byte",
            "info",
        ),
    ]
    print(f"\n{'metric':<28} {'value':>10} {'main':>10} {'ratio':>7}  unit")
    for metric, value, baseline, unit, _ in rows:
        print(f"{metric:<28} {value:>10.3f} {baseline:>10.3f} {value / baseline:>7.3f}  {unit}")
    print(f"{'fold_snapshots_mb':<28} {snap / 1e6:>10.3f} {snap / 1e6:>10.3f} {'':>7}  MB")
    print(f"{'submit_to_completed_ms':<28} {statistics.median(times):>10.1f} {'':>10} {'':>7}  ms")
    print()
    ok = True
    for metric, value, baseline, unit, target in rows:
        good = value <= BOUND if target != "info" else True
        ok = ok and good
        line = {
            "metric": metric,
            "value": round(value, 3),
            "baseline": round(baseline, 3),
            "ratio": round(value / baseline, 3),
            "unit": unit,
            "target": target,
            "ok": good,
        }
        print(json.dumps(line))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
