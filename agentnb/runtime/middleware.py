"""Runs the agent's middleware hooks (``agentnb.middleware``) for the host's running turn.

Each hook gets a ``MiddlewareContext`` whose ``record`` adds application events to the run's
writer (from the hook's worker thread too) and whose ``aflush`` commits them before the run
goes on (the first commit of a new turn stays conditioned on the inbox head). A hook runs
against the run's stop: an interrupt, the time limit or a close ends the wait for it (a
sync hook's thread is left behind) and the run stops as at any step boundary. A hook that
raises ends the run failed with ``MiddlewareFailed``; a required reducer that refuses a
record (``ReducerFailed``) fails it with its own reason.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from agentnb.errors import InvalidInput, MiddlewareFailed, ReducerFailed, StorageError, describe
from agentnb.events import Event, ToolCallData, app_type
from agentnb.middleware import Hook, MiddlewareContext, ModelReply, Refuse, ToolCallResult
from agentnb.models.base import ModelRequest
from agentnb.projections.app_state import reduce
from agentnb.runtime.scope import RunHost, StopRun, TurnCancelled

__all__ = ["MiddlewareRunner", "check_record"]


def check_record(host: RunHost, event: Event) -> None:
    """Fail closed before a required application event with a reducer is written: its
    reducer runs on the state folded so far and ``ReducerFailed`` refuses the event."""
    if not event.required:
        return
    registered = app_type(event.type)
    if registered is None or registered.reducer is None:
        return
    reduce(event.type, host.state.app.states.get(event.type, {}), event)


class MiddlewareRunner:
    """Calls the hooks of ``host.agent.middleware`` at the points the run reaches."""

    def __init__(self, host: RunHost, flush: Callable[[str], Awaitable[None]]) -> None:
        self.host = host
        self.flush_before_side_effect = flush
        self.step_id: str | None = None
        """The step the run is in (set by the step loop): the context's ``step_id``."""

    async def before_model(self, turn_id: str, run_id: str, request: ModelRequest) -> None:
        for hook in self.host.agent.middleware.before_model:
            await self.call(hook, "before_model", turn_id, run_id, None, request)

    async def after_model(
        self, turn_id: str, run_id: str, text: str, calls: list[ToolCallData]
    ) -> None:
        hooks = self.host.agent.middleware.after_model
        if not hooks:
            return
        reply = ModelReply(text=text, tool_calls=tuple(calls))
        for hook in hooks:
            await self.call(hook, "after_model", turn_id, run_id, None, reply)

    async def before_tool(self, turn_id: str, run_id: str, call: ToolCallData) -> str | None:
        """Why a middleware refused ``call`` (``Refuse``), or None to let it go on."""
        for hook in self.host.agent.middleware.before_tool:
            answer = await self.call(hook, "before_tool", turn_id, run_id, call.call_id, call)
            if isinstance(answer, Refuse):
                return f"refused by middleware {hook.label}: {answer.reason}"
        return None

    async def after_tool(
        self, turn_id: str, run_id: str, call: ToolCallData, status: str, output: str
    ) -> None:
        hooks = self.host.agent.middleware.after_tool
        if not hooks:
            return
        result = ToolCallResult(status=status, output=output)
        for hook in hooks:
            await self.call(hook, "after_tool", turn_id, run_id, call.call_id, call, result)

    async def call(
        self,
        hook: Hook,
        name: str,
        turn_id: str,
        run_id: str,
        call_id: str | None,
        *args: Any,
    ) -> Any:
        """Run one hook against the run's stop; what it returned."""
        refused: list[ReducerFailed] = []
        ended = threading.Event()
        ctx = self.context(turn_id, run_id, call_id, refused, ended)
        if hook.is_async:
            task: asyncio.Future[Any] = asyncio.ensure_future(_guarded(hook.fn(ctx, *args)))
        else:
            task = asyncio.ensure_future(asyncio.to_thread(_sync, hook.fn, ctx, *args))
        stopped = asyncio.ensure_future(self.host.stop.event.wait())
        try:
            await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            task.cancel()
            raise
        finally:
            stopped.cancel()
        ended.set()  # the context is the hook's for its call only
        if not task.done():  # stopped while the hook ran: leave it (a thread cannot be cut)
            task.cancel()
            task.add_done_callback(_ignore)
            raise StopRun
        await asyncio.sleep(0)  # records handed over from the hook's thread land first
        if refused:
            raise refused[0]
        failure = task.exception() if not task.cancelled() else asyncio.CancelledError()
        if failure is None:
            return task.result()
        if isinstance(failure, StopRun | TurnCancelled | ReducerFailed | StorageError):
            raise failure  # the run's own ends (a stop, a commit the store refused) go on up
        raise MiddlewareFailed(
            f"middleware {hook.label}.{name} raised: {describe(failure)}"
        ) from failure

    def context(
        self,
        turn_id: str,
        run_id: str,
        call_id: str | None,
        refused: list[ReducerFailed],
        ended: threading.Event,
    ) -> MiddlewareContext:
        """A hook's context: records go to the run's writer (handed to the loop from a
        worker thread); a record a required reducer refuses is remembered in ``refused``;
        once the hook's call ``ended``, the context refuses to record or flush."""
        host = self.host
        loop = asyncio.get_running_loop()

        def check_open() -> None:
            if ended.is_set():
                raise InvalidInput(
                    "this middleware context belongs to a hook call that has ended; record "
                    "from inside the hook (do not keep ctx for later writes)"
                )

        def record(type_: str, data: Any, required: bool) -> None:
            check_open()
            event = Event.create(type_, data, required=required, turn_id=turn_id, run_id=run_id)
            try:
                check_record(host, event)
            except ReducerFailed as exc:
                refused.append(exc)
                raise
            if _running() is loop:
                host.writer.add_event(event)
            else:
                loop.call_soon_threadsafe(host.writer.add_event, event)

        async def aflush() -> None:
            check_open()
            await asyncio.sleep(0)  # records handed over from the hook's thread land first
            if host.writer.pending:
                await self.flush_before_side_effect(turn_id)

        def flush() -> None:
            if _running() is loop:
                raise InvalidInput(
                    "ctx.flush() blocks until the commit and would stop the runtime's event "
                    "loop here; in an async hook use: await ctx.aflush()"
                )
            asyncio.run_coroutine_threadsafe(aflush(), loop).result()

        return MiddlewareContext(
            host.key, turn_id, run_id, self.step_id, call_id, record, aflush, flush
        )


def _running() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class _HookExit(Exception):
    """A hook raised ``SystemExit`` or ``KeyboardInterrupt`` (its ``__cause__``)."""


async def _guarded(coro: Awaitable[Any]) -> Any:
    try:
        return await coro
    except (SystemExit, KeyboardInterrupt) as exc:
        raise _HookExit(describe(exc)) from exc


def _sync(fn: Callable[..., Any], *args: Any) -> Any:
    try:
        result = fn(*args)
    except (SystemExit, KeyboardInterrupt) as exc:
        raise _HookExit(describe(exc)) from exc
    if asyncio.iscoroutine(result):
        result.close()
        raise MiddlewareFailed("a sync hook returned a coroutine; define it with async def")
    return result


def _ignore(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()
