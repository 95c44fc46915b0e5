"""Fold snapshots hold no copy of a long text the session's events keep as a blob (a 1 MB
task is in the log once; the folds' snapshots name its blob instead of holding it again)."""

from __future__ import annotations

import random
import string
import zlib
from pathlib import Path

import orjson

import agentnb as nb
from agentnb.folds import ChatFolds, Folds, _decode, _encode

CHARS = 200_000


def _task(seed: int) -> str:
    rng = random.Random(seed)
    return "task: " + "".join(rng.choices(string.ascii_letters, k=CHARS))


def _runtime(path: Path) -> nb.Runtime:
    agent = nb.Agent(name="Echo", agent_id="echo", model=nb.ScriptedModel(lambda m: "done"))
    return nb.Runtime(agent, store=f"sqlite:///{path}")


class TestSnapshotParts:
    def test_a_long_task_is_named_not_copied(self, tmp_path: Path) -> None:
        """Both folds' snapshots of a session that ran two long tasks are far smaller than
        one task, and decode to exactly the folds they were taken from."""
        with _runtime(tmp_path / "db.sqlite") as rt:
            session = rt.session("s")
            for seed in (1, 2):
                session.run(_task(seed), timeout=30)
            store, key = rt.store, session.key
            state, inbox = Folds(store, key).refresh()
            data = {"state": state.dump(), "inbox": inbox.dump()}
            chat = ChatFolds(store, key)
            chat.refresh()
            for dump in (data, chat.chat.dump()):
                encoded = _encode(dump, store, key)
                assert len(encoded) < CHARS // 10
                assert _decode(encoded, store) == _decode(zlib.compress(_plain(dump), 1), store)

    def test_a_text_no_event_keeps_stays_in_the_snapshot(self, tmp_path: Path) -> None:
        """A long text that is not one of the session's blobs is kept whole: a snapshot
        never names a blob the session's deletion would not free."""
        with _runtime(tmp_path / "db.sqlite") as rt:
            session = rt.session("s")
            session.run("short", timeout=30)
            data = {"note": _task(3)}
            encoded = _encode(data, rt.store, session.key)
            assert len(zlib.decompress(encoded)) > CHARS
            assert _decode(encoded, rt.store) == data

    def test_a_reopened_session_reads_the_same_from_its_snapshots(self, tmp_path: Path) -> None:
        """A new runtime that starts from the parted snapshots shows the same transcript and
        tasks as the one that ran the turns."""
        path = tmp_path / "db.sqlite"
        with _runtime(path) as rt:
            session = rt.session("s")
            for seed in (4, 5):
                session.run(_task(seed), timeout=30)
            folds = Folds(rt.store, session.key)
            folds.refresh()
            folds.put_snapshots(folds.due_snapshots(every=1))
            seq = folds.state.seq
            before = (session.transcript().messages, [t.status for t in session.tasks()])
        with _runtime(path) as again:
            started = Folds(again.store, session.key)
            started.refresh()
            assert started.restored_from == seq  # from the parted snapshot, not the log
            reopened = again.open("s")
            after = (reopened.transcript().messages, [t.status for t in reopened.tasks()])
        assert after == before


def _plain(dump: dict[str, object]) -> bytes:
    return orjson.dumps(dump, option=orjson.OPT_NON_STR_KEYS)
