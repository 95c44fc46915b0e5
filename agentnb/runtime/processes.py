"""Worker processes of one runtime: ``Runtime(processes=N)`` executes on every core.

One Python process runs Python on one core at a time, so a runtime that executes many
sessions at once is bound by one core. With ``processes=N`` (N > 1) the runtime starts N
worker processes when it is made; each serves the runtime's agent (``Runtime.serve``) on the
same store, claiming sessions with queued work as ``agentnb worker`` processes do (the
pending-work index of the SQLite file or of PostgreSQL), and the runtime itself only
accepts commands and observes, like a runtime made with ``execute=False``.

Fork or spawn (``start_method``). Where ``fork`` is safe (Linux, BSD: a process with no
other thread running) the workers are forked: the agent (its tools, model and script, often
defined in a notebook) is the very object of the parent; nothing is pickled or imported
again. Where it is not (macOS and Windows always; any platform while other threads run, as
they do in a Jupyter kernel) the workers are spawned: each imports the agent again by its
path, ``module:attribute`` (``runtime.locate``). An agent that no fresh process can import
(defined in a notebook cell) is refused with ``InvalidInput`` before anything starts, except
on Linux, where such an agent is forked as before (the parent's other threads are not the
child's: the workers touch none of the parent's objects but the agent).
``AGENTNB_START_METHOD=fork|spawn`` forces the choice (CI runs the process tests under both).

A worker ignores SIGINT (interrupting a notebook cell must not stop the workers), stops
cooperatively on SIGTERM or its stop event, or when its parent is gone (a forked worker
watches the end of a pipe, a spawned one its parent's sentinel), and exits with
``os._exit`` so it never runs the parent's exit hooks. A worker that dies (``kill -9``)
is seen dead by the others (``Runtime.serve`` releases the leases of dead holders of this
host), which claim its sessions and recover their runs.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentnb import _portable
from agentnb.errors import InvalidInput

__all__ = ["START_METHODS", "WorkerProcess", "start_method", "start_workers", "stop_workers"]

log = logging.getLogger("agentnb.runtime")

STOP_TIMEOUT = 15.0
"""Seconds a worker gets to stop cooperatively (its runs' ends committed) before it is
killed."""
START_METHODS = ("fork", "spawn")
_PARENT_POLL = 0.25
"""Seconds between a spawned worker's looks at its stop event and its parent."""


def start_method(*, forced: str | None = None) -> str:
    """``"fork"`` where forking this process is safe, else ``"spawn"`` (module docstring).

    ``forced`` (or ``AGENTNB_START_METHOD``) names the method instead; ``InvalidInput`` for
    another name, or for ``fork`` on a platform that has none.
    """
    choice = forced or os.environ.get("AGENTNB_START_METHOD") or None
    if choice is not None:
        if choice not in START_METHODS:
            raise InvalidInput(
                f"AGENTNB_START_METHOD must be one of {', '.join(START_METHODS)}, got {choice!r}"
            )
        if choice == "fork" and not _portable.can_fork():
            raise InvalidInput("this platform cannot fork; use AGENTNB_START_METHOD=spawn")
        return choice
    if not _portable.can_fork() or sys.platform == "darwin":
        return "spawn"
    return "spawn" if threading.active_count() > 1 else "fork"


@dataclass
class WorkerProcess:
    """One worker: its process, its stop event and (forked) the pipe end whose closing tells
    it to stop."""

    process: Any
    """The ``multiprocessing`` process (``pid``, ``is_alive()``, ``join()``)."""
    parent_end: int | None
    stop: Any = None
    """The ``multiprocessing`` event that asks a spawned worker to stop (None when forked)."""

    @property
    def pid(self) -> int:
        pid: int = self.process.pid
        return pid


def start_workers(
    count: int, serve: Callable[[threading.Event], None], *, method: str = "fork"
) -> list[WorkerProcess]:
    """Start ``count`` worker processes, each calling ``serve(stop)`` until ``stop`` is set.

    With ``method="spawn"`` ``serve`` is pickled: a module-level function (or a partial of
    one) whose arguments pickle, e.g. the agent's path rather than the agent.
    """
    if method == "spawn":
        return _spawn_workers(count, serve)
    context = multiprocessing.get_context("fork")
    workers: list[WorkerProcess] = []
    try:
        for _ in range(count):
            child_end, parent_end = os.pipe()
            # The child closes the parent's ends of every worker's pipe it inherited: only the
            # parent's closing them (its exit, or ``stop_workers``) may tell a worker to stop.
            theirs = [w.parent_end for w in workers if w.parent_end is not None] + [parent_end]
            process = context.Process(
                target=_worker_main, args=(serve, child_end, theirs), daemon=False
            )
            with warnings.catch_warnings():
                # Python 3.12+ warns that forking a process with threads may deadlock the
                # child: the child here touches none of the parent's objects but the agent.
                warnings.simplefilter("ignore", DeprecationWarning)
                process.start()
            os.close(child_end)
            workers.append(WorkerProcess(process, parent_end))
    except BaseException:
        stop_workers(workers, timeout=1.0)
        raise
    return workers


def _spawn_workers(count: int, serve: Callable[[threading.Event], None]) -> list[WorkerProcess]:
    context = multiprocessing.get_context("spawn")
    workers: list[WorkerProcess] = []
    try:
        for _ in range(count):
            stop = context.Event()
            process = context.Process(target=_spawned_main, args=(serve, stop), daemon=False)
            process.start()
            workers.append(WorkerProcess(process, None, stop))
    except BaseException:
        stop_workers(workers, timeout=1.0)
        raise
    return workers


def stop_workers(workers: list[WorkerProcess], timeout: float = STOP_TIMEOUT) -> None:
    """Ask every worker to stop (its stop event, SIGTERM on POSIX), wait up to ``timeout``
    seconds, kill the rest."""
    for worker in workers:
        if worker.stop is not None:
            worker.stop.set()
        if worker.process.is_alive() and os.name != "nt":  # on Windows SIGTERM kills
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker.pid, signal.SIGTERM)
    for worker in workers:
        worker.process.join(timeout)
        if worker.process.is_alive():
            log.warning("worker process %s did not stop within %.1fs; killed", worker.pid, timeout)
            worker.process.kill()
            worker.process.join(5)
        if worker.parent_end is not None:
            with contextlib.suppress(OSError):
                os.close(worker.parent_end)


