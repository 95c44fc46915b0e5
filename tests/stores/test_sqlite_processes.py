"""The SQLite store's durability and multi-process promises, proven with real processes.

Every test starts children with this interpreter (``tests/stores/_proc_child.py``), lets them
write to or read from the same store file as the parent, and checks what the parent sees.
Timeouts here only stop a broken test from hanging; nothing asserts on how long a step takes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType

import pytest

from agentnb.errors import Corrupt, Fenced, LeaseHeld, SessionNotFound
from agentnb.events import Event
from agentnb.log import Follow, Inbox, SessionLog
from agentnb.stores.base import Lease
from agentnb.stores.sqlite import CATALOGUE, SQLiteStore
from tests.stores._proc_child import (
    ITEM,
    KEY,
    batch_events,
    batch_payloads,
    batch_time,
    digest,
)

REPO = Path(__file__).resolve().parents[2]
GUARD = 30.0
"""Seconds any one wait may take before the test fails instead of hanging."""
CRASH_TRIALS = int(os.environ.get("AGENTNB_CRASH_TRIALS", "30"))
"""kill -9 trials of the crash-safety test: 30 keep CI within its time; set
AGENTNB_CRASH_TRIALS=500 for a long soak."""


class Child:
    """One child process speaking the line protocol of ``_proc_child``; always reaped."""

    def __init__(self, tmp_path: Path, mode: str, *args: object) -> None:
        self.label = f"{mode}-{len(list(tmp_path.glob('*.err')))}"
        self._err_path = tmp_path / f"{self.label}.err"
        self._err = self._err_path.open("wb")
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.stores._proc_child", mode, *map(str, args)],
            cwd=REPO,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._err,
            text=True,
            bufsize=1,
        )
        self.pid = self.proc.pid
        self._lines: queue.Queue[list[str] | None] = queue.Queue()
        self._reader = threading.Thread(target=self._pump, daemon=True)
        self._reader.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.endswith("\n"):  # a line cut off by SIGKILL was never acknowledged
                self._lines.put(line.split())
        self._lines.put(None)

    def stderr(self) -> str:
        self._err.flush()
        return self._err_path.read_text(errors="replace")[-3000:]

    def expect(self, word: str, timeout: float = GUARD) -> list[str]:
        """The next line, which must start with ``word``; returns the rest of it."""
        try:
            parts = self._lines.get(timeout=timeout)
        except queue.Empty:
            pytest.fail(f"{self.label}: no {word} line within {timeout}s\n{self.stderr()}")
        if parts is None:
            self._lines.put(None)
            pytest.fail(
                f"{self.label} exited ({self.proc.wait(GUARD)}) before {word}\n{self.stderr()}"
            )
        assert parts[:1] == [word], f"{self.label}: expected {word}, got {parts}\n{self.stderr()}"
        return parts[1:]

    def send(self, word: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(word + "\n")
        self.proc.stdin.flush()

    def signal(self, sig: signal.Signals) -> None:
        os.kill(self.pid, sig)

    def kill(self) -> list[list[str]]:
        """SIGKILL the child, reap it, and return every complete line it printed unread."""
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGKILL)
        self.proc.wait(GUARD)
        self._reader.join(GUARD)
        rest = []
        while (parts := self._lines.get_nowait()) is not None:
            rest.append(parts)
        self._lines.put(None)
        return rest

    def close(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGKILL)
        self.proc.wait(GUARD)
        self._reader.join(GUARD)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        self._err.close()

    def __enter__(self) -> Child:
        return self

    def __exit__(
        self, _t: type[BaseException] | None, _e: BaseException | None, _tb: TracebackType | None
    ) -> None:
        self.close()


@contextlib.contextmanager
def opened(path: Path, *, busy_timeout: float = 30.0) -> Iterator[SQLiteStore]:
    store = SQLiteStore(path, synchronous="FULL", busy_timeout=busy_timeout)
    try:
        yield store
    finally:
        store.close()


def item(n: int) -> Event:
    return Event.create(ITEM, {"n": n}, required=False)


# --------------------------------------------------------------------------------------------


class TestCrashSafety:
    def test_kill_9_never_loses_an_acknowledged_batch_nor_shows_a_partial_one(
        self, tmp_path: Path
    ) -> None:
        """After repeated SIGKILLs mid-append, every acknowledged batch is whole, no partial
        batch is visible, seq is gapless, a lost-ack retry is a no-op, and appending goes on."""
        path = tmp_path / "crash.sqlite"
        rng = random.Random(20260101)
        placed: dict[int, tuple[int, int]] = {}  # batch k -> (first seq, last seq)
        acked = 0
        checked = next_k = 0
        children: list[Child] = []
        try:
            spare = Child(tmp_path, "crash", path)
            children.append(spare)
            for trial in range(CRASH_TRIALS):
                child = spare
                child.expect("READY")
                child.send("GO")
                acks = [child.expect("ACK")]
                if trial + 1 < CRASH_TRIALS:  # warm the next child up while this one writes
                    spare = Child(tmp_path, "crash", path)
                    children.append(spare)
                time.sleep(rng.uniform(0.05, 0.6))
                acks += [parts[1:] for parts in child.kill() if parts[0] == "ACK"]
                child.close()
                acked += len(acks)

                with opened(path) as store:
                    head = store.head(KEY)
                    events = list(store.scan(KEY, checked))
                    assert [e.seq for e in events] == list(range(checked + 1, head + 1))
                    next_k = _place_batches(events, next_k, placed)
                    for k, first, last in acks:
                        assert placed.get(int(k)) == (int(first), int(last)), (trial, k)
                    # A retry of the last batch (its acknowledgement may have been lost) is a
                    # no-op that returns what was committed.
                    k_last = next_k - 1
                    first, last = placed[k_last]
                    replay = store.append(
                        KEY, batch_events(k_last), expected_seq=first - 1, batch_id=f"b{k_last}"
                    )
                    assert [e.seq for e in replay] == list(range(first, last + 1))
                    assert store.head(KEY) == head
                    # The parent continues the log where the killed child stopped.
                    done = store.append(
                        KEY, batch_events(next_k), expected_seq=head, batch_id=f"b{next_k}"
                    )
                    assert done[0].seq == head + 1
                    placed[next_k] = (done[0].seq, done[-1].seq)
                    next_k += 1
                    checked = store.head(KEY)

            with opened(path) as store:
                everything = list(store.scan(KEY))
            assert [e.seq for e in everything] == list(range(1, checked + 1))
            assert _place_batches(everything, 0, {}) == next_k
        finally:
            for child in children:
                child.close()
        assert acked > CRASH_TRIALS  # the children did commit between kills


def _place_batches(events: list[Event], k: int, placed: dict[int, tuple[int, int]]) -> int:
    """Check ``events`` are whole batches ``k, k+1, ...`` with their exact content.

    Records each batch's seqs in ``placed`` and returns the next batch number.
    """
    pos = 0
    while pos < len(events):
        expected = batch_payloads(k)
        chunk = events[pos : pos + len(expected)]
        assert chunk[0].payload["batch"] == k, f"batch {k} expected at seq {chunk[0].seq}"
        assert len(chunk) == len(expected), f"batch {k} is partial: {len(chunk)} events"
        assert [e.payload for e in chunk] == expected
        assert [e.event_id for e in chunk] == [f"evt_b{k}_{i}" for i in range(len(chunk))]
        assert {e.occurred_at for e in chunk} == {batch_time(k)}
        placed[k] = (chunk[0].seq, chunk[-1].seq)
        pos += len(chunk)
        k += 1
    return k


# --------------------------------------------------------------------------------------------


class TestLostWal:
    """A child commits a new session and is killed with SIGKILL; then its -wal is deleted."""

    @staticmethod
    def _kill_after_commit(tmp_path: Path) -> Path:
        path = tmp_path / "lost.sqlite"
        SQLiteStore(path).close()  # the empty store is checkpointed: the file holds no session
        with Child(tmp_path, "commit_and_wait", path) as child:
            assert child.expect("ACK") == ["1", str(len(batch_events(0)))]
            child.kill()
        wal = Path(f"{path}-wal")
        assert wal.stat().st_size > 1  # the killed child's commit lives only in the -wal
        wal.unlink()
        Path(f"{path}-shm").unlink(missing_ok=True)
        return path

    def test_reopening_after_the_wal_is_lost_raises_corrupt_naming_the_file(
        self, tmp_path: Path
    ) -> None:
        """The reopened store raises Corrupt naming the file (not SessionNotFound later)."""
        path = self._kill_after_commit(tmp_path)
        with pytest.raises(Corrupt, match="lost sessions") as info:
            SQLiteStore(path)
        assert str(path) in str(info.value)
        assert f"delete {path}{CATALOGUE}" in str(info.value)

    def test_without_the_record_the_loss_is_silent(self, tmp_path: Path) -> None:
        """Deleting the -catalogue record (accepting the loss) opens the rolled-back store,
        where the committed session is gone: what the record exists to catch."""
        path = self._kill_after_commit(tmp_path)
        Path(f"{path}{CATALOGUE}").unlink()
        with opened(path) as store:
            assert store.list_sessions() == []
            with pytest.raises(SessionNotFound):
                store.head(KEY)

    def test_kill_9_with_the_wal_kept_reopens_with_everything(self, tmp_path: Path) -> None:
        """A SIGKILL alone (the -wal kept) is no loss: the store opens with the session."""
        path = tmp_path / "kept.sqlite"
        SQLiteStore(path).close()
        with Child(tmp_path, "commit_and_wait", path) as child:
            last = int(child.expect("ACK")[1])
            child.kill()
        with opened(path) as store:
            assert store.head(KEY) == last


# --------------------------------------------------------------------------------------------


class TestInboxAcrossProcesses:
    WRITERS = 4
    COMMANDS = 200
    RESEND_EVERY = 40

    def test_four_processes_each_accept_200_commands_exactly_once(self, tmp_path: Path) -> None:
        """Four processes accepting 200 keyed commands at once get 800 records, one per key,
        a gapless inbox, and identical re-sends return the original record."""
        path = tmp_path / "inbox.sqlite"
        with opened(path) as store:
            store.create_session(KEY)
        sent: dict[str, list[str]] = {}
        resent: dict[str, list[str]] = {}
        with contextlib.ExitStack() as stack:
            writers = [
                stack.enter_context(
                    Child(tmp_path, "inbox", path, i, self.COMMANDS, self.RESEND_EVERY)
                )
                for i in range(self.WRITERS)
            ]
            for child in writers:
                child.expect("READY")
            for child in writers:
                child.send("GO")
            for child in writers:
                mine = [child.expect("SENT") for _ in range(self.COMMANDS)]
                assert [int(s[1]) for s in mine] == sorted(int(s[1]) for s in mine)
                sent.update((s[0], s[1:]) for s in mine)
                for _ in range(0, self.COMMANDS, self.RESEND_EVERY):
                    parts = child.expect("RESENT")
                    resent[parts[0]] = parts[1:]
                child.expect("DONE")

        total = self.WRITERS * self.COMMANDS
        assert len(sent) == total
        assert all(created == "1" for _, created, *_ in sent.values())
        assert len(resent) == self.WRITERS * (self.COMMANDS // self.RESEND_EVERY)
        for key, (seq, created, event_id, turn_id) in resent.items():
            assert created == "0"
            assert [seq, event_id, turn_id] == [sent[key][0], sent[key][2], sent[key][3]]

        with opened(path) as store:
            records = list(Inbox(store, KEY).scan())
            assert store.inbox_head(KEY) == total
        assert [r.seq for r in records] == list(range(1, total + 1))
        assert {r.type for r in records} == {"inbox/accepted"}
        keys = [r.payload["key"] for r in records]
        assert sorted(keys) == sorted(sent)
        for record in records:
            seq, _, event_id, _ = sent[record.payload["key"]]
            assert (record.seq, record.event_id) == (int(seq), event_id)
            writer, j = record.payload["key"][1:].split("-c")
            assert record.payload["input"] == f"task {writer}/{j}"


# --------------------------------------------------------------------------------------------


class TestFollowAcrossProcesses:
    EVENTS = 400

    @pytest.mark.parametrize("mode", ["sync", "async"])
    def test_follow_sees_each_event_of_another_process_once_in_order(
        self, tmp_path: Path, mode: str
    ) -> None:
        """``SessionLog.follow`` yields every event another process commits exactly once, in
        seq order, while that process is still writing."""
        path = tmp_path / "follow.sqlite"
        with opened(path) as store:
            store.create_session(KEY)
            log = SessionLog(store, KEY)
            seen: list[Event] = []
            with Child(tmp_path, "write", path, self.EVENTS, 7) as child:
                child.expect("READY")
                follow = log.follow(after=0, idle_timeout=GUARD)
                child.send("GO")
                if mode == "sync":
                    for event in follow:
                        seen.append(event)
                        if event.seq >= self.EVENTS:
                            break
                else:
                    asyncio.run(_follow_async(follow, seen, self.EVENTS))
                assert child.expect("DONE") == [str(self.EVENTS)]
            assert list(log.follow(after=self.EVENTS, idle_timeout=0.2)) == []
        assert [e.seq for e in seen] == list(range(1, self.EVENTS + 1))
        assert [e.payload["n"] for e in seen] == list(range(1, self.EVENTS + 1))
        assert len({e.event_id for e in seen}) == self.EVENTS


async def _follow_async(follow: Follow, seen: list[Event], until: int) -> None:
    async for event in follow:  # asyncio.run closes the generator left at return
        seen.append(event)
        if event.seq >= until:
            return


# --------------------------------------------------------------------------------------------


class TestLeaseAcrossProcesses:
    TTL = 1.5

    @pytest.mark.parametrize("how", ["paused", "killed"])
    def test_live_lease_is_exclusive_and_a_stale_holder_is_fenced(
        self, tmp_path: Path, how: str
    ) -> None:
        """Another process's live lease cannot be taken; once it expires it passes on with
        epoch + 1, and commits under the old epoch are refused with ``Fenced``."""
        path = tmp_path / "lease.sqlite"
        with opened(path) as store:
            store.create_session(KEY)
            with Child(tmp_path, "lease", path, "child", self.TTL, 3) as child:
                self._take_over(store, child, how)

    def _take_over(self, store: SQLiteStore, child: Child, how: str) -> None:
        owner, epoch, expires = child.expect("LEASE")
        expires_at = float(expires)
        for _ in range(3):
            with pytest.raises(LeaseHeld):
                store.acquire_lease(KEY, "parent", self.TTL)
            with pytest.raises(LeaseHeld):
                store.append(KEY, [item(0)], expected_seq=store.head(KEY), batch_id="nofence")
            (expires,) = child.expect("RENEWED")
            expires_at = float(expires)
        assert child.expect("COMMITTED") == ["1"]
        child.expect("IDLE")
        if how == "paused":
            child.signal(signal.SIGSTOP)
        else:
            child.kill()
        with pytest.raises(LeaseHeld):
            store.acquire_lease(KEY, "parent", self.TTL)

        new = _acquire_when_free(store, "parent")
        assert new.epoch == int(epoch) + 1
        assert new.expires_at - self.TTL >= expires_at - 1e-6  # not granted while live

        old = Lease(KEY, owner, int(epoch), expires_at)
        head = store.head(KEY)
        with pytest.raises(Fenced):
            store.append(KEY, [item(1)], expected_seq=head, batch_id="stale", fence=old)
        with pytest.raises(Fenced):
            store.renew_lease(old, self.TTL)
        with pytest.raises(Fenced):
            store.release_lease(old)
        if how == "paused":
            child.signal(signal.SIGCONT)
            child.send("COMMIT")
            assert child.expect("FENCED") == ["COMMIT"]
            child.send("RENEW")
            assert child.expect("FENCED") == ["RENEW"]
            child.send("EXIT")
            assert child.proc.wait(GUARD) == 0
        assert store.head(KEY) == head
        assert [e.payload for e in store.scan(KEY)] == [{"by": "child"}]
        assert store.current_lease(KEY) == new

        done = store.append(KEY, [item(2)], expected_seq=head, batch_id="new", fence=new)
        assert done[0].seq == head + 1


def _acquire_when_free(store: SQLiteStore, owner: str) -> Lease:
    deadline = time.monotonic() + GUARD
    while True:
        try:
            return store.acquire_lease(KEY, owner, TestLeaseAcrossProcesses.TTL)
        except LeaseHeld:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


# --------------------------------------------------------------------------------------------


class TestReadersNeverBlockWriters:
    PREFIX = 1200
    PAGE = 100

    def test_appends_go_on_while_another_process_pages_through_the_log(
        self, tmp_path: Path
    ) -> None:
        """While another process reads the log page by page, this one keeps appending, and
        that reader's view of the prefix it started with never changes."""
        path = tmp_path / "read.sqlite"
        with opened(path, busy_timeout=5.0) as store:
            store.create_session(KEY)
            for b in range(self.PREFIX // 100):
                store.append(
                    KEY,
                    [item(b * 100 + i) for i in range(100)],
                    expected_seq=b * 100,
                    batch_id=f"p{b}",
                )
            prefix = digest(list(store.scan(KEY)))
            with Child(tmp_path, "read", path, self.PREFIX, self.PAGE) as child:
                child.expect("READY")
                child.send("GO")
                pages = 0
                while True:
                    (last,) = child.expect("PAGE")
                    pages += 1
                    for _ in range(2):  # appends between the reader's pages
                        head = store.head(KEY)
                        store.append(
                            KEY,
                            [item(head + i) for i in range(5)],
                            expected_seq=head,
                            batch_id=f"a{head}",
                        )
                    child.send("NEXT")
                    if int(last) == self.PREFIX:
                        break
                count, paged, rescanned, child_head = child.expect("DONE")
            assert pages == self.PREFIX // self.PAGE
            assert int(count) == self.PREFIX
            assert paged == rescanned == prefix
            assert int(child_head) == store.head(KEY) == self.PREFIX + pages * 10
            assert digest(list(store.scan(KEY, 0, self.PREFIX))) == prefix

    def test_an_open_read_transaction_does_not_block_appends(self, tmp_path: Path) -> None:
        """A process holding a read transaction open on the file does not stop appends, and
        it keeps seeing the snapshot it started with."""
        path = tmp_path / "hold.sqlite"
        with opened(path, busy_timeout=5.0) as store:
            store.create_session(KEY)
            store.append(KEY, [item(i) for i in range(10)], expected_seq=0, batch_id="first")
            with Child(tmp_path, "hold", path) as child:
                assert child.expect("HOLDING") == ["10"]
                for b in range(20):
                    head = store.head(KEY)
                    store.append(
                        KEY,
                        [item(head + i) for i in range(5)],
                        expected_seq=head,
                        batch_id=f"b{b}",
                    )
                child.send("CHECK")
                assert child.expect("SAW") == ["10"]
            assert store.head(KEY) == 110


# --------------------------------------------------------------------------------------------


class TestDeleteAcrossProcesses:
    """A session deleted while another process writes to it (any kind of row)."""

    def test_a_writer_in_another_process_is_refused_and_leaves_no_row(self, tmp_path: Path) -> None:
        """Deleting a session another process keeps writing to: that process gets
        SessionDeleted from every kind of write it tries after, and no table holds a row of
        the session (its writes went before the delete, and with it)."""
        import sqlite3

        path = tmp_path / "store.sqlite"
        with opened(path) as store:
            store.create_session(KEY)
            with Child(tmp_path, "keep_writing", path) as child:
                child.expect("READY")
                child.send("GO")
                child.expect("WROTE")
                while True:
                    try:
                        store.delete_session(KEY, by="ops", reason="erasure")
                        break
                    except LeaseHeld:
                        continue  # the child holds the lease for a moment each round
                refused = [child.expect("REFUSED")[0] for _ in range(10)]
                child.expect("DONE")
                assert refused == [
                    "append", "inbox", "snapshot", "watermark", "lease", "renew", "release",
                    "head", "update", "archive",
                ]  # fmt: skip
            tombstone = store.tombstone(KEY)
            assert tombstone is not None
            assert tombstone.events > 0
        conn = sqlite3.connect(path)
        try:
            (sid,) = conn.execute(
                "SELECT id FROM sessions WHERE session_id=?", (KEY.session_id,)
            ).fetchone()
            left = {
                table: conn.execute(
                    f"SELECT count(*) FROM {table} WHERE session=?", (sid,)
                ).fetchone()[0]
                for table in ("events", "inbox", "watermarks", "snapshots")
            }
            lease = conn.execute("SELECT lease_owner FROM sessions WHERE id=?", (sid,)).fetchone()
        finally:
            conn.close()
        assert left == {"events": 0, "inbox": 0, "watermarks": 0, "snapshots": 0}
        assert lease == (None,)


class TestNewStoreAcrossProcesses:
    WRITERS = 6
    FILES = 30

    def test_processes_opening_a_new_store_file_together_all_succeed(self, tmp_path: Path) -> None:
        """Several processes that open the same brand-new store file at the same moment all
        get a working store (no spurious ``Corrupt`` or lock error) and all their writes land."""
        prefix = tmp_path / "new-"
        with contextlib.ExitStack() as stack:
            writers = [
                stack.enter_context(Child(tmp_path, "first_open", prefix, i, self.FILES))
                for i in range(self.WRITERS)
            ]
            for child in writers:
                child.expect("READY")
            start = time.time() + 0.2
            for child in writers:
                child.send(f"GO {start!r} 0.04")
            for child in writers:
                for j in range(self.FILES):
                    assert child.expect("OK") == [str(j)]
        for j in range(self.FILES):
            with opened(Path(f"{prefix}{j}.sqlite")) as store:
                records = list(Inbox(store, KEY).scan())
            assert sorted(r.payload["key"] for r in records) == [
                f"w{i}" for i in range(self.WRITERS)
            ]
