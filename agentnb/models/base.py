"""The model port: what every language model behind agentnb streams, and in what order.

A ``Model`` turns a ``ModelRequest`` (messages, tool specs, options) into an asynchronous
stream of ``StreamItem`` values: text and tool-call argument fragments as they arrive, then the
token usage, then the finish reason. The runtime commits those pieces to the session log in
small groups, so a reply that is cut off (interrupt, crash, error) leaves exactly the part that
was streamed. ``StreamCollector`` reassembles a stream into complete text and tool calls.

A model also counts tokens (``Model.count_tokens``, with ``estimate_tokens`` as the documented
fallback), states its ``context_window``, and says how long to wait before a failed call is
tried again (``Backoff``, which honours a server's ``ModelError.retry_after``).

Why it is long: the model port and what every model shares (stream pieces, the collector,
token counting with its memo, backoff) are one contract.
"""

from __future__ import annotations

import contextlib
import email.utils
import json
import math
import random
import threading
import weakref
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC
from typing import Any, NamedTuple

from agentnb import _portable
from agentnb.errors import AgentnbError, InvalidInput
from agentnb.events import Message, ReasoningPart, ToolCallData, canonical_json
from agentnb.ids import new_id

__all__ = [
    "MESSAGE_TOKENS",
    "REPLY_TOKENS",
    "Backoff",
    "Completion",
    "ContextTooLong",
    "Finish",
    "Model",
    "ModelError",
    "ModelRequest",
    "ReasoningDelta",
    "StreamCollector",
    "StreamItem",
    "TextDelta",
    "ToolCallDelta",
    "Usage",
    "check_context_window",
    "count_tokens_with",
    "estimate_text_tokens",
    "estimate_tokens",
    "retry_after_of",
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
class ReasoningDelta:
    """The next piece of the reply's reasoning (thinking), its own kind: never reply text.

    ``index`` numbers the reasoning parts of one reply from 0; the ``text`` pieces of one
    index, concatenated in stream order, are that part's text. The provider's opaque fields
    (``signature``, ``data``, ``id``, ``summary``: see ``agentnb.events.ReasoningPart``) come
    on any piece of the part, usually its last, and the last value given wins. ``provider``
    names the API (``"anthropic"``, ``"openai"``).
    """

    text: str = ""
    index: int = 0
    provider: str | None = None
    signature: str | None = None
    data: str | None = None
    id: str | None = None
    summary: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Usage:
    """Tokens the call consumed, as the provider counts them.

    ``cached_tokens`` (the part of ``input_tokens`` served from the provider's prompt cache),
    ``cache_write_tokens`` (the part of ``input_tokens`` written to that cache) and
    ``reasoning_tokens`` (the part of ``output_tokens`` spent on hidden reasoning) are None when
    the provider does not report them. ``input_tokens`` counts every input token, cached or
    not (Anthropic reports the three apart: its adapter adds them up). ``estimated`` is True
    when the server sent no usage and the adapter counted the tokens itself.
    """

    input_tokens: int
    output_tokens: int
    cached_tokens: int | None = None
    reasoning_tokens: int | None = None
    cache_write_tokens: int | None = None
    estimated: bool = False


@dataclass(frozen=True)
class Finish:
    """Why the reply ended: ``"stop"``, ``"tool_calls"``, ``"length"``, ``"content_filter"``..."""

    reason: str


StreamItem = TextDelta | ReasoningDelta | ToolCallDelta | Usage | Finish


@dataclass(frozen=True)
class ModelRequest:
    """One model call: the conversation so far, the tools on offer and provider options.

    ``tools`` holds ``Tool.spec()`` dicts (``name``, ``description``, ``parameters``).
    ``options`` are passed to the provider as they are (temperature, max tokens, ...).
    Lists are accepted and stored as tuples.

    ``deadline`` is when the call must be over, as a ``time.monotonic()`` reading (the
    task's time limit), or None. A model gives up by then with a ``ModelError`` that is not
    ``retryable``; the runtime cancels a call that is still waiting at that moment anyway.
    """

    messages: tuple[Message, ...]
    tools: tuple[dict[str, Any], ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)
    deadline: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "messages", tuple(self.messages))
        object.__setattr__(self, "tools", tuple(self.tools))
        object.__setattr__(self, "options", dict(self.options))


