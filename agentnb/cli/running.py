"""Running agents: ``demo`` (the scripted demo) and ``worker`` (a headless runtime)."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from datetime import datetime

import agentnb as nb
from agentnb.cli.args import _STORE_HELP, _UNSET, AddCommand, _limit, store_url
from agentnb.cli.format import EXIT_OK, cut
from agentnb.errors import (
    AgentnbError,
    InvalidInput,
)
from agentnb.live import LiveEvent
from agentnb.ops.cli import add_schedule_option
from agentnb.stores import split_url


def _demo(args: argparse.Namespace) -> int:
    """Run the scripted demo session on the embedded default store."""
    from agentnb.demo import run_demo

    run_demo(args.store)
    return EXIT_OK


def _worker(args: argparse.Namespace) -> int:
    """Run a headless runtime that executes queued work of the agent's sessions.

    SIGTERM and SIGINT stop it cooperatively: the runs it executes are interrupted at their
    next boundary, their ends committed and their leases released (a turn stopped so, with
    nothing uncertain, is resumed by the next worker that claims its session); then it
    exits 0. A second signal exits at once.
    """
    agent = _load_agent(args.agent)
    limits = _worker_limits(args)
    store = _worker_store(args.store, args.concurrency)
    try:
        runtime = nb.Runtime(
            agent,
            store=store,
            auto_resume=_AUTO_RESUME[args.auto_resume],
            lease_ttl=args.lease,
            accept_agent_change=args.accept_agent_change,
            limits=limits,
            schedules=args.schedules,
        )
    except BaseException:
        if isinstance(store, nb.SessionStore):
            store.close()
        raise
    stop = threading.Event()

    def on_signal(*_: object) -> None:
        if stop.is_set():  # a second signal: leave now; the runs are recovered later
            print("worker: stopping at once (second signal)", file=sys.stderr, flush=True)
            os._exit(130)
        stop.set()

    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, on_signal)
    print(f"worker for {agent.agent_id!r} on {runtime.store.url}; Ctrl-C to stop", flush=True)
    report = None if args.quiet else _TaskLines(runtime)
    try:
        runtime.serve(poll=args.poll, stop=stop, concurrency=args.concurrency)
    except KeyboardInterrupt:
        pass
    finally:
        runtime.close()
        if report is not None:
            report.close()
        if isinstance(store, nb.SessionStore):
            store.close()
    return EXIT_OK


def _load_agent(spec: str, command: str = "worker") -> nb.Agent:
    """``module:attribute``, imported with the current directory first on the import path
    (as uvicorn does), so ``agentnb worker --agent mymodule:agent`` works from the folder
    that holds ``mymodule.py``. ``command`` names the command in the advice."""
    import importlib

    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise InvalidInput(
            f"--agent takes module:attribute, got {spec!r} (the demo's: agentnb.demo:agent)"
        )
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.insert(0, here)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InvalidInput(
            f"--agent {spec}: cannot import {module_name} ({exc}); run agentnb {command} from "
            "the folder that holds the module, or put that folder on PYTHONPATH (the demo's "
            "agent: --agent agentnb.demo:agent)"
        ) from None
    try:
        agent = getattr(module, attr)
    except AttributeError:
        agents = sorted(k for k, v in vars(module).items() if isinstance(v, nb.Agent))
        found = f"its agents: {', '.join(agents)}" if agents else "it defines no nb.Agent"
        raise InvalidInput(
            f"--agent {spec}: {module_name} has no attribute {attr!r} ({found})"
        ) from None
    if not isinstance(agent, nb.Agent):
        raise InvalidInput(f"--agent {spec}: {attr} is a {type(agent).__name__}, not an nb.Agent")
    return agent


_LIMIT_FLAGS = {
    "max_queued": "max_queued_commands",
    "max_steers": "max_pending_steers",
    "max_recovery_events": "max_recovery_events",
    "max_recovery_bytes": "max_recovery_bytes",
    "max_session_events": "max_session_events",
    "max_session_bytes": "max_session_bytes",
    "max_reply_chars": "max_reply_chars",
    "max_tool_calls": "max_tool_calls_per_reply",
    "max_tool_result_chars": "max_tool_result_chars",
}
"""``agentnb worker`` flag (``--max-queued``...) -> the ``nb.Limits`` field it sets."""


def _worker_limits(args: argparse.Namespace) -> nb.Limits:
    """The ``nb.Limits`` of the worker's flags (defaults for those not given)."""
    given = {
        field: getattr(args, flag)
        for flag, field in _LIMIT_FLAGS.items()
        if getattr(args, flag) is not _UNSET
    }
    return nb.Limits(**given)


