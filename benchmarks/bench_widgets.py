"""SessionView: commit-to-widget latency while an agent streams, and view build cost vs length.

1. ``commit_to_widget_ms``: a scripted agent streams a long reply on SQLite; for every commit
   (the store's ``append`` returned) we take the time until the view's widgets show that seq
   (its drawing covers it). Median and p95 in ms; the baseline is the redraw interval
   (redraws are throttled to at most 10 a second, so a commit waits up to that long).
2. ``view_build_5000_vs_50``: the time to build a ``SessionView`` (its widgets) for a
   5,000-item conversation vs a 50-item one, given the folded log; only the newest
   ``max_items`` are built, so the target ratio is <= 3. ``view_open_5000_vs_50`` also
   includes the one read of the log (linear in its length, reported for reference).

    python benchmarks/bench_widgets.py [--quick]

Prints one JSON line per metric: ``metric``, ``value``, ``baseline``, ``ratio`` and details.
Widgets are built without a kernel (ipywidgets then talks to no front end), so this measures
the Python side: folding, rendering HTML and setting widget state.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import agentnb as nb
from agentnb.events import Event
from agentnb.widgets import view as view_module


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def commit_to_widget(workdir: Path, chars: int) -> dict[str, Any]:
    model = nb.ScriptedModel(["word " * (chars // 5)], chunk_size=4, chunk_delay=0.002)
    agent = nb.Agent(name="Bench", agent_id="bench", model=model)
    runtime = nb.Runtime(agent, store=f"sqlite:///{workdir / 'latency.sqlite'}")
    try:
        session = runtime.session("latency")
        store = runtime.store
        commits: list[tuple[int, float]] = []
        drawn: list[tuple[int, float]] = []
        lock = threading.Lock()
        real_append = store.append

        def append(*args: Any, **kwargs: Any) -> Any:
            committed = real_append(*args, **kwargs)
            with lock:
                commits.append((committed[-1].seq, time.perf_counter()))
            return committed

        store.append = append  # type: ignore[method-assign]
        view = view_module.SessionView(session)

        def on_render(cursor: int) -> None:
            with lock:
                drawn.append((cursor, time.perf_counter()))

        view.on_render = on_render
        receipt = session.submit("stream a long reply")
        session.wait(receipt, timeout=120)
        head = session.log.head()
        deadline = time.monotonic() + 10
        while view.rendered_seq < head and time.monotonic() < deadline:
            time.sleep(0.01)
        view.close()
        latencies = []
        for seq, at in commits:
            shown = next((t for cursor, t in drawn if cursor >= seq and t >= at), None)
            if shown is not None:
                latencies.append((shown - at) * 1000)
        chunks = sum(1 for e in session.log.scan() if e.type == "model/chunk")
        return {
            "median": statistics.median(latencies),
            "p95": _percentile(latencies, 0.95),
            "samples": len(latencies),
            "chunk_events": chunks,
            "renders": view.renders,
        }
    finally:
        runtime.close()


def _conversation(items: int) -> list[Event]:
    """A synthetic log with ``items`` chat items: turns of user, reply, tool card, reply."""
    events: list[Event] = []

    def add(type_: str, payload: dict[str, Any], turn: str, run: str | None) -> None:
        events.append(Event.create(type_, payload, turn_id=turn, run_id=run))

    made = 0
    n = 0
    while made < items:
        turn, run, cmd = f"turn_{n}", f"run_{n}", f"cmd_{n}"
        mc1, mc2, call = f"mc_{n}a", f"mc_{n}b", f"call_{n}"
        text = f"Task number {n}: look up the price of plan {n}."
        add("turn/start", {"input": text, "command_id": cmd}, turn, run)
        add("run/start", {"reason": "submit", "command_id": cmd}, turn, run)
        user = {"id": f"msg_{cmd}", "role": "user", "text": text, "turn_id": turn}
        add("message/user", {"message": user}, turn, run)
        made += 1
        if made >= items:
            break
        add("model/dispatch", {"model_call_id": mc1}, turn, run)
        add("model/chunk", {"model_call_id": mc1, "index": 0, "text": "Let me check."}, turn, run)
        add("model/end", {"model_call_id": mc1, "status": "completed", "model": "m"}, turn, run)
        calls = [{"call_id": call, "name": "lookup_price", "arguments": {"plan": str(n)}}]
        reply = {
            "id": f"msg_{mc1}",
            "role": "assistant",
            "text": "Let me check.",
            "tool_calls": calls,
            "turn_id": turn,
        }
        add("message/assistant", {"message": reply, "model_call_id": mc1}, turn, run)
        made += 2  # the reply and its tool card
        if made >= items:
            break
        add("tool/requested", {"call_id": call, "name": "lookup_price", "arguments": {}}, turn, run)
        add("tool/decision", {"call_id": call, "decision": "allowed"}, turn, run)
        add("tool/dispatch", {"call_id": call, "name": "lookup_price"}, turn, run)
        add("tool/chunk", {"call_id": call, "index": 0, "data": {"progress": 0.5}}, turn, run)
        result = {"call_id": call, "name": "lookup_price", "status": "success", "output": "$5"}
        add("tool/result", result, turn, run)
        add("model/dispatch", {"model_call_id": mc2}, turn, run)
        add("model/chunk", {"model_call_id": mc2, "index": 0, "text": "It is $5."}, turn, run)
        add("model/end", {"model_call_id": mc2, "status": "completed", "model": "m"}, turn, run)
        final = {"id": f"msg_{mc2}", "role": "assistant", "text": "It is $5.", "turn_id": turn}
        add("message/assistant", {"message": final, "model_call_id": mc2}, turn, run)
        add("turn/completed", {}, turn, run)
        add("run/end", {"status": "completed"}, turn, run)
        made += 1
        n += 1
    return events


def _session(runtime: nb.Runtime, name: str, items: int) -> nb.Session:
    session = runtime.session(name)
    events = _conversation(items)
    for start in range(0, len(events), 1000):
        batch = events[start : start + 1000]
        session.log.append(batch, expected_seq=session.log.head())
    return session


def view_build(workdir: Path, rounds: int) -> dict[str, Any]:
    model = nb.ScriptedModel(["unused"])
    agent = nb.Agent(name="Bench", agent_id="bench", model=model)
    runtime = nb.Runtime(agent, store=f"sqlite:///{workdir / 'build.sqlite'}")
    real_read = view_module.read_fold
    out: dict[str, Any] = {}
    try:
        for items in (50, 5000):
            session = _session(runtime, f"s{items}", items)
            folded = view_module.read_fold(session)
            assert abs(len(folded[0]) - items) <= 1, (len(folded[0]), items)
            widgets, opened = [], []
            for _ in range(rounds):
                # Widgets only: the view gets the fold it would have read.
                view_module.read_fold = lambda _session, f=folded: f  # type: ignore[misc]
                try:
                    started = time.perf_counter()
                    view = view_module.SessionView(session, follow=False)
                    widgets.append(time.perf_counter() - started)
                finally:
                    view_module.read_fold = real_read
                shown = [
                    c for c in view.transcript.children if "agentnb-rating" not in c._dom_classes
                ]  # the items, without the rating bars under answers
                assert len(shown) == view.max_items
                view.close()
                started = time.perf_counter()
                view = view_module.SessionView(session, follow=False)
                opened.append(time.perf_counter() - started)
                view.close()
            out[items] = {
                "widgets_ms": statistics.median(widgets) * 1000,
                "open_ms": statistics.median(opened) * 1000,
                "events": session.log.head(),
            }
    finally:
        runtime.close()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="shorter stream, fewer rounds")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="agentnb-bench-widgets-") as tmp:
        workdir = Path(tmp)
        latency = commit_to_widget(workdir, chars=2_000 if args.quick else 12_000)
        interval_ms = 100.0
        print(
            json.dumps(
                {
                    "metric": "commit_to_widget_ms",
                    "value": round(latency["median"], 2),
                    "p95": round(latency["p95"], 2),
                    "baseline": interval_ms,
                    "ratio": round(latency["p95"] / interval_ms, 3),
                    "samples": latency["samples"],
                    "chunk_events": latency["chunk_events"],
                    "renders": latency["renders"],
                    "note": "median and p95 ms from commit to drawn; baseline = redraw interval",
                }
            )
        )
        build = view_build(workdir, rounds=3 if args.quick else 7)
        small, large = build[50], build[5000]
        print(
            json.dumps(
                {
                    "metric": "view_build_5000_vs_50",
                    "value": round(large["widgets_ms"], 2),
                    "baseline": round(small["widgets_ms"], 2),
                    "ratio": round(large["widgets_ms"] / small["widgets_ms"], 3),
                    "target": 3.0,
                    "note": "ms to build the view's widgets from the folded log",
                }
            )
        )
        print(
            json.dumps(
                {
                    "metric": "view_open_5000_vs_50",
                    "value": round(large["open_ms"], 2),
                    "baseline": round(small["open_ms"], 2),
                    "ratio": round(large["open_ms"] / small["open_ms"], 3),
                    "events": [small["events"], large["events"]],
                    "note": "ms for SessionView(session) including the one read of the log",
                }
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
