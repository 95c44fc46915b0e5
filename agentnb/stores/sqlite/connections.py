"""The connection discipline of an SQLite store: pooled per-thread connections, the writers'
turns on one file, cursors that name damage, and the translation of driver errors.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sqlite3
import threading
import time
import weakref
from pathlib import Path
from typing import Any

from agentnb import _portable
from agentnb.errors import Corrupt, StorageError

__all__ = ["IDLE_CONNECTIONS", "adbc_errors"]


# SQLite's result codes (the low byte of an extended code) for a damaged file.
_SQLITE_CORRUPT, _SQLITE_NOTADB = 11, 26


IDLE_CONNECTIONS = 8
"""Connections of each kind a store keeps for threads to come (more are closed)."""


class _Held:
    """A thread's connection, in its ``threading.local``: when the thread ends Python drops
    it, and its finalizer gives the connection back to the pool."""

    __slots__ = ("__weakref__", "conn", "finalizer")

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.finalizer: weakref.finalize[Any, Any] | None = None


class ThreadConnections:
    """A store's connections: a thread uses one of each kind while it works and gives it
    back to a bounded pool when it ends or goes to sleep in a wait (``lend``).

    Threads come and go (a stream's feed, a worker pool's idle thread) and most of them
    sleep most of the time; a connection kept for each thread for the store's life kept
    its descriptors and page cache after its thread was gone. Closing it does not give
    the descriptor back either while any other connection of the process is open: SQLite
    keeps the file open (a POSIX lock of the process would go with it) until a new
    connection reuses it. So the connections open at once are bounded by the threads that
    work at once, not by the threads that exist.
    """

    def __init__(self) -> None:
        self._local = threading.local()
        self._open: dict[int, Any] = {}
        self._idle: dict[str, list[Any]] = {}
        self._lock = threading.RLock()  # a finalizer may run in a thread that holds it

    def get(self, kind: str) -> Any:
        """This thread's connection of ``kind``: its own, an idle one, or None (open one
        and ``put`` it)."""
        held: _Held | None = getattr(self._local, kind, None)
        if held is not None:
            return held.conn
        with self._lock:
            idle = self._idle.get(kind)
            conn = idle.pop() if idle else None
        if conn is not None:
            self._hold(kind, conn)
        return conn

    def put(self, kind: str, conn: Any) -> None:
        """``conn`` (just opened) is this thread's connection of ``kind``."""
        with self._lock:
            self._open[id(conn)] = conn
        self._hold(kind, conn)

    def _hold(self, kind: str, conn: Any) -> None:
        held = _Held(conn)
        held.finalizer = weakref.finalize(held, self._give_back, kind, id(conn))
        setattr(self._local, kind, held)

    def lend(self) -> None:
        """This thread is about to sleep: its connections not in a transaction go back to
        the pool (it takes one again when it next reads)."""
        for kind in ("conn", "adbc"):
            held: _Held | None = getattr(self._local, kind, None)
            if held is None or getattr(held.conn, "in_transaction", False):
                continue
            delattr(self._local, kind)
            if held.finalizer is not None:
                held.finalizer()  # gives it back now, and never again

    def _give_back(self, kind: str, ident: int) -> None:
        with self._lock:
            conn = self._open.get(ident)
            if conn is None:
                return  # the store closed it
            idle = self._idle.setdefault(kind, [])
            if len(idle) < IDLE_CONNECTIONS and not getattr(conn, "in_transaction", False):
                idle.append(conn)
                return
            del self._open[ident]
        with contextlib.suppress(Exception):
            conn.close()

    def __len__(self) -> int:
        return len(self._open)

    def close(self) -> None:
        """Close every connection (the store closes; threads still running open none)."""
        with self._lock:
            conns = list(self._open.values())
            self._open.clear()
            self._idle.clear()
        # Outside the lock: dropping this thread's holder runs its finalizer here.
        self._local = threading.local()
        for conn in conns:
            with contextlib.suppress(Exception):
                conn.close()


TURN_TIMEOUT = 60.0
"""Seconds a write waits for the other writers of this process (a write takes milliseconds:
this only bounds a wait on a writer that hangs)."""


