"""OpenAIChatModel: any OpenAI-compatible ``/chat/completions`` endpoint, on the ``openai`` SDK.

The SDK sends the request and reads the event stream (SSE framing, ``[DONE]``, error events,
HTTP errors as typed exceptions); ours are the request body, the chunks read as the JSON the
server sent (tool-call fragments, reasoning, usage), the secrets kept out of every error, the
deadlines and the token counting.
"""

from __future__ import annotations

import base64
import importlib
import json
import math
import re
import threading
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Mapping
from types import ModuleType
from typing import Any, Literal, cast
from urllib.parse import unquote, urlsplit, urlunsplit

from agentnb.errors import install_hint

try:
    import httpx
    import openai
except ImportError as exc:  # pragma: no cover - exercised by a test that hides httpx
    raise ImportError(
        f"OpenAIChatModel needs {exc.name}: {install_hint('openai')}", name=exc.name
    ) from exc

from agentnb.errors import InvalidInput
from agentnb.events import Message, canonical_json
from agentnb.models._sdk import DETAIL as _DETAIL
from agentnb.models._sdk import (
    MAX_ERROR_TEXT,
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
    count_tokens_with,
    estimate_text_tokens,
    estimate_tokens,
)
from agentnb.models.parts import with_tool_images
from agentnb.models.secrets import Secret as _Secret
from agentnb.models.secrets import cut as _cut
from agentnb.models.secrets import mask_userinfo as _mask_userinfo
from agentnb.models.secrets import scrub as _scrub

__all__ = ["MAX_ERROR_BODY", "MAX_ERROR_TEXT", "OpenAIChatModel"]

MAX_ERROR_BODY = 64 * 1024
"""Bytes of a 200 answer that is no event stream read at most to quote it in the error."""
_MAX_SCALE = 4.0
"""The calibrated estimate counts at most this many times the plain estimate."""
_TOOL_CHOICES = frozenset({"auto", "none", "required"})
_TOOLS_ONLY = ("tool_choice", "parallel_tool_calls")
"""Options the chat API refuses in a request without tools."""
_NO_KEY = "no-key"
"""What the SDK is given without a key (it insists on one); its header is never sent."""
_SENT = frozenset({"model", "messages", "stream"})
"""Body fields given to the SDK by name; every other field goes as ``extra_body``."""


class _Chunks(openai.AsyncStream[object]):
    """The SDK's stream of chat-completion chunks, each the JSON object the server sent.

    ``object`` as the chunk type makes the SDK hand over the parsed JSON as it is instead of
    building a pydantic model per chunk (most of its CPU per token), and keeps what a
    compatible server adds (``reasoning_content``) readable as sent.
    """

    async def _iter_events(self) -> AsyncIterator[Any]:
        # The SSE standard dispatches no event whose data is empty (a keep-alive some servers
        # send); the SDK's decoder does, then fails to read "" as JSON.
        async for event in super()._iter_events():
            if event.data:
                yield event


def _check_request_options(
    tool_choice: object, parallel_tool_calls: object, response_format: object
) -> None:
    if tool_choice is not None and not (
        isinstance(tool_choice, Mapping)
        or (isinstance(tool_choice, str) and tool_choice in _TOOL_CHOICES)
    ):
        raise InvalidInput(
            f'tool_choice must be "auto", "none", "required" or a dict such as '
            f'{{"type": "function", "function": {{"name": ...}}}}, got {tool_choice!r}'
        )
    if parallel_tool_calls is not None and not isinstance(parallel_tool_calls, bool):
        raise InvalidInput(
            f"parallel_tool_calls must be True, False or None, got {parallel_tool_calls!r}"
        )
    if response_format is not None and not (
        isinstance(response_format, Mapping) and isinstance(response_format.get("type"), str)
    ):
        raise InvalidInput(
            "response_format must be a dict with a 'type', such as "
            f'{{"type": "json_object"}}, got {response_format!r}'
        )


def _check_timeout(name: str, value: object, also: str = "") -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise InvalidInput(f"{name} must be a number of seconds > 0{also}, got {value!r}")


