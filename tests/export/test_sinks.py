"""Exporter, ParquetSink and DuckDBSink: at-least-once delivery, exactly-once contents."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

import agentnb as nb
from agentnb.events import Event
from agentnb.export import DuckDBSink, Exporter, ParquetSink, SinkMismatch, open_sink
from agentnb.export.duckdb import open_duckdb
from agentnb.ids import SessionKey
from tests.export.conftest import ALICE, BOB, Known

CHILD = Path(__file__).with_name("_export_child.py")
ROOT = Path(__file__).resolve().parents[2]
KEY = SessionKey("n", "u", "a", "s")


def _store_with(
    events: int, key: SessionKey = KEY, start: datetime | None = None
) -> nb.MemoryStore:
    store = nb.MemoryStore()
    store.create_session(key)
    _append(store, key, events, start)
    return store


def _append(store: nb.SessionStore, key: SessionKey, n: int, start: datetime | None = None) -> None:
    head = store.head(key)
    batch = [
        Event.create(
            "acme/tick",
            {"n": head + i},
            occurred_at=(start + timedelta(seconds=i)) if start else None,
        )
        for i in range(n)
    ]
    store.append(key, batch, expected_seq=head, batch_id=f"b{head}")


def _parquet_rows(root: Path) -> list[tuple[str, int]]:
    """Every row of every data file under root (a raw glob: no dedup, no manifest)."""
    rows = []
    for path in sorted((root / "events").glob("*/*.parquet")):
        table = pq.read_table(path, columns=["event_id", "seq"])
        rows += list(zip(table["event_id"].to_pylist(), table["seq"].to_pylist(), strict=True))
    return rows


def _duckdb_rows(path: Path) -> list[tuple[str, int]]:
    con = open_duckdb(str(path), read_only=True)
    try:
        return [
            (r[0], r[1]) for r in con.execute("SELECT event_id, seq FROM raw_events").fetchall()
        ]
    finally:
        con.close()


def _sink(kind: str, tmp_path: Path, **kw: Any) -> Any:
    if kind == "parquet":
        return ParquetSink(tmp_path / "pq", **kw)
    return DuckDBSink(tmp_path / "x.duckdb", **kw)


def _rows(kind: str, tmp_path: Path) -> list[tuple[str, int]]:
    if kind == "parquet":
        return _parquet_rows(tmp_path / "pq")
    return _duckdb_rows(tmp_path / "x.duckdb")


class TestExporter:
    @pytest.mark.parametrize("kind", ["parquet", "duckdb"])
    def test_drain_delivers_everything_once_and_resumes(self, kind: str, tmp_path: Path) -> None:
        """drain() returns the events delivered; a second drain delivers only new ones."""
        store = _store_with(30)
        sink = _sink(kind, tmp_path)
        assert Exporter(store, sink, batch_size=7).drain() == 30
        assert Exporter(store, sink).drain() == 0
        _append(store, KEY, 5)
        assert Exporter(nb.SessionLog(store, KEY), sink).drain() == 5
        rows = _rows(kind, tmp_path)
        assert sorted(s for _, s in rows) == list(range(1, 36))
        assert store.watermark(KEY, sink.name) == 35

    def test_drain_of_a_store_covers_every_session(
        self, known_session: Known, tmp_path: Path
    ) -> None:
        """Draining a store exports all its sessions; a SessionLog only its own."""
        store = known_session.store()
        try:
            one = ParquetSink(tmp_path / "one")
            assert Exporter(nb.SessionLog(store, BOB), one).drain() == known_session.head[BOB]
            every = ParquetSink(tmp_path / "all")
            assert Exporter(store, every).drain() == sum(known_session.head.values())
            assert every.position(ALICE) == known_session.head[ALICE]
        finally:
            store.close()

    def test_duplicates_handed_to_a_sink_are_harmless(self, tmp_path: Path) -> None:
        """accept() of the same events twice leaves each event once in both sinks."""
        store = _store_with(10)
        events = list(store.scan(KEY))
        for kind in ("parquet", "duckdb"):
            sink = _sink(kind, tmp_path)
            sink.accept({KEY: events[:6]})
            sink.accept({KEY: events})
            sink.accept({KEY: events})
            assert sorted(s for _, s in _rows(kind, tmp_path)) == list(range(1, 11)), kind

    def test_progress_bar_for_long_drains(self, tmp_path: Path, capsys: Any) -> None:
        """progress=True shows a tqdm bar naming the sink on stderr."""
        store = _store_with(50)
        Exporter(store, ParquetSink(tmp_path / "pq"), progress=True, batch_size=10).drain()
        assert "export to parquet:" in capsys.readouterr().err

    @pytest.mark.parametrize("url", ["memory", "sqlite"])
    def test_a_sink_of_its_own_receives_event_rows(self, url: str, tmp_path: Path) -> None:
        """A sink that iterates its batch gets RawEvent rows (seq order, payload JSON text),
        whichever store it drains: what read_raw returns."""
        store = nb.open_store("memory:" if url == "memory" else f"sqlite:///{tmp_path}/s.db")
        store.create_session(KEY)
        _append(store, KEY, 25)

        class Rows:
            name = "rows"

            def __init__(self) -> None:
                self.got: list[Any] = []

            def accept(self, events: Any) -> None:
                for key, group in events.items():
                    assert key == KEY
                    assert len(group) == len(list(group))
                    assert group[-1] == list(group)[-1]
                    self.got += list(group)

        sink = Rows()
        assert Exporter(store, sink, batch_size=10).drain() == 25
        assert sink.got == store.read_raw(KEY, 0, 100)
        assert [r.to_event() for r in sink.got] == store.read_after(KEY, 0, 100)
        store.close()

    def test_a_damaged_row_stops_the_drain_after_what_precedes_it(self, tmp_path: Path) -> None:
        """Batches are read ahead on a helper thread: a damaged row raises Corrupt from drain
        in order, after the batches before it were delivered, and the helper is gone."""
        import sqlite3

        path = tmp_path / "s.sqlite"
        store = nb.open_store(f"sqlite:///{path}")
        store.create_session(KEY)
        _append(store, KEY, 30)
        raw = sqlite3.connect(path, isolation_level=None)
        raw.execute("UPDATE events SET payload = replace(payload, '24', '99') WHERE seq = 25")
        raw.close()
        sink = ParquetSink(tmp_path / "pq")
        with pytest.raises(nb.Corrupt, match="seq 25"):
            Exporter(store, sink, batch_size=10).drain()
        assert store.watermark(KEY, sink.name) == 20
        assert sink.position(KEY) == 20
        assert not [t for t in threading.enumerate() if t.name == "agentnb-export-read"]
        store.close()

    def test_a_failing_accept_moves_no_watermark(self, tmp_path: Path) -> None:
        """When accept raises, the watermark stays and the next drain delivers the events."""
        store = _store_with(10)

        class Broken:
            name = "broken"

            def accept(self, events: Any) -> None:
                raise OSError("disk full")

        with pytest.raises(OSError, match="disk full"):
            Exporter(store, Broken(), batch_size=3).drain()
        assert store.watermark(KEY, "broken") == 0
        assert not [t for t in threading.enumerate() if t.name == "agentnb-export-read"]


def _kill_child_at_marker(tmp_path: Path, url: str, kind: str, dest: Path, mode: str) -> None:
    """Run ``_export_child.py`` in ``mode``; kill -9 it once it writes its marker file."""
    marker = tmp_path / "marker"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(
        [sys.executable, str(CHILD), url, kind, str(dest), str(marker), mode], env=env
    )
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert child.poll() is None, f"the child died before its {mode} point"
            assert time.monotonic() < deadline, f"the child never reached its {mode} point"
            time.sleep(0.02)
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()


class TestCrashSafety:
    @pytest.mark.parametrize("kind", ["parquet", "duckdb"])
    def test_kill_between_accept_and_watermark_then_drain_again(
        self, kind: str, tmp_path: Path
    ) -> None:
        """kill -9 after accept, before the watermark: the next drain leaves each event once."""
        url = f"sqlite:///{tmp_path / 'store.sqlite'}"
        store = nb.open_store(url)
        store.create_session(KEY)
        _append(store, KEY, 120)
        dest = tmp_path / ("pq" if kind == "parquet" else "x.duckdb")
        _kill_child_at_marker(tmp_path, url, kind, dest, "after-accept")
        assert store.watermark(KEY, _sink(kind, tmp_path).name) == 0  # accepted, not recorded
        assert Exporter(store, _sink(kind, tmp_path)).drain() == 70
        rows = _rows(kind, tmp_path)
        assert len(rows) == 120
        assert sorted(s for _, s in rows) == list(range(1, 121))
        store.close()

    def test_kill_between_rollup_rename_and_manifest_then_drain_again(
        self, known_session: Known, tmp_path: Path
    ) -> None:
        """kill -9 after a commit's data and rollup files were renamed in, before its
        manifest record: readers ignore those files, the next drain delivers the batch
        again, and the turns equal the turns rolled up from the events."""
        from agentnb import analysis

        root = tmp_path / "pq"
        _kill_child_at_marker(tmp_path, known_session.url, "parquet", root, "mid-commit")
        listed = {p.removeprefix(f"{root}/") for p in ParquetSink(root).files()}
        on_disk = {str(p.relative_to(root)) for p in root.glob("events/*/*.parquet")}
        assert len(on_disk - listed) == 1  # the killed commit's data file
        store = known_session.store()
        try:
            assert Exporter(store, ParquetSink(root)).drain() > 0
            expected = analysis.turns(store)
            n_events = sum(store.head(k) for k in (ALICE, BOB))
        finally:
            store.close()
        assert analysis.turns(root).equals(expected)
        assert len(analysis.events(root)) == n_events

    def test_a_concurrent_reader_never_sees_a_partial_file(self, tmp_path: Path) -> None:
        """While another process writes batches, every data file a reader finds reads whole."""
        root = tmp_path / "pq"
        ParquetSink(root)
        marker = tmp_path / "marker"
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        child = subprocess.Popen(
            [sys.executable, str(CHILD), "memory://", "parquet", str(root), str(marker),
             "writer", "40"],
            env=env,
        )  # fmt: skip
        reads = 0
        try:
            while child.poll() is None or reads == 0:
                for path in (root / "events").glob("*/*.parquet"):
                    try:
                        table = pq.read_table(path)
                    except FileNotFoundError:
                        continue
                    assert table.num_rows == 200
                    reads += 1
                if child.poll() is not None and reads == 0 and not marker.exists():
                    break
        finally:
            if child.poll() is None:
                child.kill()
        assert child.wait(30) == 0
        assert reads > 0
        assert len(_parquet_rows(root)) == 40 * 200


class TestParquetSink:
    def test_files_are_hive_partitioned_by_utc_date_with_a_manifest(self, tmp_path: Path) -> None:
        """Events of two UTC days land in two event_date= folders, listed by the manifest."""
        start = datetime(2026, 3, 1, 23, 59, 58, tzinfo=UTC)
        store = _store_with(4, start=start)
        sink = ParquetSink(tmp_path / "pq")
        Exporter(store, sink).drain()
        folders = sorted(p.name for p in (tmp_path / "pq" / "events").iterdir())
        assert folders == ["event_date=2026-03-01", "event_date=2026-03-02"]
        assert len(sink.files()) == 2
        assert len(list((tmp_path / "pq" / "_manifest").glob("*.json"))) == 1
        assert not list((tmp_path / "pq" / "_staging").glob("*"))

    def test_typed_columns_and_payload_json(self, tmp_path: Path) -> None:
        """Files hold typed envelope, key and payload columns plus the payload as JSON."""
        store = nb.MemoryStore()
        store.create_session(KEY)
        store.append(
            KEY,
            [Event.create("model/end", {"model_call_id": "mc_1", "status": "completed",
                                        "model": "m", "input_tokens": 7, "output_tokens": 3,
                                        "latency_ms": 1.5}, turn_id="turn_1", run_id="run_1")],
            expected_seq=0,
            batch_id="b",
        )  # fmt: skip
        sink = ParquetSink(tmp_path / "pq")
        Exporter(store, sink).drain()
        table = pq.read_table(sink.files()[0])
        row = table.to_pylist()[0]
        assert (row["session_id"], row["user_id"], row["seq"], row["type"]) == (
            "s",
            "u",
            1,
            "model/end",
        )
        assert (row["input_tokens"], row["output_tokens"], row["latency_ms"]) == (7, 3, 1.5)
        assert str(table.schema.field("occurred_at").type) == "timestamp[us, tz=UTC]"
        assert '"input_tokens":7' in row["payload"]

    def test_compact_merges_closed_partitions_and_drops_duplicates(self, tmp_path: Path) -> None:
        """compact() leaves one file per closed day holding each event once, orphans included."""
        start = datetime(2026, 3, 1, 10, tzinfo=UTC)
        store = _store_with(30, start=start)
        sink = ParquetSink(tmp_path / "pq")
        Exporter(store, sink, batch_size=10).drain()
        # a crash after the rename, before the manifest: a file the manifest does not know,
        # named by its commit's batch, whose staging folder is still there
        day = tmp_path / "pq" / "events" / "event_date=2026-03-01"
        orphan = sorted(day.glob("*.parquet"))[0]
        batch = "batch_" + "0" * 31 + "1"
        (day / f"part-{batch}.parquet").write_bytes(orphan.read_bytes())
        (tmp_path / "pq" / "_staging" / batch).mkdir(parents=True)
        assert len(_parquet_rows(tmp_path / "pq")) == 40
        assert sink.compact() == 4
        assert len(list(day.glob("*.parquet"))) == 1
        rows = _parquet_rows(tmp_path / "pq")
        assert sorted(s for _, s in rows) == list(range(1, 31))
        assert len(ParquetSink(tmp_path / "pq").files()) == 1
        assert Exporter(store, sink).drain() == 0

    def test_compact_leaves_files_it_did_not_write(self, tmp_path: Path) -> None:
        """A Parquet file someone else put in the export (no manifest record, no staging
        folder of a crashed commit) survives compact(), in a closed partition and in
        turn_parts."""
        start = datetime(2026, 3, 1, 10, tzinfo=UTC)
        sink = ParquetSink(tmp_path / "pq")
        Exporter(_store_with(30, start=start), sink, batch_size=10).drain()
        day = tmp_path / "pq" / "events" / "event_date=2026-03-01"
        theirs = [day / "part-theirs.parquet", day / "notes.parquet"]
        theirs.append(tmp_path / "pq" / "turn_parts" / "part-batch_0123abcd.parquet")
        theirs[-1].parent.mkdir(exist_ok=True)
        for path in theirs:
            path.write_bytes(b"not ours")
        assert sink.compact() == 3  # the three listed files merged, nothing else touched
        assert all(path.read_bytes() == b"not ours" for path in theirs)

    def test_compact_deletes_what_a_killed_commit_left(
        self, known_session: Known, tmp_path: Path
    ) -> None:
        """kill -9 after a commit renamed files in, before its manifest record: compact()
        deletes those files and the commit's staging folder, and no listed file."""
        root = tmp_path / "pq"
        _kill_child_at_marker(tmp_path, known_session.url, "parquet", root, "mid-commit")
        sink = ParquetSink(root)
        listed = set(sink.files()) | set(sink.turn_part_files() or [])
        on_disk = {str(p) for p in root.glob("**/*.parquet") if "_staging" not in p.parts}
        left = on_disk - listed
        assert left  # the killed commit's data and rollup files
        assert list((root / "_staging").iterdir())
        sink.compact(closed_before=date(2000, 1, 1))
        assert not any(os.path.exists(p) for p in left)
        assert all(os.path.exists(p) for p in listed)
        assert not list((root / "_staging").iterdir())

    def test_compact_leaves_open_partitions_alone(self, tmp_path: Path) -> None:
        """Today's partition (still open) is not compacted."""
        store = _store_with(20)
        sink = ParquetSink(tmp_path / "pq")
        Exporter(store, sink, batch_size=5).drain()
        assert sink.compact() == 0
        assert sink.compact(closed_before=date.today() + timedelta(days=2)) == 4

    @pytest.mark.parametrize("batch_size", [3, 7, 13])
    def test_commits_keep_one_rollup_row_per_turn(
        self, known_session: Known, tmp_path: Path, batch_size: int
    ) -> None:
        """Each commit adds the rollups of its turns, combined with what earlier commits
        held for them: one row per turn over a bounded number of files. Compaction deletes
        the replaced files and leaves the turns as they are."""
        from agentnb import analysis
        from agentnb.export.parquet import MAX_ROLLUP_FILES

        root = tmp_path / "pq"
        store = known_session.store()
        try:
            expected = analysis.turns(store)
            sink = ParquetSink(root)
            Exporter(store, sink, batch_size=batch_size).drain()
        finally:
            store.close()
        parts = sink.turn_part_files()
        assert parts is not None
        assert 1 <= len(parts) <= MAX_ROLLUP_FILES
        turn_ids = [t for p in parts for t in pq.read_table(p)["turn_id"].to_pylist()]
        assert sorted(turn_ids) == sorted(expected["turn_id"])
        assert analysis.turns(root).equals(expected)
        on_disk = list((root / "turn_parts").glob("*.parquet"))
        assert len(on_disk) > len(parts)  # replaced files stay until compaction
        assert sink.compact(closed_before=date.today() + timedelta(days=2)) > 1
        assert len(sink.files()) == 1
        assert sorted(str(p) for p in (root / "turn_parts").glob("*.parquet")) == parts
        assert analysis.turns(root).equals(expected)

    def test_replaced_rollup_files_are_deleted_once_readers_are_done(
        self, known_session: Known, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A rollup file a commit replaced is deleted by a later commit once it has been
        retired for RETIRED_KEEP_S (here 0): on disk are only the files the manifest lists."""
        from agentnb.export import parquet

        monkeypatch.setattr(parquet, "RETIRED_KEEP_S", 0.0)
        root = tmp_path / "pq"
        store = known_session.store()
        try:
            sink = ParquetSink(root)
            Exporter(store, sink, batch_size=11).drain()
        finally:
            store.close()
        on_disk = sorted(str(p) for p in (root / "turn_parts").glob("*.parquet"))
        assert on_disk == sink.turn_part_files()

    def test_rollup_files_stay_few_and_a_file_with_most_turns_is_left_alone(
        self, tmp_path: Path
    ) -> None:
        """Many small commits after a large one: the small rollup files are merged, the file
        holding most turns is never rewritten, and every turn keeps exactly one row."""
        from agentnb import analysis
        from agentnb.export.parquet import MAX_ROLLUP_FILES

        store = nb.MemoryStore()
        store.create_session(KEY)

        def turns(first: int, n: int) -> None:
            head = store.head(KEY)
            events = []
            for i in range(first, first + n):
                turn = f"turn_{i:05d}"
                events += [
                    Event.create("turn/start", {"input": f"t{i}", "command_id": f"c{i}"},
                                 turn_id=turn),
                    Event.create("turn/completed", {}, turn_id=turn),
                ]  # fmt: skip
            store.append(KEY, events, expected_seq=head, batch_id=f"b{head}")

        sink = ParquetSink(tmp_path / "pq")
        turns(0, 200)
        Exporter(store, sink).drain()
        (big,) = sink.turn_part_files() or []
        for i in range(3 * MAX_ROLLUP_FILES):
            turns(200 + i, 1)
            Exporter(store, sink).drain()
        parts = sink.turn_part_files() or []
        assert big in parts
        assert len(parts) <= MAX_ROLLUP_FILES
        frame = analysis.turns(tmp_path / "pq")
        assert len(frame) == frame["turn_id"].nunique() == 200 + 3 * MAX_ROLLUP_FILES
        assert set(frame["status"]) == {"completed"}

    def test_an_export_without_rollups_rolls_turns_up_from_events(
        self, known_session: Known, tmp_path: Path
    ) -> None:
        """A data file without its rollup (an export of an older agentnb) makes readers roll
        the turns up from the events instead: the same turns."""
        from agentnb import analysis

        root = tmp_path / "pq"
        store = known_session.store()
        try:
            expected = analysis.turns(store)
            Exporter(store, ParquetSink(root), batch_size=50).drain()
        finally:
            store.close()
        path = sorted((root / "_manifest").glob("*.json"))[0]
        record = json.loads(path.read_text())
        record["version"] = 1
        record["added"] = [a for a in record["added"] if not a.startswith("turn_parts/")]
        path.write_text(json.dumps(record))
        assert ParquetSink(root).turn_part_files() is None
        assert analysis.turns(root).equals(expected)

    def test_parquet_sql_reads_only_what_the_manifest_lists(
        self, known_session: Known, tmp_path: Path
    ) -> None:
        """The CLI's parquet.sql ignores files a crash left outside the manifest (data and
        rollup alike) and rollups later commits replaced, with or without a slash after the
        root."""
        from agentnb.export.columns import connect
        from agentnb.export.sql import exporters_dir, schema_sql

        root = tmp_path / "pq"
        store = known_session.store()
        try:
            Exporter(store, ParquetSink(root), batch_size=20).drain()
            n_events = sum(store.head(k) for k in (ALICE, BOB))
        finally:
            store.close()
        for pattern in ("events/*/*.parquet", "turn_parts/*.parquet"):
            first = sorted(root.glob(pattern))[0]
            (first.parent / "part-orphan.parquet").write_bytes(first.read_bytes())
        for text in (str(root), f"{root}/"):
            con = connect()
            try:
                con.execute("SET VARIABLE parquet_root = ?", [text])
                con.execute((exporters_dir() / "parquet.sql").read_text())
                con.execute(schema_sql())
                events = con.execute("SELECT count(*), count(DISTINCT event_id) FROM events")
                assert events.fetchone() == (n_events, n_events)
                turns = con.execute("SELECT count(*), count(DISTINCT turn_id) FROM turns")
                assert turns.fetchone() == (9, 9)
                runs = con.execute("SELECT sum(runs) FROM turns").fetchone()
                assert runs == con.execute("SELECT count(*) FROM runs").fetchone()
            finally:
                con.close()

    def test_a_pyarrow_filesystem_uri_works(self) -> None:
        """A mock:// pyarrow filesystem root gets the same dataset and manifest."""
        from agentnb import analysis

        store = _store_with(12)
        sink = ParquetSink("mock:///exports/agentnb")
        assert Exporter(store, sink).drain() == 12
        assert sink.position(KEY) == 12
        assert sink.read_arrow().num_rows == 12
        assert len(analysis.events(sink)) == 12

    def test_turn_rollups_on_a_pyarrow_filesystem(self, known_session: Known) -> None:
        """On a pyarrow filesystem (mock://) commits keep the rollups and turns read them."""
        from agentnb import analysis

        sink = ParquetSink("mock:///exports/turns")
        store = known_session.store()
        try:
            Exporter(store, sink, batch_size=13).drain()
            expected = analysis.turns(store)
        finally:
            store.close()
        assert sink.turn_part_files()
        assert analysis.turns(sink).equals(expected)

    def test_a_root_that_is_a_file_is_refused(self, tmp_path: Path) -> None:
        """ParquetSink(file) raises InvalidInput saying it is a file."""
        path = tmp_path / "f"
        path.write_text("x")
        with pytest.raises(nb.InvalidInput, match="is a file"):
            ParquetSink(path)


