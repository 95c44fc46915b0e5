"""ScriptedModel: a deterministic, offline model for tests, notebooks and the demo."""

from __future__ import annotations

import asyncio
import inspect
import json
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from agentnb.errors import InvalidInput
from agentnb.events import Message, canonical_json
from agentnb.models.base import (
    Finish,
    Model,
    ModelError,
    ModelRequest,
    ReasoningDelta,
    StreamItem,
    TextDelta,
    ToolCallDelta,
    Usage,
    check_context_window,
    estimate_text_tokens,
)

__all__ = ["Reply", "ScriptExhausted", "ScriptedModel", "ToolCall"]


@dataclass(frozen=True)
class ToolCall:
    """A scripted tool call: the tool's name and its arguments (a JSON object)."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise InvalidInput(f"ToolCall name must be a non-empty string, got {self.name!r}")
        if not isinstance(self.arguments, Mapping):
            raise InvalidInput(
                f"ToolCall({self.name!r}) arguments must be a dict, "
                f"got {type(self.arguments).__name__}"
            )
        arguments = dict(self.arguments)
        try:
            # Plain JSON, NaN refused (the log's codec writes it as null); how deep it goes
            # is the run's to refuse, as for a real model's reply.
            json.dumps(arguments, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise InvalidInput(
                f"ToolCall({self.name!r}) arguments must be plain JSON: {exc}"
            ) from None
        object.__setattr__(self, "arguments", arguments)


@dataclass(frozen=True)
class Reply:
    """A scripted reply with any mix of text and tool calls.

    ``usage`` is ``(input_tokens, output_tokens)``; without it the counts are derived as
    ``ScriptedModel`` says. ``finish_reason`` overrides the default (``"tool_calls"`` when there
    are tool calls, else ``"stop"``). ``error``, if set, is raised after the text and tool-call
    pieces were streamed, before usage and finish: a call that fails part-way through its reply.
    ``reasoning`` is thinking streamed before the text (``ReasoningDelta`` pieces), recorded
    as the message's reasoning part.
    """

    text: str = ""
    tool_calls: tuple[ToolCall, ...] | list[ToolCall] = ()
    usage: tuple[int, int] | None = None
    finish_reason: str | None = None
    error: BaseException | None = None
    reasoning: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise InvalidInput(f"Reply text must be a string, got {type(self.text).__name__}")
        if not isinstance(self.reasoning, str):
            raise InvalidInput(
                f"Reply reasoning must be a string, got {type(self.reasoning).__name__}"
            )
        if isinstance(self.tool_calls, ToolCall):
            calls: tuple[ToolCall, ...] = (self.tool_calls,)
        else:
            calls = tuple(self.tool_calls)
        for i, call in enumerate(calls):
            if not isinstance(call, ToolCall):
                raise InvalidInput(
                    f"Reply tool_calls[{i}] must be a ToolCall, got {type(call).__name__}"
                )
        object.__setattr__(self, "tool_calls", calls)
        if self.usage is not None and not (
            len(self.usage) == 2
            and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in self.usage)
        ):
            raise InvalidInput(
                f"Reply usage must be (input_tokens, output_tokens), got {self.usage!r}"
            )
        if self.error is not None and not isinstance(self.error, BaseException):
            raise InvalidInput(f"Reply error must be an exception, got {self.error!r}")


class ScriptExhausted(ModelError):
    """A list script was asked for more replies than it holds."""


ScriptItem: TypeAlias = str | ToolCall | Sequence[ToolCall] | Reply | BaseException
"""One scripted reply: final text, one or more tool calls, a ``Reply``, or an error to raise."""

ScriptFunction: TypeAlias = Callable[[list[Message]], ScriptItem | Awaitable[ScriptItem]]


class ScriptedModel(Model):
    """A model that replies from a script: deterministic and offline.

    ``script`` is either a list with one reply per model call, or a callable
    ``script(messages) -> reply`` for rule-based behaviour (it may also be async). A reply is a
    ``str`` (a final text answer), a ``ToolCall``, a list of ``ToolCall``, a ``Reply``, or an
    exception, which the stream raises (to script model failures; a ``ModelError`` with
    ``retryable=True`` scripts a transient one). A list that runs out raises
    ``ScriptExhausted``.

    Replies stream like a real model's: text in ``chunk_size``-character pieces, then each tool
    call's key-sorted JSON arguments in ``chunk_size`` pieces, the fragments of several calls
    interleaved round-robin, with ``chunk_delay`` seconds between pieces; then ``Usage`` and
    ``Finish``. The same script and requests always give the same stream.

    Tokens are counted by the model port's documented estimate (``estimate_tokens``: UTF-8
    bytes / 4 per piece of text, plus framing), so ``count_tokens`` is deterministic. A reply
    without ``Reply.usage`` reports ``input_tokens = count_tokens(request.messages,
    request.tools)`` and ``output_tokens`` = the estimate of its text plus each call's name and
    JSON arguments. ``context_window`` (tokens, or None) is reported as given.

    ``requests`` holds the messages of every call received, in order; ``calls`` counts them.
    ``keep_requests`` (None: all) keeps only the newest that many: a long conversation's
    record otherwise grows with the square of its length.
    """

    def __init__(
        self,
        script: Sequence[ScriptItem] | ScriptFunction,
        *,
        chunk_size: int = 16,
        chunk_delay: float = 0.0,
        name: str = "scripted",
        context_window: int | None = None,
        keep_requests: int | None = None,
    ) -> None:
        if keep_requests is not None and (
            isinstance(keep_requests, bool)
            or not isinstance(keep_requests, int)
            or keep_requests < 0
        ):
            raise InvalidInput(f"keep_requests must be an int >= 0 or None, got {keep_requests!r}")
        self.keep_requests = keep_requests
        self._calls = 0
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
            raise InvalidInput(f"chunk_size must be a positive int, got {chunk_size!r}")
        if isinstance(chunk_delay, bool) or not isinstance(chunk_delay, int | float):
            raise InvalidInput(f"chunk_delay must be a number of seconds, got {chunk_delay!r}")
        if not chunk_delay >= 0:
            raise InvalidInput(f"chunk_delay must be >= 0 seconds, got {chunk_delay!r}")
        if not isinstance(name, str) or not name:
            raise InvalidInput(f"name must be a non-empty string, got {name!r}")
        check_context_window(context_window)
        self._replies: tuple[Reply, ...] | None = None
        self._function: ScriptFunction | None = None
        if isinstance(script, list | tuple):
            replies = []
            for i, item in enumerate(script):
                reply = _as_reply(item)
                if reply is None:
                    raise InvalidInput(f"script[{i}] is {_describe(item)}; {_REPLY_KINDS}")
                replies.append(reply)
            self._replies = tuple(replies)
        elif callable(script):
            self._function = script
        else:
            raise InvalidInput(
                f"script must be a list of replies or a callable, got {_describe(script)}"
            )
        self.name = name
        self.chunk_size = chunk_size
        self.chunk_delay = float(chunk_delay)
        self.context_window = context_window
        self.requests: list[list[Message]] = []
        self._lock = threading.Lock()

    @property
    def calls(self) -> int:
        """How many times ``stream`` was called."""
        return self._calls

    def __repr__(self) -> str:
        script = "callable" if self._replies is None else f"{len(self._replies)} replies"
        return f"ScriptedModel(name={self.name!r}, script={script}, calls={self.calls})"

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        messages = list(request.messages)
        with self._lock:
            index = self._calls
            self._calls += 1
            self.requests.append(messages)
            if self.keep_requests is not None and len(self.requests) > self.keep_requests:
                del self.requests[: len(self.requests) - self.keep_requests]
        return self._stream(index, messages, request.tools)

    async def _stream(
        self, index: int, messages: list[Message], tools: tuple[dict[str, Any], ...]
    ) -> AsyncIterator[StreamItem]:
        await asyncio.sleep(0)
        reply = await self._reply(index, messages)

        size = self.chunk_size
        pieces: list[StreamItem] = [
            ReasoningDelta(reply.reasoning[i : i + size])
            for i in range(0, len(reply.reasoning), size)
        ]
        pieces += [TextDelta(reply.text[i : i + size]) for i in range(0, len(reply.text), size)]
        arguments = [canonical_json(call.arguments) for call in reply.tool_calls]
        fragments = [
            [
                ToolCallDelta(index=n, name=call.name if k == 0 else None, arguments_delta=part)
                for k, part in enumerate(_split(args, size))
            ]
            for n, (call, args) in enumerate(zip(reply.tool_calls, arguments, strict=True))
        ]
        for round_ in range(max((len(f) for f in fragments), default=0)):
            pieces.extend(f[round_] for f in fragments if round_ < len(f))

        for i, piece in enumerate(pieces):
            await asyncio.sleep(self.chunk_delay if i else 0)
            yield piece
        await asyncio.sleep(0)
        if reply.error is not None:
            raise reply.error

        if reply.usage is not None:
            yield Usage(input_tokens=reply.usage[0], output_tokens=reply.usage[1])
        else:
            yield Usage(
                input_tokens=self.count_tokens(messages, tools),
                output_tokens=estimate_text_tokens(reply.text)
                + estimate_text_tokens(reply.reasoning)
                + sum(
                    estimate_text_tokens(call.name) + estimate_text_tokens(args)
                    for call, args in zip(reply.tool_calls, arguments, strict=True)
                ),
            )
        default_reason = "tool_calls" if reply.tool_calls else "stop"
        yield Finish(reply.finish_reason or default_reason)

    async def _reply(self, index: int, messages: list[Message]) -> Reply:
        if self._replies is not None:
            if index >= len(self._replies):
                raise ScriptExhausted(
                    f"script ran out after {len(self._replies)} replies; "
                    "add replies or use a callable script"
                )
            return self._replies[index]
        assert self._function is not None
        item = self._function(list(messages))
        if inspect.isawaitable(item):
            item = await item
        reply = _as_reply(item)
        if reply is None:
            raise ModelError(f"the script function returned {_describe(item)}; {_REPLY_KINDS}")
        return reply


_REPLY_KINDS = "a reply is a str, a ToolCall, a list of ToolCall, a Reply or an exception"


def _as_reply(item: object) -> Reply | None:
    """The ``Reply`` a script item stands for, or None if it is not a reply."""
    if isinstance(item, Reply):
        return item
    if isinstance(item, str):
        return Reply(text=item)
    if isinstance(item, ToolCall):
        return Reply(tool_calls=(item,))
    if isinstance(item, BaseException):
        return Reply(error=item)
    if isinstance(item, list | tuple) and all(isinstance(c, ToolCall) for c in item):
        return Reply(tool_calls=tuple(item))
    return None


def _describe(item: object) -> str:
    text = repr(item)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"a {type(item).__name__} ({text})"


def _split(text: str, size: int) -> list[str]:
    # Always at least one fragment, so a call with "{}" arguments still carries its name.
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]
