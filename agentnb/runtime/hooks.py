"""What ties the runtimes of a process to the process: forks, a twin, and its exit.

Every executing ``Runtime`` is ``track``-ed while open: a second one of the same agent on
the same store warns (``SecondRuntimeWarning``), and at interpreter exit those still open
are closed promptly (``EXIT_REASON``), before the thread pools shut down. A worker process
of ``Runtime(processes=N)`` starts with none of its parent's.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import signal
import sys
import threading
import warnings
import weakref
from typing import Any, Protocol

from agentnb import _portable
from agentnb.agent import Agent
from agentnb.stores import SessionStore

__all__ = [
    "EXIT_CLOSE_TIMEOUT",
    "EXIT_REASON",
    "EXIT_TOOL_GRACE",
    "SecondRuntimeWarning",
    "track",
    "untrack",
    "warn_if_twin",
]

log = logging.getLogger("agentnb.runtime")

EXIT_REASON = "the runtime was closed as the process exited; resume() continues it"
"""Why the runs of a process that exits end (a kernel restart, in a notebook)."""
EXIT_CLOSE_TIMEOUT = 5.0
"""Seconds a runtime still open at interpreter exit gets to stop its runs and release."""
EXIT_TOOL_GRACE = 0.5
"""Seconds a sync tool still running at interpreter exit (or a Ctrl-C out of a ``with``
block) gets before its run ends without it: its thread dies with the process."""


class Tracked(Protocol):
    """What the hooks read of an open runtime (``Runtime`` is one)."""

    store: SessionStore
    agent: Agent
    namespace: str
    execute: bool
    _closed: bool

    def _shut_down(self, reason: str, timeout: float = ...) -> bool:
        """Close for a process on its way out; True if a Ctrl-C cut the wait short."""


_open_runtimes: weakref.WeakSet[Tracked] = weakref.WeakSet()
_exit_hook_lock = threading.Lock()
_exit_hook_installed = False


def _forked() -> None:
    # A worker process of Runtime(processes=N) makes a runtime of its own: the lock another
    # thread of its parent held at the fork is nobody's, and the parent's runtimes are not
    # the child's to close.
    global _exit_hook_lock, _open_runtimes
    _exit_hook_lock = threading.Lock()
    _open_runtimes = weakref.WeakSet()


_portable.at_fork(_forked)


def track(runtime: Tracked) -> None:
    """``runtime`` is open: closed at interpreter exit unless it is closed before."""
    _open_runtimes.add(runtime)
    _install_exit_hook()


def untrack(runtime: Tracked) -> None:
    """``runtime`` is closing: nothing to do for it at exit."""
    _open_runtimes.discard(runtime)


class SecondRuntimeWarning(UserWarning):
    """A second executing ``Runtime`` of the same agent opened on a store this process
    already executes it from (a setup cell run twice): the two compete for its sessions."""


def warn_if_twin(agent_id: str, namespace: str, store: SessionStore) -> None:
    """Warn when an open executing runtime of this process runs ``agent_id`` on ``store``."""
    for other in list(_open_runtimes):
        same = other.store is store or (
            not store.url.startswith("memory") and repr(other.store) == repr(store)
        )
        if (
            same
            and other.execute
            and not other._closed
            and other.agent.agent_id == agent_id
            and other.namespace == namespace
        ):
            warnings.warn(
                f"another Runtime of agent {agent_id!r} is open on {store!r} in this process "
                "(a setup cell run twice?): both would execute its sessions. Close the first "
                "(runtime.close()) or reuse it",
                SecondRuntimeWarning,
                stacklevel=3,
            )
            return


def _close_at_exit() -> None:
    """Stop the runs of every open runtime, record why and release their leases, promptly:
    a sync tool that does not return is left to die with the process (its call is
    recorded uncertain). A second Ctrl-C meanwhile exits at once (``_exit_now``)."""
    runtimes = list(_open_runtimes)
    if not runtimes:
        return
    previous = _on_second_interrupt(_exit_now)
    try:
        for runtime in runtimes:
            try:
                runtime._shut_down(EXIT_REASON, EXIT_CLOSE_TIMEOUT)
            except Exception:
                log.exception("closing %r at interpreter exit failed", runtime)
    finally:
        _on_second_interrupt(previous)


def _on_second_interrupt(handler: Any) -> Any:
    """Make ``handler`` SIGINT's handler (main thread only); returns the one it replaced."""
    if handler is None or threading.current_thread() is not threading.main_thread():
        return None
    try:
        return signal.signal(signal.SIGINT, handler)
    except (ValueError, OSError):  # not the main interpreter, or no signals here
        return None


def _exit_now(*_: object) -> None:
    """A second Ctrl-C while the runs stop at exit: leave at once, with one line. What was
    not recorded is recovered as interrupted when the session is next opened."""
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.write(
            "agentnb: second Ctrl-C: exiting without waiting for the runs to stop; their "
            "turns are recorded interrupted when the sessions are next opened\n"
        )
        sys.stderr.flush()
    os._exit(130)


def _install_exit_hook() -> None:
    """Close open runtimes at interpreter exit, before the thread pools shut down.

    ``atexit`` runs after ``concurrent.futures`` has refused new work, too late for a clean
    close (runs would end with "cannot schedule new futures after shutdown" and leases stay
    held). ``threading._register_atexit`` hooks run before that, newest first; registering
    after the pool module was imported puts this hook ahead of its shutdown.
    """
    global _exit_hook_installed
    with _exit_hook_lock:
        if _exit_hook_installed:
            return
        _exit_hook_installed = True
    register = getattr(threading, "_register_atexit", None)
    try:
        if register is None:
            raise RuntimeError("no threading exit hooks")
        register(_close_at_exit)
    except RuntimeError:  # an older Python, or the interpreter is already shutting down
        atexit.register(_close_at_exit)
