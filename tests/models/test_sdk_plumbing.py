"""The plumbing the SDK adapters share (agentnb/models/_sdk.py): clients per loop, errors."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator

import anthropic
import httpx
import openai
import pytest

from agentnb.models import ContextTooLong, ModelError, StreamItem, TextDelta
from agentnb.models._sdk import Deadline, Failures, LoopClients, guarded, sdk_failure

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


async def _slow_items(pause: float) -> AsyncGenerator[StreamItem, None]:
    for n in range(3):
        yield TextDelta(str(n))
        await asyncio.sleep(pause)


def _translate(exc: Exception, streamed: bool) -> ModelError:
    return _failures().unexpected(exc, streamed, retryable=False)


class TestGuardedDeadline:
    def test_a_deadline_passing_in_the_consumers_code_leaves_it_alone(self) -> None:
        """Past the deadline while the consumer holds an item, the consumer's own wait is not
        cancelled; the next wait for an item ends with the deadline's error."""
        deadline = Deadline.of(time.monotonic() + 0.05, where="http://fake")
        assert deadline is not None

        async def main() -> tuple[list[StreamItem], ModelError]:
            got: list[StreamItem] = []
            stream = guarded(_slow_items(0.0), deadline, _translate, _failures())
            got.append(await anext(stream))
            await asyncio.sleep(0.2)  # the consumer's own wait: must not be cancelled
            with pytest.raises(ModelError) as caught:
                got.append(await anext(stream))
            return got, caught.value

        got, err = asyncio.run(main())
        assert got == [TextDelta("0")]
        assert "time limit" in str(err)
        assert not err.retryable

    def test_a_deadline_ends_a_wait_that_never_returns(self) -> None:
        """A wait for an item that would last far past the deadline ends at it, retryably
        for attempt_timeout, and the items are closed."""
        deadline = Deadline.of(None, 0.05, where="http://fake")

        async def main() -> ModelError:
            stream = guarded(_slow_items(3600.0), deadline, _translate, _failures())
            assert await anext(stream) == TextDelta("0")
            with pytest.raises(ModelError) as caught:
                await anext(stream)
            return caught.value

        err = asyncio.run(main())
        assert err.retryable is False  # an item streamed first: never retryable
        assert "attempt_timeout=0.05s" in str(err)

    def test_an_outside_cancel_stays_a_cancel(self) -> None:
        """A cancel from outside during the wait propagates as CancelledError, not as the
        deadline's error."""
        deadline = Deadline.of(None, 3600.0, where="http://fake")

        async def read() -> None:
            async for _ in guarded(_slow_items(3600.0), deadline, _translate, _failures()):
                pass

        async def main() -> None:
            task = asyncio.create_task(read())
            await asyncio.sleep(0.05)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(main())
