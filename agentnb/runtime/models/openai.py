"""OpenAIChatModel: any OpenAI-compatible ``/chat/completions`` endpoint, streamed over SSE."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Mapping
from typing import Any
from urllib.parse import quote, quote_plus, unquote, urlsplit, urlunsplit

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
MAX_ERROR_TEXT = 600
"""Longest error message the adapter raises (cut after redaction, never before)."""
_DETAIL = 300
"""Longest piece of a server's answer quoted in an error."""
_REDACTED = "***"
_PREFIX = 8
"""An echoed run of at least this many leading characters of the key is redacted too."""


class _Secret:
    """Holds a credential so that no repr, vars() dump or traceback shows it."""

    __slots__ = ("_value",)

    def __init__(self, value: str | None) -> None:
        self._value = value

    def reveal(self) -> str | None:
        return self._value

    def __repr__(self) -> str:
        return "'***'" if self._value else "None"


def _clean_key(value: object, source: str) -> str | None:
    """The key without surrounding whitespace (a key read from a file ends in a newline).

    A key with a character that cannot go in an HTTP header is refused here, before any
    request: otherwise the HTTP library's error would quote the whole header, key included.
    """
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidInput(f"{source} must be a str, got {type(value).__name__}")
    key = value.strip()
    for position, char in enumerate(key):
        if not " " < char <= "~":
            raise InvalidInput(
                f"{source} has a character that cannot go in an HTTP header at position "
                f"{position} (a space, control or non-ASCII character); copy the key again"
            )
    return key or None


