"""Child program for the test of a process killed while a run waits in place for a person.

Run as ``python -m tests.runtime._inline_child STORE_URL`` from the repository root. It
submits ``TASK`` to session ``SESSION_ID`` with ``wait_inline=DEADLINE``; the model calls
the confirm tool ``order``, the run commits its request and waits for the answer holding
the lease; once the request is committed it prints ``WAITING <turn_id> <request_id>`` and
waits for the parent to kill it with SIGKILL. It exits by itself after ``DEADLINE`` seconds
or when its stdin closes, so a parent that dies never leaves it behind.

The agent lives here so the parent's runtime uses the very same tools and fingerprint.
"""

from __future__ import annotations

import os
import sys
import threading
import time

import agentnb as nb

AGENT_ID = "inline-agent"
SESSION_ID = "inline"
USER_ID = "u"
TASK = "order a desk"
ANSWER = "Ordered."
LEASE = 1.0
DEADLINE = 60.0
ORDERS: list[str] = []


@nb.tool(confirm=True)
def order(item: str) -> str:
    """Place an order once a person approved it.

    Args:
        item: what to order
    """
    ORDERS.append(item)
    return f"ordered {item}"


def script(messages: list[nb.Message]) -> object:
    """Call ``order`` for a new task; answer once a tool result is in the context."""
    if messages[-1].role == "tool":
        return ANSWER
    return nb.ToolCall("order", {"item": "desk"})


def make_agent(wait_inline: float = DEADLINE) -> nb.Agent:
    return nb.Agent(
        name="Inline",
        agent_id=AGENT_ID,
        model=nb.ScriptedModel(script),
        tools=[order],
        instructions="Be brief.",
        max_steps=5,
        wait_inline=wait_inline,
    )


def _exit_when_orphaned() -> None:
    sys.stdin.read()  # returns when the parent closes our stdin or goes away
    os._exit(2)


def main() -> None:
    threading.Thread(target=_exit_when_orphaned, daemon=True).start()
    runtime = nb.Runtime(make_agent(), store=sys.argv[1], lease_ttl=LEASE)
    session = runtime.session(SESSION_ID, user_id=USER_ID)
    receipt = session.submit(TASK)
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        pending = session.pending()
        if pending:
            print("WAITING", receipt.turn_id, next(iter(pending)), flush=True)
            break
        time.sleep(0.02)
    time.sleep(DEADLINE)
    os._exit(1)


if __name__ == "__main__":
    main()