def _worker_main(
    serve: Callable[[threading.Event], None], child_end: int, parent_ends: list[int]
) -> None:
    """The forked worker: serve until SIGTERM, or until the parent is gone."""
    for fd in parent_ends:
        with contextlib.suppress(OSError):
            os.close(fd)
    stop = threading.Event()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    def watch_parent() -> None:
        with contextlib.suppress(OSError):
            os.read(child_end, 1)  # returns (empty) once every copy of the other end closed
        stop.set()

    threading.Thread(target=watch_parent, daemon=True, name="agentnb-parent-watch").start()
    _serve_and_exit(serve, stop)


def _spawned_main(serve: Callable[[threading.Event], None], stop_event: Any) -> None:
    """The spawned worker: serve until its stop event, SIGTERM, or its parent is gone."""
    stop = threading.Event()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "SIGTERM") and os.name != "nt":
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
    parent = multiprocessing.parent_process()

    def watch() -> None:
        while not stop.is_set() and not stop_event.is_set():
            if parent is None:
                stop_event.wait(_PARENT_POLL)
            elif multiprocessing.connection.wait([parent.sentinel], timeout=_PARENT_POLL):
                break  # the parent is gone
        stop.set()

    threading.Thread(target=watch, daemon=True, name="agentnb-parent-watch").start()
    _serve_and_exit(serve, stop)


def _serve_and_exit(serve: Callable[[threading.Event], None], stop: threading.Event) -> None:
    code = 0
    try:
        serve(stop)
    except BaseException:
        log.exception("worker process %s failed", os.getpid())
        code = 1
    finally:
        logging.shutdown()
        os._exit(code)
