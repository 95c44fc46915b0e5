"""Agents for the worker hand-off tests, importable as ``tests.runtime._handoff_agent:agent``.

``agent`` streams its replies a character every 20 ms; to a task starting with "slow" it
says a long sentence first (about three seconds), so a worker can be stopped in the middle
of it. ``other`` is another version of it (other instructions).
"""

from __future__ import annotations

import agentnb as nb

SLOW = "Thinking it over, one character at a time. " * 3


def _reply(messages: list[nb.Message]) -> str:
    task = messages[-1].text
    if task.startswith("slow"):
        return f"{SLOW} done: {task}"
    return f"done: {task}"


agent = nb.Agent(
    name="Hand-off",
    agent_id="handoff-agent",
    model=nb.ScriptedModel(_reply, chunk_size=1, chunk_delay=0.02),
    instructions="Be brief.",
)
other = nb.Agent(
    name="Hand-off",
    agent_id="handoff-agent",
    model=nb.ScriptedModel(_reply),
    instructions="Answer in French.",
)