class ModelError(AgentnbError):
    """A model call failed.

    ``retryable`` is True for transient failures (rate limits, server errors, lost
    connections): the runtime may try the call again after a delay. False means trying again
    will fail the same way (bad request, authentication, a script that ran out), or that the
    call already streamed part of its reply (see ``Model``).

    ``retry_after`` is the wait in seconds the provider asked for (an HTTP ``Retry-After``), or
    None; ``Backoff.delay`` waits at least that long. A value that is not a finite number of
    seconds >= 0 raises ``InvalidInput``.
    """

    retryable: bool = False
    retry_after: float | None = None
    stop_reason: str | None = None
    """The ``stop_reason`` the failed turn records (None: none of the named ones)."""

    def __init__(
        self, message: str, retryable: bool = False, *, retry_after: float | None = None
    ) -> None:
        super().__init__(message)
        if retry_after is not None:
            if (
                isinstance(retry_after, bool)
                or not isinstance(retry_after, int | float)
                or not math.isfinite(retry_after)
                or retry_after < 0
            ):
                raise InvalidInput(
                    f"retry_after must be a finite number of seconds >= 0, got {retry_after!r}"
                )
            retry_after = float(retry_after)
        self.retryable = retryable
        self.retry_after = retry_after


class ContextTooLong(ModelError):
    """The provider refused the request: the prompt is longer than the model's context window.

    Never retryable as it is: compact the context (``Agent(compaction=...)``, e.g.
    ``nb.SummaryCompactor``), or give the agent's ``context_window`` so the runtime fits
    the context before it calls. The turn fails with ``stop_reason`` ``context_overflow``.
    """

    stop_reason = "context_overflow"


