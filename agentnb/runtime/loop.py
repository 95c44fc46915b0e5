"""The event loop a runtime runs on: its own, on a daemon thread of its own.

Callers hand coroutines to it and wait on a future, so every sync call works inside
Jupyter without nesting event loops.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading

__all__ = ["start_loop"]


def start_loop(agent_id: str) -> tuple[asyncio.AbstractEventLoop, threading.Thread]:
    """A runtime's event loop, running on its own daemon thread."""
    loop = asyncio.new_event_loop()
    # Store calls run in worker threads; each running session also keeps one waiting for
    # interrupts, so the default pool of min(32, cpus + 4) threads is too small.
    loop.set_default_executor(
        concurrent.futures.ThreadPoolExecutor(max_workers=64, thread_name_prefix="agentnb")
    )
    thread = threading.Thread(
        target=loop.run_forever, daemon=True, name=f"agentnb-runtime-{agent_id}"
    )
    thread.start()
    return loop, thread
