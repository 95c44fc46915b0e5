"""The files of an SQLite store: how they are made, checked and read.

Files. The store file and its ``-wal`` and ``-shm`` files are owner-only (0600), and folders
the store creates are 0700. SQLite gives a new ``-wal``/``-shm`` the mode of the store file,
so the store makes them itself (owner-only) before SQLite would, and tightens existing ones
it owns: they hold the conversations too, even when someone loosened the store file. A
store file (or ``-wal``/``-shm``) that is a symbolic link, dangling or not, is refused, as
is one that another user owns or that others can write (``InvalidInput``, saying what to
do). A damaged page surfaces as ``Corrupt`` naming the file, never as a bare ``sqlite3``
error.

Lost sessions. Losing the ``-wal`` file (deleted, or not copied with the store file) rolls
the database back to its last checkpoint, consistently: the sessions created since then
vanish, and nothing inside the file can tell, since the catalogue, the snapshots and the
export watermarks all roll back together. So the store keeps one fact outside the file: the
``-catalogue`` file beside it (owner-only, a few bytes) records the highest session id ever
committed. Sessions are never removed from the catalogue, so that number only grows. It is
written after the commit that creates a session (never before: a failed commit cannot make
it claim too much), and read together with the catalogue under the write lock, so writers
in other processes cannot make it look ahead. Opening a store whose catalogue holds fewer
sessions than the record knows raises ``Corrupt`` naming the file, instead of answering
``SessionNotFound`` later. If the loss is accepted (a backup restored on purpose), deleting
the ``-catalogue`` file makes the store open as it is. With ``synchronous=NORMAL`` or
``OFF`` the record is not flushed to disk, so after a power loss it may be missing (no
check) but never ahead of what was acknowledged as durable. Events lost from an existing
session are not detected this way (that would cost a second flush per commit).

"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import stat
import threading
from pathlib import Path

from agentnb import _portable
from agentnb.errors import Corrupt, InvalidInput

__all__ = [
    "CATALOGUE",
    "lost",
    "make_private_dirs",
    "prepare_file",
    "record_sessions",
    "recorded_sessions",
    "top_session",
]

log = logging.getLogger("agentnb.stores.sqlite")


CATALOGUE = "-catalogue"
"""Suffix of the file beside the store that records the highest session id committed."""
_CATALOGUE_FORMAT = "agentnb-catalogue/1"
SIDE_FILES = ("-wal", "-shm")

_CREATE = os.O_CREAT | os.O_EXCL | os.O_WRONLY | _portable.O_NOFOLLOW


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def make_private_dirs(folder: Path) -> None:
    """Create ``folder`` and missing parents, each owner-only (0700)."""
    missing = []
    while not folder.exists():
        missing.append(folder)
        if folder.parent == folder:
            break
        folder = folder.parent
    for each in reversed(missing):
        with contextlib.suppress(FileExistsError):
            each.mkdir(mode=0o700)


def _sync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _refuse_foreign(path: Path, info: os.stat_result) -> None:
    if stat.S_ISLNK(info.st_mode):
        raise InvalidInput(
            f"{path} is a symbolic link; agentnb does not follow links for store files. "
            "Name the real file, or a new path"
        )
    uid = _portable.effective_uid()
    if uid is not None and info.st_uid != uid:
        raise InvalidInput(
            f"{path} belongs to another user (uid {info.st_uid}); agentnb opens only store "
            "files you own. Copy it to a file of your own, or run as its owner"
        )


def _check_store_file(path: Path, info: os.stat_result) -> None:
    if stat.S_ISDIR(info.st_mode):
        raise InvalidInput(
            f"{path} is a directory; give a file path such as {path / 'agentnb.sqlite'}"
        )
    _refuse_foreign(path, info)
    if not stat.S_ISREG(info.st_mode):
        raise InvalidInput(f"{path} is not a regular file")
    if info.st_mode & 0o022:
        raise InvalidInput(
            f"{path} can be written by other users (mode {stat.S_IMODE(info.st_mode):04o}); "
            f"run chmod go-w on it (agentnb creates store files owner-only, 0600)"
        )


def prepare_side_file(path: Path, *, make: bool) -> None:
    """Refuse a ``-wal``/``-shm`` file that is a link or someone else's, tighten ours, and
    with ``make`` (the store file is loosened) make a missing one owner-only first.

    SQLite gives a file it creates, or an empty one it opens, the store file's mode, so it
    is made with one zero byte, which SQLite reads as an empty log (or index) and
    overwrites. Only beside a non-empty store file: SQLite deletes a ``-wal`` it finds
    beside an empty one, which would race with a process that just made the store.
    """
    try:
        fd = os.open(path, _CREATE, 0o600) if make else None
    except FileExistsError:
        fd = None
    if fd is None:
        info = _lstat(path)
        if info is None:
            return  # SQLite makes it, owner-only when the store file is
        _refuse_foreign(path, info)
        if stat.S_IMODE(info.st_mode) & 0o077:
            os.chmod(path, 0o600)
        return
    try:
        os.write(fd, b"\0")
    finally:
        os.close(fd)


def prepare_file(path: Path, catalogue: Path, *, create: bool) -> bool:
    """Make or check the store file and its side files; True when it is not writable here
    (a reader of a file it may not change). ``InvalidInput`` for a missing file without
    ``create``, and for a file that is not safe to open (see the module docstring)."""
    info = _lstat(path)
    if info is None:
        if not create:
            raise InvalidInput(
                f"there is no agentnb store at {path}; check the path (opening a "
                "store to read it never creates one)"
            )
        # No store file: a -catalogue record beside it belongs to a store deleted before.
        with contextlib.suppress(FileNotFoundError):
            catalogue.unlink()
        make_private_dirs(path.parent)
        try:
            os.close(os.open(path, _CREATE, 0o600))
        except FileExistsError:  # another process made it first (or a link appeared)
            info = _lstat(path)
    if info is not None:
        _check_store_file(path, info)
        if info.st_size and not os.access(path, os.W_OK):
            return True  # a reader of a file it may not change (see the connection)
        if not info.st_size:
            os.chmod(path, 0o600)  # empty: nobody's data yet, and the mode SQLite copies
    loose = info is not None and info.st_size and stat.S_IMODE(info.st_mode) & 0o077
    for suffix in SIDE_FILES:
        prepare_side_file(Path(f"{path}{suffix}"), make=bool(loose))
    return False


# -- the -catalogue record (see the module docstring) -----------------------------------------


def top_session(c: sqlite3.Connection) -> int:
    """The highest session row id the file holds (0 for a file without the catalogue)."""
    if not c.execute("SELECT 1 FROM sqlite_master WHERE name='sessions'").fetchone():
        return 0
    return int(c.execute("SELECT coalesce(max(id), 0) FROM sessions").fetchone()[0])


def recorded_sessions(catalogue: Path, path: Path) -> int | None:
    """The highest session id the -catalogue record knows (None: no record)."""
    try:
        fd = os.open(catalogue, os.O_RDONLY | _portable.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise InvalidInput(
            f"{catalogue} cannot be read ({exc.strerror}); it must be a file of "
            "your own, not a link: delete it and open the store again"
        ) from None
    with os.fdopen(fd, "rb") as f:
        text = f.read(4096)
    try:
        record = json.loads(text)
        if record.get("format") != _CATALOGUE_FORMAT:
            raise ValueError(f"format {record.get('format')!r}")
        sessions = record["sessions"]
        if not isinstance(sessions, int) or sessions < 0:
            raise ValueError(f"sessions {sessions!r}")
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise Corrupt(
            f"{catalogue} is not an agentnb catalogue record ({exc}); delete it "
            f"to open {path} as it is"
        ) from None
    return sessions


def record_sessions(catalogue: Path, top: int, *, durable: bool) -> None:
    """Replace the -catalogue record (under the write lock; best effort). ``durable``: the
    store flushes its commits (``synchronous`` FULL or EXTRA), so the record is too."""
    tmp = Path(f"{catalogue}.{os.getpid()}.{threading.get_ident()}.tmp")
    data = json.dumps({"format": _CATALOGUE_FORMAT, "sessions": top}).encode()
    try:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()  # left by a process that died here (with this pid and thread)
        fd = os.open(tmp, _CREATE, 0o600)
        try:
            os.write(fd, data)
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, catalogue)
        if durable:
            _sync_dir(catalogue.parent)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        log.warning("%s not updated (%s): lost sessions may go undetected", tmp, exc)


def lost(path: Path, catalogue: Path, recorded: int, top: int) -> Corrupt:
    """The error of a store file that holds fewer sessions than its record knows."""
    return Corrupt(
        f"{path} lost sessions it had committed: its catalogue holds "
        f"{top} but {catalogue} records {recorded} (its -wal file was deleted or "
        "lost, or the file was replaced by an older copy). Restore the -wal file or a "
        f"backup; to accept the store as it is, delete {catalogue}"
    )