class TestOwnership:
    def test_a_folder_with_other_files_is_refused(self, tmp_path: Path) -> None:
        """A non-empty folder with no agentnb manifest raises InvalidInput and is left as it
        was."""
        root = tmp_path / "mine"
        root.mkdir()
        (root / "data.parquet").write_bytes(b"someone's")
        with pytest.raises(nb.InvalidInput, match="no agentnb manifest"):
            ParquetSink(root)
        assert sorted(p.name for p in root.iterdir()) == ["data.parquet"]

    def test_an_export_of_an_earlier_agentnb_is_taken_up(self, tmp_path: Path) -> None:
        """A folder with a _manifest but no marker (written before the marker existed) is
        still an export the sink writes to."""
        root = tmp_path / "pq"
        Exporter(_store_with(5), ParquetSink(root)).drain()
        (root / "_agentnb.json").unlink()
        sink = ParquetSink(root)
        assert sink.position(KEY) == 5
        assert (root / "_agentnb.json").is_file()

    def test_an_empty_folder_is_taken_up(self, tmp_path: Path) -> None:
        """An existing empty folder becomes an export (its marker is written first)."""
        root = tmp_path / "empty"
        root.mkdir()
        assert Exporter(_store_with(5), ParquetSink(root)).drain() == 5


class TestExportModes:
    def test_parquet_files_and_folders_are_owner_only(
        self, known_session: Known, tmp_path: Path
    ) -> None:
        """Every file a Parquet export writes is 0600 and every folder it makes 0700."""
        root = tmp_path / "exports" / "pq"
        store = known_session.store()
        try:
            Exporter(store, ParquetSink(root), batch_size=25).drain()
        finally:
            store.close()
        paths = [tmp_path / "exports", root, *root.rglob("*")]
        assert len(paths) > 10
        for path in paths:
            want = 0o700 if path.is_dir() else 0o600
            assert stat.S_IMODE(path.stat().st_mode) == want, path

    def test_duckdb_file_and_folder_are_owner_only(self, tmp_path: Path) -> None:
        """A new DuckDB export file is 0600 and the folder made for it 0700."""
        path = tmp_path / "exports" / "x.duckdb"
        Exporter(_store_with(5), DuckDBSink(path)).drain()
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        assert sorted(p.name for p in path.parent.iterdir()) == ["x.duckdb"]


