"""The public surface: a sorted, complete __all__, and a light `import agentnb`."""

from __future__ import annotations

import subprocess
import sys

import agentnb as nb

CONTRACT = [  # names DESIGN.md promises at the top level
    "Agent",
    "Answer",
    "ChatSnapshot",
    "Inspection",
    "InputReceipt",
    "Interaction",
    "Message",
    "Outcome",
    "Receipt",
    "Reply",
    "Runtime",
    "ScriptedModel",
    "Session",
    "SessionKey",
    "Task",
    "ToolCall",
    "ToolCallRef",
    "ToolContext",
    "ToolOutcome",
    "Transcript",
    "ask_user",
    "tool",
    "HistoryPage",
    "AgentnbError",
    "InvalidInput",
    "IdempotencyConflict",
    "NotRunning",
    "InvalidAnswer",
    "CannotResume",
    "UncertainToolCalls",
    "SessionNotFound",
    "HistoryError",
    "InvalidLimit",
    "InvalidCursor",
    "CrossSessionCursor",
    "ExpiredCursor",
    "HistoryTooLarge",
    "StorageError",
    "AppendConflict",
    "Fenced",
    "LeaseHeld",
    "Corrupt",
    "RecoveryLimitExceeded",
    "QueueFull",
    "AgentChanged",
]


def test_all_is_sorted_and_every_name_exists() -> None:
    """__all__ is sorted, names only what exists, and holds every contract name."""
    assert nb.__all__ == sorted(nb.__all__)
    for name in nb.__all__:
        assert hasattr(nb, name), name
    assert set(CONTRACT) <= set(nb.__all__)


def test_errors_form_one_tree() -> None:
    """Every error agentnb exports derives from AgentnbError, as errors.py draws it."""
    for name in nb.__all__:
        value = getattr(nb, name)
        if isinstance(value, type) and issubclass(value, Exception):
            assert issubclass(value, nb.AgentnbError), name
    assert issubclass(nb.UncertainToolCalls, nb.CannotResume)
    assert issubclass(nb.InvalidCursor, nb.HistoryError)
    assert issubclass(nb.Fenced, nb.StorageError)
    assert issubclass(nb.SessionFull, nb.StorageError)


def test_import_agentnb_stays_light() -> None:
    """`import agentnb` loads none of the optional heavy dependencies."""
    code = (
        "import sys, agentnb; heavy = [m for m in ('pyarrow', 'duckdb', 'pandas', "
        "'ipywidgets', 'httpx', 'matplotlib', 'psycopg', 'mcp', 'opentelemetry') "
        "if m in sys.modules]; print(heavy)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == "[]"
