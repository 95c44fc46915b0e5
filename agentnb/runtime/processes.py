"""Worker processes of one runtime: ``Runtime(processes=N)`` executes on every core.

One Python process runs Python on one core at a time, so a runtime that executes many
sessions at once is bound by one core. With ``processes=N`` (N > 1) the runtime forks N
worker processes when it is made; each serves the runtime's agent (``Runtime.serve``) on the
same store, claiming sessions with queued work as ``agentnb worker`` processes do (the
pending-work index of the SQLite file or of PostgreSQL), and the runtime itself only
accepts commands and observes, like a runtime made with ``execute=False``.

Forked, not spawned: the agent (its tools, model and script, often defined in a notebook)
is the very object of the parent; nothing is pickled or imported again. A worker ignores
SIGINT (interrupting a notebook cell must not stop the workers), stops cooperatively on
SIGTERM or when its parent is gone (the end of a pipe it watches), and exits with
``os._exit`` so it never runs the parent's exit hooks. A worker that dies (``kill -9``)
is seen dead by the others (``Runtime.serve`` releases the leases of dead holders of this
host), which claim its sessions and recover their runs.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["WorkerProcess", "start_workers", "stop_workers"]

log = logging.getLogger("agentnb.runtime")

STOP_TIMEOUT = 15.0
"""Seconds a worker gets to stop cooperatively (its runs' ends committed) before it is
killed."""


@dataclass
class WorkerProcess:
    """One forked worker: its process and the pipe end whose closing tells it to stop."""

    process: Any
    """The ``multiprocessing`` process (``pid``, ``is_alive()``, ``join()``)."""
    parent_end: int

    @property
    def pid(self) -> int:
        pid: int = self.process.pid
        return pid


def start_workers(count: int, serve: Callable[[threading.Event], None]) -> list[WorkerProcess]:
    """Fork ``count`` worker processes, each calling ``serve(stop)`` until ``stop`` is set."""
    context = multiprocessing.get_context("fork")
    workers: list[WorkerProcess] = []
    try:
        for _ in range(count):
            child_end, parent_end = os.pipe()
            # The child closes the parent's ends of every worker's pipe it inherited: only the
            # parent's closing them (its exit, or ``stop_workers``) may tell a worker to stop.
            theirs = [w.parent_end for w in workers] + [parent_end]
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


def stop_workers(workers: list[WorkerProcess], timeout: float = STOP_TIMEOUT) -> None:
    """Ask every worker to stop (SIGTERM), wait up to ``timeout`` seconds, kill the rest."""
    for worker in workers:
        if worker.process.is_alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker.pid, signal.SIGTERM)
    for worker in workers:
        worker.process.join(timeout)
        if worker.process.is_alive():
            log.warning("worker process %s did not stop within %.1fs; killed", worker.pid, timeout)
            worker.process.kill()
            worker.process.join(5)
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
    code = 0
    try:
        serve(stop)
    except BaseException:
        log.exception("worker process %s failed", os.getpid())
        code = 1
    finally:
        logging.shutdown()
        os._exit(code)
