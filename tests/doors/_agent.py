"""The agent the door tests serve (``tests.doors._agent:agent``): the service tests' rules
(``tests.service._agent``), plus ``quote <vendor>``, which calls the external tool
``annual_quote`` (its result comes from the client), and ``slow`` ones that stream a piece
every 20 ms (``tests.doors._agent:slow``) so a test can cut a stream in the middle, and
``ponder``, which reasons as ``think`` does and then answers at length (``long 30``'s lines).
"""

from __future__ import annotations

import agentnb as nb
from tests.service._agent import TOOLS
from tests.service._agent import _reply as _service_reply


@nb.tool(external=True)
def annual_quote(vendor: str) -> str:
    """The yearly quote of ``vendor`` (the client brings it)."""
    raise NotImplementedError("an external tool runs outside")


def _reply(messages: list[nb.Message]) -> str | nb.ToolCall | nb.Reply:
    users = [m for m in messages if m.role == "user"]
    words = users[-1].text.split() if users else []
    if words[:1] == ["quote"] and messages[-1].role != "tool":
        return nb.ToolCall("annual_quote", {"vendor": words[1] if len(words) > 1 else "acme"})
    if words[:1] == ["ponder"]:
        text = "\n".join(f"{i}. line **{i}** of the answer" for i in range(1, 31))
        return nb.Reply(text=text, reasoning="Weigh <b>both</b> first.")
    return _service_reply(messages)


agent = nb.Agent(
    name="Door test",
    agent_id="door-agent",
    model=nb.ScriptedModel(_reply),
    tools=[*TOOLS, annual_quote],
)

slow = nb.Agent(
    name="Door test (slow)",
    agent_id="door-agent",
    model=nb.ScriptedModel(_reply, chunk_size=4, chunk_delay=0.02),
    tools=[*TOOLS, annual_quote],
)
