"""Session stores: ``SessionStore`` (the port) and its backends; ``open_store`` picks one."""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path
from urllib.parse import SplitResult, parse_qsl, urlsplit

from agentnb.errors import InvalidInput
from agentnb.ids import Clock
from agentnb.stores import pgurl
from agentnb.stores.base import Lease, SessionRecord, SessionStore, Tombstone
from agentnb.stores.memory import MemoryStore

__all__ = [
    "Lease",
    "MemoryStore",
    "SessionRecord",
    "SessionStore",
    "Tombstone",
    "default_store_url",
    "open_store",
    "split_url",
]


def default_store_url() -> str:
    """The embedded default: an SQLite file under ``./.agentnb/``."""
    return "sqlite:///.agentnb/agentnb.sqlite"


def _warn_if_meant_absolute(path: str) -> None:
    """A relative SQLite path whose first folder exists at ``/`` (``sqlite:///tmp/x.db``)
    was most likely meant absolute: say which file it opens and how to write the other."""
    parts = Path(path).parts
    if os.path.isabs(path) or len(parts) < 2 or parts[0] in {".", "..", "~"}:
        return
    if not os.path.isdir(os.path.join(os.sep, parts[0])):
        return
    warnings.warn(
        f"sqlite:///{path} is relative to the working directory: it opens "
        f"{os.path.abspath(path)}. For /{path} write sqlite:////{path} (four slashes)",
        UserWarning,
        stacklevel=_outside_agentnb(),
    )


def _outside_agentnb() -> int:
    """The ``stacklevel`` of the first caller outside this package (the user's line)."""
    package = str(Path(__file__).resolve().parents[1])
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1  # type: ignore[assignment]
    return level


def split_url(url: str) -> SplitResult:
    """``urlsplit(url)``, with a malformed URL as ``InvalidInput`` (which never echoes it:
    it may hold a password)."""
    try:
        return urlsplit(url)
    except ValueError as exc:
        raise InvalidInput(
            f"the store URL is malformed ({exc}); write it as memory://, sqlite:///path/to/file "
            "or postgresql://user:password@host:port/dbname (an IPv6 host in brackets: [::1])"
        ) from None


def open_store(
    url: str | SessionStore | None = None, *, clock: Clock | None = None, create: bool = True
) -> SessionStore:
    """Open the store a URL names (a ``SessionStore`` is returned as is).

    ``memory://``; ``sqlite:///relative/path.db`` or ``sqlite:////absolute/path.db`` (add
    ``?synchronous=NORMAL`` to trade durability on power loss for speed);
    ``postgresql://user:password@host:port/dbname`` (or ``postgres://``; any libpq URL,
    e.g. ``?sslmode=require`` or ``?host=/run/postgresql`` for a unix socket), which needs
    the ``postgres`` extra. With ``create=False`` (readers) a store file or database without
    an agentnb store raises ``InvalidInput`` and nothing is created.
    """
    if isinstance(url, SessionStore):
        return url
    if url is None:
        url = default_store_url()
    if not isinstance(url, str):
        raise InvalidInput(
            f"store must be a URL string or a SessionStore, got {type(url).__name__}"
        )
    parts = split_url(url)
    scheme = parts.scheme.lower()
    if pgurl.is_postgres(url):
        pgurl.check(url)  # urlsplit is not libpq: what libpq will read decides from here
        from agentnb.stores.postgres import PostgresStore

        return PostgresStore(url, clock=clock, create=create)
    if scheme == "memory":
        return MemoryStore(clock=clock)
    if scheme == "sqlite":
        if parts.netloc:
            raise InvalidInput(
                f"{url!r}: SQLite URLs have no host; write sqlite:///relative.db "
                "or sqlite:////absolute/path.db"
            )
        path = parts.path[1:] if parts.path.startswith("/") else parts.path
        if not path:
            raise InvalidInput(f"{url!r} names no file; write sqlite:///path/to/agentnb.sqlite")
        options = dict(parse_qsl(parts.query))
        unknown = set(options) - {"synchronous"}
        if unknown:
            raise InvalidInput(
                f"{url!r}: unknown option(s) {sorted(unknown)}; only 'synchronous' is understood"
            )
        _warn_if_meant_absolute(path)
        from agentnb.stores.sqlite import SQLiteStore

        return SQLiteStore(
            os.path.expanduser(path),
            clock=clock,
            synchronous=options.get("synchronous", "FULL"),
            create=create,
        )
    shown = url
    if scheme and "@" in parts.netloc:  # never echo credentials, whatever the scheme
        shown = url.replace(parts.netloc, "***@" + parts.netloc.rpartition("@")[2], 1)
    raise InvalidInput(
        f"unsupported store URL {shown!r}: use memory://, sqlite:///path or "
        "postgresql://user@host/dbname (or pass a SessionStore instance)"
    )
