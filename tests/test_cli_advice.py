"""The command line's errors as a person in a shell meets them: one `error:` line with
advice for the shell (never Python's), and the exit code the table promises."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import agentnb as nb
from agentnb.cli import EXIT_FAILED, EXIT_NOT_FOUND, main
from agentnb.errors import install_hint

REPO = Path(nb.__file__).resolve().parent.parent


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    """An SQLite store with alice's finished session s1."""
    url = f"sqlite:///{tmp_path / 'advice.sqlite'}"
    agent = nb.Agent(name="Advice", agent_id="advice", model=nb.ScriptedModel(["Done."]))
    with nb.Runtime(agent, store=url) as runtime:
        runtime.session("s1", user_id="alice").run("hello", timeout=30)
    return url


def _error_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), err
    return lines[0]


class TestNotFound:
    def test_revoking_an_unknown_token_is_not_found(
        self, store_url: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`agentnb token revoke tok_nope` exits 3 and points at `agentnb token list`."""
        assert main(["token", "revoke", "tok_nope", "--store", store_url]) == EXIT_NOT_FOUND
        line = _error_line(capsys.readouterr().err)
        assert "no token 'tok_nope'" in line
        assert "agentnb token list" in line

    def test_cancelling_an_unknown_turn_names_agentnb_show(
        self, store_url: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`agentnb cancel s1 turn_nope` exits 3 and says `agentnb show s1`, not Python."""
        argv = ["cancel", "s1", "turn_nope", "--store", store_url, "--user", "alice"]
        assert main(argv) == EXIT_NOT_FOUND
        line = _error_line(capsys.readouterr().err)
        assert "agentnb show s1" in line
        assert "session.tasks()" not in line


class TestMissingExtra:
    def test_a_postgresql_url_without_the_extra_is_one_error_line(self) -> None:
        """With psycopg missing, a postgresql:// store is one `error:` line with the install
        hint and exit 1, never a traceback."""
        code = (
            "import sys; sys.modules['psycopg'] = None; sys.modules['psycopg_pool'] = None\n"
            "from agentnb.cli import main\n"
            "sys.exit(main(['sessions', '--store', 'postgresql://app@/nowhere']))\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == EXIT_FAILED, done.stderr
        line = _error_line(done.stderr)
        assert install_hint("postgres") in line
        assert "Traceback" not in done.stderr


class TestRepository:
    def test_the_export_folder_the_exporters_readme_suggests_is_ignored(self) -> None:
        """exports/ (the folder exporters/README.md suggests) is in .gitignore."""
        ignored = (REPO / ".gitignore").read_text().splitlines()
        assert "exports/" in ignored
        assert "exports/" in (REPO / "exporters" / "README.md").read_text()
