"""Closing a runtime or a store while store calls are still running must be safe.

Found by ``test_crash``: a trial that closed its store right after closing the recovering
runtime killed the whole test process with SIGSEGV. Two faults meet there:

- ``Runtime.close()`` returns while its worker threads are still inside store calls: the
  driver cancels its lease renewer (and interrupt watchers) while they await
  ``asyncio.to_thread(...)``, which does not stop the thread, and the loop's executor is shut
  down without waiting. A runtime that owns its store then closes it right away.
- ``SQLiteStore.close()`` closes every thread's connection (``check_same_thread=False``)
  under whichever thread is using it, and the ``sqlite3`` module crashes on that.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import agentnb as nb
from agentnb.stores.base import Lease
from agentnb.stores.sqlite import SQLiteStore

REPO = Path(__file__).resolve().parents[2]
GUARD = 20.0


class _SlowRenewals(SQLiteStore):
    """An SQLite store whose lease renewals take a while, counting calls in flight."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.renewing = threading.Event()
        self.in_flight = 0
        self._count = threading.Lock()

    def renew_lease(self, lease: Lease, ttl: float = 10.0) -> Lease:
        with self._count:
            self.in_flight += 1
        self.renewing.set()
        try:
            time.sleep(0.3)  # a slow disk, a busy lock: a renewal is a real I/O call
            return super().renew_lease(lease, ttl)
        finally:
            with self._count:
                self.in_flight -= 1


def test_runtime_close_returns_only_after_its_store_calls_ended(tmp_path: Path) -> None:
    """No store call of a closed runtime is still running once ``close()`` returned."""
    store = _SlowRenewals(tmp_path / "db.sqlite")
    model = nb.ScriptedModel(["x" * 400], chunk_size=1, chunk_delay=0.005)
    runtime = nb.Runtime(nb.Agent(name="A", agent_id="a", model=model), store=store, lease_ttl=0.3)
    try:
        runtime.session("s").submit("go")
        assert store.renewing.wait(GUARD), "the lease was never renewed"
        runtime.close()
        left_running = store.in_flight
    finally:
        runtime.close()
        deadline = time.monotonic() + GUARD
        while store.in_flight and time.monotonic() < deadline:
            time.sleep(0.01)
        store.close()
    assert left_running == 0, "Runtime.close() returned while a lease renewal still used the store"


_CLOSE_WHILE_READING = textwrap.dedent(
    """
    import sys, threading
    from agentnb.ids import SessionKey
    from agentnb.stores.sqlite import SQLiteStore

    key = SessionKey("n", "u", "a", "s")
    for i in range(200):
        store = SQLiteStore(f"{sys.argv[1]}/db{i}.sqlite")
        store.create_session(key)
        reading = threading.Event()

        def read():
            reading.set()
            try:
                while True:
                    store.current_lease(key)
                    store.head(key)
            except Exception:  # a clean error once the store is closed is fine
                pass

        reader = threading.Thread(target=read)
        reader.start()
        reading.wait()
        store.close()
        reader.join()
    print("clean")
    """
)


def test_closing_an_sqlite_store_while_another_thread_reads_it_does_not_crash(
    tmp_path: Path,
) -> None:
    """A read racing ``close()`` fails cleanly (or completes); it never crashes or hangs."""
    try:
        child = subprocess.run(
            [sys.executable, "-c", _CLOSE_WHILE_READING, str(tmp_path)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=GUARD,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise AssertionError("a read racing SQLiteStore.close() hung") from None
    assert child.returncode == 0, f"crashed with {child.returncode}: {child.stderr[-2000:]}"
    assert child.stdout.strip() == "clean"
