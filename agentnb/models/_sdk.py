"""What the adapters on the vendors' SDKs share: one SDK client per event loop, one guarded
stream, and every failure worded once as a redacted ``ModelError``.

The ``openai`` and ``anthropic`` SDKs are generated alike: both export ``APIStatusError``
(an HTTP error answer, or an error event in a stream that began with 200), ``APIConnectionError``
(no answer; ``APITimeoutError`` is one) and ``APIError`` (an error inside a stream), with the
answer's parsed JSON as ``body``. ``sdk_failure`` reads them from the module it is given, so
this module imports neither SDK.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from math import inf
from types import ModuleType
from typing import Generic, Protocol, TypeVar

from agentnb.errors import InvalidInput
from agentnb.models.base import (
    Backoff,
    ContextTooLong,
    ModelError,
    ReasoningDelta,
    StreamItem,
    TextDelta,
    ToolCallDelta,
    retry_after_of,
)
from agentnb.models.secrets import clean_key, cut, mask_userinfo

__all__ = [
    "DETAIL",
    "MAX_ERROR_TEXT",
    "Deadline",
    "Failures",
    "LoopClients",
    "check_arguments",
    "guarded",
    "key_of",
    "sdk_failure",
]

MAX_ERROR_TEXT = 600
"""Longest error message an adapter raises (cut after redaction, never before)."""
DETAIL = 300
"""Longest piece of a server's answer quoted in an error."""
_RETRYABLE_STATUS = frozenset({408, 409, 429})
_RETRYABLE_CODES = frozenset(
    {
        "rate_limit_exceeded",
        "server_error",
        "server_is_overloaded",
        "overloaded_error",
        "rate_limit_error",
        "api_error",
        "timeout_error",
    }
)
"""Error codes (OpenAI) and types (Anthropic) of an error event that trying again may cure."""
_TOO_LONG_CODES = frozenset({"context_length_exceeded", "exceed_context_size_error"})
_TOO_LONG = (
    "prompt is too long",
    "context window",
    "context length",
    "context size",
    "maximum context",
    "too many tokens",
)
"""How providers and local servers (vLLM, llama.cpp) word a prompt past the window."""
_REPLY = (TextDelta, ReasoningDelta, ToolCallDelta)


def check_arguments(
    *,
    model: object,
    base_url: object,
    timeout: object,
    options: object,
    name: object,
    backoff: object,
    url_required: bool = False,
) -> None:
    """The arguments every adapter takes, checked alike: ``InvalidInput`` naming the first
    that is wrong (a base_url is quoted with its credentials masked)."""
    if not isinstance(model, str) or not model:
        raise InvalidInput(f"model must be a non-empty model name, got {model!r}")
    if (base_url is not None or url_required) and (
        not isinstance(base_url, str) or not base_url.startswith(("http://", "https://"))
    ):
        shown = mask_userinfo(base_url) if isinstance(base_url, str) else base_url
        also = "" if url_required else " or None"
        raise InvalidInput(f"base_url must be an http(s) URL{also}, got {shown!r}")
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout < inf:
        raise InvalidInput(f"timeout must be a number of seconds > 0, got {timeout!r}")
    if options is not None and not isinstance(options, Mapping):
        raise InvalidInput(f"options must be a dict, got {type(options).__name__}")
    if name is not None and (not isinstance(name, str) or not name):
        raise InvalidInput(f"name must be a non-empty string or None, got {name!r}")
    if backoff is not None and not isinstance(backoff, Backoff):
        raise InvalidInput(f"backoff must be a Backoff or None, got {backoff!r}")


def key_of(api_key: object, variable: str, *, required: str | None = None) -> str | None:
    """``api_key``, else the environment's ``variable``, cleaned (``clean_key``); with
    ``required`` (the adapter's name) a missing key raises ``InvalidInput``."""
    if api_key is None:
        key = clean_key(os.environ.get(variable), variable)
    else:
        key = clean_key(api_key, "api_key")
    if key is None and required is not None:
        raise InvalidInput(f"{required} needs an API key: pass api_key=... or set {variable}")
    return key


class _Closable(Protocol):
    def is_closed(self) -> bool: ...

    async def close(self) -> None: ...


ClientT = TypeVar("ClientT", bound=_Closable)


class LoopClients(Generic[ClientT]):
    """One SDK client per event loop, made by ``make`` on first use on that loop (an SDK
    client holds an HTTP pool bound to the loop it first ran on). ``given`` is the caller's
    own client: used on every loop as it is, and never closed here."""

    def __init__(self, make: Callable[[], ClientT], given: ClientT | None = None) -> None:
        self._make = make
        self.given = given
        self._lock = threading.Lock()
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, ClientT]
        self._clients = weakref.WeakKeyDictionary()

    def get(self) -> ClientT:
        if self.given is not None:
            return self.given
        loop = asyncio.get_running_loop()
        with self._lock:
            client = self._clients.get(loop)
            if client is None or client.is_closed():
                client = self._clients[loop] = self._make()
            return client

    async def aclose(self) -> None:
        """Close the running loop's client; a later call makes a new one."""
        loop = asyncio.get_running_loop()
        with self._lock:
            client = self._clients.pop(loop, None)
            # Clients of loops that ended cannot be closed any more; let them go.
            for ended in [other for other in self._clients if other.is_closed()]:
                del self._clients[ended]
        if client is not None:
            await client.close()


