"""Child program for the recovery tests: a kernel that stops while a tool runs.

Run as ``python -m tests.widgets._restart_child DB``: a runtime on the SQLite file ``DB``
submits "Look into rust", whose sync tool ``research`` blocks; once the tool's dispatch is
committed it prints ``RUNNING`` and the interpreter exits without ``runtime.close()`` (as a
kernel does when it restarts). The parent opens the same store and recovers the task.
"""

from __future__ import annotations

import sys
import threading

import agentnb as nb

AGENT_ID = "researcher"
SESSION_ID = "restart"
RELEASE = threading.Event()


@nb.tool
def research(topic: str) -> str:
    """Look a topic up (blocks until the process ends).

    Args:
        topic: what to look up
    """
    RELEASE.wait(60)
    return f"notes on {topic}"


def script(messages: list[nb.Message]) -> object:
    """One research call, then an answer once the call has a result (whatever process
    asks: the answer depends on the conversation, not on a count of calls)."""
    if any(m.role == "tool" for m in messages):
        return "Rust is fast."
    return nb.ToolCall("research", {"topic": "rust"})


def agent() -> nb.Agent:
    """The agent both processes run: one research call, then an answer."""
    return nb.Agent(
        name="Researcher", agent_id=AGENT_ID, model=nb.ScriptedModel(script), tools=[research]
    )


def main(db: str) -> None:
    runtime = nb.Runtime(agent(), store=f"sqlite:///{db}", lease_ttl=60.0)
    session = runtime.session(SESSION_ID)
    session.submit("Look into rust")
    for event in session.log.follow():
        if event.type == "tool/dispatch":
            break
    print("RUNNING", flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main(sys.argv[1])
