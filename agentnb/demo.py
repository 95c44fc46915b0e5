"""``agentnb demo``: a scripted multi-tool session that shows every operation, offline.

A cost assistant compares plans (two tool calls), while a second task waits in the queue; the
first task is steered mid-run; the second needs an approval before it orders; a third is
interrupted while it streams and then resumed. Then the log is shown as a timeline, exported
to Parquet, and the demo says where the data is and what to try next. Each run adds one new
session to the store (``demo-001``, ``demo-002``, ...) and leaves earlier ones as they were.
Nothing leaves the machine: the model is a ``ScriptedModel``.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import agentnb as nb
from agentnb.errors import install_hint
from agentnb.events import ModelChunk, RunEnd, RunStart
from agentnb.stores import default_store_url

COMPARE = "Compare the basic and pro plans."
ORDER = "Order 2 pro seats."
QUOTES = "Fetch a quote from Acme and summarise it."
STEER = "Mention the annual discount."
BINDER_URL = "https://mybinder.org/v2/gh/agentnb/agentnb/HEAD?urlpath=lab/tree/notebooks"
"""The notebooks on Binder (``binder/``): JupyterLab opened at ``notebooks/``."""

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


HELP = (
    "I am the demo's scripted cost assistant (offline, no real model), so I know three "
    f"tasks: “{COMPARE}”, “{ORDER}” and “{QUOTES}”. Send one of them."
)
"""The answer to any other message (the agent served by ``make serve`` gets those)."""


def _script(messages: list[nb.Message]) -> Any:
    """The scripted model: decides from the conversation so far."""
    asked = [i for i, m in enumerate(messages) if m.role == "user" and m.text != STEER]
    known = [i for i in asked if messages[i].text in {COMPARE, ORDER, QUOTES}]
    if not known or asked[-1] > known[-1]:
        return HELP
    start = known[-1]
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


Out = Callable[[str], None]
_ID = re.compile(r"demo-(\d+)")


def _short(text: str | None, width: int = 60) -> str:
    """``text`` on one line, cut to ``width`` characters with "…" when longer."""
    flat = " ".join((text or "").split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _wait_for(session: nb.Session, predicate: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("the demo waited too long; is the store shared with another run?")
        session.log.store.wait_for_head(session.key, session.log.head(), 0.05)


def _streaming(session: nb.Session, turn_id: str) -> bool:
    """Whether some text of ``turn_id``'s reply is committed among the latest events."""
    recent = session.log.read_after(max(0, session.log.head() - 50), 50)
    return any(
        e.turn_id == turn_id and isinstance(e.data, ModelChunk) and e.data.text for e in recent
    )


def _store_path(url: str) -> str | None:
    """The file an ``sqlite:`` URL names; None for other stores."""
    if not url.startswith("sqlite:"):
        return None
    path = urlsplit(url).path
    return path[1:] if path.startswith("/") else path


def _next_session_id(store: nb.SessionStore, agent_id: str) -> tuple[str, int]:
    """The next free ``demo-NNN`` id, and how many demo sessions the store holds already."""
    earlier = store.list_sessions(user_id="demo", agent_id=agent_id)
    numbers = [int(m.group(1)) for r in earlier if (m := _ID.fullmatch(r.key.session_id))]
    return f"demo-{max(numbers, default=0) + 1:03d}", len(earlier)


def _status_words(task: nb.Task) -> str:
    return {
        "queued": "waits in the queue",
        "running": "is running",
        "suspended": "waits for a person",
        "interrupted": "was interrupted",
    }.get(task.status, task.status)


