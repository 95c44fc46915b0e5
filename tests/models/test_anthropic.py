"""AnthropicModel on the official SDK, against a fake Messages API on a loopback uvicorn port.

The fake (``tests/models/fakes.py``) refuses what the real API refuses (altered thinking
blocks, a tool loop without its thinking block, unanswered tool calls), so a test that passes
shows the adapter sends what Anthropic accepts; it also records every request, so the tests
check the thinking blocks, cache breakpoints and options byte for byte.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import agentnb as nb
from agentnb import analysis
from agentnb.events import Message
from agentnb.export import Exporter
from agentnb.export.otel import OTelSink
from agentnb.models import ContextTooLong, ModelError, ModelRequest
from agentnb.models.anthropic import AnthropicModel
from tests.models.fakes import (
    Failure,
    FakeProvider,
    Stream,
    anthropic_error_event,
    anthropic_reply,
)

KEY = "sk-ant-test-0123456789abcdefXYZ"
WAIT = 30.0
THOUGHT = 'The user wants Paris. Ünïcode and "quotes"\nand a newline. I\'ll call lookup.'
SIGNATURE = "EqQBCkYIARgCKkBz+/sig==\u00e9"
ROOT = Path(nb.__file__).resolve().parent.parent


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


def _model(fake: FakeProvider, **options: Any) -> AnthropicModel:
    options.setdefault("max_tokens", 4096)
    return AnthropicModel("claude-fake", api_key=KEY, base_url=fake.base_url, **options)


def _agent(model: nb.Model) -> nb.Agent:
    return nb.Agent(
        name="Claude",
        agent_id="claude",
        model=model,
        tools=[lookup],
        instructions="Answer with the weather.",
    )


def _tool_loop(fake: FakeProvider) -> None:
    fake.script(
        Stream(
            anthropic_reply(
                thinking=THOUGHT,
                signature=SIGNATURE,
                tool_uses=[("toolu_1", "lookup", '{"city": "Paris"}')],
            )
        ),
        Stream(anthropic_reply(text="It is sunny in Paris.")),
    )


def _events(session: nb.Session) -> list[nb.Event]:
    return session.log.read_after(0, limit=10_000)


def _request(messages: list[Message], tools: tuple[dict[str, Any], ...] = ()) -> ModelRequest:
    return ModelRequest(messages=tuple(messages), tools=tools)


def _complete(model: nb.Model, request: ModelRequest) -> Any:
    """``model.complete(request)`` on a loop of its own, the model's client closed after."""

    async def call() -> Any:
        try:
            return await model.complete(request)
        finally:
            await model.aclose()

    return asyncio.run(call())


def _user(text: str) -> Message:
    return Message(id="m1", role="user", text=text)


