"""``ctx.aflush()`` in a middleware hook is durable: ``kill -9`` right after the flush, and
the record is in the log, before any side effect, and folds into ``app_state`` on restart."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import agentnb as nb
from agentnb.events import unregister_event_type
from tests.recovery._middleware_child import KEY, REVIEW, SESSION_ID, agent, register

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
GUARD = 60.0
"""Seconds the child may take to flush before the test fails instead of hanging."""


def _run_until_flushed(db: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.recovery._middleware_child", str(db)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # blocks until the hook flushed (or the child died)
        assert line.strip() == "FLUSHED", proc.stderr.read() if proc.stderr else line
        proc.kill()  # SIGKILL: no cleanup of any kind
        proc.wait(GUARD)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(GUARD)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


class TestFlushBeforeTheSideEffect:
    def test_the_flushed_record_survives_kill_9_and_folds_on_restart(self, tmp_path: Path) -> None:
        """After SIGKILL inside ``before_tool``, the review is committed, the tool never
        dispatched, and a new runtime folds the same app state from the log."""
        db = tmp_path / "mw.sqlite"
        _run_until_flushed(db)
        register()
        try:
            store = nb.open_store(f"sqlite:///{db}")
            try:
                log = list(nb.SessionLog(store, KEY).scan())
            finally:
                store.close()
            types = [e.type for e in log]
            assert REVIEW in types
            assert "tool/dispatch" not in types
            (review,) = [e for e in log if e.type == REVIEW]
            requested = next(e for e in log if e.type == "tool/requested")
            assert review.payload["call_id"] == requested.payload["call_id"]
            assert review.required
            assert review.seq > requested.seq
            with nb.Runtime(agent(), store=f"sqlite:///{db}", lease_ttl=2.0) as runtime:
                state = runtime.session(SESSION_ID).app_state(REVIEW)
            assert state == {"calls": [requested.payload["call_id"]]}
        finally:
            unregister_event_type(REVIEW)