def _mask_userinfo(url: str) -> str:
    """``url`` with any ``user:password@`` part shown as ``***@``."""
    return re.sub(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/?#]*@", rf"\1{_REDACTED}@", url)


def _forms(secret: str) -> set[str]:
    """The ways a secret can appear in text: raw, repr-, JSON-, bytes- and percent-escaped."""
    return {
        secret,
        repr(secret)[1:-1],
        json.dumps(secret)[1:-1],
        json.dumps(secret, ensure_ascii=False)[1:-1],
        repr(secret.encode())[2:-1],
        quote(secret, safe=""),
        quote(secret),
        quote_plus(secret),
    }


def _scrub(text: str, secrets: Iterable[str], prefixed: str | None) -> str:
    """``text`` with every form of every secret replaced, longest first; and any run of at
    least ``_PREFIX`` characters along ``prefixed`` (a server may echo a cut-off key)."""
    for form in sorted({f for s in secrets for f in _forms(s)}, key=len, reverse=True):
        if form:
            text = text.replace(form, _REDACTED)
    if prefixed and len(prefixed) >= _PREFIX:
        start = text.find(prefixed[:_PREFIX])
        while start >= 0:
            end = start + _PREFIX
            while (
                end < len(text)
                and end - start < len(prefixed)
                and (text[end] == prefixed[end - start])
            ):
                end += 1
            text = text[:start] + _REDACTED + text[end:]
            start = text.find(prefixed[:_PREFIX], start + len(_REDACTED))
    return text


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


class OpenAIChatModel(Model):
    """A chat model behind an OpenAI-compatible ``/chat/completions`` endpoint.

    ``api_key`` defaults to the ``OPENAI_API_KEY`` environment variable; without one no
    ``Authorization`` header is sent (fine for local servers). Whitespace around the key (a
    key read from a file ends in a newline) is stripped; a key with any other character that
    cannot go in a header raises ``InvalidInput``. ``base_url`` may carry ``user:password@``
    (sent as basic authentication). Neither the key nor those credentials appear in a repr,
    in ``base_url`` (which shows ``***@``) or in an error: every exception that leaves the
    adapter is a ``ModelError`` whose text has them redacted, raw or escaped (repr, JSON,
    percent, base64 of the basic credentials), before it is cut to ``MAX_ERROR_TEXT``.
    ``options`` (temperature, max_tokens, ...) go into every request
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
            shown = _mask_userinfo(base_url) if isinstance(base_url, str) else base_url
            raise InvalidInput(f"base_url must be an http(s) URL, got {shown!r}")
        if api_key is None:
            key = _clean_key(os.environ.get("OPENAI_API_KEY"), "OPENAI_API_KEY")
        else:
            key = _clean_key(api_key, "api_key")
        parts = urlsplit(base_url.rstrip("/"))
        userinfo, _, host = parts.netloc.rpartition("@")
        self.model = model
        self.name = name or model
        self._url = urlunsplit(parts._replace(netloc=host))
        self.base_url = _mask_userinfo(base_url.rstrip("/"))
        """The endpoint as shown in reprs and errors (credentials as ``***@``)."""
        self.options = dict(options or {})
        self.timeout = timeout
        self._api_key = _Secret(key)
        self._userinfo = _Secret(userinfo or None)
        self._transport = transport

    def __repr__(self) -> str:
        return f"OpenAIChatModel(model={self.model!r}, base_url={self.base_url!r})"

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        return self._stream(request)

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

    def _auth(self) -> httpx.BasicAuth | None:
        # Sent as a header, not left in the URL: httpx logs request URLs.
        userinfo = self._userinfo.reveal()
        if userinfo is None:
            return None
        user, _, password = userinfo.partition(":")
        return httpx.BasicAuth(unquote(user), unquote(password))

    def _secrets(self) -> list[str]:
        out = []
        key = self._api_key.reveal()
        if key:
            out.append(key)
        userinfo = self._userinfo.reveal()
        if userinfo:
            user, _, password = userinfo.partition(":")
            plain = f"{unquote(user)}:{unquote(password)}"
            out += [userinfo, plain, base64.b64encode(plain.encode()).decode()]
            out += [s for s in (user, password, unquote(user), unquote(password)) if len(s) >= 4]
        return out

    def _redact(self, text: str) -> str:
        return _scrub(text, self._secrets(), self._api_key.reveal())

    def _error(self, text: str, *, retryable: bool = False) -> ModelError:
        """A ``ModelError`` with ``text`` redacted, then cut to ``MAX_ERROR_TEXT``."""
        return ModelError(_cut(self._redact(text), MAX_ERROR_TEXT), retryable=retryable)

    async def _stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        failure: ModelError | None = None
        try:
            async with contextlib.aclosing(self._exchange(self._body(request))) as items:
                async for item in items:
                    yield item
        except ModelError as exc:
            failure = self._error(str(exc), retryable=exc.retryable)
        except httpx.TransportError as exc:
            failure = self._error(
                f"connection to {self.base_url} failed: {type(exc).__name__}: {exc}",
                retryable=True,
            )
        except Exception as exc:  # noqa: BLE001 - whatever else fails leaves as a ModelError
            failure = self._error(
                f"the call to {self.base_url} failed: {type(exc).__name__}: {exc}"
            )
        if failure is not None:
            # Raised outside the handler: the original error (which may quote a credential)
            # is neither the cause nor the context of the one the caller sees.
            raise failure

    async def _exchange(self, body: dict[str, Any]) -> AsyncGenerator[StreamItem, None]:
        url = f"{self._url}/chat/completions"
        timeout = httpx.Timeout(self.timeout, connect=min(self.timeout, 10.0))
        finish_reason: str | None = None
        usage: Usage | None = None
        done = False
        # One client per call: the runtime's loop may differ between calls, and an httpx
        # client is bound to the loop it was first used on.
        async with (
            httpx.AsyncClient(transport=self._transport, timeout=timeout) as client,
            client.stream(
                "POST", url, json=body, headers=self._headers(), auth=self._auth()
            ) as response,
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
            shown = _cut(self._redact(data), _DETAIL)
            raise ModelError(
                f"{self.base_url} sent a stream chunk that is not JSON: {shown!r}"
            ) from None
        if not isinstance(chunk, dict):
            raise ModelError(f"{self.base_url} sent a stream chunk that is not a JSON object")
        if chunk.get("error"):
            detail = _cut(self._redact(_error_text(chunk)), _DETAIL)
            raise ModelError(f"{self.base_url} reported: {detail}")
        return chunk

    def _status_error(self, response: httpx.Response) -> ModelError:
        status = response.status_code
        retryable = status in _RETRYABLE_STATUS or status >= 500
        try:
            detail = _error_text(response.json())
        except ValueError:
            detail = response.text
        hint = {401: "; check the API key (OPENAI_API_KEY)", 404: "; check the model name"}.get(
            status, ""
        )
        detail = _cut(self._redact(detail), _DETAIL)
        return ModelError(
            f"{self.base_url} answered HTTP {status}: {detail}{hint}", retryable=retryable
        )


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
    """The message of an error body, whole (the caller redacts, then cuts)."""
    if isinstance(payload, dict):
        error = payload.get("error", payload)
        if isinstance(error, dict):
            return str(error.get("message") or error)
        return str(error)
    return str(payload)
