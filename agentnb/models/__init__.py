"""Models: the ``Model`` port and the built-in models.

``ScriptedModel`` is deterministic and offline (tests, notebooks, the demo).
``OpenAIChatModel`` talks to any OpenAI-compatible ``/chat/completions`` endpoint (``pip
install -e ".[openai]"``), ``OpenAIResponsesModel`` to OpenAI's Responses API (the same
extra), ``AnthropicModel`` to Anthropic's Messages API (``pip install -e ".[anthropic]"``);
each is imported on first use. ``from_string("anthropic:claude-sonnet-4-5")`` names one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentnb.models.base import (
    MESSAGE_TOKENS,
    REPLY_TOKENS,
    Backoff,
    Completion,
    ContextTooLong,
    Finish,
    Model,
    ModelError,
    ModelRequest,
    ReasoningDelta,
    StreamCollector,
    StreamItem,
    TextDelta,
    ToolCallDelta,
    Usage,
    count_tokens_with,
    estimate_text_tokens,
    estimate_tokens,
)
from agentnb.models.scripted import Reply, ScriptedModel, ScriptExhausted, ToolCall
from agentnb.models.strings import PREFIXES, UnknownModelString, from_string

if TYPE_CHECKING:
    from agentnb.models.anthropic import AnthropicModel
    from agentnb.models.openai import OpenAIChatModel
    from agentnb.models.openai_responses import OpenAIResponsesModel

__all__ = [
    "MESSAGE_TOKENS",
    "PREFIXES",
    "REPLY_TOKENS",
    "AnthropicModel",
    "Backoff",
    "Completion",
    "ContextTooLong",
    "Finish",
    "Model",
    "ModelError",
    "ModelRequest",
    "OpenAIChatModel",
    "OpenAIResponsesModel",
    "ReasoningDelta",
    "Reply",
    "ScriptExhausted",
    "ScriptedModel",
    "StreamCollector",
    "StreamItem",
    "TextDelta",
    "ToolCall",
    "ToolCallDelta",
    "UnknownModelString",
    "Usage",
    "count_tokens_with",
    "estimate_text_tokens",
    "estimate_tokens",
    "from_string",
]


_LAZY = {
    "AnthropicModel": "agentnb.models.anthropic",
    "OpenAIChatModel": "agentnb.models.openai",
    "OpenAIResponsesModel": "agentnb.models.openai_responses",
}


def __getattr__(name: str) -> Any:
    # The adapters need their SDKs, optional dependencies: imported only when asked for.
    module = _LAZY.get(name)
    if module is not None:
        import importlib

        return getattr(importlib.import_module(module), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
