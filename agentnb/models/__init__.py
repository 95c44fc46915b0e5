"""Models: the ``Model`` port and the built-in models.

``ScriptedModel`` is deterministic and offline (tests, notebooks, the demo).
``OpenAIChatModel`` talks to any OpenAI-compatible ``/chat/completions`` endpoint; it needs the
optional ``httpx`` and ``httpx-sse`` dependencies (``pip install -e ".[openai]"``) and is
imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentnb.models.base import (
    MESSAGE_TOKENS,
    REPLY_TOKENS,
    Backoff,
    Completion,
    Finish,
    Model,
    ModelError,
    ModelRequest,
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

if TYPE_CHECKING:
    from agentnb.models.openai import OpenAIChatModel

__all__ = [
    "MESSAGE_TOKENS",
    "REPLY_TOKENS",
    "Backoff",
    "Completion",
    "Finish",
    "Model",
    "ModelError",
    "ModelRequest",
    "OpenAIChatModel",
    "Reply",
    "ScriptExhausted",
    "ScriptedModel",
    "StreamCollector",
    "StreamItem",
    "TextDelta",
    "ToolCall",
    "ToolCallDelta",
    "Usage",
    "count_tokens_with",
    "estimate_text_tokens",
    "estimate_tokens",
]


def __getattr__(name: str) -> Any:
    # The OpenAI adapter needs httpx, an optional dependency: import it only when asked for.
    if name == "OpenAIChatModel":
        from agentnb.models.openai import OpenAIChatModel

        return OpenAIChatModel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
