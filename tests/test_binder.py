"""Binder opens: ``binder/requirements.txt``, installed as repo2docker installs it, runs the
notebooks.

repo2docker clones the repository and, from its root, runs
``pip install -r binder/requirements.txt`` into a fresh environment. This test does the same
with a copy of the files a clone would hold, in a fresh virtual environment (pip's cache is
reused, so after the first run it installs without downloading), then executes every notebook
in ``notebooks/`` with a kernel of that environment.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# Installing into a fresh environment takes about a minute from pip's cache; longer when the
# cache is cold. A failure guard only.
pytestmark = pytest.mark.timeout(900)

NOTEBOOKS = sorted(p.name for p in (REPO / "notebooks").glob("*.ipynb"))
NEEDS_A_BUILD = {"06-a-real-model.ipynb"}
"""Notebooks that need llama.cpp's server, which .ci/run builds from source with portable
flags: Binder's requirements cannot build it, so there the notebook says so at its first cell."""


@dataclass(frozen=True)
class BinderEnv:
    """A fresh environment built from binder/requirements.txt, and the clone it came from."""

    clone: Path
    python: Path
    env: dict[str, str]
    """Process environment with the new environment first on PATH and its kernel found first."""


def _clone(dest: Path) -> None:
    """Copy the files a clone of the repository would hold (tracked, or new and not ignored)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout
    for name in filter(None, listed.decode().split("\0")):
        source = REPO / name
        if source.is_file():  # a file deleted but not yet committed is skipped
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> None:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"{' '.join(argv)} failed:\n{done.stdout}\n{done.stderr}"


@pytest.fixture(scope="module")
def binder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BinderEnv]:
    """The environment repo2docker would build, made once for this module and removed after."""
    root = tmp_path_factory.mktemp("binder")
    clone = root / "repo"
    clone.mkdir()
    _clone(clone)
    venv = root / "env"
    base = {k: v for k, v in os.environ.items() if k not in {"VIRTUAL_ENV", "PYTHONPATH"}}
    _run([sys.executable, "-m", "venv", str(venv)], root, base)
    bindir = venv / ("Scripts" if os.name == "nt" else "bin")
    python = bindir / ("python.exe" if os.name == "nt" else "python")
    # The kernel the notebooks run on is this environment's Python, whatever other kernels
    # the machine has: JUPYTER_PATH is searched first.
    kernels = root / "jupyter" / "kernels" / "binder"
    kernels.mkdir(parents=True)
    argv = [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    spec = {"argv": argv, "display_name": "Binder", "language": "python"}
    (kernels / "kernel.json").write_text(json.dumps(spec))
    env = {
        **base,
        "PATH": f"{bindir}{os.pathsep}{base.get('PATH', '')}",
        "JUPYTER_PATH": str(root / "jupyter"),
        "JUPYTER_DATA_DIR": str(root / "jupyter-data"),
        "JUPYTER_CONFIG_DIR": str(root / "jupyter-config"),
        "MPLBACKEND": "Agg",
    }
    # Exactly repo2docker's step, from the root of the clone (its cache flag aside: reusing
    # pip's cache keeps this test quick and able to run without downloads).
    _run([str(python), "-m", "pip", "install", "-q", "-r", "binder/requirements.txt"], clone, env)
    try:
        yield BinderEnv(clone, python, env)
    finally:
        shutil.rmtree(root, ignore_errors=True)


class TestBinder:
    def test_requirements_install_the_repository_itself(self, binder: BinderEnv) -> None:
        """agentnb is installed from the repository root (not its parent) with its extras."""
        code = (
            "import agentnb, agentnb.widgets, agentnb.analysis, pathlib; "
            "print(pathlib.Path(agentnb.__file__).parent)"
        )
        done = subprocess.run(
            [str(binder.python), "-c", code],
            cwd=binder.clone.parent,
            env=binder.env,
            capture_output=True,
            text=True,
            check=True,
        )
        installed = Path(done.stdout.strip())
        assert binder.clone not in installed.parents, "installed from the clone, not a wheel"
        assert (installed / "py.typed").is_file(), "the wheel must ship py.typed"
        assert (installed / "_exporters" / "schema.sql").is_file()

    @pytest.mark.parametrize("notebook", sorted(set(NOTEBOOKS) - NEEDS_A_BUILD))
    def test_notebook_runs(self, binder: BinderEnv, notebook: str, tmp_path: Path) -> None:
        """Every notebook executes top to bottom with the Binder environment's kernel."""
        _run(
            [
                str(binder.python),
                "-m",
                "nbconvert",
                "--to",
                "notebook",
                "--execute",
                "--ExecutePreprocessor.kernel_name=binder",
                "--ExecutePreprocessor.timeout=300",
                "--output-dir",
                str(tmp_path),
                str(binder.clone / "notebooks" / notebook),
            ],
            binder.clone / "notebooks",
            binder.env,
        )
        assert (tmp_path / notebook).is_file()
