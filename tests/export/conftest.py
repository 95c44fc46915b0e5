"""The known scripted session every export/analysis test checks, and its exports.

``known_session`` drives one ``nb.Runtime`` over one SQLite store; nothing is written around
it. Session ``audit-001`` of user ``alice``:

* T1: a tool call, steering while its first model call is held, then a tool that raises;
* T2: submitted while T1 runs (queued), answered at once;
* T3: its model call is retried once (retryable error), then answers;
* T5: a ``confirm=True`` tool call, approved with ``respond(id, True)``;
* T6: the same tool, rejected with ``respond(id, nb.Answer.reject("over budget"))``;
* T7: interrupted while an async tool runs that, asked to stop, returns what it has (so its
  call has a result and is not uncertain); then resumed;
* T8: interrupted while an async tool runs that is cancelled, leaving its call dispatched
  without a result (uncertain); reconciled as a success, and left interrupted (parked).

Session ``audit-002`` of user ``bob``: B1 completes; B2's model call fails the turn. A failed
turn parks its session (the runtime runs no new task until it is resumed or cancelled), so
the failed turn is the last turn of a session: bob's (alice has no T4).

The runtime stamps events with the wall clock, so waits (approval, time to resume) are
recorded in ``Known`` as measured from the committed events, for the tests to check the views
against.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import agentnb as nb
from agentnb.ids import SessionKey
from tests.runtime.helpers import WAIT, Gate, gated_script

AGENT_ID = "cost-assistant"
ALICE = SessionKey("default", "alice", AGENT_ID, "audit-001")
BOB = SessionKey("default", "bob", AGENT_ID, "audit-002")

# model usage (input, output) of every model/end that carries tokens, per turn
TOKENS = {
    "T1": [(10, 5), (20, 5), (30, 8)],
    "T2": [(12, 4)],
    "T3": [(5, 2)],
    "T5": [(100, 10), (120, 12)],
    "T6": [(100, 10), (110, 11)],
    "T7": [(50, 5), (60, 6)],
    "T8": [(40, 4)],
    "B1": [(7, 3)],
    "B2": [],
}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


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


@nb.tool(confirm=True)
def create_order(item: str, qty: int) -> str:
    """Place a purchase order (a person confirms each one).

    Args:
        item: what to buy
        qty: how many
    """
    return f"order of {qty} x {item} placed"


@dataclass
class Known:
    """What the known session holds: the store URL and the ids and waits the tests check."""

    url: str
    path: Path
    turns: dict[str, str] = field(default_factory=dict)
    runs: dict[str, list[str]] = field(default_factory=dict)
    calls: dict[str, str] = field(default_factory=dict)
    requests: dict[str, str] = field(default_factory=dict)
    head: dict[SessionKey, int] = field(default_factory=dict)
    wait_ms: dict[str, int] = field(default_factory=dict)
    """Per approval turn: ms from interaction/requested to interaction/resolved."""
    resume_ms: int = 0
    """T7: ms from its first run's run/end to its second run's run/start."""
    token_days: set[tuple[str, date]] = field(default_factory=set)
    """(user, UTC day) of every model call: a run across midnight spans two days."""

    def store(self) -> nb.SessionStore:
        return nb.open_store(self.url)


def _ms(at: datetime) -> int:
    """Epoch milliseconds as DuckDB's epoch_ms() gives them: microseconds rounded half up."""
    return ((at - _EPOCH) // timedelta(microseconds=1) + 500) // 1000


def _only(items: dict[str, Any]) -> str:
    (key,) = items
    return key


def _drive(url: str, known: Known) -> None:
    """Everything the sessions hold, through nb.Runtime operations only."""
    gate, report_started, charge_started = Gate(), Gate(), Gate()

    @nb.tool
    async def slow_report(quarter: str) -> str:
        """Draft the cost report.

        Args:
            quarter: which quarter
        """
        report_started.arrived.set()
        try:
            await asyncio.sleep(WAIT)  # a failure guard: only the interrupt ends this wait
        except asyncio.CancelledError:
            # Asked to stop, this tool hands back its draft instead of losing it. The runtime
            # cancels an async tool only once it has decided to stop the run, so the run
            # always ends interrupted at the step boundary, with this call's result recorded.
            return "report drafted"
        return "report timed out"

    @nb.tool
    async def charge_card(amount: int) -> str:
        """Charge the customer's card.

        Args:
            amount: dollars to charge
        """
        charge_started.arrived.set()
        await asyncio.sleep(WAIT)  # a failure guard: the interrupt cancels the call here
        return "charge timed out"

    replies: list[Any] = [
        nb.Reply(tool_calls=[nb.ToolCall("lookup_price", {"plan": "pro"})], usage=(10, 5)),
        nb.Reply(tool_calls=[nb.ToolCall("vendor_quote", {"vendor": "acme"})], usage=(20, 5)),
        nb.Reply(text="Pro is $10; the quote failed.", usage=(30, 8)),
        nb.Reply(text="Basic is $5.", usage=(12, 4)),
        nb.Reply(error=nb.ModelError("rate limited", retryable=True)),
        nb.Reply(text="Fine after a retry.", usage=(5, 2)),
        nb.Reply(
            tool_calls=[nb.ToolCall("create_order", {"item": "laptop", "qty": 2})],
            usage=(100, 10),
        ),
        nb.Reply(text="Order placed.", usage=(120, 12)),
        nb.Reply(
            tool_calls=[nb.ToolCall("create_order", {"item": "yacht", "qty": 1})],
            usage=(100, 10),
        ),
        nb.Reply(text="Not ordered.", usage=(110, 11)),
        nb.Reply(tool_calls=[nb.ToolCall("slow_report", {"quarter": "Q3"})], usage=(50, 5)),
        nb.Reply(text="Report done.", usage=(60, 6)),
        nb.Reply(tool_calls=[nb.ToolCall("charge_card", {"amount": 20})], usage=(40, 4)),
        nb.Reply(text="hi", usage=(7, 3)),
        nb.Reply(error=nb.ModelError("bad request: context too long")),
    ]
    agent = nb.Agent(
        name="Cost Assistant",
        agent_id=AGENT_ID,
        model=nb.ScriptedModel(gated_script(replies, {0: gate})),
        tools=[lookup_price, vendor_quote, create_order, slow_report, charge_card],
        instructions="Be brief.",
    )
    t = known.turns
    with nb.Runtime(agent, store=url) as runtime:
        alice = runtime.session(ALICE.session_id, user_id=ALICE.user_id)
        t1 = alice.submit("compare the plans")
        gate.wait_arrived()
        t2 = alice.submit("and the basic plan?")
        alice.steer("also check the vendor quote")
        gate.release()
        assert t1.wait(timeout=WAIT).status == "completed"
        assert t2.wait(timeout=WAIT).status == "completed"
        t3 = alice.run("retry please", timeout=WAIT)
        assert t3.status == "completed"
        t.update(T1=t1.turn_id, T2=t2.turn_id, T3=t3.turn_id)

        for name, text, answer in [
            ("T5", "order two laptops", True),
            ("T6", "order a yacht", nb.Answer.reject("over budget")),
        ]:
            asked = alice.run(text, timeout=WAIT)
            assert asked.status == "suspended"
            pending = alice.pending()
            request = _only(pending)
            t[name], known.requests[name] = asked.turn_id, request
            known.calls[name] = pending[request].call_id or ""
            assert alice.respond(request, answer).wait(timeout=WAIT).status == "completed"

        t7 = alice.submit("write the cost report")
        report_started.wait_arrived()
        assert alice.interrupt() is True
        stopped = t7.wait(timeout=WAIT)
        assert stopped.status == "interrupted"
        assert alice.resume(stopped.turn_id).wait(timeout=WAIT).status == "completed"
        t["T7"] = t7.turn_id

        t8 = alice.submit("pay the invoice")
        charge_started.wait_arrived()
        assert alice.interrupt() is True
        assert t8.wait(timeout=WAIT).status == "interrupted"
        (uncertain,) = alice.inspect().uncertain_tool_calls
        alice.reconcile(
            {uncertain.call_id: nb.ToolOutcome.success("charged $20 (verified)")},
            reason="checked with the bank",
        )
        t["T8"], known.calls["T8"] = t8.turn_id, uncertain.call_id

        bob = runtime.session(BOB.session_id, user_id=BOB.user_id)
        b1 = bob.run("hello", timeout=WAIT)
        assert b1.status == "completed"
        b2 = bob.run("too long", timeout=WAIT)
        assert b2.status == "failed"
        t.update(B1=b1.turn_id, B2=b2.turn_id)

        for session in (alice, bob):
            for task in session.tasks():
                name = next(n for n, turn in t.items() if turn == task.turn_id)
                known.runs[name] = list(task.run_ids)


def _measure(store: nb.SessionStore, known: Known) -> None:
    """Record the heads, the T7 call and the waits as the committed events have them."""
    known.head = {ALICE: store.head(ALICE), BOB: store.head(BOB)}
    at: dict[tuple[str, str], datetime] = {}
    for key in (ALICE, BOB):
        for e in store.scan(key):
            p = e.payload
            if e.type == "model/dispatch" and p.get("attempt") == 1:
                known.token_days.add((key.user_id, e.occurred_at.astimezone(UTC).date()))
            elif e.type == "tool/requested" and e.turn_id == known.turns["T7"]:
                known.calls["T7"] = p["call_id"]
            elif e.type in {"interaction/requested", "interaction/resolved"}:
                at[(e.type, p["request_id"])] = e.occurred_at
            elif e.type in {"run/start", "run/end"}:
                at[(e.type, e.run_id or "")] = e.occurred_at
    for name in ("T5", "T6"):
        request = known.requests[name]
        known.wait_ms[name] = _ms(at[("interaction/resolved", request)]) - _ms(
            at[("interaction/requested", request)]
        )
    first, second = known.runs["T7"]
    known.resume_ms = _ms(at[("run/start", second)]) - _ms(at[("run/end", first)])


@pytest.fixture(scope="session")
def known_session(tmp_path_factory: pytest.TempPathFactory) -> Known:
    """The scripted session (see the module docstring), built once per test run."""
    path = tmp_path_factory.mktemp("known") / "agentnb.sqlite"
    known = Known(url=f"sqlite:///{path}", path=path)
    _drive(known.url, known)
    store = nb.open_store(known.url)
    try:
        _measure(store, known)
    finally:
        store.close()
    return known


def _export(known: Known, dest: Path, kind: str, batch_size: int = 50_000) -> Path:
    """Drain the known session's store into a ``kind`` ("parquet"/"duckdb") sink at dest."""
    from agentnb.export import DuckDBSink, Exporter, ParquetSink

    sink = ParquetSink(dest) if kind == "parquet" else DuckDBSink(dest)
    store = known.store()
    try:
        Exporter(store, sink, batch_size=batch_size).drain()
    finally:
        store.close()
    return dest


@pytest.fixture(scope="session")
def known_parquet(known_session: Known, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Parquet export of the known session."""
    return _export(known_session, tmp_path_factory.mktemp("pq") / "export", "parquet")


@pytest.fixture(scope="session")
def known_duckdb(known_session: Known, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A DuckDB export of the known session."""
    return _export(known_session, tmp_path_factory.mktemp("ddb") / "export.duckdb", "duckdb")


@pytest.fixture(scope="session")
def known_parquet_split(known_session: Known, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Parquet export of the known session in batches of 5 events: most turns span several
    data files, so their turn rollups are partial and the turns view must combine them."""
    root = tmp_path_factory.mktemp("pq-split") / "export"
    return _export(known_session, root, "parquet", batch_size=5)


@pytest.fixture(params=["parquet", "parquet-split", "duckdb", "live"])
def known_source(
    request: pytest.FixtureRequest,
    known_session: Known,
    known_parquet: Path,
    known_parquet_split: Path,
    known_duckdb: Path,
) -> Iterator[Any]:
    """The known session as each kind of analysis source."""
    if request.param == "parquet":
        yield str(known_parquet)
    elif request.param == "parquet-split":
        yield str(known_parquet_split)
    elif request.param == "duckdb":
        yield f"duckdb:{known_duckdb}"
    else:
        store = known_session.store()
        yield store
        store.close()
