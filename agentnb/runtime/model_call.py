"""One model call of a step: the request, its durable dispatch, the stream, the reply.

``request/prepared`` and ``context/build`` describe the request, ``model/dispatch`` commits
before the model is called (the side effect), and the streamed pieces are grouped into
``model/chunk`` events committed at most every ``CHUNK_COMMIT_INTERVAL`` seconds. Retryable
failures are retried with the model's backoff unless part of the reply already streamed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from agentnb.blocks import with_bytes
from agentnb.errors import InvalidInput, describe
from agentnb.events import Event, Message, ToolCallData
from agentnb.ids import new_id
from agentnb.limits import Limits
from agentnb.models.base import (
    ModelError,
    ModelRequest,
    ReasoningDelta,
    StreamCollector,
    TextDelta,
    ToolCallDelta,
)
from agentnb.projections.state import build_context
from agentnb.runtime.middleware import MiddlewareRunner
from agentnb.runtime.scope import RunHost, StopRun
from agentnb.runtime.writer import ChunkGroup
from agentnb.tracebacks import format_traceback

__all__ = [
    "CHUNK_COMMIT_INTERVAL",
    "MODEL_RETRIES",
    "STOP_GRACE",
    "ModelCall",
    "ReplyTooLarge",
    "Size",
]

log = logging.getLogger("agentnb.models")
"""Model calls that fail are logged here (INFO: the run ends with the reason committed),
with their (scrubbed) traceback."""

CHUNK_COMMIT_INTERVAL = 0.1
"""Seconds at least between two commits of streamed chunks."""
MODEL_RETRIES = 3
STOP_GRACE = 1.0
"""Seconds a stopped model call gets to unwind once cancelled before it is left behind."""

log = logging.getLogger("agentnb.runtime")


def with_block_bytes(
    messages: tuple[Message, ...], get_blob: Callable[[str], bytes]
) -> tuple[Message, ...]:
    """``messages`` with their blocks' bytes inline (read from the store's blobs): what the
    model adapters send. The log keeps the digests only."""
    return tuple(
        m.model_copy(update={"blocks": with_bytes(m.blocks, get_blob)}) if m.blocks else m
        for m in messages
    )


def _ignore(task: asyncio.Future[None]) -> None:
    if not task.cancelled():
        task.exception()


class ReplyTooLarge(ModelError):
    """A model reply passed a bound of ``Limits``; ``stop_reason`` names which."""

    def __init__(self, message: str, stop_reason: str) -> None:
        super().__init__(message)
        self.stop_reason: str | None = stop_reason


class Size:
    """What one reply streamed so far, against ``Limits.max_reply_chars`` and
    ``max_tool_calls_per_reply``."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.chars = 0
        self.calls: set[int] = set()

    def add(self, item: object) -> None:
        limits = self.limits
        if isinstance(item, TextDelta | ReasoningDelta):
            self.chars += len(item.text)
        elif isinstance(item, ToolCallDelta):
            self.chars += len(item.arguments_delta)
            self.calls.add(item.index)
            if len(self.calls) > limits.max_tool_calls_per_reply:
                raise ReplyTooLarge(
                    f"the model's reply asked for more than {limits.max_tool_calls_per_reply} "
                    "tool calls (Limits(max_tool_calls_per_reply=...)); the call was stopped. "
                    "Ask for fewer calls per step, or raise the limit",
                    "too_many_tool_calls",
                )
        if self.chars > limits.max_reply_chars:
            raise ReplyTooLarge(
                f"the model's reply passed {limits.max_reply_chars:,} characters "
                "(Limits(max_reply_chars=...)); the call was stopped. Ask for a shorter "
                "answer, or raise the limit",
                "reply_too_large",
            )


