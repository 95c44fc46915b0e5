"""The distribution's name: ``agentnb`` in the package index is another project, so nothing
here may install it: not an extra that names the project, not a line of advice."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import agentnb
from agentnb.errors import DISTRIBUTION, install_hint

ROOT = Path(agentnb.__file__).resolve().parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
_OTHERS = re.compile(r"""pip install (-U )?["']?agentnb(\[|["'\s]|$)""")
"""Advice that would install the index's ``agentnb``."""


def _texts() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "pyproject.toml", ROOT / "Makefile"]
    for folder, pattern in (
        ("agentnb", "*.py"),
        ("docs", "*.md"),
        ("notebooks", "*.ipynb"),
        ("binder", "*"),
        ("exporters", "*.md"),
    ):
        files += sorted((ROOT / folder).rglob(pattern))
    return [f for f in files if f.is_file()]


class TestTheDistributionName:
    def test_the_project_is_not_named_after_the_other_project(self) -> None:
        """[project].name is the distribution errors.DISTRIBUTION names, not 'agentnb'."""
        assert PROJECT["name"] == DISTRIBUTION != "agentnb"

    def test_extras_that_name_the_project_name_it_by_its_distribution(self) -> None:
        """An extra that pulls in other extras names this distribution, never 'agentnb[...]'
        (which pip resolves to the other project)."""
        for extra, requirements in PROJECT["optional-dependencies"].items():
            for requirement in requirements:
                name = re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0]
                assert name != "agentnb", f"extra {extra!r} requires {requirement!r}"

    def test_no_advice_installs_the_other_project(self) -> None:
        """No install line in the package, the docs, the notebooks or Binder says
        'pip install agentnb...'."""
        found = [
            f"{path.relative_to(ROOT)}: {match.group(0)}"
            for path in _texts()
            for match in _OTHERS.finditer(path.read_text(errors="replace"))
        ]
        assert not found, found

    def test_the_install_hint_installs_the_clone(self) -> None:
        """Every ImportError's advice is an editable install of the clone with the extra."""
        assert install_hint("server").startswith('pip install -e ".[server]"')
