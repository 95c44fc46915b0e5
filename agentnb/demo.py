"""``agentnb demo``: a scripted multi-tool session that shows every operation, offline.

A cost assistant compares plans (two tool calls), while a second task waits in the queue; the
first task is steered mid-run; the second needs an approval before it orders; a third is
interrupted while it streams and then resumed. Then the log is shown as a timeline. Nothing
leaves the machine: the model is a ``ScriptedModel``.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from typing import Any

import agentnb as nb

COMPARE = "Compare the basic and pro plans."
ORDER = "Order 2 pro seats."
QUOTES = "Fetch a quote from Acme and summarise it."
STEER = "Mention the annual discount."

PRICES = {"basic": "$5 per seat per month", "pro": "$10 per seat per month"}
ORDERS: list[str] = []


@nb.tool
def lookup_price(plan: str) -> str:
    """Look up the monthly price of a plan.

    Args:
        plan: the plan's name, basic or pro
    """
    time.sleep(0.05)
    return PRICES.get(plan, "unknown plan")


@nb.tool(idempotent=True)
def fetch_quote(vendor: str) -> str:
    """Fetch a vendor's annual quote (safe to repeat).

    Args:
        vendor: the vendor's name
    """
    time.sleep(0.05)
    return f"{vendor}: $1,080 per seat per year"


@nb.tool(confirm=True)
def create_order(item: str, qty: int) -> str:
    """Create a purchase order (a person approves it first).

    Args:
        item: what to buy
        qty: how many
    """
    ORDERS.append(f"{qty} x {item}")
    return f"order #{len(ORDERS):04d} created for {qty} x {item}"


def _script(messages: list[nb.Message]) -> Any:
    """The scripted model: decides from the conversation so far."""
    start = max(
        i for i, m in enumerate(messages) if m.role == "user" and m.text in {COMPARE, ORDER, QUOTES}
    )
    task = messages[start].text
    since = messages[start + 1 :]
    results = [m for m in since if m.role == "tool"]
    steered = any(m.role == "user" and m.text == STEER for m in since)
    if task == COMPARE:
        if not results:
            return [
                nb.ToolCall("lookup_price", {"plan": "basic"}),
                nb.ToolCall("lookup_price", {"plan": "pro"}),
            ]
        answer = f"Basic costs {PRICES['basic']}; pro costs {PRICES['pro']}."
        if steered:
            answer += " Paying annually takes 10% off either plan."
        return answer
    if task == ORDER:
        if not results:
            return nb.ToolCall("create_order", {"item": "pro seat", "qty": 2})
        return f"Done: {results[-1].text}."
    if not results:
        return nb.ToolCall("fetch_quote", {"vendor": "Acme"})
    return (
        "Acme quotes $1,080 per seat per year, which is $90 a month: cheaper than the "
        "monthly pro price of $10 only if you commit for the full year. " * 3
    ).strip()


def _wait_for(session: nb.Session, predicate: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("the demo waited too long; is the store shared with another run?")
        session.log.store.wait_for_head(session.key, session.log.head(), 0.05)


def _timeline(session: nb.Session) -> None:
    """A text timeline of turns and runs, from the committed log."""
    events = list(session.log.scan())
    t0 = events[0].occurred_at
    runs: dict[str, dict[str, Any]] = {}
    for e in events:
        if e.type == "run/start" and e.run_id:
            runs[e.run_id] = {
                "turn": e.turn_id,
                "start": e.occurred_at,
                "reason": e.payload["reason"],
                "status": "running",
            }
        elif e.type == "run/end" and e.run_id in runs:
            runs[e.run_id].update(end=e.occurred_at, status=e.payload["status"])
    inputs = {t.turn_id: t.input for t in session.tasks()}
    print(f"\n  {'turn':<34} {'run started by':<15} {'status':<12} {'from':>7} {'to':>7}")
    for r in runs.values():
        start = (r["start"] - t0).total_seconds()
        end = (r["end"] - t0).total_seconds() if "end" in r else float("nan")
        print(
            f"  {inputs.get(r['turn'], '')[:34]:<34} {r['reason']:<15} {r['status']:<12} "
            f"{start:>6.2f}s {end:>6.2f}s"
        )


def _export(session: nb.Session, out: Callable[[str], None]) -> None:
    """Export the session to Parquet and show what an analyst gets back."""
    try:
        from agentnb import analysis
        from agentnb.export import Exporter, ParquetSink
    except ImportError:
        out('\n(export skipped: pip install "agentnb[export]" to see it)')
        return
    url = session.runtime.store.url
    root = (
        os.path.join(os.path.dirname(url.removeprefix("sqlite:///")) or ".", "export")
        if url.startswith("sqlite:///")
        else tempfile.mkdtemp(prefix="agentnb-export-")
    )
    delivered = Exporter(session.log, ParquetSink(root), progress=False).drain()
    out(f"\nexported {delivered} new events to {root} (Parquet); the turns dataframe:")
    turns = analysis.turns(root)
    turns = turns[turns["session_id"] == session.key.session_id]
    columns = ["input", "status", "runs", "tool_calls", "steers", "interactions", "interrupts"]
    out(turns[columns].to_string(index=False))


def run_demo(store: str | None = None, out: Callable[[str], None] = print) -> nb.Session:
    """Run the demo on ``store`` (default: SQLite under ./.agentnb/); returns the session."""
    model = nb.ScriptedModel(_script, chunk_size=6, chunk_delay=0.01)
    agent = nb.Agent(
        name="Cost Assistant",
        agent_id="cost-assistant",
        model=model,
        tools=[lookup_price, fetch_quote, create_order],
        instructions="Answer cost questions briefly, with numbers.",
    )
    runtime = nb.Runtime(agent, store=store)
    try:
        existing = runtime.sessions(user_id="demo")
        session = runtime.session(f"demo-{len(existing) + 1:03d}", user_id="demo")
        out(f"store: {runtime.store.url}\nsession: {session.key}\n")

        first = session.submit(COMPARE)
        session.submit(ORDER)
        out(
            f"submitted two tasks; the second waits in the queue: "
            f"{[t.status for t in session.tasks()]}"
        )
        _wait_for(session, lambda: session.inspect().active_runs != ())
        steer = session.steer(STEER, task=first.turn_id)
        out(f"steered the running task ({steer.input_id})")
        done = first.wait(timeout=30)
        out(f"task 1 {done.status}: {done.output}")

        _wait_for(session, lambda: bool(session.pending()))
        ((request_id, request),) = session.pending().items()
        out(f"task 2 waits for approval: {request.prompt}")
        approved = session.respond(request_id, nb.Answer.approve()).wait(timeout=30)
        out(f"approved; task 2 {approved.status}: {approved.output}")

        third = session.submit(QUOTES)
        _wait_for(
            session,
            lambda: any(
                e.type == "model/chunk" and e.turn_id == third.turn_id and e.payload.get("text")
                for e in session.log.read_after(max(0, session.log.head() - 50), 50)
            ),
        )
        session.interrupt()
        stopped = third.wait(timeout=30)
        out(f"interrupted task 3 while it streamed: {stopped.status}")
        resumed = session.resume(third.turn_id).wait(timeout=30)
        out(
            f"resumed task 3 (same turn, new run): {resumed.status}, "
            f"{len(resumed.output or '')} characters"
        )

        out(
            f"\n{session.log.head()} events committed; tasks: "
            f"{[(t.input[:20], t.status, len(t.run_ids)) for t in session.tasks()]}"
        )
        _timeline(session)
        _export(session, out)
        return session
    finally:
        runtime.close()
