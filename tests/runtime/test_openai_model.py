"""OpenAIChatModel through httpx.MockTransport: SSE parsing, request shape, errors, key hygiene."""

from __future__ import annotations

import asyncio
import base64
import importlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import httpx
import pytest

import agentnb as nb
from agentnb.errors import InvalidInput
from agentnb.events import Message, ToolCallData, canonical_json
from agentnb.runtime.models import (
    Finish,
    ModelError,
    ModelRequest,
    StreamItem,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from agentnb.runtime.models.openai import MAX_ERROR_TEXT, OpenAIChatModel

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


def echoing(status: int, text: str, **kwargs: Any) -> OpenAIChatModel:
    """A model whose server answers ``status`` with ``text`` as its error message."""
    return model_with(lambda r: httpx.Response(status, json={"error": {"message": text}}), **kwargs)


def failure(model: OpenAIChatModel) -> ModelError:
    with pytest.raises(ModelError) as info:
        items(model)
    return info.value


class TestKeyFromAFile:
    @pytest.mark.parametrize("end", ["\n", "\r\n", "\r", " \n"])
    def test_trailing_newline_is_stripped(self, end: str) -> None:
        """A key ending in a newline (read from a file) is sent without it."""
        seen: list[httpx.Request] = []

        def handler(request: httpx.Request) -> httpx.Response:
            seen.append(request)
            return httpx.Response(200, content=sse(finish("stop")))

        items(model_with(handler, api_key=SECRET + end))
        assert seen[0].headers["authorization"] == f"Bearer {SECRET}"

    def test_environment_key_is_stripped(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """OPENAI_API_KEY with a trailing newline is sent without it."""
        monkeypatch.setenv("OPENAI_API_KEY", SECRET + "\n")
        seen: list[httpx.Request] = []

        def handler(request: httpx.Request) -> httpx.Response:
            seen.append(request)
            return httpx.Response(200, content=sse(finish("stop")))

        items(OpenAIChatModel("m", transport=httpx.MockTransport(handler)))
        assert seen[0].headers["authorization"] == f"Bearer {SECRET}"

    @pytest.mark.parametrize(
        "bad", ["sk-ab\ncd-0123456789", "sk-ab cd-0123456789", "sk-abä-bcd-01234"]
    )
    def test_key_that_cannot_be_a_header_is_refused_without_quoting_it(self, bad: str) -> None:
        """A key with an inner control, space or non-ASCII character raises InvalidInput
        that names the position but not the key."""
        with pytest.raises(InvalidInput, match="position 5") as info:
            OpenAIChatModel("m", api_key=bad)
        assert "cd-0123" not in str(info.value)
        assert "bcd-01234" not in str(info.value)


class TestRedaction:
    def test_escaped_forms_of_the_key_are_redacted(self) -> None:
        """The key echoed raw, repr-escaped, JSON-escaped, bytes-escaped or percent-escaped
        never reaches the error."""
        key = 'sk-"quote\\back/slash+plus=0123'
        forms = [
            key,
            repr(key)[1:-1],
            json.dumps(key)[1:-1],
            repr(key.encode())[2:-1],
            quote(key, safe=""),
            quote_plus(key),
        ]
        err = failure(echoing(400, " | ".join(forms), api_key=key))
        for part in ("quote", "back", "slash", "plus"):
            assert part not in str(err)
        assert str(err).count("***") >= len(forms)

    def test_redaction_comes_before_cutting_a_long_message(self) -> None:
        """A server that echoes the key late in a long message leaves no prefix of it."""
        err = failure(echoing(401, "x" * 280 + f" Bearer {SECRET} rest"))
        assert "sk-test" not in str(err)
        assert "SECRET" not in str(err)

    def test_echoed_prefix_of_the_key_is_redacted(self) -> None:
        """A server that echoes only the start of the key (its own cut) leaves none of it."""
        err = failure(echoing(401, f"invalid key {SECRET[:14]}..."))
        assert SECRET[:10] not in str(err)

    def test_long_messages_are_cut(self) -> None:
        """An error quoting a huge server answer is cut to a bounded length."""
        err = failure(echoing(500, "y" * 50_000))
        assert len(str(err)) <= MAX_ERROR_TEXT

    def test_any_other_failure_becomes_a_redacted_model_error(self) -> None:
        """An unexpected exception inside the call leaves as a ModelError with the key
        redacted and no chained original."""

        def handler(request: httpx.Request) -> httpx.Response:
            raise RuntimeError(f"boom {request.headers['authorization']!r}")

        err = failure(model_with(handler))
        assert "RuntimeError" in str(err)
        assert SECRET not in str(err)
        assert err.__cause__ is None
        assert err.__context__ is None

    def test_malformed_chunk_becomes_a_model_error(self) -> None:
        """A chunk the adapter cannot read (a tool-call index that is not a number) raises
        ModelError, not ValueError."""
        body = sse(delta(tool_calls=[{"index": "first", "function": {"name": "x"}}]))
        err = failure(replying(body))
        assert "ValueError" in str(err)

    def test_transport_error_has_no_context(self) -> None:
        """A connection error leaves with neither cause nor context (either could quote the
        key in a traceback)."""

        def handler(request: httpx.Request) -> httpx.Response:
            raise httpx.ConnectError(f"refused {request.headers['authorization']}")

        err = failure(model_with(handler))
        assert err.retryable
        assert err.__context__ is None
        assert SECRET not in str(err)


USER, PASSWORD = "alice-user", "p@ss-w0rd-SECRET"
CREDENTIALED = f"https://{USER}:{quote(PASSWORD, safe='')}@llm.example/v1"


class TestBaseUrlCredentials:
    def test_credentials_are_not_in_repr_or_attributes(self) -> None:
        """repr, str, base_url and vars() show the endpoint with ***@ instead of userinfo."""
        model = OpenAIChatModel("m", base_url=CREDENTIALED, api_key=SECRET)
        for text in (repr(model), str(model), model.base_url, repr(vars(model))):
            assert "SECRET" not in text
            assert USER not in text
        assert model.base_url == "https://***@llm.example/v1"

    def test_credentials_are_sent_as_basic_auth_not_in_the_url(self) -> None:
        """The request goes to the URL without userinfo, with a basic Authorization header."""
        seen: list[httpx.Request] = []

        def handler(request: httpx.Request) -> httpx.Response:
            seen.append(request)
            return httpx.Response(200, content=sse(finish("stop")))

        items(
            OpenAIChatModel(
                "m", base_url=CREDENTIALED, api_key=None, transport=httpx.MockTransport(handler)
            )
        )
        assert str(seen[0].url) == "https://llm.example/v1/chat/completions"
        token = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        assert seen[0].headers["authorization"] == f"Basic {token}"

    def test_credentials_are_redacted_from_errors(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """A server echoing the password (plain, escaped, or the basic token) or the URL with
        userinfo leaves none of it in the error."""
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
        token = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        text = f"{CREDENTIALED} {PASSWORD} {quote(PASSWORD)} Basic {token}"
        err = failure(echoing(401, text, api_key=None, base_url=CREDENTIALED))
        assert "SECRET" not in str(err)
        assert token not in str(err)

    def test_bad_url_error_hides_credentials(self) -> None:
        """A refused base_url is quoted with its userinfo masked."""
        with pytest.raises(InvalidInput) as info:
            OpenAIChatModel("m", base_url=f"ftp://{USER}:{PASSWORD}@host/")
        assert "SECRET" not in str(info.value)


class TestRunErrorHasNoKey:
    def test_failed_run_error_and_log_have_no_key(self, tmp_path: Path) -> None:
        """A run failed by a server that echoes the key records an error (outcome, log)
        without it."""
        model = echoing(401, f"Illegal header value b'Bearer {SECRET}\\n'")
        agent = nb.Agent(name="K", agent_id="k", model=model, instructions="Be brief.")
        with nb.Runtime(agent, store=f"sqlite:///{tmp_path / 's.sqlite'}") as runtime:
            session = runtime.session("s", user_id="u")
            outcome = session.run("hello")
            assert outcome.status == "failed"
            assert outcome.error is not None
            assert "check the API key" in outcome.error
            assert SECRET[:10] not in outcome.error
            logged = "".join(canonical_json(e.payload) for e in session.log.scan())
        assert SECRET[:10] not in logged
        assert SECRET[:10].encode() not in (tmp_path / "s.sqlite").read_bytes()