def retry_after_of(headers: Mapping[str, str], now: float) -> float | None:
    """The wait the server asked for: ``retry-after-ms``, else ``Retry-After`` in seconds or as
    an HTTP date (a date in the past means now); None when absent or unreadable."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        with contextlib.suppress(ValueError):
            seconds = float(millis) / 1000
            if math.isfinite(seconds) and seconds >= 0:
                return seconds
    value = headers.get("retry-after")
    if value is None:
        return None
    value = value.strip()
    with contextlib.suppress(ValueError):
        seconds = float(value)
        return seconds if math.isfinite(seconds) and seconds >= 0 else None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, when.timestamp() - now)


def _check_seconds(name: str, value: object, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidInput(f"{name} must be a finite number of seconds, got {value!r}")
    if value < 0 or (positive and value == 0):
        raise InvalidInput(f"{name} must be {'> 0' if positive else '>= 0'}, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class Backoff:
    """How long to wait before trying a failed model call again: exponential, with jitter.

    Before retry number ``attempt`` (1 for the first retry) the ceiling is
    ``min(cap, base * factor ** (attempt - 1))``; the delay is drawn uniformly from
    ``[ceiling * (1 - jitter), ceiling]``, so ``jitter=0`` waits exactly the ceiling and
    ``jitter=1`` anywhere from 0 to it ("full jitter"): many clients that failed together do
    not all come back at the same moment. When the error carries ``retry_after`` (the server's
    ``Retry-After``) of at most ``max_retry_after`` seconds, the delay is at least that; a longer
    request is ignored in favour of the computed delay, as the OpenAI and Anthropic SDKs do,
    rather than parking the call for minutes. ``rng`` returns floats in [0, 1); pass
    ``random.Random(seed).random`` for repeatable delays. Bad values raise ``InvalidInput``.
    """

    base: float = 0.5
    factor: float = 2.0
    cap: float = 30.0
    jitter: float = 0.5
    max_retry_after: float = 60.0
    rng: Callable[[], float] = field(default=random.random, repr=False, compare=False)

    def __post_init__(self) -> None:
        _check_seconds("Backoff base", self.base)
        _check_seconds("Backoff cap", self.cap)
        _check_seconds("Backoff max_retry_after", self.max_retry_after)
        if (
            isinstance(self.factor, bool)
            or not isinstance(self.factor, int | float)
            or not 1 <= self.factor < math.inf
        ):
            raise InvalidInput(f"Backoff factor must be a number >= 1, got {self.factor!r}")
        if (
            isinstance(self.jitter, bool)
            or not isinstance(self.jitter, int | float)
            or not 0 <= self.jitter <= 1
        ):
            raise InvalidInput(f"Backoff jitter must be between 0 and 1, got {self.jitter!r}")
        if not callable(self.rng):
            raise InvalidInput(f"Backoff rng must be a callable, got {self.rng!r}")

    def ceiling(self, attempt: int) -> float:
        """The longest computed delay before retry ``attempt`` (1-based), before any jitter."""
        if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 1:
            raise InvalidInput(f"attempt must be an int >= 1, got {attempt!r}")
        # Capped before the power overflows: factor ** n grows past any cap quickly.
        steps = min(attempt - 1, 1_000)
        try:
            raw = self.base * self.factor**steps
        except OverflowError:
            raw = math.inf
        return min(self.cap, raw)

    def delay(self, attempt: int, error: BaseException | None = None) -> float:
        """Seconds to wait before retry ``attempt`` (1-based) of a call that raised ``error``."""
        ceiling = self.ceiling(attempt)
        delay = ceiling * (1 - self.jitter * self.rng())
        retry_after = getattr(error, "retry_after", None)
        if isinstance(retry_after, int | float) and 0 <= retry_after <= self.max_retry_after:
            delay = max(delay, float(retry_after))
        return delay


class Completion(NamedTuple):
    """A whole reply, collected from a stream by ``Model.complete``."""

    text: str
    tool_calls: list[ToolCallData]
    usage: Usage | None
    finish_reason: str | None
    reasoning: tuple[ReasoningPart, ...] = ()


MESSAGE_TOKENS = 3
"""Tokens of framing per message, per tool call and per tool schema (``count_tokens_with``)."""
REPLY_TOKENS = 3
"""Tokens that prime the reply, once per request."""


def check_context_window(value: object) -> int | None:
    """``value`` if it is a positive number of tokens or None, else ``InvalidInput``."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise InvalidInput(
            f"context_window must be a positive number of tokens or None, got {value!r}"
        )
    return value


