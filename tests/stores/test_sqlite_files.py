"""The SQLite store's files: owner-only, never followed through links, damage named, losses
caught, and reads that never create a store."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import pytest

from agentnb.errors import Corrupt, InvalidInput, SessionNotFound
from agentnb.ids import SessionKey
from agentnb.stores import open_store
from agentnb.stores.sqlite import CATALOGUE, SQLiteStore
from agentnb.testing.store_contract import session_key, step

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="changing a file's owner needs root")


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def filled(path: Path, events: int = 3) -> SessionKey:
    """A closed store at ``path`` with one session of ``events`` events."""
    key = session_key()
    with SQLiteStore(path) as store:
        store.create_session(key)
        store.append(key, [step(i) for i in range(1, events + 1)], expected_seq=0, batch_id="b")
    return key


class TestLinks:
    def test_dangling_symlink_is_refused_and_its_target_not_created(self, tmp_path: Path) -> None:
        """A store path that is a link to nothing raises InvalidInput; no file appears."""
        path = tmp_path / "agentnb.sqlite"
        path.symlink_to(tmp_path / "elsewhere.sqlite")
        with pytest.raises(InvalidInput, match="symbolic link"):
            SQLiteStore(path)
        assert not (tmp_path / "elsewhere.sqlite").exists()

    def test_symlink_to_a_store_is_refused(self, tmp_path: Path) -> None:
        """A link to an existing store raises InvalidInput naming the link."""
        real = tmp_path / "real.sqlite"
        filled(real)
        path = tmp_path / "agentnb.sqlite"
        path.symlink_to(real)
        with pytest.raises(InvalidInput, match=str(path)):
            SQLiteStore(path)

    @pytest.mark.parametrize("suffix", ["-wal", "-shm", CATALOGUE])
    def test_symlinked_side_file_is_refused(self, tmp_path: Path, suffix: str) -> None:
        """A -wal, -shm or -catalogue file that is a link raises InvalidInput; the link's
        target is not created."""
        path = tmp_path / "agentnb.sqlite"
        filled(path)
        Path(f"{path}{suffix}").unlink(missing_ok=True)
        Path(f"{path}{suffix}").symlink_to(tmp_path / "target")
        with pytest.raises(InvalidInput):
            SQLiteStore(path)
        assert not (tmp_path / "target").exists()


class TestOwnership:
    @as_root
    def test_store_file_of_another_user_is_refused(self, tmp_path: Path) -> None:
        """A store file another user owns raises InvalidInput naming the owner."""
        path = tmp_path / "agentnb.sqlite"
        filled(path)
        os.chown(path, 65534, 65534)
        with pytest.raises(InvalidInput, match="uid 65534"):
            SQLiteStore(path)

    @pytest.mark.parametrize("loose", [0o620, 0o602, 0o666])
    def test_store_file_others_can_write_is_refused_untouched(
        self, tmp_path: Path, loose: int
    ) -> None:
        """A store file that the group or others can write raises InvalidInput saying to
        chmod it, and its mode is left as it was."""
        path = tmp_path / "agentnb.sqlite"
        filled(path)
        path.chmod(loose)
        with pytest.raises(InvalidInput, match="chmod go-w"):
            SQLiteStore(path)
        assert mode(path) == loose


class TestModes:
    def test_new_wal_and_shm_are_owner_only_when_the_store_file_was_loosened(
        self, tmp_path: Path
    ) -> None:
        """With the store file made 0644, the -wal and -shm made by the next writer are
        still 0600."""
        path = tmp_path / "agentnb.sqlite"
        key = filled(path)
        path.chmod(0o644)
        with SQLiteStore(path) as store:
            store.append(key, [step(9)], expected_seq=3, batch_id="b2")
            assert store.head(key) == 4
            assert mode(Path(f"{path}-wal")) == 0o600
            assert mode(Path(f"{path}-shm")) == 0o600
        assert mode(path) == 0o644

    def test_loosened_wal_is_tightened(self, tmp_path: Path) -> None:
        """A -wal left readable by others (made beside a loosened store file) is made
        owner-only by the next store that opens it."""
        path = tmp_path / "agentnb.sqlite"
        key = filled(path)
        with SQLiteStore(path) as holder:  # keeps the -wal in place
            holder.head(key)
            Path(f"{path}-wal").chmod(0o644)
            with SQLiteStore(path) as store:
                store.head(key)
            assert mode(Path(f"{path}-wal")) == 0o600

    def test_created_folders_and_record_are_owner_only(self, tmp_path: Path) -> None:
        """Folders the store makes are 0700; the -catalogue record is 0600."""
        path = tmp_path / "a" / "b" / "agentnb.sqlite"
        filled(path)
        assert mode(tmp_path / "a") == 0o700
        assert mode(tmp_path / "a" / "b") == 0o700
        assert mode(Path(f"{path}{CATALOGUE}")) == 0o600


class TestDamage:
    def test_corrupt_page_header_is_corrupt_naming_the_file(self, tmp_path: Path) -> None:
        """A page whose header was overwritten raises Corrupt naming the file, not a bare
        sqlite3.DatabaseError."""
        path = tmp_path / "agentnb.sqlite"
        key = filled(path, events=200)
        with sqlite3.connect(path) as conn:
            page_size = conn.execute("PRAGMA page_size").fetchone()[0]
            root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name='events'")
            (events_page,) = root.fetchone()
        conn.close()
        data = bytearray(path.read_bytes())
        at = (events_page - 1) * page_size
        data[at : at + 12] = b"\xff" * 12
        path.write_bytes(bytes(data))
        with SQLiteStore(path) as store, pytest.raises(Corrupt, match="damaged") as info:
            list(store.scan(key))
        assert str(path) in str(info.value)

    def test_text_that_is_not_utf8_is_corrupt_naming_the_file(self, tmp_path: Path) -> None:
        """A payload rewritten in the file as bytes that are not UTF-8 raises Corrupt naming
        the file, not a bare sqlite3.OperationalError."""
        path = tmp_path / "agentnb.sqlite"
        key = filled(path)
        with sqlite3.connect(path, isolation_level=None) as conn:
            conn.execute("UPDATE events SET payload=CAST(x'ff00fe' AS TEXT) WHERE seq=2")
        conn.close()
        with SQLiteStore(path) as store, pytest.raises(Corrupt, match=str(path)):
            store.read_after(key, 0, 10)


class TestLostSessions:
    def test_store_replaced_by_an_older_copy_is_corrupt(self, tmp_path: Path) -> None:
        """A store file put back from a copy taken before a session was created raises
        Corrupt naming the file and the record to delete to accept it."""
        path = tmp_path / "agentnb.sqlite"
        filled(path)
        old = path.read_bytes()
        with SQLiteStore(path) as store:
            store.create_session(session_key("s2"))
        path.write_bytes(old)
        with pytest.raises(Corrupt, match="lost sessions") as info:
            SQLiteStore(path)
        assert f"delete {path}{CATALOGUE}" in str(info.value)

    def test_deleting_the_record_accepts_the_store_as_it_is(self, tmp_path: Path) -> None:
        """After the -catalogue record is deleted the older copy opens, and the session it
        never had is SessionNotFound."""
        path = tmp_path / "agentnb.sqlite"
        filled(path)
        old = path.read_bytes()
        newer = session_key("s2")
        with SQLiteStore(path) as store:
            store.create_session(newer)
        path.write_bytes(old)
        Path(f"{path}{CATALOGUE}").unlink()
        with SQLiteStore(path) as store:
            with pytest.raises(SessionNotFound):
                store.head(newer)
            assert len(store.list_sessions()) == 1

    def test_record_of_a_deleted_store_does_not_block_a_new_one(self, tmp_path: Path) -> None:
        """A store file deleted on purpose (its record left behind) is simply made anew."""
        path = tmp_path / "agentnb.sqlite"
        filled(path)
        path.unlink()
        with SQLiteStore(path) as store:
            assert store.list_sessions() == []

    def test_unreadable_record_is_corrupt(self, tmp_path: Path) -> None:
        """A -catalogue record that is not one raises Corrupt naming it."""
        path = tmp_path / "agentnb.sqlite"
        filled(path)
        Path(f"{path}{CATALOGUE}").write_text("{oops")
        with pytest.raises(Corrupt, match=CATALOGUE):
            SQLiteStore(path)


class TestReadOnlyOpen:
    def test_missing_store_is_refused_and_nothing_is_created(self, tmp_path: Path) -> None:
        """Opening a missing store with create=False raises InvalidInput; no folder or file
        appears."""
        path = tmp_path / "newdir" / "x.sqlite"
        with pytest.raises(InvalidInput, match="no agentnb store"):
            SQLiteStore(path, create=False)
        with pytest.raises(InvalidInput, match="no agentnb store"):
            open_store(f"sqlite:///{path}", create=False)
        assert list(tmp_path.iterdir()) == []

    def test_existing_store_opens_for_reading(self, tmp_path: Path) -> None:
        """An existing store opens with create=False and shows its sessions."""
        path = tmp_path / "agentnb.sqlite"
        key = filled(path)
        with SQLiteStore(path, create=False) as store:
            assert store.head(key) == 3


class TestSnapshotSeal:
    def test_snapshot_of_a_rewritten_event_is_ignored(self, tmp_path: Path) -> None:
        """A snapshot whose seq now holds another event (the log's tail removed in the file
        and written again) reads as None."""
        path = tmp_path / "agentnb.sqlite"
        key = filled(path)
        with SQLiteStore(path) as store:
            store.put_snapshot(key, "state", 3, b"folded")
            assert store.get_snapshot(key, "state") == (3, b"folded")
            with sqlite3.connect(path, isolation_level=None) as conn:
                conn.execute("DELETE FROM events WHERE seq=3")
            conn.close()
            store.append(key, [step(30)], expected_seq=2, batch_id="again")
            assert store.head(key) == 3
            assert store.get_snapshot(key, "state") is None

    def test_altered_snapshot_row_is_ignored(self, tmp_path: Path) -> None:
        """A snapshot row whose data was edited in the file reads as None."""
        path = tmp_path / "agentnb.sqlite"
        key = filled(path)
        with SQLiteStore(path) as store:
            store.put_snapshot(key, "state", 3, b"folded")
            with sqlite3.connect(path, isolation_level=None) as conn:
                conn.execute("UPDATE snapshots SET data=replace(data, 'folded', 'forged')")
            conn.close()
            assert store.get_snapshot(key, "state") is None
