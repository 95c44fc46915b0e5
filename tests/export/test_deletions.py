"""Deleted sessions leave the exports: tombstones reach both sinks, at least once, safely."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq
import pytest

import agentnb as nb
from agentnb import analysis
from agentnb.events import Event
from agentnb.export import DuckDBSink, Exporter, LiveExporter, ParquetSink
from agentnb.export.duckdb import open_duckdb
from agentnb.ids import SessionKey
from tests.export.conftest import ALICE, BOB, Known

CHILD = Path(__file__).with_name("_export_child.py")
ROOT = Path(__file__).resolve().parents[2]
KEY = SessionKey("n", "u", "a", "kept")
GONE = SessionKey("n", "u", "a", "gone")
VIEWS = ("events", "turns", "runs", "steps", "model_calls", "tool_calls", "interactions")
"""The views the known session has rows in for both of its sessions."""


def _copy_store(known: Known, tmp_path: Path) -> str:
    """A copy of the known session's store, for a test that deletes from it."""
    path = tmp_path / "store.sqlite"
    shutil.copy(known.path, path)
    return f"sqlite:///{path}"


def _sink(kind: str, tmp_path: Path) -> Any:
    return ParquetSink(tmp_path / "pq") if kind == "parquet" else DuckDBSink(tmp_path / "x.duckdb")


def _source(kind: str, tmp_path: Path) -> str:
    return str(tmp_path / "pq") if kind == "parquet" else str(tmp_path / "x.duckdb")


def _frames(source: str, session_id: str) -> dict[str, pd.DataFrame]:
    """Each view's rows of one session, in a stable order."""
    out = {}
    for view in VIEWS:
        frame = getattr(analysis, view)(source)
        mine = frame[frame["session_id"] == session_id]
        out[view] = mine.sort_values(list(mine.columns[:6])).reset_index(drop=True)
    return out


def _tick(store: nb.SessionStore, key: SessionKey, n: int) -> list[Event]:
    store.create_session(key)
    head = store.head(key)
    events = [Event.create("acme/tick", {"n": head + i, "who": key.session_id}) for i in range(n)]
    return store.append(key, events, expected_seq=head, batch_id=f"t{head}")


def _rows_on_disk(root: Path, session_id: str) -> int:
    """Rows of ``session_id`` in every Parquet file under root, listed or not."""
    return sum(
        pq.read_table(path, columns=["session_id"])["session_id"].to_pylist().count(session_id)
        for path in root.rglob("*.parquet")
    )


def _duckdb_rows(path: Path, session_id: str) -> dict[str, int]:
    con = open_duckdb(str(path), read_only=True)
    try:
        return {
            table: con.execute(
                f"SELECT count(*) FROM {table} WHERE session_id = ?", [session_id]
            ).fetchone()[0]  # type: ignore[index]
            for table in ("raw_events", "turn_rollups", "deleted_sessions")
        }
    finally:
        con.close()