def estimate_text_tokens(text: str) -> int:
    """Tokens of ``text`` without a tokenizer: its UTF-8 bytes / 4, rounded up.

    BPE tokenizers average about four bytes per token on English text; counting bytes rather
    than characters makes accented and CJK text (2-3 bytes a character) count more, closer to
    what tokenizers do with it, and so errs on the safe side for a context budget.
    """
    return -(-len(text.encode("utf-8", "surrogatepass")) // 4)


# The token memos hold their messages weakly: an entry goes when its message does, so a
# long conversation whose old messages the folds and the context have let go (compaction,
# retired turns) does not keep them alive here. Keyed by identity: ids are unique while the
# message lives, and its entry is gone before the id can be reused.
_MEMO: dict[tuple[int, int], tuple[Callable[[str], int], _Held, int]] = {}
_MEMO_MAX = 200_000
_memo_lock = threading.Lock()


def _forked() -> None:
    # A forked child (a worker process of Runtime(processes=N)) has only the forking
    # thread: the lock another thread held at the fork is nobody's.
    global _memo_lock
    _memo_lock = threading.Lock()


_portable.at_fork(_forked)


class _Held(weakref.ref[Message]):
    """A weak reference to a message that removes its memo entry when the message goes."""

    __slots__ = ("key", "memo")
    memo: dict[tuple[int, int], Any]
    key: tuple[int, int]

    def __new__(
        cls, message: Message, memo: dict[tuple[int, int], Any], key: tuple[int, int]
    ) -> _Held:
        held = super().__new__(cls, message, _forget)
        held.memo, held.key = memo, key
        return held

    def __init__(
        self, message: Message, memo: dict[tuple[int, int], Any], key: tuple[int, int]
    ) -> None:
        super().__init__(message, _forget)  # type: ignore[call-arg]  # typeshed omits it


def _forget(held: _Held) -> None:
    held.memo.pop(held.key, None)


def _message_tokens(text_tokens: Callable[[str], int], message: Message) -> int:
    """One message's tokens, remembered: every call of a conversation counts the same
    (immutable) messages again, which made a count cost more the longer it grew."""
    key = (id(text_tokens), id(message))
    hit = _MEMO.get(key)
    if hit is not None and hit[0] is text_tokens and hit[1]() is message:
        return hit[2]
    tokens = MESSAGE_TOKENS + text_tokens(message.role) + text_tokens(message.text)
    for extra in (message.name, message.call_id):
        if extra:
            tokens += text_tokens(extra)
    for call in message.tool_calls:
        tokens += MESSAGE_TOKENS + text_tokens(call.name)
        tokens += text_tokens(canonical_json(call.arguments))
    with _memo_lock:
        if len(_MEMO) >= _MEMO_MAX:
            _MEMO.clear()  # many tokenizers at once: start over rather than grow
        _MEMO[key] = (text_tokens, _Held(message, _MEMO, key), tokens)
    return tokens


_PREFIXES: dict[tuple[int, int], tuple[Callable[[str], int], _Held, int, int]] = {}
_PREFIX_LOOKBACK = 64


def _messages_tokens(text_tokens: Callable[[str], int], messages: Iterable[Message]) -> int:
    """The tokens of ``messages``, counting on from the longest prefix counted before.

    A conversation's calls send the same message objects again, each call a few more: the
    sum up to a message (by identity and position) is remembered, so a call counts only
    what is new instead of the whole, ever longer, context.
    """
    items = messages if isinstance(messages, Sequence) else list(messages)
    start, total = 0, 0
    for k in range(len(items) - 1, max(-1, len(items) - 1 - _PREFIX_LOOKBACK), -1):
        hit = _PREFIXES.get((id(text_tokens), id(items[k])))
        if hit is not None and hit[0] is text_tokens and hit[1]() is items[k] and hit[2] == k:
            start, total = k + 1, hit[3]
            break
    for i in range(start, len(items)):
        message = items[i]
        if not isinstance(message, Message):
            raise InvalidInput(f"messages[{i}] must be a Message, got {type(message).__name__}")
        total += _message_tokens(text_tokens, message)
    if items:
        key = (id(text_tokens), id(items[-1]))
        with _memo_lock:
            if len(_PREFIXES) >= _MEMO_MAX:
                _PREFIXES.clear()
            _PREFIXES[key] = (
                text_tokens,
                _Held(items[-1], _PREFIXES, key),
                len(items) - 1,
                total,
            )
    return total


def count_tokens_with(
    text_tokens: Callable[[str], int],
    messages: Iterable[Message],
    tools: Iterable[Mapping[str, Any]] = (),
) -> int:
    """Tokens of a chat request, with ``text_tokens`` counting each piece of text.

    The framing follows OpenAI's published rule of thumb for chat requests: each message costs
    ``MESSAGE_TOKENS`` plus the tokens of its role, text, ``name`` and ``call_id``; each tool call
    it makes ``MESSAGE_TOKENS`` plus its name and JSON arguments; each tool schema
    ``MESSAGE_TOKENS`` plus its compact JSON; and every request ``REPLY_TOKENS`` for the reply
    primer. Providers serialise tools in undocumented ways, so even with an exact tokenizer the
    result is an estimate. Raises ``InvalidInput`` for messages that are not ``Message`` values
    and tool schemas that are not JSON objects.
    """
    if isinstance(messages, str | bytes | Message) or not isinstance(messages, Iterable):
        raise InvalidInput(f"messages must be a sequence of Message, got {type(messages).__name__}")
    if isinstance(tools, str | bytes | Mapping) or not isinstance(tools, Iterable):
        raise InvalidInput(f"tools must be a sequence of tool specs, got {type(tools).__name__}")
    total = REPLY_TOKENS + _messages_tokens(text_tokens, messages)
    for i, spec in enumerate(tools):
        if not isinstance(spec, Mapping):
            raise InvalidInput(f"tools[{i}] must be a tool spec (a dict), got {spec!r:.60}")
        try:
            text = canonical_json(dict(spec))
        except (TypeError, ValueError) as exc:
            raise InvalidInput(f"tools[{i}] is not plain JSON: {exc}") from None
        total += MESSAGE_TOKENS + text_tokens(text)
    return total


def estimate_tokens(messages: Iterable[Message], tools: Iterable[Mapping[str, Any]] = ()) -> int:
    """Tokens of a chat request without a tokenizer: ``count_tokens_with`` over
    ``estimate_text_tokens``. Deterministic: the same messages and tools give the same count."""
    return count_tokens_with(estimate_text_tokens, messages, tools)


class Model(ABC):
    """A language model, seen as a stream of reply pieces.

    Implementations set ``name`` (recorded with every call) and implement ``stream``.
    ``context_window`` is the most tokens one call may hold (input and output together), or
    None when unknown. ``backoff`` says how long to wait before the runtime tries a failed
    call again (``Backoff()`` unless the model sets its own).

    **What ``stream(request)`` returns.** An async iterator, usually an async generator, that
    yields, in this order:

    1. zero or more ``TextDelta``, ``ReasoningDelta`` and ``ToolCallDelta`` items, in the order
       the model produced them. Fragments of different tool calls (and reasoning parts) may
       interleave; consumers group them by ``index`` (``StreamCollector`` does). A call's first
       fragment carries its ``name``.
    2. at most one ``Usage``.
    3. exactly one ``Finish``, after which the iterator ends.

    The same request to a deterministic model (``ScriptedModel``) yields the same items.

    **Errors.** A failed call raises ``ModelError`` from the iterator, before or after some
    pieces were yielded; ``retryable`` says whether trying again may help, and ``retry_after``
    how long the provider asked to wait. The runtime treats any other exception as a
    non-retryable failure of the call. Once a text or tool-call piece was yielded it may be in
    the session log, so a real model raises any later failure with ``retryable=False``: a retry
    would show the reader the start of the reply twice. (A ``ScriptedModel`` raises what its
    script says, so tests can also script the other case.) Pieces yielded before an error belong
    to a failed attempt: a retry starts the reply afresh.

    **Cancellation.** The consumer may stop at any point (an interrupt cancels the task or
    closes the iterator). Implementations release what they hold in ``finally`` blocks and let
    ``CancelledError`` propagate; they should await regularly so a cancel lands promptly.

    **Sharing.** One instance may serve several sessions and calls at once: ``stream`` must not
    change the request, and any per-call state lives in the iterator, not on the instance.

    **Tokens.** ``count_tokens(messages, tools)`` says how many tokens a request with those
    messages and tool specs would take as input. The default is ``estimate_tokens``
    (deterministic, no tokenizer); a model with an exact tokenizer overrides it. Either way it is
    a count for budgeting, not a promise: the provider's reported ``Usage`` is the truth.

    **Closing.** ``aclose()`` releases what the model holds across calls (an HTTP connection
    pool); the runtime awaits it when it closes, on its own event loop. The model stays usable:
    a later call opens what it needs again. The default does nothing.
    """

    name: str
    context_window: int | None = None
    backoff: Backoff = Backoff()

    @abstractmethod
    def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        """Stream the reply to ``request`` (see the class docstring for the contract)."""

    def count_tokens(
        self, messages: Iterable[Message], tools: Iterable[Mapping[str, Any]] = ()
    ) -> int:
        """Input tokens of a request with ``messages`` and ``tools`` (``Tool.spec()`` dicts).

        Raises ``InvalidInput`` for messages that are not ``Message`` values.
        """
        return estimate_tokens(messages, tools)

    async def aclose(self) -> None:
        """Release what the model holds across calls (see the class docstring)."""
        return  # a model that holds nothing across calls has nothing to release

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
            reasoning=collector.reasoning(),
        )


