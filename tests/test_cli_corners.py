"""The command line's corners as a user meets them: a file path as the store, whose session
was not found, a misspelt option, a pipe closed early, JSON numbers, tail's times, and
archiving from the shell."""

from __future__ import annotations

import itertools
import json
import shlex
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

import agentnb as nb
from agentnb.cli import EXIT_FAILED, EXIT_NOT_FOUND, EXIT_OK, EXIT_USAGE, _jsonable, main

WAIT = 30.0  # seconds: a failure guard only
LONG_REPLY = "A long answer. " * 8_000  # ~120 KB: more than a pipe holds


@pytest.fixture(scope="module")
def store_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An SQLite store with alice's session s1 (two finished tasks, one with a long reply)."""
    path = tmp_path_factory.mktemp("cli") / "work.sqlite"
    model = nb.ScriptedModel(["Short answer.", LONG_REPLY], chunk_size=50_000)
    agent = nb.Agent(name="Corners", agent_id="corners", model=model)
    with nb.Runtime(agent, store=f"sqlite:///{path}") as runtime:
        session = runtime.session("s1", user_id="alice")
        session.run("First question", timeout=WAIT)
        session.run("Write at length", timeout=WAIT)
    return path


def _err(capsys: Any) -> str:
    return str(capsys.readouterr().err)


class TestStoreAsAFilePath:
    def test_an_existing_file_path_is_the_sqlite_store(self, store_file: Path, capsys: Any) -> None:
        """--store PATH opens the SQLite file at PATH, as sqlite:///PATH does."""
        assert main(["sessions", "--store", str(store_file), "--json"]) == EXIT_OK
        (listed,) = json.loads(capsys.readouterr().out)
        assert listed["session_id"] == "s1"

    def test_a_missing_file_path_is_refused_like_a_missing_sqlite_url(
        self, tmp_path: Path, capsys: Any
    ) -> None:
        """A missing file is 'not found' with the same message for a path and a URL."""
        missing = tmp_path / "none.sqlite"
        assert main(["sessions", "--store", str(missing)]) == EXIT_NOT_FOUND
        by_path = _err(capsys)
        assert main(["sessions", "--store", f"sqlite:///{missing}"]) == EXIT_NOT_FOUND
        assert _err(capsys) == by_path
        assert f"no store at {missing}" in by_path
        assert not missing.exists()

    def test_a_folder_is_a_usage_error_naming_the_file_to_pass(
        self, tmp_path: Path, capsys: Any
    ) -> None:
        """--store FOLDER says to pass the SQLite file in it."""
        with pytest.raises(SystemExit) as stop:
            main(["sessions", "--store", str(tmp_path)])
        assert stop.value.code == EXIT_USAGE
        assert "agentnb.sqlite" in _err(capsys)


class TestNotFound:
    def test_show_names_the_user_it_looked_for(self, store_file: Path, capsys: Any) -> None:
        """show ID --user bob says that bob has no such session."""
        argv = ["show", "s1", "--user", "bob", "--store", str(store_file)]
        assert main(argv) == EXIT_NOT_FOUND
        err = _err(capsys)
        assert "no session 's1' of user 'bob'" in err
        assert "agentnb sessions --user bob" in err


class TestUsage:
    def test_a_misspelt_option_prints_the_commands_usage(
        self, store_file: Path, capsys: Any
    ) -> None:
        """show ID --usr alice prints show's usage, not the top-level one."""
        with pytest.raises(SystemExit) as stop:
            main(["show", "s1", "--usr", "alice", "--store", str(store_file)])
        assert stop.value.code == EXIT_USAGE
        err = _err(capsys)
        assert err.startswith("usage: agentnb show")
        assert "unrecognized arguments: --usr alice" in err


class TestPipes:
    def test_a_reader_that_stops_early_gets_no_broken_pipe_error(self, store_file: Path) -> None:
        """agentnb show ID | head prints no traceback and no 'Broken pipe'."""
        argv = [sys.executable, "-m", "agentnb", "show", "s1", "--width", "0"]
        command = shlex.join([*argv, "--store", str(store_file)])
        done = subprocess.run(
            f"{command} | head -c 100",
            shell=True,  # the pipe is the point; every part is quoted
            capture_output=True,
            text=True,
            timeout=WAIT,
            check=False,
        )
        assert done.stdout.startswith("session default/alice/corners/s1")
        assert done.stderr == ""


