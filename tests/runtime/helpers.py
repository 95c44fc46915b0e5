"""Shared helpers for runtime tests: gates to hold a model call or a tool mid-flight."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
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
