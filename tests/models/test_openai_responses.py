"""OpenAIResponsesModel on the official SDK, against a fake Responses API on loopback uvicorn.

The fake refuses a reasoning item that comes back without (or with altered)
``encrypted_content`` when ``store=False``, as the real API does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

import agentnb as nb
from agentnb import analysis
from agentnb.events import Message
from agentnb.models import ContextTooLong, ModelError, ModelRequest
from agentnb.models.openai_responses import OpenAIResponsesModel
from tests.models.fakes import Failure, FakeProvider, Stream, responses_reply

KEY = "sk-proj-test-0123456789abcdefXYZ"
WAIT = 30.0
BLOB = "gAAAAABencrypted+/reasoning=="


@nb.tool
def lookup(city: str) -> str:
    """The weather in a city.

    Args:
        city: the city
    """
    return f"sunny in {city}"


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    server = FakeProvider()
    yield server
    server.close()


def _model(fake: FakeProvider, **options: Any) -> OpenAIResponsesModel:
    return OpenAIResponsesModel("gpt-fake", api_key=KEY, base_url=f"{fake.base_url}/v1", **options)


def _agent(model: nb.Model) -> nb.Agent:
    return nb.Agent(
        name="GPT", agent_id="gpt", model=model, tools=[lookup], instructions="Be brief."
    )


def _complete(model: nb.Model, request: ModelRequest) -> Any:
    async def call() -> Any:
        try:
            return await model.complete(request)
        finally:
            await model.aclose()

    return asyncio.run(call())


def _hi() -> ModelRequest:
    return ModelRequest(messages=(Message(id="m1", role="user", text="hi"),))


class TestReasoningRoundTrip:
    def test_reasoning_items_come_back_with_their_encrypted_content(
        self, fake: FakeProvider
    ) -> None:
        """store=False asks for encrypted reasoning and sends the item back unchanged."""
        fake.script(
            Stream(
                responses_reply(
                    reasoning=["First I look it up.", "Then I answer."],
                    encrypted=BLOB,
                    calls=[("call_1", "lookup", '{"city": "Rome"}')],
                )
            ),
            Stream(responses_reply(text="Sunny in Rome.")),
        )
        runtime = nb.Runtime(
            _agent(_model(fake, reasoning={"effort": "low", "summary": "auto"})),
            store="memory://",
        )
        try:
            session = runtime.session("s1")
            outcome = session.run("Rome?", timeout=WAIT)
            events = session.log.read_after(0, limit=1000)
        finally:
            runtime.close()
        assert outcome.status == "completed", outcome.error
        assert fake.refusals == []
        first, second = fake.requests
        assert first["store"] is False
        assert first["include"] == ["reasoning.encrypted_content"]
        assert first["instructions"] == "Be brief."
        assert first["reasoning"] == {"effort": "low", "summary": "auto"}
        assert second["input"][1] == {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [
                {"type": "summary_text", "text": "First I look it up."},
                {"type": "summary_text", "text": "Then I answer."},
            ],
            "encrypted_content": BLOB,
        }
        assert second["input"][2] == {
            "type": "function_call",
            "call_id": "call_1",
            "name": "lookup",
            "arguments": '{"city":"Rome"}',
        }
        assert second["input"][3] == {
            "type": "function_call_output",
            "call_id": "call_1",
            "output": "sunny in Rome",
        }
        message = next(e for e in events if e.type == "message/assistant").payload["message"]
        assert message["reasoning"][0]["text"] == "First I look it up.\n\nThen I answer."
        assert message["reasoning"][0]["data"] == BLOB

    def test_a_reasoning_item_without_its_content_is_what_the_api_refuses(
        self, fake: FakeProvider
    ) -> None:
        """The fake's check is real: an item with no encrypted_content is a 400 there."""
        fake.script(Stream(responses_reply(text="x")))
        model = _model(fake)
        part = nb.events.ReasoningPart(provider="openai", id="rs_9", text="t")
        request = ModelRequest(
            messages=(
                Message(id="m1", role="user", text="hi"),
                Message(id="m2", role="assistant", text="a", reasoning=(part,)),
                Message(id="m3", role="user", text="again"),
            )
        )
        with pytest.raises(ModelError, match="not persisted"):
            _complete(model, request)


