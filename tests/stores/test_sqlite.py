"""The SQLite store passes the store contract, plus what is special to one file on disk."""

from __future__ import annotations

import os
import queue
import sqlite3
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentnb.errors import (
    Corrupt,
    IdempotencyConflict,
    InvalidInput,
    StorageError,
    UnknownRequiredEvent,
)
from agentnb.events import BLOB_THRESHOLD, Event, canonical_json
from agentnb.ids import Clock, FakeClock, SessionKey
from agentnb.log import SessionLog
from agentnb.stores import SessionStore, open_store
from agentnb.stores._rows import COLUMNS, blob_digest, encode, stored_text
from agentnb.stores.sqlite import (
    _FORMAT_4_COLUMNS,
    _FORMAT_5_COLUMNS,
    _LIFECYCLE_COLUMNS,
    FORMAT,
    SQLiteStore,
)
from agentnb.testing.store_contract import StoreContract, command, session_key, step


class TestSQLiteStore(StoreContract):
    def make_store(self, tmp_path: Path, *, clock: Clock | None = None) -> SessionStore:
        return SQLiteStore(tmp_path / "agentnb.sqlite", clock=clock)

    def make_peer(self, tmp_path: Path, *, clock: Clock | None = None) -> SessionStore:
        return SQLiteStore(tmp_path / "agentnb.sqlite", clock=clock)

    def rows_of(self, tmp_path: Path, key: SessionKey) -> dict[str, int]:
        conn = _raw(tmp_path / "agentnb.sqlite")
        try:
            sid = _sid(conn, key)
            return {
                table: conn.execute(
                    f"SELECT count(*) FROM {table} WHERE session=?", (sid,)
                ).fetchone()[0]
                for table in ("events", "inbox", "watermarks", "snapshots")
            }
        finally:
            conn.close()


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "agentnb.sqlite"


@pytest.fixture
def store(path: Path) -> Iterator[SQLiteStore]:
    store = SQLiteStore(path)
    try:
        yield store
    finally:
        store.close()


@pytest.fixture
def key(store: SQLiteStore) -> SessionKey:
    key = session_key()
    store.create_session(key)
    return key


def _raw(path: Path) -> sqlite3.Connection:
    """A plain sqlite3 connection, for tampering the way someone outside agentnb would."""
    return sqlite3.connect(path, isolation_level=None)


# Another process: takes the file's turn, says so, keeps it a moment, then notes (in the file
# named by its second argument) that it lets go, and exits.
_HOLD_THE_TURN = """
import fcntl, os, pathlib, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(0.5)
pathlib.Path(sys.argv[2]).touch()
"""


def _as_format_5(conn: sqlite3.Connection) -> None:
    """Turn a store file back into format 5, rows as format 5 wrote them: a payload over
    the blob threshold is one blob of its whole text (``payload`` NULL), a command's
    fingerprint is kept whole, blobs are found through indexes on the rows."""
    for table in ("events", "inbox"):
        rows = conn.execute(
            f"SELECT session, seq, payload, blob FROM {table} WHERE blob IS NOT NULL"
        ).fetchall()
        for session, seq, payload, blob in rows:

            def get(digest: str) -> bytes:
                row = conn.execute("SELECT data FROM blobs WHERE digest=?", (digest,))
                return bytes(row.fetchone()[0])

            body = stored_text(payload, blob, get).encode()
            digest = blob_digest(body)
            conn.execute("INSERT OR IGNORE INTO blobs VALUES (?, ?)", (digest, body))
            conn.execute(
                f"UPDATE {table} SET payload=NULL, blob=? WHERE session=? AND seq=?",
                (digest, session, seq),
            )
    # Parts no row names any more go (format 5 never wrote them).
    conn.execute(
        "DELETE FROM blobs WHERE digest IN (SELECT digest FROM blob_refs) AND digest NOT IN "
        "(SELECT blob FROM events WHERE blob IS NOT NULL UNION "
        "SELECT blob FROM inbox WHERE blob IS NOT NULL)"
    )
    conn.execute("DROP TABLE blob_refs")
    conn.execute("CREATE INDEX events_blob ON events (blob) WHERE blob IS NOT NULL")
    conn.execute("CREATE INDEX inbox_blob ON inbox (blob) WHERE blob IS NOT NULL")
    conn.execute("UPDATE agentnb_meta SET value='agentnb-sqlite/5' WHERE key='format'")


