"""The tool calls of a step: decided, asked about, or dispatched durably and run.

``ToolRunner`` decides each call of a model reply (refused when the tool is unknown or its
arguments do not fit, suspended when a person must answer first unless a permission rule in
force allows it, ``agentnb.permissions``, else run), commits ``tool/dispatch`` before the
tool runs (the side effect) and records its result, with the traceback when the tool
raised. A tool runs under ``contained`` so that not even ``SystemExit`` escapes it; what it
reports goes through ``Reports``, bounded per call (``ctx.flush`` commits what it
recorded); ``interaction_kind`` and ``prompt`` say which person-facing request a call needs
and how it is worded. A tool that asks the person mid-call (``ctx.ask``) is stopped and its
question becomes an ``ask_user`` request; the answer runs it again, and ``Reports.ask`` hands
it the recorded answer. A tool that raises ``ToolOutcomeUnknown`` leaves its call uncertain
and ends the run interrupted. A sub-agent's call is carried out by a child session
(``agentnb.runtime.subagents``), the model's plan by ``agentnb.runtime.plan``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, TypeVar

from agentnb.agent import SubagentTool
from agentnb.answers import Answer
from agentnb.blocks import Block, stand_in, stored
from agentnb.errors import InvalidInput, ReducerFailed, describe
from agentnb.events import Event, ToolCallData
from agentnb.permissions import agent_digest, matching_rule, rules_in_force, shared_rules
from agentnb.runtime.middleware import MiddlewareRunner, check_record
from agentnb.runtime.plan import record_plan
from agentnb.runtime.recipes import Recipes
from agentnb.runtime.scope import RunHost, StopRun
from agentnb.runtime.subagents import SubagentCalls
from agentnb.runtime.writer import LogWriter
from agentnb.tools import (
    InvalidToolArguments,
    NeedsAnswer,
    Tool,
    ToolContext,
    ToolOutcomeUnknown,
    ask_request_id,
)
from agentnb.tracebacks import format_traceback
from agentnb.workspace import bound_path

__all__ = [
    "MAX_PROGRESS_EVENTS",
    "MAX_RECORDS",
    "Reports",
    "ToolExit",
    "ToolRunner",
    "contained",
    "ignore_result",
    "interaction_kind",
    "prompt",
]

_R = TypeVar("_R")
Result = str | tuple[Block, ...]

log = logging.getLogger("agentnb.tools")
"""Tools that raise are logged here (INFO: the model is told and goes on), with their
(scrubbed) traceback."""

MAX_PROGRESS_EVENTS = 1_000
"""``tool/chunk`` events one tool call records at most; later reports are coalesced."""
MAX_RECORDS = 1_000
"""Application events (``ctx.record``) one tool call may commit."""


class ToolExit(Exception):
    """A tool raised ``SystemExit`` or ``KeyboardInterrupt`` (its ``__cause__``)."""


async def contained(invoke: Callable[..., Coroutine[Any, Any, _R]], *args: Any) -> _R:
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
    """What a running tool reports: ``record`` and ``progress`` (and ``flush``), from any
    thread.

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
        answers: Callable[[str], Mapping[str, Any] | None] = lambda _: None,
        action_id: str | None = None,
        *,
        check: Callable[[Event], None] = lambda _: None,
    ) -> None:
        self.writer = writer
        self.answers = answers
        """request_id -> its ``interaction/resolved`` payload, if the person answered."""
        self.asked: tuple[str, str] | None = None
        """(request_id, question) of the first question not answered yet."""
        self.questions: dict[str, int] = {}
        self.ids = (turn_id, run_id, call_id)
        self.action_id = action_id
        self.publish = publish
        self.loop = asyncio.get_running_loop()
        self.lock = threading.Lock()
        self.reports = 0
        self.records = 0
        self.latest: tuple[int, Any] | None = None
        """The newest report not recorded (index, data), once past the bound."""
        self.skipped = 0
        self.closed = False
        self.refused: ReducerFailed | None = None
        """A record a required type's reducer refused: the turn fails with it."""
        self.check = check
        """Runs before a record is added (``check_record``: a required reducer may refuse)."""

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
        event = Event.create(type_, data, required=required, turn_id=turn_id, run_id=run_id)
        try:
            self.check(event)
        except ReducerFailed as exc:
            self.refused = self.refused or exc
            raise
        self._on_loop(event)

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

    def ask(self, question: str) -> Answer:
        """``ctx.ask``: the recorded answer, or ``NeedsAnswer`` (remembered in ``asked``)."""
        _, _, call_id = self.ids
        with self.lock:
            occurrence = self.questions[question] = self.questions.get(question, 0) + 1
        request_id = ask_request_id(call_id, question, occurrence)
        resolved = self.answers(request_id)
        if resolved is not None and resolved.get("status", "answered") == "answered":
            answer = resolved.get("answer") or {}
            if answer.get("declined"):
                return Answer("reject", reason=str(answer.get("reason") or "declined"))
            return Answer("output", text=str(answer.get("output", "")))
        with self.lock:
            if self.asked is None:
                self.asked = (request_id, question)
        raise NeedsAnswer(request_id, question)

    def _chunk(self, index: int, data: Any, skipped: int) -> Event:
        turn_id, run_id, call_id = self.ids
        payload = {
            "call_id": call_id,
            "index": index,
            "data": data,
            "skipped": skipped,
            "action_id": self.action_id,
        }
        return Event.create("tool/chunk", payload, turn_id=turn_id, run_id=run_id)

    async def aflush(self) -> None:
        """On the loop: commit what the call recorded so far (``ctx.aflush``)."""
        await asyncio.sleep(0)  # records handed over from another thread land first
        if not self.closed and self.writer.pending:
            await self.writer.flush()

    def flush(self) -> None:
        """From the tool's worker thread: commit what the call recorded so far and wait for
        it (``ctx.flush``); on the loop itself that would block it, so it is refused."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            raise InvalidInput(
                "ctx.flush() blocks until the commit and would stop the runtime's event loop "
                "here; in an async tool use: await ctx.aflush()"
            )
        asyncio.run_coroutine_threadsafe(self.aflush(), self.loop).result()

    def end(self) -> None:
        """``close``, then fail closed: ``ReducerFailed`` if a required type's reducer
        refused one of the call's records (the turn fails; the call stays uncertain)."""
        self.close()
        if self.refused is not None:
            raise self.refused

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


