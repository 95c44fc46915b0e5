"""Child program for ``test_subagent_crash``: a coordinator and its sub-agent, killed with SIGKILL.

Run as ``python -m tests.recovery._subagent_child POINT DB SIDE_FILE`` from the repository
root. It opens a runtime on the SQLite file ``DB`` and submits one task to the coordinator,
whose model calls the ``worker`` sub-agent; the worker calls its ``effect`` tool, which
appends one line per execution to ``SIDE_FILE`` (fsynced): the side effects the parent test
counts. The process kills itself with SIGKILL at ``POINT``:

- ``spawned``: right after the parent committed ``subagent/spawned``, before the child exists;
- ``tool``: inside the child's tool, after its effect, before it returns;
- ``completed``: after the child's task completed, before the parent records the result;
- ``confirm``: not at all: the worker's tool needs a person's approval; the program prints
  ``SUSPENDED`` once the parent waits for it, and the test kills it.

The agents live here, so the test's recovering runtime uses the very same ones.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import agentnb as nb

POINTS = ("spawned", "tool", "completed", "confirm")
LEASE = 1.0
"""Seconds of the child process's lease (renewed every third of it)."""
RECOVERING_LEASE = 10.0
"""The lease of the runtime that recovers after the kill: it takes over at once (the holder
is known dead), and a short one could run out while a loaded machine starves its renewal."""
DEADLINE = 60.0
"""Seconds after which a child that was never killed gives up on its own."""
SESSION_ID = "boss"
USER_ID = "u"
KEY = nb.SessionKey("default", USER_ID, "coordinator", SESSION_ID)
ANSWER = "the worker is done"


def _append(side: Path, line: str) -> None:
    fd = os.open(side, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"{line}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def side_lines(side: Path) -> list[str]:
    """The call ids the effect ran for, one per execution."""
    if not side.exists():
        return []
    return [line.split()[1] for line in side.read_text().split("\n")[:-1]]


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def make_agent(side: Path, point: str, *, killing: bool = False) -> nb.Agent:
    """The coordinator and its worker; with ``killing``, the worker's tool dies at ``tool``."""

    def effect(x: str, ctx: nb.ToolContext) -> str:
        """Do the work (an effect outside)."""
        _append(side, f"RUN {ctx.call_id} {os.getpid()}")
        if killing and point == "tool":
            _die()
        return f"effect for {x}"

    tool = nb.tool(effect, confirm=point == "confirm")

    def worker_script(messages: list[nb.Message]) -> Any:
        if not any(m.role == "tool" for m in messages):
            return nb.ToolCall("effect", {"x": "job"})
        return ANSWER

    worker = nb.Agent(
        name="Worker", agent_id="worker", model=nb.ScriptedModel(worker_script), tools=[tool]
    )

    def boss_script(messages: list[nb.Message]) -> Any:
        done = [m.text for m in messages if m.role == "tool"]
        if not done:
            return nb.ToolCall("worker", {"task": "do the job"})
        return f"coordinator saw: {done[0]}"

    return nb.Agent(
        name="Coordinator",
        agent_id="coordinator",
        model=nb.ScriptedModel(boss_script),
        tools=[worker.as_tool()],
    )


def main() -> None:
    point, db, side = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    assert point in POINTS, point
    faulthandler.dump_traceback_later(20.0, exit=False)
    # Leave if the test goes away (its end of stdin closes), or after the deadline.
    threading.Thread(target=lambda: (sys.stdin.read(), os._exit(3)), daemon=True).start()
    threading.Timer(DEADLINE, lambda: os._exit(4)).start()
    from agentnb.runtime import subagents

    if point == "spawned":
        subagents.SubagentCalls._start = lambda *_: _die()  # type: ignore[method-assign]
    elif point == "completed":
        subagents.SubagentCalls._record = lambda *_: _die()  # type: ignore[method-assign]
    agent = make_agent(side, point, killing=True)
    runtime = nb.Runtime(agent, store=f"sqlite:///{db}", lease_ttl=LEASE)
    session = runtime.session(SESSION_ID, user_id=USER_ID)
    outcome = session.run("coordinate the job", timeout=DEADLINE)
    print(outcome.status.upper(), flush=True)
    time.sleep(DEADLINE)


if __name__ == "__main__":
    main()
