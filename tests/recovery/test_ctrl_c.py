"""Ctrl-C in a script while a tool blocks: the interrupt is recorded and the process exits
promptly; a second Ctrl-C exits at once; no traceback runs through agentnb's internals.

Real processes: the child (``_interrupt_child``) is a user's script on an SQLite store; the
test sends it SIGINT as a terminal's Ctrl-C would and reads the log it left.
"""

from __future__ import annotations

import _thread
import os
import re
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

import pytest

import agentnb as nb
from tests.recovery._interrupt_child import KEY
from tests.runtime.helpers import WAIT, Gate

ROOT = Path(__file__).resolve().parents[2]
EXIT_WAIT = 60.0
"""Seconds a child gets to exit after Ctrl-C: a failure guard, far below the ten minutes
its tool would block a process that waits for it."""

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


@pytest.fixture(autouse=True)
def _python_handles_sigint() -> Iterator[None]:
    """This process handles SIGINT as a kernel or a terminal's Python does. A suite started
    as a background job (``make test &``, a runner without job control) has SIGINT ignored,
    and then ``_thread.interrupt_main`` does nothing (the child scripts restore it
    themselves, ``_interrupt_child``)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class Script:
    """The child script, started on ``db`` and run until it prints WAITING."""

    def __init__(self, case: str, db: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.recovery._interrupt_child", case, str(db)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        line = self.read_line()
        assert line == "WAITING", f"the child did not start: {line!r} {self.stderr()}"

    def read_line(self) -> str:
        """The child's next line on stdout (the child is killed if none comes in time)."""
        assert self.proc.stdout is not None
        guard = threading.Timer(EXIT_WAIT, self.proc.kill)
        guard.start()
        try:
            return self.proc.stdout.readline().strip()
        finally:
            guard.cancel()

    def ctrl_c(self) -> None:
        self.proc.send_signal(signal.SIGINT)

    def exit_code(self) -> int:
        try:
            return self.proc.wait(timeout=EXIT_WAIT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            pytest.fail(f"the script was still alive {EXIT_WAIT}s after Ctrl-C: {self.stderr()}")

    def stderr(self) -> str:
        if self.proc.poll() is None:
            return ""
        assert self.proc.stderr is not None
        return self.proc.stderr.read()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()


PACKAGE = Path(nb.__file__).resolve().parent
"""The agentnb package's own folder: its files are the ones below it, wherever the checkout
lives (a clone's folder is named ``agentnb`` too, so a substring of a path says nothing)."""


def in_package(filename: str) -> bool:
    """Whether ``filename`` is a file of the agentnb package."""
    return Path(filename).resolve().is_relative_to(PACKAGE)


def agentnb_frames(stderr: str) -> list[str]:
    """The traceback lines naming a file of the agentnb package."""
    lines = re.finditer(r'File "([^"]+)", line \d+, in \w+', stderr)
    return [line.group(0) for line in lines if in_package(line.group(1))]


def events(db: Path) -> list[nb.Event]:
    store = nb.open_store(f"sqlite:///{db}")
    try:
        return list(nb.SessionLog(store, KEY).scan())
    finally:
        store.close()


def lease(db: Path) -> object:
    store = nb.open_store(f"sqlite:///{db}")
    try:
        return store.current_lease(KEY)
    finally:
        store.close()


class TestCtrlCInAScript:
    @pytest.mark.parametrize("case", ["sync", "with"])
    def test_records_the_interrupt_and_exits_without_waiting_for_the_tool(
        self, tmp_path: Path, case: str
    ) -> None:
        """Ctrl-C while a sync tool blocks ends the process (not after the tool): the run
        ends interrupted with the reason committed, the call stays uncertain and the lease
        is released."""
        db = tmp_path / "s.sqlite"
        script = Script(case, db)
        try:
            script.ctrl_c()
            assert script.exit_code() != 0
            stderr = script.stderr()
        finally:
            script.close()
        log = events(db)
        types = [e.type for e in log]
        (stop,) = [e.payload for e in log if e.type == "run/stop_requested"]
        assert "resume() continues it" in stop["reason"]
        (end,) = [e.payload for e in log if e.type == "run/end"]
        assert end["status"] == "interrupted"
        assert "tool/dispatch" in types
        assert "tool/result" not in types
        assert lease(db) is None
        assert "Traceback" not in stderr or "KeyboardInterrupt" in stderr

    def test_the_traceback_stops_at_wait(self, tmp_path: Path) -> None:
        """What a script shows for Ctrl-C in receipt.wait() is one line saying the task goes
        on, raised from wait() itself: no frame of agentnb's internals."""
        script = Script("sync", tmp_path / "s.sqlite")
        try:
            script.ctrl_c()
            script.exit_code()
            stderr = script.stderr()
        finally:
            script.close()
        lines = stderr.splitlines()
        assert any(line.startswith("KeyboardInterrupt: stopped waiting") for line in lines)
        assert "session.interrupt() stops it" in stderr
        frames = agentnb_frames(stderr)
        assert all(f.endswith("in wait") for f in frames), frames
        assert len(frames) <= 2
        assert "threading.py" not in stderr

    def test_a_second_ctrl_c_exits_at_once(self, tmp_path: Path) -> None:
        """When the runs cannot stop (a tool blocks the runtime's loop), a second Ctrl-C
        exits at once with one line instead of a threading traceback."""
        script = Script("stubborn", tmp_path / "s.sqlite")
        try:
            script.ctrl_c()
            # The tool says when it is cancelled: the process is stopping its runs.
            assert script.read_line() == "STUCK"
            script.ctrl_c()
            assert script.exit_code() == 130
            stderr = script.stderr()
        finally:
            script.close()
        assert "second Ctrl-C" in stderr
        assert "threading.py" not in stderr
        assert "Exception ignored" not in stderr


def interrupt_main_once_waiting() -> None:
    """Raise KeyboardInterrupt in the main thread (as Kernel -> Interrupt does) once it is
    inside ``Session.wait``."""
    main = threading.main_thread().ident or 0

    def waiting() -> bool:
        frame = sys._current_frames().get(main)
        while frame is not None:
            if frame.f_code.co_name in ("wait", "_wait") and frame.f_code.co_filename.endswith(
                "session.py"
            ):
                return True
            frame = frame.f_back
        return False

    def watch() -> None:
        for _ in range(6000):
            if waiting():
                _thread.interrupt_main()
                return
            time.sleep(0.01)

    threading.Thread(target=watch, daemon=True).start()


class TestExitWithAStuckTool:
    def test_a_script_that_ends_exits_without_waiting_for_the_tool(self, tmp_path: Path) -> None:
        """A script that ends while its task's sync tool blocks exits promptly: the stop is
        recorded, the call stays uncertain and the lease is released."""
        db = tmp_path / "s.sqlite"
        script = Script("end", db)
        try:
            assert script.exit_code() == 0
            stderr = script.stderr()
        finally:
            script.close()
        log = events(db)
        (stop,) = [e.payload for e in log if e.type == "run/stop_requested"]
        assert "the process exited" in stop["reason"]
        assert [e.payload["status"] for e in log if e.type == "run/end"] == ["interrupted"]
        assert "tool/result" not in [e.type for e in log]
        assert lease(db) is None
        assert "Traceback" not in stderr


class TestInterruptingWait:
    def test_wait_raises_one_line_and_the_task_goes_on(self, tmp_path: Path) -> None:
        """Kernel -> Interrupt during receipt.wait() raises a KeyboardInterrupt from wait()
        itself saying the task continues and how to stop it; the task does continue."""
        gate = Gate()

        @nb.tool
        def slow() -> str:
            """Wait at the gate."""
            gate.pass_sync()
            return "ok"

        model = nb.ScriptedModel([nb.ToolCall("slow", {}), "finished"])
        agent = nb.Agent(name="W", agent_id="w", model=model, tools=[slow])
        with nb.Runtime(agent, store=f"sqlite:///{tmp_path / 'w.sqlite'}") as runtime:
            session = runtime.session("s")
            receipt = session.submit("go")
            gate.wait_arrived()
            interrupt_main_once_waiting()
            with pytest.raises(KeyboardInterrupt) as caught:
                receipt.wait(timeout=WAIT)
            message = str(caught.value)
            assert receipt.turn_id in message
            assert "goes on" in message
            assert "session.interrupt() stops it" in message
            assert caught.value.__suppress_context__
            frames = [f for f in traceback.extract_tb(caught.tb) if in_package(f.filename)]
            assert [f.name for f in frames] == ["wait", "wait"]
            assert session.tasks()[-1].status == "running"
            gate.release()
            assert receipt.wait(timeout=WAIT).output == "finished"
