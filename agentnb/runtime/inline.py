"""Waiting in place for a person: a run that needs an answer goes on in the same run.

With ``Agent(wait_inline=seconds)`` (or ``@nb.tool(wait_inline=)``), a run whose step asked
a person (an approval, a question, an external result) does not end at once: it commits
the requests, then waits up to that long, alive and holding the session's lease (the
driver's renewer keeps it), for ``respond`` commands of its turn. Each answer is recorded
in this run (``inbox/started`` and ``interaction/resolved`` carry its ``run_id``), and once
every request of the step is answered the run carries out the calls and takes its next
step. The calls of one step wait together: one wait, for all of their requests.

The wait ends without the answers when it runs out, when the run is asked to stop
(``interrupt``, ``close``, its time limit) or when the process dies; the run then ends
``suspended``, as with no wait, with why in its ``run/end`` (``stop_reason``
``inline_wait_expired``, or the stop's code, and the reason in words), and an answer that
comes later starts a new run as it always did. A crash is closed the same way on recovery
(``Recipes.recover``). The run sleeps on the inbox: the run's watcher wakes it when a
command arrives (at once for commands accepted through this process's store, within the
store's poll for another process's), never a hot poll.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from agentnb.errors import InvalidAnswer, describe
from agentnb.projections.state import Command
from agentnb.runtime.recipes import Recipes
from agentnb.runtime.scope import RunHost

__all__ = ["EXPIRED", "InlineWait"]

EXPIRED = "inline_wait_expired"
"""The ``stop_reason`` of a run that waited in place for a person as long as it may."""

NEEDS_PERSON = "needs_person"


class InlineWait:
    """Waits in the running run for the answers its turn needs (see the module's doc)."""

    def __init__(
        self,
        host: RunHost,
        recipes: Recipes,
        flush: Callable[[str], Awaitable[None]],
        moved: asyncio.Event,
    ) -> None:
        self.host = host
        self.recipes = recipes
        self.flush = flush
        """Commits before the wait (the first commit of a new turn is guarded)."""
        self.moved = moved
        """Set by the run's watcher each time it brought the inbox fold up to date."""

    def seconds(self, turn_id: str) -> float:
        """How long the run may wait for the turn's requests: the least ``wait_inline`` of
        their tools (a tool's own, else the agent's); 0 when one of the turn's open calls
        waits on something else (a sub-agent's child), which only a new run can pick up."""
        state = self.host.state
        agent = self.host.agent
        pending = state.pending_of(turn_id)
        if not pending:
            return 0.0
        ids = {r["request_id"] for r in pending}
        for call in state.open_calls(turn_id):
            if call.call_id not in ids and (call.asking is None or call.asking not in ids):
                return 0.0
        waits = []
        for request in pending:
            tool = agent.tool_named(request.get("tool_name") or "")
            own = tool.wait_inline if tool is not None else None
            waits.append(agent.wait_inline if own is None else own)
        return min(waits)

    async def wait(
        self, turn_id: str, run_id: str, carry_on: Callable[[], Awaitable[bool]]
    ) -> tuple[str, str | None] | None:
        """Wait for the answers, carry the calls out (``carry_on``: True if they wait for a
        person again, then the run waits again); None when the run goes on, else the
        ``(stop_reason, reason)`` the run ends ``suspended`` with."""
        while True:
            seconds = self.seconds(turn_id)
            if seconds <= 0:
                return NEEDS_PERSON, None
            end = await self.answers(turn_id, run_id, seconds)
            if end is not None:
                return end
            if not await carry_on():
                return None

    async def answers(self, turn_id: str, run_id: str, seconds: float) -> tuple[str, str] | None:
        """Record the answers of the turn's requests as they arrive; None once none is
        pending, else why the wait ended first."""
        host = self.host
        stop = host.stop
        await self.flush(turn_id)  # the requests are committed: pending() shows them
        await host.refresh_inbox()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while True:
            self.moved.clear()  # before reading: a command folded after this wakes us
            for command in self.responds(turn_id):
                try:
                    await self.recipes.answer_inline(command, turn_id, run_id)
                except InvalidAnswer as exc:  # checked before anything is written
                    await self.recipes.reject(command, describe(exc, typed=False))
            if not host.state.pending_of(turn_id):
                return None
            if stop.is_set():
                self.recipes.stop_requested(turn_id, run_id)
                code = "interrupted" if stop.command is not None else stop.code
                why = "an interrupt" if stop.command is not None else (stop.reason or code)
                return code, (
                    f"the inline wait for a person ended early ({why}); the turn waits for "
                    "the answer, which continues it in a new run"
                )
            remaining = deadline - loop.time()
            if remaining <= 0:
                return EXPIRED, (
                    f"the inline wait of {seconds:g} s expired with no answer; the turn waits "
                    "for it, and respond continues it in a new run"
                )
            await self.until(remaining)

    def responds(self, turn_id: str) -> list[Command]:
        """The ``respond`` commands for the turn accepted and not carried out yet."""
        state = self.host.state
        inbox = self.host.inbox
        return [
            c
            for c in inbox.commands.values()
            if c.kind == "respond"
            and c.turn_id == turn_id
            and c.command_id not in state.handled
            and c.command_id not in inbox.rejected
        ]

    async def until(self, timeout: float) -> None:
        """Sleep until the inbox moves, a stop is asked for, or ``timeout`` passes."""
        waits = [
            asyncio.ensure_future(self.moved.wait()),
            asyncio.ensure_future(self.host.stop.event.wait()),
        ]
        try:
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
