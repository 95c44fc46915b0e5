"""OpenAIChatModel on the official openai SDK: what the SDK sends, and its errors as ours.

The wire and error behaviour the adapter had before the SDK is tested in
``tests/runtime/test_openai_model.py`` and ``tests/runtime/test_openai_http.py``; these are
the promises the move onto the SDK added.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import agentnb as nb
from agentnb.errors import InvalidInput
from agentnb.events import Message
from agentnb.models import (
    ContextTooLong,
    Finish,
    ModelError,
    ModelRequest,
    ReasoningDelta,
    TextDelta,
    Usage,
)
from agentnb.models.openai import OpenAIChatModel
from tests.runtime.test_openai_model import (
    SECRET,
    delta,
    failure,
    finish,
    items,
    model_with,
    ok,
    replying,
    request,
    sse,
    usage,
)


def refusing(status: int, error: dict[str, Any], **headers: str) -> OpenAIChatModel:
    """A model whose server answers every request with ``status`` and ``{"error": error}``."""
    return model_with(lambda r: httpx.Response(status, headers=headers, json={"error": error}))


class TestTheSdkSendsTheRequest:
    def test_the_request_is_the_sdks_with_the_documented_body(self) -> None:
        """The request comes from AsyncOpenAI (its user agent, its retries off) and carries
        model, messages, stream, stream_options, tools and the options."""
        seen: list[httpx.Request] = []

        def handler(request: httpx.Request) -> httpx.Response:
            seen.append(request)
            return ok(sse(finish("stop")))

        model = model_with(handler, options={"temperature": 0.1, "top_k": 5})
        spec = {"name": "lookup", "description": "Look up.", "parameters": {"type": "object"}}
        items(model, request(tools=(spec,)))
        sent = seen[0]
        assert sent.headers["user-agent"].startswith("AsyncOpenAI/Python")
        assert sent.headers["x-stainless-retry-count"] == "0"
        assert sent.headers["authorization"] == f"Bearer {SECRET}"
        assert json.loads(sent.content) == {
            "model": "gpt-test",
            "messages": [{"role": "user", "content": "hi"}],
            "stream": True,
            "stream_options": {"include_usage": True},
            "tools": [{"type": "function", "function": spec}],
            "temperature": 0.1,
            "top_k": 5,
        }

    def test_organization_and_project_from_the_environment_are_not_sent(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """OPENAI_ORG_ID and OPENAI_PROJECT_ID (read by the SDK) never reach the server."""
        monkeypatch.setenv("OPENAI_ORG_ID", "org-private")
        monkeypatch.setenv("OPENAI_PROJECT_ID", "proj-private")
        seen: list[httpx.Request] = []

        def handler(request: httpx.Request) -> httpx.Response:
            seen.append(request)
            return ok(sse(finish("stop")))

        items(model_with(handler))
        assert "openai-organization" not in seen[0].headers
        assert "openai-project" not in seen[0].headers
        assert "private" not in str(seen[0].headers)

    def test_a_rate_limit_is_asked_once(self) -> None:
        """The SDK's own retries are off: a 429 is one request, the retry is the runtime's."""
        seen: list[httpx.Request] = []

        def handler(request: httpx.Request) -> httpx.Response:
            seen.append(request)
            return httpx.Response(429, headers={"retry-after": "2"}, json={"error": {}})

        err = failure(model_with(handler))
        assert len(seen) == 1
        assert (err.retryable, err.retry_after) == (True, 2.0)

    def test_a_transport_that_is_not_httpx_is_refused(self) -> None:
        """transport= takes an httpx transport; anything else is InvalidInput naming it."""
        with pytest.raises(InvalidInput, match="transport must be an httpx"):
            OpenAIChatModel("m", api_key=SECRET, transport=object())  # type: ignore[arg-type]


class TestSdkErrorsAreTyped:
    def test_openai_context_length_exceeded_is_context_too_long(self) -> None:
        """A 400 with code context_length_exceeded is ContextTooLong, naming compaction."""
        err = failure(
            refusing(
                400,
                {
                    "message": "This model's maximum context length is 8192 tokens",
                    "code": ("context_length_exceeded"),
                },
            )
        )
        assert isinstance(err, ContextTooLong)
        assert "compaction" in str(err)
        assert not err.retryable

    def test_llama_cpp_context_size_error_is_context_too_long(self) -> None:
        """llama.cpp's 400 exceed_context_size_error is ContextTooLong too."""
        err = failure(
            refusing(
                400,
                {
                    "code": 400,
                    "message": "the request exceeds the available context size",
                    "type": "exceed_context_size_error",
                },
            )
        )
        assert isinstance(err, ContextTooLong)

    def test_an_overload_error_inside_the_stream_is_retryable(self) -> None:
        """An error chunk coded server_is_overloaded before any reply text may be retried."""
        body = sse({"error": {"message": "busy", "code": "server_is_overloaded"}})
        err = failure(replying(body))
        assert err.retryable
        assert "busy" in str(err)

    def test_an_authentication_error_names_the_key_without_quoting_it(self) -> None:
        """A 401 says to check OPENAI_API_KEY and keeps the key it echoes out."""
        err = failure(refusing(401, {"message": f"Incorrect API key {SECRET}"}))
        assert "check the API key (OPENAI_API_KEY)" in str(err)
        assert SECRET not in str(err)
        assert not err.retryable

    def test_a_timeout_is_a_retryable_connection_error(self) -> None:
        """A read timeout (the SDK's APITimeoutError) is retryable and names the timeout."""

        def handler(request: httpx.Request) -> httpx.Response:
            raise httpx.ReadTimeout("timed out", request=request)

        err = failure(model_with(handler))
        assert err.retryable
        assert "ReadTimeout" in str(err)

    def test_context_too_long_fails_the_turn_with_its_stop_reason(self, tmp_path: Path) -> None:
        """Through the runtime the turn fails at once with stop_reason context_overflow."""
        model = refusing(400, {"message": "too long", "code": "context_length_exceeded"})
        agent = nb.Agent(name="C", agent_id="c", model=model)
        with nb.Runtime(agent, store=f"sqlite:///{tmp_path / 's.sqlite'}") as runtime:
            outcome = runtime.session("s").run("hello")
        assert outcome.status == "failed"
        assert outcome.stop_reason == "context_overflow"
        assert "compaction" in (outcome.error or "")