class ToolRunner:
    """Decides, dispatches and runs the tool calls of the host's running turn."""

    def __init__(
        self,
        host: RunHost,
        recipes: Recipes,
        flush: Callable[[str], Awaitable[None]],
        bad_arguments: Callable[[], Mapping[str, str]],
        *,
        middleware: MiddlewareRunner | None = None,
    ) -> None:
        self.host = host
        self.middleware = middleware or MiddlewareRunner(host, flush)
        self.recipes = recipes
        self.flush_before_side_effect = flush
        self.bad_arguments = bad_arguments
        """Why calls of the last model reply had arguments that were not a JSON object."""
        self.subagents = SubagentCalls(host, recipes, flush)

    async def calls(self, turn_id: str, run_id: str, calls: list[ToolCallData]) -> bool:
        """Run (or ask about) the calls of one reply; True if the turn must wait for a person."""
        for call in calls:
            self.host.writer.add(
                "tool/requested",
                {"call_id": call.call_id, "name": call.name, "arguments": call.arguments},
                turn_id=turn_id,
                run_id=run_id,
            )
        waiting = False
        for call in calls:
            waiting = await self.call(turn_id, run_id, call) or waiting
            if self.host.stop.is_set():
                raise StopRun
        return await self.settle(turn_id, run_id) or waiting

    async def settle(self, turn_id: str, run_id: str) -> bool:
        """Wait for the sub-agent calls this run dispatched (they run concurrently); True if
        one waits for a person (see ``runtime/subagents.py``)."""
        return await self.subagents.settle(turn_id, run_id)

    def problem(self, call: ToolCallData) -> str | None:
        """Why this call cannot run (unknown tool, arguments that do not fit), or None."""
        bad = self.bad_arguments()
        if call.call_id in bad:
            return bad[call.call_id]
        agent = self.host.agent
        tool = agent.tool_named(call.name)
        if tool is None:
            names = ", ".join(t.name for t in agent.tools) or "none"
            return f"there is no tool named {call.name!r}; available tools: {names}"
        try:
            tool.validate(call.arguments)
        except InvalidToolArguments as exc:
            return str(exc)
        if isinstance(tool, SubagentTool):
            return self.subagents.problem(tool, call)
        return None

    async def call(self, turn_id: str, run_id: str, call: ToolCallData) -> bool:
        """Decide one call: refuse it, ask a person about it (True), or run it."""
        w = self.host.writer
        tool = self.host.agent.tool_named(call.name)
        problem = self.problem(call)
        if problem is None and tool is not None:
            problem = await self.middleware.before_tool(turn_id, run_id, call)  # Refuse
        if problem is not None or tool is None:
            # Never run; the model sees what was wrong and can try again.
            w.add(
                "tool/decision",
                {"call_id": call.call_id, "decision": "denied", "reason": problem},
                turn_id=turn_id,
                run_id=run_id,
            )
            self.recipes.add_result(
                call.call_id,
                call.name,
                "error",
                f"Error: {problem}",
                turn_id=turn_id,
                run_id=run_id,
                synthetic=True,
            )
            return False
        kind = interaction_kind(tool)
        rule = await self.permitted(call) if kind == "confirmation" else None
        if kind is not None and rule is None:
            w.add(
                "tool/decision",
                {"call_id": call.call_id, "decision": "suspended", "reason": kind},
                turn_id=turn_id,
                run_id=run_id,
            )
            w.add(
                "interaction/requested",
                {
                    "request_id": call.call_id,
                    "kind": kind,
                    "call_id": call.call_id,
                    "tool_name": tool.name,
                    "arguments": dict(call.arguments),
                    "prompt": prompt(kind, tool.name, call.arguments),
                },
                turn_id=turn_id,
                run_id=run_id,
            )
            return True
        rule_id = rule["rule_id"] if rule is not None else None
        w.add(
            "tool/decision",
            {
                "call_id": call.call_id,
                "decision": "allowed",
                "rule_id": rule_id,
                "reason": f"permission rule {rule_id}" if rule_id else None,
            },
            turn_id=turn_id,
            run_id=run_id,
        )
        return await self.run(turn_id, run_id, call, rule_id=rule_id)

    async def permitted(self, call: ToolCallData) -> Mapping[str, Any] | None:
        """The permission rule in force that lets this call run without approval, if any:
        the session's own, or an agent-wide one of another session (``agentnb.permissions``).
        The inbox is read first, so a revoke accepted meanwhile already holds."""
        host = self.host
        await host.refresh_inbox()
        digest = agent_digest(host.agent.fingerprint)
        own = rules_in_force(host.state, host.inbox).values()
        rule = matching_rule(own, call.name, call.arguments, digest)
        if rule is None:
            shared = await asyncio.to_thread(shared_rules, host.store, host.key, digest)
            rule = matching_rule((r for _, r in shared), call.name, call.arguments, digest)
        return rule

    async def answered(
        self, turn_id: str, run_id: str, call: ToolCallData, answer: Mapping[str, Any]
    ) -> bool:
        """Carry out a call a person answered: their output, the approved call, or a denial.

        True if the approved call then asked the person something (the turn waits again).
        """
        if "output" in answer:  # external execution or a question: the person's answer
            rich = {"blocks": answer["blocks"]} if answer.get("blocks") else {}
            self.recipes.add_result(
                call.call_id,
                call.name,
                "success",
                answer["output"],
                turn_id=turn_id,
                run_id=run_id,
                **rich,
            )
        elif answer.get("declined"):
            self.recipes.add_result(
                call.call_id,
                call.name,
                "success",
                f"The user declined to answer: {answer.get('reason') or 'no reason given'}",
                turn_id=turn_id,
                run_id=run_id,
            )
        elif answer.get("approved"):
            arguments = dict(answer.get("edited_args") or call.arguments)
            return await self.run(
                turn_id,
                run_id,
                ToolCallData(call_id=call.call_id, name=call.name, arguments=arguments),
            )
        else:
            reason = answer.get("reason") or "rejected by the user"
            self.recipes.add_result(
                call.call_id,
                call.name,
                "denied",
                f"The user rejected this call: {reason}",
                turn_id=turn_id,
                run_id=run_id,
                synthetic=True,
            )
        return False

    async def run(
        self,
        turn_id: str,
        run_id: str,
        call: ToolCallData,
        attempt: int = 1,
        *,
        rule_id: str | None = None,
    ) -> bool:
        """Dispatch (durably first), run, and record one tool call (``rule_id``: the
        permission rule that let it run without approval, cited by its ``action/end``).

        True if the call asked the person a question not answered yet: it is stopped, its
        question is an ``ask_user`` request, and the turn must wait (no result is recorded;
        the answer runs the call again).
        """
        host = self.host
        stop = host.stop
        if stop.is_set():
            raise StopRun  # asked before it was dispatched: it stays requested, not run
        tool = host.agent.tool_named(call.name)
        assert tool is not None
        if isinstance(tool, SubagentTool):  # a child session carries it out: settle() waits
            self.subagents.dispatch(turn_id, run_id, call, tool, attempt)
            return False
        if tool.interaction == "todo":  # the runtime's own: it records the plan
            record_plan(host, self.recipes, turn_id, run_id, call, tool)
            return False
        arguments = dict(call.arguments)
        action_id = self.dispatched(turn_id, run_id, call, tool, attempt)
        await self.flush_before_side_effect(turn_id)
        w = host.writer
        reports = Reports(
            w,
            turn_id,
            run_id,
            call.call_id,
            host.publish,
            self.answer_to,
            action_id,
            check=functools.partial(check_record, host),
        )
        ctx = ToolContext(
            host.key,
            turn_id,
            run_id,
            call.call_id,
            reports.record,
            reports.progress,
            _ask=reports.ask,
            _flush=reports.flush,
            _aflush=reports.aflush,
            workspace=bound_path(host.state.workspace),
        )
        started = time.monotonic()
        task = asyncio.ensure_future(contained(tool.invoke_result, arguments, ctx))
        stop.tool_task, stop.tool_is_async, stop.tool_name = task, tool.is_async, tool.name
        stop.abandon.clear()
        trace: str | None = None
        outcome_unknown: ToolOutcomeUnknown | None = None
        try:
            output, status, action, rich = await self.kept(await self.output(task))
        except (NeedsAnswer, ToolOutcomeUnknown) as exc:
            if isinstance(exc, ToolOutcomeUnknown):
                outcome_unknown = exc
            output, status, action, rich = "", "error", "failed", {}
        except asyncio.CancelledError:
            if not stop.is_set():
                raise
            # Interrupted mid-call: what it did is unknown, so no result is recorded and
            # the call stays uncertain until it is reconciled (or re-run, if idempotent).
            reports.close()
            w.add(
                "action/end",
                {
                    "call_id": call.call_id,
                    "name": tool.name,
                    "status": "interrupted",
                    "action_id": action_id,
                },
                turn_id=turn_id,
                run_id=run_id,
            )
            raise StopRun from None
        except Exception as exc:  # noqa: BLE001 - any failure of a tool is its result
            raised = (exc.__cause__ if isinstance(exc, ToolExit) else None) or exc
            output = f"Error: {describe(raised)}"
            status, action, rich = "error", "failed", {}
            trace = format_traceback(raised)
            log.info(
                "session %s: tool %s (call %s) raised:\n%s",
                host.key,
                tool.name,
                call.call_id,
                trace,
            )
        finally:
            stop.tool_task = None
        await asyncio.sleep(0)  # let records/progress handed over from a worker thread land
        reports.end()
        if reports.asked is not None or outcome_unknown is not None:
            return self.stopped(turn_id, run_id, call, action_id, reports.asked, outcome_unknown)
        w.add(
            "action/end",
            {
                "call_id": call.call_id,
                "name": tool.name,
                "status": action,
                "action_id": action_id,
                "rule_id": rule_id,
            },
            turn_id=turn_id,
            run_id=run_id,
        )
        await self.result(
            turn_id,
            run_id,
            call,
            status,
            output,
            round((time.monotonic() - started) * 1000, 3),
            **({"traceback": trace} if trace else {}),
            **rich,
        )
        return False

    async def result(
        self,
        turn_id: str,
        run_id: str,
        call: ToolCallData,
        status: str,
        output: str,
        duration_ms: float,
        **extra: Any,
    ) -> None:
        """Record the result of a call that ran, then tell ``after_tool`` middleware."""
        self.recipes.add_result(
            call.call_id,
            call.name,
            status,
            output,
            turn_id=turn_id,
            run_id=run_id,
            duration_ms=duration_ms,
            **extra,
        )
        await self.middleware.after_tool(turn_id, run_id, call, status, output)

    def dispatched(
        self, turn_id: str, run_id: str, call: ToolCallData, tool: Tool, attempt: int
    ) -> str:
        """Add ``tool/dispatch`` and ``action/start`` of a new execution attempt of ``call``;
        its ``action_id``."""
        return self.recipes.add_dispatch(
            turn_id, run_id, call, tool.name, idempotent=tool.idempotent, attempt=attempt
        )

    def answer_to(self, request_id: str) -> Mapping[str, Any] | None:
        """How the person resolved ``request_id``, read from the current fold."""
        return self.host.state.resolved.get(request_id)

    def stopped(
        self,
        turn_id: str,
        run_id: str,
        call: ToolCallData,
        action_id: str,
        asked: tuple[str, str] | None,
        unknown: ToolOutcomeUnknown | None,
    ) -> bool:
        """A call that stopped without a result: it asked the person (True: the turn waits),
        or its outcome is unknown (the run stops; the call stays uncertain)."""
        w = self.host.writer
        status = "suspended" if asked is not None else "interrupted"
        w.add(
            "action/end",
            {
                "call_id": call.call_id,
                "name": call.name,
                "status": status,
                "action_id": action_id,
            },
            turn_id=turn_id,
            run_id=run_id,
        )
        if asked is not None:
            request_id, question = asked
            w.add(
                "interaction/requested",
                {
                    "request_id": request_id,
                    "kind": "ask_user",
                    "call_id": call.call_id,
                    "tool_name": call.name,
                    "arguments": dict(call.arguments),
                    "prompt": question,
                },
                turn_id=turn_id,
                run_id=run_id,
            )
            return True
        self.host.stop.request(
            f"the outcome of {call.name} ({call.call_id}) is unknown: "
            f"{describe(unknown or ToolOutcomeUnknown(), typed=False)}",
            "tool_outcome_unknown",
        )
        raise StopRun

    async def kept(self, result: Result) -> tuple[str, str, str, dict[str, Any]]:
        """(output, status, action, extra fields of ``tool/result``) of a tool's result
        (``bounded``): blocks keep their large bytes in the store's blobs and their text
        stand-in as the output."""
        if isinstance(result, str):
            return *self.bounded(result), {}
        parts = [b.part() for b in result]
        parts = await asyncio.to_thread(stored, parts, self.host.store.put_blob)
        output, status, action = self.bounded(stand_in(parts))
        return output, status, action, {"blocks": parts} if status == "success" else {}

    def bounded(self, output: str) -> tuple[str, str, str]:
        """(output, status, action) of a tool's result: an error in its place when it is
        longer than ``Limits.max_tool_result_chars`` (the model sees why, the run goes on)."""
        limit = self.host.limits.max_tool_result_chars
        if len(output) <= limit:
            return output, "success", "returned"
        error = (
            f"Error: the tool's result has {len(output):,} characters, more than the "
            f"{limit:,} one result may hold (Limits(max_tool_result_chars=...)); it was not "
            "recorded. Ask for less (a part, a summary, or where it was saved)"
        )
        return error, "error", "failed"

    async def output(
        self, task: asyncio.Future[str | tuple[Block, ...]]
    ) -> str | tuple[Block, ...]:
        """The tool's result; if ``close`` abandons a sync tool that ignores the stop, cancel."""
        stop = self.host.stop
        abandon = asyncio.ensure_future(stop.abandon.wait())
        either: set[asyncio.Future[Any]] = {task, abandon}
        try:
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            task.cancel()
            raise
        finally:
            abandon.cancel()
        if task.done():
            return task.result()
        # The thread cannot be stopped: leave it behind (its result is never used) and end
        # the run; the call stays uncertain.
        task.add_done_callback(ignore_result)
        stop.event.set()
        raise asyncio.CancelledError
