"""The store contract of the catalogue's end of a session: deletion, tombstones, archive."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentnb.errors import (
    AppendConflict,
    Corrupt,
    Fenced,
    InboxChanged,
    InvalidInput,
    LeaseHeld,
    SessionArchived,
    SessionDeleted,
    SessionNotFound,
)
from agentnb.events import (
    BLOB_THRESHOLD,
    Event,
)
from agentnb.ids import FakeClock, SessionKey
from agentnb.log import Inbox
from agentnb.stores.base import (
    MAX_READ_LIMIT,
    WORK_KINDS,
    SessionStore,
)
from agentnb.testing.store_contract.support import (
    ContractBase,
    command,
    run_threads,
    session_key,
    step,
    text_digest,
)

__all__ = ["DeletionContract"]


class DeletionContract(ContractBase):
    """The catalogue's end of a session: deleting it, its tombstones, and the archive."""

    def test_delete_removes_every_row_of_the_session_and_nothing_else(
        self, store: SessionStore, key: SessionKey, clock: FakeClock
    ) -> None:
        """Events, inbox, watermarks, snapshots, lease and unshared blobs go; the other
        session, and a blob it shares, stay."""
        other = session_key("other")
        store.create_session(other)
        shared = Event.create("acme/big", {"text": "s" * (BLOB_THRESHOLD + 1)})
        mine = Event.create("acme/big", {"text": "m" * (BLOB_THRESHOLD + 1)})
        store.append(key, [step(), shared, mine], expected_seq=0, batch_id="b")
        store.append(other, [step(), shared.model_copy()], expected_seq=0, batch_id="b")
        store.inbox_append(key, command())
        store.advance_watermark(key, "sink", 2)
        store.put_snapshot(key, "fold", 3, b"state")
        lease = store.acquire_lease(key, "me")
        store.release_lease(lease)
        clock.advance(2)
        tombstone = store.delete_session(key, by="alice", reason="GDPR request 7")
        assert (tombstone.key, tombstone.deleted_by, tombstone.reason) == (
            key,
            "alice",
            "GDPR request 7",
        )
        assert (tombstone.deleted_at, tombstone.events) == (clock.now(), 3)
        assert store.tombstone(key) == tombstone
        assert store.get_session(key) is None
        with pytest.raises(Corrupt):
            store.get_blob(text_digest(mine.payload["text"]))
        # The shared blob is still there: the other session reads it back.
        assert [e.payload for e in store.read_after(other, 0, 10)][1] == shared.payload
        assert [r.key for r in store.find_sessions()] == [other]
        assert store.tombstone(other) is None

    def test_a_deleted_session_refuses_every_call(
        self, store: SessionStore, key: SessionKey
    ) -> None:
        """After delete, reads, writes and create_session raise SessionDeleted; deleting
        again returns the first tombstone."""
        store.append(key, [step()], expected_seq=0, batch_id="b")
        lease = store.acquire_lease(key, "me")
        store.release_lease(lease)
        tombstone = store.delete_session(key, by="ops")
        for call in (
            lambda: store.head(key),
            lambda: store.read_after(key, 0, 10),
            lambda: store.append(key, [step(2)], expected_seq=1, batch_id="b2"),
            lambda: store.inbox_append(key, command()),
            lambda: store.inbox_head(key),
            lambda: store.update_session(key, title="back"),
            lambda: store.set_archived(key),
            lambda: store.acquire_lease(key, "me"),
            lambda: store.renew_lease(lease),
            lambda: store.release_lease(lease),
            lambda: store.put_snapshot(key, "fold", 0, b"state"),
            lambda: store.advance_watermark(key, "sink", 0),
            lambda: store.create_session(key),
        ):
            with pytest.raises(SessionDeleted, match="ops"):
                call()
        assert store.delete_session(key, by="someone else") == tombstone
        assert store.list_sessions() == []
        with pytest.raises(SessionNotFound):
            store.delete_session(session_key("never"), by="ops")

    def test_delete_is_refused_under_another_live_lease(
        self, store: SessionStore, key: SessionKey
    ) -> None:
        """A live lease makes delete raise LeaseHeld (nothing deleted) unless it is the fence."""
        store.append(key, [step()], expected_seq=0, batch_id="b")
        lease = store.acquire_lease(key, "runner")
        with pytest.raises(LeaseHeld):
            store.delete_session(key, by="ops")
        assert store.head(key) == 1
        store.delete_session(key, by="runner", fence=lease)
        assert store.tombstone(key) is not None

    @pytest.mark.parametrize(
        "arguments",
        [{"by": ""}, {"by": 5}, {"by": "ops", "reason": 5}, {"by": "ops", "fence": "lease"}],
    )
    def test_bad_delete_arguments_are_invalid_input(
        self, store: SessionStore, key: SessionKey, arguments: dict[str, Any]
    ) -> None:
        """delete_session with a bad who, reason or fence raises InvalidInput, deletes nothing."""
        with pytest.raises(InvalidInput):
            store.delete_session(key, **arguments)
        assert store.tombstone(key) is None

    def test_a_delete_racing_commits_leaves_nothing_behind(
        self, store: SessionStore, key: SessionKey
    ) -> None:
        """A writer committing while the session is deleted either commits before the delete
        or gets SessionDeleted; no event of it survives."""
        stopped: list[BaseException] = []

        def write() -> None:
            for i in range(200):
                try:
                    store.append(key, [step(i)], expected_seq=i, batch_id=f"b{i}")
                    store.inbox_append(key, command(f"c{i}"))
                except SessionDeleted as exc:
                    stopped.append(exc)
                    return

        def delete() -> None:
            time.sleep(0.01)  # let some commits through first (not a timing assertion)
            store.delete_session(key, by="ops")

        run_threads([write, delete])
        with pytest.raises(SessionDeleted):
            store.head(key)
        assert store.find_sessions() == []
        if stopped:
            assert isinstance(stopped[0], SessionDeleted)

    def test_a_delete_racing_every_kind_of_write_leaves_no_row(
        self, store: SessionStore, key: SessionKey, tmp_path: Path
    ) -> None:
        """Writers of every kind (commits, commands, snapshots, watermarks, leases) racing
        a delete each stop with SessionDeleted, and no table keeps a row of the session."""
        stopped: list[BaseException] = []

        def writer(w: int) -> Callable[[], None]:
            def run() -> None:
                for i in itertools.count(1):  # until the delete (run_threads guards a hang)
                    try:
                        if w == 0:
                            head = store.head(key)
                            store.append(key, [step(i)], expected_seq=head, batch_id=f"b{i}")
                        elif w == 1:
                            store.inbox_append(key, command(f"c{i}"))
                        elif w == 2:
                            store.put_snapshot(key, "fold", store.head(key), b"state")
                            store.advance_watermark(key, "sink", store.head(key))
                        else:
                            store.release_lease(store.acquire_lease(key, f"owner-{i}"))
                    except (AppendConflict, LeaseHeld, Fenced):
                        continue  # another writer of this test got there first
                    except SessionDeleted as exc:
                        stopped.append(exc)
                        return

            return run

        def delete() -> None:
            time.sleep(0.01)  # let some writes through first (not a timing assertion)
            while True:
                try:
                    store.delete_session(key, by="ops")
                    return
                except LeaseHeld:
                    continue  # the lease writer holds it for a moment

        run_threads([*(writer(w) for w in range(4)), delete])
        assert len(stopped) == 4
        rows = self.rows_of(tmp_path, key)
        if rows is not None:
            assert rows == dict.fromkeys(rows, 0), rows

    def test_another_store_object_sees_the_delete_at_every_write(
        self, store: SessionStore, key: SessionKey, tmp_path: Path, clock: FakeClock
    ) -> None:
        """A second store object over the same data (another process) that used the session
        before the delete gets SessionDeleted from every write and from the heads."""
        peer = self.make_peer(tmp_path, clock=clock)
        if peer is None:
            pytest.skip("this backend's data lives in one store object")
        try:
            peer.append(key, [step()], expected_seq=0, batch_id="b")
            peer.inbox_append(key, command())
            peer.put_snapshot(key, "fold", 1, b"state")
            peer.advance_watermark(key, "sink", 1)
            lease = peer.acquire_lease(key, "peer")
            peer.release_lease(lease)
            store.delete_session(key, by="ops")
            for call in (
                lambda: peer.head(key),
                lambda: peer.inbox_head(key),
                lambda: peer.append(key, [step(2)], expected_seq=1, batch_id="b2"),
                lambda: peer.inbox_append(key, command("again")),
                lambda: peer.put_snapshot(key, "fold", 0, b"state"),
                lambda: peer.advance_watermark(key, "sink", 0),
                lambda: peer.acquire_lease(key, "peer"),
                lambda: peer.renew_lease(lease),
                lambda: peer.release_lease(lease),
                lambda: peer.update_session(key, title="back"),
                lambda: peer.set_archived(key),
            ):
                with pytest.raises(SessionDeleted, match="ops"):
                    call()
        finally:
            peer.close()
        rows = self.rows_of(tmp_path, key)
        if rows is not None:
            assert rows == dict.fromkeys(rows, 0), rows

    # -- tombstones (what exports apply) ---------------------------------------------------

    def test_tombstones_page_in_deletion_order(self, store: SessionStore, clock: FakeClock) -> None:
        """Each deletion takes the next seq; tombstones(after=, limit=) pages them in that
        order, and a page after the last one seen holds only later deletions."""
        keys = [session_key(f"s{i}") for i in range(5)]
        for k in keys:
            store.create_session(k)
        order = [keys[3], keys[0], keys[4]]
        for k in order:
            clock.advance(1)
            store.delete_session(k, by="ops", reason=f"drop {k.session_id}")
        found = store.tombstones()
        assert [(t.key, t.seq) for t in found] == [(k, i) for i, k in enumerate(order, 1)]
        assert [t.reason for t in found] == ["drop s3", "drop s0", "drop s4"]
        assert store.tombstone(keys[0]) == found[1]
        assert store.tombstones(after=1, limit=1) == [found[1]]
        assert store.tombstones(after=3) == []
        store.delete_session(keys[1], by="ops")
        assert [(t.key, t.seq) for t in store.tombstones(after=3)] == [(keys[1], 4)]
        assert store.delete_session(keys[0], by="again").seq == 2  # deleting again: the first

    def test_tombstone_seqs_are_gapless_under_concurrent_deletes(self, store: SessionStore) -> None:
        """Sessions deleted from several threads at once get seqs 1..n, and a reader paging
        with after= the last seq it saw meanwhile sees every tombstone once, in order."""
        keys = [session_key(f"s{i}") for i in range(24)]
        for k in keys:
            store.create_session(k)
        seen: list[int] = []
        done = threading.Event()

        def deleter(part: int) -> Callable[[], None]:
            def run() -> None:
                for k in keys[part::3]:
                    store.delete_session(k, by=f"d{part}")

            return run

        def reader() -> None:
            while True:
                finished = done.is_set()
                page = store.tombstones(after=seen[-1] if seen else 0, limit=5)
                seen.extend(t.seq for t in page)
                if finished and not page:
                    return

        def deleters() -> None:
            try:
                run_threads([deleter(p) for p in range(3)])
            finally:
                done.set()

        run_threads([deleters, reader])
        assert seen == list(range(1, len(keys) + 1))
        assert {t.key for t in store.tombstones(limit=100)} == set(keys)

    def test_tombstone_watermark_is_monotonic_per_sink(
        self, store: SessionStore, key: SessionKey
    ) -> None:
        """A sink's tombstone watermark starts at 0, only moves forward, is kept per sink
        name, and cannot pass the last deletion (InvalidInput)."""
        assert store.tombstone_watermark("sink") == 0
        with pytest.raises(InvalidInput, match="past the last deletion"):
            store.advance_tombstone_watermark("sink", 1)
        store.delete_session(key, by="ops")
        assert store.advance_tombstone_watermark("sink", 1) == 1
        assert store.advance_tombstone_watermark("sink", 0) == 1
        assert store.tombstone_watermark("sink") == 1
        assert store.tombstone_watermark("other") == 0

    @pytest.mark.parametrize(
        "call",
        [
            lambda s: s.tombstones(after=-1),
            lambda s: s.tombstones(limit=0),
            lambda s: s.tombstones(limit=MAX_READ_LIMIT + 1),
            lambda s: s.tombstones(after=True),
            lambda s: s.tombstone_watermark(""),
            lambda s: s.advance_tombstone_watermark("sink", -1),
            lambda s: s.advance_tombstone_watermark(5, 0),
        ],
    )
    def test_bad_tombstone_arguments_are_invalid_input(
        self, store: SessionStore, call: Callable[[SessionStore], object]
    ) -> None:
        """Negative cursors, bad limits and sink names raise InvalidInput."""
        with pytest.raises(InvalidInput):
            call(store)

    # -- archive ------------------------------------------------------------------------------

    def test_archive_round_trips_and_leaves_the_default_listing(
        self, store: SessionStore, key: SessionKey, clock: FakeClock
    ) -> None:
        """set_archived sets archived_at (kept when archived again) without moving the
        activity times; find_sessions leaves it out unless archived=True or None; clearing
        the flag brings it back."""
        other = session_key("other")
        store.create_session(other)
        before = store.get_session(key)
        assert before is not None
        assert before.archived_at is None
        clock.advance(5)
        record = store.set_archived(key)
        assert record.archived_at == clock.now()
        assert (record.last_activity, record.updated_at) == (
            before.last_activity,
            before.updated_at,
        )
        clock.advance(5)
        assert store.set_archived(key).archived_at == record.archived_at
        assert store.get_session(key) == record
        assert [r.key for r in store.find_sessions()] == [other]
        assert [r.key for r in store.find_sessions(archived=True)] == [key]
        assert {r.key for r in store.find_sessions(archived=None)} == {key, other}
        assert store.set_archived(key, False).archived_at is None
        assert {r.key for r in store.find_sessions()} == {key, other}
        assert store.find_sessions(archived=True) == []

    def test_an_archived_session_refuses_new_work_and_stays_readable(
        self, store: SessionStore, key: SessionKey
    ) -> None:
        """Every command that starts or feeds a run raises SessionArchived and writes
        nothing; interrupt, cancel, other inbox records, the execution log, metadata and
        reads go on; once unarchived, work is accepted again."""
        inbox = Inbox(store, key)
        inbox.accept("submit", key="early", turn_id="turn_1", input="before")
        store.append(key, [step()], expected_seq=0, batch_id="b")
        store.set_archived(key)
        head = store.inbox_head(key)
        for kind in sorted(WORK_KINDS):
            with pytest.raises(SessionArchived, match="unarchive"):
                inbox.accept(kind, turn_id="turn_1", input="more")
        assert store.inbox_head(key) == head
        # A re-send of a command accepted before the archive returns the original.
        again, created = inbox.accept("submit", key="early", turn_id="turn_9", input="before")
        assert (again.seq, created) == (1, False)
        inbox.accept("interrupt", turn_id="turn_1", run_id="run_1")
        inbox.accept("cancel", turn_id="turn_1")
        inbox.record("inbox/rejected", {"command_id": "cmd_x", "reason": "r"})
        store.append(key, [step(2)], expected_seq=1, batch_id="b2")
        store.update_session(key, title="kept for later")
        assert store.inbox_head(key) == head + 3
        assert len(store.read_after(key, 0, 10)) == 2
        store.set_archived(key, False)
        inbox.accept("submit", turn_id="turn_2", input="after")
        assert store.inbox_head(key) == head + 4

    def test_archive_can_be_conditioned_on_the_inbox_head(
        self, store: SessionStore, key: SessionKey
    ) -> None:
        """With expected_inbox, set_archived commits only if no command arrived since
        (else InboxChanged, not archived)."""
        store.inbox_append(key, command("first"))
        store.inbox_append(key, command("second"))
        with pytest.raises(InboxChanged):
            store.set_archived(key, expected_inbox=1)
        record = store.get_session(key)
        assert record is not None
        assert record.archived_at is None
        assert store.set_archived(key, expected_inbox=2).archived_at is not None

    @pytest.mark.parametrize(
        "arguments", [{"archived": "yes"}, {"archived": None}, {"expected_inbox": -1}]
    )
    def test_bad_archive_arguments_are_invalid_input(
        self, store: SessionStore, key: SessionKey, arguments: dict[str, Any]
    ) -> None:
        """set_archived with a non-bool flag or a bad inbox head raises InvalidInput."""
        with pytest.raises(InvalidInput):
            store.set_archived(key, **arguments)
        record = store.get_session(key)
        assert record is not None
        assert record.archived_at is None

    def test_archive_of_an_unknown_session_is_session_not_found(self, store: SessionStore) -> None:
        """set_archived of a session that was never created raises SessionNotFound."""
        with pytest.raises(SessionNotFound):
            store.set_archived(session_key("never"))
