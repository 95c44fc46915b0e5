"""Model strings: nb.models.from_string and Agent(model="provider:model")."""

from __future__ import annotations

import asyncio

import httpx
import pytest

import agentnb as nb
from agentnb.events import Message
from agentnb.models import PREFIXES, ModelRequest, UnknownModelString, from_string
from agentnb.models.anthropic import AnthropicModel
from agentnb.models.openai import OpenAIChatModel
from agentnb.models.openai_responses import OpenAIResponsesModel


@pytest.fixture(autouse=True)
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-env-key-0000")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env-key-1111")


class TestFromString:
    def test_each_prefix_names_its_adapter(self) -> None:
        """anthropic / openai / openai-chat / ollama / openai-compatible pick their classes."""
        assert isinstance(from_string("anthropic:claude-sonnet-4-5"), AnthropicModel)
        assert isinstance(from_string("openai:gpt-5.1"), OpenAIResponsesModel)
        chat = from_string("openai-chat:gpt-4.1")
        assert isinstance(chat, OpenAIChatModel)
        assert chat.base_url == "https://api.openai.com/v1"
        ollama = from_string("ollama:llama3.2")
        assert isinstance(ollama, OpenAIChatModel)
        assert (ollama.model, ollama.base_url) == ("llama3.2", "http://localhost:11434/v1")
        local = from_string("openai-compatible:smol@http://127.0.0.1:8080/v1")
        assert (local.model, local.base_url) == ("smol", "http://127.0.0.1:8080/v1")  # type: ignore[attr-defined]

    def test_the_string_is_the_models_name(self) -> None:
        """The name (what the log and the fingerprint hold) is the string itself."""
        assert from_string("anthropic:claude-sonnet-4-5").name == "anthropic:claude-sonnet-4-5"

    def test_local_servers_never_get_the_openai_key(self) -> None:
        """ollama: and openai-compatible: send no key unless one is given."""
        seen: list[httpx.Request] = []

        def handler(request: httpx.Request) -> httpx.Response:
            seen.append(request)
            body = b'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}\n\n'
            return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)

        async def call(model: nb.Model) -> None:
            request = ModelRequest(messages=(Message(id="m", role="user", text="hi"),))
            async for _ in model.stream(request):
                pass

        for spec in ("ollama:llama3.2", "openai-compatible:m@http://127.0.0.1:1/v1"):
            asyncio.run(call(from_string(spec, transport=httpx.MockTransport(handler))))
        assert len(seen) == 2
        for request in seen:
            assert "authorization" not in request.headers
            assert "sk-env-key-1111" not in str(request.headers)

    def test_credentials_in_the_url_stay_out_of_the_name(self) -> None:
        """openai-compatible:M@http://user:pass@host keeps the password out of the name."""
        model = from_string("openai-compatible:m@http://me:secret-pass@127.0.0.1:9/v1")
        assert "secret-pass" not in model.name
        assert "secret-pass" not in repr(model)

    @pytest.mark.parametrize(
        "bad",
        ["claude-sonnet-4-5", "gemini:pro", "anthropic:", "openai-compatible:m", 42, ""],
    )
    def test_a_bad_string_lists_the_prefixes(self, bad: object) -> None:
        """An unreadable string is UnknownModelString (an InvalidInput) naming every prefix."""
        with pytest.raises(UnknownModelString) as raised:
            from_string(bad)  # type: ignore[arg-type]
        assert isinstance(raised.value, nb.InvalidInput)
        for prefix in PREFIXES:
            assert f"{prefix}:" in str(raised.value)


class TestAgentModelString:
    def test_an_agent_takes_a_model_string(self) -> None:
        """Agent(model="anthropic:...") builds the adapter."""
        agent = nb.Agent(name="a", agent_id="a", model="anthropic:claude-sonnet-4-5")
        assert isinstance(agent.model, AnthropicModel)

    def test_the_model_string_is_part_of_the_fingerprint(self) -> None:
        """Two agents that differ only in their model string do not match."""
        one = nb.Agent(name="a", agent_id="a", model="anthropic:claude-sonnet-4-5")
        two = nb.Agent(name="a", agent_id="a", model="anthropic:claude-opus-4-1")
        same = nb.Agent(name="a", agent_id="a", model="anthropic:claude-sonnet-4-5")
        assert one._fingerprint["model"] == "anthropic:claude-sonnet-4-5"
        assert one._fingerprint != two._fingerprint
        assert one._fingerprint == same._fingerprint

    def test_a_bad_model_string_fails_the_agent(self) -> None:
        """Agent(model="nope") raises the typed error."""
        with pytest.raises(UnknownModelString):
            nb.Agent(name="a", agent_id="a", model="nope")
