"""The PostgreSQL store passes the store contract, plus what is special to a shared server.

Everything runs against real PostgreSQL servers started by ``tests/pg.py`` (``initdb`` +
``pg_ctl``): one shared cluster with a fresh database per test, and clusters of their own for
the tests that restart or reconfigure the server. Other processes are real children
(``tests/stores/_pg_child.py``). Timeouts only stop a broken test from hanging; a wake-up is
judged against its timeout, never against a fixed time.
"""

from __future__ import annotations

import functools
import gc
import json
import os
import queue
import socket
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agentnb.errors import (
    Corrupt,
    Fenced,
    IdempotencyConflict,
    InvalidInput,
    LeaseHeld,
    StorageError,
    install_hint,
)
from agentnb.events import BLOB_THRESHOLD, Event, canonical_json
from agentnb.ids import Clock, FakeClock, SessionKey, new_id
from agentnb.log import SessionLog
from agentnb.stores import SessionStore, open_store
from agentnb.stores._rows import blob_digest, stored_text
from agentnb.stores.postgres import SCHEMA_VERSION, PostgresStore
from agentnb.testing.store_contract import StoreContract, command, step
from tests.pg import Cluster, cluster_or_skip
from tests.stores._pg_child import key as child_key

REPO = Path(__file__).resolve().parents[2]
GUARD = 30.0
"""Seconds any one wait may take before the test fails instead of hanging."""


class TestPostgresStore(StoreContract):
    @pytest.fixture(autouse=True)
    def _database(self, pg_url: str) -> None:
        self.url = pg_url

    def make_store(self, tmp_path: Path, *, clock: Clock | None = None) -> SessionStore:
        return PostgresStore(self.url, clock=clock)

    def make_peer(self, tmp_path: Path, *, clock: Clock | None = None) -> SessionStore:
        return PostgresStore(self.url, clock=clock)

    def rows_of(self, tmp_path: Path, key: SessionKey) -> dict[str, int]:
        ((sid,),) = sql(
            self.url,
            "SELECT id FROM agentnb.sessions WHERE namespace = %s AND user_id = %s "
            "AND agent_id = %s AND session_id = %s",
            (key.namespace, key.user_id, key.agent_id, key.session_id),
        )
        return {
            table: sql(
                self.url, f"SELECT count(*) FROM agentnb.{table} WHERE session = %s", (sid,)
            )[0][0]
            for table in ("events", "inbox", "watermarks", "snapshots")
        }


# --------------------------------------------------------------------------------------------
# helpers


@pytest.fixture
def store(pg_url: str) -> Iterator[PostgresStore]:
    store = PostgresStore(pg_url)
    try:
        yield store
    finally:
        store.close()


@pytest.fixture
def own_cluster() -> Iterator[Cluster]:
    """A cluster of this test's own, for restarting or reconfiguring the server."""
    cluster = cluster_or_skip()
    try:
        yield cluster
    finally:
        cluster.remove()


def sql(url: str, statement: str, params: Any = None) -> list[tuple[Any, ...]]:
    """One statement on a plain psycopg connection, as someone outside agentnb would."""
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(statement, params)
        return cur.fetchall() if cur.description else []


def as_version_4(url: str) -> None:
    """Turn a database back into schema 4, rows as schema 4 wrote them: a payload over the
    blob threshold is one blob of its whole text (``payload`` NULL), a command's fingerprint
    is kept whole, blobs are found through indexes on the rows."""
    with psycopg.connect(url) as conn:

        def get(digest: str) -> bytes:
            row = conn.execute("SELECT data FROM agentnb.blobs WHERE digest = %s", (digest,))
            return bytes(row.fetchone()[0])  # type: ignore[index]

        for table in ("events", "inbox"):
            rows = conn.execute(
                f"SELECT session, seq, payload, blob FROM agentnb.{table} WHERE blob IS NOT NULL"
            ).fetchall()
            for session, seq, payload, blob in rows:
                body = stored_text(payload, blob, get).encode()
                digest = blob_digest(body)
                conn.execute(
                    "INSERT INTO agentnb.blobs VALUES (%s, %s) ON CONFLICT DO NOTHING",
                    (digest, body),
                )
                conn.execute(
                    f"UPDATE agentnb.{table} SET payload = NULL, blob = %s "
                    "WHERE session = %s AND seq = %s",
                    (digest, session, seq),
                )
        conn.execute(
            "DELETE FROM agentnb.blobs WHERE digest IN (SELECT digest FROM agentnb.blob_refs) "
            "AND digest NOT IN (SELECT blob FROM agentnb.events WHERE blob IS NOT NULL UNION "
            "SELECT blob FROM agentnb.inbox WHERE blob IS NOT NULL)"
        )
        conn.execute("DROP TABLE agentnb.blob_refs")
        conn.execute("CREATE INDEX events_blob ON agentnb.events (blob) WHERE blob IS NOT NULL")
        conn.execute("CREATE INDEX inbox_blob ON agentnb.inbox (blob) WHERE blob IS NOT NULL")
        conn.execute("DELETE FROM agentnb.migrations WHERE version > 4")