class _PartialCall:
    __slots__ = ("arguments", "call_id", "name")

    def __init__(self) -> None:
        self.call_id: str | None = None
        self.name: str | None = None
        self.arguments: list[str] = []


class _PartialReasoning:
    __slots__ = ("fields", "text")

    def __init__(self) -> None:
        self.text: list[str] = []
        self.fields: dict[str, Any] = {}


class StreamCollector:
    """Reassembles stream items into text, reasoning, tool calls, usage and finish reason.

    Feed it every item in stream order with ``add``; fragments of interleaved tool calls are
    grouped by their ``index``. It enforces the stream contract of ``Model``: nothing may follow
    ``Finish`` and ``Usage`` comes at most once (``ModelError`` otherwise).
    """

    def __init__(self) -> None:
        self._text: list[str] = []
        self._calls: dict[int, _PartialCall] = {}
        self._reasoning: dict[int, _PartialReasoning] = {}
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
        elif isinstance(item, ReasoningDelta):
            part = self._reasoning.get(item.index)
            if part is None:
                part = self._reasoning[item.index] = _PartialReasoning()
            if item.text:
                part.text.append(item.text)
            for name in ("provider", "signature", "data", "id", "summary"):
                value = getattr(item, name)
                if value is not None:
                    part.fields[name] = value
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

    def reasoning(self) -> tuple[ReasoningPart, ...]:
        """The reasoning parts so far, in index order."""
        return tuple(
            ReasoningPart(text="".join(part.text), **part.fields)
            for _, part in sorted(self._reasoning.items())
        )

    @property
    def reasoning_chars(self) -> int:
        """Characters of reasoning text so far."""
        return sum(len(t) for part in self._reasoning.values() for t in part.text)

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


