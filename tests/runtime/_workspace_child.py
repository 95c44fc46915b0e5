"""Child program for the workspace crash test (``kill -9`` mid-turn).

Run as ``python -m tests.runtime._workspace_child STORE_URL ROOT`` from the repository root.
Its first task writes ``first.txt`` and completes; its second writes ``second.txt``, then
calls ``block``, which prints ``BLOCKED`` and waits for the parent to kill the process. It
exits by itself after ``DEADLINE`` seconds or when its stdin closes.
"""

from __future__ import annotations

import os
import sys
import threading
import time

import agentnb as nb

AGENT_ID = "workspace-agent"
SESSION_ID = "ws"
DEADLINE = 60.0


@nb.tool
def block() -> str:
    """Wait for the parent to kill this process."""
    print("BLOCKED", flush=True)
    time.sleep(DEADLINE)
    os._exit(1)


def script(messages: list[nb.Message]) -> object:
    last = messages[-1]
    task = next(m.text for m in reversed(messages) if m.role == "user")
    if last.role == "user":
        name = "first.txt" if task == "one" else "second.txt"
        return nb.ToolCall("write_file", {"path": name, "content": f"written by {task}"})
    if task == "two" and last.name == "write_file":
        return nb.ToolCall("block", {})
    return f"done {task}"


def make_agent(root: str) -> nb.Agent:
    return nb.Agent(
        name="Workspace",
        agent_id=AGENT_ID,
        model=nb.ScriptedModel(script),
        tools=[*nb.workspace_tools(), block],
        workspace=nb.Workspace(root),
    )


def main() -> None:
    threading.Thread(target=lambda: (sys.stdin.read(), os._exit(2)), daemon=True).start()
    runtime = nb.Runtime(make_agent(sys.argv[2]), store=sys.argv[1], lease_ttl=1.0)
    session = runtime.session(SESSION_ID)
    session.run("one", timeout=30)
    session.submit("two")
    time.sleep(DEADLINE)
    os._exit(1)


if __name__ == "__main__":
    main()
