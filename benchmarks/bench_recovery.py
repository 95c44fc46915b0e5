"""Reopening a session after a crash: 1k-event log vs 1M-event log, in one run.

Both sessions hold the same conversation (same turns, messages and tool calls); the long one
streamed far more: every reply and tool reported thousands of chunk and progress events, as
long generations and busy tools do. Each ends in a crash: a run left open with a tool call
dispatched and no result. The metric is the time for a fresh runtime to open the session and
have ``inspect()``, ``tasks()``, ``transcript()`` and ``snapshot()`` ready (what a notebook
shows after a restart). Recovery starts from the newest snapshot of the folds, not from a full
replay, so the target is a ratio of at most 2. The full replay of the long log is reported as the
baseline it avoids.

    python benchmarks/bench_recovery.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import platform
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import agentnb as nb
from agentnb.folds import SNAPSHOT_EVERY, ChatFolds, Folds
from agentnb.projections.state import SessionState

TURNS = 40


def _turn(t: int, chunks: int, crash: bool) -> Iterator[nb.Event]:
    """The events one scripted turn commits (as the engine writes them), chunks included."""
    turn, run, cmd, mc1, mc2, call = (
        f"turn_{t}",
        f"run_{t}",
        f"cmd_{t}",
        f"mc_{t}a",
        f"mc_{t}b",
        f"call_{t}",
    )
    ids = {"turn_id": turn, "run_id": run}

    def ev(type_: str, payload: dict[str, object]) -> nb.Event:
        return nb.Event.create(type_, payload, **ids)

    text = f"question {t}"
    yield ev("inbox/started", {"command_id": cmd, "kind": "submit"})
    yield ev("turn/start", {"input": text, "command_id": cmd})
    yield ev("run/start", {"reason": "submit", "command_id": cmd})
    yield ev("input/received", {"input_id": cmd, "kind": "submit", "text": text})
    yield ev(
        "message/user",
        {"message": {"id": f"msg_{cmd}", "role": "user", "text": text, "turn_id": turn}},
    )
    yield ev("step/start", {"step_id": f"s{t}a", "iteration": 1})
    yield ev("request/prepared", {"model_call_id": mc1, "model": "scripted", "messages": []})
    yield ev("model/dispatch", {"model_call_id": mc1})
    for i in range(chunks // 2):
        yield ev(
            "model/chunk",
            {
                "model_call_id": mc1,
                "index": i,
                "tool_call_fragments": [{"index": 0, "arguments_delta": "x"}],
            },
        )
    yield ev(
        "model/end",
        {
            "model_call_id": mc1,
            "status": "completed",
            "model": "scripted",
            "input_tokens": 10,
            "output_tokens": 5,
        },
    )
    yield ev(
        "message/assistant",
        {
            "model_call_id": mc1,
            "message": {
                "id": f"msg_{mc1}",
                "role": "assistant",
                "turn_id": turn,
                "tool_calls": [{"call_id": call, "name": "lookup", "arguments": {"q": t}}],
            },
        },
    )
    yield ev("tool/requested", {"call_id": call, "name": "lookup", "arguments": {"q": t}})
    yield ev("tool/decision", {"call_id": call, "decision": "allowed"})
    yield ev("tool/dispatch", {"call_id": call, "name": "lookup", "arguments": {"q": t}})
    yield ev("action/start", {"call_id": call, "name": "lookup"})
    if crash:
        return
    for i in range(chunks // 4):
        yield ev("tool/chunk", {"call_id": call, "index": i, "data": {"done": i}})
    yield ev("action/end", {"call_id": call, "name": "lookup", "status": "returned"})
    yield ev(
        "tool/result",
        {"call_id": call, "name": "lookup", "status": "success", "output": f"result {t}"},
    )
    yield ev("state/checkpoint", {"reason": "step", "state": {"step": 1}})
    yield ev("step/end", {"step_id": f"s{t}a", "status": "continued"})
    yield ev("step/start", {"step_id": f"s{t}b", "iteration": 2})
    yield ev("request/prepared", {"model_call_id": mc2, "model": "scripted", "messages": []})
    yield ev("model/dispatch", {"model_call_id": mc2})
    for i in range(chunks // 4):
        yield ev("model/chunk", {"model_call_id": mc2, "index": i, "text": "y"})
    yield ev("model/end", {"model_call_id": mc2, "status": "completed", "model": "scripted"})
    answer = {"id": f"msg_{mc2}", "role": "assistant", "text": f"answer {t}", "turn_id": turn}
    yield ev("message/assistant", {"model_call_id": mc2, "message": answer})
    yield ev("turn/output", {"message": answer})
    yield ev("state/checkpoint", {"reason": "step", "state": {"step": 2}})
    yield ev("step/end", {"step_id": f"s{t}b", "status": "terminal"})
    yield ev("turn/completed", {})
    yield ev("run/end", {"status": "completed"})


def build(path: Path, events_target: int) -> tuple[str, nb.SessionKey, int]:
    """A crashed session of about ``events_target`` events; returns (url, key, head)."""
    url = f"sqlite:///{path}?synchronous=OFF"  # setup speed only; reads are the same
    store = nb.open_store(url)
    key = nb.SessionKey("default", "bench", "recovery", path.stem)
    store.create_session(key)
    inbox = nb.Inbox(store, key)
    chunks = max(4, (events_target - TURNS * 30) // TURNS)
    # The runtime that wrote the session snapshots its folds after commits, at most
    # SNAPSHOT_EVERY events apart; replay that, so the crash leaves the same state behind.
    folds = Folds(store, key)
    chat = ChatFolds(store, key)
    head = 0
    batch: list[nb.Event] = []

    def commit() -> None:
        nonlocal head, batch
        store.append(key, batch, expected_seq=head, batch_id=f"b{head}")
        head += len(batch)
        batch = []
        folds.refresh()
        chat.refresh()

    for t in range(TURNS):
        inbox.accept("submit", command_id=f"cmd_{t}", turn_id=f"turn_{t}", input=f"question {t}")
        for event in _turn(t, chunks, crash=t == TURNS - 1):
            batch.append(event)
            if len(batch) == SNAPSHOT_EVERY:
                commit()
    if batch:
        store.append(key, batch, expected_seq=head, batch_id=f"b{head}")
        head += len(batch)
    store.close()
    return f"sqlite:///{path}", key, head


def reopen(url: str, key: nb.SessionKey) -> float:
    """Seconds for a fresh runtime to have inspect/tasks/transcript of the session ready."""
    agent = nb.Agent(name="Recovery", agent_id=key.agent_id, model=nb.ScriptedModel([]))
    start = time.perf_counter()
    runtime = nb.Runtime(agent, store=url)
    try:
        session = runtime.open(key.session_id, user_id=key.user_id)
        inspection = session.inspect()
        tasks = session.tasks()
        transcript = session.transcript()
        snapshot = session.snapshot()
        elapsed = time.perf_counter() - start
    finally:
        runtime.close()
    assert inspection.interrupted_turn == f"turn_{TURNS - 1}", inspection.interrupted_turn
    assert [c.call_id for c in inspection.uncertain_tool_calls] == [f"call_{TURNS - 1}"]
    assert len(tasks) == TURNS
    assert len(transcript.messages) == TURNS * 4 - 2
    assert snapshot.messages == transcript.messages
    return elapsed


def full_replay(url: str, key: nb.SessionKey) -> float:
    store = nb.open_store(url)
    try:
        start = time.perf_counter()
        SessionState.fold(store.scan(key))
        return time.perf_counter() - start
    finally:
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100k events instead of 1M")
    args = parser.parse_args()
    big = 100_000 if args.quick else 1_000_000
    print(
        f"python {platform.python_version()}, sqlite {sqlite3.sqlite_version}; "
        f"{TURNS} turns each; building 1k and {big:,}-event sessions (setup, not timed)"
    )
    with tempfile.TemporaryDirectory() as tmp:
        small_url, small_key, small_head = build(Path(tmp) / "small.sqlite", 1_000)
        t0 = time.perf_counter()
        big_url, big_key, big_head = build(Path(tmp) / "big.sqlite", big)
        print(f"built {small_head:,} and {big_head:,} events ({time.perf_counter() - t0:.1f}s)")
        # The first reopen after the crash folds the tail after the dead runtime's last
        # snapshot (and saves a newer one); later reopens start from that.
        warm_url, warm_key, _ = build(Path(tmp) / "warm.sqlite", 1_000)
        reopen(warm_url, warm_key)  # imports and first-use costs, paid by neither side
        small_runs = [reopen(small_url, small_key) for _ in range(5)]
        large_runs = [reopen(big_url, big_key) for _ in range(5)]
        small, large = statistics.median(small_runs), statistics.median(large_runs)
        replay = full_replay(big_url, big_key)

    first = large_runs[0] / small_runs[0]
    rows = [
        {
            "metric": "first_reopen_1m_vs_1k",
            "value": round(large_runs[0] * 1000, 2),
            "baseline": round(small_runs[0] * 1000, 2),
            "ratio": round(first, 3),
            "unit": "ms, the first reopen after the crash",
            "target": "ratio <= 2",
            "ok": first <= 2,
        },
        {
            "metric": "reopen_ready_1m_vs_1k",
            "value": round(large * 1000, 2),
            "baseline": round(small * 1000, 2),
            "ratio": round(large / small, 3),
            "unit": f"ms ({big_head:,} vs {small_head:,} events)",
            "target": "ratio <= 2",
            "ok": large / small <= 2,
        },
        {
            "metric": "reopen_vs_full_replay",
            "value": round(large * 1000, 2),
            "baseline": round(replay * 1000, 2),
            "ratio": round(large / replay, 4),
            "unit": f"ms (full replay of {big_head:,} events)",
            "target": "informational",
            "ok": None,
        },
    ]
    print()
    print(f"{'metric':<26}{'value':>12}{'baseline':>12}{'ratio':>9}  target      unit")
    for r in rows:
        print(
            f"{r['metric']:<26}{r['value']:>12.2f}{r['baseline']:>12.2f}{r['ratio']:>9.3f}  "
            f"{r['target']:<11} {r['unit']}"
        )
    print()
    for r in rows:
        print(json.dumps(r))


if __name__ == "__main__":
    main()
