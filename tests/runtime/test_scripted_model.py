"""ScriptedModel and the model port: stream shape, scripts, errors and reassembly."""

from __future__ import annotations

import asyncio
import gc
import random
import time
import weakref
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agentnb.errors import InvalidInput
from agentnb.events import Message, ToolCallData, canonical_json
from agentnb.models import (
    MESSAGE_TOKENS,
    REPLY_TOKENS,
    Backoff,
    Completion,
    Finish,
    Model,
    ModelError,
    ModelRequest,
    Reply,
    ScriptedModel,
    ScriptExhausted,
    StreamCollector,
    StreamItem,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    Usage,
    count_tokens_with,
    estimate_text_tokens,
    estimate_tokens,
)

SPEC = {"name": "lookup", "description": "Look up a plan.", "parameters": {"type": "object"}}


def request(*texts: str) -> ModelRequest:
    """A request with one user message per text."""
    return ModelRequest(
        messages=tuple(Message(id=f"m{i}", role="user", text=t) for i, t in enumerate(texts))
    )


def items(model: Model, req: ModelRequest | None = None) -> list[StreamItem]:
    """Everything one stream yields."""

    async def collect() -> list[StreamItem]:
        return [item async for item in model.stream(req or request("hi"))]

    return asyncio.run(collect())


def complete(model: Model, req: ModelRequest | None = None) -> Completion:
    counter = iter(range(1, 100))
    return asyncio.run(
        model.complete(req or request("hi"), new_call_id=lambda: f"call_{next(counter)}")
    )


class TestReplies:
    def test_text_reply(self) -> None:
        """A str reply streams as text, then usage, then Finish('stop')."""
        out = items(ScriptedModel(["Hello"]))
        assert out[0] == TextDelta("Hello")
        assert isinstance(out[1], Usage)
        assert out[2] == Finish("stop")
        assert len(out) == 3

    def test_single_tool_call(self) -> None:
        """A ToolCall reply streams one call and finishes with 'tool_calls'."""
        result = complete(ScriptedModel([ToolCall("lookup", {"plan": "pro"})]))
        assert result.tool_calls == [
            ToolCallData(call_id="call_1", name="lookup", arguments={"plan": "pro"})
        ]
        assert result.text == ""
        assert result.finish_reason == "tool_calls"

    def test_list_of_tool_calls(self) -> None:
        """A list of ToolCall replies with all of them, in order."""
        result = complete(ScriptedModel([[ToolCall("a", {"x": 1}), ToolCall("b")]]))
        assert [(c.name, c.arguments) for c in result.tool_calls] == [("a", {"x": 1}), ("b", {})]

    def test_reply_with_text_and_tool_calls(self) -> None:
        """A Reply carries text and tool calls together; text streams first."""
        out = items(ScriptedModel([Reply(text="Let me check.", tool_calls=[ToolCall("a")])]))
        assert out[0] == TextDelta("Let me check.")
        assert out[1] == ToolCallDelta(index=0, name="a", arguments_delta="{}")

    def test_usage_and_finish_reason_overrides(self) -> None:
        """Reply.usage and Reply.finish_reason replace the derived values."""
        out = items(ScriptedModel([Reply(text="cut", usage=(10, 2), finish_reason="length")]))
        assert out[-2:] == [Usage(10, 2), Finish("length")]

    def test_empty_text_reply(self) -> None:
        """An empty answer streams no text, only usage and Finish('stop')."""
        out = items(ScriptedModel([""]))
        assert [type(i) for i in out] == [Usage, Finish]

    def test_replies_are_used_in_order(self) -> None:
        """Each call takes the next reply of a list script."""
        model = ScriptedModel(["one", "two"])
        assert complete(model).text == "one"
        assert complete(model).text == "two"


