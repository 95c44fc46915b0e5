"""Sub-agents on PostgreSQL: children are ordinary queued work, run by any worker of the pool.

Workers are ``agentnb worker`` processes running ``tests._pg_subagent_agent:agent`` (its
docstring says what each task does); the test process is a client runtime with
``execute=False`` that only submits, answers and waits.

Timeouts here only stop a broken test from hanging; nothing asserts on how long a step takes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import agentnb as nb
from tests._pg_subagent_agent import agent

pytest.importorskip("psycopg")

REPO = Path(__file__).resolve().parents[1]
WAIT = 120.0
"""Seconds any one wait may take before the test fails (never a threshold on speed)."""


class Workers:
    """``agentnb worker`` processes of the sub-agent tree; all are gone after the test."""

    def __init__(self, url: str, barrier: Path) -> None:
        self.url = url
        self.env = dict(os.environ, AGENTNB_TEST_BARRIER=str(barrier))
        self.procs: list[subprocess.Popen[str]] = []

    def start(self, *, concurrency: int) -> subprocess.Popen[str]:
        command = [
            sys.executable, "-m", "agentnb.cli", "worker", "--store", self.url,
            "--agent", "tests._pg_subagent_agent:agent", "--lease", "5", "--poll", "0.3",
            "--concurrency", str(concurrency),
        ]  # fmt: skip
        proc = subprocess.Popen(
            command,
            cwd=REPO,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.procs.append(proc)
        assert proc.stdout is not None
        assert "worker for 'pg-coordinator'" in proc.stdout.readline()  # ready to claim
        return proc

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.communicate(timeout=20)
            if proc.poll() is None:
                proc.kill()
                proc.communicate()


@pytest.fixture
def workers(pg_url: str, tmp_path: Path) -> Iterator[Workers]:
    pool = Workers(pg_url, tmp_path / "barrier.txt")
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture
def client(pg_url: str) -> Iterator[nb.Runtime]:
    runtime = nb.Runtime(agent, store=pg_url, execute=False)
    try:
        yield runtime
    finally:
        runtime.close()


class TestPool:
    def test_children_of_one_step_run_in_other_worker_processes(
        self, workers: Workers, client: nb.Runtime
    ) -> None:
        """Six children of one step spread over two workers (their tools meet across them)."""
        pids = {workers.start(concurrency=2).pid, workers.start(concurrency=2).pid}
        session = client.session("fan")
        out = session.run("fan 6", timeout=WAIT)
        assert out.status == "completed", out
        children = session.children()
        assert len(children) == 6
        assert all(c.status == "completed" for c in children)
        ran_in = {int((c.output or "").split()[-1]) for c in children}
        assert ran_in == pids  # both workers ran children
        boss = int((out.output or "").split(":")[0].split()[-1])
        assert boss in pids
        assert ran_in - {boss}

    def test_a_childs_approval_is_answered_through_the_parent_from_a_client(
        self, workers: Workers, client: nb.Runtime
    ) -> None:
        """The client answers the child's request at the parent; workers carry both on."""
        workers.start(concurrency=1)
        session = client.session("buy")
        out = session.run("buy", timeout=WAIT)
        assert out.status == "suspended"
        ((rid, request),) = session.pending().items()
        assert request.path == ("pg-buyer",)
        done = session.respond(rid, True).wait(WAIT)
        assert done.status == "completed"
        (child,) = session.children()
        assert child.status == "completed"
        assert (child.output or "").startswith("ordered by")
