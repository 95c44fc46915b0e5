"""Child program for ``test_crash``: runs one task until the parent kills it with SIGKILL.

Run as ``python -m tests.recovery._crash_child CASE DB SIDE_FILE`` from the repository root.
The child opens a runtime on the SQLite file ``DB``, submits one task and follows the committed
log on a separate thread, printing ``SEQ <n> <type>`` for every committed event it sees (so the
parent knows what was acknowledged as committed). It also prints ``OWNER <owner>`` (its
runtime's lease owner) first, and, in the approval case, ``PENDING <request_id>`` once the
approval request is committed. Then it waits to be killed; it exits by itself after
``DEADLINE`` seconds or when its stdin closes, so a parent that dies never leaves it behind.

The tools and the agent live here so the parent's recovering runtime uses the very same ones.
Tools write ``START <call_id>`` before their effect and ``DONE <call_id>`` (the effect itself)
to the side file, each line fsynced, so the parent can count effects across both processes.
"""

from __future__ import annotations

import faulthandler
import os
import random
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import agentnb as nb

CASES = ("stream", "idempotent", "plain", "approval")
LEASE = 1.0
"""Seconds of the execution lease in every process of these trials. Renewed every third of
it, so a child starved of CPU for over 0.67 s loses it and stops by itself (fenced); at 0.5 s
that happened on a loaded two-core machine, and the trial then never reaches its kill."""
RECOVERING_LEASE = 10.0
"""Seconds of the lease of the runtime that recovers after the kill (the default). It takes
over at once (the holder is known dead), so nothing waits on its length; a 1 s lease there
could run out while the loaded machine starves its renewal, and the recovering runtime would
then be fenced mid-turn: a failure of the trial, not of recovery."""
DEADLINE = 60.0
"""Seconds after which a child that was never killed gives up on its own."""
STUCK = 10.0
"""Seconds after which a child still alive dumps its threads' stacks to stderr (diagnosis)."""
AGENT_ID = "crash-agent"
SESSION_ID = "crash"
USER_ID = "u"
KEY = nb.SessionKey("default", USER_ID, AGENT_ID, SESSION_ID)
TASK = "do the thing"
LONG_ANSWER = "a long answer, streamed one character at a time. " * 12
"""About 600 characters: at 5 ms per chunk the stream lasts about three seconds, so a kill
after the stream's first commits comes mid-stream even when a loaded machine lets the parent
read the child's lines late (at half that, one trial in CI saw the stream end first)."""
TOOL_NAME = {"idempotent": "fetch", "plain": "order", "approval": "order"}
ITEM = "widget-" * 8
"""A long tool argument: its pieces stream for a few hundred ms before the tool dispatches."""


def side_lines(side: Path) -> list[tuple[str, str]]:
    """The side file as ``(word, call_id)`` pairs; a line cut off by the kill is ignored."""
    if not side.exists():
        return []
    # The last piece is "" after a complete line, or a line the kill cut off.
    pairs = [line.split() for line in side.read_text().split("\n")[:-1]]
    return [(word, call_id) for word, call_id in pairs]


def _append(side: Path, line: str) -> None:
    fd = os.open(side, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"{line}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def make_tools(case: str, side: Path) -> list[nb.Tool]:
    """The case's tool: START, a random pause, DONE (the effect), a random pause, return."""
    if case == "stream":
        return []

    def effect(ctx: nb.ToolContext) -> str:
        _append(side, f"START {ctx.call_id}")
        time.sleep(random.uniform(0.0, 0.3))
        _append(side, f"DONE {ctx.call_id}")
        # The reply travelling back: the effect happened, its result is not committed yet.
        time.sleep(random.uniform(0.0, 0.1))
        return f"done by {os.getpid()}"

    def fetch(item: str, ctx: nb.ToolContext) -> str:
        """Fetch a quote (safe to repeat)."""
        return effect(ctx)

    def order(item: str, ctx: nb.ToolContext) -> str:
        """Place an order (not safe to repeat)."""
        return effect(ctx)

    if case == "idempotent":
        return [nb.tool(fetch, idempotent=True)]
    return [nb.tool(order, confirm=case == "approval")]


def make_script(case: str, answer: str) -> Callable[[list[nb.Message]], Any]:
    """Tool cases: call the tool until a tool result is in the context, then answer."""

    def script(messages: list[nb.Message]) -> Any:
        if case == "stream" or messages[-1].role == "tool":
            return answer
        return nb.ToolCall(TOOL_NAME[case], {"item": ITEM})

    return script


def make_agent(case: str, side: Path, model: nb.Model) -> nb.Agent:
    return nb.Agent(
        name="Crash", agent_id=AGENT_ID, model=model, tools=make_tools(case, side), max_steps=5
    )


_SAY = threading.Lock()


def say(*words: object) -> None:
    # One lock for both threads that print: print() writes word by word, so two threads
    # printing at once could interleave their words into one garbled line.
    with _SAY:
        print(*words, flush=True)


def _follow(session: nb.Session) -> None:
    for event in session.log.follow(after=0):
        say("SEQ", event.seq, event.type)


def _exit_when_orphaned() -> None:
    sys.stdin.read()  # returns when the parent closes our stdin or goes away
    os._exit(2)


def main() -> None:
    case, db, side = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    if case not in CASES:
        raise SystemExit(f"unknown case {case!r}; one of {CASES}")
    threading.Thread(target=_exit_when_orphaned, daemon=True).start()
    faulthandler.dump_traceback_later(STUCK)
    model = nb.ScriptedModel(
        make_script(case, LONG_ANSWER if case == "stream" else "all done"),
        chunk_size=1,
        chunk_delay=0.005,
    )
    runtime = nb.Runtime(make_agent(case, side, model), store=f"sqlite:///{db}", lease_ttl=LEASE)
    session = runtime.session(SESSION_ID, user_id=USER_ID)
    say("OWNER", runtime.owner)
    threading.Thread(target=_follow, args=(session,), daemon=True).start()
    session.submit(TASK)
    deadline = time.monotonic() + DEADLINE
    if case == "approval":
        while not session.pending() and time.monotonic() < deadline:
            time.sleep(0.01)
        for request_id in session.pending():
            say("PENDING", request_id)
    time.sleep(max(0.0, deadline - time.monotonic()))
    os._exit(1)  # never killed: the parent is gone or broken


if __name__ == "__main__":
    main()