class TestUsage:
    def test_cached_and_reasoning_tokens_are_recorded(self, fake: FakeProvider) -> None:
        """usage.input_tokens_details.cached_tokens and reasoning_tokens reach model/end."""
        usage = {
            "input_tokens": 300,
            "input_tokens_details": {"cached_tokens": 256},
            "output_tokens": 40,
            "output_tokens_details": {"reasoning_tokens": 32},
            "total_tokens": 340,
        }
        fake.script(
            Stream(responses_reply(reasoning=["hm"], encrypted=BLOB, text="ok", usage=usage))
        )
        runtime = nb.Runtime(_agent(_model(fake)), store="memory://")
        try:
            session = runtime.session("s1")
            outcome = session.run("hi", timeout=WAIT)
            frame = analysis.model_calls(session)
        finally:
            runtime.close()
        assert outcome.usage is not None
        assert (outcome.usage.cached_tokens, outcome.usage.reasoning_tokens) == (256, 32)
        row = frame.iloc[0]
        assert (row.reasoning_tokens, row.reasoning_chars, row.cached_tokens) == (32, 2, 256)

    def test_an_incomplete_response_finishes_with_length(self, fake: FakeProvider) -> None:
        """status incomplete for max_output_tokens is the finish reason length."""
        fake.script(Stream(responses_reply(text="cut", status="incomplete")))
        done = _complete(_model(fake, max_output_tokens=16), _hi())
        assert (done.finish_reason, done.text) == ("length", "cut")
        assert fake.requests[0]["max_output_tokens"] == 16


class TestErrors:
    def test_a_429_is_retryable_with_the_servers_wait(self, fake: FakeProvider) -> None:
        """429 with retry-after-ms: retryable, retry_after in seconds."""
        fake.script(
            Failure(
                429,
                {"error": {"type": "requests", "code": "rate_limit_exceeded", "message": "slow"}},
                {"retry-after-ms": "1500"},
            )
        )
        with pytest.raises(ModelError) as raised:
            _complete(_model(fake), _hi())
        assert raised.value.retryable
        assert raised.value.retry_after == 1.5

    def test_context_length_exceeded_is_context_too_long(self, fake: FakeProvider) -> None:
        """The documented code becomes ContextTooLong, naming compaction."""
        fake.script(
            Failure(
                400,
                {
                    "error": {
                        "type": "invalid_request_error",
                        "code": "context_length_exceeded",
                        "message": "Your input exceeds the context window of this model.",
                    }
                },
            )
        )
        with pytest.raises(ContextTooLong, match="compaction"):
            _complete(_model(fake), _hi())

    def test_a_stream_cut_before_the_end_is_retryable(self, fake: FakeProvider) -> None:
        """No response.completed before the connection dropped, nothing streamed: retryable."""
        fake.script(Stream(responses_reply(text="never"), cut_after=1))
        with pytest.raises(ModelError) as raised:
            _complete(_model(fake), _hi())
        assert raised.value.retryable


class TestSecrets:
    def test_the_key_never_shows(self, fake: FakeProvider) -> None:
        """An error that echoes the key is redacted; the repr never holds it."""
        fake.script(Failure(401, {"error": {"message": f"Incorrect API key provided: {KEY}"}}))
        model = _model(fake)
        assert KEY not in repr(model)
        with pytest.raises(ModelError) as raised:
            _complete(model, _hi())
        assert KEY not in str(raised.value)
        assert "OPENAI_API_KEY" in str(raised.value)
        assert fake.headers[0]["authorization"] == f"Bearer {KEY}"