class TestThinkingRoundTrip:
    def test_the_next_call_of_a_tool_loop_sends_the_thinking_block_back_byte_for_byte(
        self, fake: FakeProvider
    ) -> None:
        """The thinking text and signature streamed by the first call go back unchanged."""
        _tool_loop(fake)
        runtime = nb.Runtime(
            _agent(_model(fake, thinking={"budget_tokens": 2048})), store="memory://"
        )
        try:
            outcome = runtime.session("s1").run("weather in Paris?", timeout=WAIT)
        finally:
            runtime.close()
        assert outcome.status == "completed", outcome.error
        assert outcome.output == "It is sunny in Paris."
        assert fake.refusals == []
        assistant = fake.requests[1]["messages"][1]
        assert assistant["role"] == "assistant"
        assert assistant["content"][0] == {
            "type": "thinking",
            "thinking": THOUGHT,
            "signature": SIGNATURE,
        }
        assert assistant["content"][1] == {
            "type": "tool_use",
            "id": "toolu_1",
            "name": "lookup",
            "input": {"city": "Paris"},
        }
        assert fake.requests[0]["thinking"] == {"type": "enabled", "budget_tokens": 2048}

    def test_the_thinking_is_recorded_on_the_assistant_message_with_its_signature(
        self, fake: FakeProvider
    ) -> None:
        """message/assistant carries the reasoning part; model/chunk streamed it apart."""
        _tool_loop(fake)
        runtime = nb.Runtime(_agent(_model(fake, thinking="adaptive")), store="memory://")
        try:
            session = runtime.session("s1")
            session.run("weather in Paris?", timeout=WAIT)
            events = _events(session)
        finally:
            runtime.close()
        first = next(e for e in events if e.type == "message/assistant")
        (part,) = first.payload["message"]["reasoning"]
        assert part == {"provider": "anthropic", "text": THOUGHT, "signature": SIGNATURE}
        chunks = [e for e in events if e.type == "model/chunk"]
        streamed = "".join(
            f["text"] for e in chunks for f in e.payload.get("reasoning_fragments", ())
        )
        assert streamed == THOUGHT
        assert all(THOUGHT[:10] not in e.payload["text"] for e in chunks)
        assert fake.requests[0]["thinking"] == {"type": "adaptive"}

    def test_redacted_thinking_goes_back_with_its_data(self, fake: FakeProvider) -> None:
        """A redacted_thinking block is recorded (data only) and returned as it came."""
        fake.script(
            Stream(
                anthropic_reply(
                    redacted="EncryptedBlob+/==",
                    thinking=THOUGHT,
                    signature=SIGNATURE,
                    tool_uses=[("toolu_1", "lookup", '{"city": "Oslo"}')],
                )
            ),
            Stream(anthropic_reply(text="Sunny.")),
        )
        runtime = nb.Runtime(
            _agent(_model(fake, thinking={"budget_tokens": 2048})), store="memory://"
        )
        try:
            outcome = runtime.session("s1").run("Oslo?", timeout=WAIT)
        finally:
            runtime.close()
        assert outcome.status == "completed", outcome.error
        content = fake.requests[1]["messages"][1]["content"]
        assert content[0] == {"type": "redacted_thinking", "data": "EncryptedBlob+/=="}
        assert content[1]["type"] == "thinking"
        assert fake.refusals == []

    def test_after_kill_9_and_resume_the_blocks_are_read_back_from_the_log(
        self, fake: FakeProvider, tmp_path: Path
    ) -> None:
        """A runtime killed while the second call is open: resume sends the thinking again."""
        fake.script(
            Stream(
                anthropic_reply(
                    thinking=THOUGHT,
                    signature=SIGNATURE,
                    tool_uses=[("toolu_1", "lookup", '{"city": "Paris"}')],
                )
            ),
            Stream([], hold=True),
            Stream(anthropic_reply(text="It is sunny in Paris.")),
        )
        db = f"sqlite:///{tmp_path / 'db.sqlite'}"
        child = subprocess.Popen(
            [sys.executable, "-m", "tests.models._anthropic_child", db, fake.base_url],
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert child.stdout is not None
            line = child.stdout.readline()
            assert line.strip() == "DISPATCHED", child.stderr.read() if child.stderr else ""
            deadline = time.monotonic() + WAIT
            while len(fake.requests) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert len(fake.requests) == 2
            os.kill(child.pid, signal.SIGKILL)
            child.wait(WAIT)
        finally:
            if child.poll() is None:
                child.kill()
            child.communicate()
        from tests.models import _anthropic_child

        runtime = nb.Runtime(_anthropic_child.agent(fake.base_url), store=db)
        try:
            session = runtime.session(_anthropic_child.SESSION_ID)
            turn_id = session.tasks()[0].turn_id
            session.start()
            for event in session.log.follow(0, idle_timeout=WAIT):
                if event.type == "recovery/applied":
                    break
            outcome = session.resume(turn_id).wait(timeout=WAIT)
        finally:
            runtime.close()
        assert outcome.status == "completed", outcome.error
        assert outcome.output == "It is sunny in Paris."
        assert len(fake.requests) == 3
        assert fake.requests[2]["messages"][1]["content"][0] == {
            "type": "thinking",
            "thinking": THOUGHT,
            "signature": SIGNATURE,
        }
        assert fake.requests[2]["messages"] == fake.requests[1]["messages"]
        assert fake.refusals == []


class TestParallelTools:
    def test_parallel_calls_are_answered_in_one_user_message(self, fake: FakeProvider) -> None:
        """Two tool_use blocks: both results go back together, after the thinking block."""
        fake.script(
            Stream(
                anthropic_reply(
                    thinking=THOUGHT,
                    signature=SIGNATURE,
                    tool_uses=[
                        ("toolu_a", "lookup", '{"city": "Rome"}'),
                        ("toolu_b", "lookup", '{"city": "Oslo"}'),
                    ],
                )
            ),
            Stream(anthropic_reply(text="Both sunny.")),
        )
        model = _model(fake, thinking={"budget_tokens": 2048})
        runtime = nb.Runtime(_agent(model), store="memory://")
        try:
            outcome = runtime.session("s1").run("Rome and Oslo?", timeout=WAIT)
        finally:
            runtime.close()
        assert outcome.status == "completed", outcome.error
        assert fake.refusals == []
        results = fake.requests[1]["messages"][2]
        assert results["role"] == "user"
        assert [(b["type"], b["tool_use_id"]) for b in results["content"]] == [
            ("tool_result", "toolu_a"),
            ("tool_result", "toolu_b"),
        ]


class TestCaching:
    def test_breakpoints_sit_on_the_tools_the_instructions_and_the_newest_message(
        self, fake: FakeProvider
    ) -> None:
        """cache_control marks the last tool, the last system block and the newest message."""
        _tool_loop(fake)
        runtime = nb.Runtime(_agent(_model(fake)), store="memory://")
        try:
            runtime.session("s1").run("weather?", timeout=WAIT)
        finally:
            runtime.close()
        ephemeral = {"type": "ephemeral"}
        for body in fake.requests:
            assert body["tools"][-1]["cache_control"] == ephemeral
            assert body["system"] == [
                {"type": "text", "text": "Answer with the weather.", "cache_control": ephemeral}
            ]
            assert body["messages"][-1]["content"][-1]["cache_control"] == ephemeral
            marked = [
                b
                for m in body["messages"][:-1]
                for b in m["content"]
                if isinstance(b, dict) and "cache_control" in b
            ]
            assert marked == []
        assert fake.requests[1]["messages"][-1]["content"][-1]["type"] == "tool_result"

    def test_cache_false_sets_no_breakpoint(self, fake: FakeProvider) -> None:
        """With cache=False no block carries cache_control."""
        fake.script(Stream(anthropic_reply(text="hi")))
        model = _model(fake, cache=False)
        _complete(model, _request([_user("hello")], (lookup.spec(),)))
        assert "cache_control" not in fake.raw[0].decode()


class TestUsage:
    def test_cache_reads_and_writes_reach_usage_the_outcome_and_the_export(
        self, fake: FakeProvider
    ) -> None:
        """Anthropic's three input counts add up; reads and writes are kept apart."""
        usage = {
            "input_tokens": 5,
            "cache_read_input_tokens": 100,
            "cache_creation_input_tokens": 40,
        }
        fake.script(Stream(anthropic_reply(text="hi", usage=usage, output_tokens=12)))
        runtime = nb.Runtime(_agent(_model(fake)), store="memory://")
        try:
            session = runtime.session("s1")
            outcome = session.run("hello", timeout=WAIT)
            (end,) = [e for e in _events(session) if e.type == "model/end"]
            frame = analysis.model_calls(session)
        finally:
            runtime.close()
        assert end.payload["input_tokens"] == 145
        assert end.payload["cached_tokens"] == 100
        assert end.payload["cache_write_tokens"] == 40
        assert end.payload["output_tokens"] == 12
        assert outcome.usage is not None
        assert outcome.usage.cached_tokens == 100
        assert outcome.usage.cache_write_tokens == 40
        row = frame.iloc[0]
        assert (row.cached_tokens, row.cache_write_tokens, row.input_tokens) == (100, 40, 145)


class TestStopReasons:
    @pytest.mark.parametrize(
        ("stop_reason", "finish"),
        [
            ("end_turn", "stop"),
            ("max_tokens", "length"),
            ("refusal", "content_filter"),
            ("pause_turn", "pause_turn"),
            ("stop_sequence", "stop"),
        ],
    )
    def test_stop_reasons_map_onto_finish_reasons(
        self, fake: FakeProvider, stop_reason: str, finish: str
    ) -> None:
        """Each documented stop reason becomes agentnb's finish reason."""
        fake.script(Stream(anthropic_reply(text="partial", stop_reason=stop_reason)))
        done = _complete(_model(fake), _request([_user("hi")]))
        assert (done.finish_reason, done.text) == (finish, "partial")

    def test_tool_use_is_a_tool_calls_finish_with_its_calls(self, fake: FakeProvider) -> None:
        """tool_use → tool_calls, with parallel calls in stream order."""
        fake.script(
            Stream(
                anthropic_reply(
                    tool_uses=[
                        ("toolu_a", "lookup", '{"city": "A"}'),
                        ("toolu_b", "lookup", '{"city": "B"}'),
                    ]
                )
            )
        )
        done = _complete(_model(fake), _request([_user("hi")], (lookup.spec(),)))
        assert done.finish_reason == "tool_calls"
        assert [(c.call_id, c.arguments) for c in done.tool_calls] == [
            ("toolu_a", {"city": "A"}),
            ("toolu_b", {"city": "B"}),
        ]


class TestPauseTurn:
    def test_a_paused_turn_is_sent_back_so_the_model_continues(self, fake: FakeProvider) -> None:
        """pause_turn is not the answer: the next step sends the paused reply back."""
        fake.script(
            Stream(anthropic_reply(text="Part one, ", stop_reason="pause_turn")),
            Stream(anthropic_reply(text="part two.")),
        )
        runtime = nb.Runtime(_agent(_model(fake)), store="memory://")
        try:
            session = runtime.session("s1")
            outcome = session.run("go on", timeout=WAIT)
            ends = [e.payload["finish_reason"] for e in _events(session) if e.type == "model/end"]
        finally:
            runtime.close()
        assert (outcome.status, outcome.output) == ("completed", "part two.")
        assert ends == ["pause_turn", "stop"]
        last = fake.requests[1]["messages"][-1]
        assert last["role"] == "assistant"
        assert last["content"][0]["text"] == "Part one, "


class TestErrors:
    def test_a_429_is_retried_after_the_servers_retry_after(self, fake: FakeProvider) -> None:
        """429 with retry-after: model/retry waits at least that long, then the call works."""
        fake.script(
            Failure(
                429,
                {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}},
                {"retry-after": "0.4"},
            ),
            Stream(anthropic_reply(text="ok")),
        )
        runtime = nb.Runtime(_agent(_model(fake)), store="memory://")
        try:
            session = runtime.session("s1")
            outcome = session.run("hi", timeout=WAIT)
            (retry,) = [e for e in _events(session) if e.type == "model/retry"]
        finally:
            runtime.close()
        assert outcome.status == "completed"
        assert retry.payload["delay_s"] >= 0.4
        assert "429" in retry.payload["error"]

    def test_a_529_overload_is_retryable(self, fake: FakeProvider) -> None:
        """529 overloaded_error: a retryable ModelError naming the overload."""
        fake.script(
            Failure(
                529, {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}
            )
        )
        with pytest.raises(ModelError) as raised:
            _complete(_model(fake), _request([_user("hi")]))
        assert raised.value.retryable
        assert "overloaded" in str(raised.value)

    def test_an_overload_event_before_any_text_is_retryable(self, fake: FakeProvider) -> None:
        """An error event inside a 200 stream, nothing streamed yet: retryable."""
        events = [
            *anthropic_reply(text="never")[:2],
            anthropic_error_event("overloaded_error", "Overloaded"),
        ]
        fake.script(Stream(events))
        with pytest.raises(ModelError) as raised:
            _complete(_model(fake), _request([_user("hi")]))
        assert raised.value.retryable

    def test_a_prompt_past_the_window_is_context_too_long_and_fails_the_turn(
        self, fake: FakeProvider
    ) -> None:
        """400 "prompt is too long": ContextTooLong; the turn fails with context_overflow."""
        body = {
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "message": "prompt is too long: 210000 tokens > 200000 maximum",
            },
        }
        fake.script(Failure(400, body), Failure(400, body))
        with pytest.raises(ContextTooLong) as raised:
            _complete(_model(fake), _request([_user("hi")]))
        assert "compaction" in str(raised.value)
        assert not raised.value.retryable
        runtime = nb.Runtime(_agent(_model(fake)), store="memory://")
        try:
            outcome = runtime.session("s1").run("hi", timeout=WAIT)
        finally:
            runtime.close()
        assert (outcome.status, outcome.stop_reason) == ("failed", "context_overflow")

    def test_a_stream_cut_after_text_fails_the_turn_with_the_text_kept(
        self, fake: FakeProvider
    ) -> None:
        """A connection dropped mid-reply: not retried, the reason and the text committed."""
        events = anthropic_reply(text="The answer is forty", pieces=4)
        fake.script(Stream(events, cut_after=len(events) - 3))
        runtime = nb.Runtime(_agent(_model(fake)), store="memory://")
        try:
            session = runtime.session("s1")
            outcome = session.run("hi", timeout=WAIT)
            events_ = _events(session)
        finally:
            runtime.close()
        assert outcome.status == "failed"
        assert "broke off" in (outcome.error or "")
        streamed = "".join(e.payload["text"] for e in events_ if e.type == "model/chunk")
        assert streamed == "The answer is forty"
        assert [e.type for e in events_].count("model/dispatch") == 1
        assert len(fake.requests) == 1

    def test_a_stream_cut_before_any_content_is_retried(self, fake: FakeProvider) -> None:
        """Cut after message_start only: retryable, so the runtime tries again."""
        fake.script(
            Stream(anthropic_reply(text="x"), cut_after=2), Stream(anthropic_reply(text="ok"))
        )
        runtime = nb.Runtime(_agent(_model(fake)), store="memory://")
        try:
            outcome = runtime.session("s1").run("hi", timeout=WAIT)
        finally:
            runtime.close()
        assert (outcome.status, outcome.output) == ("completed", "ok")
        assert len(fake.requests) == 2


