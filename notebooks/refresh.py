"""Run notebooks and store them the way nbval checks them.

    .venv/bin/python notebooks/refresh.py notebooks/01-quickstart.ipynb [...]

Each notebook runs top to bottom with this environment's kernel. Cells marked
``# NBVAL_CHECK_OUTPUT`` keep their outputs, passed through ``nbval_sanitize.cfg`` (ids,
times, temporary paths become placeholders), so the file holds no value that changes from
run to run; every other cell is stored without outputs or execution count (nbval runs it
and compares nothing). Widget state and execution timings are dropped. Fails if a cell
raises, or if a checked cell writes to stderr.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import nbformat
from nbclient import NotebookClient

HERE = Path(__file__).resolve().parent
CHECK = "# NBVAL_CHECK_OUTPUT"


def patterns() -> list[tuple[str, str]]:
    """The (regex, replacement) pairs of nbval_sanitize.cfg, as nbval reads them."""
    text = (HERE / "nbval_sanitize.cfg").read_text(encoding="utf-8")
    return re.findall(r"^regex: (.*)$\n^replace: (.*)$", text, flags=re.MULTILINE)


def sanitize(value: Any, pairs: list[tuple[str, str]]) -> Any:
    if isinstance(value, str):
        for regex, replace in pairs:
            value = re.sub(regex, replace, value)
        return value
    if isinstance(value, list):
        return [sanitize(v, pairs) for v in value]
    if isinstance(value, dict):
        return {k: sanitize(v, pairs) for k, v in value.items()}
    return value


def _coalesce(outputs: list[Any]) -> list[Any]:
    """Consecutive writes to one stream as one output (as nbval compares them)."""
    merged: list[Any] = []
    for output in outputs:
        previous = merged[-1] if merged else None
        if (
            previous is not None
            and output.get("output_type") == "stream"
            and previous.get("output_type") == "stream"
            and previous.get("name") == output.get("name")
        ):
            previous["text"] += output["text"]
        else:
            merged.append(output)
    return merged


def clean(notebook: Any, path: Path) -> int:
    """Store an executed notebook the way nbval checks it (see the module docstring);
    returns the number of checked cells. Raises if the result is not valid nbformat."""
    pairs = patterns()
    count = 0
    for cell in notebook.cells:
        cell.metadata.pop("execution", None)
        if cell.cell_type != "code":
            continue
        if cell.source.startswith(CHECK):
            count += 1
            cell.execution_count = count
            streams = [o for o in cell.outputs if o.get("name") == "stderr"]
            if streams:
                raise SystemExit(f"{path.name}: a checked cell wrote to stderr: {streams}")
            cell.outputs = _coalesce(cell.outputs)
            for output in cell.outputs:
                output.pop("execution_count", None)
                kind = output.get("output_type")
                if kind == "execute_result":
                    output["execution_count"] = count
                # nbformat 4: rich outputs carry metadata (required); streams and errors
                # must not (an extra key makes the notebook invalid).
                if kind in {"execute_result", "display_data"}:
                    output["metadata"] = {}
                else:
                    output.pop("metadata", None)
                for key in ("text", "data"):
                    if key in output:
                        output[key] = sanitize(output[key], pairs)
        else:
            cell.outputs = []
            cell.execution_count = None
    notebook.metadata.pop("widgets", None)
    nbformat.validate(notebook)  # never store a notebook that other tools would refuse
    return count


def refresh(path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    NotebookClient(notebook, timeout=120, resources={"metadata": {"path": str(HERE)}}).execute()
    count = clean(notebook, path)
    nbformat.write(notebook, path)
    print(f"refreshed {path.name}: {count} checked cell(s)")


if __name__ == "__main__":
    for name in sys.argv[1:] or sorted(str(p) for p in HERE.glob("*.ipynb")):
        refresh(Path(name))
