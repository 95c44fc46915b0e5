"""Child process for the two-runtime test: submits tasks and executes whatever it can."""

from __future__ import annotations

import os
import sys
import time

import agentnb as nb


def main() -> None:
    db, name, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    model = nb.ScriptedModel(
        lambda messages: f"answer from {os.getpid()}", chunk_size=2, chunk_delay=0.005
    )
    agent = nb.Agent(name="Shared", agent_id="shared-agent", model=model)
    runtime = nb.Runtime(agent, store=f"sqlite:///{db}", lease_ttl=1.0)
    session = runtime.session("shared", user_id="u")
    for i in range(count):
        session.submit(f"{name} task {i}")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        tasks = session.tasks()
        if len(tasks) >= 2 * count and all(t.status == "completed" for t in tasks):
            break
        session.start()
        time.sleep(0.1)
    print(f"{name} model-calls={model.calls}", flush=True)
    runtime.close()


if __name__ == "__main__":
    main()