class TestStreaming:
    def test_text_is_split_into_chunk_size_pieces(self) -> None:
        """Text arrives in chunk_size-character TextDelta pieces."""
        out = items(ScriptedModel(["abcdefghij"], chunk_size=4))
        assert [i for i in out if isinstance(i, TextDelta)] == [
            TextDelta("abcd"),
            TextDelta("efgh"),
            TextDelta("ij"),
        ]

    def test_arguments_are_canonical_json(self) -> None:
        """Tool-call arguments stream as key-sorted JSON."""
        out = items(ScriptedModel([ToolCall("a", {"b": 1, "a": [2]})], chunk_size=100))
        assert out[0] == ToolCallDelta(index=0, name="a", arguments_delta='{"a":[2],"b":1}')

    def test_only_the_first_fragment_carries_the_name(self) -> None:
        """The first fragment of a call names the tool; later ones carry only arguments."""
        out = items(ScriptedModel([ToolCall("search", {"query": "x" * 20})], chunk_size=8))
        deltas = [i for i in out if isinstance(i, ToolCallDelta)]
        assert len(deltas) > 2
        assert deltas[0].name == "search"
        assert all(d.name is None for d in deltas[1:])
        assert all(d.call_id is None for d in deltas)

    def test_fragments_of_several_calls_interleave_round_robin(self) -> None:
        """Fragments of multiple calls alternate by index while each call has pieces left."""
        calls = [ToolCall("a", {"k": "x" * 10}), ToolCall("b", {}), ToolCall("c", {"k": "y" * 4})]
        out = items(ScriptedModel([calls], chunk_size=5))
        indexes = [i.index for i in out if isinstance(i, ToolCallDelta)]
        # a: '{"k":"xxxxxxxxxx"}' -> 4 pieces, b: '{}' -> 1, c: '{"k":"yyyy"}' -> 3
        assert indexes == [0, 1, 2, 0, 2, 0, 2, 0]

    def test_interleaved_fragments_reassemble_exactly(self) -> None:
        """Grouping fragments by index gives back every call's arguments."""
        calls = [
            ToolCall("a", {"text": "é" * 7, "n": 1}),
            ToolCall("b", {"nested": {"list": [1, 2, 3]}}),
        ]
        result = complete(ScriptedModel([calls], chunk_size=3))
        assert [(c.name, c.arguments) for c in result.tool_calls] == [
            ("a", {"text": "é" * 7, "n": 1}),
            ("b", {"nested": {"list": [1, 2, 3]}}),
        ]

    def test_usage_comes_before_finish_at_the_end(self) -> None:
        """The stream ends with exactly one Usage and then exactly one Finish."""
        out = items(ScriptedModel([Reply(text="x" * 40, tool_calls=[ToolCall("a")])]))
        assert isinstance(out[-2], Usage)
        assert isinstance(out[-1], Finish)
        assert sum(isinstance(i, Usage | Finish) for i in out) == 2

    def test_derived_usage_is_deterministic(self) -> None:
        """Without Reply.usage, input tokens are count_tokens(messages, tools) and output
        tokens the estimate of the reply's text, tool names and arguments."""
        model = ScriptedModel([Reply(text="abcdefgh", tool_calls=[ToolCall("t", {"q": 1})])])
        req = ModelRequest(messages=request("12345678", "1234").messages, tools=(SPEC,))
        out = items(model, req)
        # input: reply primer 3; per message 3 + "user" 1 + text (8 bytes -> 2, 4 -> 1);
        # the tool spec 3 + its JSON; output: "abcdefgh" 2 + "t" 1 + '{"q":1}' 2
        spec_tokens = 3 + -(-len(canonical_json(SPEC)) // 4)
        assert Usage(input_tokens=3 + 6 + 5 + spec_tokens, output_tokens=5) in out
        assert model.count_tokens(req.messages, req.tools) == 3 + 6 + 5 + spec_tokens

    def test_chunk_delay_passes_between_pieces(self) -> None:
        """chunk_delay seconds pass between streamed pieces."""
        model = ScriptedModel(["abcd"], chunk_size=1, chunk_delay=0.02)
        start = time.monotonic()
        items(model)
        assert time.monotonic() - start >= 0.06

    def test_cancellation_lands_between_chunks(self) -> None:
        """A task consuming the stream can be cancelled between two chunks."""
        model = ScriptedModel(["abcdefgh"], chunk_size=1)
        seen: list[StreamItem] = []

        async def consume() -> None:
            async for item in model.stream(request("hi")):
                seen.append(item)

        async def main() -> None:
            task = asyncio.create_task(consume())
            while not seen:
                await asyncio.sleep(0)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(main())
        assert 1 <= len(seen) < 8
        assert all(isinstance(i, TextDelta) for i in seen)


class TestDeterminism:
    def test_same_script_and_requests_give_identical_streams(self) -> None:
        """Two models with the same script stream identical items for identical requests."""
        script: list[Any] = [
            Reply(text="Checking both.", tool_calls=[ToolCall("a", {"x": 1}), ToolCall("b")]),
            "Done: all good.",
        ]

        def run() -> list[list[StreamItem]]:
            model = ScriptedModel(script, chunk_size=3)
            return [items(model, request("task")), items(model, request("task", "result"))]

        assert run() == run()


class TestRequests:
    def test_requests_record_what_the_model_saw(self) -> None:
        """requests holds the messages of every call, in order."""
        model = ScriptedModel(["a", "b"])
        items(model, request("first"))
        items(model, request("first", "second"))
        assert [[m.text for m in msgs] for msgs in model.requests] == [
            ["first"],
            ["first", "second"],
        ]
        assert model.calls == 2

    def test_every_stream_call_counts(self) -> None:
        """A call counts when stream() is called, even if it fails."""
        model = ScriptedModel([])
        with pytest.raises(ScriptExhausted):
            items(model)
        assert model.calls == 1

    def test_the_record_is_a_copy(self) -> None:
        """Changing a recorded list does not change the next call's record."""
        model = ScriptedModel(["a", "b"])
        items(model)
        model.requests[0].clear()
        items(model)
        assert len(model.requests[1]) == 1


class TestCallableScript:
    def test_callable_decides_from_the_messages(self) -> None:
        """A callable script is asked for each reply with the messages so far."""

        def script(messages: list[Message]) -> Any:
            last = messages[-1].text
            return ToolCall("lookup", {"plan": last}) if last != "done" else f"{len(messages)}"

        model = ScriptedModel(script)
        assert complete(model, request("pro")).tool_calls[0].arguments == {"plan": "pro"}
        assert complete(model, request("pro", "done")).text == "2"

    def test_callable_never_runs_out(self) -> None:
        """A callable script keeps answering."""
        model = ScriptedModel(lambda messages: "again")
        for _ in range(5):
            assert complete(model).text == "again"
        assert model.calls == 5

    def test_async_callable(self) -> None:
        """A callable script may be a coroutine function."""

        async def script(messages: list[Message]) -> str:
            await asyncio.sleep(0)
            return "async answer"

        assert complete(ScriptedModel(script)).text == "async answer"

    def test_callable_returning_a_non_reply_fails_clearly(self) -> None:
        """A callable that returns something that is not a reply raises ModelError."""
        model = ScriptedModel(lambda messages: {"text": "x"})  # type: ignore[arg-type,return-value]
        with pytest.raises(ModelError, match="script function returned a dict"):
            items(model)

    def test_callable_can_raise_scripted_errors(self) -> None:
        """A callable script may return an exception for the stream to raise."""
        model = ScriptedModel(lambda messages: ModelError("busy", retryable=True))
        with pytest.raises(ModelError, match="busy") as info:
            items(model)
        assert info.value.retryable


class TestScriptErrors:
    def test_exhausted_list_raises_script_exhausted(self) -> None:
        """Asking a list script for one reply too many raises ScriptExhausted."""
        model = ScriptedModel(["only"])
        items(model)
        with pytest.raises(
            ScriptExhausted,
            match="script ran out after 1 replies; add replies or use a callable script",
        ):
            items(model)

    def test_script_exhausted_is_a_non_retryable_model_error(self) -> None:
        """ScriptExhausted is a ModelError that retrying cannot fix."""
        with pytest.raises(ModelError) as info:
            items(ScriptedModel([]))
        assert isinstance(info.value, ScriptExhausted)
        assert not info.value.retryable

    def test_scripted_exception_is_raised(self) -> None:
        """An exception in the script is raised by the stream, before any item."""
        model = ScriptedModel([RuntimeError("provider down"), "recovered"])
        with pytest.raises(RuntimeError, match="provider down"):
            items(model)
        assert complete(model).text == "recovered"

    def test_scripted_model_error_keeps_retryable(self) -> None:
        """A scripted ModelError keeps its retryable flag."""
        with pytest.raises(ModelError) as info:
            items(ScriptedModel([ModelError("rate limited", retryable=True)]))
        assert info.value.retryable

    def test_reply_error_raises_mid_stream(self) -> None:
        """Reply(error=...) streams the pieces, then raises instead of Usage/Finish."""
        model = ScriptedModel([Reply(text="partial", error=ModelError("cut", retryable=True))])
        seen: list[StreamItem] = []

        async def consume() -> None:
            async for item in model.stream(request("hi")):
                seen.append(item)

        with pytest.raises(ModelError, match="cut"):
            asyncio.run(consume())
        assert seen == [TextDelta("partial")]

    @pytest.mark.parametrize("bad", [42, {"text": "x"}, [ToolCall("a"), "b"], None])
    def test_invalid_list_items_are_refused_at_construction(self, bad: Any) -> None:
        """A list script item that is not a reply raises InvalidInput naming its index."""
        with pytest.raises(InvalidInput, match=r"script\[1\]"):
            ScriptedModel(["fine", bad])

    def test_a_string_script_is_refused(self) -> None:
        """A bare string is not a script (it would be read as one reply per character)."""
        with pytest.raises(InvalidInput, match="list of replies or a callable"):
            ScriptedModel("hello")

    @pytest.mark.parametrize(
        "kwargs", [{"chunk_size": 0}, {"chunk_size": 1.5}, {"chunk_delay": -1}, {"name": ""}]
    )
    def test_bad_options_are_refused(self, kwargs: dict[str, Any]) -> None:
        """chunk_size < 1, negative chunk_delay and an empty name raise InvalidInput."""
        with pytest.raises(InvalidInput):
            ScriptedModel(["x"], **kwargs)

    def test_tool_call_arguments_must_be_json(self) -> None:
        """ToolCall arguments that JSON cannot carry raise InvalidInput."""
        with pytest.raises(InvalidInput, match="plain JSON"):
            ToolCall("a", {"when": object()})

    def test_reply_tool_calls_must_be_tool_calls(self) -> None:
        """Reply.tool_calls refuses anything but ToolCall."""
        with pytest.raises(InvalidInput, match=r"tool_calls\[0\]"):
            Reply(tool_calls=[{"name": "a"}])  # type: ignore[list-item]


class TestScriptedModelObject:
    def test_is_a_model(self) -> None:
        """ScriptedModel implements the Model port and has a name."""
        model = ScriptedModel(["x"], name="demo-model")
        assert isinstance(model, Model)
        assert model.name == "demo-model"
        assert ScriptedModel(["x"]).name == "scripted"

    def test_repr(self) -> None:
        """The repr says how many replies the script has and how many calls were made."""
        assert repr(ScriptedModel(["a", "b"])) == (
            "ScriptedModel(name='scripted', script=2 replies, calls=0)"
        )

    def test_reply_tool_calls_become_a_tuple(self) -> None:
        """Reply normalises a list of tool calls to a tuple."""
        assert Reply(tool_calls=[ToolCall("a")]).tool_calls == (ToolCall("a"),)


class TestModelPort:
    def test_half_written_model_fails_at_construction(self) -> None:
        """A Model subclass without stream cannot be instantiated."""

        class Half(Model):
            name = "half"

        with pytest.raises(TypeError):
            Half()  # type: ignore[abstract]

    def test_complete_requires_a_finish(self) -> None:
        """complete() raises ModelError for a stream that ends without Finish."""

        class NoFinish(Model):
            name = "nofinish"

            async def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
                yield TextDelta("hi")

        with pytest.raises(ModelError, match="without a Finish"):
            complete(NoFinish())

    def test_complete_uses_provider_call_ids(self) -> None:
        """A call id sent by the model is kept; only missing ones are made."""

        class WithIds(Model):
            name = "ids"

            async def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
                yield ToolCallDelta(index=0, call_id="prov_1", name="a", arguments_delta="{}")
                yield ToolCallDelta(index=1, name="b")
                yield Finish("tool_calls")

        result = complete(WithIds())
        assert [c.call_id for c in result.tool_calls] == ["prov_1", "call_1"]
        assert result.tool_calls[1].arguments == {}
        assert result.usage is None

    def test_request_accepts_lists(self) -> None:
        """ModelRequest stores list arguments as tuples and copies options."""
        options = {"temperature": 0}
        req = ModelRequest(messages=[Message(id="m", role="user", text="x")], options=options)  # type: ignore[arg-type]
        options["temperature"] = 1
        assert isinstance(req.messages, tuple)
        assert req.options == {"temperature": 0}

    def test_model_error_defaults_to_not_retryable(self) -> None:
        """ModelError is non-retryable unless said otherwise."""
        assert not ModelError("x").retryable
        assert ModelError("x", retryable=True).retryable
        assert ModelError("x", True).retryable

    def test_model_error_carries_retry_after(self) -> None:
        """retry_after is None by default and a float of seconds when given."""
        assert ModelError("x").retry_after is None
        assert ModelError("x", True, retry_after=2).retry_after == 2.0

    @pytest.mark.parametrize("bad", [-1, float("nan"), float("inf"), "3", True])
    def test_model_error_refuses_bad_retry_after(self, bad: Any) -> None:
        """A retry_after that is not a finite number of seconds >= 0 raises InvalidInput."""
        with pytest.raises(InvalidInput, match="retry_after"):
            ModelError("x", True, retry_after=bad)

    def test_usage_extra_counts_default_to_none(self) -> None:
        """Usage(input, output) still works; cached and reasoning tokens default to None."""
        usage = Usage(10, 2)
        assert (usage.cached_tokens, usage.reasoning_tokens) == (None, None)
        assert Usage(10, 2, cached_tokens=8, reasoning_tokens=1).cached_tokens == 8

    def test_defaults_of_a_minimal_model(self) -> None:
        """A model that defines only stream has no context window, the default backoff, the
        estimate as its token count and an aclose that does nothing."""

        class Minimal(Model):
            name = "minimal"

            async def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
                yield Finish("stop")

        model = Minimal()
        msgs = request("hello").messages
        assert model.context_window is None
        assert model.backoff == Backoff()
        assert model.count_tokens(msgs) == estimate_tokens(msgs)
        asyncio.run(model.aclose())


class TestTokenEstimate:
    def test_text_tokens_are_utf8_bytes_over_four(self) -> None:
        """A text counts its UTF-8 bytes / 4, rounded up: ASCII, accents and CJK alike."""
        assert estimate_text_tokens("") == 0
        assert estimate_text_tokens("abcd") == 1
        assert estimate_text_tokens("abcde") == 2
        assert estimate_text_tokens("été") == 2  # 5 bytes
        assert estimate_text_tokens("東京都") == 3  # 9 bytes

    def test_lone_surrogates_are_counted(self) -> None:
        """A text with a lone surrogate is counted, not refused."""
        assert estimate_text_tokens("a\ud800") == 1

    def test_framing_of_messages_calls_and_tools(self) -> None:
        """Each message, tool call and tool schema adds MESSAGE_TOKENS; the request adds
        REPLY_TOKENS once."""
        call = ToolCallData(call_id="c1", name="lookup", arguments={"plan": "pro"})
        msgs = [
            Message(id="a", role="assistant", text="", tool_calls=(call,)),
            Message(id="t", role="tool", text="42", call_id="c1", name="lookup"),
        ]

        def ones(text: str) -> int:
            return 1

        # texts: assistant (role, text) + call (name, args) + tool (role, text, name, call_id)
        assert count_tokens_with(ones, msgs, [SPEC]) == (
            REPLY_TOKENS + 2 * MESSAGE_TOKENS + 2 + MESSAGE_TOKENS + 2 + 4 + MESSAGE_TOKENS + 1
        )

    def test_counted_messages_are_not_kept_alive(self) -> None:
        """Counts are remembered per message, but the memory lets a message go when the
        conversation does (a compacted context, retired turns); counting one that is new
        again at the same address counts it afresh."""
        msgs = [Message(id=f"m{i}", role="user", text="x" * (4 * i)) for i in range(10)]
        first = estimate_tokens(msgs)
        assert estimate_tokens(msgs) == first  # remembered
        gone = [weakref.ref(m) for m in msgs]
        del msgs
        gc.collect()
        assert all(ref() is None for ref in gone)
        again = [Message(id=f"n{i}", role="user", text="y" * (8 * i)) for i in range(10)]
        assert estimate_tokens(again) == estimate_tokens(list(again)) > first

    def test_empty_request_is_the_reply_primer(self) -> None:
        """No messages and no tools count REPLY_TOKENS."""
        assert estimate_tokens([]) == REPLY_TOKENS

    def test_tools_count(self) -> None:
        """Offering tools makes a request count more."""
        msgs = request("hi").messages
        assert estimate_tokens(msgs, [SPEC]) > estimate_tokens(msgs)

    @pytest.mark.parametrize("bad", ["hello", Message(id="m", role="user"), [1], None])
    def test_bad_messages_are_refused(self, bad: Any) -> None:
        """Messages that are not a sequence of Message raise InvalidInput."""
        with pytest.raises(InvalidInput, match="messages"):
            estimate_tokens(bad)

    @pytest.mark.parametrize("bad", [SPEC, ["lookup"], [{"f": object()}]])
    def test_bad_tools_are_refused(self, bad: Any) -> None:
        """Tool specs that are not JSON objects raise InvalidInput."""
        with pytest.raises(InvalidInput, match="tools"):
            estimate_tokens(request("hi").messages, bad)


class TestScriptedTokens:
    def test_count_tokens_is_the_estimate(self) -> None:
        """ScriptedModel counts with the port's deterministic estimate."""
        msgs = request("hello there", "again").messages
        assert ScriptedModel(["x"]).count_tokens(msgs, [SPEC]) == estimate_tokens(msgs, [SPEC])

    def test_context_window(self) -> None:
        """context_window is reported as given, None by default."""
        assert ScriptedModel(["x"], context_window=4096).context_window == 4096
        assert ScriptedModel(["x"]).context_window is None

    @pytest.mark.parametrize("bad", [0, -5, 1.5, True, "4k"])
    def test_bad_context_window_is_refused(self, bad: Any) -> None:
        """A context_window that is not a positive int raises InvalidInput."""
        with pytest.raises(InvalidInput, match="context_window"):
            ScriptedModel(["x"], context_window=bad)


class Seq:
    """A random source that returns the given values in turn."""

    def __init__(self, *values: float) -> None:
        self.values = list(values)

    def __call__(self) -> float:
        return self.values.pop(0)


class TestBackoff:
    def test_ceiling_grows_exponentially_up_to_the_cap(self) -> None:
        """The ceiling is base * factor ** (attempt - 1), capped."""
        backoff = Backoff(base=0.5, factor=2, cap=3)
        assert [backoff.ceiling(n) for n in (1, 2, 3, 4, 50_000)] == [0.5, 1.0, 2.0, 3.0, 3.0]

    def test_jitter_draws_within_its_range(self) -> None:
        """A delay lies in [ceiling * (1 - jitter), ceiling], placed by the random source."""
        backoff = Backoff(base=1, factor=2, jitter=0.5, rng=Seq(0.0, 0.999, 0.5))
        assert backoff.delay(3) == 4.0
        assert backoff.delay(3) == pytest.approx(4.0 * (1 - 0.5 * 0.999))
        assert backoff.delay(3) == 3.0

    def test_seeded_delays_repeat_and_vary(self) -> None:
        """Delays from a seeded source are repeatable, and not all equal."""
        backoff = Backoff(base=1, jitter=1, rng=random.Random(7).random)
        delays = [backoff.delay(1) for _ in range(5)]
        again = random.Random(7)
        assert delays == [1 - again.random() for _ in range(5)]
        assert len(set(delays)) == 5
        assert all(0 < d <= 1 for d in delays)

    def test_retry_after_is_a_floor(self) -> None:
        """A server's retry_after is waited at least, even when the backoff is shorter."""
        backoff = Backoff(base=0.5, jitter=0)
        assert backoff.delay(1, ModelError("429", True, retry_after=7)) == 7.0
        assert backoff.delay(5, ModelError("429", True, retry_after=1)) == 8.0

    def test_retry_after_beyond_the_limit_is_ignored(self) -> None:
        """A retry_after above max_retry_after falls back to the computed delay."""
        backoff = Backoff(base=0.5, jitter=0, max_retry_after=60)
        assert backoff.delay(1, ModelError("503", True, retry_after=3600)) == 0.5

    @pytest.mark.parametrize(
        ("argument", "value"),
        [
            ("base", -1),
            ("base", float("nan")),
            ("cap", "5"),
            ("factor", 0.5),
            ("jitter", 1.5),
            ("max_retry_after", -0.1),
            ("rng", 3),
        ],
    )
    def test_bad_settings_are_refused(self, argument: str, value: Any) -> None:
        """A Backoff setting out of range raises InvalidInput naming it."""
        with pytest.raises(InvalidInput, match=argument):
            Backoff(**{argument: value})

    @pytest.mark.parametrize("attempt", [0, -1, 1.5, True])
    def test_bad_attempt_is_refused(self, attempt: Any) -> None:
        """Attempts are numbered from 1; anything else raises InvalidInput."""
        with pytest.raises(InvalidInput, match="attempt"):
            Backoff().delay(attempt)


class TestStreamCollector:
    def test_groups_interleaved_fragments(self) -> None:
        """Fragments are grouped by index regardless of how they interleave."""
        collector = StreamCollector()
        stream: list[StreamItem] = [
            ToolCallDelta(index=1, name="b", arguments_delta='{"y":'),
            ToolCallDelta(index=0, name="a", arguments_delta='{"x"'),
            ToolCallDelta(index=1, arguments_delta="2}"),
            ToolCallDelta(index=0, arguments_delta=":1}"),
            Finish("tool_calls"),
        ]
        for item in stream:
            collector.add(item)
        calls = collector.tool_calls(iter(["c0", "c1"]).__next__)
        assert [(c.call_id, c.name, c.arguments) for c in calls] == [
            ("c0", "a", {"x": 1}),
            ("c1", "b", {"y": 2}),
        ]
        assert collector.arguments_json(0) == '{"x":1}'

    def test_nothing_may_follow_finish(self) -> None:
        """An item after Finish raises ModelError."""
        collector = StreamCollector()
        collector.add(Finish("stop"))
        with pytest.raises(ModelError, match="after its Finish"):
            collector.add(TextDelta("late"))

    def test_usage_only_once(self) -> None:
        """A second Usage raises ModelError."""
        collector = StreamCollector()
        collector.add(Usage(1, 1))
        with pytest.raises(ModelError, match="Usage twice"):
            collector.add(Usage(1, 1))

    def test_malformed_arguments_are_a_model_error(self) -> None:
        """Arguments that are not valid JSON raise ModelError naming the call."""
        collector = StreamCollector()
        collector.add(ToolCallDelta(index=0, name="a", arguments_delta='{"x": '))
        with pytest.raises(ModelError, match=r"malformed JSON arguments for tool call #0 \(a\)"):
            collector.tool_calls()

    def test_arguments_must_be_an_object(self) -> None:
        """Arguments that are JSON but not an object raise ModelError."""
        collector = StreamCollector()
        collector.add(ToolCallDelta(index=0, name="a", arguments_delta="[1]"))
        with pytest.raises(ModelError, match="not a JSON object"):
            collector.tool_calls()

    def test_calls_need_a_name(self) -> None:
        """A call whose fragments never named a tool raises ModelError."""
        collector = StreamCollector()
        collector.add(ToolCallDelta(index=0, arguments_delta="{}"))
        with pytest.raises(ModelError, match="without a name"):
            collector.tool_calls()

    def test_text_concatenates(self) -> None:
        """Text deltas join in order."""
        collector = StreamCollector()
        for piece in ["Hel", "lo"]:
            collector.add(TextDelta(piece))
        assert collector.text == "Hello"


class TestKeepRequests:
    def test_keep_requests_keeps_only_the_newest(self) -> None:
        """keep_requests=N records the newest N calls; calls still counts every call."""
        model = ScriptedModel(["a", "b", "c"], keep_requests=1)
        items(model, request("first"))
        items(model, request("second"))
        items(model, request("third"))
        assert [[m.text for m in msgs] for msgs in model.requests] == [["third"]]
        assert model.calls == 3

    def test_bad_keep_requests_is_refused(self) -> None:
        """keep_requests must be None or an int >= 0."""
        for bad in [-1, 1.5, True, "2"]:
            with pytest.raises(InvalidInput):
                ScriptedModel(["a"], keep_requests=bad)  # type: ignore[arg-type]
