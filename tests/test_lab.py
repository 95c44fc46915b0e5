"""`make lab`: it installs what every tutorial needs and takes a port and Jupyter's options."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

import agentnb

REPO = Path(agentnb.__file__).resolve().parent.parent
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))

# What a notebook's code uses -> the extra that installs it (each module's ImportError names it).
USES = {
    "mcp": re.compile(r"\bnb\.mcp\b|agentnb\.mcp\b|from agentnb import .*\bmcp\b"),
    "otel": re.compile(r"\bOTelSink\b|agentnb\.export\.otel\b"),
    "server": re.compile(r"\bnb\.connect\(|agentnb\.(server|client)\b|\bnb\.serve\b"),
    "widgets": re.compile(r"agentnb\.widgets\b|\bSessionView\b"),
    "export": re.compile(r"agentnb\.export\b|agentnb\.analysis\b|\bnb\.export\("),
}


NAME = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["name"]
"""The distribution's name, which its extras use to pull in each other."""


def _extras() -> dict[str, list[str]]:
    data = tomllib.loads((REPO / "pyproject.toml").read_text())
    extras: dict[str, list[str]] = data["project"]["optional-dependencies"]
    return extras


def _closure(name: str, extras: dict[str, list[str]]) -> set[str]:
    """The extra ``name`` and every agentnb extra it pulls in (``agentnb[x]``)."""
    found = {name}
    for requirement in extras[name]:
        inner = re.fullmatch(re.escape(NAME) + r"\[([\w,-]+)\]", requirement.split(";")[0].strip())
        if inner:
            for part in inner.group(1).split(","):
                found |= _closure(part, extras)
    return found


def _code(notebook: Path) -> str:
    cells = json.loads(notebook.read_text())["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")


class TestLabExtra:
    @pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
    def test_the_lab_extra_installs_what_the_tutorial_uses(self, notebook: Path) -> None:
        """Every extra a tutorial's code needs is part of the `lab` extra (`make lab`)."""
        lab = _closure("lab", _extras())
        code = _code(notebook)
        needed = {extra for extra, pattern in USES.items() if pattern.search(code)}
        assert needed <= lab, f"{notebook.name} needs {sorted(needed - lab)}; lab has {lab}"

    def test_the_lab_extra_installs_the_readme_notebook_sections(self) -> None:
        """The README's remote view (`nb.connect`) and MCP/OTel sections run after `make lab`."""
        lab = _closure("lab", _extras())
        assert {"server", "mcp", "otel", "widgets", "export"} <= lab


@pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")
class TestMakeLab:
    def _command(self, *args: str) -> str:
        out = subprocess.run(
            ["make", "-n", "lab", *args], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout
        (line,) = [ln for ln in out.splitlines() if "jupyter lab" in ln]
        return line

    def test_port_and_args_reach_jupyter(self) -> None:
        """`make lab PORT=8899 ARGS=...` starts JupyterLab on that port with those options."""
        line = self._command("PORT=8899", "ARGS=--no-browser --ServerApp.token=abc")
        assert "--port=8899" in line
        assert "--no-browser --ServerApp.token=abc" in line

    def test_no_port_leaves_jupyters_default(self) -> None:
        """Without PORT, JupyterLab picks its own port."""
        assert "--port" not in self._command()

    def test_root_gets_allow_root(self) -> None:
        """Run as root (a container), `make lab` adds --allow-root; otherwise it does not."""
        root = hasattr(os, "geteuid") and os.geteuid() == 0
        assert ("--allow-root" in self._command()) is root
