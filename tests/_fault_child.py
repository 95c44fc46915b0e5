"""Child program for ``test_faults``: a runtime in its own process, killed or left to exit.

Run as ``python -m tests._fault_child MODE DB`` from the repository root. Every mode uses a
60 s lease, far longer than any wait of the parent, so what the parent sees cannot be the
lease running out.

* ``hold``: a task whose tool sleeps; prints ``RUNNING`` once the tool's dispatch is
  committed, then waits to be killed (``kill -9``).
* ``finish``: the README's snippet as a script: one task to completion, ``DONE``, and the
  interpreter exits without ``runtime.close()``.
* ``exit-mid-run``: a task whose async tool sleeps; prints ``RUNNING`` once it runs and
  exits the interpreter without ``runtime.close()`` while the run is in progress.
* ``compacting``: three short tasks, then ``compact()`` with a summariser that never
  answers; prints ``COMPACTING`` once ``compaction/start`` is committed, then waits to be
  killed.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time

import agentnb as nb

LEASE = 60.0
AGENT_ID = "fault-child"
SESSION_ID = "s1"


@nb.tool
def nap(seconds: float) -> str:
    """Sleeps in a thread.

    Args:
        seconds: how long
    """
    time.sleep(seconds)
    return "rested"


@nb.tool
async def doze(seconds: float) -> str:
    """Sleeps on the loop (cancellable).

    Args:
        seconds: how long
    """
    await asyncio.sleep(seconds)
    return "rested"


def agent(script: list[object]) -> nb.Agent:
    return nb.Agent(
        name="Fault child",
        agent_id=AGENT_ID,
        model=nb.ScriptedModel(script),
        tools=[nap, doze],
    )


def wait_for(session: nb.Session, type_: str) -> None:
    for event in session.log.follow(0, idle_timeout=30):
        if event.type == type_:
            return
    raise SystemExit(f"never saw {type_}")


def main(mode: str, db: str) -> None:
    if mode == "hold":
        runtime = nb.Runtime(
            agent([nb.ToolCall("nap", {"seconds": 60}), "done"]), store=db, lease_ttl=LEASE
        )
        session = runtime.session(SESSION_ID)
        session.submit("hold on")
        wait_for(session, "action/start")
        print("RUNNING", runtime.owner, flush=True)
        time.sleep(60)
    elif mode == "finish":
        runtime = nb.Runtime(agent(["all done"]), store=db, lease_ttl=LEASE)
        session = runtime.session(SESSION_ID)
        print(session.submit("hello").wait(timeout=30).output, flush=True)
        print("DONE", flush=True)
    elif mode == "exit-mid-run":
        runtime = nb.Runtime(
            agent([nb.ToolCall("doze", {"seconds": 60}), "done"]), store=db, lease_ttl=LEASE
        )
        session = runtime.session(SESSION_ID)
        session.submit("hold on")
        wait_for(session, "action/start")
        print("RUNNING", flush=True)
    elif mode == "compacting":

        async def stuck(messages: list[nb.Message]) -> str:
            await asyncio.sleep(600)
            return "never"

        compactor = nb.SummaryCompactor(keep_last=2, model=nb.ScriptedModel(stuck))
        base = agent(["one", "two", "three"])
        runtime = nb.Runtime(
            nb.Agent(
                name=base.name,
                agent_id=base.agent_id,
                model=base.model,
                tools=list(base.tools),
                compaction=compactor,
            ),
            store=db,
            lease_ttl=LEASE,
        )
        session = runtime.session(SESSION_ID)
        for text in ("first", "second", "third"):
            session.run(text, timeout=30)
        threading.Thread(target=session.compact, kwargs={"timeout": 600}, daemon=True).start()
        wait_for(session, "compaction/start")
        print("COMPACTING", flush=True)
        time.sleep(60)
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
