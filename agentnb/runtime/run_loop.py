"""The step loop of one run: build context, call the model, run tools, checkpoint, repeat.

``RunLoop.run`` takes steps until the turn completes, fails, needs a person or is
interrupted; ``continue_`` first finishes the open tool calls of a resumed or answered turn.
While a run runs, ``watch`` notices interrupt commands from any process, the turn's time
limit and token budgets are checked at each step, and steering that arrives before the
completion commits is taken into one more step (the completion is conditioned on the inbox
head it was decided from). The parts a step uses each live in their own module:
``recipes`` (events of turns and runs), ``model_call``, ``tool_call`` and ``context``.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import threading
import time
from dataclasses import dataclass

from agentnb.errors import InboxChanged, InvalidInput, describe
from agentnb.events import Event, Message, ToolCallData
from agentnb.ids import new_id
from agentnb.models.base import ModelError
from agentnb.projections.state import Command
from agentnb.records import UsageTotals
from agentnb.runtime.context import ContextKeeper
from agentnb.runtime.inline import InlineWait
from agentnb.runtime.middleware import MiddlewareRunner
from agentnb.runtime.model_call import ModelCall
from agentnb.runtime.recipes import Recipes
from agentnb.runtime.scope import RunHost, StopRun, TurnCancelled
from agentnb.runtime.tool_call import ToolRunner

__all__ = ["RunLoop"]

log = logging.getLogger("agentnb.runtime")


PAUSED = "pause_turn"
"""The finish reason of a reply the provider paused (Anthropic's ``pause_turn``): the run
takes another step, which sends the paused reply back so the model continues it."""


class RunLoop:
    """Runs the host's turns step by step, with the parts that each step uses."""

    def __init__(self, host: RunHost) -> None:
        self.host = host
        self.recipes = Recipes(host)
        self.middleware = MiddlewareRunner(host, self.flush_before_side_effect)
        self.model = ModelCall(host, self.flush_before_side_effect, middleware=self.middleware)
        self.tools = ToolRunner(
            host,
            self.recipes,
            self.flush_before_side_effect,
            lambda: self.model.bad_arguments,
            middleware=self.middleware,
        )
        self.context = ContextKeeper(host)
        self.inbox_moved = asyncio.Event()
        """Set by a run's watcher each time it folded new inbox commands."""
        self.inline = InlineWait(
            host, self.recipes, self.flush_before_side_effect, self.inbox_moved
        )
        self.current: _Watching | None = None
        """What watches the run that runs now."""
        self.watching = 0
        """Runs being watched now (``start_watching``): their watcher reads the inbox for
        other writers' commands, so ``catch_up_inbox`` may trust the store's hint."""

    async def continue_(self, turn_id: str, run_id: str) -> None:
        """Finish the turn's open tool calls (answered, re-runnable, not yet run), then go on."""
        self.host.reset_stop()
        watching = self.start_watching(turn_id, run_id)
        try:
            if await self.carry_on(turn_id, run_id) and await self.suspended(turn_id, run_id):
                return
        except StopRun:
            await self.recipes.finish(turn_id, run_id, "interrupted", [])
            return
        finally:
            self.stop_watching(watching)
        await self.run(turn_id, run_id, [])

    async def carry_on(self, turn_id: str, run_id: str) -> bool:
        """Carry out the turn's open tool calls (answered, re-runnable, not yet run): True if
        the turn still waits for a person."""
        for call in self.host.state.open_calls(turn_id):
            data = ToolCallData(call_id=call.call_id, name=call.name, arguments=call.arguments)
            resolved = self.host.state.resolved.get(call.call_id)
            if call.asking is not None:
                if call.asking not in self.host.state.pending:  # answered: ask again
                    await self.tools.run(turn_id, run_id, data, attempt=call.attempts + 1)
            elif resolved is not None:
                await self.tools.answered(turn_id, run_id, data, resolved["answer"])
            elif call.dispatched:  # uncertain, and check_resume allowed it: idempotent
                await self.tools.run(turn_id, run_id, data, attempt=call.attempts + 1)
            elif call.call_id not in self.host.state.pending:
                await self.tools.call(turn_id, run_id, data)
            if self.host.stop.is_set():
                raise StopRun
        waiting = await self.tools.settle(turn_id, run_id)  # sub-agent calls attached again
        return bool(self.host.state.pending_of(turn_id)) or waiting

    async def suspended(
        self,
        turn_id: str,
        run_id: str,
        applied: list[str] | None = None,
        step_id: str | None = None,
    ) -> bool:
        """The turn needs a person: wait in place for the answers (``wait_inline``), or end
        the run suspended with why (True)."""
        left = self.pause_time_limit()  # waiting for a person is not executing
        try:
            end = await self.inline.wait(turn_id, run_id, lambda: self.carry_on(turn_id, run_id))
        finally:
            self.resume_time_limit(turn_id, left)
        if end is None:
            return False  # answered in this run: it goes on
        code, reason = end
        await self.recipes.finish(
            turn_id,
            run_id,
            "suspended",
            applied or [],
            step_id=step_id,
            stop_reason=code,
            reason=reason,
        )
        return True

    async def start_turn(self, command: Command) -> None:
        turn_id, run_id = self.recipes.open_turn(command)
        # The turn starts only if nobody cancelled it since we picked it: the first commit
        # of the run is conditioned on the inbox head we decided from.
        self.host.guard = (turn_id, self.host.inbox.seq)
        self.host.reset_stop()
        try:
            await self.run(turn_id, run_id, applied=[command.command_id])
        except TurnCancelled:
            self.host.writer.pending.clear()
            await self.host.reload()

    async def run(self, turn_id: str, run_id: str, applied: list[str]) -> None:
        """Steps until the turn completes, fails, needs a person, or is interrupted."""
        w = self.host.writer
        self.host.publish("status", turn_id, run_id, status="running")
        watching = self.start_watching(turn_id, run_id)
        step = 0
        step_id: str | None = None
        try:
            while True:
                if self.host.stop.is_set():
                    raise StopRun
                if step >= self.host.agent.max_steps:
                    error = (
                        f"stopped after max_steps={self.host.agent.max_steps} steps without "
                        "a final answer"
                    )
                    await self.recipes.finish(
                        turn_id, run_id, "failed", applied, error=error, stop_reason="max_steps"
                    )
                    return
                budget = self.over_budget(turn_id)
                if budget is not None:
                    code, error = budget
                    await self.recipes.finish(
                        turn_id, run_id, "failed", applied, error=error, stop_reason=code
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
                self.middleware.step_id = step_id
                applied.extend(await self.take_inputs(turn_id, run_id))
                too_big = await self.context.fit(turn_id, run_id)
                if too_big is not None:
                    await self.recipes.finish(
                        turn_id,
                        run_id,
                        "failed",
                        applied,
                        error=too_big,
                        step_id=step_id,
                        stop_reason="context_overflow",
                    )
                    return
                try:
                    text, calls = await self.model.call(turn_id, run_id)
                except ModelError as exc:
                    await self.recipes.finish(
                        turn_id,
                        run_id,
                        "failed",
                        applied,
                        error=str(exc),
                        step_id=step_id,
                        stop_reason=exc.stop_reason,
                    )
                    return
                await self.middleware.after_model(turn_id, run_id, text, calls)
                if calls:
                    if await self.tools.calls(turn_id, run_id, calls) and await self.suspended(
                        turn_id, run_id, applied, step_id
                    ):
                        return
                elif self.model.finish_reason == PAUSED:
                    pass  # the provider paused a long turn: one more step sends it back
                else:
                    verdict = await self.verification(turn_id, run_id, step_id, applied)
                    if verdict == "failed":
                        return
                    if verdict == "passed" and await self.complete(
                        turn_id, run_id, step_id, applied
                    ):
                        return
                # Tool results to reason about, or steering that arrived during the final
                # model call: either way, one more step in this run.
                for event in self.recipes.checkpoint(turn_id, run_id, applied):
                    w.add_event(event)
                w.add(
                    "step/end",
                    {"step_id": step_id, "status": "continued"},
                    turn_id=turn_id,
                    run_id=run_id,
                )
                applied = []
                step_id = None
        except StopRun:
            await self.recipes.finish(turn_id, run_id, "interrupted", applied, step_id=step_id)
        finally:
            self.stop_watching(watching)

    def start_watching(self, turn_id: str, run_id: str) -> _Watching:
        """While a run runs: watch for its interrupts, record a stop when it is asked for,
        and arm its time limit."""
        stop = threading.Event()
        watcher = asyncio.create_task(self.watch(turn_id, run_id, stop))
        recorder = asyncio.create_task(self.record_stops(turn_id, run_id))
        self.watching += 1
        self.current = _Watching(stop, watcher, recorder, self.arm_time_limit(turn_id))
        return self.current

    def pause_time_limit(self) -> float | None:
        """Stop the time limit's clock while the run waits in place for a person: the
        seconds it had left, or None when no limit is armed."""
        watching = self.current
        stop = self.host.stop
        if watching is None or watching.limit is None or stop.deadline is None:
            return None
        watching.limit.cancel()
        watching.limit = None
        left = max(0.0, stop.deadline - time.monotonic())
        stop.deadline = None
        return left

    def resume_time_limit(self, turn_id: str, left: float | None) -> None:
        """Start the clock again with the ``left`` seconds ``pause_time_limit`` kept."""
        watching = self.current
        if left is None or watching is None or self.host.stop.is_set():
            return
        limit = self.time_limit(turn_id) or 0.0
        self.host.stop.deadline = time.monotonic() + left
        watching.limit = asyncio.get_running_loop().call_later(
            left, self.host.stop.request, _limit_reason(limit), "time_limit"
        )

    def stop_watching(self, watching: _Watching) -> None:
        if self.current is watching:
            self.current = None
        self.watching -= 1
        if watching.limit is not None:
            watching.limit.cancel()
        watching.watcher.cancel()
        watching.recorder.cancel()
        watching.stop.set()
        # End the watcher's wait in its worker thread now (it waits on this session only).
        self.host.store.wake_waiters(self.host.key)

    async def watch(self, turn_id: str, run_id: str, stop: threading.Event) -> None:
        """Notice interrupt commands for this run (from any process) while it runs."""
        pos = self.host.inbox.seq
        while True:
            # ``local``: the fold holds what the store object knows; others' commands come
            # by notification (PostgreSQL) or the store's poll, not a read per wake-up.
            head = await asyncio.to_thread(
                functools.partial(
                    self.host.store.wait_for_inbox, self.host.key, pos, 0.5, stop=stop, local=True
                )
            )
            if head <= pos:
                continue
            await self.host.refresh_inbox()
            pos = self.host.inbox.seq
            self.inbox_moved.set()  # an inline wait reads the new commands
            if self.host.stop.command is None and self.interrupt_for(run_id) is not None:
                self.stop_for(run_id)

    async def record_stops(self, turn_id: str, run_id: str) -> None:
        """Commit ``run/stop_requested`` the moment a stop is asked for (an interrupt
        command, the time limit, a close): the log says when, not only the run's end.

        Its own commit, which may carry what the step buffered so far. The first commit of a
        new turn is conditioned on the inbox head (``flush_before_side_effect``): until it is
        made, the run's end writes the stop instead.
        """
        stop = self.host.stop
        while True:
            await stop.asked.wait()
            stop.asked.clear()
            guard = self.host.guard
            if guard is not None and guard[0] == turn_id:
                continue
            if not self.recipes.stop_requested(turn_id, run_id):
                continue
            try:
                # Shielded: cancelling this task when the run ends must not cut a commit.
                await asyncio.shield(self.host.writer.flush())
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the run's next commit carries it
                log.info("session %s: the stop is committed later: %s", self.host.key, exc)

    async def catch_up_inbox(self) -> None:
        """``refresh_inbox``, unless every command the store object knows of is folded and
        a watcher reads for the rest.

        Commands accepted through this process are in the store's hint the moment they are
        accepted, so they are never missed here. Another process's command is seen by the
        watcher within a poll (or at once through a notification); reading here could only
        see it a little sooner, and what depends on *not* having missed one (the
        completion) is conditioned on the inbox head in the commit itself.
        """
        host = self.host
        if self.watching and host.store.inbox_head_hint(host.key) <= host.inbox.seq:
            return
        await host.refresh_inbox()

    def interrupt_for(self, run_id: str) -> str | None:
        """An interrupt command for this run that nobody handled yet."""
        for c in self.host.inbox.commands.values():
            if (
                c.kind == "interrupt"
                and c.run_id == run_id
                and c.command_id not in self.host.state.handled
            ):
                return c.command_id
        return None

    def stop_for(self, run_id: str) -> None:
        self.host.stop.by_command(self.interrupt_for(run_id))

    def over_budget(self, turn_id: str) -> tuple[str, str] | None:
        """(stop_reason, error) when the turn or the session used its token budget."""
        agent = self.host.agent
        turn = self.host.state.turns.get(turn_id)
        used = UsageTotals.of(turn.usage).total_tokens if turn is not None else 0
        if agent.max_turn_tokens is not None and used >= agent.max_turn_tokens:
            error = (
                f"stopped at max_turn_tokens={agent.max_turn_tokens}: the task used {used} "
                "tokens; resume() it to go on, or raise the budget"
            )
            return "max_turn_tokens", error
        total = UsageTotals.of(self.host.state.usage).total_tokens
        if agent.max_session_tokens is not None and total >= agent.max_session_tokens:
            error = (
                f"stopped at max_session_tokens={agent.max_session_tokens}: the session used "
                f"{total} tokens; raise the budget to go on"
            )
            return "max_session_tokens", error
        return None

    def arm_time_limit(self, turn_id: str) -> asyncio.TimerHandle | None:
        """Stop the run when the turn has executed for its time limit (over all its runs)."""
        limit = self.time_limit(turn_id)
        if limit is None:
            return None
        used = 0.0
        turn = self.host.state.turns.get(turn_id)
        for run_id in turn.run_ids if turn is not None else ():
            run = self.host.state.runs[run_id]
            if run.started_at is not None and run.ended_at is not None:
                used += (run.ended_at - run.started_at).total_seconds()
        reason = _limit_reason(limit)
        left = max(0.0, limit - used)
        self.host.stop.deadline = time.monotonic() + left  # what its model calls are told
        return asyncio.get_running_loop().call_later(
            left, self.host.stop.request, reason, "time_limit"
        )

    def time_limit(self, turn_id: str) -> float | None:
        """``submit(..., timeout=)`` of the turn, else ``Agent(max_turn_seconds=)``."""
        turn = self.host.state.turns.get(turn_id)
        command = self.host.inbox.commands.get(turn.command_id or "") if turn is not None else None
        timeout = command.data.get("timeout") if command is not None else None
        if isinstance(timeout, int | float):
            return float(timeout)
        return self.host.agent.max_turn_seconds

    async def flush_before_side_effect(self, turn_id: str) -> None:
        """Commit before a side effect; the first commit of a new turn is guarded."""
        guard = self.host.guard
        if guard is None or guard[0] != turn_id:
            await self.host.writer.flush()
            return
        seen = guard[1]
        while True:
            try:
                await self.host.writer.flush(expected_inbox=seen)
            except InboxChanged:
                await self.host.refresh_inbox()
                submit = self.host.state.turns[turn_id].command_id
                if submit is not None and submit in self.host.inbox.rejected:
                    raise TurnCancelled from None
                seen = self.host.inbox.seq
                continue
            self.host.guard = None
            if self.host.stop.is_set():
                self.host.stop.asked.set()  # asked while guarded: its recorder may go on
            return

    async def complete(self, turn_id: str, run_id: str, step_id: str, applied: list[str]) -> bool:
        """Commit the turn's completion, unless steering for it is waiting (then False).

        The completion commits only if the inbox is still where we read it, so steering
        accepted before the commit is always applied, and steering after it is refused by
        ``steer`` (it sees ``run/end.inbox_seq`` below its own inbox seq).
        """
        changed = False
        workspace = await self.recipes.workspace_checkpoint(turn_id, run_id)
        while True:
            if changed:  # the commit saw a command the hint did not: read it now
                await self.host.refresh_inbox()
            else:
                await self.catch_up_inbox()
            seen = self.host.inbox.seq
            if self.host.stop.command is not None:
                raise StopRun  # an interrupt noticed (and recorded) while the model answered
            if self.interrupt_for(run_id) is not None:
                # Accepted before we could commit the completion: honour it.
                self.stop_for(run_id)
                raise StopRun
            if any(
                c.command_id not in self.host.state.received_inputs
                for c in self.host.inbox.steers_for(turn_id)
            ):
                return False
            message = self.host.state.context[-1]  # the final assistant message, same id
            tail = [
                _event("turn/output", {"message": message, "status": "completed"}, turn_id, run_id),
                *self.recipes.checkpoint(turn_id, run_id, applied),
                *workspace,
                _event("step/end", {"step_id": step_id, "status": "terminal"}, turn_id, run_id),
                _event("turn/completed", {}, turn_id, run_id),
                _event(
                    "run/end",
                    {"status": "completed", "inbox_seq": seen, "stop_reason": "final_answer"},
                    turn_id,
                    run_id,
                ),
            ]
            try:
                await self.host.writer.flush(tail=tail, expected_inbox=seen)
            except InboxChanged:
                changed = True
                continue
            self.host.publish("status", turn_id, run_id, status="completed")
            return True

    async def verification(
        self, turn_id: str, run_id: str, step_id: str, applied: list[str]
    ) -> str:
        """Check the final answer with the agent's ``verify`` hook before the turn completes:
        ``passed`` (or no hook), ``retry`` (the reason went into the context: one more step),
        or ``failed`` (the run ended failed, committed)."""
        verify = self.host.agent.verify
        message = self.host.state.last_message()
        if verify is None or message is None:
            return "passed"
        failures = sum(
            1
            for m in self.host.state.context
            if m.turn_id == turn_id and m.id.startswith(_VERIFY_PREFIX)
        )
        try:
            if inspect.iscoroutinefunction(verify):
                verdict = await verify(message.text)
            else:
                verdict = await asyncio.to_thread(verify, message.text)
                if inspect.isawaitable(verdict):
                    verdict = await verdict
            passed, reason = _verdict(verdict)
        except Exception as exc:  # noqa: BLE001 - a hook that raises ends its run, recorded
            log.info("turn %s: the verify hook raised: %s", turn_id, describe(exc))
            await self.recipes.finish(
                turn_id,
                run_id,
                "failed",
                applied,
                error=f"the verify hook raised: {describe(exc)}",
                step_id=step_id,
                stop_reason="verification_error",
            )
            return "failed"
        retry = not passed and failures == 0
        w = self.host.writer
        w.add(
            "verification/result",
            {
                "passed": passed,
                "reason": reason,
                "message_id": message.id,
                "attempt": failures + 1,
                "retry": retry,
            },
            turn_id=turn_id,
            run_id=run_id,
        )
        if passed:
            return "passed"
        if retry:
            feedback = Message(
                id=f"{_VERIFY_PREFIX}{message.id}",
                role="user",
                text=f"Your answer did not pass verification: {reason}. Revise it.",
                turn_id=turn_id,
            )
            w.add("message/user", {"message": feedback}, turn_id=turn_id, run_id=run_id)
            return "retry"
        await self.recipes.finish(
            turn_id,
            run_id,
            "failed",
            applied,
            error=f"the answer failed verification twice: {reason}",
            step_id=step_id,
            stop_reason="verification_failed",
        )
        return "failed"

    async def take_inputs(self, turn_id: str, run_id: str) -> list[str]:
        """Steering for this turn and injected material not yet in the context."""
        await self.catch_up_inbox()
        fresh = [
            c
            for c in self.host.inbox.steers_for(turn_id) + self.host.inbox.injects()
            if c.command_id not in self.host.state.received_inputs
        ]
        fresh.sort(key=lambda c: c.seq)
        for c in fresh:
            kind = "steer" if c.kind == "steer" else "inject"
            self.recipes.add_input(turn_id, run_id, c.command_id, kind, c.input or "")
        return [c.command_id for c in fresh]


def _limit_reason(limit: float) -> str:
    return f"time limit: the task ran for its limit of {limit:g} s"


@dataclass(slots=True)
class _Watching:
    """What watches a running run: the watcher's stop, its task, the stop's recorder, the time
    limit's timer (None while paused for a person)."""

    stop: threading.Event
    watcher: asyncio.Task[None]
    recorder: asyncio.Task[None]
    limit: asyncio.TimerHandle | None


_VERIFY_PREFIX = "msg_verify_"
"""The id prefix of the user message that sends a turn back after a failed verification."""


def _verdict(value: object) -> tuple[bool, str | None]:
    """(passed, reason) of what a verify hook returned; ``InvalidInput`` for anything else."""
    if value is None or value is True:
        return True, None
    if value is False:
        return False, "the check did not pass"
    if isinstance(value, str) and value.strip():
        return False, value.strip()
    raise InvalidInput(
        f"verify returned {value!r}; return True (passed), False or the reason it failed"
    )


def _event(type_: str, payload: object, turn_id: str, run_id: str) -> Event:
    return Event.create(type_, payload, turn_id=turn_id, run_id=run_id)
