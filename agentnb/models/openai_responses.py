"""OpenAIResponsesModel: OpenAI's Responses API, on the official ``openai`` SDK.

Why it is long: one adapter: input items (reasoning items sent back with their encrypted
content), the streamed events, usage, and every SDK failure translated into ``ModelError``.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Any

from agentnb.errors import install_hint

try:
    import openai
except ImportError as exc:  # pragma: no cover - exercised by a test that hides the SDK
    raise ImportError(
        "OpenAIResponsesModel needs the openai SDK: " + install_hint("openai"), name=exc.name
    ) from exc

from agentnb.errors import InvalidInput
from agentnb.events import Message, canonical_json
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
from agentnb.models.parts import responses_output
from agentnb.models.secrets import Secret, mask_userinfo, scrub

__all__ = ["OpenAIResponsesModel"]

PROVIDER = "openai"
"""``ReasoningPart.provider`` of the reasoning items this adapter records and sends back."""
_INCOMPLETE = {"max_output_tokens": "length", "content_filter": "content_filter"}
_SUMMARY_BREAK = "\n\n"
"""Between the summaries of one reasoning item, in its text."""


class OpenAIResponsesModel(Model):
    """A model behind OpenAI's Responses API (``POST /v1/responses``), streamed by the SDK.

    ``api_key`` defaults to ``OPENAI_API_KEY``; without either (and without a ``client``) the
    constructor raises ``InvalidInput``. The key never appears in a repr or an error.
    ``base_url`` points at another Responses endpoint; ``client`` is an ``openai.AsyncOpenAI``
    used as it is. Clients the adapter makes (one per event loop) have the SDK's retries off:
    every retry is the runtime's, recorded in the log.

    **Request.** The first system message (the agent's instructions) is ``instructions``;
    messages become input items: assistant tool calls ``function_call`` items, tool results
    ``function_call_output`` items, and the reasoning items of earlier replies go back as
    they came (``id``, ``summary`` and ``encrypted_content``), also after a crash, read from
    the log. ``store`` (default False: OpenAI keeps nothing) asks for
    ``include=["reasoning.encrypted_content"]``, so the reasoning can come back without a
    server-side copy. ``reasoning`` (e.g. ``{"effort": "medium", "summary": "auto"}``) and
    ``max_output_tokens`` are sent when given; ``options`` go into every request, and a
    request's own options override them.

    **Stream.** Text, reasoning summaries and raw reasoning text (``ReasoningDelta``) and
    function-call arguments stream as they arrive; usage has ``cached_tokens`` and
    ``reasoning_tokens``. A response ended ``incomplete`` for ``max_output_tokens`` finishes
    with ``length``; one with calls with ``tool_calls``.

    **Failures.** As ``AnthropicModel``: 408/409/429/5xx and lost connections are retryable
    with the server's ``retry-after`` (unless part of the reply streamed); a
    ``context_length_exceeded`` is ``ContextTooLong``.
    """

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        reasoning: Mapping[str, Any] | None = None,
        store: bool = False,
        max_output_tokens: int | None = None,
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
        if reasoning is not None and not isinstance(reasoning, Mapping):
            raise InvalidInput(
                'reasoning must be a dict such as {"effort": "medium", "summary": "auto"}, '
                f"got {reasoning!r}"
            )
        if not isinstance(store, bool):
            raise InvalidInput(f"store must be True or False, got {store!r}")
        if max_output_tokens is not None and (
            isinstance(max_output_tokens, bool)
            or not isinstance(max_output_tokens, int)
            or max_output_tokens < 1
        ):
            raise InvalidInput(
                f"max_output_tokens must be a positive int or None, got {max_output_tokens!r}"
            )
        if client is not None and not isinstance(client, openai.AsyncOpenAI):
            raise InvalidInput(f"client must be an openai.AsyncOpenAI, got {type(client).__name__}")
        key = key_of(api_key, "OPENAI_API_KEY", required=None if client else "OpenAIResponsesModel")
        self.model = model
        self.name = name or model
        self.base_url = mask_userinfo(base_url.rstrip("/")) if base_url else None
        self._url = base_url.rstrip("/") if base_url else None
        self.reasoning = dict(reasoning) if reasoning is not None else None
        self.store = store
        self.max_output_tokens = max_output_tokens
        self.timeout = float(timeout)
        self.options = dict(options or {})
        self.context_window = check_context_window(context_window)
        self.backoff = backoff or Backoff()
        self._api_key = Secret(key)
        self._where = self.base_url or "the OpenAI API"
        self._failures = Failures(self._where, self._redact, "OPENAI_API_KEY")
        self._clients: LoopClients[Any] = LoopClients(self._make_client, given=client)

    def __repr__(self) -> str:
        return f"OpenAIResponsesModel(model={self.model!r}, base_url={self.base_url!r})"

    def _make_client(self) -> Any:
        return openai.AsyncOpenAI(
            api_key=self._api_key.reveal(),
            base_url=self._url,
            max_retries=0,
            timeout=openai.Timeout(self.timeout, connect=min(self.timeout, 10.0)),
        )

    async def aclose(self) -> None:
        """Close the running loop's client (one passed as ``client`` is the caller's)."""
        await self._clients.aclose()

    # -- the request -------------------------------------------------------------------------

    def body(self, request: ModelRequest) -> dict[str, Any]:
        """The Responses API request for ``request`` (what the SDK sends, as keyword args)."""
        instructions: str | None = None
        items: list[dict[str, Any]] = []
        for n, message in enumerate(request.messages):
            if message.role == "system" and n == 0:
                instructions = message.text or None
                continue
            items.extend(_items(message))
        body: dict[str, Any] = {
            "model": self.model,
            "input": items,
            "store": self.store,
        }
        if instructions:
            body["instructions"] = instructions
        if not self.store:
            body["include"] = ["reasoning.encrypted_content"]
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "name": t["name"],
                    "description": t.get("description") or "",
                    "parameters": t.get("parameters") or {"type": "object", "properties": {}},
                    "strict": False,
                }
                for t in request.tools
            ]
        if self.reasoning is not None:
            body["reasoning"] = dict(self.reasoning)
        if self.max_output_tokens is not None:
            body["max_output_tokens"] = self.max_output_tokens
        body.update(self.options)
        body.update(request.options)
        return {k: v for k, v in body.items() if v is not None}

    # -- the call ----------------------------------------------------------------------------

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        deadline = Deadline.of(request.deadline, where=self._where)
        return guarded(self._events(request), deadline, self._translate, self._failures)

    async def _events(self, request: ModelRequest) -> AsyncGenerator[StreamItem, None]:
        stream = await self._clients.get().responses.create(**self.body(request), stream=True)
        parts: dict[int, int] = {}  # output index -> reasoning part index
        calls: dict[int, int] = {}  # output index -> tool call index
        argued: set[int] = set()  # calls whose arguments streamed as deltas
        final: Any = None
        try:
            async for event in stream:
                kind = event.type
                if kind == "response.output_text.delta":
                    yield TextDelta(event.delta)
                elif kind in (
                    "response.reasoning_summary_text.delta",
                    "response.reasoning_text.delta",
                ):
                    index = parts.setdefault(event.output_index, len(parts))
                    yield ReasoningDelta(event.delta, index=index)
                elif kind == "response.function_call_arguments.delta":
                    argued.add(event.output_index)
                    yield ToolCallDelta(
                        index=calls[event.output_index], arguments_delta=event.delta
                    )
                elif kind == "response.reasoning_summary_part.added":
                    index = parts.setdefault(event.output_index, len(parts))
                    if event.summary_index > 0:
                        yield ReasoningDelta(_SUMMARY_BREAK, index=index)
                elif kind == "response.output_item.added":
                    item = event.item
                    if item.type == "function_call":
                        call = calls[event.output_index] = len(calls)
                        yield ToolCallDelta(index=call, call_id=item.call_id, name=item.name)
                    elif item.type == "reasoning":
                        parts.setdefault(event.output_index, len(parts))
                elif kind == "response.output_item.done":
                    item = event.item
                    if item.type == "reasoning":
                        index = parts.setdefault(event.output_index, len(parts))
                        yield ReasoningDelta(
                            index=index,
                            provider=PROVIDER,
                            id=item.id,
                            data=item.encrypted_content or None,
                            summary=tuple(s.text for s in item.summary or ()),
                        )
                    elif item.type == "function_call" and event.output_index not in argued:
                        call = calls.setdefault(event.output_index, len(calls))
                        yield ToolCallDelta(
                            index=call,
                            call_id=item.call_id,
                            name=item.name,
                            arguments_delta=item.arguments or "",
                        )
                elif kind in ("response.completed", "response.incomplete"):
                    final = event.response
                elif kind in ("response.failed", "error"):
                    raise self._failed_event(event)
        finally:
            await stream.close()
        if final is None:
            raise ModelError(
                f"the stream from {self._where} ended before the reply was complete",
                retryable=True,
            )
        for item in _ending(final, bool(calls)):
            yield item

    # -- errors ------------------------------------------------------------------------------

    def _redact(self, text: str) -> str:
        key = self._api_key.reveal()
        return scrub(text, [key] if key else [], key)

    def _translate(self, exc: Exception, streamed: bool) -> ModelError:
        # Anything else (a stream cut short) may be tried again.
        return sdk_failure(exc, openai, self._failures, streamed, retry_unexpected=True)

    def _failed_event(self, event: Any) -> ModelError:
        """The error of a ``response.failed`` or ``error`` event."""
        if event.type == "error":
            code, message = getattr(event, "code", None), event.message
        else:
            error = getattr(event.response, "error", None)
            code, message = getattr(error, "code", None), getattr(error, "message", None)
        return self._failures.event(message or "the response failed", code=code, streamed=False)


def _ending(final: Any, called: bool) -> list[StreamItem]:
    """The usage and finish of a completed (or incomplete) response."""
    out: list[StreamItem] = []
    usage = final.usage
    if usage is not None:
        out.append(
            Usage(
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                cached_tokens=getattr(usage.input_tokens_details, "cached_tokens", None),
                reasoning_tokens=getattr(usage.output_tokens_details, "reasoning_tokens", None),
            )
        )
    if final.status == "incomplete":
        why = getattr(final.incomplete_details, "reason", None) or "incomplete"
        out.append(Finish(_INCOMPLETE.get(why, why)))
    else:
        out.append(Finish("tool_calls" if called else "stop"))
    return out


def _items(message: Message) -> list[dict[str, Any]]:
    """The input items of one message, in the order the reply produced them."""
    if message.role == "tool":
        output = responses_output(message.blocks) if message.blocks else message.text
        return [{"type": "function_call_output", "call_id": message.call_id, "output": output}]
    if message.role != "assistant":
        return [{"role": message.role, "content": message.text}]
    items: list[dict[str, Any]] = []
    for part in message.reasoning:
        if part.provider != PROVIDER or part.id is None:
            continue  # another provider's reasoning means nothing here
        item: dict[str, Any] = {
            "type": "reasoning",
            "id": part.id,
            "summary": [{"type": "summary_text", "text": s} for s in part.summary],
        }
        if part.data is not None:
            item["encrypted_content"] = part.data
        items.append(item)
    if message.text:
        items.append({"role": "assistant", "content": message.text})
    items.extend(
        {
            "type": "function_call",
            "call_id": call.call_id,
            "name": call.name,
            "arguments": canonical_json(call.arguments),
        }
        for call in message.tool_calls
    )
    return items
