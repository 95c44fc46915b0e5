"""OpenAIChatModel: any OpenAI-compatible ``/chat/completions`` endpoint, streamed over SSE."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Mapping
from typing import Any

try:
    import httpx
except ImportError as exc:  # pragma: no cover - exercised by a test that hides httpx
    raise ImportError(
        'OpenAIChatModel needs httpx: pip install "agentnb[openai]"', name=exc.name
    ) from exc

from agentnb.errors import InvalidInput
from agentnb.events import Message, canonical_json
from agentnb.runtime.models.base import (
    Finish,
    Model,
    ModelError,
    ModelRequest,
    StreamItem,
    TextDelta,
    ToolCallDelta,
    Usage,
)

__all__ = ["OpenAIChatModel"]

_RETRYABLE_STATUS = frozenset({408, 409, 429})


class _Secret:
    """Holds the API key so that no repr, vars() dump or traceback shows it."""

    __slots__ = ("_value",)

    def __init__(self, value: str | None) -> None:
        self._value = value

    def reveal(self) -> str | None:
        return self._value

    def __repr__(self) -> str:
        return "'***'" if self._value else "None"


class OpenAIChatModel(Model):
    """A chat model behind an OpenAI-compatible ``/chat/completions`` endpoint.

    ``api_key`` defaults to the ``OPENAI_API_KEY`` environment variable; without one no
    ``Authorization`` header is sent (fine for local servers). The key never appears in a repr,
    a log or an error message. ``options`` (temperature, max_tokens, ...) go into every request
    body; a request's own options override them, and an option set to None is left out.
    ``transport`` replaces the HTTP transport (tests pass ``httpx.MockTransport``).
    ``timeout`` bounds connecting and each wait for the next piece of the stream.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str = "https://api.openai.com/v1",
        api_key: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        options: Mapping[str, Any] | None = None,
        timeout: float = 60.0,
        name: str | None = None,
    ) -> None:
        if not isinstance(model, str) or not model:
            raise InvalidInput(f"model must be a non-empty model name, got {model!r}")
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise InvalidInput(f"base_url must be an http(s) URL, got {base_url!r}")
        self.model = model
        self.name = name or model
        self.base_url = base_url.rstrip("/")
        self.options = dict(options or {})
        self.timeout = timeout
        self._api_key = _Secret(
            api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        )
        self._transport = transport

    def __repr__(self) -> str:
        return f"OpenAIChatModel(model={self.model!r}, base_url={self.base_url!r})"

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        return self._stream(self._body(request))

    def _body(self, request: ModelRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [_message(m) for m in request.messages],
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            body["tools"] = [{"type": "function", "function": dict(t)} for t in request.tools]
        body.update(self.options)
        body.update(request.options)
        return {k: v for k, v in body.items() if v is not None}

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "text/event-stream"}
        key = self._api_key.reveal()
        if key:
            headers["Authorization"] = f"Bearer {key}"
        return headers

    async def _stream(self, body: dict[str, Any]) -> AsyncIterator[StreamItem]:
        url = f"{self.base_url}/chat/completions"
        timeout = httpx.Timeout(self.timeout, connect=min(self.timeout, 10.0))
        finish_reason: str | None = None
        usage: Usage | None = None
        done = False
        # One client per call: the runtime's loop may differ between calls, and an httpx
        # client is bound to the loop it was first used on.
        try:
            async with (
                httpx.AsyncClient(transport=self._transport, timeout=timeout) as client,
                client.stream("POST", url, json=body, headers=self._headers()) as response,
            ):
                if response.status_code >= 400:
                    await response.aread()
                    raise self._status_error(response)
                async for line in response.aiter_lines():
                    data = _sse_data(line)
                    if data is None:
                        continue
                    if data == "[DONE]":
                        done = True
                        break
                    chunk = self._decode(data)
                    if chunk.get("usage"):
                        usage = Usage(
                            input_tokens=int(chunk["usage"].get("prompt_tokens") or 0),
                            output_tokens=int(chunk["usage"].get("completion_tokens") or 0),
                        )
                    for choice in chunk.get("choices") or ():
                        delta = choice.get("delta") or {}
                        if delta.get("content"):
                            yield TextDelta(delta["content"])
                        for position, call in enumerate(delta.get("tool_calls") or ()):
                            function = call.get("function") or {}
                            yield ToolCallDelta(
                                index=int(call.get("index", position)),
                                call_id=call.get("id"),
                                name=function.get("name"),
                                arguments_delta=function.get("arguments") or "",
                            )
                        if choice.get("finish_reason"):
                            finish_reason = choice["finish_reason"]
        except httpx.TransportError as exc:
            raise ModelError(
                self._redact(f"connection to {self.base_url} failed: {type(exc).__name__}: {exc}"),
                retryable=True,
            ) from None
        if not done and finish_reason is None:
            raise ModelError(
                f"the stream from {self.base_url} ended before the reply was complete",
                retryable=True,
            )
        if usage is not None:
            yield usage
        yield Finish(finish_reason or "stop")

    def _decode(self, data: str) -> dict[str, Any]:
        try:
            chunk = json.loads(data)
        except json.JSONDecodeError:
            raise ModelError(
                self._redact(
                    f"{self.base_url} sent a stream chunk that is not JSON: {data[:200]!r}"
                )
            ) from None
        if not isinstance(chunk, dict):
            raise ModelError(f"{self.base_url} sent a stream chunk that is not a JSON object")
        if chunk.get("error"):
            raise ModelError(self._redact(f"{self.base_url} reported: {_error_text(chunk)}"))
        return chunk

    def _status_error(self, response: httpx.Response) -> ModelError:
        status = response.status_code
        retryable = status in _RETRYABLE_STATUS or status >= 500
        try:
            detail = _error_text(response.json())
        except ValueError:
            detail = response.text[:300]
        hint = {401: "; check the API key (OPENAI_API_KEY)", 404: "; check the model name"}.get(
            status, ""
        )
        return ModelError(
            self._redact(f"{self.base_url} answered HTTP {status}: {detail}{hint}"),
            retryable=retryable,
        )

    def _redact(self, text: str) -> str:
        key = self._api_key.reveal()
        return text.replace(key, "***") if key else text


def _message(message: Message) -> dict[str, Any]:
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.call_id, "content": message.text}
    if message.role == "assistant" and message.tool_calls:
        return {
            "role": "assistant",
            "content": message.text or None,
            "tool_calls": [
                {
                    "id": call.call_id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": canonical_json(call.arguments)},
                }
                for call in message.tool_calls
            ],
        }
    return {"role": message.role, "content": message.text}


def _sse_data(line: str) -> str | None:
    """The data of one server-sent-events line, or None for blank, comment and other fields."""
    if not line.startswith("data:"):
        return None
    return line[5:].strip()


def _error_text(payload: Any) -> str:
    if isinstance(payload, dict):
        error = payload.get("error", payload)
        if isinstance(error, dict):
            return str(error.get("message") or error)[:300]
        return str(error)[:300]
    return str(payload)[:300]
