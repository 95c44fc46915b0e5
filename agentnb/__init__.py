"""agentnb: durable, steerable AI-agent sessions for Python and Jupyter."""

from __future__ import annotations

from agentnb.agent import Agent
from agentnb.answers import Answer, ToolOutcome
from agentnb.errors import (
    AgentnbError,
    AppendConflict,
    CannotResume,
    Corrupt,
    CrossSessionCursor,
    ExpiredCursor,
    Fenced,
    HistoryError,
    HistoryTooLarge,
    IdempotencyConflict,
    InboxChanged,
    InvalidAnswer,
    InvalidCursor,
    InvalidInput,
    InvalidLimit,
    LeaseHeld,
    NotRunning,
    Parked,
    RecoveryLimitExceeded,
    SessionNotFound,
    StorageError,
    UncertainToolCalls,
    UnknownRequiredEvent,
)
from agentnb.events import Event, Message, register_event_type
from agentnb.history import HistoryPage
from agentnb.ids import SessionKey
from agentnb.log import Inbox, SessionLog
from agentnb.projections.chat import ChatItem, ChatSnapshot
from agentnb.records import (
    Holder,
    InputReceipt,
    Inspection,
    Interaction,
    Outcome,
    Receipt,
    Task,
    ToolCallRef,
    Transcript,
)
from agentnb.runtime.models.base import Model, ModelError
from agentnb.runtime.models.scripted import Reply, ScriptedModel, ToolCall
from agentnb.runtime.runtime import Runtime
from agentnb.runtime.tools import Tool, ToolContext, ask_user, tool
from agentnb.session import Session
from agentnb.stores import MemoryStore, SessionStore, open_store

__version__ = "0.1.0"

__all__ = [
    "Agent",
    "AgentnbError",
    "Answer",
    "AppendConflict",
    "CannotResume",
    "ChatItem",
    "ChatSnapshot",
    "Corrupt",
    "CrossSessionCursor",
    "Event",
    "ExpiredCursor",
    "Fenced",
    "HistoryError",
    "HistoryPage",
    "HistoryTooLarge",
    "Holder",
    "IdempotencyConflict",
    "Inbox",
    "InboxChanged",
    "InputReceipt",
    "Inspection",
    "Interaction",
    "InvalidAnswer",
    "InvalidCursor",
    "InvalidInput",
    "InvalidLimit",
    "LeaseHeld",
    "MemoryStore",
    "Message",
    "Model",
    "ModelError",
    "NotRunning",
    "Outcome",
    "Parked",
    "Receipt",
    "RecoveryLimitExceeded",
    "Reply",
    "Runtime",
    "ScriptedModel",
    "Session",
    "SessionKey",
    "SessionLog",
    "SessionNotFound",
    "SessionStore",
    "StorageError",
    "Task",
    "Tool",
    "ToolCall",
    "ToolCallRef",
    "ToolContext",
    "ToolOutcome",
    "Transcript",
    "UncertainToolCalls",
    "UnknownRequiredEvent",
    "ask_user",
    "open_store",
    "register_event_type",
    "tool",
]
