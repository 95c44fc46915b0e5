"""Smoke test of the widget benchmark: it runs and reports in its documented format.

Timings are never asserted here: machines running the tests are too noisy for thresholds.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_widgets.py"


def test_quick_run_prints_one_json_line_per_metric() -> None:
    """`bench_widgets.py --quick` exits 0 and prints JSON with value, baseline and ratio."""
    done = subprocess.run(
        [sys.executable, str(BENCH), "--quick"],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert {r["metric"] for r in records} == {
        "commit_to_widget_ms",
        "view_build_5000_vs_50",
        "view_open_5000_vs_50",
    }
    for record in records:
        for field in ("value", "baseline", "ratio"):
            assert isinstance(record[field], int | float)
            assert record[field] > 0
    latency = next(r for r in records if r["metric"] == "commit_to_widget_ms")
    assert latency["p95"] >= latency["value"]
