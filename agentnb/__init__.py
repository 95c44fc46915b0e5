"""agentnb: durable, steerable AI-agent sessions for Python and Jupyter."""

from __future__ import annotations

from typing import Any

from agentnb import blocks, mcp
from agentnb.agent import Agent, SubagentTool, subagent
from agentnb.answers import Answer, ToolOutcome
from agentnb.baseline import ImportReport
from agentnb.compaction import Compactor, SummaryCompactor, TrimCompactor
from agentnb.errors import (
    AgentChanged,
    AgentnbError,
    AppendConflict,
    ArchiveCorrupt,
    BlockTooLarge,
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
    InvalidBlock,
    InvalidCursor,
    InvalidInput,
    InvalidLimit,
    LeaseHeld,
    MiddlewareFailed,
    NotRunning,
    Parked,
    QueueFull,
    RecoveryLimitExceeded,
    ReducerFailed,
    SessionArchived,
    SessionBusy,
    SessionDeleted,
    SessionFull,
    SessionNotFound,
    StorageError,
    StoreNotEmpty,
    SubagentLimitExceeded,
    ToolsetUnavailable,
    Unauthorized,
    UncertainToolCalls,
    UnknownRequiredEvent,
    WorkspaceChanged,
    WorkspaceEscape,
)
from agentnb.events import Event, Message, PlanItem, register_event_type
from agentnb.history import HistoryPage
from agentnb.ids import SessionKey
from agentnb.limits import Limits
from agentnb.log import Inbox, SessionLog
from agentnb.middleware import MiddlewareContext, ModelReply, Refuse, ToolCallResult
from agentnb.models.base import Model, ModelError
from agentnb.models.scripted import Reply, ScriptedModel, ToolCall
from agentnb.ops import Webhook, backup, migrate, restore, verify
from agentnb.projections.chat import ChatItem, ChatSnapshot
from agentnb.records import (
    Child,
    Holder,
    InputReceipt,
    Inspection,
    Interaction,
    Outcome,
    PermissionRule,
    PruneReport,
    Receipt,
    SessionCounts,
    SessionInfo,
    Task,
    ToolCallRef,
    Transcript,
    UsageTotals,
    WorkspaceStatus,
)
from agentnb.runtime.runtime import Runtime
from agentnb.session import Session
from agentnb.stores import MemoryStore, SessionStore, Tombstone, open_store
from agentnb.tools import Tool, ToolContext, Toolset, ask_user, todo, tool
from agentnb.workspace import Workspace, workspace_tools

__version__ = "0.1.0"


def _show_session(session: Session, include: Any, exclude: Any) -> Any:
    """A session displayed in a notebook: its live ``SessionView``, or text without the
    widgets extra."""
    try:
        from agentnb.widgets import SessionView  # optional: the widgets extra
    except ImportError:
        return {"text/plain": repr(session)}
    return SessionView(session)._repr_mimebundle_(include=include, exclude=exclude)


Session.display = _show_session


def connect(url: str, token: str | None = None, *, timeout: float = 30.0) -> Any:
    """The agentnb service at ``url`` (``agentnb serve``) as a ``RemoteRuntime``: its
    ``session()`` / ``open()`` / ``sessions()`` give ``RemoteSession`` objects with the
    ``Session`` verbs, records and errors, acting as the token's user. Needs httpx
    (``pip install -e ".[server]"``)."""
    from agentnb.client import connect as connect_  # optional: httpx

    return connect_(url, token, timeout=timeout)


def __getattr__(name: str) -> Any:
    # The remote client's classes, imported only when asked for (httpx is optional).
    if name in {"RemoteRuntime", "RemoteSession"}:
        from agentnb import client

        return getattr(client, name)
    # Evaluation (pydantic-evals, pandas): imported on first use of nb.evals.
    if name == "evals":
        import importlib

        return importlib.import_module("agentnb.evals")
    raise AttributeError(f"module 'agentnb' has no attribute {name!r}")


__all__ = [
    "Agent",
    "AgentChanged",
    "AgentnbError",
    "Answer",
    "AppendConflict",
    "ArchiveCorrupt",
    "BlockTooLarge",
    "CannotResume",
    "ChatItem",
    "ChatSnapshot",
    "Child",
    "Compactor",
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
    "ImportReport",
    "Inbox",
    "InboxChanged",
    "InputReceipt",
    "Inspection",
    "Interaction",
    "InvalidAnswer",
    "InvalidBlock",
    "InvalidCursor",
    "InvalidInput",
    "InvalidLimit",
    "LeaseHeld",
    "Limits",
    "MemoryStore",
    "Message",
    "MiddlewareContext",
    "MiddlewareFailed",
    "Model",
    "ModelError",
    "ModelReply",
    "NotRunning",
    "Outcome",
    "Parked",
    "PermissionRule",
    "PlanItem",
    "PruneReport",
    "QueueFull",
    "Receipt",
    "RecoveryLimitExceeded",
    "ReducerFailed",
    "Refuse",
    "RemoteRuntime",
    "RemoteSession",
    "Reply",
    "Runtime",
    "ScriptedModel",
    "Session",
    "SessionArchived",
    "SessionBusy",
    "SessionCounts",
    "SessionDeleted",
    "SessionFull",
    "SessionInfo",
    "SessionKey",
    "SessionLog",
    "SessionNotFound",
    "SessionStore",
    "StorageError",
    "StoreNotEmpty",
    "SubagentLimitExceeded",
    "SubagentTool",
    "SummaryCompactor",
    "Task",
    "Tombstone",
    "Tool",
    "ToolCall",
    "ToolCallRef",
    "ToolCallResult",
    "ToolContext",
    "ToolOutcome",
    "Toolset",
    "ToolsetUnavailable",
    "Transcript",
    "TrimCompactor",
    "Unauthorized",
    "UncertainToolCalls",
    "UnknownRequiredEvent",
    "UsageTotals",
    "Webhook",
    "Workspace",
    "WorkspaceChanged",
    "WorkspaceEscape",
    "WorkspaceStatus",
    "ask_user",
    "backup",
    "blocks",
    "connect",
    "evals",
    "mcp",
    "migrate",
    "open_store",
    "register_event_type",
    "restore",
    "subagent",
    "todo",
    "tool",
    "verify",
    "workspace_tools",
]
