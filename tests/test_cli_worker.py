"""`agentnb worker` as a user starts it: an agent module in the current folder, a line per
task, limits as flags."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import agentnb as nb
from agentnb.cli import EXIT_USAGE, main

AGENT_MODULE = textwrap.dedent(
    """
    import agentnb as nb

    agent = nb.Agent(
        name="Folder agent",
        agent_id="folder-agent",
        model=nb.ScriptedModel(lambda messages: "done: " + messages[-1].text),
    )
    """
)
WAIT = 60.0  # seconds: a failure guard only


def _console_script() -> str:
    """The installed ``agentnb`` entry point (not ``python -m``, which puts the current
    folder on the import path by itself)."""
    script = Path(sys.executable).parent / "agentnb"
    if not script.exists():
        pytest.skip("no agentnb console script beside this interpreter")
    return str(script)


def _queue_task(url: str, text: str) -> tuple[nb.SessionStore, nb.SessionKey]:
    store = nb.open_store(url)
    key = nb.SessionKey("default", "alice", "folder-agent", "s1")
    store.create_session(key)
    nb.Inbox(store, key).accept("submit", turn_id="turn_1", input=text)
    return store, key


def _start_worker(folder: Path, url: str, *extra: str) -> subprocess.Popen[str]:
    argv = [_console_script(), "worker", "--store", url, "--agent", "mymodule:agent"]
    return subprocess.Popen(
        [*argv, "--poll", "0.2", *extra],
        cwd=folder,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _run_one_task(folder: Path, *extra: str) -> tuple[str, str]:
    """Start a worker in ``folder``, let it complete one queued task, stop it; its output."""
    (folder / "mymodule.py").write_text(AGENT_MODULE)
    url = f"sqlite:///{folder / 'work.sqlite'}"
    store, key = _queue_task(url, "Count the invoices of March")
    worker = _start_worker(folder, url, *extra)
    try:
        for event in nb.SessionLog(store, key).follow(after=0, idle_timeout=WAIT):
            if event.type == "turn/completed":
                break
        # The worker lets go of the session once nothing is queued; its end line follows.
        for event in nb.SessionLog(store, key).follow(after=0, idle_timeout=WAIT):
            if event.type == "run/end":
                break
        worker.send_signal(signal.SIGINT)
        out, err = worker.communicate(timeout=WAIT)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate()
        store.close()
    assert worker.returncode == 0, err
    return out, err


class TestAgentFromTheCurrentFolder:
    def test_module_beside_the_worker_is_imported(self, tmp_path: Path) -> None:
        """--agent mymodule:agent loads mymodule.py from the folder the worker starts in."""
        out, err = _run_one_task(tmp_path)
        assert "No module named" not in err
        assert "worker for 'folder-agent'" in out

    def test_help_says_the_current_folder_is_on_the_path(self, capsys: Any) -> None:
        """worker --help says where --agent is imported from."""
        with pytest.raises(SystemExit):
            main(["worker", "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert "current directory" in text
        assert "uvicorn" in text

    def test_a_missing_module_says_where_it_was_looked_for(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
    ) -> None:
        """A module that is nowhere is a usage error naming the folder to start from."""
        monkeypatch.chdir(tmp_path)
        assert main(["worker", "--agent", "nosuchmodule_xyz:agent"]) == EXIT_USAGE
        assert "run agentnb worker from the folder that holds the module" in capsys.readouterr().err


class TestTaskLines:
    def test_one_line_when_a_task_starts_and_one_when_it_ends(self, tmp_path: Path) -> None:
        """The worker prints the task's own text when its run starts and when it completes."""
        out, _ = _run_one_task(tmp_path)
        lines = [line for line in out.splitlines() if "Count the invoices" in line]
        assert len(lines) == 2, out
        assert "alice/s1" in lines[0]
        assert "running" in lines[0]
        assert "completed" in lines[1]
        assert lines[1].rstrip().endswith(" s)")
        assert "turn_" not in out

    def test_quiet_prints_no_task_lines(self, tmp_path: Path) -> None:
        """--quiet leaves only the start line."""
        out, _ = _run_one_task(tmp_path, "--quiet")
        assert "Count the invoices" not in out
        assert "worker for 'folder-agent'" in out


class TestLimitFlags:
    def test_flags_set_the_runtime_limits(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """--max-queued and the other limit flags reach nb.Runtime(limits=...)."""
        seen: list[nb.Limits] = []

        class Stop(Exception):
            pass

        def runtime(*args: Any, limits: nb.Limits, **kwargs: Any) -> Any:
            seen.append(limits)
            raise Stop

        monkeypatch.setattr(nb, "Runtime", runtime)
        argv = [
            "worker",
            "--store",
            "memory://",
            "--agent",
            "tests.runtime._worker_agent:agent",
            "--max-queued",
            "16",
            "--max-steers",
            "8",
            "--max-recovery-events",
            "none",
            "--max-session-events",
            "1_000_000",
        ]
        with pytest.raises(Stop):
            main(argv)
        assert seen == [
            nb.Limits(
                max_queued_commands=16,
                max_pending_steers=8,
                max_recovery_events=None,
                max_session_events=1_000_000,
            )
        ]

    @pytest.mark.parametrize("value", ["0", "lots", "-3"])
    def test_a_bad_limit_is_a_usage_error(self, value: str, capsys: Any) -> None:
        """A limit that is not a positive number (or none) prints the worker's usage."""
        with pytest.raises(SystemExit) as stop:
            main(["worker", "--agent", "m:a", "--max-queued", value])
        assert stop.value.code == EXIT_USAGE
        assert "agentnb worker" in capsys.readouterr().err

    def test_a_limit_that_nb_limits_refuses_is_a_one_line_error(self, capsys: Any) -> None:
        """A session cap below the end reserve is refused by nb.Limits with its reason."""
        argv = ["worker", "--agent", "tests.runtime._worker_agent:agent"]
        assert main([*argv, "--max-session-events", "10"]) == EXIT_USAGE
        assert "max_session_events must be more than" in capsys.readouterr().err

    def test_help_lists_every_limit(self, capsys: Any) -> None:
        """worker --help names a flag for each field of nb.Limits."""
        with pytest.raises(SystemExit):
            main(["worker", "--help"])
        text = capsys.readouterr().out
        for flag in ("--max-queued", "--max-steers", "--max-session-bytes"):
            assert flag in text