def _timeline(session: nb.Session, out: Out) -> None:
    """Each run of each task on a time axis, read back from the committed log."""
    runs: dict[str, dict[str, Any]] = {}
    t0 = None
    for event in session.log.scan():
        t0 = t0 or event.occurred_at
        data = event.data
        if isinstance(data, RunStart) and event.run_id:
            runs[event.run_id] = {
                "turn": event.turn_id,
                "start": event.occurred_at,
                "reason": data.reason,
                "status": "running",
            }
        elif isinstance(data, RunEnd) and event.run_id in runs:
            runs[event.run_id].update(end=event.occurred_at, status=data.status)
    if t0 is None:
        return
    numbers = {t.turn_id: i for i, t in enumerate(session.tasks(), 1)}
    out("\nTimeline, read back from the log (seconds since the session's first event):")
    out(f"  {'task':<6} {'run started by':<15} {'outcome':<12} {'from':>6} {'to':>6}")
    for run in runs.values():
        start = (run["start"] - t0).total_seconds()
        end = f"{(run['end'] - t0).total_seconds():>5.2f}s" if "end" in run else "     -"
        out(
            f"  {numbers.get(run['turn'], '?')!s:<6} {run['reason']:<15} {run['status']:<12} "
            f"{start:>5.2f}s {end}"
        )


def _export(session: nb.Session, out: Out) -> str | None:
    """Export the session to Parquet and show what an analyst gets back; returns the folder."""
    try:
        from agentnb import analysis  # optional: the export extra
        from agentnb.export import Exporter, ParquetSink
    except ImportError:
        out(f"\n(Export skipped: {install_hint('export')} to see it.)")
        return None
    path = _store_path(session.runtime.store.url)
    root = (
        os.path.join(os.path.dirname(path) or ".", "export")
        if path is not None
        else tempfile.mkdtemp(prefix="agentnb-export-")
    )
    delivered = Exporter(session.log, ParquetSink(root), progress=False).drain()
    out(f"\nExported this session's {delivered} events to Parquet in {root}/.")
    out("The analyst's turns table (agentnb.analysis.turns), one row per task:")
    turns = analysis.turns(root)
    turns = turns[turns["session_id"] == session.key.session_id]
    out(f"  {'task':<44} {'status':<10} {'runs':>4} {'tools':>5} {'steers':>6} {'requests':>8}")
    for row in turns.itertuples(index=False):
        out(
            f"  {_short(row.input, 44):<44} {row.status:<10} {row.runs:>4} {row.tool_calls:>5} "
            f"{row.steers:>6} {row.interactions:>8}"
        )
    return root


def _agentnb_command() -> str:
    """How to call the command line from here: ``agentnb`` when it is on PATH, else its path
    (``make demo`` leaves it in ``.venv/bin/``), else ``python -m agentnb``."""
    if shutil.which("agentnb"):
        return "agentnb"
    script = os.path.join(os.path.dirname(sys.executable), "agentnb")
    if os.path.isfile(script):
        relative = os.path.relpath(script)
        return script if relative.startswith("..") else relative
    return f"{os.path.basename(sys.executable)} -m agentnb"


def _next_steps(session: nb.Session, export_root: str | None, out: Out) -> None:
    agentnb = _agentnb_command()
    url = session.runtime.store.url
    path = _store_path(url)
    store_flag = "" if url == default_store_url() else f" --store {url}"
    key = session.key
    out("\nWhere the data is:")
    if path is not None:
        out(f"  the store:  {path} (SQLite; every session and every committed event)")
    else:
        out(f"  the store:  {url} (in this process only: gone now that the demo ended)")
    if export_root is not None:
        out(f"  the export: {export_root}/ (Parquet, for pandas, DuckDB and the audit queries)")
    out("\nNext, try:")
    if path is not None:
        out(f"  {agentnb} sessions{store_flag}")
        out(f"  {agentnb} show {key.session_id} --user {key.user_id}{store_flag}")
        out(f"  {agentnb} tail {key.session_id} --user {key.user_id} -n 30{store_flag}")
    if export_root is not None:
        out(f"  {agentnb} query approvals --source {export_root}")
        out(f"  {agentnb} query --list")
    out("  make serve: this agent in the browser chat page, on the same store (it prints a")
    out("  sign-in token for the page)")
    out("  make lab: the notebooks (notebooks/01-quickstart.ipynb and the others) in JupyterLab,")
    out("  installed into the same .venv with the widgets; or online, on Binder:")
    out(f"  {BINDER_URL}")


