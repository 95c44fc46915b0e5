"""agentnb: durable, steerable AI-agent sessions for Python and Jupyter."""

from __future__ import annotations

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
    InvalidAnswer,
    InvalidCursor,
    InvalidInput,
    InvalidLimit,
    LeaseHeld,
    NotRunning,
    RecoveryLimitExceeded,
    SessionNotFound,
    StorageError,
    UncertainToolCalls,
    UnknownRequiredEvent,
)
from agentnb.events import Event, register_event_type
from agentnb.ids import SessionKey
from agentnb.log import Inbox, SessionLog
from agentnb.stores import MemoryStore, SessionStore, open_store

__version__ = "0.1.0"

__all__ = [
    "AgentnbError",
    "AppendConflict",
    "CannotResume",
    "Corrupt",
    "CrossSessionCursor",
    "Event",
    "ExpiredCursor",
    "Fenced",
    "HistoryError",
    "HistoryTooLarge",
    "IdempotencyConflict",
    "Inbox",
    "InvalidAnswer",
    "InvalidCursor",
    "InvalidInput",
    "InvalidLimit",
    "LeaseHeld",
    "MemoryStore",
    "NotRunning",
    "RecoveryLimitExceeded",
    "SessionKey",
    "SessionLog",
    "SessionNotFound",
    "SessionStore",
    "StorageError",
    "UncertainToolCalls",
    "UnknownRequiredEvent",
    "open_store",
    "register_event_type",
]