class _TaskLines:
    """One line on stdout when the worker starts a task's run and one when that run ends:
    when, whose session, the status and the task's own text (``--quiet`` turns it off)."""

    def __init__(self, runtime: nb.Runtime) -> None:
        self._runtime = runtime
        self._events = runtime.all_events()
        self._started: dict[str, float] = {}
        self._thread = threading.Thread(target=self._run, name="agentnb-worker-lines", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._events.close()
        self._thread.join(2.0)

    def _run(self) -> None:
        for event in self._events:
            if not isinstance(event, LiveEvent) or event.kind != "status":
                continue
            status, key, run_id = event.data.get("status"), event.session, event.run_id or ""
            if key is None or not isinstance(status, str):
                continue
            now = time.monotonic()
            if status == "running":
                self._started[run_id] = now
                tail = ""
            else:
                began = self._started.pop(run_id, None)
                tail = f"  ({now - began:.1f} s)" if began is not None else ""
            text = self._task_text(key, event.turn_id, event.data.get("task"))
            when = datetime.now().astimezone().strftime("%H:%M:%S")
            print(f"{when}  {key.user_id}/{key.session_id}  {status:<11} {text}{tail}", flush=True)

    def _task_text(self, key: nb.SessionKey, turn_id: str | None, sent: object) -> str:
        """The task's own text on one line: as the notification brought it (``sent``), else
        read back from the session (its turn id when it cannot be read). Reading back costs
        store reads for every line, a few statements per turn on PostgreSQL."""
        if isinstance(sent, str):
            return f'"{cut(sent, 60)}"'
        try:
            session = self._runtime.open(key.session_id, user_id=key.user_id)
            task = next((t for t in session.tasks() if t.turn_id == turn_id), None)
        except AgentnbError:
            task = None
        if task is None:
            return str(turn_id)
        return f'"{cut(task.input, 60)}"'


_AUTO_RESUME: dict[str, bool | str] = {"safe": True, "unknown": "unknown", "off": False}
"""``worker --auto-resume``: what a worker does with turns a crash cut off."""


def _worker_store(url: str | None, concurrency: int) -> str | nb.SessionStore | None:
    """The worker's store: on PostgreSQL, a pool with a connection for each session it
    executes at once, plus two (lease renewals, claims), so that sessions do not queue for
    a connection between their commits; any other URL as given."""
    if url is None or split_url(url).scheme.lower() not in ("postgresql", "postgres"):
        return url
    from agentnb.stores.postgres import PostgresStore  # the postgres extra

    return PostgresStore(url, pool_size=max(10, concurrency + 2))


def demo_command(command: AddCommand) -> None:
    """``demo``."""
    demo = command(
        "demo",
        _demo,
        "run the demo on the embedded default store",
        "Run the scripted, offline demo; running it again continues the same store. "
        "Example: agentnb demo --store sqlite:///.agentnb/demo.sqlite",
    )
    demo.add_argument("--store", default=None, type=store_url, help=_STORE_HELP)


def worker_command(command: AddCommand) -> None:
    """``worker``, with its limits."""
    worker = command(
        "worker",
        _worker,
        "execute queued work of an agent's sessions (headless runtime)",
        "Run a worker; crashed turns with nothing uncertain are resumed, and so are turns "
        "a worker's SIGTERM stopped (by the next worker). It claims sessions "
        "with queued work, so many workers share a store: processes of one machine on an "
        "SQLite file, processes and machines on PostgreSQL. SIGTERM stops it cleanly. "
        "--agent is imported with the current directory first on the import path (as "
        "uvicorn does), so a module in the folder you start it from is found. It prints a "
        "line when a task's run starts and when it ends (--quiet: none). "
        "Example: agentnb worker --store postgresql://app@db/agentnb "
        "--agent myproject.agents:cost_agent --concurrency 8 --max-queued 16",
    )
    worker.add_argument("--store", default=None, type=store_url, help=_STORE_HELP)
    add_schedule_option(worker)
    worker.add_argument(
        "--agent",
        required=True,
        help="module:attribute of an nb.Agent (the current directory is on the import path)",
    )
    worker.add_argument(
        "--poll",
        type=float,
        default=1.0,
        help="seconds between fallback claims (woken by NOTIFY on PostgreSQL, by a watcher "
        "of the file on SQLite)",
    )
    worker.add_argument("--lease", type=float, default=10.0, help="lease seconds")
    worker.add_argument(
        "--auto-resume",
        choices=sorted(_AUTO_RESUME),
        default="safe",
        help="turns a crash cut off: 'safe' resumes them when no tool call's outcome is "
        "unknown (idempotent calls run again); 'unknown' records such calls as unknown, "
        "tells the model and resumes; 'off' leaves them to a person (default: safe)",
    )
    worker.add_argument(
        "--concurrency", type=int, default=16, help="sessions executing at once (default 16)"
    )
    worker.add_argument(
        "--accept-agent-change",
        action="store_true",
        help="run sessions bound to another version of the agent (the change is recorded); "
        "without it their work is rejected with what changed",
    )
    worker.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="no line per task (by default one when a run starts and one when it ends)",
    )
    bounds = worker.add_argument_group(
        "limits", "bounds on each session (nb.Limits; a number, or none for no bound)"
    )
    for flag, field, what in (
        ("--max-queued", "max_queued_commands", "commands waiting in one session's inbox"),
        ("--max-steers", "max_pending_steers", "unapplied steering inputs of one turn"),
        ("--max-recovery-events", "max_recovery_events", "events replayed to open a session"),
        ("--max-recovery-bytes", "max_recovery_bytes", "bytes replayed to open a session"),
        ("--max-session-events", "max_session_events", "events one session may hold"),
        ("--max-session-bytes", "max_session_bytes", "bytes one session may hold"),
        ("--max-reply-chars", "max_reply_chars", "characters of one model reply"),
        ("--max-tool-calls", "max_tool_calls_per_reply", "tool calls in one model reply"),
        ("--max-tool-result-chars", "max_tool_result_chars", "characters of one tool result"),
    ):
        default = getattr(nb.Limits(), field)
        shown = "none" if default is None else f"{default:_}"
        bounds.add_argument(
            flag, type=_limit, default=_UNSET, metavar="N", help=f"{what} (default {shown})"
        )
