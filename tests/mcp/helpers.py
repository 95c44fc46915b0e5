"""What the MCP tests share: the test server's command, a rule-based model, waiting."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import agentnb as nb
from agentnb.events import Message

SERVER = str(Path(__file__).with_name("server.py"))


def server_toolset(directory: Path, **options: Any) -> nb.Toolset:
    """The test server over stdio, writing its effects under ``directory``."""
    return nb.mcp.stdio(sys.executable, [SERVER], env={"MCP_TEST_DIR": str(directory)}, **options)


def caller(messages: list[Message]) -> Any:
    """A model that runs the call the task names (``tool {json arguments}``), then answers
    with the tool's output; so one agent serves every test's session."""
    last = max(i for i, m in enumerate(messages) if m.role == "user")
    results = [m for m in messages[last + 1 :] if m.role == "tool"]
    if results:
        return f"result: {results[-1].text}"
    name, _, arguments = messages[last].text.partition(" ")
    return nb.ToolCall(name, json.loads(arguments or "{}"))


def agent(*tools: Any, agent_id: str = "mcp-test") -> nb.Agent:
    return nb.Agent(
        name="MCP test",
        agent_id=agent_id,
        model=nb.ScriptedModel(caller),
        tools=list(tools),
    )


def task(tool_name: str, **arguments: Any) -> str:
    return f"{tool_name} {json.dumps(arguments)}"


def wait_for(check: Callable[[], Any], timeout: float = 30.0, what: str = "it") -> Any:
    """Poll ``check`` until it returns something truthy (tests wait on facts, not time)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def effects(directory: Path) -> list[str]:
    path = directory / "effects.log"
    return path.read_text().splitlines() if path.exists() else []


def events(session: nb.Session, type_: str) -> list[dict[str, Any]]:
    return [dict(e.payload) for e in session.log.scan(0, None) if e.type == type_]
