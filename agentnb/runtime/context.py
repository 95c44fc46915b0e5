"""The working context of a running session: its size, and compaction when it grows.

``ContextKeeper.fit`` runs before each step: when the next model call's context passes the
compactor's trigger (a share of the model's window) it compacts, and when it still does not
fit the window the turn cannot go on. ``compact`` replaces the oldest part of the context
(see ``agentnb.compaction``) with events committed so that a crash leaves the old context or
the new one, never a mix.
"""

from __future__ import annotations

import time

from agentnb.compaction import SummaryCompactor, replacement_message
from agentnb.errors import describe
from agentnb.ids import new_id
from agentnb.models.base import Model
from agentnb.projections.state import Command, build_context
from agentnb.runtime.scope import RunHost
from agentnb.tracebacks import format_traceback

__all__ = ["ContextKeeper"]


class ContextKeeper:
    """Keeps the host's working context inside the model's window."""

    def __init__(self, host: RunHost) -> None:
        self.host = host

    def tokens(self) -> tuple[int, int | None]:
        """(tokens of the next call's context with the tools, the model's window or None)."""
        agent = self.host.agent
        messages = build_context(agent.instructions, self.host.state.context)
        tools = [t.spec() for t in agent.tools]
        window = agent.context_window or agent.model.context_window
        return agent.model.count_tokens(messages, tools), window

    async def fit(self, turn_id: str, run_id: str) -> str | None:
        """Compact before a step when the next context passes the compactor's trigger.

        Returns why the turn cannot go on (the context does not fit the window, and
        compaction could not make it fit), else None.
        """
        compactor = self.host.agent.compaction
        window = self.host.agent.context_window or self.host.agent.model.context_window
        if window is None:
            return None  # no window known: nothing to keep the context inside
        tokens, _ = self.tokens()
        if compactor is not None and tokens >= compactor.trigger * window:
            await self.compact(turn_id, run_id, "trigger")
            tokens, _ = self.tokens()
        if tokens > window:
            return f"the context ({tokens} tokens) does not fit the model's window of {window}" + (
                "" if compactor else "; give the agent a compaction= compactor"
            )
        return None

    async def compact(self, turn_id: str | None, run_id: str | None, reason: str) -> bool:
        """Replace the oldest part of the working context (see ``agentnb.compaction``).

        ``compaction/start`` and, for a summary, the summariser's ``model/dispatch`` are
        committed before the summariser is called; ``context/replaced`` and
        ``compaction/end`` commit together, so a crash leaves the old context or the new one.
        A failure records ``compaction/end`` ``failed`` and keeps the context. True if
        compacted.
        """
        compactor = self.host.agent.compaction
        if compactor is None:
            return False
        w = self.host.writer
        context = list(self.host.state.context)
        cut = compactor.cut(context)
        if cut == 0:
            return False
        compaction_id = new_id("cmp")
        before, _ = self.tokens()
        w.add(
            "compaction/start",
            {
                "compaction_id": compaction_id,
                "reason": reason,
                "before_count": len(context),
                "tokens_before": before,
                "compactor": compactor.name,
            },
            turn_id=turn_id,
            run_id=run_id,
        )
        summary = isinstance(compactor, SummaryCompactor)
        call_id = new_id("mc")
        model: Model | None = None
        if isinstance(compactor, SummaryCompactor):
            model = compactor.model or self.host.agent.model
        if model is not None:
            # An auxiliary call: marked so the chat and the usage keep it apart (seed:
            # request/prepared.purpose).
            w.add(
                "request/prepared",
                {
                    "model_call_id": call_id,
                    "model": model.name,
                    "messages": [],
                    "purpose": "compaction",
                    "options": {"compaction_id": compaction_id, "replaced_count": cut},
                },
                turn_id=turn_id,
                run_id=run_id,
            )
            w.add("model/dispatch", {"model_call_id": call_id}, turn_id=turn_id, run_id=run_id)
        await w.flush()
        started = time.monotonic()
        try:
            text, usage = await compactor.produce(context[:cut], self.host.agent.model)
        except Exception as exc:  # noqa: BLE001 - a failed compaction keeps the context
            error = describe(exc)
            if model is not None:
                w.add(
                    "model/end",
                    {
                        "model_call_id": call_id,
                        "status": "failed",
                        "model": model.name,
                        "error": error,
                        "purpose": "compaction",
                        "traceback": format_traceback(exc),
                    },
                    turn_id=turn_id,
                    run_id=run_id,
                )
            w.add(
                "compaction/end",
                {
                    "compaction_id": compaction_id,
                    "status": "failed",
                    "error": error,
                    "before_count": len(context),
                    "tokens_before": before,
                },
                turn_id=turn_id,
                run_id=run_id,
            )
            await w.flush()
            return False
        if model is not None:
            w.add(
                "model/end",
                {
                    "model_call_id": call_id,
                    "status": "completed",
                    "model": model.name,
                    "latency_ms": round((time.monotonic() - started) * 1000, 3),
                    "purpose": "compaction",
                    "input_tokens": usage.input_tokens if usage else None,
                    "output_tokens": usage.output_tokens if usage else None,
                    "cached_tokens": usage.cached_tokens if usage else None,
                    "reasoning_tokens": usage.reasoning_tokens if usage else None,
                },
                turn_id=turn_id,
                run_id=run_id,
            )
        replacement = replacement_message(text, compaction_id, summary=summary)
        w.add(
            "context/replaced",
            {
                "reason": reason,
                "messages": [replacement],
                "replaced_count": cut,
                "compaction_id": compaction_id,
                "previous_as_of_seq": self.host.state.seq,
            },
            turn_id=turn_id,
            run_id=run_id,
        )
        after, _ = self.tokens()
        w.add(
            "compaction/end",
            {
                "compaction_id": compaction_id,
                "status": "completed",
                "before_count": len(context),
                "after_count": len(self.host.state.context),
                "tokens_before": before,
                "tokens_after": after,
                "replaced": [context[0].id, context[cut - 1].id],
                "summary": text if summary else None,
            },
            turn_id=turn_id,
            run_id=run_id,
        )
        await w.flush()
        return True

    async def compact_command(self, command: Command) -> None:
        """``session.compact()``: compact now, between runs (a no-op when nothing can be cut).

        The command counts as carried out with the compaction's last commit: a crash before
        it leaves the command waiting, and the next runtime compacts again.
        """
        await self.compact(None, None, "requested")
        self.host.writer.add("inbox/started", {"command_id": command.command_id, "kind": "compact"})
        await self.host.writer.flush()