MAX_ARGUMENT_DEPTH = 32
"""Levels of nesting a tool call's arguments may have (deeper ones go back to the model)."""


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not a JSON number")


def _depth(value: Any) -> int:
    """How deeply ``value`` nests (1 for a flat object), without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            stack.extend(
                (v, level + 1) for v in (item.values() if isinstance(item, dict) else item)
            )
    return deepest


def _parse_arguments(text: str, name: str, index: int) -> dict[str, Any]:
    """A tool call's arguments as a JSON object; ``ModelError`` saying why not (malformed,
    NaN or Infinity, nested too deeply, not an object)."""
    if not text.strip():
        return {}
    try:
        value = json.loads(text, parse_constant=_not_json)
    except (ValueError, RecursionError) as exc:
        why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise ModelError(
            f"the model sent malformed JSON arguments for tool call #{index} ({name}): {why}"
        ) from None
    if not isinstance(value, dict):
        raise ModelError(
            f"the model sent arguments for tool call #{index} ({name}) that are not a JSON "
            f"object: {text[:80]!r}"
        )
    if _depth(value) > MAX_ARGUMENT_DEPTH:
        raise ModelError(
            f"the model sent arguments for tool call #{index} ({name}) nested deeper than "
            f"{MAX_ARGUMENT_DEPTH} levels"
        )
    return value
