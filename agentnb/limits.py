"""The one size limit on text that enters a session, and the one function that checks it.

Every text a person or a program hands to a session goes through ``check_text`` (or, for
structured values such as edited tool arguments, ``check_json_size``) before anything is
written: task inputs (``submit``, ``send``, ``steer``), injected material, answers of every
kind (``ask_user`` and external-execution outputs, rejection reasons, edited arguments) and
reconcile outcomes and their reason. So a 50 MB answer is refused exactly as a 50 MB task is.

This module sits at the bottom of the package: it imports nothing above ``errors.py``.
"""

from __future__ import annotations

import json

from agentnb.errors import AgentnbError, InvalidInput

__all__ = ["MAX_INPUT_CHARS", "check_json_size", "check_text"]

MAX_INPUT_CHARS = 1_000_000
"""Most characters one text (or the JSON form of one structured value) may have."""

_HINT = "split large material into parts and inject() them"


def check_text(
    value: object,
    what: str,
    *,
    allow_empty: bool = False,
    error: type[AgentnbError] = InvalidInput,
) -> str:
    """``value`` if it is a string within ``MAX_INPUT_CHARS``; else ``error`` saying why.

    ``what`` names the text in the message ("input", "the answer to req_..."). Blank text is
    refused too unless ``allow_empty`` (a tool's output may legitimately be empty).
    """
    if not isinstance(value, str):
        raise error(f"{what} must be a string, got {type(value).__name__}")
    if not allow_empty and not value.strip():
        raise error(f"{what} is empty; give the agent something to work on")
    if len(value) > MAX_INPUT_CHARS:
        raise error(
            f"{what} has {len(value):,} characters; the limit is {MAX_INPUT_CHARS:,} ({_HINT})"
        )
    return value


def check_json_size(value: object, what: str, *, error: type[AgentnbError] = InvalidInput) -> None:
    """Refuse a structured value whose JSON text is longer than ``MAX_INPUT_CHARS``.

    Values JSON cannot encode are left to the caller's own validation.
    """
    try:
        size = len(json.dumps(value, ensure_ascii=False))
    except (TypeError, ValueError):
        return
    except RecursionError:
        raise error(f"{what} is nested too deeply to store; pass a flatter value") from None
    if size > MAX_INPUT_CHARS:
        raise error(
            f"{what} has {size:,} characters as JSON; the limit is {MAX_INPUT_CHARS:,} ({_HINT})"
        )
