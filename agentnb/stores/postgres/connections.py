"""The connections of a PostgreSQL store: the pool's connection, the database clock, what
means a lost connection, and the URL parsed into what to connect with.
"""

from __future__ import annotations

import logging
import time
from typing import Any, TypeVar

from agentnb.errors import (
    InvalidInput,
)
from agentnb.stores.pgurl import scrub as scrub_url
from agentnb.stores.postgres.driver import (
    ConnectionPool,
    conninfo_to_dict,
    pg_errors,
    psycopg,
)

__all__ = [
    "Connection",
    "DatabaseClock",
    "check_idle",
    "connection_lost",
    "parse_url",
    "unencodable",
]

log = logging.getLogger("agentnb.stores.postgres")


T = TypeVar("T")


class Connection(psycopg.Connection[Any]):
    """A pooled connection that knows when it was last handed back."""

    idle_since = 0.0


def check_idle(conn: Connection) -> None:
    # A round trip on every checkout would cost the hot path; a connection that sat idle
    # (through a server restart, or a proxy reaping idle sockets) is checked before use.
    if time.monotonic() - conn.idle_since > 1.0:
        ConnectionPool.check_connection(conn)


class DatabaseClock:
    """The database server's clock, read locally through an offset.

    The offset is measured when the store opens and on every lease call, so ``now()`` stays
    within a round trip of the server's ``clock_timestamp()`` (what decides leases).
    """

    def __init__(self) -> None:
        self.offset = 0.0

    def now(self) -> float:
        return time.time() + self.offset

    def observe(self, server_now: float, sent: float, received: float) -> None:
        self.offset = server_now - (sent + received) / 2


def unencodable(exc: UnicodeEncodeError) -> InvalidInput:
    return InvalidInput(
        f"text {exc.object[exc.start : exc.end]!r} cannot be stored: it is not valid Unicode "
        "(a lone surrogate); replace it (str.encode('utf-8', 'replace')) first"
    )


def connection_lost(exc: BaseException) -> bool:
    """Whether ``exc`` means the connection is gone (not an error of the statement)."""
    if isinstance(exc, pg_errors.LockNotAvailable | pg_errors.QueryCanceled):
        return False
    if isinstance(exc, psycopg.OperationalError):
        return True
    return isinstance(exc, psycopg.InterfaceError)


def parse_url(url: str, shown: str, connect_timeout: float) -> tuple[str, str]:
    """The conninfo to connect with and a "host:port/db" text that names no secret."""
    try:
        params = conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        raise InvalidInput(
            f"{shown} is not a PostgreSQL URL ({scrub_url(str(exc), url)}); write "
            "postgresql://user:password@host:port/dbname"
        ) from None
    if "connect_timeout" not in params:
        params["connect_timeout"] = max(1, round(connect_timeout))
    host = str(params.get("host") or params.get("hostaddr") or "localhost")
    port = str(params.get("port") or 5432)
    db = str(params.get("dbname") or params.get("user") or "")
    where = f"{host}:{port}/{db}" if not host.startswith("/") else f"{host} (socket)/{db}"
    return psycopg.conninfo.make_conninfo("", **params), where
