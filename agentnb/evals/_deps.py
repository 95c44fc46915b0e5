"""pydantic-evals, imported once with the install hint (the ``evals`` extra)."""

from __future__ import annotations

from agentnb.errors import install_hint

try:
    import pydantic_evals
    import pydantic_evals.evaluators
except ImportError as exc:  # pragma: no cover - the extra is installed in dev
    raise ImportError("agentnb.evals needs pydantic-evals: " + install_hint("evals")) from exc

__all__ = ["pydantic_evals"]
