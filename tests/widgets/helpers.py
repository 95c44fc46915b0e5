"""Shared helpers for chat-projection and widget tests."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import agentnb as nb
from agentnb.models.base import (
    Finish,
    ModelRequest,
    StreamItem,
    TextDelta,
    ToolCallDelta,
)

WAIT = 20.0  # seconds: a failure guard only, never a timing assertion


def until(predicate: Callable[[], Any], timeout: float = WAIT, what: str = "condition") -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


class PausingModel(nb.Model):
    """Streams scripted pieces; call ``i`` stops at ``pause_at[i]`` until ``release()``.

    Pieces before the pause are spaced so they are committed (the runtime commits streamed
    chunks at most every 100 ms, when the next piece arrives), so a reader sees a
    half-streamed reply in the log while the model waits.
    """

    name = "pausing"

    def __init__(self, replies: Sequence[Sequence[StreamItem]], pause_at: dict[int, int]) -> None:
        self.replies = [list(r) for r in replies]
        self.pause_at = pause_at
        self.paused = threading.Event()
        self.released = threading.Event()
        self.calls = 0

    def release(self) -> None:
        self.released.set()

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        index = self.calls
        self.calls += 1
        return self._stream(index)

    async def _stream(self, index: int) -> AsyncIterator[StreamItem]:
        pieces = self.replies[index]
        pause = self.pause_at.get(index)
        for n, piece in enumerate(pieces):
            if n == pause:
                # One more piece after a gap flushes the pieces before it as a commit.
                self.paused.set()
                await asyncio.to_thread(self.released.wait, WAIT)
            elif n:
                await asyncio.sleep(0.12 if pause is not None and n < pause else 0)
            yield piece
        calls = any(isinstance(p, ToolCallDelta) for p in pieces)
        yield Finish("tool_calls" if calls else "stop")


def text_pieces(text: str, size: int = 5) -> list[StreamItem]:
    return [TextDelta(text[i : i + size]) for i in range(0, len(text), size)]


def committed(session: nb.Session, type_: str) -> list[nb.Event]:
    return [e for e in session.log.scan() if e.type == type_]


def wait_committed(session: nb.Session, type_: str, n: int = 1) -> list[nb.Event]:
    return until(
        lambda: (found := committed(session, type_)) and len(found) >= n and found,
        what=f"{n} committed {type_}",
    )
