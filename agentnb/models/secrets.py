"""Credentials in model adapters: held out of reprs, and scrubbed from every error text.

``Secret`` holds a key so that no repr, ``vars()`` dump or traceback shows it; ``scrub``
replaces every form a secret can take in text (raw, repr-, JSON-, bytes- and
percent-escaped, and a cut-off run of its start); ``clean_key`` refuses a key that cannot go
in an HTTP header before any request is made (the HTTP library's error would quote it).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from urllib.parse import quote, quote_plus

from agentnb.errors import InvalidInput

__all__ = [
    "PREFIX",
    "REDACTED",
    "Secret",
    "clean_key",
    "cut",
    "mask_userinfo",
    "scrub",
    "secret_forms",
]

REDACTED = "***"
PREFIX = 8
"""An echoed run of at least this many leading characters of the key is redacted too."""


class Secret:
    """Holds a credential so that no repr, vars() dump or traceback shows it."""

    __slots__ = ("_value",)

    def __init__(self, value: str | None) -> None:
        self._value = value

    def reveal(self) -> str | None:
        return self._value

    def __repr__(self) -> str:
        return "'***'" if self._value else "None"


def clean_key(value: object, source: str) -> str | None:
    """The key without surrounding whitespace (a key read from a file ends in a newline).

    A key with a character that cannot go in an HTTP header is refused here, before any
    request: otherwise the HTTP library's error would quote the whole header, key included.
    """
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidInput(f"{source} must be a str, got {type(value).__name__}")
    key = value.strip()
    for position, char in enumerate(key):
        if not " " < char <= "~":
            raise InvalidInput(
                f"{source} has a character that cannot go in an HTTP header at position "
                f"{position} (a space, control or non-ASCII character); copy the key again"
            )
    return key or None


def mask_userinfo(url: str) -> str:
    """``url`` with any ``user:password@`` part shown as ``***@``."""
    return re.sub(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/?#]*@", rf"\1{REDACTED}@", url)


def secret_forms(secret: str) -> set[str]:
    """The ways a secret can appear in text: raw, repr-, JSON-, bytes- and percent-escaped."""
    return {
        secret,
        repr(secret)[1:-1],
        json.dumps(secret)[1:-1],
        json.dumps(secret, ensure_ascii=False)[1:-1],
        repr(secret.encode())[2:-1],
        quote(secret, safe=""),
        quote(secret),
        quote_plus(secret),
    }


def scrub(text: str, secrets: Iterable[str], prefixed: str | None) -> str:
    """``text`` with every form of every secret replaced, longest first; and any run of at
    least ``PREFIX`` characters along ``prefixed`` (a server may echo a cut-off key)."""
    for form in sorted({f for s in secrets for f in secret_forms(s)}, key=len, reverse=True):
        if form:
            text = text.replace(form, REDACTED)
    if prefixed and len(prefixed) >= PREFIX:
        start = text.find(prefixed[:PREFIX])
        while start >= 0:
            end = start + PREFIX
            while (
                end < len(text)
                and end - start < len(prefixed)
                and (text[end] == prefixed[end - start])
            ):
                end += 1
            text = text[:start] + REDACTED + text[end:]
            start = text.find(prefixed[:PREFIX], start + len(REDACTED))
    return text


def cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
