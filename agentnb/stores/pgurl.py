"""PostgreSQL URLs read the way libpq reads them, so what is shown and scrubbed is what
libpq takes as the password (no driver needed: the CLI and ``Runtime`` use it too).

libpq ends the user info at the *first* ``@`` before any ``/``: a password holding ``@``
gives its tail to the host, one holding ``/`` gives no user info at all (its start becomes
the host and port). Its parse errors quote a bad part whole (a space, a stray ``%``).
``check`` refuses those URLs before libpq sees them, with a message that names no part of
the password; ``redact`` masks the password (and a ``password=`` query value);
``secrets`` are every password-shaped text of the URL, raw and decoded, for scrubbing an
error message.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

from agentnb.errors import InvalidInput

__all__ = ["check", "is_postgres", "redact", "scrub", "secrets"]

_SCHEME = re.compile(r"(?i)(postgres(?:ql)?://)(.*)", re.DOTALL)
_BAD_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")
_HINT = (
    "percent-encode it in the URL ('@' as %40, '/' as %2F, '%' as %25, a space as %20), "
    "or pass the password in PGPASSWORD or ~/.pgpass instead"
)


def is_postgres(url: str) -> bool:
    return _SCHEME.match(url) is not None


def _parts(url: str) -> tuple[str, str | None, str | None, str] | None:
    """(scheme, user, password, the rest) as libpq splits them; None if not a PG URL."""
    found = _SCHEME.match(url)
    if found is None:
        return None
    scheme, rest = found.groups()
    at, slash = rest.find("@"), rest.find("/")
    if at < 0 or (0 <= slash < at):
        return scheme, None, None, rest
    user, colon, password = rest[:at].partition(":")
    return scheme, user, password if colon else None, rest[at + 1 :]


def _query_passwords(rest: str) -> list[str]:
    _, _, query = rest.partition("?")
    return [
        value
        for key, _, value in (pair.partition("=") for pair in query.split("&"))
        if "password" in key.lower() and value
    ]


def check(url: str) -> None:
    """``InvalidInput`` for a URL libpq would read another way than its writer meant, or
    whose password libpq would quote in its error (nothing of the password is named)."""
    parts = _parts(url)
    if parts is None:
        return
    _, user, password, rest = parts
    if "@" in rest.partition("?")[0]:  # an '@' after libpq's end of the user info
        raise InvalidInput(f"the URL's password (or user name) holds an '@'; {_HINT}")
    if user is None and "@" in rest.partition("?")[0]:
        raise InvalidInput(f"the URL's password (or user name) holds a '/'; {_HINT}")
    # libpq quotes whole the part it cannot decode (a password's tail may be in any part).
    for text in [rest, *(t for t in (user, password) if t)]:
        if _BAD_PERCENT.search(text):
            raise InvalidInput(
                f"the URL (its password?) holds a '%' that starts no %XX code; {_HINT}"
            )
        if any(c.isspace() for c in text):
            raise InvalidInput(f"the URL (its password?) holds a space; {_HINT}")
        if "%00" in text:
            raise InvalidInput("the URL holds %00, which libpq refuses; remove it")


def redact(url: str) -> str:
    """``url`` with the password libpq would read masked (``***``), and ``password=``
    query values too; the rest as written."""
    parts = _parts(url)
    if parts is None:
        return url
    scheme, user, password, rest = parts
    if user is not None:
        rest = f"{user}{'' if password is None else ':***'}@{rest}"
    elif "@" in rest.partition("?")[0]:  # not a URL libpq reads as its writer meant
        rest = "***@" + rest.partition("?")[0].rsplit("@", 1)[1]
    path, sep, query = rest.partition("?")
    if sep:
        pairs = [pair.partition("=") for pair in query.split("&")]
        query = "&".join(
            f"{k}{eq}{'***' if 'password' in k.lower() and v else v}" for k, eq, v in pairs
        )
    return f"{scheme}{path}{sep}{query}"


def secrets(url: str) -> list[str]:
    """Every password-shaped text of ``url``: the password as libpq reads it and as the
    last ``@`` would end it, each raw and percent-decoded, and ``password=`` values;
    longest first (what a scrub replaces)."""
    found = _SCHEME.match(url)
    if found is None:
        return []
    rest = found.group(2)
    head = rest.partition("?")[0]
    candidates: set[str] = set(_query_passwords(rest))
    parts = _parts(url)
    if parts is not None and parts[2]:
        candidates.add(parts[2])
    if "@" in head:  # the writer's reading: the user info ends at the last '@'
        user_info = head.rsplit("@", 1)[0]
        if ":" in user_info:
            candidates.add(user_info.partition(":")[2])
    for text in list(candidates):
        candidates.add(unquote(text, errors="replace"))
        candidates.update(piece for piece in re.split(r"[@/?:#&]", text) if len(piece) >= 4)
    return sorted((c for c in candidates if c), key=len, reverse=True)


def scrub(text: str, url: str) -> str:
    """``text`` with every secret of ``url`` replaced by ``***``."""
    for secret in secrets(url):
        text = text.replace(secret, "***")
    return text
