"""Child program for ``test_middleware_crash``: a ``before_tool`` hook records, flushes, and
the process is killed right after the flush, before the tool runs.

Run as ``python -m tests.recovery._middleware_child DB`` from the repository root. It opens a
runtime on the SQLite file ``DB`` with one middleware whose ``before_tool`` records an
``acme.crash/review`` event, awaits ``ctx.aflush()``, prints ``FLUSHED`` and then waits for
the parent's SIGKILL (it never lets the tool run). The child exits by itself after
``DEADLINE``.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import agentnb as nb

DEADLINE = 120.0
SESSION_ID = "crash"
AGENT_ID = "mw-crash"
KEY = nb.SessionKey("default", "default", AGENT_ID, SESSION_ID)
REVIEW = "acme.crash/review"


def tally(state: dict[str, Any], event: nb.Event) -> dict[str, Any]:
    """How many reviews were recorded, and of which calls."""
    return {"calls": [*state.get("calls", []), event.payload["call_id"]]}


def register() -> None:
    nb.register_event_type(REVIEW, reducer=tally, required=True)


@nb.tool
def wire_money(amount: int) -> str:
    """Send money (the side effect the review must precede).

    Args:
        amount: how much
    """
    print("SIDE-EFFECT", flush=True)
    return "sent"


class Review:
    async def before_tool(self, ctx: nb.MiddlewareContext, call: Any) -> None:
        ctx.record(
            REVIEW,
            {"call_id": call.call_id, "note": "reviewed before sending"},
            required=True,
        )
        await ctx.aflush()
        print("FLUSHED", flush=True)
        await asyncio.sleep(DEADLINE)  # the parent kills the process here


def agent() -> nb.Agent:
    model = nb.ScriptedModel([nb.ToolCall("wire_money", {"amount": 5}), "done"])
    return nb.Agent(
        name="Crash", agent_id=AGENT_ID, model=model, tools=[wire_money], middleware=[Review()]
    )


def main(db: str) -> None:
    register()
    runtime = nb.Runtime(agent(), store=f"sqlite:///{db}", lease_ttl=2.0)
    runtime.session(SESSION_ID).submit("pay five")
    asyncio.run(asyncio.sleep(DEADLINE))


if __name__ == "__main__":
    main(sys.argv[1])