class OpenAIChatModel(Model):
    """A chat model behind an OpenAI-compatible ``/chat/completions`` endpoint, through the
    official ``openai`` SDK.

    ``api_key`` defaults to the ``OPENAI_API_KEY`` environment variable; without one no
    ``Authorization`` header is sent (fine for local servers). Whitespace around the key (a
    key read from a file ends in a newline) is stripped; a key with any other character that
    cannot go in a header raises ``InvalidInput``. ``base_url`` may carry ``user:password@``
    (sent as basic authentication). Neither the key nor those credentials appear in a repr,
    in ``base_url`` (which shows ``***@``) or in an error: every exception that leaves the
    adapter is a ``ModelError`` whose text has them redacted, raw or escaped (repr, JSON,
    percent, base64 of the basic credentials), before it is cut to ``MAX_ERROR_TEXT``.

    **Request.** ``options`` (temperature, max_tokens, ...) go into every request body; a
    request's own options (``ModelRequest.options``) override them, and an option set to None
    is left out. ``tool_choice`` (``"auto"``, ``"none"``, ``"required"`` or a dict naming a
    function), ``parallel_tool_calls`` (bool) and ``response_format`` (a dict such as
    ``{"type": "json_object"}``) are the same as setting those options; ``tool_choice`` and
    ``parallel_tool_calls`` are left out of a request without tools, which the API refuses.
    Usage is asked for with ``stream_options: {"include_usage": true}``; cached and reasoning
    tokens are recorded when the server reports them. Reasoning a server streams as
    ``reasoning_content`` (DeepSeek, vLLM, llama.cpp) or ``reasoning`` streams as
    ``ReasoningDelta``; it is not sent back (those servers refuse it in a request). Only the
    key (or base_url's credentials) goes with a request: the SDK's ``OPENAI_ORG_ID`` and
    ``OPENAI_PROJECT_ID`` headers are left out, so a local server learns nothing of them.

    **Connections.** Calls share one ``openai.AsyncOpenAI`` client per event loop, made on
    first use, with the SDK's retries off, over one pooled ``httpx.AsyncClient``;
    ``aclose()`` closes the running loop's client (the runtime calls it when it closes) and a
    later call makes a new one. ``transport`` replaces that client's HTTP transport (tests
    pass ``httpx.MockTransport``; it is the same as giving the SDK ``http_client=httpx.
    AsyncClient(transport=...)``). ``timeout`` bounds connecting and each wait for the next
    piece of the stream. Interrupting a call (closing its stream) closes the response.

    **Deadlines.** A server that keeps sending a byte now and then never lets ``timeout``
    fire, so each attempt also has a deadline: ``attempt_timeout`` seconds (default 600,
    None for none) from the request to the reply's end; past it the attempt fails with a
    ``ModelError`` (``retryable`` unless part of the reply was streamed). A request's own
    ``deadline`` (``ModelRequest.deadline``: the task's time limit) ends the call too, with
    a ``ModelError`` that is not retryable. Either way the connection is closed at once.

    **Failures and retries.** The adapter never retries by itself: every retry is the
    runtime's, recorded in the log. A failure before any reply text or tool call was streamed
    is ``retryable`` when trying again may help (HTTP 408, 409, 429, 5xx, a lost connection, a
    stream cut short; a server's ``x-should-retry`` header decides when present), with
    ``retry_after`` from ``retry-after-ms`` or ``Retry-After`` (seconds or an HTTP date).
    A failure after that is never retryable: part of the reply may already be in the log.
    A prompt past the model's window (OpenAI's ``context_length_exceeded``, vLLM's and
    llama.cpp's wording of it) is ``ContextTooLong``, which names compaction.
    ``backoff`` (default ``Backoff()``) says how long the runtime waits between attempts.

    **Tokens.** ``count_tokens`` uses an exact tokenizer when it has one: ``tokenizer`` is a
    function counting the tokens of one text, or ``"auto"`` (the default) to use the
    ``bpe-openai`` package when it is installed (``pip install -e ".[tokens]"``; it ships
    the ``o200k_base`` and ``cl100k_base`` encodings, so it works offline) and the model name is
    a known OpenAI family, or None for the estimate. Without a tokenizer it is the port's
    ``estimate_tokens``, scaled by how far the server's last reported prompt tokens exceeded the
    estimate of that request (never down, at most 4 times up). The first count with
    ``bpe-openai`` loads its encoding (about a second). ``encoding`` names what is used.
    ``context_window`` is the model's window in tokens, or None when not given.
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
        attempt_timeout: float | None = 600.0,
        name: str | None = None,
        context_window: int | None = None,
        tokenizer: Callable[[str], int] | Literal["auto"] | None = "auto",
        backoff: Backoff | None = None,
        tool_choice: str | Mapping[str, Any] | None = None,
        parallel_tool_calls: bool | None = None,
        response_format: Mapping[str, Any] | None = None,
    ) -> None:
        check_arguments(
            model=model,
            base_url=base_url,
            timeout=timeout,
            options=options,
            name=name,
            backoff=backoff,
            url_required=True,
        )
        if attempt_timeout is not None:
            _check_timeout("attempt_timeout", attempt_timeout, also=" or None")
        check_context_window(context_window)
        if tokenizer is not None and tokenizer != "auto" and not callable(tokenizer):
            raise InvalidInput(
                f'tokenizer must be "auto", None or a function counting the tokens of a text, '
                f"got {tokenizer!r}"
            )
        if transport is not None and not isinstance(transport, httpx.AsyncBaseTransport):
            raise InvalidInput(
                "transport must be an httpx.AsyncBaseTransport (such as httpx.MockTransport) "
                f"or None, got {type(transport).__name__}"
            )
        _check_request_options(tool_choice, parallel_tool_calls, response_format)
        key = key_of(api_key, "OPENAI_API_KEY")
        parts = urlsplit(base_url.rstrip("/"))
        userinfo, _, host = parts.netloc.rpartition("@")
        self.model = model
        self.name = name or model
        self._url = urlunsplit(parts._replace(netloc=host))
        self.base_url = _mask_userinfo(base_url.rstrip("/"))
        """The endpoint as shown in reprs and errors (credentials as ``***@``)."""
        self.options = dict(options or {})
        for option, value in (
            ("tool_choice", tool_choice),
            ("parallel_tool_calls", parallel_tool_calls),
            ("response_format", response_format),
        ):
            if value is not None:
                self.options[option] = dict(value) if isinstance(value, Mapping) else value
        self.timeout = float(timeout)
        self.attempt_timeout = None if attempt_timeout is None else float(attempt_timeout)
        self.context_window = context_window
        self.backoff = backoff or Backoff()
        self._api_key = _Secret(key)
        self._userinfo = _Secret(userinfo or None)
        self._transport = transport
        self._headers = self._request_headers()
        self._failures = Failures(self.base_url, self._redact, "OPENAI_API_KEY")
        self._clients: LoopClients[openai.AsyncOpenAI] = LoopClients(self._make_client)
        self._tokenizer = tokenizer
        self._counter: tuple[str, Callable[[str], int]] | None = None
        self._counter_known = False
        self._scale = 1.0
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"OpenAIChatModel(model={self.model!r}, base_url={self.base_url!r})"

    # -- tokens ------------------------------------------------------------------------------

    @property
    def encoding(self) -> str | None:
        """The tokenizer ``count_tokens`` uses (``"o200k_base"``, ``"cl100k_base"``,
        ``"custom"``), or None when it estimates."""
        counter = self._text_counter()
        return counter[0] if counter else None

    def count_tokens(
        self, messages: Iterable[Message], tools: Iterable[Mapping[str, Any]] = ()
    ) -> int:
        counter = self._text_counter()
        if counter is not None:
            return count_tokens_with(counter[1], messages, tools)
        return math.ceil(estimate_tokens(messages, tools) * self._scale)

    def _text_counter(self) -> tuple[str, Callable[[str], int]] | None:
        with self._lock:
            if not self._counter_known:
                if callable(self._tokenizer):
                    self._counter = ("custom", _checked_counter(self._tokenizer))
                elif self._tokenizer == "auto":
                    encoding = _encoding_for(self.model)
                    counter = _load_encoding(encoding) if encoding else None
                    self._counter = (encoding, counter) if encoding and counter else None
                self._counter_known = True
            return self._counter

    def _estimated(self, request: ModelRequest, produced: list[str]) -> Usage:
        """The usage of a reply whose server reported none: ``count_tokens`` of the request,
        the reply's text and tool calls counted by the same tokenizer (or the estimate)."""
        counter = self._text_counter()
        count = counter[1] if counter is not None else estimate_text_tokens
        return Usage(
            input_tokens=self.count_tokens(request.messages, request.tools),
            output_tokens=count("".join(produced)),
            estimated=True,
        )

    def _calibrate(self, request: ModelRequest, usage: Usage) -> None:
        # Tracks tokenizers the estimate does not know (vLLM-served models, other providers):
        # the ratio of what the server counted to what the estimate said, never below 1.
        # count_tokens uses it only when it has no tokenizer.
        if usage.input_tokens > 0:
            estimate = estimate_tokens(request.messages, request.tools)
            self._scale = min(_MAX_SCALE, max(1.0, usage.input_tokens / estimate))

    # -- connections -------------------------------------------------------------------------

    def _make_client(self) -> openai.AsyncOpenAI:
        timeout = httpx.Timeout(self.timeout, connect=min(self.timeout, 10.0))
        # An httpx (not the SDK's own) HTTP client: ``transport`` is an httpx transport, and
        # every SDK release since 1.0 accepts one.
        http_client = httpx.AsyncClient(transport=self._transport, timeout=timeout)
        return openai.AsyncOpenAI(
            api_key=self._api_key.reveal() or _NO_KEY,
            base_url=self._url,
            max_retries=0,  # every retry is the runtime's, recorded in the log
            timeout=openai.Timeout(self.timeout, connect=min(self.timeout, 10.0)),
            http_client=cast(Any, http_client),
        )

    async def aclose(self) -> None:
        """Close the connection pool of the running event loop (see the class docstring)."""
        await self._clients.aclose()

    def _request_headers(self) -> dict[str, Any]:
        """The headers each request sets or leaves out (``openai.Omit()``) over the SDK's."""
        omit = openai.Omit()
        headers: dict[str, Any] = {"OpenAI-Organization": omit, "OpenAI-Project": omit}
        userinfo = self._userinfo.reveal()
        if userinfo is not None:
            # Sent as a header, not left in the URL: HTTP libraries log request URLs.
            user, _, password = userinfo.partition(":")
            token = base64.b64encode(f"{unquote(user)}:{unquote(password)}".encode()).decode()
            headers["Authorization"] = f"Basic {token}"
        elif self._api_key.reveal() is None:
            headers["Authorization"] = omit
        return headers

    # -- the call ----------------------------------------------------------------------------

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        deadline = Deadline.of(request.deadline, self.attempt_timeout, where=self.base_url)
        return guarded(self._events(request), deadline, self._translate, self._failures)

    def _body(self, request: ModelRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": with_tool_images(request.messages, [_message(m) for m in request.messages]),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            body["tools"] = [{"type": "function", "function": dict(t)} for t in request.tools]
        body.update(self.options)
        body.update(request.options)
        if not request.tools:
            for option in _TOOLS_ONLY:
                body.pop(option, None)
        return {k: v for k, v in body.items() if v is not None}

    async def _events(self, request: ModelRequest) -> AsyncGenerator[StreamItem, None]:
        body = self._body(request)
        extra = {k: v for k, v in body.items() if k not in _SENT}
        raw = await self._clients.get().chat.completions.with_raw_response.create(
            model=body["model"],
            messages=body["messages"],
            stream=True,
            extra_body=extra,
            extra_headers=self._headers,
        )
        response = raw.http_response
        content_type = response.headers.get("content-type", "").partition(";")[0].strip()
        if content_type.lower() != "text/event-stream":
            try:
                answer = await _read_some(response)
            finally:
                await response.aclose()
            raise self._not_a_stream(content_type, answer)
        chunks = raw.parse(to=_Chunks)
        finish_reason: str | None = None
        usage: Usage | None = None
        produced: list[str] = []
        try:
            async for chunk in chunks:
                if not isinstance(chunk, dict):
                    raise ModelError(f"{self.base_url} sent a stream chunk that is not an object")
                if isinstance(chunk.get("usage"), dict):
                    usage = _usage(chunk["usage"])
                for choice in chunk.get("choices") or ():
                    delta = choice.get("delta") or {}
                    text = delta.get("content")
                    if text:
                        produced.append(text)
                        yield TextDelta(text)
                    thought = delta.get("reasoning_content") or delta.get("reasoning")
                    if thought and isinstance(thought, str):
                        yield ReasoningDelta(thought)
                    for position, call in enumerate(delta.get("tool_calls") or ()):
                        function = call.get("function") or {}
                        piece = ToolCallDelta(
                            index=int(call.get("index", position)),
                            call_id=call.get("id"),
                            name=function.get("name"),
                            arguments_delta=function.get("arguments") or "",
                        )
                        produced.extend(s for s in (piece.name, piece.arguments_delta) if s)
                        yield piece
                    if choice.get("finish_reason"):
                        finish_reason = choice["finish_reason"]
        finally:
            await chunks.close()
        if finish_reason is None and usage is None:
            raise ModelError(
                f"the stream from {self.base_url} ended before the reply was complete",
                retryable=True,
            )
        if usage is None:
            # A server that sends no usage (llama.cpp's streams): counted here, and marked
            # as the adapter's own count.
            usage = self._estimated(request, produced)
        else:
            self._calibrate(request, usage)
        yield usage
        yield Finish(finish_reason or "stop")

    # -- errors ------------------------------------------------------------------------------

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

    def _translate(self, exc: Exception, streamed: bool) -> ModelError:
        if isinstance(exc, json.JSONDecodeError):
            shown = _cut(self._redact(exc.doc), _DETAIL)
            return self._failures.error(
                f"{self.base_url} sent a stream chunk that is not JSON: {shown!r}",
                streamed=streamed,
            )
        if isinstance(exc, RecursionError):
            return self._failures.error(
                f"{self.base_url} sent a stream chunk nested too deeply to read; the server's "
                "reply is not a chat-completions chunk",
                streamed=streamed,
            )
        return sdk_failure(exc, openai, self._failures, streamed, retry_unexpected=False)

    def _not_a_stream(self, content_type: str, text: str) -> ModelError:
        detail = _cut(self._redact(_error_text(_json_or_text(text))), _DETAIL)
        return ModelError(
            f"{self.base_url} answered with content-type {content_type or 'none'!r} instead of "
            f"an event stream: {detail!r}; check base_url (it ends in /v1 for most servers) and "
            "that the endpoint supports streaming (stream=true)"
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


def _error_text(payload: Any) -> str:
    """The message of an error body, whole (the caller redacts, then cuts)."""
    if isinstance(payload, dict):
        error = payload.get("error", payload)
        if isinstance(error, dict):
            return str(error.get("message") or error)
        return str(error)
    return str(payload)


def _json_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


async def _read_some(response: Any) -> str:
    """Up to ``MAX_ERROR_BODY`` bytes of the body of ``response`` (an httpx or httpx2
    response: the SDK types it as its own), as text."""
    parts: list[bytes] = []
    size = 0
    async for part in response.aiter_bytes():
        parts.append(part)
        size += len(part)
        if size >= MAX_ERROR_BODY:
            break
    return b"".join(parts)[:MAX_ERROR_BODY].decode("utf-8", "replace")


def _count(value: Any) -> int | None:
    """A token count from a usage object, or None for anything that is not one."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def _usage(data: Mapping[str, Any]) -> Usage:
    prompt = data.get("prompt_tokens_details")
    completion = data.get("completion_tokens_details")
    return Usage(
        input_tokens=_count(data.get("prompt_tokens")) or 0,
        output_tokens=_count(data.get("completion_tokens")) or 0,
        cached_tokens=_count(prompt.get("cached_tokens")) if isinstance(prompt, dict) else None,
        reasoning_tokens=(
            _count(completion.get("reasoning_tokens")) if isinstance(completion, dict) else None
        ),
    )


def _encoding_for(model: str) -> str | None:
    """The tokenizer encoding of an OpenAI model family (as tiktoken maps them), else None."""
    name = model.rsplit("/", 1)[-1].lower()
    if name.startswith(("gpt-4o", "chatgpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "gpt-oss")) or (
        re.match(r"o\d(-|$)", name)
    ):
        return "o200k_base"
    if name.startswith(("gpt-4", "gpt-3.5", "gpt-35")):
        return "cl100k_base"
    return None


_ENCODINGS: weakref.WeakKeyDictionary[ModuleType, dict[str, Callable[[str], int] | None]]
_ENCODINGS = weakref.WeakKeyDictionary()
"""Token counters by tokenizer module and encoding name: an encoding loads once a process."""
_ENCODINGS_LOCK = threading.Lock()


def _load_encoding(name: str) -> Callable[[str], int] | None:
    """A token counter for encoding ``name`` from ``bpe-openai``, or None without it."""
    try:
        # Optional (pip install -e ".[tokens]"): it ships its encoding files, so unlike
        # tiktoken it never downloads anything.
        module = importlib.import_module("bpe_openai")
    except ImportError:
        return None
    with _ENCODINGS_LOCK:
        loaded = _ENCODINGS.setdefault(module, {})
        if name not in loaded:
            loaded[name] = _open_encoding(module, name)
        return loaded[name]


def _open_encoding(module: Any, name: str) -> Callable[[str], int] | None:
    try:
        encoding = module.get_encoding(name)
    except Exception:  # noqa: BLE001 - a broken optional tokenizer falls back to the estimate
        return None

    def count(text: str) -> int:
        try:
            return len(encoding.encode_ordinary(text))
        except Exception:  # noqa: BLE001 - e.g. its limit on very long texts: estimate that one
            return estimate_text_tokens(text)

    return count


def _checked_counter(tokenizer: Callable[[str], int]) -> Callable[[str], int]:
    def count(text: str) -> int:
        tokens = tokenizer(text)
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
            raise InvalidInput(
                f"the tokenizer returned {tokens!r}; it must return the number of tokens of "
                "the text it is given (an int >= 0)"
            )
        return tokens

    return count
