"""The README's code runs as written, and every CLI command documents itself."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


PAGES = [
    "README.md",
    "docs/concepts.md",
    "docs/durability.md",
    "docs/service.md",
    "docs/analysis.md",
    "docs/integrations.md",
    "docs/scaling.md",
    "docs/cli.md",
    "docs/notebooks.md",
    "docs/architecture.md",
]
"""The README and the pages of docs/ it sends a newcomer to."""


@pytest.mark.parametrize("name", PAGES)
def test_python_snippets_run(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every ```python block of the page runs, in order, in a fresh directory."""
    text = (REPO / name).read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    monkeypatch.chdir(tmp_path)
    for block in blocks:
        namespace: dict[str, object] = {}
        exec(compile(block, name, "exec"), namespace)
        runtime = namespace.get("runtime")
        if runtime is not None:
            runtime.close()  # type: ignore[attr-defined]


def test_the_readme_is_a_start_of_at_most_200_lines() -> None:
    """The README stays short, keeps its two commands and its ten-line example, and sends
    the reader on to each page of docs/ it lists."""
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    assert re.search(r"^make demo  ", text, flags=re.M)
    assert re.search(r"^make test  ", text, flags=re.M)
    (example,) = re.findall(r"## Ten lines\n\n```python\n(.*?)```", text, flags=re.S)
    code = [line for line in example.splitlines() if line.strip()]
    assert len(code) <= 12, code
    linked = set(re.findall(r"\]\((docs/[\w-]+\.md)\)", text))
    assert {p for p in PAGES if p.startswith("docs/")} <= linked


@pytest.mark.parametrize("name", PAGES)
def test_relative_links_resolve(name: str) -> None:
    """Every relative link of the page names a file of the repository."""
    page = REPO / name
    for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", page.read_text()):
        assert (page.parent / target).exists(), f"{name}: {target}"


def test_every_cli_command_has_help_with_an_example() -> None:
    """`agentnb <command> --help` works for each command and shows an example."""
    from agentnb.cli import main

    parser_help = subprocess.run(
        [sys.executable, "-m", "agentnb.cli", "--help"],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    ).stdout
    commands = re.findall(r"^\s{4}(\w+)\s", parser_help, flags=re.M)
    assert "demo" in commands
    for command in commands:
        out = subprocess.run(
            [sys.executable, "-m", "agentnb.cli", command, "--help"],
            capture_output=True,
            text=True,
            check=True,
            cwd=REPO,
        ).stdout
        assert "Example" in out or "example" in out, command
    assert callable(main)


def _helps() -> dict[str, str]:
    """The --help text of agentnb and of each of its commands."""
    from agentnb.cli import _parser

    parser = _parser()
    helps = {"agentnb": parser.format_help()}
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, command in sub.choices.items():
        helps[name] = command.format_help()
    return helps


def test_help_has_no_rest_markup() -> None:
    """No --help text shows reStructuredText markup (``literal``, :role:`x`) to the user."""
    for name, text in _helps().items():
        assert not re.search(r"``|:\w+:`|\.\. \w+::", text), name


def test_every_help_documents_the_exit_codes() -> None:
    """Every --help ends with the exit-code table (usage 2, not found 3, data 4)."""
    for name, text in _helps().items():
        assert re.search(r"^  2  usage error", text, flags=re.M), name
        assert re.search(r"^  3  not found", text, flags=re.M), name
        assert re.search(r"^  4  data error", text, flags=re.M), name


def test_every_notebook_is_listed_in_the_readmes() -> None:
    """README.md and notebooks/README.md name each notebook of notebooks/, and only those."""
    notebooks = sorted(p.name for p in (REPO / "notebooks").glob("*.ipynb"))
    assert len(notebooks) >= 4
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Notebooks", 1)[1].split("\n## ", 1)[0]
    assert sorted(re.findall(r"notebooks/([\w-]+\.ipynb)", section)) == notebooks
    listed = re.findall(
        r"^- `([\w-]+\.ipynb)`", (REPO / "notebooks" / "README.md").read_text(), re.M
    )
    assert sorted(listed) == notebooks


def test_the_comparison_table_names_each_peer() -> None:
    """The README's comparison table has a column per peer the design card names."""
    readme = (REPO / "README.md").read_text()
    header = next(line for line in readme.splitlines() if line.startswith("| | agentnb |"))
    for peer in ("AgentScope", "Everruns", "LangGraph", "DBOS", "OpenAI Agents SDK"):
        assert peer in header, peer
    rows = [line for line in readme.split(header, 1)[1].splitlines() if line.startswith("|")]
    assert all(line.count("|") == header.count("|") for line in rows[1:])
