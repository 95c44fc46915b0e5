"""Backup, verify and restore (issue 36, item 1): an online, consistent archive of a store
while its sessions run; a restore that holds the same events, digests and heads, where a
turn continues; a damaged archive refused with the session and byte that fail."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import agentnb as nb
from agentnb.errors import ArchiveCorrupt, InvalidInput, StoreNotEmpty
from agentnb.ops._format import key_text, log_digests
from tests.ops.helpers import AGENT, WAIT, inbox_rows, rows

ROOT = Path(nb.__file__).parent.parent


def _busy_store(url: str, sessions: int = 8, turns: int = 3) -> tuple[nb.Runtime, list[nb.Receipt]]:
    runtime = nb.Runtime(AGENT, store=url)
    receipts = []
    for i in range(sessions):
        session = runtime.session(f"busy-{i}", user_id="alice")
        session.update(title=f"Busy {i}", labels={"team": "ops"})
        for t in range(turns):
            receipts.append(session.submit(f"task {t}", key=f"k-{i}-{t}"))
    return runtime, receipts


class TestBackupWhileRunning:
    def test_backup_of_eight_running_sessions_restores_the_same_logs(self, tmp_path: Path) -> None:
        """A backup taken while 8 sessions run turns restores into an empty store with every
        session's events, inbox, digests and heads equal to the source's at that point."""
        src = f"sqlite:///{tmp_path / 'src.db'}"
        runtime, receipts = _busy_store(src)
        try:
            archive = tmp_path / "backup.anb"
            done = threading.Event()
            report: list[nb.ops.BackupReport] = []

            def take() -> None:
                report.append(nb.backup(src, archive))
                done.set()

            threading.Thread(target=take).start()
            assert done.wait(WAIT)
            (made,) = report
            assert made.method == "sqlite-backup-api"
            assert made.sessions == 8
            checked = nb.verify(archive)
            dst = nb.open_store(f"sqlite:///{tmp_path / 'dst.db'}")
            restored = nb.restore(archive, dst)
            assert restored.sessions == 8
            for record in runtime.store.list_sessions():
                key = record.key
                head, inbox_head = checked.heads[key_text(key)]
                assert dst.heads(key) == (head, inbox_head)
                assert rows(dst, key, head) == rows(runtime.store, key, head)
                assert inbox_rows(dst, key, inbox_head) == inbox_rows(
                    runtime.store, key, inbox_head
                )
                assert log_digests(dst, key)[2:] == checked.digests[key_text(key)]
                copy = dst.get_session(key)
                assert copy is not None
                assert (copy.title, copy.labels) == (record.title, {"team": "ops"})
                assert copy.created_at == record.created_at
                assert dst.current_lease(key) is None or dst.current_lease(key).owner is None
            for receipt in receipts:
                receipt.wait(timeout=WAIT)
        finally:
            runtime.close()
        dst.close()

    def test_a_turn_continues_on_the_restored_store(self, tmp_path: Path) -> None:
        """On the restored store a session runs at once: a new task completes, and a
        re-sent task (same key) is recognised, not run again."""
        src = f"sqlite:///{tmp_path / 'src.db'}"
        with nb.Runtime(AGENT, store=src) as runtime:
            session = runtime.session("s", user_id="alice")
            first = session.submit("first", key="first-key")
            assert first.wait(timeout=WAIT).status == "completed"
        nb.backup(src, tmp_path / "a.anb")
        dst = f"sqlite:///{tmp_path / 'dst.db'}"
        nb.restore(tmp_path / "a.anb", dst)
        with nb.Runtime(AGENT, store=dst) as runtime:
            session = runtime.open("s", user_id="alice")
            again = session.submit("first", key="first-key")
            assert again.turn_id == first.turn_id
            outcome = session.run("second", timeout=WAIT)
            assert outcome.status == "completed"
            assert [t.status for t in session.tasks()] == ["completed", "completed"]

    def test_memory_and_postgres_stores_back_up_through_the_logical_format(
        self, tmp_path: Path, pg_store_url: str
    ) -> None:
        """A PostgreSQL store is archived through the store port (method logical) and
        restores into SQLite with the same digests."""
        with nb.Runtime(AGENT, store=pg_store_url) as runtime:
            session = runtime.session("pg", user_id="bob")
            assert session.run("hello", timeout=WAIT).status == "completed"
            key = session.key
            made = nb.backup(runtime.store, tmp_path / "pg.anb")
            assert made.method == "logical"
            dst = nb.open_store(f"sqlite:///{tmp_path / 'dst.db'}")
            nb.restore(tmp_path / "pg.anb", dst)
            assert log_digests(dst, key) == log_digests(runtime.store, key)
            dst.close()


class TestDamagedArchives:
    """The logical archive (format 1: a memory or PostgreSQL store), line by line."""

    def _archive(self, tmp_path: Path) -> Path:
        with nb.Runtime(AGENT, store="memory://") as runtime:
            for name in ("one", "two"):
                assert runtime.session(name).run("go", timeout=WAIT).status == "completed"
            out = tmp_path / "a.anb"
            assert nb.backup(runtime.store, out).method == "logical"
        return out

    def test_a_flipped_byte_is_named_by_session_and_offset(self, tmp_path: Path) -> None:
        """verify and restore refuse an archive with one byte changed inside an event,
        naming the session and the byte where the failing line starts; nothing is restored."""
        out = self._archive(tmp_path)
        data = bytearray(out.read_bytes())
        start, in_two = 0, False
        for line in bytes(data).split(b"\n"):
            if b'"r":"session"' in line:
                in_two = b'"two"' in line
            elif in_two and b'"r":"event"' in line:
                break
            start += len(line) + 1
        data[start + 30] ^= 0x01  # inside the event's JSON
        out.write_bytes(bytes(data))
        with pytest.raises(ArchiveCorrupt) as caught:
            nb.verify(out)
        assert caught.value.offset == start
        assert caught.value.session is not None
        assert caught.value.session.endswith("/two")
        assert f"byte {start}" in str(caught.value)
        dst = nb.open_store(f"sqlite:///{tmp_path / 'dst.db'}")
        with pytest.raises(ArchiveCorrupt):
            nb.restore(out, dst)
        assert dst.list_sessions() == []
        dst.close()

    def test_a_cut_short_archive_is_refused(self, tmp_path: Path) -> None:
        """An archive that ends before its manifest (a copy cut short) fails verify."""
        out = self._archive(tmp_path)
        data = out.read_bytes()
        out.write_bytes(data[: data.rindex(b"\n", 0, len(data) - 1) + 1])
        with pytest.raises(ArchiveCorrupt, match="before its manifest"):
            nb.verify(out)

    def test_a_consistently_dropped_line_fails_the_digest(self, tmp_path: Path) -> None:
        """A whole event line removed (checksums intact) fails the session's seqs."""
        out = self._archive(tmp_path)
        lines = out.read_bytes().split(b"\n")
        drop = next(i for i, line in enumerate(lines) if b'"r":"event"' in line)
        out.write_bytes(b"\n".join(lines[:drop] + lines[drop + 1 :]))
        with pytest.raises(ArchiveCorrupt, match="seq"):
            nb.verify(out)

    def test_a_file_that_is_no_archive_is_refused(self, tmp_path: Path) -> None:
        """A missing file is InvalidInput; a file of other bytes is ArchiveCorrupt at byte 0."""
        with pytest.raises(InvalidInput, match="no such archive"):
            nb.verify(tmp_path / "missing.anb")
        other = tmp_path / "other.anb"
        other.write_bytes(b"hello\n")
        with pytest.raises(ArchiveCorrupt) as caught:
            nb.verify(other)
        assert caught.value.offset == 0


