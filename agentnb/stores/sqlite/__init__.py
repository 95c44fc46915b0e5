"""The embedded default store: one SQLite file in WAL mode, safe across threads and processes.

``SQLiteStore`` is the composition of its roles, one module each: ``catalogue``, ``log``
(with ``group_commit``), ``inbox``, ``leases``, ``claims`` (the pending-work mark and its
watcher), ``watermarks``, ``blobs`` and ``tokens``; beneath them ``core`` (the connection
discipline every role follows: ``connections``), ``schema`` (the tables and the migrations
from older formats) and ``files`` (the file safety: modes, links, owners, and the
``-catalogue`` record that tells a store that lost sessions). Each of those modules says
what its part guarantees; the port's guarantees are ``agentnb.stores.base``'s.
"""

from __future__ import annotations

import os
from pathlib import Path

from agentnb.errors import InvalidInput
from agentnb.ids import Clock, SessionKey
from agentnb.stores.sqlite.blobs import SQLiteBlobs
from agentnb.stores.sqlite.catalogue import SQLiteCatalogue
from agentnb.stores.sqlite.claims import PENDING_POLL, SQLiteWorkClaims
from agentnb.stores.sqlite.connections import (
    IDLE_CONNECTIONS,
    TURN_TIMEOUT,
    ThreadConnections,
    adbc_errors,
    writers_of,
)
from agentnb.stores.sqlite.files import CATALOGUE, make_private_dirs, prepare_file
from agentnb.stores.sqlite.group_commit import GroupCommit
from agentnb.stores.sqlite.inbox import SQLiteInbox
from agentnb.stores.sqlite.leases import SQLiteLeases
from agentnb.stores.sqlite.log import SQLiteEventLog
from agentnb.stores.sqlite.schema import FORMAT, SQLiteSchema
from agentnb.stores.sqlite.schema import FORMAT_4_COLUMNS as FORMAT_4_COLUMNS
from agentnb.stores.sqlite.schema import FORMAT_5_COLUMNS as FORMAT_5_COLUMNS
from agentnb.stores.sqlite.schema import LIFECYCLE_COLUMNS as LIFECYCLE_COLUMNS
from agentnb.stores.sqlite.schema import MIGRATABLE as MIGRATABLE
from agentnb.stores.sqlite.schema import SCHEMA as SCHEMA
from agentnb.stores.sqlite.tokens import SQLiteTokens
from agentnb.stores.sqlite.watermarks import SQLiteWatermarks

# Also handed on by name (``X as X`` above): what the old single module held that tests and
# benchmarks read, the schema's text and the columns each format added.
__all__ = [
    "CATALOGUE",
    "FORMAT",
    "IDLE_CONNECTIONS",
    "PENDING_POLL",
    "SYNCHRONOUS",
    "SQLiteStore",
    "adbc_errors",
    "make_private_dirs",
]

SYNCHRONOUS = ("OFF", "NORMAL", "FULL", "EXTRA")
_TURN_TIMEOUT = TURN_TIMEOUT
"""Seconds a write waits for the other writers of this process (a write takes milliseconds:
this only bounds a wait on a writer that hangs); read when a store opens."""


class SQLiteStore(
    SQLiteWorkClaims,
    SQLiteInbox,
    SQLiteCatalogue,
    SQLiteEventLog,
    SQLiteWatermarks,
    SQLiteBlobs,
    SQLiteTokens,
    SQLiteLeases,
    SQLiteSchema,
):
    """A ``SessionStore`` in one SQLite file (``synchronous=FULL`` unless told otherwise).

    With ``create=False`` a missing file raises ``InvalidInput`` and nothing is created (no
    folder, no file): for readers such as ``agentnb.analysis``. ``busy_timeout``: seconds a
    write waits while another process writes the file; the writers of this process take
    turns among themselves and never meet that wait.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: str = "FULL",
        clock: Clock | None = None,
        busy_timeout: float = 30.0,
        create: bool = True,
    ) -> None:
        super().__init__(clock=clock)
        if not isinstance(path, str | os.PathLike):
            raise InvalidInput(f"path must be a str or path, got {type(path).__name__}")
        if str(synchronous).upper() not in SYNCHRONOUS:
            raise InvalidInput(f"synchronous must be one of {SYNCHRONOUS}, got {synchronous!r}")
        self.path = Path(path)
        self.synchronous = str(synchronous).upper()
        self.url = f"sqlite:///{self.path}"
        self._file = os.path.abspath(self.path)
        self._busy_ms = int(busy_timeout * 1000)
        self._turn_timeout = _TURN_TIMEOUT
        self._conns = ThreadConnections()
        self._ids: dict[SessionKey, int] = {}
        self._group = GroupCommit()
        self._create = create
        self._catalogue = Path(f"{self.path}{CATALOGUE}")
        self.read_only = prepare_file(self.path, self._catalogue, create=create)
        self._writers = writers_of(self.path)
        try:
            self._init_schema()
        except BaseException:
            self.close()  # a refused file must not leave connections open behind it
            raise

    def __repr__(self) -> str:
        # The file it opened, resolved: a relative URL depends on the working directory.
        return f"SQLiteStore({self._file!r})"

    def close(self) -> None:
        super().close()
        self._conns.close()

    def _idle(self) -> None:
        self._conns.lend()


# The names tests and benchmarks read from before the package (same objects).
_FORMAT_4_COLUMNS = FORMAT_4_COLUMNS
_FORMAT_5_COLUMNS = FORMAT_5_COLUMNS
_LIFECYCLE_COLUMNS = LIFECYCLE_COLUMNS
_SCHEMA = SCHEMA
