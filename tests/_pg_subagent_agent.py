"""The agents the PostgreSQL sub-agent tests run, importable as
``tests._pg_subagent_agent:agent``.

The coordinator's task says what it does: ``fan <n>`` calls the ``helper`` sub-agent ``n``
times in one reply; ``buy`` calls the ``buyer`` sub-agent, whose tool needs a person's
approval. The helper's tool is a barrier across processes: it writes its process id to the
file ``$AGENTNB_TEST_BARRIER`` and returns only once two different processes wrote there, so
a fan-out completes only when children run in more than one worker (it gives up after a
minute, saying so). Final answers name the process that gave them.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import agentnb as nb

BARRIER_WAIT = 60.0


@nb.tool
def meet(x: str) -> str:
    """Wait here until a child in another worker process arrives too."""
    path = Path(os.environ["AGENTNB_TEST_BARRIER"])
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"{os.getpid()}\n".encode())
    finally:
        os.close(fd)
    deadline = time.monotonic() + BARRIER_WAIT
    while len(set(path.read_text().split())) < 2:
        if time.monotonic() > deadline:
            return "alone: no child ran in another worker"
        time.sleep(0.05)
    return f"met in {os.getpid()}"


@nb.tool(confirm=True)
def order(x: str) -> str:
    """Place an order (a person approves first)."""
    return f"ordered by {os.getpid()}"


def _child(tool: str) -> Any:
    def script(messages: list[nb.Message]) -> Any:
        done = [m.text for m in messages if m.role == "tool"]
        return done[0] if done else nb.ToolCall(tool, {"x": "job"})

    return script


helper = nb.Agent(
    name="Helper", agent_id="pg-helper", model=nb.ScriptedModel(_child("meet")), tools=[meet]
)
buyer = nb.Agent(
    name="Buyer", agent_id="pg-buyer", model=nb.ScriptedModel(_child("order")), tools=[order]
)


def _boss(messages: list[nb.Message]) -> Any:
    task = next(m.text for m in messages if m.role == "user")
    results = [m.text for m in messages if m.role == "tool"]
    if results:
        return f"coordinator {os.getpid()}: " + " | ".join(results)
    if task.startswith("fan"):
        n = int(task.split()[1])
        return [nb.ToolCall("helper", {"task": f"part {i}"}) for i in range(n)]
    return nb.ToolCall("buyer", {"task": "buy it"})


agent = nb.Agent(
    name="PG coordinator",
    agent_id="pg-coordinator",
    model=nb.ScriptedModel(_boss),
    tools=[helper.as_tool(name="helper"), buyer.as_tool(name="buyer")],
)
