"""Sub-agent calls: a child is a session, and the parent's call waits for its turn durably.

The design, on what agentnb already is (DESIGN §11):

**A child is a session.** A call of an ``nb.subagent`` tool (``SubagentTool``) runs in a child
session of the tool's agent, keyed ``<parent session id>/<call id>`` (``child_key``), with its
own log, lease, inbox, snapshot and exports. Its first event is ``subagent/linked`` (parent,
turn, call, root, depth, path), appended before anything else can be; its task is a
``submit`` in its inbox under the key ``subagent:<call id>`` (``submit_key``), with the
parent's conversation injected first as material when the tool shares it.

**Exactly once by construction.** The parent commits ``tool/dispatch`` and
``subagent/spawned`` (the child's key) before the child is touched. Creating, linking,
injecting and submitting are each idempotent under keys derived from the call, so a parent
that crashed anywhere and runs the call again (the tool is ``idempotent``: resume re-runs it)
*attaches* to the same child turn instead of starting another: a sub-agent call is never
uncertain (``SessionState.uncertain_calls`` leaves it out). The child's own tool calls are
its own log's business, with the usual rules.

**Waiting, durably.** The parent's run dispatches every sub-agent call of a step first (one
commit), then starts the children together and waits for all of them at once (``settle``):
several calls of one step run concurrently, and on PostgreSQL any worker of the pool may run
a child (it is ordinary queued work). The wait reads each child's folds and sleeps on its
log head (``wait_for_head(settling=True)``: a child's steps do not wake it). When a child's
turn ends, the parent records ``subagent/completed`` with the ``tool/result`` (an ended child
that failed or was cancelled is a tool error carrying the reason: the parent's model decides
what next). When a child waits for a person (suspended, or interrupted), the parent stops
waiting for it: once no child moves any more, the parent's run ends ``suspended`` and its
lease is let go. No thread and no lease is held while a person is awaited.

**Waking up.** A child's task moves again only through a command in its inbox (an answer,
a resume, a cancel). The driver that carries such a command out first puts a *wake-up* in
the parent's inbox: a ``resume`` of the parent's turn under the key
``subagent-wake:<child command id>`` (``wake_key``), so it is there even if the process
dies right after. Dispatched, a wake-up continues the parent's turn when it is suspended for
its sub-agents only (``wake_applies``): the new run attaches to its children again and
waits. Otherwise it is recorded as carried out and does nothing (a running parent sees its
children itself; an interrupted one was stopped by a person). An answer given through the
parent (``parent.respond``, routed to the child) puts the same wake-up in at once, and its
receipt is the wake-up's: it observes the continuation run the wake-up starts (a receipt
observes its own run), or, when the wake-up starts none, the parent's latest run as it
stands. The wait for a child is for its *turn* (``child_progress`` is the turn's outcome, as
``Task.wait()`` gives it), never for one of its runs.

**Stopping.** When the parent's run is asked to stop while it waits (interrupt, time limit,
close), each child it waits for is handled by its tool's ``on_parent_stop``: ``interrupt``
(the default) accepts an interrupt for the child's running run, ``cancel`` cancels the
child's task, ``abandon`` leaves it. A child whose task was accepted but has not started is
waited for a moment (``_START_WAIT``) to start, then interrupted; one that no runtime
starts by then has nothing to interrupt: it runs once a runtime takes it. A resumed parent
resumes its interrupted children as it attaches to them again. Cancelling the parent's turn
cancels its children's tasks first (unless ``abandon``) and records each call as cancelled.

**People in the loop.** A child's pending requests show in its parent's ``pending()``
(``agentnb/children.py``), with the path of agents; ``parent.respond`` routes an answer to
the child that asked.

**Usage.** ``subagent/completed`` carries the child turn's usage; the parent's fold adds it
to the calling turn's (and session's) counters, so ``Outcome.usage``, ``max_turn_tokens`` and
``max_session_tokens`` count it (``UsageTotals.subagent_*`` say how much).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentnb import states
from agentnb.agent import Agent, SubagentTool
from agentnb.children import wake
from agentnb.errors import (
    AgentnbError,
    AppendConflict,
    Corrupt,
    IdempotencyConflict,
    InvalidInput,
    LeaseHeld,
    SessionNotFound,
    SubagentLimitExceeded,
    describe,
)
from agentnb.events import Event, ToolCallData
from agentnb.holders import lease_alive
from agentnb.ids import SessionKey, new_id
from agentnb.limits import check_subagent
from agentnb.log import Inbox
from agentnb.projections.decisions import check_cancel
from agentnb.projections.state import Command, InboxState, SessionState
from agentnb.projections.subagents import (
    ChildProgress,
    child_key,
    child_progress,
    context_key,
    is_wake,
    key_of,
    key_ref,
    shared_context,
    submit_key,
    wake_applies,
)
from agentnb.runtime.recipes import Recipes
from agentnb.runtime.scope import RunHost, StopRun
from agentnb.session import Session
from agentnb.stores.base import SessionStore

__all__ = [
    "AgentHost",
    "SubagentCalls",
    "cancel_child",
    "linked_turn",
    "session_lineage",
]

log = logging.getLogger("agentnb.runtime")

_WAIT_SLICE = 0.5
"""Seconds one wait on a child's log lasts before the parent looks again."""
_START_WAIT = 2.0
"""Seconds a stopping parent waits for a child whose task has not started yet to start, so
that it can be interrupted (past that, the child starts and runs on its own)."""


