"""OpenAIChatModel through httpx.MockTransport: SSE parsing, request shape, errors, key hygiene."""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from agentnb.events import Message, ToolCallData
from agentnb.runtime.models import (
    Finish,
    ModelError,
    ModelRequest,
    StreamItem,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from agentnb.runtime.models.openai import OpenAIChatModel

SECRET = "sk-test-SECRET-0123456789"


def sse(*chunks: Any, done: bool = True) -> bytes:
    """A server-sent-events body with one data line per chunk."""
    lines = [f"data: {json.dumps(c)}\n\n" for c in chunks]
    if done:
        lines.append("data: [DONE]\n\n")
    return "".join(lines).encode()


def delta(**fields: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": fields, "finish_reason": None}]}


def finish(reason: str) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": {}, "finish_reason": reason}]}


def usage(prompt: int, completion: int) -> dict[str, Any]:
    return {"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion}}


def model_with(
    handler: Callable[[httpx.Request], httpx.Response], **kwargs: Any
) -> OpenAIChatModel:
    kwargs.setdefault("api_key", SECRET)
    return OpenAIChatModel("gpt-test", transport=httpx.MockTransport(handler), **kwargs)


def replying(body: bytes, seen: list[httpx.Request] | None = None) -> OpenAIChatModel:
    def handler(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(request)
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    return model_with(handler)


def request(*messages: Message, tools: tuple[dict[str, Any], ...] = ()) -> ModelRequest:
    return ModelRequest(
        messages=messages or (Message(id="m1", role="user", text="hi"),), tools=tools
    )


def items(model: OpenAIChatModel, req: ModelRequest | None = None) -> list[StreamItem]:
    async def collect() -> list[StreamItem]:
        return [item async for item in model.stream(req or request())]

    return asyncio.run(collect())


class TestStreaming:
    def test_text_stream(self) -> None:
        """Content deltas become TextDelta items, then Usage, then Finish."""
        body = sse(
            delta(role="assistant", content=""),
            delta(content="Hel"),
            delta(content="lo"),
            finish("stop"),
            usage(12, 3),
        )
        assert items(replying(body)) == [
            TextDelta("Hel"),
            TextDelta("lo"),
            Usage(input_tokens=12, output_tokens=3),
            Finish("stop"),
        ]

    def test_interleaved_tool_call_fragments(self) -> None:
        """Tool-call fragments keep their index, id and name and reassemble correctly."""
        body = sse(
            delta(tool_calls=[{"index": 0, "id": "call_a", "function": {"name": "lookup"}}]),
            delta(tool_calls=[{"index": 1, "id": "call_b", "function": {"name": "quote"}}]),
            delta(tool_calls=[{"index": 0, "function": {"arguments": '{"plan":'}}]),
            delta(tool_calls=[{"index": 1, "function": {"arguments": '{"vendor":"acme"}'}}]),
            delta(tool_calls=[{"index": 0, "function": {"arguments": '"pro"}'}}]),
            finish("tool_calls"),
            usage(20, 9),
        )
        out = items(replying(body))
        assert out[0] == ToolCallDelta(index=0, call_id="call_a", name="lookup")
        assert out[2] == ToolCallDelta(index=0, arguments_delta='{"plan":')
        result = asyncio.run(replying(body).complete(request()))
        assert result.tool_calls == [
            ToolCallData(call_id="call_a", name="lookup", arguments={"plan": "pro"}),
            ToolCallData(call_id="call_b", name="quote", arguments={"vendor": "acme"}),
        ]
        assert result.finish_reason == "tool_calls"
        assert result.usage == Usage(20, 9)

    def test_usage_is_optional(self) -> None:
        """A stream without usage ends with Finish only."""
        out = items(replying(sse(delta(content="x"), finish("length"))))
        assert out == [TextDelta("x"), Finish("length")]

    def test_comments_and_blank_lines_are_ignored(self) -> None:
        """SSE comments, event fields and keep-alive lines are skipped."""
        body = b": keep-alive\n\nevent: message\n" + sse(delta(content="ok"), finish("stop"))
        assert items(replying(body))[0] == TextDelta("ok")

    def test_stream_cut_short_is_retryable(self) -> None:
        """A stream that ends without [DONE] or a finish reason raises a retryable error."""
        with pytest.raises(ModelError, match="ended before the reply was complete") as info:
            items(replying(sse(delta(content="par"), done=False)))
        assert info.value.retryable

    def test_error_chunk_in_stream(self) -> None:
        """An error object inside the stream raises ModelError with its message."""
        body = sse(delta(content="a"), {"error": {"message": "overloaded"}})
        with pytest.raises(ModelError, match="overloaded"):
            items(replying(body))


class TestRequestShape:
    def test_body_headers_and_url(self) -> None:
        """The request posts a streaming chat body with tools and the bearer key."""
        seen: list[httpx.Request] = []
        model = replying(sse(finish("stop")), seen)
        model.options["temperature"] = 0.2
        spec = {"name": "lookup", "description": "Look up.", "parameters": {"type": "object"}}
        messages = (
            Message(id="s", role="system", text="Be brief."),
            Message(id="u", role="user", text="Price?"),
            Message(
                id="a",
                role="assistant",
                tool_calls=(ToolCallData(call_id="c1", name="lookup", arguments={"p": 1}),),
            ),
            Message(id="t", role="tool", text="42", call_id="c1", name="lookup"),
        )
        items(model, request(*messages, tools=(spec,)))
        sent = seen[0]
        assert str(sent.url) == "https://api.openai.com/v1/chat/completions"
        assert sent.headers["authorization"] == f"Bearer {SECRET}"
        body = json.loads(sent.content)
        assert body["model"] == "gpt-test"
        assert body["stream"] is True
        assert body["stream_options"] == {"include_usage": True}
        assert body["temperature"] == 0.2
        assert body["tools"] == [{"type": "function", "function": spec}]
        assert body["messages"] == [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Price?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "lookup", "arguments": '{"p":1}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "42"},
        ]

    def test_request_options_override_and_none_removes(self) -> None:
        """Request options override model options; an option set to None is left out."""
        seen: list[httpx.Request] = []
        model = replying(sse(finish("stop")), seen)
        model.options["temperature"] = 0.2
        req = ModelRequest(
            messages=request().messages, options={"temperature": 0.9, "stream_options": None}
        )
        items(model, req)
        body = json.loads(seen[0].content)
        assert body["temperature"] == 0.9
        assert "stream_options" not in body
        assert "tools" not in body

    def test_key_defaults_to_environment(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Without api_key, OPENAI_API_KEY from the environment is used."""
        monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
        seen: list[httpx.Request] = []

        def handler(request: httpx.Request) -> httpx.Response:
            seen.append(request)
            return httpx.Response(200, content=sse(finish("stop")))

        items(OpenAIChatModel("m", transport=httpx.MockTransport(handler)))
        assert seen[0].headers["authorization"] == "Bearer sk-from-env"

    def test_no_key_sends_no_authorization(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Without any key (local servers) no Authorization header is sent."""
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
        seen: list[httpx.Request] = []

        def handler(request: httpx.Request) -> httpx.Response:
            seen.append(request)
            return httpx.Response(200, content=sse(finish("stop")))

        model = OpenAIChatModel(
            "local", base_url="http://localhost:8000/v1/", transport=httpx.MockTransport(handler)
        )
        items(model)
        assert "authorization" not in seen[0].headers
        assert str(seen[0].url) == "http://localhost:8000/v1/chat/completions"


class TestErrors:
    @pytest.mark.parametrize("status", [429, 500, 502, 503])
    def test_rate_limits_and_server_errors_are_retryable(self, status: int) -> None:
        """429 and 5xx responses raise a retryable ModelError with the server's message."""
        model = model_with(
            lambda r: httpx.Response(status, json={"error": {"message": "try later"}})
        )
        with pytest.raises(ModelError, match=f"HTTP {status}: try later") as info:
            items(model)
        assert info.value.retryable

    @pytest.mark.parametrize("status", [400, 401, 404])
    def test_client_errors_are_not_retryable(self, status: int) -> None:
        """Other 4xx responses raise a non-retryable ModelError."""
        model = model_with(lambda r: httpx.Response(status, json={"error": {"message": "bad"}}))
        with pytest.raises(ModelError, match=f"HTTP {status}") as info:
            items(model)
        assert not info.value.retryable

    def test_connection_errors_are_retryable(self) -> None:
        """A failed connection raises a retryable ModelError."""

        def handler(request: httpx.Request) -> httpx.Response:
            raise httpx.ConnectError("refused", request=request)

        with pytest.raises(ModelError, match=r"connection to .* failed: ConnectError") as info:
            items(model_with(handler))
        assert info.value.retryable

    def test_non_json_chunk_is_an_error(self) -> None:
        """A data line that is not JSON raises a non-retryable ModelError."""
        with pytest.raises(ModelError, match="not JSON") as info:
            items(replying(b"data: {oops\n\n"))
        assert not info.value.retryable

    def test_missing_httpx_gives_install_hint(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Without httpx, importing the adapter says which extra to install."""
        monkeypatch.setitem(sys.modules, "httpx", None)
        monkeypatch.delitem(sys.modules, "agentnb.runtime.models.openai")
        with pytest.raises(ImportError, match=r'pip install "agentnb\[openai\]"'):
            importlib.import_module("agentnb.runtime.models.openai")


class TestKeyHygiene:
    def test_key_not_in_repr_or_str(self) -> None:
        """The API key appears in neither repr, str nor the instance's attributes' reprs."""
        model = OpenAIChatModel("gpt-test", api_key=SECRET)
        assert SECRET not in repr(model)
        assert SECRET not in str(model)
        assert SECRET not in repr(vars(model))

    def test_key_not_in_error_messages(self) -> None:
        """A server that echoes the key in its error body does not leak it into the error."""
        model = model_with(
            lambda r: httpx.Response(401, json={"error": {"message": f"bad key {SECRET}"}})
        )
        with pytest.raises(ModelError) as info:
            items(model)
        assert SECRET not in str(info.value)
        assert "***" in str(info.value)
        assert "check the API key" in str(info.value)

    def test_key_not_in_connection_errors(self) -> None:
        """Connection errors carry no key, even if the transport's message had it."""

        def handler(request: httpx.Request) -> httpx.Response:
            raise httpx.ConnectError(f"failed with {request.headers['authorization']}")

        with pytest.raises(ModelError) as info:
            items(model_with(handler))
        assert SECRET not in str(info.value)
        assert info.value.__cause__ is None
