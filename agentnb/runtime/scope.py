"""What the parts of a running session share: the run's stop signal and the host they serve.

A ``SessionDriver`` (``runtime/engine.py``) is the ``RunHost``: it holds the lease, the
folds and the ``LogWriter``. The parts that execute a run (``runtime/recipes.py``,
``runtime/model_call.py``, ``runtime/tool_call.py``, ``runtime/context.py`` and
``runtime/run_loop.py``) receive the host and read only what this protocol names, so none
of them reaches into another's state. ``RunStop`` is the one place a stop is asked for,
remembered and cleared.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from agentnb.agent import Agent
from agentnb.ids import SessionKey
from agentnb.limits import Limits
from agentnb.log import Inbox
from agentnb.projections.state import InboxState, SessionState
from agentnb.runtime.writer import LogWriter
from agentnb.stores.base import SessionStore

__all__ = ["RunHost", "RunStop", "StopRun", "TurnCancelled"]


class StopRun(Exception):
    """The run was asked to stop (interrupt) at a chunk or step boundary."""


class TurnCancelled(Exception):
    """The turn was cancelled after it was picked, before its first commit."""


class RunStop:
    """Whether the active run must stop, why, and the tool call it may have to leave behind."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.command: str | None = None
        """The interrupt command that asked for the stop, if one did."""
        self.reason: str | None = None
        """Why the run stops when no interrupt command asked (close, time limit)."""
        self.code = "interrupted"
        """The ``stop_reason`` code of a stop that no interrupt command asked for."""
        self.recorded: set[str] = set()
        """What of this stop ``run/stop_requested`` is written for: the interrupt commands'
        ids, and ``""`` for the reason (the step loop commits it the moment it is asked)."""
        self.deadline: float | None = None
        """When the run's time limit stops it (``time.monotonic()``), or None."""
        self.asked = asyncio.Event()
        """Set at each request: what the stop's recorder waits for."""
        self.abandon = asyncio.Event()
        """Set by ``close`` when a sync tool ignores the stop: the run ends without it."""
        self.tool_task: asyncio.Future[Any] | None = None
        self.tool_is_async = False
        self.tool_name = ""

    def is_set(self) -> bool:
        return self.event.is_set()

    def by_command(self, command_id: str | None) -> None:
        """Stop because interrupt command ``command_id`` asked to."""
        self.command = command_id
        self.event.set()
        self.asked.set()
        self.cancel_async_tool()

    def request(self, reason: str, code: str = "interrupted") -> None:
        """Stop recording ``reason`` and ``code``; a stop already asked for keeps its first."""
        if not self.event.is_set():
            self.reason = reason
            self.code = code
            self.event.set()
            self.asked.set()
        self.cancel_async_tool()

    def cancel_async_tool(self) -> None:
        task = self.tool_task
        if task is not None and not task.done() and self.tool_is_async:
            task.cancel()  # async tools stop now; sync tools finish first

    def abandon_tool(self) -> str | None:
        """End the run without waiting for a sync tool that ignores the stop: its name."""
        task = self.tool_task
        if task is None or task.done():
            return None
        self.abandon.set()
        return self.tool_name

    def reset(self) -> None:
        self.event.clear()
        self.asked.clear()
        self.recorded = set()
        self.deadline = None
        self.command = None
        self.reason = None
        self.code = "interrupted"


class RunHost(Protocol):
    """What the parts of a run need from the driver that holds the session's lease."""

    key: SessionKey
    agent: Agent
    store: SessionStore
    inbox_log: Inbox
    stop: RunStop
    guard: tuple[str, int] | None
    """(turn_id, inbox seq): the new turn whose first commit is conditioned on that head."""

    @property
    def writer(self) -> LogWriter: ...

    @property
    def state(self) -> SessionState: ...

    @property
    def inbox(self) -> InboxState: ...

    @property
    def auto_resume(self) -> bool | str:
        """Whether a run a crash cut off is resumed by itself: False, True (when nothing
        uncertain blocks it) or ``"unknown"`` (uncertain calls are settled as unknown)."""

    @property
    def limits(self) -> Limits:
        """The bounds the runtime enforces (a reply's size, a tool result's, ...)."""

    def kick(self, key: SessionKey) -> None:
        """Make sure another session's accepted work gets dispatched (a sub-agent's child, a
        parent woken by its child): by this runtime if it executes it, else by a worker."""

    def publish(self, kind: str, turn_id: str, run_id: str, **data: Any) -> None:
        """Tell live observers (best effort: a failing observer never fails the run)."""

    async def refresh_inbox(self) -> None:
        """Bring the inbox fold up to the inbox head (off the loop thread)."""

    async def reload(self) -> None:
        """Throw the in-memory folds away and refold them from the log (after a failed commit)."""

    def reset_stop(self, *, force: bool = False) -> None:
        """A new run starts with no stop requested (unless the driver is closing)."""