def _as_format_4(conn: sqlite3.Connection) -> None:
    """Turn a store file back into format 4: the listing indexed by ``last_activity``, no
    listing key and no triggers keeping it, no pending-work mark."""
    _as_format_5(conn)
    conn.execute("DROP TRIGGER sessions_active")
    conn.execute("DROP TRIGGER sessions_created")
    conn.execute("DROP INDEX sessions_listed")
    conn.execute("DROP INDEX sessions_user_listed")
    conn.execute("DROP INDEX sessions_pending")
    for column in _FORMAT_5_COLUMNS:
        conn.execute(f"ALTER TABLE sessions DROP COLUMN {column.split()[0]}")
    conn.execute(
        "CREATE INDEX sessions_recent ON sessions (last_activity, id) WHERE deleted_at IS NULL"
    )
    conn.execute(
        "CREATE INDEX sessions_user_recent ON sessions (namespace, user_id, agent_id, "
        "last_activity, id) WHERE deleted_at IS NULL"
    )
    conn.execute("UPDATE agentnb_meta SET value='agentnb-sqlite/4' WHERE key='format'")


def _sid(conn: sqlite3.Connection, key: SessionKey) -> int:
    row = conn.execute("SELECT id FROM sessions WHERE session_id=?", (key.session_id,)).fetchone()
    return int(row[0])


class TestListingKey:
    def test_commits_of_the_session_listed_first_move_no_listing_key(self, path: Path) -> None:
        """Appends and commands of the session listed first leave its listing key (the
        indexed column) as it was, so they move no index entry; another session's commit
        moves that session's key and brings the first one's up to its activity."""
        clock = FakeClock()
        store = SQLiteStore(path, clock=clock)
        first, second = session_key("first"), session_key("second")
        store.create_session(second)
        clock.advance(1)
        store.create_session(first)
        created = clock.now()
        for seq in range(3):
            clock.advance(1)
            store.append(first, [step()], expected_seq=seq, batch_id=f"b{seq}")
        clock.advance(1)
        store.inbox_append(first, command("more"))
        conn = _raw(path)
        keys = dict(conn.execute("SELECT session_id, list_key FROM sessions").fetchall())
        assert keys == {"first": created, "second": created - 1}
        clock.advance(1)
        store.append(second, [step()], expected_seq=0, batch_id="b")
        keys = dict(conn.execute("SELECT session_id, list_key FROM sessions").fetchall())
        assert keys == {"first": clock.now() - 1, "second": clock.now()}
        conn.close()
        store.close()