class TestDeletedSessionsLeaveTheExports:
    @pytest.mark.parametrize(("kind", "batch_size"), [("parquet", 50_000), ("parquet", 5),
                                                      ("duckdb", 50_000)])  # fmt: skip
    def test_a_deleted_sessions_rows_leave_every_view_and_the_others_stay(
        self, known_session: Known, tmp_path: Path, kind: str, batch_size: int
    ) -> None:
        """After a session is deleted and the store drained again, no view of the export
        shows a row of it, and every view shows the other session's rows as before (with
        batches of 5, its turns span many data and rollup files)."""
        store = nb.open_store(_copy_store(known_session, tmp_path))
        try:
            sink = _sink(kind, tmp_path)
            Exporter(store, sink, batch_size=batch_size).drain()
            source = _source(kind, tmp_path)
            kept = _frames(source, ALICE.session_id)
            gone = _frames(source, BOB.session_id)
            assert all(len(gone[v]) for v in ("events", "turns", "runs", "model_calls")), gone
            tombstone = store.delete_session(BOB, by="ops", reason="erasure request 7")
            assert Exporter(store, sink).drain() == 0
            assert store.tombstone_watermark(sink.name) == tombstone.seq
        finally:
            store.close()
        after = _frames(source, ALICE.session_id)
        for view in VIEWS:
            assert _frames(source, BOB.session_id)[view].empty, view
            pd.testing.assert_frame_equal(after[view], kept[view], obj=view)
        if kind == "parquet":
            assert _rows_on_disk(tmp_path / "pq", BOB.session_id) == 0
            assert sink.position(BOB) == 0
            assert sink.position(ALICE) == known_session.head[ALICE]
        else:
            assert _duckdb_rows(tmp_path / "x.duckdb", BOB.session_id) == {
                "raw_events": 0,
                "turn_rollups": 0,
                "deleted_sessions": 1,
            }

    @pytest.mark.parametrize("kind", ["parquet", "duckdb"])
    def test_applying_a_tombstone_again_changes_nothing(self, tmp_path: Path, kind: str) -> None:
        """A re-run (drain again, or the same tombstones handed to forget again, as after a
        crash before the watermark moved) rewrites nothing and keeps the other rows."""
        store = nb.MemoryStore()
        _tick(store, KEY, 10)
        _tick(store, GONE, 10)
        sink = _sink(kind, tmp_path)
        Exporter(store, sink).drain()
        store.delete_session(GONE, by="ops")
        Exporter(store, sink).drain()
        before = _snapshot(kind, tmp_path)
        assert Exporter(store, sink).drain() == 0
        sink.forget(store.tombstones())
        assert _snapshot(kind, tmp_path) == before
        rows = analysis.events(_source(kind, tmp_path))
        assert sorted(rows["session_id"]) == ["kept"] * 10

    @pytest.mark.parametrize("kind", ["parquet", "duckdb"])
    def test_a_tombstone_of_a_session_never_exported_is_harmless(
        self, tmp_path: Path, kind: str
    ) -> None:
        """Deleting a session before it was ever exported: the drain delivers the other
        sessions and the tombstone, and the sink only remembers the key."""
        store = nb.MemoryStore()
        _tick(store, KEY, 5)
        _tick(store, GONE, 5)
        store.delete_session(GONE, by="ops")
        sink = _sink(kind, tmp_path)
        assert Exporter(store, sink).drain() == 5
        assert store.tombstone_watermark(sink.name) == 1
        rows = analysis.events(_source(kind, tmp_path))
        assert sorted(rows["session_id"]) == ["kept"] * 5
        assert sink.position(GONE) == 0

    @pytest.mark.parametrize("kind", ["parquet", "duckdb"])
    def test_events_read_before_the_delete_do_not_come_back(
        self, tmp_path: Path, kind: str
    ) -> None:
        """Events of a session an exporter read before its delete, accepted after the sink
        forgot it (two exporters racing), are dropped."""
        store = nb.MemoryStore()
        _tick(store, KEY, 3)
        stale = _tick(store, GONE, 4)
        sink = _sink(kind, tmp_path)
        store.delete_session(GONE, by="ops")
        Exporter(store, sink).drain()
        sink.accept({GONE: stale, KEY: store.read_after(KEY, 0, 10)})
        rows = analysis.events(_source(kind, tmp_path))
        assert sorted(rows["session_id"]) == ["kept"] * 3

    def test_a_drain_of_named_sessions_skips_one_deleted_meanwhile(self, tmp_path: Path) -> None:
        """An exporter given keys (as a runtime's live exporter is) whose session was deleted
        since delivers the others and that session's tombstone, without an error; its lag
        counts only live sessions."""
        store = nb.MemoryStore()
        _tick(store, KEY, 3)
        _tick(store, GONE, 3)
        sink = ParquetSink(tmp_path / "pq")
        exporter = Exporter(store, sink, keys=[KEY, GONE])
        store.delete_session(GONE, by="ops")
        assert exporter.lag() == 3
        assert exporter.tombstone_lag() == 1
        assert exporter.drain() == 3
        assert (exporter.lag(), exporter.tombstone_lag()) == (0, 0)
        assert store.tombstone_watermark(sink.name) == 1

    def test_a_sink_without_forget_is_warned_about_and_keeps_its_watermark(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A sink of its own without forget(): drains go on, a warning names it once, and
        its tombstone watermark stays (nothing was applied)."""
        store = nb.MemoryStore()
        _tick(store, KEY, 2)
        _tick(store, GONE, 2)
        store.delete_session(GONE, by="ops")

        class Plain:
            name = "plain-sink-without-forget"

            def accept(self, events: Any) -> None:
                pass

        with caplog.at_level(logging.WARNING, logger="agentnb.export"):
            assert Exporter(store, Plain()).drain() == 2
            _tick(store, KEY, 1)
            assert Exporter(store, Plain()).drain() == 1
        warned = [r for r in caplog.records if "plain-sink-without-forget" in r.getMessage()]
        assert len(warned) == 1
        assert store.tombstone_watermark(Plain.name) == 0

    def test_the_live_exporter_applies_a_delete_and_flush_waits_for_it(
        self, tmp_path: Path
    ) -> None:
        """A LiveExporter over two sessions, one of which is deleted: flush() returns once
        the sink has forgotten it, and status() shows no tombstone pending."""
        store = nb.MemoryStore()
        _tick(store, KEY, 4)
        _tick(store, GONE, 4)
        sink = ParquetSink(tmp_path / "pq")
        with LiveExporter(store, [sink], keys=lambda: [KEY, GONE]) as live:
            assert live.flush(30)
            store.delete_session(GONE, by="ops")
            live.notify()
            assert live.flush(30)
            (status,) = live.status()
            assert (status.lag, status.tombstones, status.last_error) == (0, 0, None)
        assert sorted(analysis.events(str(tmp_path / "pq"))["session_id"]) == ["kept"] * 4


def _snapshot(kind: str, tmp_path: Path) -> Any:
    """What a sink holds on disk: Parquet file names, or the DuckDB rows."""
    if kind == "parquet":
        root = tmp_path / "pq"
        return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    con = open_duckdb(str(tmp_path / "x.duckdb"), read_only=True)
    try:
        return [
            con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall()
            for t in ("raw_events", "turn_rollups", "deleted_sessions")
        ]
    finally:
        con.close()


class TestCrashSafety:
    def test_kill_9_mid_rewrite_keeps_the_previous_manifest_then_a_rerun_finishes(
        self, known_session: Known, tmp_path: Path
    ) -> None:
        """kill -9 after a deletion's rewritten files were renamed in, before its manifest
        record: readers see the export as before the delete, the tombstone watermark has not
        moved, and the next drain removes the session's rows from every view and every file
        on disk (the killed commit's copies included), leaving the other session as it was."""
        url = _copy_store(known_session, tmp_path)
        root = tmp_path / "pq"
        store = nb.open_store(url)
        try:
            # Batches of 4 events: some file then holds rows of both sessions, so the deletion
            # rewrites it (a file of the deleted session's rows alone is only dropped).
            Exporter(store, ParquetSink(root), batch_size=4).drain()
            before = {s: _frames(str(root), s) for s in (ALICE.session_id, BOB.session_id)}
            files = ParquetSink(root).files()
            store.delete_session(BOB, by="ops", reason="erasure")
        finally:
            store.close()
        marker = tmp_path / "marker"
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        child = subprocess.Popen(
            [sys.executable, str(CHILD), url, "parquet", str(root), str(marker), "mid-forget"],
            env=env,
        )
        try:
            deadline = time.monotonic() + 60
            while not marker.exists():
                assert child.poll() is None, "the child died before its rewrite"
                assert time.monotonic() < deadline, "the child never reached its rewrite"
                time.sleep(0.02)
            os.kill(child.pid, signal.SIGKILL)
            child.wait(10)
        finally:
            if child.poll() is None:
                child.kill()
        assert ParquetSink(root).files() == files
        for session_id, frames in before.items():
            for view, frame in _frames(str(root), session_id).items():
                pd.testing.assert_frame_equal(frame, frames[view], obj=view)
        store = nb.open_store(url)
        try:
            sink = ParquetSink(root)
            assert store.tombstone_watermark(sink.name) == 0
            assert Exporter(store, sink).drain() == 0
            assert store.tombstone_watermark(sink.name) == 1
        finally:
            store.close()
        for view, frame in _frames(str(root), BOB.session_id).items():
            assert frame.empty, view
        for view, frame in _frames(str(root), ALICE.session_id).items():
            pd.testing.assert_frame_equal(frame, before[ALICE.session_id][view], obj=view)
        assert _rows_on_disk(root, BOB.session_id) == 0
        assert not list((root / "_staging").glob("*"))
