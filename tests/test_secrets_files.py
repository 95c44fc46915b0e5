"""Secrets and files, end to end: a snapshot row altered in the store file is ignored."""

from __future__ import annotations

import json
import sqlite3
import zlib
from pathlib import Path

import agentnb as nb
from agentnb.folds import Folds

WAIT = 20.0  # seconds: a failure guard only


def _runtime(path: Path, replies: list[str]) -> nb.Runtime:
    agent = nb.Agent(
        name="Snap", agent_id="snap", model=nb.ScriptedModel(replies), instructions="Be brief."
    )
    return nb.Runtime(agent, store=f"sqlite:///{path}")


def _tamper(path: Path, old: str, new: str) -> None:
    """Rewrite the text inside the session-folds snapshot row as someone with the file could:
    the stored bytes before the compressed JSON (any header) are kept as they were."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        (stored,) = conn.execute("SELECT data FROM snapshots WHERE name='session-folds'").fetchone()
        stored = bytes(stored)
        start = stored.index(b"\x78\x01")  # where the zlib stream starts
        state = json.loads(zlib.decompress(stored[start:]))
        text = json.dumps(state).replace(old, new)
        assert text != json.dumps(state)
        altered = stored[:start] + zlib.compress(text.encode(), 1)
        conn.execute("UPDATE snapshots SET data=? WHERE name='session-folds'", (altered,))
    finally:
        conn.close()


class TestSnapshotSeal:
    def test_altered_snapshot_row_changes_neither_transcript_nor_next_context(
        self, tmp_path: Path
    ) -> None:
        """A session-folds snapshot edited in the file is ignored: transcript() and the
        context of the next model call are what the log says."""
        path = tmp_path / "agentnb.sqlite"
        with _runtime(path, ["The answer is 42."]) as runtime:
            session = runtime.session("s", user_id="u")
            assert session.run("What is the answer?").status == "completed"
            folds = Folds(runtime.store, session.key)
            folds.refresh()
            folds.put_snapshots(folds.due_snapshots(every=1))
        _tamper(path, "The answer is 42.", "The answer is EVIL.")
        model = nb.ScriptedModel(["ok"])
        agent = nb.Agent(name="Snap", agent_id="snap", model=model, instructions="Be brief.")
        with nb.Runtime(agent, store=f"sqlite:///{path}") as runtime:
            session = runtime.open("s", user_id="u")
            texts = [m.text for m in session.transcript().messages]
            assert "The answer is 42." in texts
            assert not any("EVIL" in (t or "") for t in texts)
            assert session.run("And now?", timeout=WAIT).status == "completed"
        seen = [m.text or "" for m in model.requests[0]]
        assert "The answer is 42." in seen
        assert not any("EVIL" in t for t in seen)