class ModelCall:
    """Calls the agent's model for the host's running turn and records what it said."""

    def __init__(
        self,
        host: RunHost,
        flush: Callable[[str], Awaitable[None]],
        *,
        middleware: MiddlewareRunner | None = None,
    ) -> None:
        self.host = host
        self.flush_before_side_effect = flush
        self.middleware = middleware or MiddlewareRunner(host, flush)
        self.bad_arguments: dict[str, str] = {}
        """Tool calls of the last reply whose arguments were not a JSON object: why."""
        self.finish_reason: str | None = None
        """The finish reason of the last completed reply."""

    async def call(self, turn_id: str, run_id: str) -> tuple[str, list[ToolCallData]]:
        """Call the model on the working context: (its text, its tool calls)."""
        host = self.host
        w = host.writer
        agent = host.agent
        state = host.state
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
        messages = tuple(build_context(agent.instructions, state.context))
        tools = tuple(t.spec() for t in agent.tools)
        w.add(
            "context/build",
            {
                "message_count": len(messages),
                "details": {
                    "model_call_id": call_id,
                    "tokens": agent.model.count_tokens(messages, tools),
                    "compactions": state.compactions,
                },
            },
            turn_id=turn_id,
            run_id=run_id,
        )
        # The model is told the time limit, a moment after the stop that cancels it: the
        # stop (recorded as the time limit) comes first; the model's deadline is a backstop.
        deadline = None if host.stop.deadline is None else host.stop.deadline + STOP_GRACE
        if any(m.blocks for m in messages):  # the bytes of images and files, for the adapter
            messages = await asyncio.to_thread(with_block_bytes, messages, host.store.get_blob)
        request = ModelRequest(messages=messages, tools=tools, deadline=deadline)
        await self.middleware.before_model(turn_id, run_id, request)
        for attempt in range(1, MODEL_RETRIES + 2):
            w.add(
                "model/dispatch",
                {"model_call_id": call_id, "attempt": attempt},
                turn_id=turn_id,
                run_id=run_id,
            )
            await self.flush_before_side_effect(turn_id)
            try:
                return await self.stream(call_id, request, turn_id, run_id)
            except ModelError as exc:
                if not exc.retryable or attempt > MODEL_RETRIES:
                    trace = format_traceback(exc)
                    log.info("session %s: model call %s failed:\n%s", host.key, call_id, trace)
                    w.add(
                        "model/end",
                        {
                            "model_call_id": call_id,
                            "status": "failed",
                            "model": agent.model.name,
                            "error": str(exc),
                            "traceback": trace,
                        },
                        turn_id=turn_id,
                        run_id=run_id,
                    )
                    raise
                delay = agent.model.backoff.delay(attempt, exc)
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
                await self.flush_before_side_effect(turn_id)  # the log says it waits
                if await self.stopped_within(delay):  # a stop ends the wait too
                    self.cancelled(call_id, None, turn_id, run_id)
                    raise StopRun from None
        raise AssertionError("unreachable")  # pragma: no cover

    async def stopped_within(self, seconds: float) -> bool:
        """Wait ``seconds``, or less if the run is asked to stop: whether it was."""
        try:
            await asyncio.wait_for(self.host.stop.event.wait(), seconds)
        except TimeoutError:
            return False
        return True

    async def stream(
        self, call_id: str, request: ModelRequest, turn_id: str, run_id: str
    ) -> tuple[str, list[ToolCallData]]:
        """Stream one attempt, grouping and committing its pieces; record the reply.

        The stream is read in a task of its own, so a stop (interrupt, cancel, time limit,
        close, delete) ends the call at once even while the model sends nothing: the task is
        cancelled and the call recorded ``cancelled``.
        """
        host = self.host
        started = time.monotonic()
        group = ChunkGroup(host.writer, call_id, turn_id, run_id)
        collector = StreamCollector()
        reading = asyncio.ensure_future(
            self.read(call_id, request, collector, group, turn_id, run_id)
        )
        stopped = asyncio.ensure_future(host.stop.event.wait())
        try:
            await asyncio.wait({reading, stopped}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            reading.cancel()
            raise
        finally:
            stopped.cancel()
        if not reading.done():
            reading.cancel()
            await asyncio.wait({reading}, timeout=STOP_GRACE)
            if not reading.done():  # a model that ignores cancellation: leave it behind
                log.warning("session %s: model call %s ignored its cancel", host.key, call_id)
                reading.add_done_callback(_ignore)
        else:
            failure = reading.exception()
            # A stop noticed between two pieces, or a failure the stop caused: stopped.
            if not isinstance(failure, StopRun) and not (
                isinstance(failure, ModelError) and host.stop.is_set()
            ):
                reading.result()  # raises the model's failure
                group.close()
                return self.reply(call_id, collector, started, turn_id, run_id)
        group.close()
        self.cancelled(call_id, started, turn_id, run_id)
        raise StopRun

    async def read(
        self,
        call_id: str,
        request: ModelRequest,
        collector: StreamCollector,
        group: ChunkGroup,
        turn_id: str,
        run_id: str,
    ) -> None:
        """Read the model's stream into ``collector``, committing chunk groups as it goes."""
        host = self.host
        w = host.writer
        last_commit = time.monotonic()
        size = Size(host.limits)
        stream = host.agent.model.stream(request)
        try:
            async for item in stream:
                size.add(item)  # before the piece is kept: a reply past its bound stops here
                collector.add(item)
                if isinstance(item, TextDelta | ReasoningDelta | ToolCallDelta):
                    piece = group.add(item)
                    host.publish("model/chunk", turn_id, run_id, model_call_id=call_id, **piece)
                if host.stop.is_set():
                    raise StopRun
                now = time.monotonic()
                group.close_if_due(now)
                if now - last_commit >= CHUNK_COMMIT_INTERVAL and w.pending:
                    # Shielded: a stop cancels this task, never a commit half way.
                    await asyncio.shield(w.flush())
                    last_commit = time.monotonic()
        except ModelError as exc:
            group.close()
            if exc.retryable and group.pieces:
                # Part of the reply was streamed (and may be committed): never retried.
                raise ModelError(
                    f"{exc} (after part of the reply was streamed, so it is not retried)"
                ) from exc
            raise
        except StopRun:
            raise
        except Exception as exc:
            group.close()
            raise ModelError(describe(exc)) from exc
        finally:
            close = getattr(stream, "aclose", None)
            if close is not None:
                await close()

    def cancelled(self, call_id: str, started: float | None, turn_id: str, run_id: str) -> None:
        """Record the model call as cancelled by a stop (``started``: its attempt's start)."""
        latency = None if started is None else round((time.monotonic() - started) * 1000, 3)
        self.host.writer.add(
            "model/end",
            {
                "model_call_id": call_id,
                "status": "cancelled",
                "model": self.host.agent.model.name,
                "latency_ms": latency,
            },
            turn_id=turn_id,
            run_id=run_id,
        )

    def reply(
        self, call_id: str, collector: StreamCollector, started: float, turn_id: str, run_id: str
    ) -> tuple[str, list[ToolCallData]]:
        """Record a completed reply (``model/end``, then the assistant message)."""
        w = self.host.writer
        self.bad_arguments = {}
        self.finish_reason = collector.finish_reason
        tool_calls = collector.tool_calls(problems=self.bad_arguments)
        message = Message(
            id=f"msg_{call_id}",
            role="assistant",
            text=collector.text,
            tool_calls=tuple(tool_calls),
            turn_id=turn_id,
            reasoning=collector.reasoning(),
        )
        try:
            reply = Event.create(
                "message/assistant",
                {"message": message, "model_call_id": call_id},
                turn_id=turn_id,
                run_id=run_id,
            )
        except InvalidInput as exc:
            raise ModelError(f"the model's reply cannot be recorded: {exc}") from None
        usage = collector.usage
        end = {
            "model_call_id": call_id,
            "status": "completed",
            "model": self.host.agent.model.name,
            "input_tokens": usage.input_tokens if usage else None,
            "output_tokens": usage.output_tokens if usage else None,
            "cached_tokens": usage.cached_tokens if usage else None,
            "reasoning_tokens": usage.reasoning_tokens if usage else None,
            "latency_ms": round((time.monotonic() - started) * 1000, 3),
            "finish_reason": collector.finish_reason,
        }
        # Stored only when there is something to say (older logs keep their bytes).
        if usage is not None and usage.cache_write_tokens is not None:
            end["cache_write_tokens"] = usage.cache_write_tokens
        if usage is not None and usage.estimated:
            end["usage_estimated"] = True
        if collector.reasoning_chars:
            end["reasoning_chars"] = collector.reasoning_chars
        w.add("model/end", end, turn_id=turn_id, run_id=run_id)
        w.add_event(reply)
        return collector.text, tool_calls
