"""Live export: Runtime(export_to=[sink]) keeps sinks up to date in the background."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

import agentnb as nb
from agentnb.export import Exporter, LiveExporter, ParquetSink
from agentnb.ids import SessionKey
from tests.export.test_sinks import KEY, _append, _parquet_rows, _store_with
from tests.runtime.helpers import WAIT


class FlakySink:
    """A ParquetSink that fails its first ``failures`` accepts (a sink that is down)."""

    def __init__(self, root: Path, failures: int) -> None:
        self.inner = ParquetSink(root)
        self.name = self.inner.name
        self.failures = failures
        self.calls = 0
        self.lock = threading.Lock()

    def accept(self, events: Any) -> None:
        with self.lock:
            self.calls += 1
            if self.calls <= self.failures:
                raise OSError("sink is down")
        self.inner.accept(events)

    def position(self, key: SessionKey) -> int:
        return self.inner.position(key)


def _wait_for(predicate: Any, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


class TestLiveExporter:
    def test_keeps_up_with_commits(self, tmp_path: Path) -> None:
        """Events committed while it runs reach the sink without anyone calling drain()."""
        store = _store_with(5)
        sink = ParquetSink(tmp_path / "pq")
        with LiveExporter(store, [sink], poll_interval=0.05) as live:
            for _ in range(5):
                _append(store, KEY, 10)
                time.sleep(0.02)
            assert live.flush(WAIT)
            assert sink.position(KEY) == 55
            assert live.status()[0].lag == 0
        assert sorted(s for _, s in _parquet_rows(tmp_path / "pq")) == list(range(1, 56))

    def test_catches_up_after_the_sink_was_failing(self, tmp_path: Path) -> None:
        """A failing sink is retried with backoff; once it works every event arrives once."""
        store = _store_with(20)
        sink = FlakySink(tmp_path / "pq", failures=3)
        with LiveExporter(store, [sink], retry_initial=0.05, poll_interval=0.05) as live:
            _wait_for(lambda: sink.calls >= 1)
            _append(store, KEY, 10)
            _wait_for(lambda: sink.calls > 3)
            assert live.flush(WAIT)
            status = live.status()[0]
            assert (status.lag, status.failures, status.last_error) == (0, 0, None)
        assert sorted(s for _, s in _parquet_rows(tmp_path / "pq")) == list(range(1, 31))

    def test_status_shows_the_error_and_lag_while_failing(self, tmp_path: Path) -> None:
        """While the sink fails, status() has the error, the failure count and the lag."""
        store = _store_with(8)
        sink = FlakySink(tmp_path / "pq", failures=10_000)
        with LiveExporter(store, [sink], retry_initial=0.05, retry_max=0.1) as live:
            _wait_for(lambda: live.status()[0].failures >= 2)
            status = live.status()[0]
            assert status.last_error == "OSError: sink is down"
            assert status.lag == 8
        assert store.watermark(KEY, sink.name) == 0  # nothing acknowledged, nothing lost
        assert Exporter(store, sink.inner).drain() == 8

    def test_a_burst_of_commits_shares_one_pass_an_interval(self, tmp_path: Path) -> None:
        """Twenty commits over about a second reach the sink in at most a few accepts (one
        pass an ``interval``, not one per commit), and a flush brings the rest in."""
        store = _store_with(5)
        sink = FlakySink(tmp_path / "pq", failures=0)
        with LiveExporter(store, [sink], poll_interval=0.05, interval=1.0) as live:
            assert live.flush(WAIT)
            before = sink.calls
            for _ in range(20):
                _append(store, KEY, 1)
                time.sleep(0.05)
            assert live.flush(WAIT)
            assert sink.position(KEY) == 25
            assert sink.calls - before <= 3

    def test_sinks_sharing_a_name_are_refused(self, tmp_path: Path) -> None:
        """Two sinks with one name would share a watermark: InvalidInput."""
        a = ParquetSink(tmp_path / "a", name="same")
        b = ParquetSink(tmp_path / "b", name="same")
        with pytest.raises(nb.InvalidInput, match="share a name"):
            LiveExporter(nb.MemoryStore(), [a, b])

    def test_something_that_is_not_a_sink_is_refused(self) -> None:
        """export_to entries must be sinks."""
        with pytest.raises(nb.InvalidInput, match="export_to takes sinks"):
            LiveExporter(nb.MemoryStore(), ["parquet:out"])  # type: ignore[list-item]


class TestRuntimeExport:
    def test_runtime_export_to_keeps_the_sink_up_to_date(self, tmp_path: Path) -> None:
        """Runtime(export_to=[sink]) exports a running session's events as they commit."""
        sink = ParquetSink(tmp_path / "pq")
        agent = nb.Agent(
            name="T", agent_id="t", model=nb.ScriptedModel(["one", "two"]), instructions="x"
        )
        runtime = nb.Runtime(agent, store=f"sqlite:///{tmp_path / 's.sqlite'}", export_to=[sink])
        try:
            session = runtime.session("s1", user_id="alice")
            session.run("first", timeout=WAIT)
            assert runtime.exporter is not None
            assert runtime.exporter.flush(WAIT)
            assert sink.position(session.key) == session.log.head()
            session.run("second", timeout=WAIT)
            head = session.log.head()
        finally:
            runtime.close()
        assert sink.position(session.key) == head  # close() drains the tail

    def test_runtime_without_sinks_starts_no_exporter(self) -> None:
        """No export_to: no background exporter thread."""
        agent = nb.Agent(name="T", agent_id="t", model=nb.ScriptedModel(["x"]))
        runtime = nb.Runtime(agent, store="memory://")
        try:
            assert runtime.exporter is None
        finally:
            runtime.close()
