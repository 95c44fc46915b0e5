"""`agentnb demo` tells the story in plain words, can run again, and ends with what to try."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agentnb.cli import EXIT_OK, main
from agentnb.demo import BINDER_URL

REPO = Path(__file__).resolve().parents[1]
RAW_ID = re.compile(r"\b(?:cmd|turn|run|req|call|msg|evt|mc|step|batch|inp)_[0-9a-z]{6,}")


@dataclass(frozen=True)
class Demos:
    """Two runs of ``agentnb demo`` in one fresh folder, on its default store."""

    folder: Path
    first: str
    second: str


def _demo(folder: Path) -> str:
    """Run ``python -m agentnb demo`` in ``folder`` with the agentnb script on PATH."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(
        [sys.executable, "-m", "agentnb", "demo"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,  # a failure guard only
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    return done.stdout


@pytest.fixture(scope="module")
def demos(tmp_path_factory: pytest.TempPathFactory) -> Demos:
    folder = tmp_path_factory.mktemp("demo")
    return Demos(folder, _demo(folder), _demo(folder))


def _next_steps(output: str) -> list[str]:
    """The command lines listed under "Next, try:"."""
    tail = output.split("\nNext, try:\n", 1)[1]
    return [line.strip() for line in tail.splitlines() if line.startswith("  agentnb ")]


class TestStory:
    def test_second_task_waits_in_plain_words(self, demos: Demos) -> None:
        """The demo says task 2 waits in the queue, not a list of statuses."""
        assert "task 2 waits in the queue until task 1 is done" in demos.first
        assert "['queued'" not in demos.first

    def test_every_step_is_told(self, demos: Demos) -> None:
        """Steering, the approval, the interrupt and the resume each get a plain sentence."""
        for words in [
            "Steered task 1 while it runs",
            "stopped to ask a person first: create_order(",
            "Approved. Task 2 continued in a new run and completed",
            "Interrupted while its answer was streaming: the task is interrupted",
            "Resumed: the same task continued in a new run and completed",
        ]:
            assert words in demos.first, words

    def test_no_raw_ids(self, demos: Demos) -> None:
        """No cmd_/turn_/run_/req_/call_ ids appear in either run's output."""
        for output in (demos.first, demos.second):
            assert not RAW_ID.search(output), RAW_ID.search(output)

    def test_no_unlabelled_tuples_or_lists(self, demos: Demos) -> None:
        """Values are printed with labels, never as Python tuples or lists."""
        assert not re.search(r"\[\(|\(\'|\[\'", demos.first)

    def test_long_texts_are_cut_with_an_ellipsis(self, demos: Demos) -> None:
        """Texts longer than a line end in … instead of running on."""
        assert re.search(r'Task 1 completed: ".{40,80}…"', demos.first)
        assert max(len(line) for line in demos.first.splitlines()) <= 100

    def test_session_key_is_explained_once(self, demos: Demos) -> None:
        """The session key is shown with its four parts named, once per run."""
        assert demos.first.count("The session key is default/demo/cost-assistant/demo-001") == 1
        assert "namespace 'default' / user 'demo' / agent 'cost-assistant'" in demos.first


class TestRunningAgain:
    def test_first_run_says_the_store_is_new(self, demos: Demos) -> None:
        """A run in a fresh folder says it made a new store."""
        assert "A new store: .agentnb/agentnb.sqlite." in demos.first

    def test_second_run_says_it_continues_the_store(self, demos: Demos) -> None:
        """Running it again continues the same store with a new session, and says so."""
        assert "already holds 1 demo session: this run continues the same store" in demos.second
        assert "adds session demo-002" in demos.second

    def test_second_run_keeps_the_first_session(
        self, demos: Demos, monkeypatch: pytest.MonkeyPatch, capsys: Any
    ) -> None:
        """After two runs the store holds both sessions, each with all three tasks completed."""
        monkeypatch.chdir(demos.folder)
        capsys.readouterr()
        assert main(["sessions", "--json"]) == EXIT_OK
        sessions = {s["session_id"]: s for s in json.loads(capsys.readouterr().out)}
        assert sorted(sessions) == ["demo-001", "demo-002"]
        assert {s["latest_status"] for s in sessions.values()} == {"completed"}
        assert {s["tasks"] for s in sessions.values()} == {3}


class TestEnding:
    def test_ends_with_where_the_data_is_and_next_steps(self, demos: Demos) -> None:
        """The output ends with the store, the export and commands to try, notebooks last."""
        where, steps = demos.second.split("\nWhere the data is:\n", 1)[1].split("\nNext, try:\n")
        assert "the store:  .agentnb/agentnb.sqlite" in where
        assert "the export: .agentnb/export/" in where
        commands = _next_steps(demos.second)
        assert any(c.startswith("agentnb show demo-002") for c in commands)
        assert any(c.startswith("agentnb query ") for c in commands)
        assert "make lab" in steps
        assert "notebooks/01-quickstart.ipynb" in steps
        assert steps.strip().splitlines()[-1].strip() == BINDER_URL

    def test_suggested_commands_work(
        self, demos: Demos, monkeypatch: pytest.MonkeyPatch, capsys: Any
    ) -> None:
        """Every agentnb command the demo suggests runs from that folder and exits 0."""
        monkeypatch.chdir(demos.folder)
        for command in _next_steps(demos.second):
            capsys.readouterr()
            assert main(shlex.split(command)[1:]) == EXIT_OK, command
            assert capsys.readouterr().out.strip(), command


class TestMakeDemo:
    def test_installs_only_the_runtime_and_the_export_extra(self, tmp_path: Path) -> None:
        """make demo installs ".[export]" (not dev) under its own stamp, then runs the demo."""
        venv = tmp_path / "venv"
        plan = subprocess.run(
            ["make", "--no-print-directory", "-n", "demo", f"VENV={venv}"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert '-e ".[export]"' in plan
        assert "dev" not in plan
        assert f"touch {venv}/.demo-installed" in plan
        assert plan.strip().endswith(f"{venv}/bin/agentnb demo")


class TestMakeLab:
    def test_installs_the_lab_extra_into_the_same_venv_and_opens_the_notebooks(
        self, tmp_path: Path
    ) -> None:
        """make lab installs ".[lab]" under its own stamp, then opens notebooks/ in JupyterLab."""
        venv = tmp_path / "venv"
        plan = subprocess.run(
            ["make", "--no-print-directory", "-n", "lab", f"VENV={venv}"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert '-e ".[lab]"' in plan
        assert f"touch {venv}/.lab-installed" in plan
        assert plan.strip().splitlines()[-1].startswith(f"{venv}/bin/jupyter lab notebooks")

    def test_the_lab_extra_has_jupyterlab_and_what_the_notebooks_import(self) -> None:
        """The lab extra brings JupyterLab, a kernel, and the widgets and export extras."""
        import tomllib

        project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
        lab = project["optional-dependencies"]["lab"]
        assert f"{project['name']}[widgets]" in lab
        assert f"{project['name']}[export]" in lab
        assert any(r.startswith("jupyterlab>=4") for r in lab)
        assert any(r.startswith("ipykernel") for r in lab)

    def test_readme_names_make_lab_and_the_binder_url(self) -> None:
        """README says make lab and links Binder at the URL the demo prints."""
        import tomllib

        readme = (REPO / "README.md").read_text()
        assert "make lab" in readme
        assert f"[![Binder](https://mybinder.org/badge_logo.svg)]({BINDER_URL})" in readme
        urls = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["urls"]
        assert urls["Binder"] == BINDER_URL
        owner_repo = urls["Repository"].removeprefix("https://github.com/")
        assert BINDER_URL.startswith(f"https://mybinder.org/v2/gh/{owner_repo}/")
        assert BINDER_URL.endswith("?urlpath=lab/tree/notebooks")
