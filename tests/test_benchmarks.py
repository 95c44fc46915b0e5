"""Smoke tests of the benchmarks: each runs quickly and reports in its documented format.

Timings are never asserted here: machines running the tests are too noisy for thresholds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _records(script: str, *args: str) -> list[dict[str, Any]]:
    """Run a benchmark; its JSON lines, each checked for a positive value, baseline, ratio."""
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    for record in records:
        assert {"metric", "value", "baseline", "ratio"} <= record.keys()
        for field in ("value", "baseline", "ratio"):
            assert isinstance(record[field], int | float)
            assert record[field] > 0
    return records


def test_store_quick_run_prints_one_json_line_per_metric() -> None:
    """`bench_store.py --quick` exits 0 and prints a JSON line with value, baseline, ratio."""
    records = _records("bench_store.py", "--quick")
    assert {r["metric"] for r in records} == {
        "single_commit",
        "batch100_commit",
        "read_after_end_vs_start",
        "list_newest50_10k_vs_100",
        "delete_1k_events_in_10k_vs_100",
        "cold_open_100k_vs_1k",
    }


def test_blobs_small_run_prints_one_json_line_per_metric() -> None:
    """`bench_blobs.py --tasks 2` exits 0 and prints the store size beside main's format."""
    records = _records("bench_blobs.py", "--tasks", "2")
    assert {r["metric"] for r in records} == {
        "store_bytes_per_input_byte",
        "store_mb",
        "log_bytes_per_input_byte",
    }


def test_export_quick_run_prints_one_json_line_per_metric() -> None:
    """`bench_export.py --quick` (fewer events) prints JSON with value, baseline, ratio."""
    records = _records("bench_export.py", "--quick", "--events", "20000", "--rounds", "1")
    assert {r["metric"] for r in records} == {
        "export_parquet",
        "turns_view",
        "turns_from_events",
    }


def test_widgets_quick_run_prints_one_json_line_per_metric() -> None:
    """`bench_widgets.py --quick` exits 0 and prints JSON with value, baseline and ratio."""
    records = _records("bench_widgets.py", "--quick")
    assert {r["metric"] for r in records} == {
        "commit_to_widget_ms",
        "view_build_5000_vs_50",
        "view_open_5000_vs_50",
    }
    latency = next(r for r in records if r["metric"] == "commit_to_widget_ms")
    assert latency["p95"] >= latency["value"]


def test_postgres_quick_run_prints_one_json_line_per_metric() -> None:
    """`bench_postgres.py --quick` (its own throwaway server) prints JSON with value,
    baseline, ratio; the commit lines add the bare statement's rate, the wake-up latency line
    its p95, the worker lines their CPU and the statements the server ran per turn, and
    the statements line the workers' own per turn against the recorded figure."""
    from tests.pg import require_server

    require_server()
    records = _records("bench_postgres.py", "--quick")
    assert {r["metric"] for r in records} == {
        "single_commit",
        "batch100_commit",
        "wake_ms",
        "read_arrow_10k",
        "workers_1",
        "workers_2",
        "workers_4",
        "statements_per_turn",
    }
    for commit in (r for r in records if r["metric"].endswith("_commit")):
        # The store's statement sent bare costs the database what the store's commit does.
        assert commit["statement"] > 0
        assert commit["statement_ratio"] > 0
    wake = next(r for r in records if r["metric"] == "wake_ms")
    assert wake["p95"] >= wake["value"]
    for n in (1, 2, 4):
        workers = next(r for r in records if r["metric"] == f"workers_{n}")
        assert workers["turns"] == 16
        assert workers["worker_cpu_s"] > 0
        assert workers["server_cpu_s"] > 0
        assert workers["statements_per_turn"] >= 6  # a turn's six commits at least
        assert 6 <= workers["worker_statements_per_turn"] <= workers["statements_per_turn"]
    statements = next(r for r in records if r["metric"] == "statements_per_turn")
    assert statements["workers_only"] == 1.0  # the throwaway server: a role of their own
    assert statements["baseline"] == 12.1
    assert statements["value"] >= 6


def test_scale_quick_run_prints_one_json_line_per_metric() -> None:
    """`bench_scale.py --quick` prints the windows' turns/s (by total and by median turn)
    and the reopen ratio."""
    records = _records("bench_scale.py", "--quick", "--repeats", "1")
    assert len(records) == 3
    assert all(r["bench"] == "scale" for r in records)
    assert [r["target"] for r in records] == [">= 0.9", "informational", "<= 1.5"]


def test_sessions_quick_run_prints_one_json_line_per_metric() -> None:
    """`bench_sessions.py --quick` prints concurrent (in one process, and in two worker
    processes) vs sequential turns/s, and what each side's turns cost in CPU."""
    one_process, two_processes = _records("bench_sessions.py", "--quick")
    assert [r["target"] for r in (one_process, two_processes)] == [">= 2 (goal 3)", ">= 1.6"]
    assert two_processes["processes"] == 2
    for record in (one_process, two_processes):
        assert record["bench"] == "sessions"
        for side in ("", "baseline_"):
            assert record[f"{side}user_ms_per_turn"] > 0
            assert 0 < record[f"{side}user_busy"] <= (os.cpu_count() or 1)  # CPU s per s


