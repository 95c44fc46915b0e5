"""Tracebacks fit for the log: formatted, bounded, and with secrets scrubbed.

When a tool or a model raises, its traceback is kept in the event that records the failure
(``tool/result.traceback``, ``model/end.traceback``), shown on demand in the view's tool card
and logged (``agentnb.tools``, ``agentnb.models``). The log is read by people and exported,
so the text is cut to ``MAX_TRACEBACK`` characters (the start and the innermost frames are
kept) and scrubbed of what looks like a secret: the values of environment variables whose
names say key, token, secret, password or credential, bearer tokens, ``sk-...`` keys,
``password=...``-style assignments and the password of a URL.
"""

from __future__ import annotations

import os
import re
import traceback
from pathlib import Path

__all__ = ["MAX_TRACEBACK", "format_traceback", "scrub_secrets"]

MAX_TRACEBACK = 16 * 1024
"""Characters of a traceback kept in an event."""
_HEAD = 1024
"""Of those, the characters kept from its start (the rest from its end)."""

_PACKAGE = str(Path(__file__).resolve().parent)
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|PWD|CREDENTIAL|AUTH", re.IGNORECASE)
_PATTERNS = (
    (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}"), r"\1 ***"),
    (re.compile(r"\bsk-[A-Za-z0-9_-]{8,}"), "sk-***"),
    (
        re.compile(
            r"(?i)\b((?:api[_-]?key|access[_-]?token|token|secret|password|passwd|pwd)"
            r"[\"']?\s*[=:]\s*[\"']?)[^\s\"',;&)]+"
        ),
        r"\1***",
    ),
    (re.compile(r"(://[^/\s:@]+:)[^/\s@]+@"), r"\1***@"),
)


def scrub_secrets(text: str) -> str:
    """``text`` with what looks like a secret replaced by ``***``."""
    for name, value in os.environ.items():
        if len(value) >= 8 and _SECRET_NAME.search(name) and value in text:
            text = text.replace(value, "***")
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def format_traceback(exc: BaseException, *, limit: int = MAX_TRACEBACK) -> str:
    """The traceback of ``exc`` as text for an event: agentnb's own frames at its top left
    out (where the runtime called the tool or model), scrubbed, at most ``limit`` characters."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename.startswith(_PACKAGE + os.sep):
        tb = tb.tb_next
    if tb is None:  # raised inside agentnb itself: keep every frame
        tb = exc.__traceback__
    text = scrub_secrets("".join(traceback.format_exception(type(exc), exc, tb)))
    if len(text) <= limit:
        return text
    head = min(_HEAD, limit // 4)
    marker = f"\n[... {len(text) - limit} characters cut ...]\n"
    tail = max(0, limit - head - len(marker))
    return text[:head] + marker + text[len(text) - tail :]
