"""Model strings: ``"provider:model"`` names for the built-in adapters.

``from_string("anthropic:claude-sonnet-4-5")`` is ``AnthropicModel("claude-sonnet-4-5")``;
``Agent(model="...")`` takes the same strings. The string is the model's ``name``, so it is
what the log records and what the agent's fingerprint holds.
"""

from __future__ import annotations

import re
from typing import Any

from agentnb.errors import InvalidInput
from agentnb.models.base import Model
from agentnb.models.secrets import mask_userinfo

__all__ = ["OLLAMA_URL", "PREFIXES", "UnknownModelString", "from_string"]

OLLAMA_URL = "http://localhost:11434/v1"
"""Where ``"ollama:..."`` models are served (Ollama's OpenAI-compatible endpoint)."""

PREFIXES = {
    "anthropic": "anthropic:MODEL (AnthropicModel, the Messages API)",
    "openai": "openai:MODEL (OpenAIResponsesModel, the Responses API)",
    "openai-chat": "openai-chat:MODEL (OpenAIChatModel, Chat Completions)",
    "ollama": f"ollama:MODEL (OpenAIChatModel at {OLLAMA_URL})",
    "openai-compatible": "openai-compatible:MODEL@URL (OpenAIChatModel at URL, e.g. vLLM, "
    "llama.cpp)",
}
"""Each prefix ``from_string`` knows, with the form it takes."""

_AT_URL = re.compile(r"^(?P<model>.+?)@(?P<url>https?://.+)$")


class UnknownModelString(InvalidInput):
    """A model string ``from_string`` cannot read; the message lists the prefixes it knows."""


def _refuse(spec: object, why: str) -> UnknownModelString:
    shown = mask_userinfo(spec) if isinstance(spec, str) else spec
    forms = "; ".join(PREFIXES.values())
    return UnknownModelString(f"model string {shown!r} {why}; use one of: {forms}")


def from_string(spec: str, **options: Any) -> Model:
    """The model a ``"provider:model"`` string names; ``options`` go to its constructor.

    Keys come from the environment as each adapter says (``ANTHROPIC_API_KEY``,
    ``OPENAI_API_KEY``); ``ollama:`` and ``openai-compatible:`` send none unless
    ``api_key=`` is given (a local server must never receive the OpenAI key). Raises
    ``UnknownModelString`` (an ``InvalidInput``) listing the prefixes for a string it cannot
    read, and what the adapter raises for bad options (a missing key, say).
    """
    if not isinstance(spec, str):
        raise _refuse(spec, "is not a string")
    prefix, colon, rest = spec.partition(":")
    if not colon or not rest.strip():
        raise _refuse(spec, "has no 'provider:' prefix and model name")
    if prefix not in PREFIXES:
        raise _refuse(spec, f"has an unknown prefix {prefix!r}")
    name = mask_userinfo(spec)
    options.setdefault("name", name)
    if prefix == "anthropic":
        from agentnb.models.anthropic import AnthropicModel

        return AnthropicModel(rest, **options)
    if prefix == "openai":
        from agentnb.models.openai_responses import OpenAIResponsesModel

        return OpenAIResponsesModel(rest, **options)
    from agentnb.models.openai import OpenAIChatModel

    if prefix == "openai-chat":
        return OpenAIChatModel(rest, **options)
    options.setdefault("api_key", "")
    if prefix == "ollama":
        options.setdefault("base_url", OLLAMA_URL)
        return OpenAIChatModel(rest, **options)
    match = _AT_URL.match(rest)
    if match is None:
        raise _refuse(spec, "needs the server's URL: openai-compatible:MODEL@http(s)://...")
    url = match["url"]
    options["name"] = f"openai-compatible:{match['model']}@{mask_userinfo(url)}"
    return OpenAIChatModel(match["model"], base_url=url, **options)
