"""Result blocks as each vendor API's parts: a tool's image reaches Anthropic as an ``image``
block, the Responses API as ``input_image`` and Chat Completions as an ``image_url`` data URL
after the tool message; a block the API cannot take goes as its text stand-in. Anthropic and
Responses run through their official SDKs against the fake APIs on a loopback port
(``tests/models/fakes.py``), with the image's bytes read from the store's blobs."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

import agentnb as nb
from agentnb.events import Message
from agentnb.models import ModelRequest
from agentnb.models.anthropic import AnthropicModel
from agentnb.models.openai import OpenAIChatModel
from agentnb.models.openai_responses import OpenAIResponsesModel
from agentnb.models.parts import (
    anthropic_content,
    openai_chat_images,
    responses_output,
    with_tool_images,
)
from tests.blocks_helpers import BIG, SMALL, chart
from tests.models.fakes import FakeProvider, Stream, anthropic_reply, responses_reply

KEY = "sk-test-0123456789abcdefXYZ"
WAIT = 30.0
B64 = base64.b64encode(BIG).decode()


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    server = FakeProvider()
    yield server
    server.close()


def _run_chart(model: nb.Model) -> nb.Outcome:
    agent = nb.Agent(name="C", agent_id="c", model=model, tools=[chart], instructions="Draw.")
    with nb.Runtime(agent, store="memory://") as runtime:
        return runtime.session("s1").run("draw the chart", timeout=WAIT)


def _tool_message() -> Message:
    parts = [
        nb.blocks.Text("Chart:").part(),
        nb.blocks.Image(SMALL, name="c.png").part(),
        nb.blocks.Json({"a": 1}).part(),
        nb.blocks.File(b"%PDF-1.4", "application/pdf", name="q.pdf").part(),
        nb.blocks.File(b"a,b", name="t.csv").part(),
    ]
    return Message(id="t", role="tool", text="stand-in", call_id="c1", name="chart", blocks=parts)


class TestAnthropic:
    def test_a_tools_image_goes_as_an_image_block_of_its_tool_result(
        self, fake: FakeProvider
    ) -> None:
        """The second call's tool_result holds the text and the image's base64 bytes."""
        fake.script(
            Stream(anthropic_reply(tool_uses=[("toolu_1", "chart", "{}")])),
            Stream(anthropic_reply(text="A fine chart.")),
        )
        model = AnthropicModel("claude-fake", api_key=KEY, base_url=fake.base_url, max_tokens=64)
        outcome = _run_chart(model)
        assert outcome.status == "completed", outcome.error
        assert fake.refusals == []
        (result,) = fake.requests[1]["messages"][-1]["content"]
        assert result["type"] == "tool_result"
        kinds = [c["type"] for c in result["content"]]
        assert kinds == ["text", "image", "image", "text"]
        image = result["content"][1]
        assert image["source"] == {"type": "base64", "media_type": "image/png", "data": B64}

    def test_a_pdf_is_a_document_and_other_files_their_stand_in(self) -> None:
        """PDFs go as document blocks; a CSV file as its bracketed stand-in line."""
        content = anthropic_content(_tool_message().blocks)
        assert [c["type"] for c in content] == ["text", "image", "text", "document", "text"]
        assert content[4]["text"].startswith("[file: t.csv, text/csv")


class TestResponses:
    def test_a_tools_image_goes_as_input_image_of_the_call_output(self, fake: FakeProvider) -> None:
        """The function_call_output's output is a list with an input_image data URL."""
        fake.script(
            Stream(responses_reply(calls=[("call_1", "chart", "{}")])),
            Stream(responses_reply(text="A fine chart.")),
        )
        model = OpenAIResponsesModel("gpt-fake", api_key=KEY, base_url=f"{fake.base_url}/v1")
        outcome = _run_chart(model)
        assert outcome.status == "completed", outcome.error
        (output,) = [
            i for i in fake.requests[1]["input"] if i.get("type") == "function_call_output"
        ]
        kinds = [p["type"] for p in output["output"]]
        assert kinds == ["input_text", "input_image", "input_image", "input_text"]
        assert output["output"][1]["image_url"] == f"data:image/png;base64,{B64}"

    def test_files_go_as_input_file(self) -> None:
        """Files (any type) go as input_file with their name and a data URL."""
        parts = responses_output(_tool_message().blocks)
        files = [p for p in parts if p["type"] == "input_file"]
        assert [f["filename"] for f in files] == ["q.pdf", "t.csv"]
        assert files[0]["file_data"].startswith("data:application/pdf;base64,")


class TestChatCompletions:
    def test_the_images_follow_the_tool_messages_in_a_user_message(self) -> None:
        """Chat Completions gets the tool's stand-in, then one user message of image_url parts."""
        seen: list[dict[str, Any]] = []

        def handler(request: httpx.Request) -> httpx.Response:
            seen.append(json.loads(request.content))
            body = (
                b'data: {"choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":"stop"}]}'
                b"\n\ndata: [DONE]\n\n"
            )
            return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)

        model = OpenAIChatModel("gpt-test", api_key=KEY, transport=httpx.MockTransport(handler))
        call = nb.ToolCall("chart", {})
        messages = (
            Message(id="u", role="user", text="draw"),
            Message(
                id="a",
                role="assistant",
                tool_calls=({"call_id": "c1", "name": call.name, "arguments": {}},),
            ),
            _tool_message(),
        )

        async def stream() -> None:
            try:
                async for _ in model.stream(ModelRequest(messages=messages)):
                    pass
            finally:
                await model.aclose()

        asyncio.run(stream())
        sent = seen[0]["messages"]
        assert [m["role"] for m in sent] == ["user", "assistant", "tool", "user"]
        assert sent[2]["content"] == "stand-in"
        images = [p for p in sent[3]["content"] if p["type"] == "image_url"]
        assert images == [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64," + _b64(SMALL)}}
        ]

    def test_tool_messages_without_images_get_no_user_message(self) -> None:
        """Text-only results add nothing (the conversation is sent as before)."""
        plain = Message(id="t", role="tool", text="x", call_id="c1")
        assert with_tool_images([plain], [{"role": "tool"}]) == [{"role": "tool"}]
        assert openai_chat_images(()) == []


class TestStandIn:
    def test_a_part_whose_bytes_are_not_at_hand_goes_as_text(self) -> None:
        """An image whose bytes are only a blob digest (not read) is its bracketed line."""
        part = nb.blocks.Image(BIG, name="big.png").part() | {"data": None, "blob": "x" * 64}
        message = Message(id="t", role="tool", text="s", call_id="c", blocks=[part])
        (only,) = anthropic_content(message.blocks)
        assert only == {"type": "text", "text": "[image: big.png, image/png, 28.3 KB]"}
        assert responses_output(message.blocks)[0]["type"] == "input_text"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()
