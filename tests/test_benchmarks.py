"""Smoke test of the store benchmark: it runs and reports in its documented format.

Timings are never asserted here: machines running the tests are too noisy for thresholds.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_store.py"
METRICS = {
    "single_commit",
    "batch100_commit",
    "read_after_end_vs_start",
    "cold_open_100k_vs_1k",
}


class TestBenchStore:
    def test_quick_run_prints_one_json_line_per_metric(self) -> None:
        """`bench_store.py --quick` exits 0 and prints a JSON line with value, baseline, ratio."""
        done = subprocess.run(
            [sys.executable, str(BENCH), "--quick"],
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        records = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        assert {r["metric"] for r in records} == METRICS
        for record in records:
            assert {"metric", "value", "baseline", "ratio"} <= record.keys()
            for field in ("value", "baseline", "ratio"):
                assert isinstance(record[field], int | float)
                assert record[field] > 0


class TestBenchExport:
    def test_quick_run_prints_one_json_line_per_metric(self) -> None:
        """`bench_export.py --quick` (fewer events) prints JSON with value, baseline, ratio."""
        bench = BENCH.with_name("bench_export.py")
        done = subprocess.run(
            [sys.executable, str(bench), "--quick", "--events", "20000", "--rounds", "1"],
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        records = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        assert {r["metric"] for r in records} == {
            "export_parquet",
            "turns_view",
            "turns_from_events",
        }
        for record in records:
            for field in ("value", "baseline", "ratio"):
                assert isinstance(record[field], int | float)
                assert record[field] > 0