class TestPendingWork:
    def test_watchers_hear_commands_accepted_here_and_elsewhere(self, path: Path) -> None:
        """watch_pending's callback gets the key of a command accepted through this store
        object at once, and None once another store object (another process, say) commits
        one to the file and a session is claimable; an unwatched store hears nothing."""
        store = SQLiteStore(path)
        here, there = session_key("here"), session_key("there")
        store.create_session(here)
        heard: queue.Queue[SessionKey | None] = queue.Queue()
        unwatch = store.watch_pending(heard.put)
        try:
            store.inbox_append(here, command("a"))
            assert heard.get(timeout=10) == here
            with SQLiteStore(path) as elsewhere:
                elsewhere.create_session(there)
                elsewhere.inbox_append(there, command("b"))
            assert heard.get(timeout=10) is None
        finally:
            unwatch()
            store.close()

    def test_writers_of_two_processes_take_turns_on_the_file(self, path: Path) -> None:
        """While another process holds the file's turn (an flock), a write of this one waits
        for it, then commits; it never meets a locked file."""
        store = SQLiteStore(path, busy_timeout=30)
        key = session_key()
        store.create_session(key)
        released = path.parent / "released"
        holder = subprocess.Popen(
            [sys.executable, "-c", _HOLD_THE_TURN, str(path), str(released)],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert holder.stdout is not None
            assert holder.stdout.readline().strip() == "held"
            store.append(key, [step()], expected_seq=0, batch_id="b")  # waits, then commits
            assert released.exists()  # the other process let go before this write went on
            assert store.head(key) == 1
        finally:
            holder.kill()
            holder.communicate()
            store.close()


class TestReopen:
    def test_head_of_a_long_session_opens_without_scanning(self, path: Path) -> None:
        """head() of a reopened session with thousands of events is answered directly."""
        key = session_key()
        with SQLiteStore(path) as store:
            store.create_session(key)
            StoreContract.fill(store, key, 5000, batch=2500)
        with SQLiteStore(path) as store:
            assert store.head(key) == 5000
            assert SessionLog(store, key).head() == 5000
            assert [e.seq for e in store.read_after(key, 4998, 10)] == [4999, 5000]


class TestFiles:
    def test_files_are_owner_only(self, store: SQLiteStore, key: SessionKey, path: Path) -> None:
        """The database and its -wal and -shm files are readable and writable by the owner only."""
        store.append(key, [step()], expected_seq=0, batch_id="b")
        for name in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
            assert name.exists(), name
            assert stat.S_IMODE(name.stat().st_mode) == 0o600, name

    def test_missing_parent_folders_are_created(self, tmp_path: Path) -> None:
        """A path under folders that do not exist yet gets them created."""
        with SQLiteStore(tmp_path / "a" / "b" / "db.sqlite") as store:
            store.create_session(session_key())
        assert (tmp_path / "a" / "b" / "db.sqlite").is_file()

    def test_directory_path_is_invalid_input(self, tmp_path: Path) -> None:
        """A path that is a directory raises InvalidInput."""
        with pytest.raises(InvalidInput):
            SQLiteStore(tmp_path)

    def test_other_sqlite_database_is_corrupt(self, path: Path) -> None:
        """An SQLite file that agentnb did not create raises Corrupt and is left untouched."""
        conn = _raw(path)
        conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
        conn.close()
        with pytest.raises(Corrupt, match="did not create"):
            SQLiteStore(path)
        conn = _raw(path)
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        conn.close()
        assert tables == ["customers"]

    def test_store_of_another_format_is_refused_before_any_change(self, path: Path) -> None:
        """A store file of another format (here: an older one whose events table lacks a
        column) raises Corrupt naming both formats, and is left as it was."""
        SQLiteStore(path).close()
        conn = _raw(path)
        conn.execute("UPDATE agentnb_meta SET value='agentnb-sqlite/1' WHERE key='format'")
        conn.execute("DROP INDEX events_batch")
        conn.execute("ALTER TABLE events DROP COLUMN batch_id")
        conn.close()
        before = path.read_bytes()
        with pytest.raises(Corrupt, match=r"'agentnb-sqlite/1'.*reads 'agentnb-sqlite/6'"):
            SQLiteStore(path)
        assert path.read_bytes() == before

    def test_format_5_store_with_whole_payload_blobs_is_migrated_in_place(self, path: Path) -> None:
        """A format-5 store (each large payload one blob of its whole text, a command's long
        fingerprint kept whole) reads the same once migrated; a re-sent command is still
        recognised, new writes of a text store it once, and deleting a session frees its
        old blobs but keeps one another session's rows name."""
        store = SQLiteStore(path)
        mine, other = session_key("mine"), session_key("other")
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
        conn = _raw(path)
        _as_format_5(conn)
        conn.execute("UPDATE inbox SET digest=? WHERE dedupe_key='k'", (fingerprint,))
        # What format 5 wrote: whole payloads in blobs, one per distinct payload.
        assert conn.execute("SELECT count(*) FROM blobs").fetchone() == (3,)
        assert conn.execute(
            "SELECT count(*) FROM events WHERE payload IS NULL AND length(blob) = 64"
        ).fetchone() == (3,)
        conn.close()
        store = SQLiteStore(path)
        try:
            assert (store.read_after(mine, 0, 10), store.read_after(other, 0, 10)) == before
            assert store.inbox_read_after(mine, 0, 10) == inbox
            assert [r.payload_json for r in store.read_raw(mine, 0, 10)] == [
                canonical_json(e.payload) for e in before[0]
            ]
            again = store.inbox_append(mine, command(text), dedupe_key="k", fingerprint=fingerprint)
            assert again == (inbox[0], False)
            with pytest.raises(IdempotencyConflict):
                store.inbox_append(mine, command(text), dedupe_key="k", fingerprint="other")
            usage = store.blob_usage(mine)
            assert len(usage) == 3  # the three whole payloads it held
            new = [Event.create("acme/a", {"text": text}), Event.create("acme/b", {"t": text})]
            store.append(mine, new, expected_seq=3, batch_id="b2")
            assert len(store.blob_usage(mine)) == 4  # one blob for the text, once
            store.delete_session(mine, by="ops")
            shared_blob = set(usage) & set(store.blob_usage(other))
            assert len(shared_blob) == 1
            assert store.read_after(other, 0, 10) == before[1]
        finally:
            store.close()
        conn = _raw(path)
        assert conn.execute("SELECT count(*) FROM blobs").fetchone() == (1,)
        assert conn.execute("SELECT value FROM agentnb_meta WHERE key='format'").fetchone() == (
            FORMAT,
        )
        conn.close()

    def test_format_2_store_is_migrated_in_place(self, path: Path) -> None:
        """A format-2 store gains the lifecycle columns, with counts, latest turn status and
        first task computed from its logs, and is then format 5."""
        store = SQLiteStore(path)
        key = session_key()
        store.create_session(key)
        store.inbox_append(key, command("Plan the offsite\nwith details"))
        turn = Event.create("turn/start", {"input": "x"}, turn_id="turn_1")
        done = Event.create("turn/completed", {}, turn_id="turn_1")
        store.append(key, [turn, step(2), done], expected_seq=0, batch_id="b")
        store.close()
        conn = _raw(path)
        _as_format_4(conn)
        for index in (
            "sessions_recent",
            "sessions_user_recent",
            "events_blob",
            "inbox_blob",
            "sessions_deleted",
        ):
            conn.execute(f"DROP INDEX {index}")
        conn.execute("DROP TABLE tombstone_marks")
        for column in _LIFECYCLE_COLUMNS:
            if column not in _FORMAT_5_COLUMNS:
                conn.execute(f"ALTER TABLE sessions DROP COLUMN {column.split()[0]}")
        conn.execute("UPDATE agentnb_meta SET value='agentnb-sqlite/2' WHERE key='format'")
        conn.close()
        store = SQLiteStore(path)
        try:
            record = store.get_session(key)
            assert record is not None
            assert (record.events, record.turns, record.submits) == (3, 1, 1)
            assert (record.turn_status, record.first_task) == ("completed", "Plan the offsite")
            assert [r.key for r in store.find_sessions()] == [key]
        finally:
            store.close()
        conn = _raw(path)
        assert conn.execute("SELECT value FROM agentnb_meta WHERE key='format'").fetchone() == (
            FORMAT,
        )
        conn.close()

    def test_format_3_store_is_migrated_in_place(self, path: Path) -> None:
        """A format-3 store gains the archive flag (nothing archived), its tombstones are
        numbered in the order they were deleted, tombstone watermarks start at 0, and it is
        then format 4, where archiving and deleting go on."""
        clock = FakeClock()
        store = SQLiteStore(path, clock=clock)
        keys = [session_key(f"s{i}") for i in range(4)]
        for k in keys:
            store.create_session(k)
        for k in (keys[2], keys[0]):  # deleted out of key order
            clock.advance(1)
            store.delete_session(k, by="ops")
        store.close()
        conn = _raw(path)
        _as_format_4(conn)
        conn.execute("DROP INDEX sessions_deleted")
        conn.execute("DROP TABLE tombstone_marks")
        for column in _FORMAT_4_COLUMNS:
            conn.execute(f"ALTER TABLE sessions DROP COLUMN {column.split()[0]}")
        conn.execute("UPDATE agentnb_meta SET value='agentnb-sqlite/3' WHERE key='format'")
        conn.close()
        store = SQLiteStore(path, clock=clock)
        try:
            assert [(t.key, t.seq) for t in store.tombstones()] == [(keys[2], 1), (keys[0], 2)]
            assert store.tombstone_watermark("sink") == 0
            assert [r.archived_at for r in store.find_sessions()] == [None, None]
            store.set_archived(keys[1])
            assert [r.key for r in store.find_sessions()] == [keys[3]]
            assert store.delete_session(keys[3], by="ops").seq == 3
        finally:
            store.close()
        conn = _raw(path)
        assert conn.execute("SELECT value FROM agentnb_meta WHERE key='format'").fetchone() == (
            FORMAT,
        )
        conn.close()

    def test_store_without_token_table_gains_it(self, path: Path) -> None:
        """A store written before the service existed gains the token table at open,
        keeping its format and its sessions."""
        store = SQLiteStore(path)
        key = session_key("s1")
        store.create_session(key)
        store.close()
        conn = _raw(path)
        conn.execute("DROP TABLE tokens")
        conn.close()
        store = SQLiteStore(path)
        try:
            assert store.get_session(key) is not None
            store.add_token("tok_a", "alice", "a" * 64)
            assert [t.token_id for t in store.list_tokens()] == ["tok_a"]
        finally:
            store.close()

    def test_format_4_store_is_migrated_in_place(self, path: Path) -> None:
        """A format-4 store gets the listing key: the listing keeps its order, its old
        indexes are gone, and it is then format 5, where the listing goes on."""
        clock = FakeClock()
        store = SQLiteStore(path, clock=clock)
        keys = [session_key(f"s{i}") for i in range(3)]
        for k in keys:
            clock.advance(1)
            store.create_session(k)
        clock.advance(1)
        store.append(keys[0], [step(1)], expected_seq=0, batch_id="b")
        store.close()
        conn = _raw(path)
        _as_format_4(conn)
        conn.close()
        store = SQLiteStore(path, clock=clock)
        try:
            assert [r.key for r in store.find_sessions()] == [keys[0], keys[2], keys[1]]
            clock.advance(1)
            store.append(keys[1], [step(1)], expected_seq=0, batch_id="b")
            assert [r.key for r in store.find_sessions()] == [keys[1], keys[0], keys[2]]
        finally:
            store.close()
        conn = _raw(path)
        indexes = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='index'")}
        assert not indexes & {"sessions_recent", "sessions_user_recent"}
        assert conn.execute("SELECT value FROM agentnb_meta WHERE key='format'").fetchone() == (
            FORMAT,
        )
        conn.close()

    def test_a_migrated_store_marks_the_sessions_with_commands_for_workers(
        self, path: Path
    ) -> None:
        """Sessions of a format-4 store that hold commands are marked pending by the
        migration (a worker looks once at each), the others are not."""
        store = SQLiteStore(path)
        idle, busy = session_key("idle"), session_key("busy")
        store.create_session(idle)
        store.create_session(busy)
        store.inbox_append(busy, command("queued before the upgrade"))
        store.close()
        conn = _raw(path)
        _as_format_4(conn)
        conn.close()
        with SQLiteStore(path) as store:
            assert [lease.key for lease in store.claim_pending("w", limit=5)] == [busy]

    def test_random_bytes_file_is_corrupt(self, path: Path) -> None:
        """A file that is not an SQLite database raises Corrupt."""
        path.write_bytes(os.urandom(8192))
        with pytest.raises(Corrupt):
            SQLiteStore(path)

    def test_bad_synchronous_is_invalid_input(self, path: Path) -> None:
        """An unknown synchronous level raises InvalidInput."""
        with pytest.raises(InvalidInput):
            SQLiteStore(path, synchronous="SOMETIMES")


class TestFailClosed:
    def test_changed_payload_fails_its_checksum(
        self, store: SQLiteStore, key: SessionKey, path: Path
    ) -> None:
        """A payload edited outside agentnb raises Corrupt naming the session and seq."""
        store.append(key, [step(1), step(2), step(3)], expected_seq=0, batch_id="b")
        conn = _raw(path)
        conn.execute(
            "UPDATE events SET payload=replace(payload, 'step_2', 'step_X') "
            "WHERE seq=2 AND session=?",
            (_sid(conn, key),),
        )
        conn.close()
        with pytest.raises(Corrupt, match=r"seq 2") as info:
            store.read_after(key, 0, 10)
        assert str(key) in str(info.value)
        with pytest.raises(Corrupt, match=r"seq 2"):
            store.read_arrow(key, 0, 10)
        assert store.read_arrow(key, 0, 1)["seq"].to_pylist() == [1]
        with pytest.raises(Corrupt):
            list(store.scan(key))
        assert [e.seq for e in store.read_after(key, 0, 1)] == [1]

    def test_changed_envelope_fails_its_checksum(
        self, store: SQLiteStore, key: SessionKey, path: Path
    ) -> None:
        """An envelope column edited outside agentnb (here: the type) raises Corrupt."""
        store.append(key, [step(1)], expected_seq=0, batch_id="b")
        conn = _raw(path)
        conn.execute("UPDATE events SET type='step/end' WHERE seq=1")
        conn.close()
        with pytest.raises(Corrupt, match=r"seq 1"):
            store.read_after(key, 0, 10)
        with pytest.raises(Corrupt, match=r"seq 1"):
            store.read_arrow(key, 0, 10)

    def test_deleted_middle_row_is_a_gap(
        self, store: SQLiteStore, key: SessionKey, path: Path
    ) -> None:
        """A row deleted from the middle of the log raises Corrupt on read and scan."""
        store.append(key, [step(i) for i in range(1, 6)], expected_seq=0, batch_id="b")
        conn = _raw(path)
        conn.execute("DELETE FROM events WHERE seq=3 AND session=?", (_sid(conn, key),))
        conn.close()
        with pytest.raises(Corrupt, match="gap"):
            store.read_after(key, 0, 10)
        with pytest.raises(Corrupt, match="expected seq 3 but found 4"):
            store.read_arrow(key, 0, 10)
        with pytest.raises(Corrupt):
            list(store.scan(key))
        with pytest.raises(Corrupt):
            list(SessionLog(store, key).follow(0, idle_timeout=0.01))
        assert [e.seq for e in store.read_after(key, 3, 10)] == [4, 5]

    def test_deleted_inbox_row_is_a_gap(
        self, store: SQLiteStore, key: SessionKey, path: Path
    ) -> None:
        """A command deleted from the middle of the inbox raises Corrupt."""
        for i in range(3):
            store.inbox_append(key, command(f"c{i}"))
        conn = _raw(path)
        conn.execute("DELETE FROM inbox WHERE seq=2")
        conn.close()
        with pytest.raises(Corrupt):
            store.inbox_read_after(key, 0, 10)

    def test_missing_blob_is_corrupt(self, store: SQLiteStore, key: SessionKey, path: Path) -> None:
        """An event whose payload blob was removed raises Corrupt on read."""
        big = Event.create("acme/big", {"text": "z" * (BLOB_THRESHOLD + 1)})
        store.append(key, [big], expected_seq=0, batch_id="b")
        conn = _raw(path)
        assert conn.execute("SELECT blob IS NOT NULL FROM events WHERE seq=1").fetchone() == (1,)
        conn.execute("DELETE FROM blobs")
        conn.close()
        with pytest.raises(Corrupt):
            store.read_after(key, 0, 1)
        with pytest.raises(Corrupt, match="blob"):
            store.read_arrow(key, 0, 1)

    def test_unknown_required_type_fails_closed(
        self, store: SQLiteStore, key: SessionKey, path: Path
    ) -> None:
        """A well-formed row of a required type this reader does not know raises
        UnknownRequiredEvent; an optional one passes."""
        store.append(key, [step(1)], expected_seq=0, batch_id="b")
        template = step(2)
        unknown = Event.model_construct(
            **{**template.__dict__, "type": "acme/from_the_future", "required": True}
        )
        optional = Event.model_construct(
            **{
                **step(3).__dict__,
                "type": "acme/from_the_future_optional",
                "required": False,
            }
        )

        def no_blobs(data: bytes) -> str:
            raise AssertionError("small payloads never go to blobs")

        conn = _raw(path)
        sid = _sid(conn, key)
        for seq, event in ((2, unknown), (3, optional)):
            conn.execute(
                f"INSERT INTO events (session, {COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                (sid, *encode(event, seq, no_blobs)),
            )
        conn.close()
        assert [e.seq for e in store.read_after(key, 2, 10)] == [3]
        with pytest.raises(UnknownRequiredEvent, match="acme/from_the_future"):
            store.read_after(key, 0, 10)
        with pytest.raises(UnknownRequiredEvent, match="seq 2"):
            store.read_arrow(key, 0, 10)
        assert store.read_arrow(key, 2, 10)["seq"].to_pylist() == [3]
        with pytest.raises(UnknownRequiredEvent):
            list(store.scan(key))


class TestColumnarRead:
    """read_arrow fetches rows straight into Arrow (ADBC) and checks them in bulk."""

    def test_row_by_row_path_gives_the_same_table(
        self, store: SQLiteStore, key: SessionKey, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Without the ADBC driver (or when it fails) the rows are read one by one, with the
        same result."""
        big = Event.create("acme/big", {"text": "z" * (BLOB_THRESHOLD + 1)}, turn_id="t1")
        store.append(key, [step(1), big, step(3)], expected_seq=0, batch_id="b")
        fast = store.read_arrow(key, 0, 10)
        assert store._adbc() is not None  # the fast path ran above
        monkeypatch.setattr(store, "_adbc", lambda: None)
        assert store.read_arrow(key, 0, 10).equals(fast)

    def test_value_of_another_type_is_corrupt(
        self, store: SQLiteStore, key: SessionKey, path: Path
    ) -> None:
        """A column holding text where the store writes integers (an outside edit) raises
        Corrupt naming the row, like the row-by-row read."""
        store.append(key, [step(1), step(2)], expected_seq=0, batch_id="b")
        conn = _raw(path)
        conn.execute("UPDATE events SET occurred_us='yesterday' WHERE seq=2")
        conn.close()
        with pytest.raises(Corrupt, match=r"seq 2"):
            store.read_arrow(key, 0, 10)

    def test_reads_see_later_commits(self, store: SQLiteStore, key: SessionKey) -> None:
        """No snapshot is held between columnar reads: a later read sees new commits."""
        store.append(key, [step(1)], expected_seq=0, batch_id="b1")
        assert store.read_arrow(key, 0, 10).num_rows == 1
        other = SQLiteStore(store.path)
        try:
            other.append(key, [step(2)], expected_seq=1, batch_id="b2")
        finally:
            other.close()
        assert store.read_arrow(key, 0, 10)["seq"].to_pylist() == [1, 2]

    def test_closed_store_refuses(self, store: SQLiteStore, key: SessionKey) -> None:
        """A read after close raises StorageError."""
        store.append(key, [step(1)], expected_seq=0, batch_id="b")
        store.read_arrow(key, 0, 10)
        store.close()
        with pytest.raises(StorageError):
            store.read_arrow(key, 0, 10)


class TestOpenStore:
    def test_relative_url(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """sqlite:///rel/path.db opens a file relative to the working directory."""
        monkeypatch.chdir(tmp_path)
        store = open_store("sqlite:///data/rel.sqlite")
        try:
            assert isinstance(store, SQLiteStore)
            store.create_session(session_key())
        finally:
            store.close()
        assert (tmp_path / "data" / "rel.sqlite").is_file()

    def test_absolute_url(self, tmp_path: Path) -> None:
        """sqlite:////abs/path.db opens the file at that absolute path."""
        target = tmp_path / "abs.sqlite"
        store = open_store(f"sqlite:///{target}")
        try:
            assert isinstance(store, SQLiteStore)
            assert store.path == target
            assert store.synchronous == "FULL"
        finally:
            store.close()
        assert target.is_file()

    def test_synchronous_option(self, tmp_path: Path) -> None:
        """?synchronous=NORMAL is passed to the store."""
        store = open_store(f"sqlite:///{tmp_path / 'n.sqlite'}?synchronous=NORMAL")
        try:
            assert isinstance(store, SQLiteStore)
            assert store.synchronous == "NORMAL"
        finally:
            store.close()

    def test_clock_is_passed_on(self, tmp_path: Path) -> None:
        """open_store gives the store the clock it was handed."""
        clock = FakeClock()
        store = open_store(f"sqlite:///{tmp_path / 'c.sqlite'}", clock=clock)
        try:
            assert store.clock is clock
        finally:
            store.close()

    def test_store_instance_is_returned_as_is(self, store: SQLiteStore) -> None:
        """A SessionStore passed to open_store is returned unchanged."""
        assert open_store(store) is store

    @pytest.mark.parametrize(
        "url",
        [
            "sqlite:///x.sqlite?cache=shared",
            "sqlite:///x.sqlite?synchronous=SOMETIMES",
            "sqlite://host/x.sqlite",
            "sqlite://",
            "mysql://localhost/db",
            "x.sqlite",
        ],
    )
    def test_bad_urls_are_invalid_input(
        self, url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Unknown options, a host, no file, and unsupported schemes raise InvalidInput."""
        monkeypatch.chdir(tmp_path)
        with pytest.raises(InvalidInput):
            open_store(url)
        assert not (tmp_path / "x.sqlite").exists()

    def test_non_string_url_is_invalid_input(self) -> None:
        """A store argument that is neither a URL nor a SessionStore raises InvalidInput."""
        with pytest.raises(InvalidInput):
            open_store(42)  # type: ignore[arg-type]


class TestSecureDelete:
    def test_deleted_text_is_not_in_the_file_bytes(self, path: Path) -> None:
        """After delete_session, the session's payloads, commands, title and labels appear
        nowhere in the store file or its -wal (secure_delete plus a TRUNCATE checkpoint),
        while another session's text is still there."""
        store = SQLiteStore(path)
        try:
            key, other = session_key("gone"), session_key("kept")
            for k in (key, other):
                store.create_session(k)
            secret = "SECRET-7f3a9c-" * 3
            big = "BIGSECRET-" + "q" * (BLOB_THRESHOLD + 10)
            store.append(
                key,
                [Event.create("acme/note", {"text": secret}), Event.create("acme/big", {"t": big})],
                expected_seq=0,
                batch_id="b",
            )
            store.inbox_append(key, command(secret + "-task"))
            store.update_session(key, title=secret + "-title", labels={"who": secret + "-label"})
            store.append(
                other,
                [Event.create("acme/note", {"text": "KEPT-51e2"})],
                expected_seq=0,
                batch_id="b",
            )
            store.delete_session(key, by="ops", reason="erasure request")
            data = path.read_bytes()
            wal = Path(f"{path}-wal")
            data += wal.read_bytes() if wal.exists() else b""
            assert b"SECRET-7f3a9c" not in data
            assert b"BIGSECRET" not in data
            assert b"KEPT-51e2" in data
        finally:
            store.close()
