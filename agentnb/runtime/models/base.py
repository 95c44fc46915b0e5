"""The model port: what every language model behind agentnb streams, and in what order.

A ``Model`` turns a ``ModelRequest`` (messages, tool specs, options) into an asynchronous
stream of ``StreamItem`` values: text and tool-call argument fragments as they arrive, then the
token usage, then the finish reason. The runtime commits those pieces to the session log in
small groups, so a reply that is cut off (interrupt, crash, error) leaves exactly the part that
was streamed. ``StreamCollector`` reassembles a stream into complete text and tool calls.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from agentnb.errors import AgentnbError
from agentnb.events import Message, ToolCallData
from agentnb.ids import new_id

__all__ = [
    "Completion",
    "Finish",
    "Model",
    "ModelError",
    "ModelRequest",
    "StreamCollector",
    "StreamItem",
    "TextDelta",
    "ToolCallDelta",
    "Usage",
]


@dataclass(frozen=True)
class TextDelta:
    """The next piece of the reply's text."""

    text: str


@dataclass(frozen=True)
class ToolCallDelta:
    """The next piece of one tool call the reply makes.

    ``index`` numbers the calls of one reply from 0. The first fragment of a call carries its
    ``name`` (and ``call_id`` when the provider assigns one; otherwise the runtime does). The
    ``arguments_delta`` strings of one index, concatenated in stream order, are the call's
    arguments as a JSON object (an empty total means ``{}``).
    """

    index: int
    call_id: str | None = None
    name: str | None = None
    arguments_delta: str = ""


@dataclass(frozen=True)
class Usage:
    """Tokens the call consumed, as the provider counts them."""

    input_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class Finish:
    """Why the reply ended: ``"stop"``, ``"tool_calls"``, ``"length"``, ``"content_filter"``..."""

    reason: str


StreamItem = TextDelta | ToolCallDelta | Usage | Finish


@dataclass(frozen=True)
class ModelRequest:
    """One model call: the conversation so far, the tools on offer and provider options.

    ``tools`` holds ``Tool.spec()`` dicts (``name``, ``description``, ``parameters``).
    ``options`` are passed to the provider as they are (temperature, max tokens, ...).
    Lists are accepted and stored as tuples.
    """

    messages: tuple[Message, ...]
    tools: tuple[dict[str, Any], ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "messages", tuple(self.messages))
        object.__setattr__(self, "tools", tuple(self.tools))
        object.__setattr__(self, "options", dict(self.options))