def _trailer(data: bytes) -> int:
    """Where the lines of a physical archive start (its last line says)."""
    end = data[data.rindex(b"\n", 0, len(data) - 1) + 1 :]
    return int(json.loads(end[17:])["trailer"])


class TestDamagedPhysicalArchives:
    """The physical archive of an SQLite store (format 2): the copy checked block by block,
    the damage named by byte and session."""

    def _archive(self, tmp_path: Path) -> tuple[Path, dict[str, nb.SessionKey]]:
        src = f"sqlite:///{tmp_path / 'src.db'}"
        with nb.Runtime(AGENT, store=src) as runtime:
            keys = {}
            for name in ("one", "two"):
                session = runtime.session(name)
                assert session.run("go", timeout=WAIT).status == "completed"
                keys[name] = session.key
        out = tmp_path / "a.anb"
        made = nb.backup(src, out)
        assert made.method == "sqlite-backup-api"
        assert nb.verify(out).format == "agentnb-archive/2"
        return out, keys

    def test_a_flipped_byte_in_a_session_names_its_block_and_session(self, tmp_path: Path) -> None:
        """verify and restore refuse an archive with one byte of a session's row changed in
        the store's copy, naming the session and the block's first byte; nothing is
        restored."""
        out, keys = self._archive(tmp_path)
        store = nb.open_store(f"sqlite:///{tmp_path / 'src.db'}")
        (first,) = store.read_raw(keys["two"], 0, 1)
        store.close()
        data = bytearray(out.read_bytes())
        at = data.find(first.event_id.encode())
        assert 0 < at < _trailer(bytes(data))
        data[at + 4] ^= 0x01
        out.write_bytes(bytes(data))
        with pytest.raises(ArchiveCorrupt) as caught:
            nb.verify(out)
        block = at - at % 65536
        assert caught.value.offset == block
        assert caught.value.session is not None
        assert caught.value.session.endswith("/two")
        assert f"byte {block}" in str(caught.value)
        dst = nb.open_store(f"sqlite:///{tmp_path / 'dst.db'}")
        with pytest.raises(ArchiveCorrupt):
            nb.restore(out, dst)
        assert dst.list_sessions() == []
        dst.close()

    def test_a_damaged_manifest_or_a_cut_short_archive_is_refused(self, tmp_path: Path) -> None:
        """A byte changed in the manifest fails that line's checksum; an archive cut short
        (its last line, or half the copy) ends before its manifest."""
        out, _ = self._archive(tmp_path)
        data = out.read_bytes()
        manifest = data.index(b'"r":"manifest"')
        line = data.rindex(b"\n", 0, manifest) + 1
        flipped = bytearray(data)
        flipped[manifest + 2] ^= 0x01
        out.write_bytes(bytes(flipped))
        with pytest.raises(ArchiveCorrupt, match="checksum") as caught:
            nb.verify(out)
        assert caught.value.offset == line
        for cut in (data[: data.rindex(b"\n", 0, len(data) - 1) + 1], data[: len(data) // 2]):
            out.write_bytes(cut)
            with pytest.raises(ArchiveCorrupt, match="before its manifest"):
                nb.verify(out)


class TestRestoreTargets:
    def test_a_store_with_sessions_is_refused_unless_merging_without_overlap(
        self, tmp_path: Path
    ) -> None:
        """restore into a store holding sessions raises StoreNotEmpty; merge=True adds the
        archive's sessions beside others, and refuses (naming them) when any overlaps."""
        src = f"sqlite:///{tmp_path / 'src.db'}"
        with nb.Runtime(AGENT, store=src) as runtime:
            assert runtime.session("mine").run("go", timeout=WAIT).status == "completed"
        nb.backup(src, tmp_path / "a.anb")
        other = f"sqlite:///{tmp_path / 'other.db'}"
        with nb.Runtime(AGENT, store=other) as runtime:
            runtime.session("theirs").submit("queued")
        with pytest.raises(StoreNotEmpty, match="--merge"):
            nb.restore(tmp_path / "a.anb", other)
        nb.restore(tmp_path / "a.anb", other, merge=True)
        store = nb.open_store(other)
        assert sorted(r.key.session_id for r in store.list_sessions()) == ["mine", "theirs"]
        store.close()
        with pytest.raises(StoreNotEmpty) as caught:
            nb.restore(tmp_path / "a.anb", other, merge=True)
        assert any(name.endswith("/mine") for name in caught.value.sessions)


class TestCommands:
    def test_backup_verify_and_restore_commands(self, tmp_path: Path) -> None:
        """agentnb backup, verify and restore do the same from the command line; a damaged
        archive exits with the data error code and names the byte."""
        src = f"sqlite:///{tmp_path / 'src.db'}"
        with nb.Runtime(AGENT, store=src) as runtime:
            assert runtime.session("cli").run("go", timeout=WAIT).status == "completed"

        def agentnb(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, "-m", "agentnb.cli", *args],
                check=False,
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=120,
            )

        out = tmp_path / "cli.anb"
        made = agentnb("backup", "--store", src, str(out))
        assert made.returncode == 0, made.stderr
        assert "backed up 1 sessions" in made.stdout
        ok = agentnb("verify", str(out))
        assert ok.returncode == 0
        assert "ok" in ok.stdout
        dst = f"sqlite:///{tmp_path / 'dst.db'}"
        back = agentnb("restore", str(out), "--store", dst)
        assert back.returncode == 0, back.stderr
        again = agentnb("restore", str(out), "--store", dst)
        assert again.returncode != 0
        assert "--merge" in again.stderr
        data = bytearray(out.read_bytes())
        data[len(data) // 2] ^= 0x20
        out.write_bytes(bytes(data))
        bad = agentnb("verify", str(out))
        assert bad.returncode == 4
        assert "byte" in bad.stderr


class TestPaths:
    def test_a_store_path_with_spaces_and_hashes_backs_up(self, tmp_path: Path) -> None:
        """The online copy opens the store file by a proper file URI, so a folder named
        'a b#c?' works."""
        folder = tmp_path / "a b#c?"
        folder.mkdir()
        src = f"sqlite:///{folder / 'src.db'}"
        with nb.Runtime(AGENT, store=src) as runtime:
            assert runtime.session("odd").run("go", timeout=WAIT).status == "completed"
        made = nb.backup(src, folder / "odd.anb")
        assert made.method == "sqlite-backup-api"
        assert nb.verify(folder / "odd.anb").sessions == 1