class TestJsonNumbers:
    @pytest.mark.parametrize(
        ("value", "shown"),
        [(0.1 + 0.2, 0.3), (12.3456789, 12.346), (1234.56789, 1234.568), (0.000123456, 0.000123)],
    )
    def test_floats_are_rounded(self, value: float, shown: float) -> None:
        """--json shows floats to three decimals, or three significant digits when smaller."""
        assert _jsonable(value) == shown
        assert json.dumps(_jsonable({"x": value})) == json.dumps({"x": shown})


class TestTailTimes:
    def test_times_never_run_backwards(self, store_file: Path, capsys: Any) -> None:
        """tail's time column is monotonic even where an event was made before the one above."""
        store = nb.open_store(f"sqlite:///{store_file}")
        try:
            (record,) = store.list_sessions()
            made = [e.occurred_at for e in nb.SessionLog(store, record.key).scan()]
        finally:
            store.close()
        assert any(b < a for a, b in itertools.pairwise(made)), "no case to check"
        argv = ["tail", "s1", "-n", "1000", "--store", str(store_file)]
        assert main(argv) == EXIT_OK
        lines = capsys.readouterr().out.splitlines()
        times = [datetime.strptime(line.split()[1], "%H:%M:%S.%f") for line in lines]
        assert len(times) == len(made)
        assert times == sorted(times)


class TestArchiveCommands:
    def _listed(self, store: str, capsys: Any, *flags: str) -> list[str]:
        assert main(["sessions", "--store", store, "--json", *flags]) == EXIT_OK
        return [s["session_id"] for s in json.loads(capsys.readouterr().out)]

    def test_archive_then_unarchive(self, tmp_path: Path, capsys: Any) -> None:
        """archive hides a finished session from the listing; unarchive brings it back."""
        path = tmp_path / "a.sqlite"
        agent = nb.Agent(name="A", agent_id="a", model=nb.ScriptedModel(["ok"]))
        with nb.Runtime(agent, store=f"sqlite:///{path}") as runtime:
            runtime.session("s1", user_id="alice").run("hi", timeout=WAIT)
        store = str(path)
        assert main(["archive", "s1", "--user", "alice", "--store", store]) == EXIT_OK
        assert "agentnb unarchive s1 --user alice" in capsys.readouterr().out
        assert self._listed(store, capsys) == []
        assert self._listed(store, capsys, "--archived") == ["s1"]
        assert main(["unarchive", "s1", "--user", "alice", "--store", store]) == EXIT_OK
        capsys.readouterr()
        assert self._listed(store, capsys) == ["s1"]

    def test_archive_is_refused_while_work_waits(self, tmp_path: Path, capsys: Any) -> None:
        """A session with a queued task is not archived: exit 1, the reason on one line."""
        path = tmp_path / "b.sqlite"
        store = nb.open_store(f"sqlite:///{path}")
        key = nb.SessionKey("default", "alice", "a", "s1")
        store.create_session(key)
        nb.Inbox(store, key).accept("submit", turn_id="turn_1", input="queued work")
        store.close()
        assert main(["archive", "s1", "--store", str(path)]) == EXIT_FAILED
        err = _err(capsys)
        assert "cannot be archived" in err
        assert len(err.strip().splitlines()) == 1

    def test_json_prints_the_session_info(self, tmp_path: Path, capsys: Any) -> None:
        """archive --json prints the archived session's record."""
        path = tmp_path / "c.sqlite"
        store = nb.open_store(f"sqlite:///{path}")
        store.create_session(nb.SessionKey("default", "alice", "a", "s1"))
        store.close()
        assert main(["archive", "s1", "--store", str(path), "--json"]) == EXIT_OK
        info = json.loads(capsys.readouterr().out)
        assert info["archived_at"] is not None
