"""A sub-agent call across ``kill -9`` of the real process: exactly one child turn, one effect.

Each trial runs ``tests/recovery/_subagent_child.py`` on a fresh SQLite file: a coordinator
whose model calls the ``worker`` sub-agent, whose tool has an effect outside (a line in a side
file per execution). The process dies by SIGKILL at one point of the call: after the parent
committed ``subagent/spawned`` and before the child exists; inside the child's tool; after the
child completed and before the parent recorded it. This process then recovers with a new
runtime on the same file and finishes the task; every trial ends with exactly one child
session, one child turn and one execution of the child's tool, counted by its effects. A last
trial answers a child's confirmation through the parent after the process died.

Timeouts here only stop a broken test from hanging; nothing asserts on how long a step takes.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import agentnb as nb
from tests.recovery._subagent_child import (
    ANSWER,
    KEY,
    RECOVERING_LEASE,
    SESSION_ID,
    USER_ID,
    make_agent,
    side_lines,
)

REPO = Path(__file__).resolve().parents[2]
GUARD = 30.0
"""Seconds any one wait may take before the trial fails instead of hanging."""


def _until(condition: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + GUARD
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.05)


def run_child(point: str, db: Path, side: Path, *, until: str | None = None) -> int:
    """Run the child program until it kills itself (or prints ``until``, then kill it);
    returns its exit status (``-9``: SIGKILL)."""
    err = db.with_suffix(".err")
    with err.open("wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.recovery._subagent_child", point, str(db), str(side)],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
        try:
            if until is not None:
                assert proc.stdout is not None
                line = proc.stdout.readline().strip()
                assert line == until, f"child said {line!r}: {err.read_text()}"
                proc.kill()
            code = proc.wait(GUARD)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(GUARD)
            for pipe in (proc.stdin, proc.stdout):
                if pipe is not None:
                    pipe.close()
    assert code == -9, f"the child exited with {code}, not by SIGKILL: {err.read_text()}"
    return code


def recover(db: Path, side: Path, point: str) -> tuple[nb.Runtime, nb.Session]:
    """A new runtime on the dead process's file, executing the coordinator's session again."""
    runtime = nb.Runtime(
        make_agent(side, point),
        store=f"sqlite:///{db}",
        lease_ttl=RECOVERING_LEASE,
        auto_resume=True,
    )
    session = runtime.session(SESSION_ID, user_id=USER_ID)
    session.start()  # the dead holder's run is closed and, nothing uncertain, resumed
    return runtime, session


def check_exactly_once(runtime: nb.Runtime, session: nb.Session, side: Path) -> None:
    """One child session with one turn, one effect per child tool call, the answer recorded."""
    assert session.tasks()[-1].status == "completed"
    assert session.transcript().messages[-1].text == f"coordinator saw: {ANSWER}"
    children = runtime.store.list_sessions(agent_id="worker")
    assert len(children) == 1
    (child,) = session.children()
    assert (child.key, child.status, child.output) == (children[0].key, "completed", ANSWER)
    worker = session.child(child.call_id)
    assert len(worker.tasks()) == 1
    calls = [e.payload["call_id"] for e in worker.log.scan() if e.type == "tool/requested"]
    assert len(calls) == 1
    assert side_lines(side) == calls  # the tool's effect happened exactly once
    spawned = [e for e in session.log.scan() if e.type == "subagent/spawned"]
    completed = [e for e in session.log.scan() if e.type == "subagent/completed"]
    assert len(spawned) == len(completed) == 1
    assert session.inspect().uncertain_tool_calls == ()


class TestKillDuringASubagentCall:
    def test_killed_after_spawned_before_the_child_starts(self, tmp_path: Path) -> None:
        """Recovery makes the child that was never made, once; its tool runs once."""
        db, side = tmp_path / "db.sqlite", tmp_path / "side.txt"
        run_child("spawned", db, side)
        store = nb.open_store(f"sqlite:///{db}")
        try:
            spawned = [e for e in store.scan(KEY) if e.type == "subagent/spawned"]
            assert len(spawned) == 1  # committed before the process died...
            assert store.list_sessions(agent_id="worker") == []  # ...and no child yet
        finally:
            store.close()
        runtime, session = recover(db, side, "spawned")
        try:
            _until(lambda: session.tasks()[-1].status == "completed", "the task to complete")
            check_exactly_once(runtime, session, side)
        finally:
            runtime.close()

    def test_killed_inside_the_childs_tool(self, tmp_path: Path) -> None:
        """The child's uncertain call is reconciled, never re-run; both turns then complete."""
        db, side = tmp_path / "db.sqlite", tmp_path / "side.txt"
        run_child("tool", db, side)
        assert len(side_lines(side)) == 1  # the effect happened before the kill
        runtime, session = recover(db, side, "tool")
        try:
            # The parent attaches to its child again; the child's cut-off call of unknown
            # outcome waits for a person, so the parent waits for its child.
            _until(lambda: session.tasks()[-1].status == "suspended", "the parent to wait")
            (child,) = session.children()
            assert child.status == "interrupted"
            worker = session.child(child.call_id)
            (uncertain,) = worker.inspect().uncertain_tool_calls
            worker.reconcile(
                {uncertain.call_id: nb.ToolOutcome.success("effect for job")},
                "the side file shows the effect ran",
            )
            session.resume(session.tasks()[-1].turn_id).wait(GUARD)
            check_exactly_once(runtime, session, side)
        finally:
            runtime.close()

    def test_killed_after_the_child_completed_before_the_parent_recorded_it(
        self, tmp_path: Path
    ) -> None:
        """The parent attaches to the completed child turn and records its answer."""
        db, side = tmp_path / "db.sqlite", tmp_path / "side.txt"
        run_child("completed", db, side)
        store = nb.open_store(f"sqlite:///{db}")
        try:
            assert [e.type for e in store.scan(KEY) if e.type.startswith("subagent/")] == [
                "subagent/spawned"
            ]
            (child,) = store.list_sessions(agent_id="worker")
            assert any(e.type == "turn/completed" for e in store.scan(child.key))
        finally:
            store.close()
        runtime, session = recover(db, side, "completed")
        try:
            _until(lambda: session.tasks()[-1].status == "completed", "the task to complete")
            check_exactly_once(runtime, session, side)
        finally:
            runtime.close()


class TestAnswerAcrossARestart:
    def test_a_childs_confirmation_is_answered_through_the_parent_after_a_kill(
        self, tmp_path: Path
    ) -> None:
        """After the process died, the new one shows the child's request and routes the answer."""
        db, side = tmp_path / "db.sqlite", tmp_path / "side.txt"
        run_child("confirm", db, side, until="SUSPENDED")
        assert side_lines(side) == []
        runtime = nb.Runtime(
            make_agent(side, "confirm"), store=f"sqlite:///{db}", lease_ttl=RECOVERING_LEASE
        )
        try:
            session = runtime.session(SESSION_ID, user_id=USER_ID)
            ((rid, request),) = session.pending().items()
            assert (request.kind, request.path) == ("confirmation", ("worker",))
            out = session.respond(rid, True).wait(GUARD)
            assert out.status == "completed"
            check_exactly_once(runtime, session, side)
        finally:
            runtime.close()
