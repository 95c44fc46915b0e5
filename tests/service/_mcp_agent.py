"""An agent whose tools come from an MCP server (the test server of ``tests/mcp``, over
stdio), importable as ``tests.service._mcp_agent:agent`` for ``agentnb serve``: a task
``book {"table": "7"}`` calls the server's ``book``, which asks the person through an MCP
elicitation (an ``ask_user`` request) before it books. The server writes its effects under
``$MCP_TEST_DIR``.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import agentnb as nb
from tests.mcp.helpers import caller, server_toolset

agent = nb.Agent(
    name="Booking (MCP)",
    agent_id="service-mcp",
    model=nb.ScriptedModel(caller),
    tools=[server_toolset(Path(os.environ.get("MCP_TEST_DIR", tempfile.gettempdir())))],
)
