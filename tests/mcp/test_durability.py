"""MCP calls across crashes: kill -9 of the server mid-call, of the agentnb process mid-call,
and a question answered after the process that asked it is gone."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import agentnb as nb
from tests.mcp.helpers import agent, effects, events, server_toolset, task, wait_for

pytest.importorskip("mcp")

ROOT = Path(__file__).resolve().parents[2]


def gone(pid: int) -> bool:
    """The process has exited (reaped, or a zombie waiting for its parent)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def server_pid(directory: Path, label: str) -> int:
    path = directory / f"started-{label}"
    wait_for(lambda: path.exists() and path.read_text(), what=f"{label} to start")
    return int(path.read_text())


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[nb.Runtime]:
    with nb.Runtime(agent(server_toolset(tmp_path)), store="memory://") as rt:
        yield rt


class TestServerKilledMidCall:
    def test_a_read_only_call_is_run_again_on_a_new_server(
        self, runtime: nb.Runtime, tmp_path: Path
    ) -> None:
        """A read-only call whose server died is run once more on a restarted server."""
        session = runtime.session("read", user_id="u")
        receipt = session.submit(task("slow_read", label="r", seconds=60))
        first = server_pid(tmp_path, "r")
        (tmp_path / "started-r").unlink()
        kill(first)
        second = server_pid(tmp_path, "r")  # the call, sent again to a new server
        (tmp_path / "fast-r").touch()
        outcome = receipt.wait(60)
        assert outcome.status == "completed"
        assert outcome.output == "result: done r"
        assert second != first
        assert len(events(session, "tool/result")) == 1

    def test_another_call_is_left_uncertain(self, runtime: nb.Runtime, tmp_path: Path) -> None:
        """A call that may have changed something, cut by its server's death, is uncertain."""
        session = runtime.session("write", user_id="u")
        receipt = session.submit(task("slow_write", label="w", seconds=60))
        kill(server_pid(tmp_path, "w"))
        outcome = receipt.wait(60)
        assert outcome.status == "interrupted"
        assert outcome.stop_reason == "tool_outcome_unknown"
        (call,) = session.inspect().uncertain_tool_calls
        assert call.tool_name == "slow_write"
        with pytest.raises(nb.UncertainToolCalls):
            session.resume(outcome.turn_id)
        assert effects(tmp_path).count("slow_write w") == 1

    def test_a_server_that_died_between_calls_is_started_again(
        self, runtime: nb.Runtime, caplog: pytest.LogCaptureFixture
    ) -> None:
        """The next call after a server's death starts a new one and is not uncertain."""
        session = runtime.session("idle", user_id="u")
        pid = int(session.run(task("whoami"), timeout=60).output.split()[-1])  # type: ignore[union-attr]
        with caplog.at_level(logging.INFO, logger="agentnb.mcp"):
            kill(pid)
            wait_for(
                lambda: any("exited" in r.getMessage() for r in caplog.records),
                what="the server's exit to be noticed",
            )
        outcome = session.run(task("append_note", text="after"), timeout=60)
        assert outcome.output == "result: noted: after"

    def test_close_stops_the_server(self, tmp_path: Path) -> None:
        """Runtime.close() stops the server process it started."""
        runtime = nb.Runtime(agent(server_toolset(tmp_path)), store="memory://")
        session = runtime.session("close", user_id="u")
        pid = int(session.run(task("whoami"), timeout=60).output.split()[-1])  # type: ignore[union-attr]
        runtime.close()
        assert gone(pid)


def child(store: str, directory: Path, session_id: str, line: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.mcp.agent_child", store, str(directory), session_id, line],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )


def stop(proc: subprocess.Popen[str]) -> None:
    proc.kill()
    proc.wait(30)
    if proc.stdout is not None:
        proc.stdout.close()


@pytest.fixture
def store(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'agentnb.sqlite'}"


class TestAgentnbKilledMidCall:
    def kill_mid_call(self, store: str, directory: Path, tool: str, label: str) -> None:
        proc = child(store, directory, "s1", task(tool, label=label, seconds=60))
        try:
            pid = server_pid(directory, label)
        finally:
            stop(proc)  # kill -9 of the agentnb process, in the middle of the call
        kill(pid)  # its server, if it outlived its parent
        (directory / f"fast-{label}").touch()

    def test_a_read_only_call_is_run_again_on_resume(self, store: str, tmp_path: Path) -> None:
        """After a crash mid-call, resume runs a read-only MCP call once more."""
        self.kill_mid_call(store, tmp_path, "slow_read", "cr")
        with nb.Runtime(agent(server_toolset(tmp_path)), store=store) as runtime:
            session = runtime.open("s1", user_id="u")
            turn = session.inspect().interrupted_turn
            assert turn is not None
            outcome = session.resume(turn).wait(60)
            assert outcome.output == "result: done cr"
            assert [d["attempt"] for d in events(session, "tool/dispatch")] == [1, 2]

    def test_another_call_is_uncertain_after_the_crash(self, store: str, tmp_path: Path) -> None:
        """After a crash mid-call, a call that may have changed something must be reconciled."""
        self.kill_mid_call(store, tmp_path, "slow_write", "cw")
        with nb.Runtime(agent(server_toolset(tmp_path)), store=store) as runtime:
            session = runtime.open("s1", user_id="u")
            (call,) = session.inspect().uncertain_tool_calls
            assert call.tool_name == "slow_write"
            with pytest.raises(nb.UncertainToolCalls, match="slow_write"):
                session.resume(call.turn_id)
        assert effects(tmp_path).count("slow_write cw") == 1


class TestQuestionAfterRestart:
    def test_an_answer_after_a_kernel_restart_re_asks_the_call(
        self, store: str, tmp_path: Path
    ) -> None:
        """A question asked by a process now dead is answered later; the call is asked again
        under the same request id, runs once, and the turn completes."""
        proc = child(store, tmp_path, "s1", task("book", table="12"))
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "SETTLED suspended"
        finally:
            stop(proc)
        with nb.Runtime(agent(server_toolset(tmp_path)), store=store) as runtime:
            session = runtime.open("s1", user_id="u")
            ((request_id, request),) = session.pending().items()
            assert request.prompt.startswith("Book table 12?")
            outcome = session.respond(request_id, "yes").wait(60)
            assert outcome.output == "result: booked table 12"
            (asked,) = events(session, "interaction/requested")
            assert asked["request_id"] == request_id
            assert [d["attempt"] for d in events(session, "tool/dispatch")] == [1, 2]
        assert effects(tmp_path).count("book 12") == 1