class ModelError(AgentnbError):
    """A model call failed.

    ``retryable`` is True for transient failures (rate limits, server errors, lost
    connections): the runtime may try the call again after a delay. False means trying again
    will fail the same way (bad request, authentication, a script that ran out).
    """

    retryable: bool = False

    def __init__(self, message: str, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


class Completion(NamedTuple):
    """A whole reply, collected from a stream by ``Model.complete``."""

    text: str
    tool_calls: list[ToolCallData]
    usage: Usage | None
    finish_reason: str | None


class Model(ABC):
    """A language model, seen as a stream of reply pieces.

    Implementations set ``name`` (recorded with every call) and implement ``stream``.

    **What ``stream(request)`` returns.** An async iterator, usually an async generator, that
    yields, in this order:

    1. zero or more ``TextDelta`` and ``ToolCallDelta`` items, in the order the model produced
       them. Fragments of different tool calls may interleave; consumers group them by
       ``index`` (``StreamCollector`` does). A call's first fragment carries its ``name``.
    2. at most one ``Usage``.
    3. exactly one ``Finish``, after which the iterator ends.

    The same request to a deterministic model (``ScriptedModel``) yields the same items.

    **Errors.** A failed call raises ``ModelError`` from the iterator, before or after some
    pieces were yielded; ``retryable`` says whether trying again may help. The runtime treats
    any other exception as a non-retryable failure of the call. Pieces yielded before an error
    belong to a failed attempt: a retry starts the reply afresh.

    **Cancellation.** The consumer may stop at any point (an interrupt cancels the task or
    closes the iterator). Implementations release what they hold in ``finally`` blocks and let
    ``CancelledError`` propagate; they should await regularly so a cancel lands promptly.

    **Sharing.** One instance may serve several sessions and calls at once: ``stream`` must not
    change the request, and any per-call state lives in the iterator, not on the instance.
    """

    name: str

    @abstractmethod
    def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        """Stream the reply to ``request`` (see the class docstring for the contract)."""

    async def complete(
        self,
        request: ModelRequest,
        *,
        new_call_id: Callable[[], str] | None = None,
    ) -> Completion:
        """Run ``stream`` to the end and return the whole reply.

        Tool calls without a provider call id get one from ``new_call_id`` (default: fresh
        ``call_...`` ids). Raises what the stream raises, and ``ModelError`` when the stream
        breaks the contract above or a call's arguments are not a JSON object.
        """
        collector = StreamCollector()
        async for item in self.stream(request):
            collector.add(item)
        if collector.finish_reason is None:
            raise ModelError(f"model {self.name!r} ended its stream without a Finish item")
        return Completion(
            text=collector.text,
            tool_calls=collector.tool_calls(new_call_id),
            usage=collector.usage,
            finish_reason=collector.finish_reason,
        )


class _PartialCall:
    __slots__ = ("arguments", "call_id", "name")

    def __init__(self) -> None:
        self.call_id: str | None = None
        self.name: str | None = None
        self.arguments: list[str] = []


class StreamCollector:
    """Reassembles stream items into text, tool calls, usage and finish reason.

    Feed it every item in stream order with ``add``; fragments of interleaved tool calls are
    grouped by their ``index``. It enforces the stream contract of ``Model``: nothing may follow
    ``Finish`` and ``Usage`` comes at most once (``ModelError`` otherwise).
    """

    def __init__(self) -> None:
        self._text: list[str] = []
        self._calls: dict[int, _PartialCall] = {}
        self.usage: Usage | None = None
        self.finish_reason: str | None = None

    def add(self, item: StreamItem) -> None:
        """Take the next stream item."""
        if self.finish_reason is not None:
            raise ModelError(f"the model stream yielded {item!r} after its Finish item")
        if isinstance(item, TextDelta):
            self._text.append(item.text)
        elif isinstance(item, ToolCallDelta):
            call = self._calls.setdefault(item.index, _PartialCall())
            if item.call_id is not None:
                call.call_id = item.call_id
            if item.name is not None:
                call.name = item.name
            call.arguments.append(item.arguments_delta)
        elif isinstance(item, Usage):
            if self.usage is not None:
                raise ModelError("the model stream yielded Usage twice")
            self.usage = item
        elif isinstance(item, Finish):
            self.finish_reason = item.reason
        else:
            raise ModelError(f"the model stream yielded {item!r}, which is not a StreamItem")

    @property
    def text(self) -> str:
        """The text so far."""
        return "".join(self._text)

    def arguments_json(self, index: int) -> str:
        """The raw argument text of call ``index`` so far."""
        return "".join(self._calls[index].arguments)

    def tool_calls(
        self,
        new_call_id: Callable[[], str] | None = None,
        problems: dict[str, str] | None = None,
    ) -> list[ToolCallData]:
        """The complete tool calls in index order; ids missing from the stream are made.

        Raises ``ModelError`` for a call that never got a name or whose arguments are not a
        JSON object, unless ``problems`` is given: then such arguments become ``{}`` and the
        reason is stored under the call's id (so a runtime can show the model its mistake).
        """
        make_id = new_call_id or (lambda: new_id("call"))
        calls = []
        for index in sorted(self._calls):
            partial = self._calls[index]
            if not partial.name:
                raise ModelError(f"the model streamed tool call #{index} without a name")
            call_id = partial.call_id or make_id()
            try:
                arguments = _parse_arguments("".join(partial.arguments), partial.name, index)
            except ModelError as exc:
                if problems is None:
                    raise
                problems[call_id] = str(exc)
                arguments = {}
            calls.append(ToolCallData(call_id=call_id, name=partial.name, arguments=arguments))
        return calls


def _parse_arguments(text: str, name: str, index: int) -> dict[str, Any]:
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ModelError(
            f"the model sent malformed JSON arguments for tool call #{index} ({name}): {exc}"
        ) from None
    if not isinstance(value, dict):
        raise ModelError(
            f"the model sent arguments for tool call #{index} ({name}) that are not a JSON "
            f"object: {text[:80]!r}"
        )
    return value
