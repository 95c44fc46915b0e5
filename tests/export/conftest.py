"""The known scripted session every export/analysis test checks, and its exports.

``known_session`` builds one SQLite store holding:

* through the real runtime (session ``audit-001``, user ``alice``): T1 with a tool call, a
  steer while its first model call runs and a tool that raises; T2 submitted while T1 runs
  (queued); T3 whose model call is retried once; T4 whose model call fails the turn;
* written directly with ``Event.create`` + ``store.append``, following the payload models of
  ``agentnb/events.py``: T5 approved confirmation (90 s wait), T6 rejected confirmation
  (30 s wait), T7 interrupted then resumed (120 s later), T8 a tool call cut off by a crash,
  reconciled, and left interrupted (so the session is parked); and a second session
  ``audit-002`` of user ``bob`` with one completed turn.

TODO(hitl): switch T5-T8 to the real runtime (respond / interrupt / resume / reconcile) once
human-in-the-loop, interrupt/resume and crash recovery land in the engine; the expected rows
in the tests must not change.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import agentnb as nb
from agentnb.events import Event
from agentnb.ids import SessionKey, new_id
from tests.runtime.helpers import WAIT, Gate, gated_script

AGENT_ID = "cost-assistant"
ALICE = SessionKey("default", "alice", AGENT_ID, "audit-001")
BOB = SessionKey("default", "bob", AGENT_ID, "audit-002")

# model usage (input, output) of every model/end that carries tokens, per turn
RUNTIME_TOKENS = {"T1": [(10, 5), (20, 5), (30, 8)], "T2": [(12, 4)], "T3": [(5, 2)], "T4": []}
DIRECT_TOKENS = {
    "T5": [(100, 10), (120, 12)],
    "T6": [(100, 10), (110, 11)],
    "T7": [(50, 5), (60, 6)],
    "T8": [(40, 4)],
    "B1": [(7, 3)],
}


@nb.tool
def lookup_price(plan: str) -> str:
    """Look up the monthly price of a plan.

    Args:
        plan: the plan's name
    """
    return {"basic": "$5", "pro": "$10"}.get(plan, "unknown")


@nb.tool
def vendor_quote(vendor: str) -> str:
    """Ask a vendor for a quote.

    Args:
        vendor: the vendor's name
    """
    raise RuntimeError(f"{vendor} API is down")


@dataclass
class Known:
    """What the known session holds: the store URL and the ids the tests look up."""

    url: str
    path: Path
    turns: dict[str, str] = field(default_factory=dict)
    runs: dict[str, list[str]] = field(default_factory=dict)
    calls: dict[str, str] = field(default_factory=dict)
    requests: dict[str, str] = field(default_factory=dict)
    head: dict[SessionKey, int] = field(default_factory=dict)

    def store(self) -> nb.SessionStore:
        return nb.open_store(self.url)


class _Writer:
    """Appends the events the HITL/recovery runtime will emit, at chosen times."""

    def __init__(self, store: nb.SessionStore, key: SessionKey, start: datetime) -> None:
        self.store, self.key, self.t = store, key, start
        self.batch: list[Event] = []

    def at(self, seconds: float) -> _Writer:
        self.t += timedelta(seconds=seconds)
        return self

    def ev(self, type_: str, payload: dict[str, Any], turn: str | None, run: str | None) -> Event:
        self.t += timedelta(milliseconds=1)
        event = Event.create(type_, payload, turn_id=turn, run_id=run, occurred_at=self.t)
        self.batch.append(event)
        return event

    def commit(self) -> None:
        head = self.store.head(self.key)
        self.store.append(self.key, self.batch, expected_seq=head, batch_id=new_id("batch"))
        self.batch = []

    def model_call(
        self,
        turn: str,
        run: str,
        tokens: tuple[int, int],
        text: str,
        calls: list[dict[str, Any]] | None = None,
    ) -> None:
        mc = new_id("mc")
        self.ev("model/dispatch", {"model_call_id": mc, "attempt": 1}, turn, run)
        self.t += timedelta(milliseconds=200)
        self.ev(
            "model/end",
            {
                "model_call_id": mc,
                "status": "completed",
                "model": "scripted",
                "input_tokens": tokens[0],
                "output_tokens": tokens[1],
                "latency_ms": 200.0,
                "finish_reason": "tool_calls" if calls else "stop",
            },
            turn,
            run,
        )
        message = {
            "id": f"msg_{mc}",
            "role": "assistant",
            "text": text,
            "turn_id": turn,
            "tool_calls": calls or [],
        }
        self.ev("message/assistant", {"message": message, "model_call_id": mc}, turn, run)

    def start_turn(self, turn: str, run: str, text: str) -> str:
        cmd = new_id("cmd")
        self.ev("turn/start", {"input": text, "command_id": cmd}, turn, run)
        self.ev("run/start", {"reason": "submit", "command_id": cmd}, turn, run)
        self.ev(
            "input/received",
            {"input_id": cmd, "kind": "submit", "text": text, "command_id": cmd},
            turn,
            run,
        )
        self.ev(
            "message/user",
            {"message": {"id": f"msg_{cmd}", "role": "user", "text": text, "turn_id": turn}},
            turn,
            run,
        )
        return cmd

    def step(self, run: str, turn: str, iteration: int) -> str:
        step = new_id("step")
        self.ev("step/start", {"step_id": step, "iteration": iteration}, turn, run)
        return step

    def finish(self, turn: str, run: str, step: str, text: str, status: str = "completed") -> None:
        self.ev(
            "turn/output",
            {"message": {"id": new_id("msg"), "role": "assistant", "text": text, "turn_id": turn}},
            turn,
            run,
        )
        self.ev("state/checkpoint", {"reason": "step", "state": {"turn_id": turn}}, turn, run)
        self.ev("step/end", {"step_id": step, "status": "terminal"}, turn, run)
        self.ev(f"turn/{status}", {}, turn, run)
        self.ev("run/end", {"status": status}, turn, run)


def _approval_turn(
    w: _Writer,
    known: Known,
    name: str,
    args: dict[str, Any],
    approved: bool,
    wait_s: float,
    tokens: list[tuple[int, int]],
) -> None:
    turn, run1, run2 = new_id("turn"), new_id("run"), new_id("run")
    call, request = f"call_{name}", new_id("req")
    known.turns[name], known.runs[name] = turn, [run1, run2]
    known.calls[name], known.requests[name] = call, request
    w.at(5)
    w.start_turn(turn, run1, f"order {args['item']}")
    step = w.step(run1, turn, 1)
    w.model_call(
        turn, run1, tokens[0], "", [{"call_id": call, "name": "create_order", "arguments": args}]
    )
    w.ev("tool/requested", {"call_id": call, "name": "create_order", "arguments": args}, turn, run1)
    w.ev(
        "tool/decision",
        {"call_id": call, "decision": "suspended", "reason": "needs confirmation"},
        turn,
        run1,
    )
    asked = w.ev(
        "interaction/requested",
        {
            "request_id": request,
            "kind": "confirmation",
            "call_id": call,
            "tool_name": "create_order",
            "arguments": args,
            "prompt": f"Order {args['item']}?",
        },
        turn,
        run1,
    )
    w.ev("state/checkpoint", {"reason": "suspend", "state": {"turn_id": turn}}, turn, run1)
    w.ev("step/end", {"step_id": step, "status": "terminal"}, turn, run1)
    w.ev("turn/suspended", {"reason": "waiting for confirmation"}, turn, run1)
    w.ev("run/end", {"status": "suspended", "reason": "waiting for confirmation"}, turn, run1)
    w.commit()
    w.t = asked.occurred_at + timedelta(seconds=wait_s) - timedelta(milliseconds=1)
    cmd = new_id("cmd")
    answer = {"approved": True} if approved else {"approved": False, "reason": "over budget"}
    w.ev(
        "interaction/resolved",
        {
            "request_id": request,
            "kind": "confirmation",
            "status": "answered",
            "answer": answer,
            "command_id": cmd,
        },
        turn,
        None,
    )
    w.ev("turn/resumed", {"command_id": cmd, "reason": "respond"}, turn, run2)
    w.ev("run/start", {"reason": "respond", "command_id": cmd}, turn, run2)
    step = w.step(run2, turn, 1)
    if approved:
        w.ev("tool/decision", {"call_id": call, "decision": "allowed"}, turn, run2)
        w.ev(
            "tool/dispatch",
            {"call_id": call, "name": "create_order", "arguments": args},
            turn,
            run2,
        )
        w.t += timedelta(milliseconds=1500)
        w.ev(
            "tool/result",
            {
                "call_id": call,
                "name": "create_order",
                "status": "success",
                "output": "order 42 placed",
                "duration_ms": 1500.0,
            },
            turn,
            run2,
        )
    else:
        w.ev(
            "tool/decision",
            {"call_id": call, "decision": "denied", "reason": "over budget"},
            turn,
            run2,
        )
        w.ev(
            "tool/result",
            {
                "call_id": call,
                "name": "create_order",
                "status": "denied",
                "output": "The user rejected this call: over budget",
                "synthetic": True,
            },
            turn,
            run2,
        )
    w.model_call(turn, run2, tokens[1], "done")
    w.finish(turn, run2, step, "Order placed." if approved else "Not ordered.")
    w.commit()


def _interrupt_turn(w: _Writer, known: Known) -> None:
    turn, run1, run2 = new_id("turn"), new_id("run"), new_id("run")
    call = "call_report"
    known.turns["T7"], known.runs["T7"], known.calls["T7"] = turn, [run1, run2], call
    w.at(5)
    w.start_turn(turn, run1, "write the cost report")
    step = w.step(run1, turn, 1)
    args = {"quarter": "Q3"}
    w.model_call(
        turn,
        run1,
        DIRECT_TOKENS["T7"][0],
        "",
        [{"call_id": call, "name": "slow_report", "arguments": args}],
    )
    w.ev("tool/requested", {"call_id": call, "name": "slow_report", "arguments": args}, turn, run1)
    w.ev("tool/decision", {"call_id": call, "decision": "allowed"}, turn, run1)
    w.ev("tool/dispatch", {"call_id": call, "name": "slow_report", "arguments": args}, turn, run1)
    w.commit()
    w.ev(
        "run/stop_requested", {"command_id": new_id("cmd"), "reason": "user interrupt"}, turn, run1
    )
    w.t += timedelta(milliseconds=4000)
    w.ev(
        "tool/result",
        {
            "call_id": call,
            "name": "slow_report",
            "status": "success",
            "output": "report drafted",
            "duration_ms": 4000.0,
        },
        turn,
        run1,
    )
    w.ev("state/checkpoint", {"reason": "interrupt", "state": {"turn_id": turn}}, turn, run1)
    w.ev("step/end", {"step_id": step, "status": "terminal"}, turn, run1)
    w.ev("turn/interrupted", {"reason": "user interrupt"}, turn, run1)
    w.ev("run/end", {"status": "interrupted", "reason": "user interrupt"}, turn, run1)
    w.commit()
    interrupted_at = w.t
    w.t = interrupted_at + timedelta(seconds=120) - timedelta(milliseconds=2)
    cmd = new_id("cmd")
    w.ev("turn/resumed", {"command_id": cmd, "reason": "resume"}, turn, run2)
    w.ev("run/start", {"reason": "resume", "command_id": cmd}, turn, run2)  # at +120 s exactly
    step = w.step(run2, turn, 1)
    w.model_call(turn, run2, DIRECT_TOKENS["T7"][1], "Report done.")
    w.finish(turn, run2, step, "Report done.")
    w.commit()


def _crash_turn(w: _Writer, known: Known) -> None:
    turn, run1 = new_id("turn"), new_id("run")
    call = "call_charge"
    known.turns["T8"], known.runs["T8"], known.calls["T8"] = turn, [run1], call
    w.at(5)
    w.start_turn(turn, run1, "pay the invoice")
    w.step(run1, turn, 1)
    args = {"amount": 20}
    w.model_call(
        turn,
        run1,
        DIRECT_TOKENS["T8"][0],
        "",
        [{"call_id": call, "name": "charge_card", "arguments": args}],
    )
    w.ev("tool/requested", {"call_id": call, "name": "charge_card", "arguments": args}, turn, run1)
    w.ev("tool/decision", {"call_id": call, "decision": "allowed"}, turn, run1)
    w.ev("tool/dispatch", {"call_id": call, "name": "charge_card", "arguments": args}, turn, run1)
    w.commit()
    # the process died here; a new runtime recovers the session
    w.at(30)
    w.ev("recovery/applied", {"reason": "crash", "interrupted_runs": [run1]}, turn, run1)
    w.ev("turn/interrupted", {"reason": "crash"}, turn, run1)
    w.ev("run/end", {"status": "interrupted", "reason": "crash"}, turn, run1)
    w.commit()
    w.at(60)
    w.ev(
        "recovery/applied",
        {
            "reason": "checked with the bank",
            "resolved_call_ids": [call],
            "outcomes": {call: {"status": "success"}},
        },
        turn,
        None,
    )
    w.ev(
        "tool/result",
        {
            "call_id": call,
            "name": "charge_card",
            "status": "success",
            "output": "charged $20 (verified)",
            "reconciled": True,
        },
        None,  # the engine writes a reconciled result without turn_id when it has none
        None,
    )
    w.commit()


def _bob(store: nb.SessionStore, known: Known, start: datetime) -> None:
    store.create_session(BOB)
    w = _Writer(store, BOB, start)
    turn, run = new_id("turn"), new_id("run")
    known.turns["B1"], known.runs["B1"] = turn, [run]
    w.start_turn(turn, run, "hello")
    step = w.step(run, turn, 1)
    w.model_call(turn, run, DIRECT_TOKENS["B1"][0], "hi")
    w.finish(turn, run, step, "hi")
    w.commit()


def _runtime_part(url: str, known: Known) -> None:
    gate = Gate()
    replies: list[Any] = [
        nb.Reply(tool_calls=[nb.ToolCall("lookup_price", {"plan": "pro"})], usage=(10, 5)),
        nb.Reply(tool_calls=[nb.ToolCall("vendor_quote", {"vendor": "acme"})], usage=(20, 5)),
        nb.Reply(text="Pro is $10; the quote failed.", usage=(30, 8)),
        nb.Reply(text="Basic is $5.", usage=(12, 4)),
        nb.Reply(error=nb.ModelError("rate limited", retryable=True)),
        nb.Reply(text="Fine after a retry.", usage=(5, 2)),
        nb.Reply(error=nb.ModelError("bad request: context too long")),
    ]
    agent = nb.Agent(
        name="Cost Assistant",
        agent_id=AGENT_ID,
        model=nb.ScriptedModel(gated_script(replies, {0: gate})),
        tools=[lookup_price, vendor_quote],
        instructions="Be brief.",
    )
    with nb.Runtime(agent, store=url) as runtime:
        session = runtime.session(ALICE.session_id, user_id=ALICE.user_id)
        t1 = session.submit("compare the plans")
        gate.wait_arrived()
        t2 = session.submit("and the basic plan?")
        session.steer("also check the vendor quote")
        gate.release()
        assert t1.wait(timeout=WAIT).status == "completed"
        assert t2.wait(timeout=WAIT).status == "completed"
        t3 = session.run("retry please", timeout=WAIT)
        assert t3.status == "completed"
        t4 = session.run("too long", timeout=WAIT)
        assert t4.status == "failed"
        known.turns.update(T1=t1.turn_id, T2=t2.turn_id, T3=t3.turn_id, T4=t4.turn_id)


@pytest.fixture(scope="session")
def known_session(tmp_path_factory: pytest.TempPathFactory) -> Known:
    """The scripted session (see the module docstring), built once per test run."""
    path = tmp_path_factory.mktemp("known") / "agentnb.sqlite"
    known = Known(url=f"sqlite:///{path}", path=path)
    _runtime_part(known.url, known)
    store = nb.open_store(known.url)
    try:
        last = list(store.scan(ALICE))[-1].occurred_at
        start = last.replace(microsecond=0) + timedelta(seconds=10)
        w = _Writer(store, ALICE, start)
        _approval_turn(w, known, "T5", {"item": "laptop", "qty": 2}, True, 90, DIRECT_TOKENS["T5"])
        _approval_turn(w, known, "T6", {"item": "yacht", "qty": 1}, False, 30, DIRECT_TOKENS["T6"])
        _interrupt_turn(w, known)
        _crash_turn(w, known)
        _bob(store, known, w.t + timedelta(seconds=1))
        known.head = {ALICE: store.head(ALICE), BOB: store.head(BOB)}
    finally:
        store.close()
    return known


@pytest.fixture(scope="session")
def known_parquet(known_session: Known, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Parquet export of the known session."""
    from agentnb.export import Exporter, ParquetSink

    root = tmp_path_factory.mktemp("pq") / "export"
    store = known_session.store()
    try:
        Exporter(store, ParquetSink(root)).drain()
    finally:
        store.close()
    return root


@pytest.fixture(scope="session")
def known_duckdb(known_session: Known, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A DuckDB export of the known session."""
    from agentnb.export import DuckDBSink, Exporter

    path = tmp_path_factory.mktemp("ddb") / "export.duckdb"
    store = known_session.store()
    try:
        Exporter(store, DuckDBSink(path)).drain()
    finally:
        store.close()
    return path


@pytest.fixture(params=["parquet", "duckdb", "live"])
def known_source(
    request: pytest.FixtureRequest, known_session: Known, known_parquet: Path, known_duckdb: Path
) -> Iterator[Any]:
    """The known session as each kind of analysis source."""
    if request.param == "parquet":
        yield str(known_parquet)
    elif request.param == "duckdb":
        yield f"duckdb:{known_duckdb}"
    else:
        store = known_session.store()
        yield store
        store.close()


def utc(dt: datetime) -> datetime:
    return dt.astimezone(UTC)
