"""Child program for ``tests/mcp/test_durability.py``: an agentnb process using the test
MCP server, to be killed with ``kill -9`` in the middle of a call or while a question waits.

Run as ``python -m tests.mcp.agent_child STORE DIR SESSION TASK`` from the repository root:
submits ``TASK`` (``tool {json arguments}``) in session ``SESSION`` and, if the turn settles
(suspends on a question, say), prints ``SETTLED <status>``; then waits to be killed. A 60 s
lease: what the parent sees cannot be the lease running out.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import agentnb as nb
from tests.mcp.helpers import agent, server_toolset


def main() -> None:
    store, directory, session_id, task = sys.argv[1:5]
    runtime = nb.Runtime(agent(server_toolset(Path(directory))), store=store, lease_ttl=60.0)
    session = runtime.session(session_id, user_id="u")
    outcome = session.run(task, timeout=120)
    print(f"SETTLED {outcome.status}", flush=True)
    while True:
        time.sleep(60)


if __name__ == "__main__":
    main()
