"""Backup, restore and migrate carry large tasks (issue 39, item 7): the copy holds the
same logs, digest for digest, keeps each large text once, and still recognises a re-sent
command."""

from __future__ import annotations

from pathlib import Path

import agentnb as nb
from agentnb.ops._format import log_digests
from tests.ops.helpers import WAIT

TEXTS = [f"large task {i}: " + chr(ord("a") + i) * 300_000 for i in range(3)]
AGENT = nb.Agent(name="Echo", agent_id="echo", model=nb.ScriptedModel(lambda m: "done"))


def _filled(url: str) -> nb.SessionKey:
    """A store at ``url`` with one session that ran three large tasks (under keys)."""
    with nb.Runtime(AGENT, store=url) as runtime:
        session = runtime.session("large", user_id="alice")
        for i, text in enumerate(TEXTS):
            assert session.submit(text, key=f"k{i}").wait(WAIT).status == "completed"
        return session.key


def _check_copy(src: nb.SessionStore, dst: nb.SessionStore, key: nb.SessionKey) -> None:
    """``dst`` holds ``src``'s logs exactly, one blob per large text, and recognises a
    re-sent command."""
    assert log_digests(dst, key) == log_digests(src, key)
    usage = dst.blob_usage(key)
    assert len(usage) == len(TEXTS)
    assert sum(usage.values()) < 1.01 * sum(map(len, TEXTS))
    with nb.Runtime(AGENT, store=dst) as runtime:
        session = runtime.open("large", user_id="alice")
        receipt = session.submit(TEXTS[0], key="k0")
        assert receipt.turn_id == session.tasks()[0].turn_id


class TestBackupAndRestore:
    def test_a_restored_store_keeps_each_large_text_once(self, tmp_path: Path) -> None:
        """A SQLite store of large tasks restores into a new one with the same digests,
        each text once, and re-sent commands recognised."""
        src_url = f"sqlite:///{tmp_path / 'src.db'}"
        key = _filled(src_url)
        nb.backup(src_url, tmp_path / "a.anb")
        src = nb.open_store(src_url)
        dst = nb.open_store(f"sqlite:///{tmp_path / 'dst.db'}")
        try:
            nb.restore(tmp_path / "a.anb", dst)
            _check_copy(src, dst, key)
        finally:
            src.close()
            dst.close()


class TestMigrate:
    def test_a_migrated_store_keeps_each_large_text_once(
        self, tmp_path: Path, pg_store_url: str
    ) -> None:
        """Large tasks migrated from SQLite to PostgreSQL keep their digests, each text
        once, and re-sent commands recognised."""
        src_url = f"sqlite:///{tmp_path / 'src.db'}"
        key = _filled(src_url)
        src = nb.open_store(src_url)
        dst = nb.open_store(pg_store_url)
        try:
            nb.migrate(src, dst)
            _check_copy(src, dst, key)
        finally:
            src.close()
            dst.close()