class Failures:
    """Words one adapter's failures: ``where`` names the endpoint, ``redact`` removes its
    credentials (before the text is cut), ``key_source`` is where its key comes from (named
    in the advice of a 401). A failure after part of the reply streamed is never retryable:
    that part may already be in the log."""

    def __init__(self, where: str, redact: Callable[[str], str], key_source: str) -> None:
        self.where = where
        self.redact = redact
        self.key_source = key_source

    def error(
        self,
        text: str,
        *,
        retryable: bool = False,
        retry_after: float | None = None,
        streamed: bool = False,
        kind: type[ModelError] = ModelError,
    ) -> ModelError:
        if streamed:
            text = (
                "the reply broke off after part of it was streamed (not retried: that part may "
                f"already be recorded): {text}"
            )
            retryable, retry_after = False, None
        return kind(
            cut(self.redact(text), MAX_ERROR_TEXT),
            retryable=retryable,
            retry_after=retry_after if retryable else None,
        )

    def again(self, exc: ModelError, streamed: bool) -> ModelError:
        """A ``ModelError`` raised inside the call, redacted and marked if it streamed."""
        return self.error(
            str(exc),
            retryable=exc.retryable,
            retry_after=exc.retry_after,
            streamed=streamed,
            kind=type(exc),
        )

    def detail(self, message: object) -> str:
        return cut(self.redact(str(message)), DETAIL)

    def too_long(self, detail: str, streamed: bool) -> ModelError:
        return self.error(
            f"{self.where} refused the request: the prompt is longer than the model's context "
            f"window ({detail}); compact the context (Agent(compaction=...)) or start a new "
            "session",
            streamed=streamed,
            kind=ContextTooLong,
        )

    def status(
        self,
        status: int,
        headers: Mapping[str, str],
        message: object,
        *,
        code: str | None = None,
        streamed: bool = False,
    ) -> ModelError:
        """An HTTP error answer: 408, 409, 429 and 5xx are retryable after the server's
        ``retry-after`` (its ``x-should-retry`` decides when present); a prompt past the
        window is ``ContextTooLong``."""
        detail = self.detail(message)
        if status in (400, 413) and _too_long(code, detail):
            return self.too_long(detail, streamed)
        retryable = status in _RETRYABLE_STATUS or status >= 500
        should_retry = (headers.get("x-should-retry") or "").strip().lower()
        if should_retry in ("true", "false"):
            retryable = should_retry == "true"
        hint = {
            401: f"; check the API key ({self.key_source})",
            404: "; check the model name",
            429: "; rate limited",
            529: "; the API is overloaded",
        }.get(status, "")
        label = f" ({code})" if code else ""
        return self.error(
            f"{self.where} answered HTTP {status}{label}: {detail}{hint}",
            retryable=retryable,
            retry_after=retry_after_of(headers, time.time()) if retryable else None,
            streamed=streamed,
        )

    def event(self, message: object, *, code: str | None, streamed: bool) -> ModelError:
        """An error reported inside a stream that began well."""
        detail = self.detail(message)
        if _too_long(code, detail):
            return self.too_long(detail, streamed)
        label = f" ({code})" if code else ""
        return self.error(
            f"{self.where} reported{label}: {detail}",
            retryable=code in _RETRYABLE_CODES,
            streamed=streamed,
        )

    def connection(self, exc: BaseException, streamed: bool) -> ModelError:
        # The SDKs wrap the HTTP library's error ("Connection error."): name the original.
        cause = exc.__cause__ or exc
        return self.error(
            f"connection to {self.where} failed: {type(cause).__name__}: {cause}",
            retryable=True,
            streamed=streamed,
        )

    def unexpected(self, exc: BaseException, streamed: bool, *, retryable: bool) -> ModelError:
        return self.error(
            f"the call to {self.where} failed: {type(exc).__name__}: {exc}",
            retryable=retryable,
            streamed=streamed,
        )


def _too_long(code: str | None, detail: str) -> bool:
    return code in _TOO_LONG_CODES or any(s in detail.lower() for s in _TOO_LONG)


def _error_fields(body: object, fallback: str) -> tuple[str, str | None]:
    """The message and code (or type) of an error body, OpenAI's ``{"error": {...}}``,
    Anthropic's ``{"type": "error", "error": {...}}`` or the inner object itself."""
    error = body.get("error", body) if isinstance(body, Mapping) else body
    if not isinstance(error, Mapping):
        return (str(error) if error else fallback), None
    code = error.get("code") or error.get("type")
    return str(error.get("message") or fallback), (str(code) if code else None)


