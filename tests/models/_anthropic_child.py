"""Child program for ``test_anthropic``: a runtime in its own process, killed mid tool loop.

Run as ``python -m tests.models._anthropic_child DB BASE_URL`` from the repository root: it
submits one task to an agent on ``AnthropicModel`` (thinking on) against the fake server at
``BASE_URL``, prints ``DISPATCHED`` once the loop's second model call is committed as
dispatched (the fake server holds that call open), then waits to be killed (``kill -9``).
"""

from __future__ import annotations

import sys
import time

import agentnb as nb
from agentnb.models.anthropic import AnthropicModel

AGENT_ID = "claude-child"
SESSION_ID = "s1"
KEY = "sk-ant-child-0123456789abcdef"


@nb.tool
def lookup(city: str) -> str:
    """The weather in a city.

    Args:
        city: the city
    """
    return f"sunny in {city}"


def agent(base_url: str) -> nb.Agent:
    return nb.Agent(
        name="Claude child",
        agent_id=AGENT_ID,
        model=AnthropicModel(
            "claude-fake",
            api_key=KEY,
            base_url=base_url,
            max_tokens=4096,
            thinking={"budget_tokens": 2048},
        ),
        tools=[lookup],
        instructions="Answer with the weather.",
    )


def main(db: str, base_url: str) -> None:
    runtime = nb.Runtime(agent(base_url), store=db, lease_ttl=60.0)
    session = runtime.session(SESSION_ID)
    session.submit("weather in Paris?")
    dispatches = 0
    for event in session.log.follow(0, idle_timeout=30):
        if event.type == "model/dispatch":
            dispatches += 1
            if dispatches == 2:
                break
    print("DISPATCHED", flush=True)
    time.sleep(60)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
