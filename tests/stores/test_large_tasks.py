"""A large task costs its size once: the stores keep its text in one blob per session,
however many events and commands carry it (issue 39, item 7), on SQLite and PostgreSQL,
through a real runtime."""

from __future__ import annotations

import random
import sqlite3
import string
from pathlib import Path

import psycopg

import agentnb as nb
from agentnb.ops._format import Digests, log_digests, row_of
from agentnb.stores import open_store
from agentnb.stores._rows import RawEvent

TASKS = 10
TASK_CHARS = 1_000_000
"""A task as large as a task may be (the input limit)."""
BOUND = 1.5
"""What the store may hold per byte of input after the tasks ran."""


def tasks() -> list[str]:
    """``TASKS`` distinct texts of ``TASK_CHARS`` characters that compress poorly (so
    PostgreSQL's TOAST compression does not hide copies)."""
    rng = random.Random(39)
    letters = string.ascii_letters + string.digits
    return [
        (f"task {i}: " + "".join(rng.choices(letters, k=TASK_CHARS)))[:TASK_CHARS]
        for i in range(TASKS)
    ]


def run_tasks(store: str) -> nb.Session:
    agent = nb.Agent(name="Echo", agent_id="echo", model=nb.ScriptedModel(lambda m: "done"))
    texts = tasks()
    with nb.Runtime(agent, store=store) as runtime:
        session = runtime.session("large", user_id="alice")
        for text in texts:
            assert session.run(text, timeout=60).status == "completed"
        # Every copy the runtime made of a task's text reads back as it was committed.
        inputs = [e.payload["input"] for e in session.log.scan(0) if e.type == "turn/start"]
        assert inputs == texts
    return session


class TestSQLite:
    def test_ten_tasks_of_a_megabyte_take_less_than_one_and_a_half_times_their_size(
        self, tmp_path: Path
    ) -> None:
        """After ten 1 MB tasks ran, the store file (WAL checkpointed) holds at most 1.5
        bytes per byte of input."""
        path = tmp_path / "large.sqlite"
        run_tasks(f"sqlite:///{path}")
        conn = sqlite3.connect(path)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()
        size = sum(p.stat().st_size for p in tmp_path.glob("large.sqlite*"))
        assert size <= BOUND * TASKS * TASK_CHARS, f"{size:,} bytes"

    def test_a_deleted_session_leaves_no_blob(self, tmp_path: Path) -> None:
        """Deleting the session of large tasks frees every blob its rows named."""
        url = f"sqlite:///{tmp_path / 'large.sqlite'}"
        session = run_tasks(url)
        store = open_store(url)
        try:
            assert len(store.blob_usage(session.key)) == TASKS
            store.delete_session(session.key, by="test")
            conn = sqlite3.connect(tmp_path / "large.sqlite")
            assert conn.execute("SELECT count(*) FROM blobs").fetchone() == (0,)
            assert conn.execute("SELECT count(*) FROM blob_refs").fetchone() == (0,)
            conn.close()
        finally:
            store.close()


class TestPostgres:
    def test_ten_tasks_of_a_megabyte_take_less_than_one_and_a_half_times_their_size(
        self, pg_url: str
    ) -> None:
        """After ten 1 MB tasks ran, agentnb's tables (TOAST and indexes included) hold at
        most 1.5 bytes per byte of input, and the log's digests are those of its events."""
        session = run_tasks(pg_url)
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("VACUUM")
            row = conn.execute(
                "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class AS c "
                "JOIN pg_namespace AS n ON n.oid = c.relnamespace "
                "WHERE n.nspname = 'agentnb' AND c.relkind = 'r'"
            ).fetchone()
        assert row is not None
        size = int(row[0])
        assert size <= BOUND * TASKS * TASK_CHARS, f"{size:,} bytes"
        store = open_store(pg_url)
        try:
            _, _, digest, inbox_digest = log_digests(store, session.key)
            expected = Digests()
            for event in store.scan(session.key, 0):
                expected.event(row_of(RawEvent.of(event)))
            for event in store.inbox_read_after(session.key, 0, 100):
                expected.inbox_row(row_of(RawEvent.of(event)))
            assert (digest, inbox_digest) == (
                expected.events.hexdigest(),
                expected.inbox.hexdigest(),
            )
        finally:
            store.close()
