"""Child program for tests that need a run whose process died mid-tool (``kill -9``).

Run as ``python -m tests.runtime._dead_run_child STORE_URL`` from the repository root. It
submits ``TASK`` to session ``SESSION_ID``; the model calls ``order`` (not idempotent), whose
dispatch is committed before it runs; the tool prints ``STARTED <turn_id> <call_id>`` and
blocks until the parent kills the process with SIGKILL. It exits by itself after
``DEADLINE`` seconds or when its stdin closes, so a parent that dies never leaves it behind.

The agent lives here so the parent's runtime (and a worker, ``--agent
tests.runtime._dead_run_child:RESUMING_AGENT``) uses the very same tools and fingerprint.
"""

from __future__ import annotations

import os
import sys
import threading
import time

import agentnb as nb

AGENT_ID = "dead-run-agent"
SESSION_ID = "dead"
USER_ID = "u"
TASK = "order a desk"
ANSWER = "I could not confirm the order."
LEASE = 1.0
DEADLINE = 60.0


@nb.tool
def order(item: str, ctx: nb.ToolContext) -> str:
    """Place an order (not safe to repeat).

    Args:
        item: what to order
    """
    print("STARTED", ctx.turn_id, ctx.call_id, flush=True)
    time.sleep(DEADLINE)
    os._exit(1)  # never killed: the parent is gone or broken


def script(messages: list[nb.Message]) -> object:
    """Call ``order`` for a new task; answer once a tool result is in the context."""
    if messages[-1].role == "tool":
        return ANSWER
    return nb.ToolCall("order", {"item": "desk"})


def make_agent(model: nb.Model | None = None) -> nb.Agent:
    return nb.Agent(
        name="Dead run",
        agent_id=AGENT_ID,
        model=model or nb.ScriptedModel(script),
        tools=[order],
        instructions="Be brief.",
        max_steps=5,
    )


RESUMING_AGENT = make_agent()
"""What a worker runs (``agentnb worker --agent tests.runtime._dead_run_child:RESUMING_AGENT``)."""


def _exit_when_orphaned() -> None:
    sys.stdin.read()  # returns when the parent closes our stdin or goes away
    os._exit(2)


def main() -> None:
    threading.Thread(target=_exit_when_orphaned, daemon=True).start()
    runtime = nb.Runtime(make_agent(), store=sys.argv[1], lease_ttl=LEASE)
    runtime.session(SESSION_ID, user_id=USER_ID).submit(TASK)
    time.sleep(DEADLINE)
    os._exit(1)


if __name__ == "__main__":
    main()