def test_recovery_small_run_prints_one_json_line_per_metric() -> None:
    """`bench_recovery.py` on small sessions (a child killed mid-tool each) prints its ratio."""
    (record,) = _records("bench_recovery.py", "--turns", "60", "--short", "10", "--repeats", "1")
    assert record["bench"] == "recovery"
    assert record["events"] > record["baseline_events"]


def test_server_quick_run_prints_one_json_line_per_metric() -> None:
    """`bench_server.py --quick` (20 followers, 20 turns) prints its metrics as JSON."""
    records = _records("bench_server.py", "--quick")
    assert {r["metric"] for r in records} == {
        "frame_latency_p95_1",
        "frame_latency_p95_20",
        "idle_stream_memory_kib",
        "http_turns_per_s_vs_inprocess",
        "reconnect_1k_vs_100",
        "stream_fds_last_vs_first",
        "stream_rss_last_vs_first",
        "healthz_p95_under_header_attack",
    }


def test_mcp_quick_run_prints_one_json_line_per_metric() -> None:
    """`bench_mcp.py --calls 40` prints JSON for the call in a turn, invoke, and the SDK floor."""
    records = _records("bench_mcp.py", "--calls", "40")
    assert {r["metric"] for r in records} == {
        "mcp_call_in_a_turn",
        "mcp_invoke",
        "mcp_adapter_over_sdk",
    }
    assert all("extra_ms" in r for r in records)


def test_otel_quick_run_prints_one_json_line_per_metric() -> None:
    """`bench_otel.py --events 20000` prints JSON for the wall and CPU comparisons."""
    records = _records("bench_otel.py", "--events", "20000")
    assert {r["metric"] for r in records} == {"export_otel", "export_otel_cpu"}


def test_subagents_quick_run_prints_one_json_line_per_metric() -> None:
    """`bench_subagents.py --quick` prints the call overhead and the fan-out, with baselines."""
    records = _records("bench_subagents.py", "--quick", "--work", "0.01", "--fan-work", "0.05")
    assert {r["metric"] for r in records} == {
        "subagent_call_vs_plain_tool",
        "fan_out_4_vs_sequential",
    }


def test_stops_run_prints_one_json_line_per_metric() -> None:
    """`bench_stops.py --repeats 1` prints JSON with value, baseline, ratio for each stop."""
    records = _records("bench_stops.py", "--repeats", "1")
    assert {r["metric"] for r in records} == {
        "interrupt_waiting_model_ms",
        "time_limit_trickling_model_ms",
        "ctrl_c_exit_blocked_tool_ms",
    }


def test_ops_quick_run_prints_one_json_line_per_metric() -> None:
    """`bench_ops.py --quick` (a small log, few schedules) prints JSON with value, baseline,
    ratio for backup, migration and the scheduler."""
    records = _records("bench_ops.py", "--quick", "--events", "5000", "--schedules", "200")
    assert {r["metric"] for r in records} == {
        "backup_events_per_s",
        "migrate_events_per_s",
        "scheduler_idle_cpu",
        "schedule_lateness_p95",
        "schedule_lateness_p95_normal",
    }


def test_models_quick_run_prints_one_json_line_per_metric() -> None:
    """`bench_models.py --quick --no-real` prints the adapter metrics as JSON lines."""
    records = _records("bench_models.py", "--quick", "--no-real", "--tokens", "200")
    assert {r["metric"] for r in records} == {
        "anthropic_cpu_per_token",
        "responses_cpu_per_token",
        "chat_cpu_per_token",
        "chat_raw_cpu_per_token",
    }


def test_evals_quick_run_prints_one_json_line_per_metric() -> None:
    """`bench_evals.py --quick` prints the replay against fresh turns and the dataset builds."""
    records = _records("bench_evals.py", "--quick")
    assert [r["metric"] for r in records] == [
        "replay of 20 recorded turns (s)",
        "dataset from 1000 turns (s)",
        "dataset from 1000 exported turns (s)",
    ]


def test_fanout_quick_run_prints_one_json_line_per_configuration() -> None:
    """`bench_fanout.py --turns 5` exits 0 and prints a line for the followed and the
    exporting configurations, each against the bare run."""
    records = _records("bench_fanout.py", "--turns", "5")
    assert {r["metric"] for r in records} == {"fanout_cpu_followed", "fanout_cpu_followed_export"}
    assert all(r["frames_missing"] == 0 for r in records)


def test_middleware_quick_run_prints_one_json_line_per_metric() -> None:
    """`bench_middleware.py` with a few turns prints both middleware rows beside the bare."""
    records = _records("bench_middleware.py", "--turns", "3", "--rounds", "1")
    assert [r["metric"] for r in records] == [
        "ms per turn, recording middleware",
        "ms per turn, recording+aflush middleware",
    ]


def test_inline_quick_run_prints_one_json_line_per_metric() -> None:
    """`bench_inline.py --quick` prints the inline confirmation and the suspended-and-resumed
    turn, each against the same turn with no confirmation."""
    records = _records("bench_inline.py", "--quick")
    assert {r["metric"] for r in records} == {
        "inline_confirmation_vs_no_confirmation",
        "suspended_and_resumed_vs_no_confirmation",
    }
