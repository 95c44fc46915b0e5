"""Middleware of an agent: hooks around each model call and tool call that may record.

``nb.Agent(middleware=[...])`` takes objects with some of these methods, each sync or async
(a sync one runs in a worker thread, so it may block and use ``ctx.flush()``)::

    before_model(ctx, request)        # the ModelRequest about to be sent
    after_model(ctx, reply)           # ModelReply: the reply's text and tool calls
    before_tool(ctx, call)            # ToolCallData; return nb.Refuse("why") to refuse it
    after_tool(ctx, call, result)     # ToolCallResult: its status and output

Which hooks an object has is decided once, when the agent is made (``Hooks``). Hooks run in
the order given. ``ctx.record(type, data)`` adds an application event (its type registered
with ``nb.register_event_type``) to the run's log, in order, in the step it belongs to;
``await ctx.aflush()`` (``ctx.flush()`` from a sync hook) commits what was recorded before
going on. A ``before_tool`` that returns ``Refuse(reason)`` stops the call before it runs:
the call's decision is ``denied`` with the reason (as an approval refused), and the model
sees the refusal as the call's error; later middleware is not asked about it. A hook that
raises ends its run ``failed`` with ``MiddlewareFailed`` (naming the hook) as the committed
reason; one that hangs is stopped by the run's own time limit or an ``interrupt``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from agentnb.errors import InvalidInput
from agentnb.events import ToolCallData

__all__ = [
    "HOOKS",
    "Hook",
    "Hooks",
    "MiddlewareContext",
    "ModelReply",
    "Refuse",
    "ToolCallResult",
]

HOOKS = ("before_model", "after_model", "before_tool", "after_tool")
"""The methods a middleware may have."""


@dataclass(frozen=True, slots=True)
class Refuse:
    """What a ``before_tool`` hook returns to refuse the call, with the reason the model and
    the audit see."""

    reason: str

    def __post_init__(self) -> None:
        if not isinstance(self.reason, str) or not self.reason.strip():
            raise InvalidInput("Refuse(reason) needs a non-empty reason string")


@dataclass(frozen=True, slots=True)
class ModelReply:
    """What ``after_model`` is given: the reply's text and the tool calls it asks for."""

    text: str
    tool_calls: tuple[ToolCallData, ...]


@dataclass(frozen=True, slots=True)
class ToolCallResult:
    """What ``after_tool`` is given: the recorded status (``success``, ``error``, ...) and
    output of the call."""

    status: str
    output: str


@dataclass(frozen=True, slots=True)
class Hook:
    """One middleware's method for one hook: who (``label``), the function, and whether it
    is a coroutine function."""

    label: str
    fn: Callable[..., Any]
    is_async: bool


class Hooks:
    """The hooks of a list of middleware, found once: ``hooks.before_tool`` holds the
    ``Hook`` of each middleware that has that method, in order."""

    def __init__(self, middleware: Iterable[object] = ()) -> None:
        if isinstance(middleware, str | bytes) or not isinstance(middleware, Iterable):
            raise InvalidInput("middleware must be a list of objects with hook methods")
        self.middleware = tuple(middleware)
        found: dict[str, list[Hook]] = {name: [] for name in HOOKS}
        for i, m in enumerate(self.middleware):
            if inspect.isclass(m):
                raise InvalidInput(
                    f"middleware {m.__name__} is a class; pass an instance: {m.__name__}()"
                )
            label = f"{type(m).__name__}#{i}"
            has = False
            for name in HOOKS:
                fn = getattr(m, name, None)
                if fn is None:
                    continue
                if not callable(fn):
                    raise InvalidInput(f"middleware {label}: {name} must be a method")
                found[name].append(Hook(label, fn, inspect.iscoroutinefunction(fn)))
                has = True
            if not has:
                raise InvalidInput(
                    f"middleware {label} has none of the hooks {', '.join(HOOKS)}; give it at "
                    "least one of these methods"
                )
        self.before_model = tuple(found["before_model"])
        self.after_model = tuple(found["after_model"])
        self.before_tool = tuple(found["before_tool"])
        self.after_tool = tuple(found["after_tool"])

    def __bool__(self) -> bool:
        return bool(self.middleware)


class MiddlewareContext:
    """What a hook is handed: where it runs, ``record`` and ``aflush``/``flush``."""

    def __init__(
        self,
        session: object,
        turn_id: str,
        run_id: str,
        step_id: str | None,
        call_id: str | None,
        record: Callable[[str, Any, bool], None],
        aflush: Callable[[], Any],
        flush: Callable[[], None],
    ) -> None:
        self.session = session
        """The session's key."""
        self.turn_id = turn_id
        self.run_id = run_id
        self.step_id = step_id
        """The step the hook runs in (its ``step/start``), or None outside a step."""
        self.call_id = call_id
        """The tool call of a ``before_tool``/``after_tool`` hook, else None."""
        self._record = record
        self._aflush = aflush
        self._flush = flush

    def record(self, type_: str, data: Any = None, required: bool = False) -> None:
        """Add an application event of a registered (or namespaced) type to the run's log,
        as a tool's ``ctx.record`` does.

        Validated here (``InvalidInput`` if the payload does not fit); a ``required=True``
        record of a type with a reducer is folded first, and if the reducer raises,
        ``ReducerFailed`` refuses it (the turn then fails). Committed with the run's next
        commit or ``aflush``."""
        self._record(type_, data, required)

    async def aflush(self) -> None:
        """Commit what this run recorded so far, then go on (durable before what follows)."""
        await self._aflush()

    def flush(self) -> None:
        """``aflush`` for a sync hook (it runs in a worker thread): commit and wait."""
        self._flush()
