"""The command line with untrusted text, bad input and the commands that move a turn on.

Text from models, tools and users reaches the terminal escaped; every bad input ends in one
``error:`` line and its exit code, never a traceback; ``resume`` and ``cancel`` accept their
commands for a worker to carry out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import agentnb as nb
from agentnb.cli import main

HOSTILE = "\x1b]0;pwned\x07 \x1b[2J\x1b[31mred\x9b\u202etxt"
"""An OSC window title, a screen clear, a colour, a C1 CSI and a bidirectional override."""


@nb.tool
def echo(text: str) -> str:
    """Say it back."""
    return f"echo {text}"


@pytest.fixture
def hostile_store(tmp_path: Path) -> str:
    """A store whose session holds control sequences in its title, task, tool call, tool
    result and model reply."""
    url = f"sqlite:///{tmp_path / 'h.sqlite'}"
    model = nb.ScriptedModel([nb.ToolCall("echo", {"text": HOSTILE}), f"said {HOSTILE}"])
    agent = nb.Agent(name="H", agent_id="h", model=model, tools=[echo])
    with nb.Runtime(agent, store=url) as runtime:
        session = runtime.session("s", user_id="u")
        session.run(f"task {HOSTILE}", timeout=30)
        session.update(title=f"title {HOSTILE}")
    return url


class TestUntrustedTextIsEscaped:
    @pytest.mark.parametrize(
        "argv",
        [["sessions"], ["show", "s"], ["show", "s", "--width", "0"], ["tail", "s", "-n", "50"]],
    )
    def test_no_control_character_reaches_the_terminal(
        self, hostile_store: str, argv: list[str], capsys: Any
    ) -> None:
        """sessions, show and tail print control sequences of stored text escaped."""
        assert main([*argv, "--store", hostile_store]) == 0
        out = capsys.readouterr().out
        for raw in ("\x1b", "\x07", "\x9b", "\u202e"):
            assert raw not in out
        assert "\\x1b" in out

    def test_show_keeps_the_text_readable(self, hostile_store: str, capsys: Any) -> None:
        """The escaped text still shows what was said, in order."""
        assert main(["show", "s", "--width", "0", "--store", hostile_store]) == 0
        assert "said \\x1b]0;pwned\\x07 \\x1b[2J\\x1b[31mred" in capsys.readouterr().out

    def test_error_messages_are_escaped(self, hostile_store: str, capsys: Any) -> None:
        """An error quoting the user's text prints it escaped, on one line."""
        assert main(["show", f"no{HOSTILE}", "--store", hostile_store]) != 0
        err = capsys.readouterr().err
        assert "\x1b" not in err
        assert err.startswith("error: ")


class TestBadInputIsOneErrorLine:
    @pytest.mark.parametrize("command", ["sessions", "show s", "tail s", "export --to parquet:x"])
    def test_malformed_store_url(self, command: str, capsys: Any) -> None:
        """A store URL that cannot be split exits 2 with one error line, password unechoed."""
        code = main([*command.split(), "--store", "postgresql://u:hunter2@[::1/db"])
        err = capsys.readouterr().err
        assert code == 2
        assert err.startswith("error: the store URL is malformed")
        assert err.count("\n") == 1
        assert "hunter2" not in err
