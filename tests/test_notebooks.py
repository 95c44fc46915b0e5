"""The committed notebooks: valid nbformat, stored the way nbval checks them.

The notebooks run under nbval (``pytest notebooks``); these tests check the files
themselves, which JupyterLab, nbconvert and Binder read, and ``notebooks/refresh.py``, which
writes them.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(
    [*REPO.glob("notebooks/*.ipynb"), *REPO.glob("tests/**/*.ipynb")],
    key=lambda p: str(p.relative_to(REPO)),
)


def _refresh() -> ModuleType:
    spec = importlib.util.spec_from_file_location("refresh", REPO / "notebooks" / "refresh.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class TestCommittedNotebooks:
    @pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(REPO)))
    def test_is_valid_nbformat(self, path: Path) -> None:
        """Every committed notebook validates against the nbformat 4 schema."""
        notebook = nbformat.read(path, as_version=4)
        nbformat.validate(notebook)

    def test_every_notebook_is_checked(self) -> None:
        """The four tutorials and the browser test's notebook are all validated here."""
        names = {p.name for p in NOTEBOOKS}
        assert {"01-quickstart.ipynb", "04-analytics.ipynb", "view_demo.ipynb"} <= names


class TestTutorials:
    @pytest.mark.parametrize(
        "path", [p for p in NOTEBOOKS if p.parent.name == "notebooks"], ids=lambda p: p.name
    )
    def test_no_tutorial_closes_its_live_view(self, path: Path) -> None:
        """A later cell never closes a SessionView the text tells the reader to scroll up to
        (Run All would leave it empty); closing the runtime leaves the view's last state."""
        notebook = nbformat.read(path, as_version=4)
        code = "\n".join(c.source for c in notebook.cells if c.cell_type == "code")
        assert "view.close()" not in code

    @pytest.mark.parametrize("name", ["01-quickstart.ipynb", "02-steer-inject-respond.ipynb"])
    def test_ends_with_a_live_view_waiting_for_a_click(self, name: str) -> None:
        """01 and 02 end with a live view and an approval waiting, saying "click Approve";
        nothing after it closes the runtime (Run All leaves the buttons working)."""
        cells = nbformat.read(REPO / "notebooks" / name, as_version=4).cells
        code = [c for c in cells if c.cell_type == "code"]
        last = code[-1].source
        assert last.rstrip().endswith("SessionView(session)"), last
        assert "wait_until(" in last
        assert "pending" in last
        assert "close()" not in last
        assert "click Approve" in last
        tail = cells[cells.index(code[-1]) - 1 :]
        assert any("**click Approve**" in c.source for c in tail if c.cell_type == "markdown")


class TestRefresh:
    def test_stores_checked_outputs_as_valid_nbformat(self) -> None:
        """refresh.clean keeps checked outputs without metadata on streams, and validates."""
        refresh = _refresh()
        notebook = nbformat.v4.new_notebook()
        checked = nbformat.v4.new_code_cell("# NBVAL_CHECK_OUTPUT\nprint('a'); 1")
        checked.outputs = [
            nbformat.v4.new_output("stream", name="stdout", text="turn_" + "a" * 32 + "\n"),
            nbformat.v4.new_output("stream", name="stdout", text="more\n"),
            nbformat.v4.new_output("execute_result", data={"text/plain": "1"}, execution_count=7),
        ]
        plain = nbformat.v4.new_code_cell("x = 1")
        plain.outputs = [nbformat.v4.new_output("stream", name="stdout", text="gone")]
        notebook.cells = [checked, plain]
        assert refresh.clean(notebook, Path("x.ipynb")) == 1
        nbformat.validate(notebook)
        stream, result = checked.outputs
        assert "metadata" not in stream
        assert stream["text"] == "turn_<id>\nmore\n"
        assert result["metadata"] == {}
        assert result["execution_count"] == 1
        assert plain.outputs == []
        assert plain.execution_count is None
