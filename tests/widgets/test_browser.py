"""SessionView in a real browser: JupyterLab 4 and Notebook 7, Debian's chromium, Playwright.

Starts ``jupyter lab`` (and ``jupyter notebook``, Notebook 7) on a free loopback port with a
random token and a temporary root, opens ``browser/view_demo.ipynb`` (a scripted agent behind
a ``SessionView``), submits a task, watches the reply stream in, approves the pending order,
restarts the kernel, re-runs the cell and checks the same conversation is shown. A
screenshot of the view is saved under ``artifacts/``.

Never downloads a browser: it uses ``/usr/bin/chromium`` (``.ci/run`` installs Debian's
package) and skips, saying so, only when that is absent.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
HERE = Path(__file__).parent
ARTIFACTS = HERE.parents[1] / "artifacts"
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

pytestmark = pytest.mark.skipif(
    not os.path.exists(CHROMIUM),
    reason=f"no Debian chromium at {CHROMIUM} (apt-get install chromium; .ci/run does)",
)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(params=["jupyterlab", "notebook"])
def lab(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """JupyterLab 4 or Notebook 7 on loopback, serving a temp root with the demo notebook."""
    app = request.param
    klass = "LabApp" if app == "jupyterlab" else "JupyterNotebookApp"
    root = tmp_path / "root"
    root.mkdir()
    shutil.copy(HERE / "browser" / "view_demo.ipynb", root / "view_demo.ipynb")
    # No "get notified about Jupyter news?" toast over the view.
    settings = tmp_path / "settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
    port, token = _free_port(), secrets.token_hex(16)
    env = dict(
        os.environ,
        JUPYTER_PLATFORM_DIRS="1",
        JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
        JUPYTER_CONFIG_DIR=str(tmp_path / "config"),
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
        f"--{klass}.workspaces_dir={tmp_path / 'workspaces'}",
        f"--{klass}.user_settings_dir={tmp_path / 'settings'}",
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-root")
    log = (tmp_path / "lab.log").open("wb")
    server = subprocess.Popen(command, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + SERVER_START
        while True:
            if server.poll() is not None:
                raise AssertionError(f"{app} exited: {(tmp_path / 'lab.log').read_text()}")
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
        if app == "jupyterlab":
            yield f"{base}/lab/tree/view_demo.ipynb?reset&token={token}", root
        else:
            yield f"{base}/notebooks/view_demo.ipynb?token={token}", root
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(5)
        log.close()


_KERNEL_IDLE = """() => {
    const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
    const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
    return !!k && k.status === 'idle';
}"""


def _run_all(page: Any) -> None:
    page.wait_for_function(_KERNEL_IDLE, timeout=STEP)
    page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")


def test_drive_a_session_view_in_a_browser(
    lab: tuple[str, Path], request: pytest.FixtureRequest
) -> None:
    """Submit, stream, approve, complete; after a kernel restart the cell shows it again."""
    from playwright.sync_api import expect, sync_playwright

    url, root = lab
    dialogs: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 1000})
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            page.goto(url)
            _run_all(page)
            view = page.locator(".agentnb-view")
            expect(view).to_have_count(1, timeout=STEP)

            page.locator(".agentnb-input textarea").fill("Order two desks")
            page.locator("button.agentnb-submit").click()
            transcript = page.locator(".agentnb-transcript")
            expect(transcript).to_contain_text("Order two desks", timeout=STEP)
            # The reply streams in: its first words show before the last ones exist.
            expect(transcript).to_contain_text("Let me place", timeout=STEP)
            partial = transcript.inner_text()
            assert "Checking stock now." not in partial, "the reply did not stream"
            assert "\u258c" in partial

            approve = page.locator("button.agentnb-approve")
            expect(approve).to_be_visible(timeout=STEP)
            expect(transcript).to_contain_text("<script>alert('x')</script>")  # as text
            approve.click()
            expect(transcript).to_contain_text("Your order of two desks is placed.", timeout=STEP)
            expect(page.locator(".agentnb-tasks")).to_contain_text("completed", timeout=STEP)
            expect(page.locator(".agentnb-pending")).not_to_contain_text("Approval needed")
            expect(transcript).to_contain_text("create_order \u00b7 success")
            before = transcript.inner_text()

            page.evaluate(
                "window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.restart()"
            )
            _run_all(page)
            expect(page.locator(".agentnb-view")).to_have_count(1, timeout=STEP)
            again = page.locator(".agentnb-transcript")
            expect(again).to_contain_text("Your order of two desks is placed.", timeout=STEP)
            expect(page.locator(".agentnb-tasks")).to_contain_text("completed")
            assert again.inner_text() == before
            assert dialogs == [], f"page script ran: {dialogs}"

            # Tool cards are collapsible: open one to show its arguments and result.
            page.locator(".agentnb-tool").get_by_text("create_order \u00b7 success").click()
            expect(page.locator(".agentnb-tool-body")).to_contain_text('"qty": 2', timeout=STEP)
            expect(page.locator(".agentnb-tool-body")).to_contain_text("ordered 2 x desk")
            ARTIFACTS.mkdir(exist_ok=True)
            shot = ARTIFACTS / f"session_view-{request.node.callspec.id}.png"
            page.locator(".agentnb-view").screenshot(path=str(shot))
            print(f"screenshot: {shot}")
        finally:
            browser.close()
    assert (root / "chat.sqlite").exists()