class FileWriters:
    """The turns the write transactions on one store file take, whichever store object opened
    it: the threads of this process on a lock of their own, then the processes on an
    ``flock`` of the file (a lock SQLite does not use). Re-entrant: a nested write meets
    SQLite's own refusal, as it would without it.

    Why the ``flock``: a writer that finds the file locked by another process meets SQLite's
    busy handler, which sleeps a millisecond or more each time (worker processes sharing a
    file would spend more time asleep than writing); a writer waiting here tries again after
    tens of microseconds at first. A process that dies holding it lets go with its last file
    descriptor. Writers of older agentnb versions, which do not take it, still meet the busy
    handler, as before.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.lock = threading.RLock()
        self.depth = 0
        self.fd: int | None = None

    def take(self, timeout: float) -> None:
        """Take the file's turn (the thread's turn is held); ``StorageError`` after
        ``timeout`` seconds."""
        self.depth += 1
        if self.depth > 1:
            return
        try:
            if self.fd is None:
                self.fd = os.open(
                    self.path, os.O_RDONLY | _portable.O_NOFOLLOW | _portable.O_CLOEXEC
                )
            fd = self.fd
            if _portable.try_lock_file(fd):
                return
            deadline = time.monotonic() + timeout
            pause = 20e-6
            while True:
                time.sleep(pause)
                if _portable.try_lock_file(fd):
                    return
                if time.monotonic() >= deadline:
                    raise StorageError(
                        f"{self.path} stayed locked by a writer of another process for "
                        f"{timeout:g}s; retry later"
                    ) from None
                pause = min(pause * 2, 500e-6)
        except BaseException:
            self.depth -= 1
            raise

    def give(self) -> None:
        """Give the file's turn back (before the thread's)."""
        self.depth -= 1
        if self.depth == 0 and self.fd is not None:
            _portable.unlock_file(self.fd)

    def forked(self) -> None:
        """In a forked child: the lock of another thread is nobody's, and the file's turn is
        taken on a descriptor of the child's own (the one inherited shares the parent's)."""
        self.lock = threading.RLock()
        self.depth = 0
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = None

    def __del__(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)


_WRITERS: weakref.WeakValueDictionary[str, FileWriters] = weakref.WeakValueDictionary()
_WRITERS_LOCK = threading.Lock()


def writers_of(path: Path) -> FileWriters:
    name = os.path.realpath(path)
    with _WRITERS_LOCK:
        writers = _WRITERS.get(name)
        if writers is None:
            writers = _WRITERS[name] = FileWriters(name)
        return writers


def _forked() -> None:
    # A child has only the forking thread: a turn another thread held is nobody's now.
    global _WRITERS_LOCK
    _WRITERS_LOCK = threading.Lock()
    for writers in list(_WRITERS.values()):
        writers.forked()


_portable.at_fork(_forked)


class _Cursor(sqlite3.Cursor):
    """Translates a damaged page, wherever SQLite meets it, into ``Corrupt`` naming the file."""

    def execute(self, sql: str, parameters: Any = (), /) -> _Cursor:
        try:
            return super().execute(sql, parameters)
        except sqlite3.DatabaseError as exc:
            check_damage(exc, self.connection)
            raise

    def executemany(self, sql: str, seq_of_parameters: Any, /) -> _Cursor:
        try:
            return super().executemany(sql, seq_of_parameters)
        except sqlite3.DatabaseError as exc:
            check_damage(exc, self.connection)
            raise

    def fetchone(self) -> Any:
        try:
            return super().fetchone()
        except sqlite3.DatabaseError as exc:
            check_damage(exc, self.connection)
            raise

    def fetchall(self) -> list[Any]:
        try:
            return super().fetchall()
        except sqlite3.DatabaseError as exc:
            check_damage(exc, self.connection)
            raise

    def fetchmany(self, size: int | None = 1) -> list[Any]:
        try:
            return super().fetchmany(size)
        except sqlite3.DatabaseError as exc:
            check_damage(exc, self.connection)
            raise

    def __next__(self) -> Any:
        try:
            return super().__next__()
        except sqlite3.DatabaseError as exc:
            check_damage(exc, self.connection)
            raise


class Connection(sqlite3.Connection):
    path: Path = Path()

    @functools.cached_property
    def bare(self) -> sqlite3.Cursor:
        """A plain cursor, for the statements of a write transaction: ``_write`` translates
        what they raise (damage included) for the whole transaction, at once."""
        return sqlite3.Cursor(self)

    def cursor(self, factory: Any = _Cursor) -> Any:
        return super().cursor(factory)

    # The shortcuts do not go through cursor(): route them there.
    def execute(self, sql: str, parameters: Any = (), /) -> _Cursor:
        cursor: _Cursor = self.cursor()
        return cursor.execute(sql, parameters)

    def executemany(self, sql: str, seq_of_parameters: Any, /) -> _Cursor:
        cursor: _Cursor = self.cursor()
        return cursor.executemany(sql, seq_of_parameters)


def check_damage(exc: sqlite3.DatabaseError, conn: sqlite3.Connection) -> None:
    """Raise ``Corrupt`` for a damaged file; other errors are left to the caller."""
    code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
    # Text that is not UTF-8 was written by something other than agentnb.
    if code in (_SQLITE_CORRUPT, _SQLITE_NOTADB) or str(exc).startswith("Could not decode"):
        raise Corrupt(
            f"{getattr(conn, 'path', 'the store file')} is damaged ({exc}); restore it from a "
            "backup, or export what is still readable and point the store at a new file"
        ) from None


def adbc_errors() -> tuple[type[BaseException], ...]:
    """What the ADBC driver raises (imported only once it is in use)."""
    import adbc_driver_manager

    return (adbc_driver_manager.Error,)


def enable_wal(conn: sqlite3.Connection, timeout: float) -> tuple[object, ...] | None:
    # Switching a new file to WAL needs an exclusive lock, and SQLite reports "locked" at once
    # instead of calling the busy handler; processes opening a new store together wait here.
    deadline = time.monotonic() + timeout
    while True:
        try:
            row: tuple[object, ...] | None = conn.execute("PRAGMA journal_mode=WAL").fetchone()
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.01)
        else:
            return row


def translate(exc: sqlite3.Error, path: Path) -> StorageError:
    if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
        return StorageError(f"{path} stayed locked by another writer ({exc}); retry later")
    if isinstance(exc, sqlite3.DatabaseError) and "not a database" in str(exc):
        return Corrupt(f"{path} is not an agentnb store ({exc})")
    return StorageError(f"{path}: {exc}")
