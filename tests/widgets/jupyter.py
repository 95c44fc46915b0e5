"""A Jupyter server and Debian's chromium for the real-browser tests (no test here).

``jupyter_server`` starts JupyterLab 4 (or Notebook 7) on a free loopback port with a random
token and a temporary root, and stops it after. Never downloads a browser: the tests use
``/usr/bin/chromium`` (``.ci/run`` installs Debian's package) and skip, saying so, only
when that is absent.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SERVER_START = 60.0
STEP = 30_000  # ms: a failure guard for each browser wait, never a timing assertion

KERNEL_IDLE = """() => {
    const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
    const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
    return !!k && k.status === 'idle';
}"""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass(frozen=True)
class Server:
    """A running Jupyter server: ``url(name)`` opens the notebook ``name`` of its root."""

    app: str
    base: str
    token: str
    root: Path

    def url(self, name: str) -> str:
        if self.app == "jupyterlab":
            return f"{self.base}/lab/tree/{name}?reset&token={self.token}"
        return f"{self.base}/notebooks/{name}?token={self.token}"


@contextlib.contextmanager
def jupyter_server(app: str, root: Path, scratch: Path) -> Iterator[Server]:
    """``app`` ("jupyterlab" or "notebook") serving ``root``; its settings, runtime files
    and log go under ``scratch``."""
    klass = "LabApp" if app == "jupyterlab" else "JupyterNotebookApp"
    # No "get notified about Jupyter news?" toast over the view.
    settings = scratch / "settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True, exist_ok=True)
    (settings / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
    # Every cell in the page (JupyterLab 4 draws only the cells in view by default), so a
    # test finds any cell's output by its source.
    notebook = scratch / "settings" / "@jupyterlab" / "notebook-extension"
    notebook.mkdir(parents=True, exist_ok=True)
    (notebook / "tracker.jupyterlab-settings").write_text('{"windowingMode": "none"}')
    port, token = free_port(), secrets.token_hex(16)
    env = dict(
        os.environ,
        JUPYTER_PLATFORM_DIRS="1",
        JUPYTER_RUNTIME_DIR=str(scratch / "runtime"),
        JUPYTER_CONFIG_DIR=str(scratch / "config"),
        PYTHONWARNINGS="ignore",
    )
    command = [
        sys.executable,
        "-m",
        app,
        "--no-browser",
        "--ip=127.0.0.1",
        f"--port={port}",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
        "--ServerApp.port_retries=0",
        f"--{klass}.expose_app_in_browser=True",
        f"--{klass}.workspaces_dir={scratch / 'workspaces'}",
        f"--{klass}.user_settings_dir={scratch / 'settings'}",
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-root")
    log_path = scratch / f"{app}.log"
    log = log_path.open("wb")
    server = subprocess.Popen(command, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + SERVER_START
        while True:
            if server.poll() is not None:
                raise AssertionError(f"{app} exited: {log_path.read_text()}")
            status = f"{base}/api/status?token={token}"
            with (
                contextlib.suppress(urllib.error.URLError, OSError),
                urllib.request.urlopen(status, timeout=2) as answer,
            ):
                if answer.status == 200:
                    break
            if time.monotonic() > deadline:
                raise AssertionError(f"{app} did not answer within {SERVER_START} s")
            time.sleep(0.25)
        yield Server(app, base, token, root)
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(5)
        log.close()


def run_all(page: Any) -> None:
    """Run every cell of the open notebook (once its kernel is idle)."""
    page.wait_for_function(KERNEL_IDLE, timeout=STEP)
    page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")


def screenshot(locator: Any, name: str) -> Path:
    """Save ``locator``'s screenshot as artifacts/NAME.png (gitignored) and say where."""
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / f"{name}.png"
    locator.screenshot(path=str(shot))
    print(f"screenshot: {shot}")
    return shot
