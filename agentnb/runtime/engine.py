"""The turn -> run -> step engine: executes one session's accepted commands under its lease.

A ``SessionDriver`` lives on the runtime's loop while its session has work. It takes the
session's lease, folds the log, and runs accepted commands in order (``next_command``). Each
run is a loop of steps: build context -> model call -> tool calls -> checkpoint.

Commit rules (DESIGN §4): events are buffered in a ``LogWriter`` and committed in one batch
right before every side effect (``model/dispatch``, ``tool/dispatch``) and at the end of a run;
everything between two side effects shares one commit. Streamed chunks are grouped into
``model/chunk`` events and committed at most every ``CHUNK_COMMIT_INTERVAL`` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agentnb.errors import (
    AppendConflict,
    Fenced,
    IdempotencyConflict,
    InvalidInput,
    LeaseHeld,
    SessionNotFound,
    StorageError,
)
from agentnb.events import Event, Message, ToolCallData
from agentnb.ids import SessionKey, new_id
from agentnb.log import Inbox
from agentnb.projections.state import Command, InboxState, SessionState, next_command
from agentnb.runtime.live import LiveEvent
from agentnb.runtime.models.base import (
    Finish,
    ModelError,
    ModelRequest,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from agentnb.runtime.tools import InvalidToolArguments, ToolContext
from agentnb.stores.base import Lease, SessionStore

if TYPE_CHECKING:
    from agentnb.runtime.runtime import Runtime

__all__ = ["LogWriter", "SessionDriver", "build_context"]

log = logging.getLogger("agentnb.runtime")

CHUNK_GROUP_INTERVAL = 0.1
"""Seconds of streamed pieces grouped into one ``model/chunk`` event."""
CHUNK_GROUP_MAX = 512
"""Streamed pieces at most in one ``model/chunk`` event."""
CHUNK_COMMIT_INTERVAL = 0.1
"""Seconds at least between two commits of streamed chunks."""
MODEL_RETRIES = 3
_FATAL = (Fenced, AppendConflict, LeaseHeld, SessionNotFound)
_NO_RETRY = (*_FATAL, InvalidInput, IdempotencyConflict)


class LogWriter:
    """Buffers events for one session and commits them in fenced batches.

    Events are applied to ``state`` as they are added (this process holds the lease, so it
    is the only writer); if a commit fails the driver refolds the state from the log.
    """

    def __init__(self, store: SessionStore, key: SessionKey, state: SessionState) -> None:
        self.store = store
        self.key = key
        self.state = state
        self.lease: Lease | None = None
        self.head = state.seq
        self.pending: list[Event] = []
        self.commits = 0
        self.on_commit: Callable[[list[Event]], None] | None = None

    def add(
        self,
        type_: str,
        payload: Any = None,
        *,
        turn_id: str | None = None,
        run_id: str | None = None,
        required: bool | None = None,
    ) -> Event:
        return self.add_event(
            Event.create(type_, payload, turn_id=turn_id, run_id=run_id, required=required)
        )

    def add_event(self, event: Event) -> Event:
        event = event.with_seq(self.head + len(self.pending) + 1)
        self.pending.append(event)
        self.state.apply(event)
        return event

    @property
    def next_seq(self) -> int:
        return self.head + len(self.pending) + 1

    async def flush(self) -> None:
        """Commit everything buffered, as one atomic batch (retried on transient errors)."""
        if not self.pending:
            return
        batch, self.pending = self.pending, []
        batch_id = new_id("batch")
        for attempt in range(5):
            try:
                await asyncio.to_thread(
                    self.store.append,
                    self.key,
                    batch,
                    expected_seq=batch[0].seq - 1,
                    batch_id=batch_id,
                    fence=self.lease,
                )
                break
            except _NO_RETRY:
                raise
            except StorageError:
                # A lost acknowledgement is retried with the same batch id: a no-op if it
                # did commit.
                if attempt == 4:
                    raise
                await asyncio.sleep(0.05 * 2**attempt)
        self.head = batch[-1].seq
        self.commits += 1
        if self.on_commit is not None:
            self.on_commit(batch)


def build_context(instructions: str, context: list[Message]) -> list[Message]:
    """The messages a model call sees: the instructions, then the conversation."""
    messages = (
        [Message(id="msg_instructions", role="system", text=instructions)] if instructions else []
    )
    return messages + list(context)


class _Stop(Exception):
    """The run was asked to stop (interrupt) at a chunk or step boundary."""


class SessionDriver:
    """Executes one session's accepted commands while this process holds its lease."""

    def __init__(self, runtime: Runtime, key: SessionKey) -> None:
        self.runtime = runtime
        self.key = key
        self.store = runtime.store
        self.agent = runtime.agent
        self.inbox_log = Inbox(self.store, key)
        self.wake = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.state = SessionState()
        self.inbox = InboxState()
        self.writer = LogWriter(self.store, key, self.state)
        self._renewer: asyncio.Task[None] | None = None
        self.stopping = False

    # -- lifecycle ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Take the lease, run every dispatchable command, release the lease when idle."""
        while not self.stopping:
            self.wake.clear()
            if not await self._has_work():
                return
            lease = await self._acquire()
            if lease is None:
                return
            try:
                await self._execute_all()
            except _FATAL as exc:
                log.warning("session %s: execution stopped: %s", self.key, exc)
            finally:
                await self._release()
            if not self.wake.is_set():
                return

    async def _has_work(self) -> bool:
        await asyncio.to_thread(self._refresh)
        return next_command(self.inbox, self.state) is not None

    def _refresh(self) -> None:
        """Bring both folds up to the committed heads."""
        if self.writer.pending:
            raise RuntimeError("refresh with uncommitted events")
        for event in self.store.scan(self.key, self.state.seq):
            self.state.apply(event)
        self.writer.head = self.state.seq
        while batch := self.store.inbox_read_after(self.key, self.inbox.seq, 1000):
            for event in batch:
                self.inbox.apply(event)

    def _reload(self) -> None:
        """Throw away the in-memory folds (after a failed commit) and refold from the log."""
        self.state = SessionState()
        self.writer = LogWriter(self.store, self.key, self.state)
        self.writer.on_commit = self.runtime._committed(self.key)
        self._refresh()

    async def _acquire(self) -> Lease | None:
        ttl = self.runtime.lease_ttl
        while not self.stopping:
            try:
                lease = await asyncio.to_thread(
                    self.store.acquire_lease, self.key, self.runtime.owner, ttl
                )
            except LeaseHeld:
                # Another process executes this session; it may crash, so look again later.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.wake.wait(), timeout=min(1.0, ttl / 4))
                self.wake.clear()
                if not await self._has_work():
                    return None
                continue
            self._reload()
            self.writer.lease = lease
            self._renewer = asyncio.create_task(self._renew(lease))
            return lease
        return None

    async def _renew(self, lease: Lease) -> None:
        ttl = self.runtime.lease_ttl
        while True:
            await asyncio.sleep(ttl / 3)
            try:
                lease = await asyncio.to_thread(self.store.renew_lease, lease, ttl)
                self.writer.lease = lease
            except Fenced:
                log.warning("session %s: lost its lease; stopping execution", self.key)
                self.stopping = True
                return
            except StorageError as exc:  # transient: try again on the next beat
                log.warning("session %s: lease renewal failed: %s", self.key, exc)

    async def _release(self) -> None:
        if self._renewer is not None:
            self._renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewer
            self._renewer = None
        lease, self.writer.lease = self.writer.lease, None
        if lease is not None:
            with contextlib.suppress(StorageError):
                await asyncio.to_thread(self.store.release_lease, lease)

    async def _execute_all(self) -> None:
        while not self.stopping:
            await asyncio.to_thread(self._refresh)
            command = next_command(self.inbox, self.state)
            if command is None:
                return
            try:
                await self._execute(command)
            except _FATAL:
                raise
            except Exception as exc:  # noqa: BLE001 - a bug must not strand the turn
                log.exception("session %s: command %s failed", self.key, command.command_id)
                await self._fail_internal(command, exc)

    async def _fail_internal(self, command: Command, exc: Exception) -> None:
        """Record an unexpected error so the turn ends as failed instead of hanging."""
        self.writer.pending.clear()
        await asyncio.to_thread(self._reload)
        error = f"internal error: {type(exc).__name__}: {exc}"
        run = self.state.runs.get(self.state.active_run or "")
        if run is not None:
            await self._finish(run.turn_id, run.run_id, "failed", [], error=error)
        elif command.command_id not in self.state.handled:
            await asyncio.to_thread(
                self.inbox_log.record,
                "inbox/rejected",
                {"command_id": command.command_id, "reason": error},
                turn_id=command.turn_id,
            )
            await asyncio.to_thread(self._refresh)

    async def _execute(self, command: Command) -> None:
        if command.kind == "submit":
            await self._start_turn(command)
        else:  # resume/respond/cancel/reconcile arrive with the HITL and recovery work
            self.inbox_log.record(
                "inbox/rejected",
                {
                    "command_id": command.command_id,
                    "reason": f"{command.kind} is not supported by this runtime version",
                },
            )

    # -- one run -----------------------------------------------------------------------------

    async def _start_turn(self, command: Command) -> None:
        turn_id = command.turn_id or new_id("turn")
        run_id = new_id("run")
        text = command.input or ""
        w = self.writer
        w.add(
            "inbox/started",
            {"command_id": command.command_id, "kind": command.kind},
            turn_id=turn_id,
            run_id=run_id,
        )
        w.add(
            "turn/start",
            {"input": text, "command_id": command.command_id},
            turn_id=turn_id,
            run_id=run_id,
        )
        w.add(
            "run/start",
            {"reason": "submit", "command_id": command.command_id},
            turn_id=turn_id,
            run_id=run_id,
        )
        w.add(
            "input/received",
            {
                "input_id": command.command_id,
                "kind": "submit",
                "text": text,
                "command_id": command.command_id,
            },
            turn_id=turn_id,
            run_id=run_id,
        )
        w.add(
            "message/user",
            {
                "message": Message(
                    id=f"msg_{command.command_id}", role="user", text=text, turn_id=turn_id
                )
            },
            turn_id=turn_id,
            run_id=run_id,
        )
        await self._run(turn_id, run_id, applied=[command.command_id])

    async def _open(self, turn_id: str, run_id: str) -> None:
        await asyncio.to_thread(
            self.inbox_log.record, "inbox/opened", {}, turn_id=turn_id, run_id=run_id
        )

    async def _close(self, turn_id: str, run_id: str) -> int:
        event = await asyncio.to_thread(
            self.inbox_log.record, "inbox/closed", {}, turn_id=turn_id, run_id=run_id
        )
        return event.seq

    def _publish(self, kind: str, turn_id: str, run_id: str, **data: Any) -> None:
        self.runtime.hub.publish(LiveEvent(kind, turn_id, run_id, data))

    async def _run(self, turn_id: str, run_id: str, applied: list[str]) -> None:
        """Steps until the turn completes, fails, or needs a person."""
        w = self.writer
        await self._open(turn_id, run_id)
        self._publish("status", turn_id, run_id, status="running")
        step = 0
        while True:
            if step >= self.agent.max_steps:
                await self._finish(
                    turn_id,
                    run_id,
                    "failed",
                    applied,
                    error=f"stopped after max_steps={self.agent.max_steps} "
                    "steps without a final answer",
                )
                return
            step += 1
            step_id = new_id("step")
            w.add(
                "step/start",
                {"step_id": step_id, "iteration": step},
                turn_id=turn_id,
                run_id=run_id,
            )
            applied.extend(await self._take_inputs(turn_id, run_id))
            try:
                reply = await self._model_call(turn_id, run_id)
            except ModelError as exc:
                await self._finish(
                    turn_id, run_id, "failed", applied, error=str(exc), step_id=step_id
                )
                return
            text, calls = reply
            if calls:
                await self._tool_calls(turn_id, run_id, calls)
                self._checkpoint(turn_id, run_id, step, applied)
                w.add(
                    "step/end",
                    {"step_id": step_id, "status": "continued"},
                    turn_id=turn_id,
                    run_id=run_id,
                )
                applied = []
                continue
            # A final answer. Steering accepted before we close the run for input gets
            # one more step in this run, so no guidance is ever lost.
            await w.flush()
            close_seq = await self._close(turn_id, run_id)
            await asyncio.to_thread(self._refresh_inbox)
            late = [
                c
                for c in self.inbox.steers_for(turn_id, before=close_seq)
                if c.command_id not in self.state.received_inputs
            ]
            if late:
                await self._open(turn_id, run_id)
                self._checkpoint(turn_id, run_id, step, applied)
                w.add(
                    "step/end",
                    {"step_id": step_id, "status": "continued"},
                    turn_id=turn_id,
                    run_id=run_id,
                )
                applied = []
                continue
            message = self.state.context[-1]  # the final assistant message, same id
            w.add(
                "turn/output",
                {"message": message, "status": "completed"},
                turn_id=turn_id,
                run_id=run_id,
            )
            await self._finish(turn_id, run_id, "completed", applied, step_id=step_id, closed=True)
            return

    def _refresh_inbox(self) -> None:
        while batch := self.store.inbox_read_after(self.key, self.inbox.seq, 1000):
            for event in batch:
                self.inbox.apply(event)

    async def _take_inputs(self, turn_id: str, run_id: str) -> list[str]:
        """Steering for this turn and injected material not yet in the context."""
        await asyncio.to_thread(self._refresh_inbox)
        fresh = [
            c
            for c in self.inbox.steers_for(turn_id) + self.inbox.injects()
            if c.command_id not in self.state.received_inputs
        ]
        fresh.sort(key=lambda c: c.seq)
        for c in fresh:
            kind = "steer" if c.kind == "steer" else "inject"
            self.writer.add(
                "input/received",
                {
                    "input_id": c.command_id,
                    "kind": kind,
                    "text": c.input or "",
                    "command_id": c.command_id,
                },
                turn_id=turn_id,
                run_id=run_id,
            )
            self.writer.add(
                "message/user",
                {
                    "message": Message(
                        id=f"msg_{c.command_id}", role="user", text=c.input or "", turn_id=turn_id
                    )
                },
                turn_id=turn_id,
                run_id=run_id,
            )
        return [c.command_id for c in fresh]

    def _checkpoint(self, turn_id: str, run_id: str, step: int, applied: list[str]) -> None:
        w = self.writer
        w.add(
            "state/checkpoint",
            {
                "reason": "step",
                "state": {
                    "turn_id": turn_id,
                    "run_id": run_id,
                    "step": step,
                    "context_messages": len(self.state.context),
                },
            },
            turn_id=turn_id,
            run_id=run_id,
        )
        if applied:
            w.add("input/applied", {"input_ids": applied}, turn_id=turn_id, run_id=run_id)

    async def _finish(
        self,
        turn_id: str,
        run_id: str,
        status: str,
        applied: list[str],
        *,
        error: str | None = None,
        step_id: str | None = None,
        closed: bool = False,
    ) -> None:
        w = self.writer
        if not closed:
            await w.flush()
            await self._close(turn_id, run_id)
        run = self.state.runs.get(run_id)
        self._checkpoint(turn_id, run_id, run.steps if run else 0, applied)
        if step_id is not None:
            w.add(
                "step/end",
                {"step_id": step_id, "status": "terminal"},
                turn_id=turn_id,
                run_id=run_id,
            )
        w.add(f"turn/{status}", {"error": error}, turn_id=turn_id, run_id=run_id)
        w.add("run/end", {"status": status, "error": error}, turn_id=turn_id, run_id=run_id)
        await w.flush()
        self._publish("status", turn_id, run_id, status=status)

    # -- the model call ----------------------------------------------------------------------

    async def _model_call(self, turn_id: str, run_id: str) -> tuple[str, list[ToolCallData]]:
        w = self.writer
        agent = self.agent
        state = self.state
        call_id = new_id("mc")
        prefix = state.requested_messages
        new_messages = state.context[prefix:]
        w.add(
            "request/prepared",
            {
                "model_call_id": call_id,
                "model": agent.model.name,
                "prefix": prefix,
                "messages": new_messages,
                "instructions": agent.instructions if prefix == 0 else None,
                "tools": [t.name for t in agent.tools],
            },
            turn_id=turn_id,
            run_id=run_id,
        )
        request = ModelRequest(
            messages=tuple(build_context(agent.instructions, state.context)),
            tools=tuple(t.spec() for t in agent.tools),
        )
        for attempt in range(1, MODEL_RETRIES + 2):
            w.add(
                "model/dispatch",
                {"model_call_id": call_id, "attempt": attempt},
                turn_id=turn_id,
                run_id=run_id,
            )
            await w.flush()  # commit before side effect
            try:
                return await self._stream(call_id, request, turn_id, run_id)
            except ModelError as exc:
                if not exc.retryable or attempt > MODEL_RETRIES:
                    w.add(
                        "model/end",
                        {
                            "model_call_id": call_id,
                            "status": "failed",
                            "model": agent.model.name,
                            "error": str(exc),
                        },
                        turn_id=turn_id,
                        run_id=run_id,
                    )
                    raise
                delay = 0.2 * 2 ** (attempt - 1)
                w.add(
                    "model/retry",
                    {
                        "model_call_id": call_id,
                        "attempt": attempt,
                        "error": str(exc),
                        "delay_s": delay,
                    },
                    turn_id=turn_id,
                    run_id=run_id,
                )
                await asyncio.sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _stream(
        self, call_id: str, request: ModelRequest, turn_id: str, run_id: str
    ) -> tuple[str, list[ToolCallData]]:
        w = self.writer
        started = time.monotonic()
        text_parts: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        usage: Usage | None = None
        finish: str | None = None
        group_text: list[str] = []
        group_frags: list[dict[str, Any]] = []
        group_start = 0
        pieces = 0
        group_opened = started
        last_commit = started

        def close_group() -> None:
            nonlocal group_text, group_frags, group_start
            if not group_text and not group_frags:
                return
            w.add(
                "model/chunk",
                {
                    "model_call_id": call_id,
                    "index": group_start,
                    "text": "".join(group_text),
                    "tool_call_fragments": group_frags,
                    "pieces": pieces - group_start,
                },
                turn_id=turn_id,
                run_id=run_id,
            )
            group_text, group_frags, group_start = [], [], pieces

        try:
            async for item in self.agent.model.stream(request):
                if isinstance(item, TextDelta):
                    text_parts.append(item.text)
                    group_text.append(item.text)
                    pieces += 1
                    self._publish(
                        "model/chunk", turn_id, run_id, model_call_id=call_id, text=item.text
                    )
                elif isinstance(item, ToolCallDelta):
                    slot = calls.setdefault(item.index, {"call_id": None, "name": None, "args": []})
                    slot["call_id"] = slot["call_id"] or item.call_id
                    slot["name"] = slot["name"] or item.name
                    slot["args"].append(item.arguments_delta)
                    group_frags.append(
                        {
                            "index": item.index,
                            "call_id": item.call_id,
                            "name": item.name,
                            "arguments_delta": item.arguments_delta,
                        }
                    )
                    pieces += 1
                    self._publish(
                        "model/chunk",
                        turn_id,
                        run_id,
                        model_call_id=call_id,
                        tool_call=group_frags[-1],
                    )
                elif isinstance(item, Usage):
                    usage = item
                elif isinstance(item, Finish):
                    finish = item.reason
                now = time.monotonic()
                if (
                    now - group_opened >= CHUNK_GROUP_INTERVAL
                    or pieces - group_start >= CHUNK_GROUP_MAX
                ):
                    close_group()
                    group_opened = now
                if now - last_commit >= CHUNK_COMMIT_INTERVAL and w.pending:
                    await w.flush()
                    last_commit = time.monotonic()
        except ModelError:
            close_group()
            raise
        except Exception as exc:
            close_group()
            raise ModelError(f"{type(exc).__name__}: {exc}") from exc
        close_group()
        tool_calls: list[ToolCallData] = []
        for index in sorted(calls):
            slot = calls[index]
            raw = "".join(slot["args"])
            try:
                arguments = json.loads(raw) if raw.strip() else {}
            except json.JSONDecodeError:
                arguments = {"_raw": raw}
            if not isinstance(arguments, dict):
                arguments = {"_raw": raw}
            tool_calls.append(
                ToolCallData(
                    call_id=slot["call_id"] or new_id("call"),
                    name=slot["name"] or "",
                    arguments=arguments,
                )
            )
        text = "".join(text_parts)
        w.add(
            "model/end",
            {
                "model_call_id": call_id,
                "status": "completed",
                "model": self.agent.model.name,
                "input_tokens": usage.input_tokens if usage else None,
                "output_tokens": usage.output_tokens if usage else None,
                "latency_ms": round((time.monotonic() - started) * 1000, 3),
                "finish_reason": finish,
            },
            turn_id=turn_id,
            run_id=run_id,
        )
        message = Message(
            id=f"msg_{call_id}",
            role="assistant",
            text=text,
            tool_calls=tuple(tool_calls),
            turn_id=turn_id,
        )
        w.add(
            "message/assistant",
            {"message": message, "model_call_id": call_id},
            turn_id=turn_id,
            run_id=run_id,
        )
        return text, tool_calls

    # -- tool calls --------------------------------------------------------------------------

    async def _tool_calls(self, turn_id: str, run_id: str, calls: list[ToolCallData]) -> None:
        w = self.writer
        for call in calls:
            w.add(
                "tool/requested",
                {"call_id": call.call_id, "name": call.name, "arguments": call.arguments},
                turn_id=turn_id,
                run_id=run_id,
            )
        for call in calls:
            await self._tool_call(turn_id, run_id, call)

    async def _tool_call(self, turn_id: str, run_id: str, call: ToolCallData) -> None:
        w = self.writer
        tool = self.agent.tool_named(call.name)
        problem: str | None = None
        arguments: dict[str, Any] = dict(call.arguments)
        if tool is None:
            names = ", ".join(t.name for t in self.agent.tools) or "none"
            problem = f"there is no tool named {call.name!r}; available tools: {names}"
        else:
            try:
                tool.validate(arguments)
            except InvalidToolArguments as exc:
                problem = str(exc)
        if problem is not None or tool is None:
            w.add(
                "tool/decision",
                {"call_id": call.call_id, "decision": "denied", "reason": problem},
                turn_id=turn_id,
                run_id=run_id,
            )
            w.add(
                "tool/result",
                {
                    "call_id": call.call_id,
                    "name": call.name,
                    "status": "error",
                    "output": f"Error: {problem}",
                },
                turn_id=turn_id,
                run_id=run_id,
            )
            return
        w.add(
            "tool/decision",
            {"call_id": call.call_id, "decision": "allowed"},
            turn_id=turn_id,
            run_id=run_id,
        )
        w.add(
            "tool/dispatch",
            {
                "call_id": call.call_id,
                "name": tool.name,
                "arguments": arguments,
                "idempotent": tool.idempotent,
            },
            turn_id=turn_id,
            run_id=run_id,
        )
        w.add(
            "action/start",
            {"call_id": call.call_id, "name": tool.name},
            turn_id=turn_id,
            run_id=run_id,
        )
        await w.flush()  # commit before side effect
        loop = asyncio.get_running_loop()
        progress_index = 0

        def on_loop(fn: Callable[[], object]) -> None:
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is loop:
                fn()
            else:
                loop.call_soon_threadsafe(fn)

        def record(type_: str, data: Any, required: bool) -> None:
            event = Event.create(
                type_, data, required=required, turn_id=turn_id, run_id=run_id
            )  # validates here
            on_loop(functools.partial(w.add_event, event))

        def progress(data: Any) -> None:
            nonlocal progress_index
            index = progress_index
            progress_index += 1
            event = Event.create(
                "tool/chunk",
                {"call_id": call.call_id, "index": index, "data": data},
                turn_id=turn_id,
                run_id=run_id,
            )
            self._publish("tool/chunk", turn_id, run_id, call_id=call.call_id, data=data)
            on_loop(functools.partial(w.add_event, event))

        ctx = ToolContext(self.key, turn_id, run_id, call.call_id, record, progress)
        started = time.monotonic()
        try:
            output = await tool.invoke(arguments, ctx)
            status = "success"
            action = "returned"
        except Exception as exc:  # noqa: BLE001 - the model sees the error and can react
            output = f"Error: {type(exc).__name__}: {exc}"
            status = "error"
            action = "failed"
        await asyncio.sleep(0)  # let records/progress handed over from a worker thread land
        w.add(
            "action/end",
            {"call_id": call.call_id, "name": tool.name, "status": action},
            turn_id=turn_id,
            run_id=run_id,
        )
        w.add(
            "tool/result",
            {
                "call_id": call.call_id,
                "name": tool.name,
                "status": status,
                "output": output,
                "duration_ms": round((time.monotonic() - started) * 1000, 3),
            },
            turn_id=turn_id,
            run_id=run_id,
        )