def linked_turn(state: SessionState, inbox: InboxState) -> str | None:
    """The turn of a child session that does its parent's task (None: not accepted yet, or
    not a child)."""
    link = state.link
    if link is None:
        return None
    key = submit_key(link["call_id"])
    return next((c.turn_id for c in inbox.commands.values() if c.key == key), None)


def cancel_child(
    store: SessionStore, child: SessionKey, call_id: str, key: str, reason: str
) -> None:
    """Cancel the task a sub-agent call gave ``child`` (in a worker thread), without waiting.

    What ``Session.cancel`` does, through the child's inbox only: a task not started yet is
    refused, a running one is interrupted and then cancelled, a parked one cancelled. ``key``
    makes it idempotent; an ended task is left as it is.
    """
    before = lease_alive(store, child)  # and after: see ``SubagentCalls._look``
    with states.read(store, child) as (state, inbox):
        submit = next((c for c in inbox.commands.values() if c.key == submit_key(call_id)), None)
        if submit is None or submit.turn_id is None:
            return
        turn_id = submit.turn_id
        executing = before or lease_alive(store, child)
        try:
            how = check_cancel(state, inbox, turn_id, executing=executing)
        except InvalidInput:
            return  # it completed: nothing to cancel
        active_run = state.active_run
    box = Inbox(store, child)
    if how == "done":
        return
    if how == "queued":
        box.record(
            "inbox/rejected",
            {
                "command_id": submit.command_id,
                "reason": reason,
                "kind": "submit",
                "cancelled": True,
            },
            turn_id=turn_id,
        )
        return
    if how == "running" and active_run is not None:
        box.accept("interrupt", key=f"{key}:stop", turn_id=turn_id, run_id=active_run)
    box.accept("cancel", key=key, turn_id=turn_id)


@dataclass
class _Call:
    """A sub-agent call dispatched in this run and not settled yet."""

    call: ToolCallData
    tool: SubagentTool
    child: SessionKey
    attempt: int
    run_id: str
    action_id: str
    """This execution attempt of the call (``tool/dispatch.action_id``)."""
    started: float = field(default_factory=time.monotonic)
    head: int = 0
    resumed: bool = False