class TestDuckDBSink:
    def test_the_file_is_closed_after_each_accept(self, tmp_path: Path) -> None:
        """After accept returns, another process can open the file for writing at once."""
        store = _store_with(5)
        sink = DuckDBSink(tmp_path / "x.duckdb")
        Exporter(store, sink).drain()
        code = (
            "import duckdb, sys; c = duckdb.connect(sys.argv[1]); "
            "print(c.execute('SELECT count(*) FROM raw_events').fetchone()[0])"
        )
        done = subprocess.run(
            [sys.executable, "-c", code, str(tmp_path / "x.duckdb")],
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        assert done.stdout.strip() == "5"

    def test_views_of_schema_sql_are_in_the_file(self, tmp_path: Path) -> None:
        """The export file has the analyst views next to raw_events."""
        Exporter(_store_with(3), DuckDBSink(tmp_path / "x.duckdb")).drain()
        con = open_duckdb(str(tmp_path / "x.duckdb"), read_only=True)
        try:
            names = {r[0] for r in con.execute("SELECT view_name FROM duckdb_views()").fetchall()}
        finally:
            con.close()
        assert {"events", "turns", "runs", "steps", "model_calls", "tool_calls",
                "interactions", "inputs"} <= names  # fmt: skip

    def test_each_accept_keeps_one_rollup_row_per_turn(
        self, known_session: Known, tmp_path: Path
    ) -> None:
        """Accepts in batches of 5 keep turn_rollups at one row per turn; re-delivered
        events change nothing; a file without the table (an older export) gets it from its
        events on the next accept. turns always equals the turns of the events."""
        from agentnb import analysis

        path = tmp_path / "x.duckdb"
        sink = DuckDBSink(path)

        class Again:  # delivers everything again: the sink holds it all already
            def __init__(self, name: str) -> None:
                self.name = name

            def accept(self, events: Any) -> None:
                sink.accept(events)

        def rollup_rows() -> tuple[int, int]:
            con = open_duckdb(str(path), read_only=True)
            try:
                row = con.execute("SELECT count(*), count(DISTINCT turn_id) FROM turn_rollups")
                return row.fetchone()  # type: ignore[return-value]
            finally:
                con.close()

        store = known_session.store()
        try:
            expected = analysis.turns(store)
            Exporter(store, sink, batch_size=5).drain()
            assert rollup_rows() == (len(expected), len(expected))
            assert analysis.turns(f"duckdb:{path}").equals(expected)
            Exporter(store, Again("again-1"), batch_size=7).drain()
            assert analysis.turns(f"duckdb:{path}").equals(expected)
            con = open_duckdb(str(path))
            con.execute("DROP TABLE turn_rollups")
            con.close()
            Exporter(store, Again("again-2"), batch_size=50).drain()
            assert rollup_rows() == (len(expected), len(expected))
            assert analysis.turns(f"duckdb:{path}").equals(expected)
        finally:
            store.close()

    def test_an_sqlite_file_is_refused_before_duckdb_opens_it(self, tmp_path: Path) -> None:
        """DuckDBSink and open_duckdb on an SQLite file (a store) raise InvalidInput; the
        file is left as it was."""
        path = tmp_path / "store.sqlite"
        nb.open_store(f"sqlite:///{path}").close()
        before = path.read_bytes()
        with pytest.raises(nb.InvalidInput, match="SQLite database"):
            DuckDBSink(path)
        with pytest.raises(nb.InvalidInput, match="SQLite database"):
            open_duckdb(str(path), read_only=True)
        assert path.read_bytes() == before

    def test_a_file_that_is_not_duckdb_is_refused(self, tmp_path: Path) -> None:
        """open_duckdb on a file of another kind raises Corrupt."""
        path = tmp_path / "notes.duckdb"
        path.write_text("not a database at all")
        with pytest.raises(nb.Corrupt, match="not a DuckDB database"):
            open_duckdb(str(path))

    def test_a_path_that_is_a_folder_is_refused(self, tmp_path: Path) -> None:
        """DuckDBSink(folder) raises InvalidInput."""
        with pytest.raises(nb.InvalidInput, match="is a folder"):
            DuckDBSink(tmp_path)


class TestSinkNames:
    def test_a_name_reused_for_another_destination_is_refused(self, tmp_path: Path) -> None:
        """Draining with a name whose watermark the destination does not back raises."""
        store = _store_with(10)
        Exporter(store, ParquetSink(tmp_path / "a", name="analytics")).drain()
        with pytest.raises(SinkMismatch, match="used by another destination"):
            Exporter(store, ParquetSink(tmp_path / "b", name="analytics")).drain()
        with pytest.raises(SinkMismatch):
            Exporter(store, DuckDBSink(tmp_path / "c.duckdb", name="analytics")).drain()

    def test_default_names_differ_per_destination(self, tmp_path: Path) -> None:
        """Two folders get two names, so both receive everything."""
        store = _store_with(4)
        a, b = ParquetSink(tmp_path / "a"), ParquetSink(tmp_path / "b")
        assert a.name != b.name
        assert Exporter(store, a).drain() == Exporter(store, b).drain() == 4

    def test_open_sink_parses_destinations(self, tmp_path: Path) -> None:
        """open_sink takes parquet:DIR and duckdb:FILE and refuses anything else."""
        assert isinstance(open_sink(f"parquet:{tmp_path / 'p'}"), ParquetSink)
        assert isinstance(open_sink(f"duckdb:{tmp_path / 'd.duckdb'}"), DuckDBSink)
        with pytest.raises(nb.InvalidInput, match="parquet:DIR or duckdb:FILE"):
            open_sink("csv:out")
