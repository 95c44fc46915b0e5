"""An agent for the worker test, importable as tests.runtime._worker_agent:agent."""

from __future__ import annotations

import agentnb as nb

agent = nb.Agent(
    name="Worker test",
    agent_id="worker-agent",
    model=nb.ScriptedModel(lambda messages: f"done: {messages[-1].text}"),
)
