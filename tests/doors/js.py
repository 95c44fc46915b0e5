"""Running the door tests' node clients (``tests/doors/js/*.cjs``) against a server.

The npm packages (``@ag-ui/client``, ``ai``) are installed by ``.ci/run`` into ``.node/`` at
the top of the checkout (ignored by git); without them these tests skip, and on CI
(``CI=true``) they fail instead.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

import agentnb

ROOT = Path(agentnb.__file__).resolve().parent.parent
MODULES = ROOT / ".node" / "node_modules"
SCRIPTS = Path(__file__).resolve().parent / "js"
TIMEOUT = 60.0


def need(package: str) -> None:
    """Skip (fail on CI) unless node and ``package`` are installed."""
    missing = shutil.which("node") is None or not (MODULES / package).is_dir()
    if missing:
        message = f"node and the npm package {package} (installed by .ci/run into .node/)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{message} are missing")
        pytest.skip(f"needs {message}")


def start(script: str, args: dict[str, Any]) -> subprocess.Popen[str]:
    """The node client ``script`` with ``args``, its stdout a pipe of JSON lines."""
    env = dict(os.environ, NODE_PATH=str(MODULES), SUPPRESS_TRANSFORMATION_WARNINGS="true")
    return subprocess.Popen(
        ["node", str(SCRIPTS / script), json.dumps(args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def run(script: str, args: dict[str, Any]) -> list[dict[str, Any]]:
    """Run the client to its end: the JSON objects it printed (its last is its result)."""
    proc = start(script, args)
    out, err = proc.communicate(timeout=TIMEOUT)
    lines = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert lines, f"the client printed nothing: {err[-2000:]}"
    assert "error" not in lines[-1], lines[-1]["error"]
    return lines


def read_line(proc: subprocess.Popen[str]) -> dict[str, Any]:
    """The next JSON object a running client prints."""
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, "the client ended early: " + (proc.stderr.read() if proc.stderr else "")
    value: dict[str, Any] = json.loads(line)
    assert "error" not in value, value["error"]
    return value


def kill(proc: subprocess.Popen[str]) -> None:
    """SIGKILL the client (what a closed tab or a crash looks like) and close its pipes."""
    proc.kill()
    proc.communicate(timeout=TIMEOUT)


def finish(proc: subprocess.Popen[str]) -> list[dict[str, Any]]:
    """Wait for a running client to end: the JSON objects it printed from here on."""
    out, err = proc.communicate(timeout=TIMEOUT)
    lines = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert lines, f"the client printed nothing more: {err[-2000:]}"
    assert "error" not in lines[-1], lines[-1]["error"]
    return lines
