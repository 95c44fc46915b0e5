"""Shared helpers for runtime tests: gates to hold a model call or a tool mid-flight."""

from __future__ import annotations

import asyncio
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import agentnb as nb

WAIT = 20.0  # seconds: a failure guard only, never a timing assertion


class Gate:
    """Holds whoever passes it until released; records that someone arrived."""

    def __init__(self) -> None:
        self.arrived = threading.Event()
        self.released = threading.Event()

    async def pass_async(self) -> None:
        self.arrived.set()
        await asyncio.to_thread(self.released.wait, WAIT)

    def pass_sync(self) -> None:
        self.arrived.set()
        self.released.wait(WAIT)

    def wait_arrived(self) -> None:
        assert self.arrived.wait(WAIT), "nobody reached the gate"

    def release(self) -> None:
        self.released.set()


def gated_script(replies: Sequence[Any], gates: dict[int, Gate]) -> Callable[..., Any]:
    """A ScriptedModel script that holds call ``i`` at ``gates[i]`` before replying."""
    calls = {"n": 0}

    async def script(messages: list[nb.Message]) -> Any:
        index = calls["n"]
        calls["n"] += 1
        if index in gates:
            await gates[index].pass_async()
        if index >= len(replies):
            raise nb.ModelError(f"script ran out after {len(replies)} replies")
        return replies[index]

    return script


def event_types(session: nb.Session, after: int = 0) -> list[str]:
    return [e.type for e in session.log.scan(after)]


def events_of(session: nb.Session, type_: str) -> list[nb.Event]:
    return [e for e in session.log.scan() if e.type == type_]


REPO = Path(__file__).resolve().parents[2]


def kill_mid_tool(store_url: str) -> tuple[str, str]:
    """Run ``_dead_run_child`` on ``store_url`` until its tool runs, then ``kill -9`` it.

    Returns (turn_id, call_id) of the run it left open: a dispatched call without a result,
    and a lease held by a dead process.
    """
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.runtime._dead_run_child", store_url],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True).start()
        deadline = time.monotonic() + WAIT
        while True:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError("the child never started its tool") from None
            if line.startswith("STARTED "):
                _, turn_id, call_id = line.split()
                break
        proc.send_signal(signal.SIGKILL)
        proc.wait(WAIT)
        return turn_id, call_id
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(WAIT)
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


def wait_for_event(session: nb.Session, type_: str, after: int = 0) -> nb.Event:
    """The first committed event of ``type_`` after seq ``after``, waiting for it."""
    follow = session.log.follow(after, idle_timeout=WAIT)
    try:
        for event in follow:
            if event.type == type_:
                return event
    finally:
        follow.close()
    raise AssertionError(f"no {type_} event was committed within {WAIT}s")