def sdk_failure(
    exc: Exception,
    sdk: ModuleType,
    failures: Failures,
    streamed: bool,
    *,
    retry_unexpected: bool,
) -> ModelError:
    """The ``ModelError`` for what the ``sdk`` module (``openai`` or ``anthropic``) raised;
    anything else is ``unexpected`` (``retry_unexpected``: whether that may be retried)."""
    if isinstance(exc, sdk.APIStatusError):
        message, code = _error_fields(exc.body, exc.message)
        status = exc.status_code
        if status < 400:  # an error event in a stream that began with 200
            return failures.event(message, code=code, streamed=streamed)
        return failures.status(status, exc.response.headers, message, code=code, streamed=streamed)
    if isinstance(exc, sdk.APIConnectionError):
        return failures.connection(exc, streamed)
    if isinstance(exc, sdk.APIError):
        message, code = _error_fields(exc.body, exc.message)
        return failures.event(message, code=code, streamed=streamed)
    return failures.unexpected(exc, streamed, retryable=retry_unexpected)


@dataclass(frozen=True)
class Deadline:
    """When a call must have ended (``time.monotonic()`` terms), and the error it ends with."""

    at: float
    message: str
    retryable: bool = False

    @classmethod
    def of(
        cls, request_deadline: float | None, attempt_timeout: float | None = None, *, where: str
    ) -> Deadline | None:
        """The earlier of the request's own deadline (the task's time limit; not retryable)
        and ``attempt_timeout`` seconds from now (retryable), or None without either."""
        ends = []
        if request_deadline is not None:
            ends.append(
                cls(
                    request_deadline,
                    f"the task's time limit passed while waiting for {where}; the call was "
                    "cancelled",
                )
            )
        if attempt_timeout is not None:
            ends.append(
                cls(
                    time.monotonic() + attempt_timeout,
                    f"no complete reply from {where} within attempt_timeout="
                    f"{attempt_timeout:g}s (the server kept the stream open); the connection "
                    "was closed",
                    retryable=True,
                )
            )
        return min(ends, key=lambda d: d.at) if ends else None


class _Alarm:
    """Cancels ``task`` at loop time ``when``, but only while it waits for the next item.

    One timer for the whole call instead of an ``asyncio.timeout`` per item (a quarter of an
    adapter's CPU per token). It rings only into the wait: rung while the consumer holds an
    item (the generator at ``yield``), it leaves the consumer alone and the next wait ends at
    once, as ``asyncio.timeout`` would have.
    """

    def __init__(self, deadline: Deadline) -> None:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None  # a model is streamed inside a task
        self.deadline = deadline
        self.task = task
        self.cancelling = task.cancelling()
        self.waiting = False
        self.rang = False
        self.fired = False
        self.handle = loop.call_at(loop.time() + deadline.at - time.monotonic(), self._ring)

    def _ring(self) -> None:
        self.rang = True
        if self.waiting:
            self.fired = True
            self.task.cancel()

    def caught(self) -> bool:
        """Whether the CancelledError being handled is this alarm's alone."""
        return self.fired and self.task.uncancel() <= self.cancelling

    def error(self) -> ModelError:
        return ModelError(self.deadline.message, retryable=self.deadline.retryable)


async def guarded(
    items: AsyncGenerator[StreamItem, None],
    deadline: Deadline | None,
    translate: Callable[[Exception, bool], ModelError],
    failures: Failures,
) -> AsyncIterator[StreamItem]:
    """``items`` as they come, ended at ``deadline``; every failure leaves as a ``ModelError``
    (``translate(exc, streamed)`` words what is not one already), raised outside the handler
    so the original (which may quote a credential) is neither its cause nor its context.
    Leaving early (an interrupt) closes ``items``, which closes the response."""
    failure: ModelError | None = None
    streamed = False
    alarm = None if deadline is None else _Alarm(deadline)
    try:
        async with contextlib.aclosing(items):
            while True:
                # Each wait for the next item ends at the deadline: ``items`` is cancelled
                # where it waits, which closes the connection.
                if alarm is None:
                    try:
                        item = await anext(items)
                    except StopAsyncIteration:
                        break
                else:
                    if alarm.rang:
                        raise alarm.error()
                    alarm.waiting = True
                    try:
                        item = await anext(items)
                    except StopAsyncIteration:
                        break
                    except asyncio.CancelledError:
                        if not alarm.caught():
                            raise
                        raise alarm.error() from None
                    finally:
                        alarm.waiting = False
                streamed = streamed or isinstance(item, _REPLY)
                yield item
    except ModelError as exc:
        failure = failures.again(exc, streamed)
    except Exception as exc:  # noqa: BLE001 - whatever else fails leaves as a ModelError
        failure = translate(exc, streamed)
    finally:
        if alarm is not None:
            alarm.handle.cancel()
    if failure is not None:
        raise failure