class SubagentCalls:
    """Carries out the sub-agent calls of the host's runs (see the module docstring)."""

    def __init__(
        self,
        host: RunHost,
        recipes: Recipes,
        flush: Callable[[str], Awaitable[None]],
    ) -> None:
        self.host = host
        self.recipes = recipes
        self.flush_before_side_effect = flush
        self.outstanding: list[_Call] = []
        """Calls dispatched since the last ``settle`` (their children not started yet)."""
        self.waiting = False
        """Whether the run waits for children now (a worker's slot is free meanwhile)."""

    # -- deciding ----------------------------------------------------------------------------

    def problem(self, tool: SubagentTool, call: ToolCallData) -> str | None:
        """Why this call may not make a child (depth or children-per-turn bound), or None."""
        state = self.host.state
        requested = state.tool_calls.get(call.call_id)
        turn_id = requested.turn_id if requested is not None else None
        depth = int(state.link["depth"]) if state.link is not None else 0
        made = len(state.children_of(turn_id)) if turn_id is not None else 0
        try:
            check_subagent(depth, made, self.host.limits, agent=tool.child.agent_id)
        except SubagentLimitExceeded as exc:
            return str(exc)
        return None

    # -- dispatching -------------------------------------------------------------------------

    def dispatch(
        self, turn_id: str, run_id: str, call: ToolCallData, tool: SubagentTool, attempt: int
    ) -> None:
        """Add the call's dispatch (and, the first time, ``subagent/spawned``) to the writer;
        ``settle`` commits them, then starts the child and waits for it."""
        host = self.host
        w = host.writer
        spawned = host.state.children.get(call.call_id)
        child = (
            key_of(spawned["child"])
            if spawned is not None
            else child_key(host.key, tool.child.agent_id, call.call_id)
        )
        # A new action id for this attempt: a re-run attaches to the same child.
        action_id = self.recipes.add_dispatch(
            turn_id, run_id, call, tool.name, idempotent=True, attempt=attempt
        )
        if spawned is None:
            w.add(
                "subagent/spawned",
                {
                    "call_id": call.call_id,
                    "child": key_ref(child),
                    "agent_id": tool.child.agent_id,
                    "task": str(call.arguments.get("task", "")),
                    "name": tool.name,
                    "on_parent_stop": tool.on_parent_stop,
                },
                turn_id=turn_id,
                run_id=run_id,
            )
        self.outstanding.append(_Call(call, tool, child, attempt, run_id, action_id))

    def _start(self, turn_id: str, c: _Call, context: str | None) -> None:
        """In a worker thread: make the child session, link it, hand it the shared context
        and its task; every step is idempotent (a re-run attaches to the same child)."""
        host = self.host
        store = host.store
        parent = host.key
        store.create_session(c.child)
        link = host.state.link
        root = key_of(link["root"]) if link is not None else parent
        depth = (int(link["depth"]) if link is not None else 0) + 1
        path = (*(link["path"] if link is not None else (parent.agent_id,)), c.child.agent_id)
        if store.head(c.child) == 0:
            linked = Event.create(
                "subagent/linked",
                {
                    "parent": key_ref(parent),
                    "turn_id": turn_id,
                    "call_id": c.call.call_id,
                    "root": key_ref(root),
                    "depth": depth,
                    "path": path,
                },
            )
            with contextlib.suppress(AppendConflict, LeaseHeld, IdempotencyConflict):
                store.append(c.child, [linked], expected_seq=0, batch_id=new_id("batch"))
        first = store.read_after(c.child, 0, 1)
        p = first[0].payload if first else None
        if (
            not first
            or first[0].type != "subagent/linked"
            or p is None
            or key_of(p["parent"]) != parent
            or p["call_id"] != c.call.call_id
        ):
            raise Corrupt(
                f"session {c.child} should be the child of {parent}'s call {c.call.call_id}, "
                "but its log does not begin with that link; it was not made for this call"
            )
        box = Inbox(store, c.child)
        if context is not None:
            box.accept("inject", key=context_key(c.call.call_id), input=context)
        box.accept(
            "submit",
            key=submit_key(c.call.call_id),
            turn_id=new_id("turn"),
            input=str(c.call.arguments.get("task", "")),
        )

    # -- waiting -----------------------------------------------------------------------------

    async def settle(self, turn_id: str, run_id: str) -> bool:
        """Start the children of the calls dispatched since the last call and wait for them
        until each ended or waits for a person, recording each ended call's result.

        True if some child waits for a person (the turn then suspends: the calls stay open
        and a wake-up continues it). ``StopRun`` when the run is asked to stop meanwhile,
        after each child still waited for was handled by its ``on_parent_stop``.
        """
        # Calls a stopped run dispatched and never settled are left to the next run's attach.
        calls = [c for c in self.outstanding if c.run_id == run_id]
        self.outstanding = []
        if not calls:
            return False
        await self.flush_before_side_effect(turn_id)  # durable before any child is touched
        self.waiting = True
        try:
            return await self._settle(turn_id, run_id, calls)
        finally:
            self.waiting = False

    async def _settle(self, turn_id: str, run_id: str, calls: list[_Call]) -> bool:
        host = self.host
        context_of: dict[str, str | None] = {}
        for c in calls:
            if c.tool.share_context != "none" and c.call.call_id not in context_of:
                context_of[c.call.call_id] = shared_context(
                    host.state.context,
                    c.tool.share_context,
                    c.tool.last_n,
                    parent_agent=host.agent.agent_id,
                )
        await asyncio.gather(
            *(
                asyncio.to_thread(self._start, turn_id, c, context_of.get(c.call.call_id))
                for c in calls
            )
        )
        for c in calls:
            host.kick(c.child)
        waiting = False
        open_calls = list(calls)
        while open_calls:
            looks = await asyncio.gather(*(asyncio.to_thread(self._look, c) for c in open_calls))
            still: list[_Call] = []
            for c, progress in zip(open_calls, looks, strict=True):
                if progress.state == "settled":
                    self._record(turn_id, run_id, c, progress)
                elif (
                    progress.state == "waiting"
                    and c.attempt > 1
                    and not c.resumed
                    and (progress.status == "interrupted")
                ):
                    # Attached again in a new run: the child was interrupted with its
                    # parent (or cut off); it goes on with it.
                    c.resumed = True
                    await asyncio.to_thread(self._resume_child, run_id, c, progress)
                    host.kick(c.child)
                    still.append(c)
                elif progress.state == "waiting":
                    waiting = True
                    host.writer.add(
                        "action/end",
                        {
                            "call_id": c.call.call_id,
                            "name": c.tool.name,
                            "status": "suspended",
                            "action_id": c.action_id,
                        },
                        turn_id=turn_id,
                        run_id=run_id,
                    )
                    # Views open the card of a sub-agent that waits for a person.
                    host.writer.add(
                        "presentation/hint",
                        {"hint": "expand", "target": c.call.call_id},
                        turn_id=turn_id,
                        run_id=run_id,
                    )
                else:
                    still.append(c)
            open_calls = still
            if not open_calls:
                break
            if host.stop.is_set() or await self._wait(open_calls):
                await self._stop_children(run_id, open_calls)
                for c in open_calls:
                    host.writer.add(
                        "action/end",
                        {
                            "call_id": c.call.call_id,
                            "name": c.tool.name,
                            "status": "interrupted",
                            "action_id": c.action_id,
                        },
                        turn_id=turn_id,
                        run_id=run_id,
                    )
                raise StopRun
        return waiting

    def _look(self, c: _Call) -> ChildProgress:
        """In a worker thread: where the call's child stands, from its folds."""
        store = self.host.store
        # Whether anyone executes the child is read before and after its folds: a run seen
        # open with no holder on both sides was cut off (one that ended in between was not).
        before = lease_alive(store, c.child)
        try:
            with states.read(store, c.child) as (state, inbox):
                c.head = state.seq
                executing = before or lease_alive(store, c.child)
                progress = child_progress(state, inbox, c.call.call_id, executing=executing)
        except SessionNotFound as exc:
            return ChildProgress("settled", "failed", error=f"its session is gone: {describe(exc)}")
        if progress.state == "absent":  # accepted just before: looked too early
            return ChildProgress("moving", "queued")
        return progress

    async def _wait(self, calls: list[_Call]) -> bool:
        """Sleep until a child's log moves (or a slice passes); True if the run must stop."""
        host = self.host
        halt = threading.Event()
        store = host.store

        def wait(c: _Call) -> int:
            return store.wait_for_head(c.child, c.head, _WAIT_SLICE, stop=halt, settling=True)

        waits = [asyncio.ensure_future(asyncio.to_thread(wait, c)) for c in calls]
        stopped = asyncio.ensure_future(host.stop.event.wait())
        try:
            await asyncio.wait([*waits, stopped], return_when=asyncio.FIRST_COMPLETED)
        finally:
            halt.set()
            for c in calls:
                store.wake_waiters(c.child, inbox=False)
            stopped.cancel()
            await asyncio.gather(*waits, return_exceptions=True)
        return host.stop.is_set()

    def _record(self, turn_id: str, run_id: str, c: _Call, progress: ChildProgress) -> None:
        """The call's result from its ended child: ``subagent/completed`` and the tool's."""
        w = self.host.writer
        status = progress.status
        w.add(
            "subagent/completed",
            {
                "call_id": c.call.call_id,
                "child": key_ref(c.child),
                "status": status,
                "output": progress.output,
                "error": progress.error,
                "usage": progress.usage,
            },
            turn_id=turn_id,
            run_id=run_id,
        )
        w.add(
            "action/end",
            {
                "call_id": c.call.call_id,
                "name": c.tool.name,
                "status": "returned" if status == "completed" else "failed",
                "action_id": c.action_id,
            },
            turn_id=turn_id,
            run_id=run_id,
        )
        if status == "completed":
            output, result = progress.output or "", "success"
        else:
            what = "failed" if status == "failed" else "was cancelled"
            why = f": {progress.error}" if progress.error else ""
            output = f"Error: the sub-agent {c.tool.name} {what}{why}"
            result = "error"
        self.recipes.add_result(
            c.call.call_id,
            c.tool.name,
            result,
            output,
            turn_id=turn_id,
            run_id=run_id,
            duration_ms=round((time.monotonic() - c.started) * 1000, 3),
        )

    # -- stopping ----------------------------------------------------------------------------

    def _resume_child(self, run_id: str, c: _Call, progress: ChildProgress) -> None:
        """In a worker thread: resume the call's interrupted child (once per parent run)."""
        if progress.turn_id is None:
            return
        Inbox(self.host.store, c.child).accept(
            "resume", key=f"parent-resume:{run_id}:{c.call.call_id}", turn_id=progress.turn_id
        )

    async def _stop_children(self, run_id: str, calls: list[_Call]) -> None:
        """The run stops while it waits: each child as its tool's ``on_parent_stop`` says."""
        await asyncio.gather(
            *(asyncio.to_thread(self._stop_child, run_id, c) for c in calls),
            return_exceptions=False,
        )
        for c in calls:
            self.host.kick(c.child)

    def _stop_child(self, run_id: str, c: _Call) -> None:
        policy = c.tool.on_parent_stop
        store = self.host.store
        try:
            if policy == "cancel":
                cancel_child(
                    store,
                    c.child,
                    c.call.call_id,
                    f"parent-cancel:{run_id}:{c.call.call_id}",
                    "cancelled with the task that called it",
                )
            elif policy == "interrupt":
                active = self._running_run(c)
                if active is not None:
                    Inbox(store, c.child).accept(
                        "interrupt",
                        key=f"parent-stop:{run_id}:{c.call.call_id}",
                        turn_id=active[0],
                        run_id=active[1],
                    )
        except AgentnbError as exc:  # the child is gone or refuses: the parent stops anyway
            log.warning("sub-agent session %s not stopped: %s", c.child, describe(exc))

    def _running_run(self, c: _Call) -> tuple[str, str] | None:
        """(turn, run) of the child's open run; a task accepted but not started yet is waited
        for up to ``_START_WAIT`` seconds (an interrupt names a run), else None."""
        store = self.host.store
        deadline = time.monotonic() + _START_WAIT
        while True:
            with states.read(store, c.child) as (state, inbox):
                if state.active_run is not None:
                    return state.runs[state.active_run].turn_id, state.active_run
                progress = child_progress(state, inbox, c.call.call_id, executing=True)
                seen = state.seq
            if progress.status != "queued" or time.monotonic() >= deadline:
                return None
            store.wait_for_head(c.child, seen, 0.05)

    async def cancel_turn(self, command: Command) -> None:
        """Before a parked turn's cancel is recorded: cancel its children's tasks (unless
        ``abandon``) and record each open sub-agent call as cancelled, in the same commit."""
        host = self.host
        state = host.state
        turn_id = command.turn_id or ""
        try:
            how = check_cancel(state, host.inbox, turn_id, executing=False)
        except InvalidInput:
            return
        if how != "parked":
            return
        open_ids = {c.call_id for c in state.open_calls(turn_id)}
        calls = [c for c in state.children_of(turn_id) if c["call_id"] in open_ids]
        for child in calls:
            if child.get("on_parent_stop") == "abandon":
                continue
            key = key_of(child["child"])
            await asyncio.to_thread(
                cancel_child,
                host.store,
                key,
                child["call_id"],
                f"parent-cancel:{command.command_id}:{child['call_id']}",
                "cancelled with the task that called it",
            )
            host.kick(key)
            used = await asyncio.to_thread(self._usage_of, key, child["call_id"])
            host.writer.add(
                "subagent/completed",
                {
                    "call_id": child["call_id"],
                    "child": child["child"],
                    "status": "cancelled",
                    "error": "cancelled with the task that called it",
                    "usage": used,
                },
                turn_id=turn_id,
            )
            self.recipes.add_result(
                child["call_id"],
                child.get("name") or child["agent_id"],
                "cancelled",
                "The task was cancelled; its sub-agent was cancelled with it.",
                turn_id=turn_id,
                synthetic=True,
            )

    def _usage_of(self, child: SessionKey, call_id: str) -> dict[str, int]:
        try:
            with states.read(self.host.store, child) as (state, inbox):
                return child_progress(state, inbox, call_id, executing=False).usage
        except SessionNotFound:
            return {}

    # -- wake-ups ----------------------------------------------------------------------------

    async def before_command(self, command: Command) -> bool:
        """Before the driver carries ``command`` out: a wake-up that does not apply is
        recorded as carried out (False: do not carry it out); a command that moves this
        child's task first wakes its parent."""
        host = self.host
        if is_wake(command) and not wake_applies(host.state, command.turn_id or ""):
            w = host.writer
            await asyncio.to_thread(
                host.inbox_log.record,
                "inbox/handled",
                {"command_id": command.command_id},
                turn_id=command.turn_id,
            )
            w.add("inbox/applied", {"command_ids": [command.command_id]}, turn_id=command.turn_id)
            await w.flush()
            return False
        link = host.state.link
        if (
            link is not None
            and command.kind in {"resume", "respond", "cancel"}
            and not (command.key or "").startswith("parent-")  # the parent asked: it knows
            and command.turn_id == linked_turn(host.state, host.inbox)
        ):
            await asyncio.to_thread(self._wake_parent, link, command.command_id)
        return True

    def _wake_parent(self, link: Mapping[str, Any], command_id: str) -> None:
        parent = key_of(link["parent"])
        try:
            wake(self.host.store, parent, link["turn_id"], link["call_id"], command_id)
        except AgentnbError as exc:  # archived or deleted parent: it is resumed by hand
            log.warning("session %s: could not wake its parent %s: %s", self.host.key, parent, exc)
            return
        self.host.kick(parent)


def session_lineage(
    store: SessionStore, key: SessionKey
) -> tuple[SessionKey | None, SessionKey | None, int]:
    """(parent, root, depth) of ``key`` from its first event: ``subagent/linked`` for a
    child session, else (None, None, 0)."""
    try:
        first = store.read_after(key, 0, 1)
    except SessionNotFound:
        return None, None, 0
    if not first or first[0].type != "subagent/linked":
        return None, None, 0
    p = first[0].payload
    return key_of(p["parent"]), key_of(p["root"]), int(p["depth"])


class AgentHost:
    """The ``SessionHost`` of a sub-agent's child session: the runtime, with the child's
    agent (its reads, checks and fingerprint are that agent's)."""

    def __init__(self, runtime: Any, agent: Agent) -> None:
        self._runtime = runtime
        self.agent = agent

    def __getattr__(self, name: str) -> Any:
        return getattr(self._runtime, name)

    def session(self, session_id: str, user_id: str = "default") -> Session:
        """Another session of this agent (``fork`` of a child makes one of its agent)."""
        key = SessionKey(self._runtime.namespace, user_id, self.agent.agent_id, session_id)
        self._runtime.store.create_session(key)
        session: Session = self._runtime.session_of(key)
        return session
