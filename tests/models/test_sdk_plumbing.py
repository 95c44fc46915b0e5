"""The plumbing the SDK adapters share (agentnb/models/_sdk.py): clients per loop, errors."""

from __future__ import annotations

import asyncio

import anthropic
import httpx
import openai
import pytest

from agentnb.models import ContextTooLong
from agentnb.models._sdk import Failures, LoopClients, sdk_failure

KEY = "sk-plumbing-0123456789"


class _Client:
    def __init__(self) -> None:
        self.closed = False

    def is_closed(self) -> bool:
        return self.closed

    async def close(self) -> None:
        self.closed = True


def _failures() -> Failures:
    return Failures("http://fake", lambda text: text.replace(KEY, "***"), "SOME_KEY")


def _response(status: int, **headers: str) -> httpx.Response:
    return httpx.Response(status, headers=headers, request=httpx.Request("POST", "http://fake"))


class TestLoopClients:
    def test_one_client_per_loop_and_aclose_makes_way_for_a_new_one(self) -> None:
        """A loop reuses its client; another loop gets its own; after aclose a new one."""
        made: list[_Client] = []

        def make() -> _Client:
            made.append(_Client())
            return made[-1]

        clients = LoopClients(make)

        async def twice() -> tuple[_Client, _Client]:
            return clients.get(), clients.get()

        first, again = asyncio.run(twice())
        assert first is again
        assert asyncio.run(twice())[0] is not first

        async def close_then_get() -> _Client:
            before = clients.get()
            await clients.aclose()
            assert before.closed
            return clients.get()

        assert not asyncio.run(close_then_get()).closed
        assert len(made) == 4

    def test_a_given_client_is_used_everywhere_and_never_closed(self) -> None:
        """The caller's client serves every loop and aclose leaves it open."""
        mine = _Client()
        clients = LoopClients(_Client, given=mine)

        async def use() -> _Client:
            got = clients.get()
            await clients.aclose()
            return got

        assert asyncio.run(use()) is mine
        assert not mine.closed


class TestSdkFailure:
    @pytest.mark.parametrize("sdk", [openai, anthropic])
    def test_rate_limit_is_retryable_after_the_servers_wait(self, sdk: object) -> None:
        """Either SDK's 429 is retryable with retry_after from the header, key redacted."""
        body = {"type": "error", "error": {"type": "rate_limit_error", "message": f"slow {KEY}"}}
        exc = sdk.RateLimitError("x", response=_response(429, **{"retry-after": "4"}), body=body)  # type: ignore[attr-defined]
        err = sdk_failure(exc, sdk, _failures(), False, retry_unexpected=False)  # type: ignore[arg-type]
        assert (err.retryable, err.retry_after) == (True, 4.0)
        assert "HTTP 429 (rate_limit_error)" in str(err)
        assert KEY not in str(err)

    def test_an_anthropic_error_event_in_a_200_stream_is_judged_by_its_type(self) -> None:
        """Anthropic's overloaded_error event (status 200) is retryable; streamed, it is not."""
        body = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
        exc = anthropic.APIStatusError("x", response=_response(200), body=body)
        assert sdk_failure(exc, anthropic, _failures(), False, retry_unexpected=False).retryable
        late = sdk_failure(exc, anthropic, _failures(), True, retry_unexpected=False)
        assert not late.retryable
        assert "after part of it was streamed" in str(late)

    def test_a_413_prompt_too_long_is_context_too_long(self) -> None:
        """A 413 whose message says the prompt is too long is ContextTooLong."""
        body = {"error": {"type": "request_too_large", "message": "prompt is too long"}}
        exc = anthropic.APIStatusError("x", response=_response(413), body=body)
        err = sdk_failure(exc, anthropic, _failures(), False, retry_unexpected=False)
        assert isinstance(err, ContextTooLong)

    def test_anything_else_is_unexpected_with_the_adapters_retry_rule(self) -> None:
        """An exception no SDK raised is worded with its type; retryable as the adapter says."""
        exc = RuntimeError(f"boom {KEY}")
        err = sdk_failure(exc, openai, _failures(), False, retry_unexpected=True)
        assert err.retryable
        assert "RuntimeError: boom ***" in str(err)
