"""Notebook front end: ``SessionView(session)`` shows and drives one session with ipywidgets.

``import agentnb.widgets`` works without ipywidgets; using ``SessionView`` then raises
``ImportError`` saying what to install (``pip install -e ".[widgets]"``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentnb.widgets.view import SessionView

__all__ = ["SessionView"]


def __getattr__(name: str) -> Any:
    if name == "SessionView":
        from agentnb.widgets.view import SessionView

        return SessionView
    raise AttributeError(f"module 'agentnb.widgets' has no attribute {name!r}")
