"""AnthropicModel: Claude through the Messages API, on the official ``anthropic`` SDK.

Why it is long: one adapter: the request (messages as content blocks, thinking blocks sent
back verbatim, cache breakpoints), the streamed events, usage, and every SDK failure
translated into ``ModelError``.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Any, Literal

from agentnb.errors import install_hint

try:
    import anthropic
except ImportError as exc:  # pragma: no cover - exercised by a test that hides the SDK
    raise ImportError(
        "AnthropicModel needs the anthropic SDK: " + install_hint("anthropic"), name=exc.name
    ) from exc

from agentnb.errors import InvalidInput
from agentnb.events import Message
from agentnb.models._sdk import (
    Deadline,
    Failures,
    LoopClients,
    check_arguments,
    guarded,
    key_of,
    sdk_failure,
)
from agentnb.models.base import (
    Backoff,
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
)
from agentnb.models.parts import anthropic_content
from agentnb.models.secrets import Secret, mask_userinfo, scrub

__all__ = ["AnthropicModel"]

PROVIDER = "anthropic"
"""``ReasoningPart.provider`` of the thinking blocks this adapter records and sends back."""
_EPHEMERAL = {"type": "ephemeral"}
_STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "content_filter",
    "pause_turn": "pause_turn",
}
"""Anthropic's stop reasons in agentnb's finish vocabulary (others are recorded as sent)."""


def _check_thinking(thinking: object) -> dict[str, Any] | None:
    if thinking is None:
        return None
    if thinking == "adaptive":
        return {"type": "adaptive"}
    if isinstance(thinking, Mapping) and set(thinking) == {"budget_tokens"}:
        budget = thinking["budget_tokens"]
        if not isinstance(budget, bool) and isinstance(budget, int) and budget >= 1024:
            return {"type": "enabled", "budget_tokens": budget}
    raise InvalidInput(
        'thinking must be None, "adaptive" or {"budget_tokens": N} with N >= 1024 (and below '
        f"max_tokens), got {thinking!r}"
    )


class AnthropicModel(Model):
    """Claude behind Anthropic's Messages API, streamed through the official SDK.

    ``api_key`` defaults to ``ANTHROPIC_API_KEY``; without either (and without a ``client``)
    the constructor raises ``InvalidInput``. The key never appears in a repr or an error
    (errors are redacted, raw or escaped, before they are cut to 600 characters).
    ``base_url`` points at another endpoint (a proxy; the tests' fake server). ``client`` is
    an ``anthropic.AsyncAnthropic`` to use as it is (its own retries and key; the adapter
    neither closes it nor changes it); otherwise the adapter makes one per event loop, with
    the SDK's retries off (every retry is the runtime's, recorded in the log) and its own
    tracing off (agentnb's OpenTelemetry export records the calls, without their content).

    **Request.** System messages (the agent's instructions) go into ``system``; tool
    results go back as ``tool_result`` blocks, those of one step in one user message
    (parallel tool use). ``max_tokens`` bounds each reply. ``thinking`` is None (no extended
    thinking), ``"adaptive"`` or ``{"budget_tokens": N}``; the thinking and redacted-thinking
    blocks of a reply are recorded on its message (``Message.reasoning``, with their
    signatures) and sent back unchanged, byte for byte, on the next call of the tool loop
    (also after a crash: they are read back from the log). ``cache`` (default True) sets
    prompt-cache breakpoints (``cache_control``) on the last tool, the last system block and
    the newest message, so a tool loop reads the conversation so far from the cache.
    ``options`` (temperature, top_p, stop_sequences, ...) go into every request; a
    request's own options override them.

    **Stream.** Text, thinking (``ReasoningDelta``) and tool-call arguments stream as they
    arrive. Usage: ``input_tokens`` counts every input token (Anthropic's uncached, cache-read
    and cache-write counts added up), ``cached_tokens`` the cache reads, ``cache_write_tokens``
    the cache writes, ``reasoning_tokens`` the thinking tokens when reported. Stop reasons:
    ``end_turn`` and ``stop_sequence`` → ``stop``, ``tool_use`` → ``tool_calls``,
    ``max_tokens`` → ``length``, ``refusal`` → ``content_filter``, ``pause_turn`` as it is (the
    runtime then takes another step, which sends the paused reply back to be continued).

    **Failures.** Every failure leaves as a ``ModelError``. Rate limits (429), overload (529),
    other 5xx, 408/409 and lost connections are ``retryable`` (the server's ``x-should-retry``
    decides when present) with the server's ``retry-after`` as ``retry_after``, unless part
    of the reply was streamed. A prompt past the context window is ``ContextTooLong``
    (compact the context: ``Agent(compaction=...)``). ``timeout`` bounds connecting and each
    wait for the stream; a request's ``deadline`` ends the call with a non-retryable error.
    """

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        max_tokens: int = 8192,
        thinking: Mapping[str, int] | Literal["adaptive"] | None = None,
        cache: bool = True,
        timeout: float = 60.0,
        client: Any = None,
        options: Mapping[str, Any] | None = None,
        name: str | None = None,
        context_window: int | None = None,
        backoff: Backoff | None = None,
    ) -> None:
        check_arguments(
            model=model,
            base_url=base_url,
            timeout=timeout,
            options=options,
            name=name,
            backoff=backoff,
        )
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise InvalidInput(f"max_tokens must be a positive int, got {max_tokens!r}")
        self.thinking = _check_thinking(thinking)
        if self.thinking and self.thinking.get("budget_tokens", 0) >= max_tokens:
            raise InvalidInput(
                f"thinking budget_tokens ({self.thinking['budget_tokens']}) must be below "
                f"max_tokens ({max_tokens}): the thinking counts against max_tokens"
            )
        if not isinstance(cache, bool):
            raise InvalidInput(f"cache must be True or False, got {cache!r}")
        if client is not None and not isinstance(client, anthropic.AsyncAnthropic):
            raise InvalidInput(
                f"client must be an anthropic.AsyncAnthropic, got {type(client).__name__}"
            )
        key = key_of(api_key, "ANTHROPIC_API_KEY", required=None if client else "AnthropicModel")
        self.model = model
        self.name = name or model
        self.base_url = mask_userinfo(base_url.rstrip("/")) if base_url else None
        """The endpoint as shown in reprs and errors (None: the SDK's default)."""
        self._url = base_url.rstrip("/") if base_url else None
        self.max_tokens = max_tokens
        self.cache = cache
        self.timeout = float(timeout)
        self.options = dict(options or {})
        self.context_window = check_context_window(context_window)
        self.backoff = backoff or Backoff()
        self._api_key = Secret(key)
        self._where = self.base_url or "the Anthropic API"
        self._failures = Failures(self._where, self._redact, "ANTHROPIC_API_KEY")
        self._clients: LoopClients[Any] = LoopClients(self._make_client, given=client)

    def __repr__(self) -> str:
        return f"AnthropicModel(model={self.model!r}, base_url={self.base_url!r})"

    # -- connections -------------------------------------------------------------------------

    def _make_client(self) -> Any:
        return anthropic.AsyncAnthropic(
            api_key=self._api_key.reveal(),
            base_url=self._url,
            max_retries=0,
            timeout=anthropic.Timeout(self.timeout, connect=min(self.timeout, 10.0)),
            open_telemetry=False,
        )

    async def aclose(self) -> None:
        """Close the running loop's client (one passed as ``client`` is the caller's)."""
        await self._clients.aclose()

    # -- the request -------------------------------------------------------------------------

    def body(self, request: ModelRequest) -> dict[str, Any]:
        """The Messages API request for ``request`` (what the SDK sends, as keyword args)."""
        system: list[dict[str, Any]] = []
        messages: list[dict[str, Any]] = []
        for message in request.messages:
            if message.role == "system":
                if message.text:
                    system.append({"type": "text", "text": message.text})
                continue
            role = "assistant" if message.role == "assistant" else "user"
            blocks = _blocks(message)
            if not blocks:
                continue
            if messages and messages[-1]["role"] == role:
                messages[-1]["content"].extend(blocks)  # tool results of one step together
            else:
                messages.append({"role": role, "content": blocks})
        tools = [
            {
                "name": t["name"],
                "description": t.get("description") or "",
                "input_schema": t.get("parameters") or {"type": "object", "properties": {}},
            }
            for t in request.tools
        ]
        if self.cache:
            # Breakpoints: tools and instructions (the stable prefix), and the newest
            # message, so the next call of a tool loop reads all of this from the cache.
            if tools:
                tools[-1]["cache_control"] = _EPHEMERAL
            if system:
                system[-1]["cache_control"] = _EPHEMERAL
            if messages:
                for block in reversed(messages[-1]["content"]):
                    if block["type"] not in ("thinking", "redacted_thinking"):
                        block["cache_control"] = _EPHEMERAL
                        break
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": messages,
        }
        if system:
            body["system"] = system
        if tools:
            body["tools"] = tools
        if self.thinking is not None:
            body["thinking"] = dict(self.thinking)
        body.update(self.options)
        body.update(request.options)
        return {k: v for k, v in body.items() if v is not None}

    # -- the call ----------------------------------------------------------------------------

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        deadline = Deadline.of(request.deadline, where=self._where)
        return guarded(self._events(request), deadline, self._translate, self._failures)

    async def _events(self, request: ModelRequest) -> AsyncGenerator[StreamItem, None]:
        stream = await self._clients.get().messages.create(**self.body(request), stream=True)
        reasoning: dict[int, int] = {}  # content block index -> reasoning part index
        calls: dict[int, int] = {}  # content block index -> tool call index
        usage: dict[str, int | None] = {}
        stop_reason: str | None = None
        stopped = False
        try:
            async for event in stream:
                kind = event.type
                if kind == "content_block_delta":
                    delta = event.delta
                    dkind = delta.type
                    if dkind == "text_delta":
                        yield TextDelta(delta.text)
                    elif dkind == "thinking_delta":
                        yield ReasoningDelta(delta.thinking, index=reasoning[event.index])
                    elif dkind == "signature_delta":
                        yield ReasoningDelta(
                            index=reasoning[event.index],
                            provider=PROVIDER,
                            signature=delta.signature,
                        )
                    elif dkind == "input_json_delta":
                        yield ToolCallDelta(
                            index=calls[event.index], arguments_delta=delta.partial_json
                        )
                elif kind == "content_block_start":
                    started = _block_start(event, reasoning, calls)
                    if started is not None:
                        yield started
                elif kind == "message_start":
                    _take_usage(usage, event.message.usage)
                elif kind == "message_delta":
                    stop_reason = event.delta.stop_reason or stop_reason
                    if event.usage is not None:
                        _take_usage(usage, event.usage)
                elif kind == "message_stop":
                    stopped = True
        finally:
            await stream.close()
        if not stopped:
            raise ModelError(
                f"the stream from {self._where} ended before the reply was complete",
                retryable=True,
            )
        if usage:
            read, write = usage.get("cache_read"), usage.get("cache_write")
            yield Usage(
                input_tokens=(usage.get("input") or 0) + (read or 0) + (write or 0),
                output_tokens=usage.get("output") or 0,
                cached_tokens=read,
                cache_write_tokens=write,
                reasoning_tokens=usage.get("thinking"),
            )
        reason = stop_reason or "end_turn"
        yield Finish(_STOP_REASONS.get(reason, reason))

    # -- errors ------------------------------------------------------------------------------

    def _redact(self, text: str) -> str:
        key = self._api_key.reveal()
        return scrub(text, [key] if key else [], key)

    def _translate(self, exc: Exception, streamed: bool) -> ModelError:
        # Anything else (a stream cut short) may be tried again.
        return sdk_failure(exc, anthropic, self._failures, streamed, retry_unexpected=True)


def _block_start(event: Any, reasoning: dict[int, int], calls: dict[int, int]) -> StreamItem | None:
    """The first piece of a content block, numbering its reasoning part or tool call."""
    block = event.content_block
    btype = block.type
    if btype == "text":
        return TextDelta(block.text) if block.text else None
    if btype == "thinking":
        part = reasoning[event.index] = len(reasoning)
        return ReasoningDelta(
            block.thinking or "",
            index=part,
            provider=PROVIDER,
            signature=block.signature or None,
        )
    if btype == "redacted_thinking":
        part = reasoning[event.index] = len(reasoning)
        return ReasoningDelta(index=part, provider=PROVIDER, data=block.data)
    if btype == "tool_use":
        call = calls[event.index] = len(calls)
        return ToolCallDelta(index=call, call_id=block.id, name=block.name)
    return None


def _take_usage(usage: dict[str, int | None], data: Any) -> None:
    """Fold the usage of ``message_start`` or ``message_delta`` (counts so far) into ``usage``."""
    for field, name in (
        ("input_tokens", "input"),
        ("output_tokens", "output"),
        ("cache_read_input_tokens", "cache_read"),
        ("cache_creation_input_tokens", "cache_write"),
    ):
        value = getattr(data, field, None)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            usage[name] = value
    details = getattr(data, "output_tokens_details", None)
    thinking = getattr(details, "thinking_tokens", None) if details is not None else None
    if isinstance(thinking, int) and thinking >= 0:
        usage["thinking"] = thinking


def _blocks(message: Message) -> list[dict[str, Any]]:
    """The content blocks of one message: thinking first (as recorded), then text and calls."""
    if message.role == "tool":
        return [
            {
                "type": "tool_result",
                "tool_use_id": message.call_id,
                "content": anthropic_content(message.blocks)
                if message.blocks
                else message.text or "(no output)",
            }
        ]
    blocks: list[dict[str, Any]] = []
    if message.role == "assistant":
        for part in message.reasoning:
            if part.provider != PROVIDER:
                continue  # another provider's reasoning means nothing to Claude
            if part.data is not None and part.signature is None:
                blocks.append({"type": "redacted_thinking", "data": part.data})
            elif part.signature is not None:
                blocks.append(
                    {"type": "thinking", "thinking": part.text, "signature": part.signature}
                )
    if message.text:
        blocks.append({"type": "text", "text": message.text})
    if message.role == "assistant":
        blocks.extend(
            {"type": "tool_use", "id": call.call_id, "name": call.name, "input": call.arguments}
            for call in message.tool_calls
        )
    return blocks
