"""Child program for ``test_ctrl_c``: a script that waits on a task whose tool never returns.

Run as ``python -m tests.recovery._interrupt_child CASE DB`` from the repository root. It
opens a runtime on the SQLite file ``DB``, submits one task whose first step calls a tool
that does not return and waits on the receipt, as a user's script would, until the parent
sends SIGINT (Ctrl-C). ``WAITING`` is printed once the main thread is inside the wait.

``CASE`` picks the tool: ``sync`` (a plain function blocked for ten minutes) or
``stubborn`` (an async tool that, when cancelled, blocks the runtime's loop: the runs
cannot stop, so only a second Ctrl-C ends the process). ``with``: the sync tool, with
the runtime used as a context manager. ``end``: the sync tool, and the script ends by
itself once it runs (no Ctrl-C). The child exits by itself after ``DEADLINE``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
import time

import agentnb as nb

DEADLINE = 600.0
SESSION_ID = "script"
AGENT_ID = "ctrl-c"
KEY = nb.SessionKey("default", "default", AGENT_ID, SESSION_ID)
ran = threading.Event()


@nb.tool
def block() -> str:
    """Wait a long time."""
    ran.set()
    time.sleep(DEADLINE)
    return "done"


@nb.tool
async def stubborn() -> str:
    """Wait, and refuse to stop."""
    ran.set()
    try:
        await asyncio.sleep(DEADLINE)
    except asyncio.CancelledError:
        print("STUCK", flush=True)  # the runs are being stopped: a second Ctrl-C is due
        time.sleep(DEADLINE)  # blocks the runtime's loop: nothing can stop it now
    return "done"


def agent(case: str) -> nb.Agent:
    name = "stubborn" if case == "stubborn" else "block"
    model = nb.ScriptedModel([nb.ToolCall(name, {}), "finished"])
    return nb.Agent(name="Ctrl-C", agent_id=AGENT_ID, model=model, tools=[block, stubborn])


def announce_when_waiting() -> None:
    """Print WAITING once the tool runs and the main thread is inside ``Session.wait``: a
    Ctrl-C sent after that lands in the wait, not before it."""
    main_thread = threading.main_thread().ident

    def waiting() -> bool:
        frame = sys._current_frames().get(main_thread or 0)
        while frame is not None:
            code = frame.f_code
            if code.co_name in ("wait", "_wait") and code.co_filename.endswith("session.py"):
                return True
            frame = frame.f_back
        return False

    def watch() -> None:
        ran.wait(60)
        while not waiting():
            time.sleep(0.01)
        print("WAITING", flush=True)

    threading.Thread(target=watch, daemon=True).start()


def main(case: str, db: str) -> None:
    timer = threading.Timer(DEADLINE, os._exit, (3,))
    timer.daemon = True
    timer.start()
    url = f"sqlite:///{db}"
    if case == "with":
        with nb.Runtime(agent(case), store=url) as runtime:
            receipt = runtime.session(SESSION_ID).submit("go")
            announce_when_waiting()
            receipt.wait()
        return
    runtime = nb.Runtime(agent(case), store=url)
    receipt = runtime.session(SESSION_ID).submit("go")
    if case == "end":  # the script ends while its task's tool still blocks
        ran.wait(60)
        print("WAITING", flush=True)
        return
    announce_when_waiting()
    receipt.wait()


if __name__ == "__main__":
    # Ctrl-C as a terminal's script has it: a suite run as a background job has SIGINT
    # ignored, which a child inherits (and Python then installs no handler of its own).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    main(sys.argv[1], sys.argv[2])