class TestReasoningStreams:
    def test_reasoning_content_streams_as_its_own_kind(self) -> None:
        """delta.reasoning_content (DeepSeek, vLLM, llama.cpp) becomes ReasoningDelta, never
        reply text."""
        body = sse(
            delta(reasoning_content="Let me "),
            delta(reasoning_content="think."),
            delta(content="Paris."),
            finish("stop"),
            usage(5, 4),
        )
        assert items(replying(body)) == [
            ReasoningDelta("Let me "),
            ReasoningDelta("think."),
            TextDelta("Paris."),
            Usage(5, 4),
            Finish("stop"),
        ]

    def test_reasoning_is_recorded_on_the_message_and_not_sent_back(self) -> None:
        """The reply's reasoning is a part of the completion; the next request leaves it out
        (those servers refuse it in a request)."""
        seen: list[httpx.Request] = []

        def handler(request: httpx.Request) -> httpx.Response:
            seen.append(request)
            return ok(sse(delta(reasoning="hmm"), delta(content="ok"), finish("stop")))

        model = model_with(handler)
        done = asyncio.run(model.complete(request()))
        assert done.text == "ok"
        assert [part.text for part in done.reasoning] == ["hmm"]
        after = Message(id="a", role="assistant", text="ok", reasoning=done.reasoning)
        items(model, request(Message(id="u", role="user", text="hi"), after))
        sent = json.loads(seen[1].content)["messages"]
        assert sent[1] == {"role": "assistant", "content": "ok"}


class _Stream(httpx.AsyncByteStream):
    """A response body that yields its pieces with a pause between, and records its close."""

    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = pieces
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in self.pieces:
            yield piece
            await asyncio.sleep(0.01)

    async def aclose(self) -> None:
        self.closed = True


class TestInterruption:
    def test_leaving_the_stream_early_closes_the_response(self) -> None:
        """A consumer that stops after the first piece (an interrupt) closes the response."""
        body = _Stream([sse(delta(content=f"w{n} "), done=False) for n in range(50)])

        def handler(request: httpx.Request) -> httpx.Response:
            return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=body)

        model = model_with(handler)

        async def first() -> Any:
            stream = model.stream(request())
            try:
                return await anext(aiter(stream))
            finally:
                await stream.aclose()  # type: ignore[attr-defined]

        assert asyncio.run(first()) == TextDelta("w0 ")
        assert body.closed

    def test_a_cancelled_call_closes_the_response(self) -> None:
        """Cancelling the task that reads the stream closes the response and raises no
        ModelError."""
        body = _Stream([sse(delta(content="x"), done=False)] * 500)

        def handler(request: httpx.Request) -> httpx.Response:
            return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=body)

        model = model_with(handler)
        got: list[Any] = []

        async def read() -> None:
            async for item in model.stream(request()):
                got.append(item)

        async def main() -> None:
            task = asyncio.create_task(read())
            while not got:
                await asyncio.sleep(0.005)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(main())
        assert body.closed


class TestLongBodiesOfWrongAnswers:
    def test_a_huge_non_stream_answer_is_read_only_in_part(self) -> None:
        """A 200 that is no event stream is quoted from its first bytes only."""
        big = {"error": {"message": "x" * 500_000}}
        err = failure(model_with(lambda r: httpx.Response(200, json=big)))
        assert "instead of an event stream" in str(err)
        assert len(str(err)) < 1000
        assert not isinstance(err, ContextTooLong)
        assert isinstance(err, ModelError)


def test_request_options_reach_the_sdk_unchanged() -> None:
    """A request's own options (here a llama.cpp-only field) go into the body as given."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return ok(sse(finish("stop")))

    req = ModelRequest(messages=request().messages, options={"cache_prompt": True, "seed": 3})
    items(model_with(handler), req)
    body = json.loads(seen[0].content)
    assert (body["cache_prompt"], body["seed"]) == (True, 3)