class TestSecrets:
    def test_the_key_is_sent_but_never_shown(self, fake: FakeProvider, tmp_path: Path) -> None:
        """The key goes in the auth header; not in the repr, an error, the log, exports, OTel."""
        echo = {"type": "error", "error": {"type": "authentication_error", "message": f"bad {KEY}"}}
        fake.script(Failure(401, echo))
        model = _model(fake)
        assert KEY not in repr(model)
        assert KEY not in str(vars(model))
        db = tmp_path / "db.sqlite"
        runtime = nb.Runtime(_agent(model), store=f"sqlite:///{db}")
        try:
            session = runtime.session("s1")
            outcome = session.run("hi", timeout=WAIT)
            frame = analysis.model_calls(session)
            memory = InMemorySpanExporter()
            Exporter(runtime.store, OTelSink(memory)).drain()
            spans = memory.get_finished_spans()
        finally:
            runtime.close()
        assert spans
        assert KEY not in "".join(str(dict(span.attributes or {})) for span in spans)
        assert KEY not in "".join(str(event.attributes) for span in spans for event in span.events)
        sent = fake.headers[0]
        assert KEY in (sent.get("x-api-key"), sent.get("authorization", "").removeprefix("Bearer "))
        assert outcome.status == "failed"
        assert "ANTHROPIC_API_KEY" in (outcome.error or "")
        assert KEY not in (outcome.error or "")
        assert KEY.encode() not in db.read_bytes()
        assert KEY not in frame.to_csv()

    def test_no_key_and_no_client_is_a_clear_error(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Without a key anywhere the constructor says where to put one."""
        monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
        with pytest.raises(nb.InvalidInput, match="ANTHROPIC_API_KEY"):
            AnthropicModel("claude-fake")


class TestOptions:
    @pytest.mark.parametrize(
        "bad",
        [{"budget_tokens": 10}, {"budget_tokens": 9000}, "lots", {"type": "enabled"}],
    )
    def test_bad_thinking_is_refused(self, bad: Any) -> None:
        """A thinking setting the API would refuse is InvalidInput before any call."""
        with pytest.raises(nb.InvalidInput, match="thinking"):
            AnthropicModel("claude-fake", api_key=KEY, max_tokens=4096, thinking=bad)

    def test_a_client_of_another_kind_is_refused(self) -> None:
        """client= must be an AsyncAnthropic."""
        with pytest.raises(nb.InvalidInput, match="AsyncAnthropic"):
            AnthropicModel("claude-fake", api_key=KEY, client=object())
