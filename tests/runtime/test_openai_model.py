"""OpenAIChatModel through httpx.MockTransport: SSE parsing, request shape, errors, key hygiene."""

from __future__ import annotations

import asyncio
import base64
import email.utils
import importlib
import json
import re
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import httpx
import pytest

import agentnb as nb
from agentnb.errors import InvalidInput, install_hint
from agentnb.events import Message, ToolCallData, canonical_json
from agentnb.models import (
    Finish,
    ModelError,
    ModelRequest,
    StreamItem,
    TextDelta,
    ToolCallDelta,
    Usage,
    count_tokens_with,
    estimate_tokens,
)
from agentnb.models.openai import MAX_ERROR_TEXT, OpenAIChatModel

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


def ok(body: bytes, **headers: str) -> httpx.Response:
    """A 200 event-stream response with ``body``."""
    return httpx.Response(
        200, headers={"content-type": "text/event-stream", **headers}, content=body
    )


def model_with(
    handler: Callable[[httpx.Request], httpx.Response], **kwargs: Any
) -> OpenAIChatModel:
    kwargs.setdefault("api_key", SECRET)
    return OpenAIChatModel("gpt-test", transport=httpx.MockTransport(handler), **kwargs)


def replying(body: bytes, seen: list[httpx.Request] | None = None) -> OpenAIChatModel:
    def handler(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(request)
        return ok(body)

    return model_with(handler)


def request(*messages: Message, tools: tuple[dict[str, Any], ...] = ()) -> ModelRequest:
    return ModelRequest(
        messages=messages or (Message(id="m1", role="user", text="hi"),), tools=tools
    )


def items(model: OpenAIChatModel, req: ModelRequest | None = None) -> list[StreamItem]:
    async def collect() -> list[StreamItem]:
        return [item async for item in model.stream(req or request())]

    return asyncio.run(collect())


def pieces(out: list[Any]) -> list[Any]:
    """The stream without the usage the adapter estimated (the server sent none)."""
    return [item for item in out if not (isinstance(item, Usage) and item.estimated)]


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

    def test_a_stream_without_usage_gets_an_estimated_one(self) -> None:
        """A server that sends no usage (llama.cpp): the adapter counts, marked estimated."""
        out = items(replying(sse(delta(content="x"), finish("length"))))
        assert out[0] == TextDelta("x")
        assert out[2] == Finish("length")
        usage = out[1]
        assert isinstance(usage, Usage)
        assert usage.estimated
        assert usage.output_tokens == 1
        assert usage.input_tokens > 0

    def test_comments_and_blank_lines_are_ignored(self) -> None:
        """SSE comments, event fields and keep-alive lines are skipped."""
        body = b": keep-alive\n\nevent: message\n" + sse(delta(content="ok"), finish("stop"))
        assert items(replying(body))[0] == TextDelta("ok")

    def test_stream_cut_short_before_output_is_retryable(self) -> None:
        """A stream that ends without [DONE] or a finish reason, before any reply text, raises a
        retryable error."""
        with pytest.raises(ModelError, match="ended before the reply was complete") as info:
            items(replying(sse(delta(role="assistant", content=""), done=False)))
        assert info.value.retryable

    def test_stream_cut_short_after_output_is_not_retryable(self) -> None:
        """A stream that ends early after some reply text raises a non-retryable error that
        says part of the reply was streamed."""
        with pytest.raises(ModelError, match="ended before the reply was complete") as info:
            items(replying(sse(delta(content="par"), done=False)))
        assert not info.value.retryable
        assert "after part of it was streamed" in str(info.value)
        assert info.value.retry_after is None

    def test_error_after_output_is_not_retryable(self) -> None:
        """A retryable-looking failure after a tool-call fragment was streamed is not
        retryable."""
        body = sse(
            delta(tool_calls=[{"index": 0, "id": "c", "function": {"name": "lookup"}}]),
            {"error": {"message": "overloaded"}},
        )

        def handler(request: httpx.Request) -> httpx.Response:
            return ok(body)

        with pytest.raises(ModelError, match="overloaded") as info:
            items(model_with(handler))
        assert not info.value.retryable

    def test_error_event_raises_its_message(self) -> None:
        """An SSE 'event: error' raises ModelError with the message of its data."""
        body = b'event: error\ndata: {"error": {"message": "quota gone"}}\n\n'
        with pytest.raises(ModelError, match="reported: quota gone"):
            items(replying(body))

    def test_events_after_done_are_ignored(self) -> None:
        """Anything after [DONE] is read past, not turned into reply pieces."""
        body = sse(delta(content="a"), finish("stop")) + sse(delta(content="late"), done=False)
        assert pieces(items(replying(body))) == [TextDelta("a"), Finish("stop")]

    def test_keep_alive_events_without_data_are_skipped(self) -> None:
        """An event whose data is empty (a keep-alive) yields nothing."""
        body = b"data:\n\n" + sse(delta(content="ok"), finish("stop"))
        assert pieces(items(replying(body))) == [TextDelta("ok"), Finish("stop")]

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
            return ok(sse(finish("stop")))

        items(OpenAIChatModel("m", transport=httpx.MockTransport(handler)))
        assert seen[0].headers["authorization"] == "Bearer sk-from-env"

    def test_no_key_sends_no_authorization(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Without any key (local servers) no Authorization header is sent."""
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
        seen: list[httpx.Request] = []

        def handler(request: httpx.Request) -> httpx.Response:
            seen.append(request)
            return ok(sse(finish("stop")))

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
        monkeypatch.delitem(sys.modules, "agentnb.models.openai")
        with pytest.raises(ImportError, match=re.escape(install_hint("openai"))):
            importlib.import_module("agentnb.models.openai")

    def test_missing_openai_sdk_gives_install_hint(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Without the openai SDK, importing the adapter names it and the extra to install."""
        monkeypatch.setitem(sys.modules, "openai", None)
        monkeypatch.delitem(sys.modules, "agentnb.models.openai")
        with pytest.raises(ImportError, match="openai: " + re.escape(install_hint("openai"))):
            importlib.import_module("agentnb.models.openai")


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
            return ok(sse(finish("stop")))

        items(model_with(handler, api_key=SECRET + end))
        assert seen[0].headers["authorization"] == f"Bearer {SECRET}"

    def test_environment_key_is_stripped(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """OPENAI_API_KEY with a trailing newline is sent without it."""
        monkeypatch.setenv("OPENAI_API_KEY", SECRET + "\n")
        seen: list[httpx.Request] = []

        def handler(request: httpx.Request) -> httpx.Response:
            seen.append(request)
            return ok(sse(finish("stop")))

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
            return ok(sse(finish("stop")))

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


class TestNotAnEventStream:
    def test_json_answer_is_a_clear_error(self) -> None:
        """A 200 answer that is JSON instead of an event stream raises a non-retryable error
        naming the content type and the server's message."""
        model = model_with(lambda r: httpx.Response(200, json={"error": {"message": "no"}}))
        err = failure(model)
        assert "content-type 'application/json' instead of an event stream" in str(err)
        assert "no" in str(err)
        assert not err.retryable

    def test_missing_content_type_is_a_clear_error(self) -> None:
        """A 200 answer without a content type is refused with the same advice."""
        err = failure(model_with(lambda r: httpx.Response(200, content=sse(finish("stop")))))
        assert "content-type 'none'" in str(err)
        assert "supports streaming" in str(err)


def tool_spec() -> dict[str, Any]:
    return {"name": "lookup", "description": "Look up.", "parameters": {"type": "object"}}


def sent_body(req: ModelRequest, **kwargs: Any) -> dict[str, Any]:
    """The JSON body a model made with ``kwargs`` posts for ``req``."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return ok(sse(finish("stop")))

    items(model_with(handler, **kwargs), req)
    body: dict[str, Any] = json.loads(seen[0].content)
    return body


class TestRequestOptions:
    def test_constructor_options_are_sent(self) -> None:
        """tool_choice, parallel_tool_calls and response_format given to the constructor are
        sent with a request that has tools."""
        body = sent_body(
            request(tools=(tool_spec(),)),
            tool_choice="required",
            parallel_tool_calls=False,
            response_format={"type": "json_object"},
        )
        assert body["tool_choice"] == "required"
        assert body["parallel_tool_calls"] is False
        assert body["response_format"] == {"type": "json_object"}

    def test_tool_options_are_left_out_without_tools(self) -> None:
        """A request without tools carries neither tool_choice nor parallel_tool_calls (the
        API refuses them), but keeps response_format."""
        body = sent_body(
            request(),
            tool_choice={"type": "function", "function": {"name": "lookup"}},
            parallel_tool_calls=True,
            response_format={"type": "json_object"},
        )
        assert "tool_choice" not in body
        assert "parallel_tool_calls" not in body
        assert body["response_format"] == {"type": "json_object"}

    def test_request_options_override_constructor_options(self) -> None:
        """ModelRequest.options set or remove (None) the constructor's choices per call."""
        req = ModelRequest(
            messages=request().messages,
            tools=(tool_spec(),),
            options={"tool_choice": "none", "response_format": {"type": "text"}},
        )
        body = sent_body(req, tool_choice="auto")
        assert body["tool_choice"] == "none"
        assert body["response_format"] == {"type": "text"}

    @pytest.mark.parametrize(
        ("argument", "value"),
        [
            ("tool_choice", "sometimes"),
            ("tool_choice", 3),
            ("tool_choice", ["auto"]),
            ("parallel_tool_calls", "yes"),
            ("response_format", "json"),
            ("response_format", {"schema": {}}),
            ("options", [("temperature", 1)]),
            ("timeout", 0),
            ("timeout", float("nan")),
            ("timeout", True),
            ("context_window", 0),
            ("context_window", 1.5),
            ("tokenizer", "tiktoken"),
            ("backoff", 2.0),
            ("name", ""),
        ],
    )
    def test_bad_constructor_arguments_are_refused(self, argument: str, value: Any) -> None:
        """A constructor argument of the wrong kind raises InvalidInput naming it."""
        with pytest.raises(InvalidInput, match=argument):
            OpenAIChatModel("gpt-test", api_key=SECRET, **{argument: value})


def usage_with(**details: Any) -> dict[str, Any]:
    return {"choices": [], "usage": {"prompt_tokens": 50, "completion_tokens": 20, **details}}


class TestUsageDetails:
    def test_cached_and_reasoning_tokens_are_recorded(self) -> None:
        """prompt_tokens_details.cached_tokens and completion_tokens_details.reasoning_tokens
        become Usage.cached_tokens and Usage.reasoning_tokens."""
        body = sse(
            finish("stop"),
            usage_with(
                prompt_tokens_details={"cached_tokens": 32},
                completion_tokens_details={"reasoning_tokens": 12},
            ),
        )
        assert items(replying(body))[0] == Usage(50, 20, cached_tokens=32, reasoning_tokens=12)

    def test_details_not_reported_are_none(self) -> None:
        """Without the detail objects the extra counts are None."""
        assert items(replying(sse(finish("stop"), usage_with())))[0] == Usage(50, 20)

    def test_malformed_counts_are_ignored(self) -> None:
        """Counts that are not non-negative integers are left out rather than failing."""
        body = sse(
            finish("stop"),
            {
                "choices": [],
                "usage": {
                    "prompt_tokens": "many",
                    "completion_tokens": 3,
                    "prompt_tokens_details": {"cached_tokens": -1},
                    "completion_tokens_details": "n/a",
                },
            },
        )
        assert items(replying(body))[0] == Usage(0, 3)

    def test_usage_is_asked_for(self) -> None:
        """Every request asks for usage in the stream."""
        body = sent_body(request())
        assert body["stream_options"] == {"include_usage": True}


def answering(status: int, **headers: str) -> OpenAIChatModel:
    return model_with(
        lambda r: httpx.Response(status, headers=headers, json={"error": {"message": "wait"}})
    )


class TestRetryAfter:
    def test_seconds(self) -> None:
        """Retry-After in seconds becomes ModelError.retry_after."""
        err = failure(answering(429, **{"retry-after": "7"}))
        assert err.retryable
        assert err.retry_after == 7.0

    def test_milliseconds_header_wins(self) -> None:
        """retry-after-ms, when present, is used before Retry-After."""
        err = failure(answering(429, **{"retry-after-ms": "1500", "retry-after": "9"}))
        assert err.retry_after == 1.5

    def test_http_date_in_the_past_means_now(self) -> None:
        """A Retry-After date already past gives a wait of 0 seconds."""
        err = failure(answering(503, **{"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}))
        assert err.retry_after == 0.0

    def test_http_date_in_the_future(self) -> None:
        """A Retry-After date a day ahead gives about a day in seconds."""
        when = email.utils.formatdate(time.time() + 86_400, usegmt=True)
        err = failure(answering(503, **{"retry-after": when}))
        assert err.retry_after is not None
        assert 86_000 < err.retry_after <= 86_400

    @pytest.mark.parametrize("value", ["soon", "-5", "nan", "inf", ""])
    def test_unreadable_values_are_ignored(self, value: str) -> None:
        """A Retry-After that is no number of seconds and no date leaves retry_after None."""
        err = failure(answering(429, **{"retry-after": value}))
        assert err.retryable
        assert err.retry_after is None

    def test_not_set_on_errors_that_are_not_retried(self) -> None:
        """A 400 with Retry-After is still not retryable, and carries no retry_after."""
        err = failure(answering(400, **{"retry-after": "3"}))
        assert not err.retryable
        assert err.retry_after is None

    @pytest.mark.parametrize(
        ("status", "header", "retryable"), [(400, "true", True), (503, "false", False)]
    )
    def test_x_should_retry_decides(self, status: int, header: str, retryable: bool) -> None:
        """The server's x-should-retry header overrides the status code's rule."""
        assert failure(answering(status, **{"x-should-retry": header})).retryable is retryable


def messages(*texts: str) -> list[Message]:
    return [Message(id=f"m{i}", role="user", text=t) for i, t in enumerate(texts)]


def fake_bpe_openai() -> types.ModuleType:
    """A stand-in for the bpe-openai package: one token per word, encoding names recorded."""
    module = types.ModuleType("bpe_openai")
    module.loaded = []  # type: ignore[attr-defined]

    class Encoding:
        def __init__(self, name: str) -> None:
            self.name = name

        def encode_ordinary(self, text: str) -> list[int]:
            return [0] * len(text.split())

    def get_encoding(name: str) -> Encoding:
        module.loaded.append(name)  # type: ignore[attr-defined]
        return Encoding(name)

    module.get_encoding = get_encoding  # type: ignore[attr-defined]
    return module


class TestTokenCounting:
    def test_without_tokenizer_it_is_the_ports_estimate(self) -> None:
        """tokenizer=None counts with estimate_tokens, tools included."""
        model = OpenAIChatModel("gpt-4o", api_key=SECRET, tokenizer=None)
        msgs = messages("hello there", "x" * 400)
        assert model.encoding is None
        assert model.count_tokens(msgs, [tool_spec()]) == estimate_tokens(msgs, [tool_spec()])
        assert model.count_tokens(msgs, [tool_spec()]) > model.count_tokens(msgs)

    def test_custom_tokenizer_counts_each_text(self) -> None:
        """A tokenizer function counts every piece of text, inside the port's framing."""

        def words(text: str) -> int:
            return len(text.split())

        model = OpenAIChatModel("local", api_key=SECRET, tokenizer=words)
        msgs = messages("one two three")
        assert model.encoding == "custom"
        assert model.count_tokens(msgs) == count_tokens_with(words, msgs)

    def test_tokenizer_returning_no_count_is_refused(self) -> None:
        """A tokenizer returning something other than an int >= 0 raises InvalidInput."""
        model = OpenAIChatModel("local", api_key=SECRET, tokenizer=lambda text: "many")  # type: ignore[arg-type,return-value]
        with pytest.raises(InvalidInput, match="tokenizer returned 'many'"):
            model.count_tokens(messages("hi"))

    @pytest.mark.parametrize(
        ("model_name", "encoding"),
        [
            ("gpt-4o-mini", "o200k_base"),
            ("gpt-5", "o200k_base"),
            ("o3-mini", "o200k_base"),
            ("openai/gpt-4.1", "o200k_base"),
            ("gpt-4-turbo", "cl100k_base"),
            ("gpt-3.5-turbo", "cl100k_base"),
        ],
    )
    def test_auto_uses_bpe_openai_for_openai_families(
        self, monkeypatch: pytest.MonkeyPatch, model_name: str, encoding: str
    ) -> None:
        """With bpe-openai installed, "auto" counts with the encoding of the model's family."""
        fake = fake_bpe_openai()
        monkeypatch.setitem(sys.modules, "bpe_openai", fake)
        model = OpenAIChatModel(model_name, api_key=SECRET)
        msgs = messages("one two three")
        assert model.encoding == encoding
        assert model.count_tokens(msgs) == count_tokens_with(lambda t: len(t.split()), msgs)
        assert fake.loaded == [encoding]  # type: ignore[attr-defined]

    def test_auto_loads_an_encoding_once(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Two models of one family share the encoding loaded for the first."""
        fake = fake_bpe_openai()
        monkeypatch.setitem(sys.modules, "bpe_openai", fake)
        for name in ("gpt-4o", "gpt-4o-mini"):
            OpenAIChatModel(name, api_key=SECRET).count_tokens(messages("hi"))
        assert fake.loaded == ["o200k_base"]  # type: ignore[attr-defined]

    def test_auto_estimates_for_other_models(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """A model outside the OpenAI families (a local Llama) is estimated."""
        monkeypatch.setitem(sys.modules, "bpe_openai", fake_bpe_openai())
        model = OpenAIChatModel("llama-3.1-8b", api_key=SECRET)
        assert model.encoding is None
        assert model.count_tokens(messages("a b")) == estimate_tokens(messages("a b"))

    def test_auto_estimates_without_bpe_openai(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Without bpe-openai installed, "auto" falls back to the estimate."""
        monkeypatch.setitem(sys.modules, "bpe_openai", None)
        model = OpenAIChatModel("gpt-4o", api_key=SECRET)
        assert model.encoding is None
        assert model.count_tokens(messages("a b")) == estimate_tokens(messages("a b"))

    def test_real_bpe_openai_counts_offline(self) -> None:
        """The real bpe-openai package (when installed) counts o200k tokens with no network."""
        pytest.importorskip("bpe_openai")
        model = OpenAIChatModel("gpt-4o", api_key=SECRET)
        assert model.encoding == "o200k_base"
        # "hello world" is 2 tokens in o200k_base; role "user" 1; framing 3 + 3.
        assert model.count_tokens(messages("hello world")) == 3 + 1 + 2 + 3

    def test_reported_usage_scales_the_estimate_up(self) -> None:
        """After the server reports more prompt tokens than estimated, the estimate follows."""
        req = request()
        estimate = estimate_tokens(req.messages)
        model = model_with(
            lambda r: ok(sse(finish("stop"), usage(estimate * 2, 1))), tokenizer=None
        )
        items(model, req)
        assert model.count_tokens(req.messages) == estimate * 2

    def test_reported_usage_never_scales_down(self) -> None:
        """A server counting fewer tokens than the estimate leaves the estimate as it is."""
        req = request()
        model = model_with(lambda r: ok(sse(finish("stop"), usage(1, 1))), tokenizer=None)
        items(model, req)
        assert model.count_tokens(req.messages) == estimate_tokens(req.messages)

    def test_bad_messages_are_refused(self) -> None:
        """Counting something that is not a list of Message raises InvalidInput."""
        model = OpenAIChatModel("m", api_key=SECRET, tokenizer=None)
        with pytest.raises(InvalidInput, match="messages"):
            model.count_tokens("hello")  # type: ignore[arg-type]


class TestContextWindow:
    def test_context_window_is_reported(self) -> None:
        """context_window is the value given, None by default."""
        assert OpenAIChatModel("m", api_key=SECRET, context_window=128_000).context_window == (
            128_000
        )
        assert OpenAIChatModel("m", api_key=SECRET).context_window is None