def _introduce(session: nb.Session, where: str, *, existed: bool, earlier: int, out: Out) -> None:
    """Say which store this run uses (new, or continued) and what the session key is."""
    sid = session.key.session_id
    if earlier:
        sessions = f"{earlier} demo session{'s' if earlier != 1 else ''}"
        out(
            f"The store {where} already holds {sessions}: this run continues the same store\n"
            f"and adds session {sid}; the earlier ones stay exactly as they were."
        )
    elif existed:
        out(f"The store {where} already exists: this run continues it and adds session {sid}.")
    else:
        out(f"A new store: {where}.")
    key = session.key
    out(
        f"The session key is {key}:\n"
        f"  namespace {key.namespace!r} / user {key.user_id!r} / agent {key.agent_id!r} / "
        f"session {key.session_id!r}.\n"
        "Every fact of this conversation is a committed event in one ordered log under that "
        "key.\n"
    )


def _quote(text: str | None, width: int = 60) -> str:
    return f'"{_short(text, width)}"'


def demo_agent() -> nb.Agent:
    """The demo's cost assistant: three tools (one asks a person first) on a scripted model
    that answers the demo's three tasks, and says which they are to any other message."""
    return nb.Agent(
        name="Cost Assistant",
        agent_id="cost-assistant",
        model=nb.ScriptedModel(_script, chunk_size=6, chunk_delay=0.01),
        tools=[lookup_price, fetch_quote, create_order],
        instructions="Answer cost questions briefly, with numbers.",
    )


agent = demo_agent()
"""The demo's agent, importable: ``agentnb serve --agent agentnb.demo:agent`` (``make
serve``) and ``agentnb worker --agent agentnb.demo:agent`` serve it."""


def run_demo(store: str | None = None, out: Out = print) -> nb.Session:
    """Run the demo on ``store`` (default: SQLite under ./.agentnb/); returns the session."""
    agent = demo_agent()
    path = _store_path(store or default_store_url())
    existed = path is not None and os.path.exists(path)
    runtime = nb.Runtime(agent, store=store)
    try:
        session_id, earlier = _next_session_id(runtime.store, agent.agent_id)
        session = runtime.session(session_id, user_id="demo")
        out("agentnb demo: a cost assistant with three tools, on a scripted offline model.\n")
        _introduce(session, path or runtime.store.url, existed=existed, earlier=earlier, out=out)

        first = session.submit(COMPARE)
        second = session.submit(ORDER)
        out("1. Submitted two tasks at once:")
        out(f"   task 1: {_quote(COMPARE)}\n   task 2: {_quote(ORDER)}")
        _wait_for(session, lambda: session.inspect().active_runs != ())
        tasks = {t.turn_id: t for t in session.tasks()}
        out(
            f"   Task 1 {_status_words(tasks[first.turn_id])}; task 2 "
            f"{_status_words(tasks[second.turn_id])} until task 1 is done."
        )
        session.steer(STEER, task=first.turn_id)
        out(f"2. Steered task 1 while it runs: {_quote(STEER)} (applied at its next step).")
        done = first.wait(timeout=30)
        out(f"   Task 1 {done.status}: {_quote(done.output, 70)}")

        _wait_for(session, lambda: bool(session.pending()))
        ((request_id, request),) = session.pending().items()
        arguments = ", ".join(f"{k}={v!r}" for k, v in request.arguments.items())
        out(
            f"3. Task 2 started, and stopped to ask a person first: "
            f"{request.tool_name}({arguments})?"
        )
        approved = session.respond(request_id, nb.Answer.approve()).wait(timeout=30)
        out(f"   Approved. Task 2 continued in a new run and {approved.status}:")
        out(f"   {_quote(approved.output, 90)}")

        third = session.submit(QUOTES)
        out(f"4. Task 3: {_quote(QUOTES)}")
        _wait_for(session, lambda: _streaming(session, third.turn_id))
        session.interrupt()
        stopped = third.wait(timeout=30)
        out(f"   Interrupted while its answer was streaming: the task is {stopped.status}.")
        resumed = session.resume(third.turn_id).wait(timeout=30)
        out(
            f"   Resumed: the same task continued in a new run and {resumed.status}, "
            f"with a {len(resumed.output or '')}-character answer:"
        )
        out(f"   {_quote(resumed.output, 90)}")

        out(f"\n{session.log.head()} events are committed in this session's log.")
        _timeline(session, out)
        export_root = _export(session, out)
        _next_steps(session, export_root, out)
        return session
    finally:
        runtime.close()
