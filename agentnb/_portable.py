"""What differs between POSIX and Windows, chosen at call time so ``import agentnb`` works on both.

Nothing here imports a POSIX-only module (``fcntl``) or reads a POSIX-only name (``os.fork``,
``os.register_at_fork``, ``os.O_NOFOLLOW``) when it is imported: the modules on the import
path of ``agentnb`` and of the SQLite store ask these functions instead.

File locks. ``try_lock_file(fd)`` takes an exclusive, non-blocking, advisory turn on an open
file: ``fcntl.flock`` on POSIX; on Windows ``msvcrt.locking`` of one byte far past any data
(Windows locks are mandatory, so locking a byte SQLite reads would block its readers; SQLite's
own lock bytes sit at 1 GiB, this one at 1 TiB). Where neither exists the lock is a no-op
that always succeeds: callers use it to wait less, never for correctness.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator
from types import ModuleType

__all__ = [
    "O_CLOEXEC",
    "O_NOFOLLOW",
    "at_fork",
    "can_fork",
    "effective_uid",
    "lock_file",
    "locked_file",
    "try_lock_file",
    "unlock_file",
]

O_NOFOLLOW: int = getattr(os, "O_NOFOLLOW", 0)
"""``os.O_NOFOLLOW`` where the platform has it (0 on Windows, which has no such links)."""
O_CLOEXEC: int = getattr(os, "O_CLOEXEC", 0)
"""``os.O_CLOEXEC`` where the platform has it (Windows descriptors are not inherited)."""

_WINDOWS_LOCK_OFFSET = 1 << 40


def at_fork(after_in_child: Callable[[], None]) -> None:
    """``os.register_at_fork(after_in_child=...)`` where processes fork; nothing elsewhere."""
    register = getattr(os, "register_at_fork", None)
    if register is not None:
        register(after_in_child=after_in_child)


def can_fork() -> bool:
    """Whether this platform has ``fork()`` at all (safe or not: see ``runtime.processes``)."""
    return hasattr(os, "fork") and sys.platform != "win32"


def effective_uid() -> int | None:
    """The effective user id (None on Windows, where files have no uid owner)."""
    geteuid = getattr(os, "geteuid", None)
    return None if geteuid is None else int(geteuid())


def _fcntl() -> ModuleType | None:
    try:
        import fcntl
    except ImportError:
        return None
    return fcntl


def _msvcrt() -> ModuleType | None:
    try:
        import msvcrt
    except ImportError:
        return None
    return msvcrt


def try_lock_file(fd: int) -> bool:
    """Take the exclusive lock of the open file ``fd`` if it is free; whether it was taken."""
    if os.name == "nt":
        msvcrt = _msvcrt()
        if msvcrt is None:
            return True
        os.lseek(fd, _WINDOWS_LOCK_OFFSET, os.SEEK_SET)
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True
    fcntl = _fcntl()
    if fcntl is None:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def lock_file(fd: int, poll: float = 0.005) -> None:
    """Take the exclusive lock of the open file ``fd``, waiting as long as it takes."""
    fcntl = _fcntl() if os.name != "nt" else None
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_EX)
        return
    while not try_lock_file(fd):
        time.sleep(poll)


def unlock_file(fd: int) -> None:
    """Give back the lock ``try_lock_file`` or ``lock_file`` took on ``fd``."""
    if os.name == "nt":
        msvcrt = _msvcrt()
        if msvcrt is not None:
            os.lseek(fd, _WINDOWS_LOCK_OFFSET, os.SEEK_SET)
            with contextlib.suppress(OSError):
                msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
        return
    fcntl = _fcntl()
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_UN)


@contextlib.contextmanager
def locked_file(fd: int) -> Iterator[None]:
    """Hold the exclusive lock of ``fd`` for the block."""
    lock_file(fd)
    try:
        yield
    finally:
        unlock_file(fd)
