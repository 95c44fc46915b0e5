"""The agent the PostgreSQL worker tests run, importable as ``tests._pg_worker_agent:agent``.

A task's text says what it does: ``task <n>`` answers at once; with ``idem <s>`` it first
calls an idempotent tool that takes ``s`` seconds, with ``risky <s>`` a non-idempotent one,
with ``approve`` a tool that needs a person's approval. The final answer is ``done: <task>``,
plus ``+ <steer>`` for each steering message the turn received.
"""

from __future__ import annotations

import time

import agentnb as nb


@nb.tool(idempotent=True)
def idem(seconds: float) -> str:
    """Sleep, then say so; safe to run again."""
    time.sleep(seconds)
    return "slept"


@nb.tool
def risky(seconds: float) -> str:
    """Sleep, then say so; not safe to run twice."""
    time.sleep(seconds)
    return "sent"


@nb.tool(confirm=True)
def charge(amount: int) -> str:
    """Charge an amount (a person approves first)."""
    return f"charged {amount}"


def _reply(messages: list[nb.Message]) -> str | nb.ToolCall:
    tasks = [i for i, m in enumerate(messages) if m.role == "user" and m.text.startswith("task")]
    task = messages[tasks[-1]]
    if messages[-1] is task:
        words = task.text.split()
        if "idem" in words:
            return nb.ToolCall("idem", {"seconds": float(words[words.index("idem") + 1])})
        if "risky" in words:
            return nb.ToolCall("risky", {"seconds": float(words[words.index("risky") + 1])})
        if "approve" in words:
            return nb.ToolCall("charge", {"amount": 5})
    steers = [m.text for m in messages[tasks[-1] :] if m.role == "user" and m is not task]
    return " + ".join([f"done: {task.text}", *steers])


agent = nb.Agent(
    name="PG worker test",
    agent_id="pg-worker-agent",
    model=nb.ScriptedModel(_reply),
    tools=[idem, risky, charge],
)