def child(mode: str, url: str, session_id: str, *args: object, skew: float = 0.0) -> Any:
    """Run ``_pg_child`` to completion; its JSON line."""
    pre = ["--skew", str(skew)] if skew else []
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "tests.stores._pg_child", *pre, mode, url, session_id]
        + [str(a) for a in args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=GUARD * 2,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def spawn(mode: str, url: str, session_id: str, *args: object) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.stores._pg_child", mode, url, session_id]
        + [str(a) for a in args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + GUARD
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.02)


def listeners(url: str) -> int:
    """How many connections LISTEN (seen from the server, not from the store's insides)."""
    rows = sql(
        url,
        "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN %' "
        "AND datname = current_database()",
    )
    return int(rows[0][0])


def in_background(target: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    """Run ``target`` in a thread; the list gets its result or the exception it raised."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(target())
        except BaseException as exc:  # handed to the test thread
            out.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def append_retrying(
    store: SessionStore, key: SessionKey, events: list[Event], expected: int, batch_id: str
) -> list[Event]:
    """Append as the runtime's LogWriter does: a StorageError is retried, same batch id."""
    deadline = time.monotonic() + GUARD
    while True:
        try:
            return store.append(key, events, expected_seq=expected, batch_id=batch_id)
        except (Fenced, IdempotencyConflict, InvalidInput):
            raise
        except StorageError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


# --------------------------------------------------------------------------------------------


class TestSchema:
    def test_new_database_gets_the_current_schema(self, pg_url: str) -> None:
        """Opening an empty database creates the agentnb schema at the current version."""
        PostgresStore(pg_url).close()
        assert sql(pg_url, "SELECT max(version) FROM agentnb.migrations") == [(SCHEMA_VERSION,)]

    def test_version_2_database_is_migrated(self, pg_url: str) -> None:
        """A database at schema 2 gains the archive flag (nothing archived), its tombstones
        numbered in the order they were deleted and the tombstone watermarks, and is then at
        the current version, where archiving and deleting go on."""
        clock = FakeClock()
        store = PostgresStore(pg_url, clock=clock)
        keys = [child_key(f"s{i}") for i in range(4)]
        for k in keys:
            store.create_session(k)
        for k in (keys[2], keys[0]):
            clock.advance(1)
            store.delete_session(k, by="ops")
        store.close()
        as_version_4(pg_url)
        sql(pg_url, "DROP TABLE agentnb.tokens")  # version 4
        sql(pg_url, "DROP TABLE agentnb.tombstone_marks")
        sql(pg_url, "DROP INDEX agentnb.sessions_deleted")
        sql(pg_url, "ALTER TABLE agentnb.sessions DROP COLUMN archived_at, DROP COLUMN deleted_seq")
        sql(pg_url, "DELETE FROM agentnb.migrations WHERE version > 2")
        store = PostgresStore(pg_url, clock=clock)
        try:
            assert [(t.key, t.seq) for t in store.tombstones()] == [(keys[2], 1), (keys[0], 2)]
            assert store.tombstone_watermark("sink") == 0
            assert [r.archived_at for r in store.find_sessions()] == [None, None]
            store.set_archived(keys[1])
            assert [r.key for r in store.find_sessions()] == [keys[3]]
            assert store.delete_session(keys[3], by="ops").seq == 3
        finally:
            store.close()
        assert sql(pg_url, "SELECT max(version) FROM agentnb.migrations") == [(SCHEMA_VERSION,)]

    def test_version_4_database_with_whole_payload_blobs_is_migrated(self, pg_url: str) -> None:
        """A schema-4 database (each large payload one blob of its whole text, a command's
        long fingerprint kept whole) reads the same once migrated; a re-sent command is
        still recognised, new writes of a text store it once, and deleting a session frees
        its old blobs but keeps one another session's rows name."""
        store = PostgresStore(pg_url)
        mine, other = child_key("mine"), child_key("other")
        text = "m" * (BLOB_THRESHOLD + 10)
        shared = Event.create("acme/shared", {"text": "s" * (BLOB_THRESHOLD + 10)})
        fingerprint = canonical_json(["submit", None, None, text, {}])
        for k in (mine, other):
            store.create_session(k)
        store.inbox_append(mine, command(text), dedupe_key="k", fingerprint=fingerprint)
        batch = [Event.create("turn/start", {"input": text}, turn_id="t1"), shared]
        store.append(mine, [*batch, step(3)], expected_seq=0, batch_id="b")
        store.append(other, [shared.model_copy()], expected_seq=0, batch_id="b")
        before = (store.read_after(mine, 0, 10), store.read_after(other, 0, 10))
        inbox = store.inbox_read_after(mine, 0, 10)
        store.close()
        as_version_4(pg_url)
        sql(pg_url, "UPDATE agentnb.inbox SET digest = %s WHERE dedupe_key = 'k'", (fingerprint,))
        assert sql(pg_url, "SELECT count(*) FROM agentnb.blobs") == [(3,)]
        store = PostgresStore(pg_url)
        try:
            assert (store.read_after(mine, 0, 10), store.read_after(other, 0, 10)) == before
            assert store.inbox_read_after(mine, 0, 10) == inbox
            again = store.inbox_append(mine, command(text), dedupe_key="k", fingerprint=fingerprint)
            assert again == (inbox[0], False)
            with pytest.raises(IdempotencyConflict):
                store.inbox_append(mine, command(text), dedupe_key="k", fingerprint="other")
            usage = store.blob_usage(mine)
            assert len(usage) == 3
            new = [Event.create("acme/a", {"text": text}), Event.create("acme/b", {"t": text})]
            store.append(mine, new, expected_seq=3, batch_id="b2")
            assert len(store.blob_usage(mine)) == 4
            store.delete_session(mine, by="ops")
            assert len(set(usage) & set(store.blob_usage(other))) == 1
            assert store.read_after(other, 0, 10) == before[1]
        finally:
            store.close()
        assert sql(pg_url, "SELECT count(*) FROM agentnb.blobs") == [(1,)]
        assert sql(pg_url, "SELECT max(version) FROM agentnb.migrations") == [(SCHEMA_VERSION,)]

    def test_version_3_database_gains_the_token_table(self, pg_url: str) -> None:
        """A database at schema 3 gains the token table at open, keeping its sessions."""
        store = PostgresStore(pg_url)
        key = child_key("s1")
        store.create_session(key)
        store.close()
        as_version_4(pg_url)
        sql(pg_url, "DROP TABLE agentnb.tokens")
        sql(pg_url, "DELETE FROM agentnb.migrations WHERE version > 3")
        store = PostgresStore(pg_url)
        try:
            assert store.get_session(key) is not None
            store.add_token("tok_a", "alice", "a" * 64)
            assert [t.token_id for t in store.list_tokens()] == ["tok_a"]
        finally:
            store.close()
        assert sql(pg_url, "SELECT max(version) FROM agentnb.migrations") == [(SCHEMA_VERSION,)]

    def test_newer_schema_is_refused(self, pg_url: str) -> None:
        """A database migrated by a newer agentnb raises StorageError saying to upgrade,
        naming the database without its password, and nothing is changed."""
        PostgresStore(pg_url).close()
        sql(pg_url, "INSERT INTO agentnb.migrations (version, note) VALUES (%s, 'future')", (99,))
        tables = sql(pg_url, "SELECT count(*) FROM information_schema.tables")
        with pytest.raises(StorageError, match="newer") as info:
            PostgresStore(pg_url)
        assert "upgrade agentnb" in str(info.value)
        assert not isinstance(info.value, Corrupt)
        assert sql(pg_url, "SELECT count(*) FROM information_schema.tables") == tables

    def test_foreign_agentnb_schema_is_refused(self, pg_url: str) -> None:
        """An 'agentnb' schema that agentnb did not create raises Corrupt; it is not touched."""
        sql(pg_url, "CREATE SCHEMA agentnb")
        sql(pg_url, "CREATE TABLE agentnb.mine (x int)")
        with pytest.raises(Corrupt, match="did not create"):
            PostgresStore(pg_url)
        assert sql(pg_url, "SELECT to_regclass('agentnb.sessions')") == [(None,)]

    def test_reader_does_not_create_a_store(self, pg_url: str) -> None:
        """create=False on a database without agentnb raises InvalidInput, creating nothing."""
        with pytest.raises(InvalidInput, match="no agentnb store"):
            open_store(pg_url, create=False)
        assert sql(pg_url, "SELECT to_regnamespace('agentnb')") == [(None,)]
        PostgresStore(pg_url).close()
        open_store(pg_url, create=False).close()

    def test_processes_opening_a_new_database_together_agree(self, pg_url: str) -> None:
        """Stores opened at once on an empty database all work and share one secret."""
        stores: list[PostgresStore] = []
        lock = threading.Lock()

        def open_one() -> None:
            opened = PostgresStore(pg_url)
            with lock:
                stores.append(opened)

        threads = [threading.Thread(target=open_one) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(GUARD)
        try:
            assert len(stores) == 4
            assert len({s.secret() for s in stores}) == 1
            assert sql(pg_url, "SELECT count(*) FROM agentnb.migrations") == [(SCHEMA_VERSION,)]
        finally:
            for s in stores:
                s.close()


class TestUrls:
    def test_open_store_dispatches_both_schemes(self, pg_url: str) -> None:
        """open_store gives a PostgresStore for postgresql:// and postgres:// URLs."""
        for url in (pg_url, pg_url.replace("postgresql://", "postgres://", 1)):
            opened = open_store(url)
            try:
                assert isinstance(opened, PostgresStore)
            finally:
                opened.close()

    def test_password_never_shows(self, pg_url: str) -> None:
        """A password in the URL (authority or query) is masked in url, repr and errors."""
        url = pg_url.replace("postgres@", "postgres:s3cret-pw@", 1) + "&sslpassword=s3cret-2"
        opened = PostgresStore(url)  # trust authentication ignores the password
        try:
            assert "s3cret" not in opened.url
            assert "s3cret" not in repr(opened)
            assert ":***@" in opened.url
        finally:
            opened.close()
        with pytest.raises(StorageError) as info:
            opened.head(child_key("x"))
        assert "s3cret" not in str(info.value)

    def test_unreachable_server_names_host_and_port_not_password(self) -> None:
        """No server at the address raises StorageError naming host:port, never the password."""
        port = free_port()
        url = f"postgresql://alice:s3cret-pw@127.0.0.1:{port}/agentnb?connect_timeout=5"
        with pytest.raises(StorageError) as info:
            open_store(url)
        text = str(info.value)
        assert f"127.0.0.1:{port}" in text
        assert "s3cret" not in text
        assert "check that the server runs" in text

    @pytest.mark.parametrize(
        "url",
        [
            "postgresql://alice:s3cret-pw@localhost/db?no_such_option=1",
            "postgresql://alice:s3cret-pw@localhost:notaport/db",
        ],
    )
    def test_malformed_url_is_invalid_input(self, url: str) -> None:
        """A URL libpq cannot read raises InvalidInput saying the form, never the password."""
        with pytest.raises((InvalidInput, StorageError)) as info:
            open_store(url)
        assert "s3cret" not in str(info.value)

    def test_unsupported_scheme_does_not_echo_credentials(self) -> None:
        """An unknown scheme raises InvalidInput without the credentials of the URL."""
        with pytest.raises(InvalidInput) as info:
            open_store("mysql://alice:s3cret-pw@db/x")
        assert "s3cret" not in str(info.value)
        assert "postgresql://" in str(info.value)

    def test_import_agentnb_does_not_import_psycopg(self) -> None:
        """`import agentnb` (and opening SQLite) loads no psycopg module."""
        code = (
            "import sys, agentnb; agentnb.open_store('memory://'); "
            "assert not [m for m in sys.modules if m.startswith('psycopg')], 'psycopg loaded'"
        )
        subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO, timeout=GUARD * 2)

    def test_missing_driver_says_what_to_install(self) -> None:
        """Without psycopg, a postgresql:// URL raises ImportError naming the extra."""
        code = (
            "import sys\n"
            "class Block:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] in ('psycopg', 'psycopg_pool'):\n"
            "            raise ImportError(f'No module named {name!r}')\n"
            "sys.meta_path.insert(0, Block())\n"
            "import agentnb\n"
            "try:\n"
            "    agentnb.open_store('postgresql://u@localhost/db')\n"
            "except ImportError as exc:\n"
            "    print(exc)\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=GUARD * 2,
            check=True,
        )
        assert install_hint("postgres") in done.stdout


class TestNotify:
    @pytest.mark.parametrize(
        ("inbox", "local"),
        [(False, False), (True, False), (True, True)],
        ids=["head", "inbox", "inbox-local"],
    )
    def test_commit_in_another_process_wakes_a_waiter(
        self, store: PostgresStore, pg_url: str, inbox: bool, local: bool
    ) -> None:
        """A commit by another process wakes wait_for_head / wait_for_inbox through NOTIFY:
        with polling pushed past the timeout, the waiter still returns well before it. A
        ``local`` inbox waiter (a run's watcher, which reads nothing on entry) too."""
        key = child_key("s1")
        store.create_session(key)
        timeout = GUARD
        store.poll_interval = timeout * 4  # only a notification can wake the waiter in time
        wait = store.wait_for_head
        if inbox:
            wait = functools.partial(store.wait_for_inbox, local=local)
        assert wait(key, 0, 0.01) == 0  # starts the listener
        wait_until(lambda: listeners(pg_url) == 1, "the store listens")
        started = time.monotonic()
        thread, result = in_background(lambda: (wait(key, 0, timeout), time.monotonic()))
        got = child("command" if inbox else "append", pg_url, "s1", *(() if inbox else (1,)))
        thread.join(timeout + GUARD)
        (value, woke), *_ = result
        assert value == 1
        assert got == ({"seq": 1} if inbox else {"head": 1})
        assert woke - started < timeout / 2, "the waiter slept until its timeout"

    def test_own_commits_wake_waiters_when_handed_over_not_when_notified(
        self, store: PostgresStore, pg_url: str
    ) -> None:
        """An append made with wake=False (the runtime hands the events to its readers
        first) is not announced to this object's waiters by its own NOTIFY; wake_waiters
        wakes them. A local waiter returns the head it committed without reading it."""
        key = child_key("s1")
        store.create_session(key)
        store.poll_interval = GUARD * 4
        assert store.wait_for_head(key, 0, 0.01) == 0  # starts the listener
        wait_until(lambda: listeners(pg_url) == 1, "the store listens")
        thread, result = in_background(lambda: store.wait_for_head(key, 0, GUARD))
        time.sleep(0.05)
        store.append(key, [step(1)], expected_seq=0, batch_id=new_id("b"), wake=False)
        time.sleep(0.3)  # its NOTIFY came back to this process meanwhile
        assert thread.is_alive(), "the waiter woke before the events were handed over"
        store.wake_waiters(key, inbox=False)
        thread.join(GUARD)
        assert result == [1]
        assert store.wait_for_head(key, 0, GUARD, local=True) == 1

    def test_follow_sees_another_process_commit_everything_once(
        self, store: PostgresStore, pg_url: str
    ) -> None:
        """SessionLog.follow in this process yields every event another process commits,
        once and in order."""
        key = child_key("s1")
        store.create_session(key)
        store.poll_interval = GUARD * 4
        log = SessionLog(store, key)
        writer = spawn("append", pg_url, "s1", 200, 7, 0.002)
        got = [e.seq for e in _take(log.follow(0, idle_timeout=GUARD), 200)]
        _, err = writer.communicate(timeout=GUARD)
        assert writer.returncode == 0, err
        assert got == list(range(1, 201))

    def test_commits_to_other_sessions_do_not_end_a_wait(
        self, store: PostgresStore, pg_url: str
    ) -> None:
        """A waiter woken by a notification for another session returns only at its own
        commit (or timeout), with the right head."""
        quiet, busy = child_key("quiet"), child_key("busy")
        for k in (quiet, busy):
            store.create_session(k)
        store.poll_interval = GUARD * 4
        assert store.wait_for_head(quiet, 0, 0.01) == 0
        wait_until(lambda: listeners(pg_url) == 1, "the store listens")
        thread, result = in_background(lambda: store.wait_for_head(quiet, 0, GUARD))
        child("append", pg_url, "busy", 20, 1)
        assert thread.is_alive()
        child("append", pg_url, "quiet", 3, 3)
        thread.join(GUARD)
        assert result == [3]

    def test_a_store_nobody_closed_stops_listening_once_collected(self, pg_url: str) -> None:
        """A store dropped without close() lets its listener go when it is collected: the
        server sees no LISTEN connection left and no socket is left for the collector."""
        store = PostgresStore(pg_url)
        key = child_key("s1")
        store.create_session(key)
        store.wait_for_head(key, 0, 0.01)
        wait_until(lambda: listeners(pg_url) == 1, "the store listens")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            del store
            gc.collect()
            wait_until(lambda: listeners(pg_url) == 0, "the listener lets go")
            gc.collect()
        assert [w.message for w in caught if issubclass(w.category, ResourceWarning)] == []


def _take(follow: Any, n: int) -> list[Event]:
    out: list[Event] = []
    for event in follow:
        out.append(event)
        if len(out) == n:
            break
    return out


class TestDatabaseClock:
    def test_skewed_machines_agree_on_a_live_lease(self, store: PostgresStore, pg_url: str) -> None:
        """A process whose clock runs an hour ahead cannot take a lease that is live on the
        database's clock, and sees it as live; its store clock reads the database time."""
        key = child_key("s1")
        store.create_session(key)
        lease = store.acquire_lease(key, "here", ttl=GUARD)
        ahead = child("acquire", pg_url, "s1", "ahead", 10, skew=3600)
        assert ahead["ok"] is False
        assert ahead["error"] == LeaseHeld.__name__
        assert ahead["current"] == ["here", lease.epoch]
        assert abs(ahead["clock_minus_time"] + 3600) < 60  # the database time, not its own

    def test_a_lease_expires_on_the_database_clock(self, store: PostgresStore, pg_url: str) -> None:
        """A process whose clock runs an hour behind takes over a lease as soon as it
        expired on the database's clock (by its own clock it would be live for an hour)."""
        key = child_key("s1")
        store.create_session(key)
        lease = store.acquire_lease(key, "here", ttl=0.5)
        wait_until(lambda: store.current_lease(key) is None, "the lease expires")
        behind = child("acquire", pg_url, "s1", "behind", GUARD, skew=-3600)
        assert behind["ok"] is True
        assert behind["epoch"] == lease.epoch + 1
        assert 0 < behind["expires_in"] - 3600 <= GUARD + 5
        with pytest.raises(Fenced):
            store.append(key, [step()], expected_seq=0, batch_id="b", fence=lease)
        with pytest.raises(LeaseHeld):
            store.acquire_lease(key, "here")


class TestConnectionLoss:
    def test_connection_killed_mid_commit_is_uncertain_then_settled_once(
        self, store: PostgresStore, pg_url: str
    ) -> None:
        """A commit whose connection is terminated while it runs raises StorageError saying
        the commit is uncertain; retrying the same batch id commits it exactly once."""
        key = child_key("s1")
        store.create_session(key)
        store.append(key, [step(1)], expected_seq=0, batch_id="seed")
        blocker = psycopg.connect(pg_url, autocommit=True)
        try:
            blocker.execute("BEGIN")
            blocker.execute("SELECT * FROM agentnb.sessions FOR UPDATE")
            events = [step(2), step(3)]
            thread, result = in_background(
                lambda: store.append(key, events, expected_seq=1, batch_id="b2")
            )
            wait_until(lambda: bool(_waiting_backends(pg_url)), "the commit waits for the lock")
            (pid,) = _waiting_backends(pg_url)
            sql(pg_url, "SELECT pg_terminate_backend(%s)", (pid,))
            thread.join(GUARD)
            (error,) = result
            assert isinstance(error, StorageError)
            assert "may or may not have committed" in str(error)
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        committed = append_retrying(store, key, events, 1, "b2")
        assert [e.seq for e in committed] == [2, 3]
        assert [e.event_id for e in store.read_after(key, 0, 10)][1:] == [
            e.event_id for e in events
        ]
        assert append_retrying(store, key, events, 1, "b2") == committed
        assert store.head(key) == 3

    def test_commit_durable_but_unacknowledged_is_settled_by_the_retry(
        self, own_cluster: Cluster
    ) -> None:
        """A commit that is durable on the server but whose connection dies before the
        acknowledgement raises an uncertain StorageError; the retry with the same batch id
        finds it committed and writes nothing more."""
        url = own_cluster.database()
        key = child_key("s1")
        with PostgresStore(url) as first:
            first.create_session(key)
            first.append(key, [step(1)], expected_seq=0, batch_id="seed")
        # A synchronous standby that never comes: commits are written, never acknowledged.
        # Each store opens after the reload, so its connections start with the new setting.
        _reconfigure(url, "synchronous_standby_names", "nobody")
        events = [step(2)]
        with PostgresStore(url) as stuck:
            thread, result = in_background(
                lambda: stuck.append(key, events, expected_seq=1, batch_id="b2")
            )
            wait_until(lambda: bool(_syncrep_backends(url)), "the commit waits for the standby")
            (pid,) = _syncrep_backends(url)
            sql(url, "SELECT pg_terminate_backend(%s)", (pid,))
            thread.join(GUARD)
        (error,) = result
        assert isinstance(error, StorageError)
        assert "may or may not have committed" in str(error)
        _reconfigure(url, "synchronous_standby_names", None)
        with PostgresStore(url) as store:
            assert store.head(key) == 2  # it had committed
            again = append_retrying(store, key, events, 1, "b2")
            assert [e.seq for e in again] == [2]
            assert store.head(key) == 2
            assert [e.event_id for e in store.read_after(key, 1, 10)] == [events[0].event_id]

    def test_server_restart_under_a_waiter_and_a_follower_loses_nothing(
        self, own_cluster: Cluster
    ) -> None:
        """Across a crash restart of the server (pg_ctl restart -m immediate), a waiter
        wakes on the next commit and a follower yields every event once, in order."""
        url = own_cluster.database()
        store = PostgresStore(url)
        try:
            key = child_key("s1")
            store.create_session(key)
            store.poll_interval = GUARD * 4  # no polling: the reconnect and NOTIFY wake them
            log = SessionLog(store, key)
            follower, followed = in_background(
                lambda: [e.seq for e in _take(log.follow(0, idle_timeout=GUARD * 2), 20)]
            )
            child("append", url, "s1", 10, 3)
            wait_until(lambda: listeners(url) == 1, "the store listens")
            head = store.head(key)
            assert head == 10
            started = time.monotonic()
            waiter, woke = in_background(
                lambda: (store.wait_for_head(key, head, GUARD * 2), time.monotonic())
            )
            own_cluster.restart(mode="immediate")
            child("append", url, "s1", 10, 4)
            waiter.join(GUARD * 2 + GUARD)
            follower.join(GUARD * 2 + GUARD)
            (value, at), *_ = woke
            assert value > head
            assert at - started < GUARD, "the waiter slept until its timeout"
            assert followed == [list(range(1, 21))]
            assert [e.seq for e in store.read_after(key, 0, 100)] == list(range(1, 21))
        finally:
            store.close()


def _waiting_backends(url: str) -> list[int]:
    rows = sql(
        url,
        "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
        "AND datname = current_database() AND query LIKE 'WITH s AS (UPDATE agentnb.sessions%%'",
    )
    return [int(r[0]) for r in rows]


def _reconfigure(url: str, name: str, value: str | None) -> None:
    """Set (None: reset) a server setting and wait until new connections see it."""
    if value is None:
        sql(url, f"ALTER SYSTEM RESET {name}")
    else:
        sql(url, f"ALTER SYSTEM SET {name} = '{value}'")
    sql(url, "SELECT pg_reload_conf()")
    wait_until(
        lambda: sql(url, f"SHOW {name}") == [(value or "",)], "the server reloads its settings"
    )


def _syncrep_backends(url: str) -> list[int]:
    # Only this database's: the cluster may be making the next test database meanwhile.
    rows = sql(
        url,
        "SELECT pid FROM pg_stat_activity WHERE wait_event = 'SyncRep' "
        "AND datname = current_database()",
    )
    return [int(r[0]) for r in rows]


class TestErrors:
    def test_altered_row_is_corrupt_in_every_read(self, store: PostgresStore, pg_url: str) -> None:
        """A stored event changed outside agentnb raises Corrupt naming its seq, row by row
        and columnar."""
        key = child_key("s1")
        store.create_session(key)
        store.append(key, [step(1), step(2), step(3)], expected_seq=0, batch_id="b")
        sql(pg_url, "UPDATE agentnb.events SET payload = replace(payload, '2', '9') WHERE seq = 2")
        with pytest.raises(Corrupt, match="seq 2"):
            store.read_after(key, 0, 10)
        pytest.importorskip("pyarrow")
        with pytest.raises(Corrupt, match="seq 2"):
            store.read_arrow(key, 0, 10)

    def test_missing_event_is_a_gap(self, store: PostgresStore, pg_url: str) -> None:
        """An event deleted outside agentnb raises Corrupt (a gap), never a silent skip."""
        key = child_key("s1")
        store.create_session(key)
        store.append(key, [step(1), step(2), step(3)], expected_seq=0, batch_id="b")
        sql(pg_url, "DELETE FROM agentnb.events WHERE seq = 2")
        with pytest.raises(Corrupt, match="gap"):
            store.read_after(key, 0, 10)

    def test_a_lock_held_too_long_is_a_storage_error(self, pg_url: str) -> None:
        """A commit that waits longer than lock_timeout raises StorageError saying to retry;
        nothing is written."""
        store = PostgresStore(pg_url, lock_timeout=0.2)
        key = child_key("s1")
        try:
            store.create_session(key)
            with psycopg.connect(pg_url) as blocker:
                blocker.execute("SELECT * FROM agentnb.sessions FOR UPDATE")
                with pytest.raises(StorageError, match="retry"):
                    store.append(key, [step()], expected_seq=0, batch_id="b")
            assert store.head(key) == 0
            store.append(key, [step()], expected_seq=0, batch_id="b")
            assert store.head(key) == 1
        finally:
            store.close()

    def test_text_that_is_not_unicode_is_invalid_input(self, store: PostgresStore) -> None:
        """An id holding a lone surrogate (not encodable as UTF-8) raises InvalidInput, not a
        codec error, and creates nothing."""
        with pytest.raises(InvalidInput, match=r"not valid Unicode|lone surrogates"):
            store.create_session(child_key("s\ud800"))
        assert store.list_sessions() == []

    def test_dropped_tables_are_corrupt(self, store: PostgresStore, pg_url: str) -> None:
        """Tables dropped under a running store raise Corrupt saying to restore."""
        key = child_key("s1")
        store.create_session(key)
        sql(pg_url, "DROP TABLE agentnb.events")
        with pytest.raises(Corrupt, match="restore"):
            store.read_after(key, 0, 10)


class TestPendingWork:
    # Claims and settles are in the store contract (StoreContract); what is special here is
    # how a claimer hears of work: LISTEN/NOTIFY.
    def test_watchers_hear_which_known_session_got_a_command(
        self, store: PostgresStore, pg_url: str
    ) -> None:
        """watch_pending's callback gets the key of a session this store has used (whoever
        holds it here looks), and None for a session it has not (claimers claim)."""
        known, other = child_key("known"), child_key("other")
        store.create_session(known)
        assert store.head(known) == 0  # used here
        with PostgresStore(pg_url) as elsewhere:  # a session the watching store never used
            elsewhere.create_session(other)
        heard: queue.Queue[SessionKey | None] = queue.Queue()
        unwatch = store.watch_pending(heard.put)
        try:
            assert heard.get(timeout=GUARD) is None  # the listener connected: look once
            child("command", pg_url, "known")
            assert heard.get(timeout=GUARD) == known
            child("command", pg_url, "other")
            assert heard.get(timeout=GUARD) is None
            assert heard.empty()
        finally:
            unwatch()
