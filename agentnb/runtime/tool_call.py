"""What runs around one tool call: its reports (progress, records), its failures, its prompt.

A tool runs under ``contained`` so that not even ``SystemExit`` escapes it; what it reports
goes through ``Reports``, bounded per call; ``interaction_kind`` and ``prompt`` say which
person-facing request a call needs and how it is worded.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from agentnb.errors import InvalidInput
from agentnb.events import Event
from agentnb.runtime.writer import LogWriter

__all__ = [
    "MAX_PROGRESS_EVENTS",
    "MAX_RECORDS",
    "Reports",
    "ToolExit",
    "contained",
    "ignore_result",
    "interaction_kind",
    "prompt",
]

MAX_PROGRESS_EVENTS = 1_000
"""``tool/chunk`` events one tool call records at most; later reports are coalesced."""
MAX_RECORDS = 1_000
"""Application events (``ctx.record``) one tool call may commit."""


class ToolExit(Exception):
    """A tool raised ``SystemExit`` or ``KeyboardInterrupt`` (its ``__cause__``)."""


async def contained(invoke: Callable[..., Coroutine[Any, Any, str]], *args: Any) -> str:
    """Run a tool call so that not even ``SystemExit`` escapes it.

    asyncio lets ``SystemExit`` and ``KeyboardInterrupt`` out of a task and stops the loop
    with them; raised by a tool, they are the tool's failure, which the model is told. The
    call's coroutine is made here, so a task cancelled before it starts leaves none behind.
    """
    try:
        return await invoke(*args)
    except (SystemExit, KeyboardInterrupt) as exc:
        raise ToolExit from exc


def ignore_result(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


class Reports:
    """What a running tool reports: ``record`` and ``progress``, from any thread.

    Both are bounded per call. ``progress`` keeps the first ``MAX_PROGRESS_EVENTS`` reports as
    ``tool/chunk`` events; later ones are coalesced into one last event (the newest report,
    with ``skipped`` counting those not recorded), so a chatty tool never fails its run.
    ``record`` beyond ``MAX_RECORDS`` raises ``InvalidInput`` in the tool.
    """

    def __init__(
        self,
        writer: LogWriter,
        turn_id: str,
        run_id: str,
        call_id: str,
        publish: Callable[..., None],
    ) -> None:
        self.writer = writer
        self.ids = (turn_id, run_id, call_id)
        self.publish = publish
        self.loop = asyncio.get_running_loop()
        self.lock = threading.Lock()
        self.reports = 0
        self.records = 0
        self.latest: tuple[int, Any] | None = None
        """The newest report not recorded (index, data), once past the bound."""
        self.skipped = 0
        self.closed = False

    def _on_loop(self, event: Event) -> None:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            self._add(event)
        else:
            self.loop.call_soon_threadsafe(self._add, event)

    def _add(self, event: Event) -> None:
        if not self.closed:  # a report that lands after the call ended is dropped
            self.writer.add_event(event)

    def record(self, type_: str, data: Any, required: bool) -> None:
        turn_id, run_id, _ = self.ids
        with self.lock:
            if self.records >= MAX_RECORDS:
                raise InvalidInput(
                    f"ctx.record: this tool call already recorded {MAX_RECORDS} events, the "
                    "limit per call; gather the data into fewer events"
                )
            self.records += 1
        # Created (and validated) in the caller's thread, so a bad payload raises there.
        self._on_loop(Event.create(type_, data, required=required, turn_id=turn_id, run_id=run_id))

    def progress(self, data: Any) -> None:
        turn_id, run_id, call_id = self.ids
        with self.lock:
            index = self.reports
            self.reports += 1
            keep = index < MAX_PROGRESS_EVENTS - 1
            if not keep:
                if self.latest is not None:
                    self.skipped += 1
                self.latest = (index, data)
        event = self._chunk(index, data, 0)  # validated in the caller's thread: a bad one raises
        self.publish("tool/chunk", turn_id, run_id, call_id=call_id, data=data)
        if keep:
            self._on_loop(event)

    def _chunk(self, index: int, data: Any, skipped: int) -> Event:
        turn_id, run_id, call_id = self.ids
        payload = {"call_id": call_id, "index": index, "data": data, "skipped": skipped}
        return Event.create("tool/chunk", payload, turn_id=turn_id, run_id=run_id)

    def close(self) -> None:
        """On the loop, once the call ended: record the coalesced last report."""
        with self.lock:
            latest, skipped, self.closed = self.latest, self.skipped, True
        if latest is not None:
            self.writer.add_event(self._chunk(latest[0], latest[1], skipped))


def interaction_kind(tool: Any) -> str | None:
    """Which person-facing request a call of ``tool`` needs before it can go on, if any."""
    if tool.interaction == "ask_user":
        return "ask_user"
    if tool.external:
        return "external_execution"
    if tool.confirm:
        return "confirmation"
    return None


def prompt(kind: str, name: str, arguments: Mapping[str, Any]) -> str:
    if kind == "ask_user":
        return str(arguments.get("question", ""))
    shown = ", ".join(f"{k}={v!r}" for k, v in arguments.items())
    if kind == "external_execution":
        return f"Run {name}({shown}) outside and respond with its result."
    return f"Allow {name}({shown})?"
