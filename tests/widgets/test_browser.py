"""SessionView in a real browser: JupyterLab 4 and Notebook 7, Debian's chromium, Playwright.

Starts ``jupyter lab`` (and ``jupyter notebook``, Notebook 7) on a free loopback port with a
random token and a temporary root, opens ``browser/view_demo.ipynb`` (a scripted agent behind
a ``SessionView``), submits a task, watches the reply stream in, approves the pending order,
restarts the kernel, re-runs the cell and checks the same conversation is shown. A
screenshot of the view is saved under ``artifacts/``. A second notebook,
``browser/subagent_demo.ipynb``, drives a coordinator whose sub-agent asks for an approval:
the nested card, the request answered in the parent's view, the child's chat opened inside
the card (screenshot too).

Never downloads a browser: it uses ``/usr/bin/chromium`` (``.ci/run`` installs Debian's
package) and skips, saying so, only when that is absent.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.widgets.jupyter import CHROMIUM, FLAGS, STEP, Server, jupyter_server, run_all, screenshot

HERE = Path(__file__).parent

pytestmark = pytest.mark.skipif(
    not os.path.exists(CHROMIUM),
    reason=f"no Debian chromium at {CHROMIUM} (apt-get install chromium; .ci/run does)",
)


@pytest.fixture(params=["jupyterlab", "notebook"])
def lab(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """JupyterLab 4 or Notebook 7 on loopback, serving a temp root with the demo notebook."""
    root = tmp_path / "root"
    root.mkdir()
    for demo in ("view_demo.ipynb", "subagent_demo.ipynb"):
        shutil.copy(HERE / "browser" / demo, root / demo)
    server: Server
    with jupyter_server(request.param, root, tmp_path) as server:
        yield server.url("view_demo.ipynb"), root


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
            run_all(page)
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
            run_all(page)
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
            # Under the answer: thumbs and a comment box (session.feedback); markup stays text.
            rating = page.locator(".agentnb-rating").last
            rating.locator("input").fill("<b>too slow</b>")
            rating.locator(".agentnb-thumb-down").click()
            expect(rating).to_contain_text("recorded as bad: <b>too slow</b>", timeout=STEP)
            screenshot(page.locator(".agentnb-view"), f"session_view-{request.node.callspec.id}")
        finally:
            browser.close()
    assert (root / "chat.sqlite").exists()


@pytest.mark.parametrize("lab", ["jupyterlab"], indirect=True)
def test_a_subagent_call_is_a_nested_card_in_the_browser(
    lab: tuple[str, Path], request: pytest.FixtureRequest
) -> None:
    """A sub-agent's card, its approval answered in the parent's view, its chat opened inside."""
    from playwright.sync_api import expect, sync_playwright

    url, root = lab
    url = url.replace("view_demo.ipynb", "subagent_demo.ipynb")
    dialogs: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 1400})
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            page.goto(url)
            run_all(page)
            expect(page.locator(".agentnb-view")).to_have_count(1, timeout=STEP)
            page.locator(".agentnb-input textarea").fill("Get pens for the office")
            page.locator("button.agentnb-submit").click()
            card = page.locator(".agentnb-subagent").first
            expect(card).to_contain_text("sub-agent buyer", timeout=STEP)
            expect(card).to_contain_text("Order three pens", timeout=STEP)  # its task
            pending = page.locator(".agentnb-pending")
            expect(pending).to_contain_text("from buyer", timeout=STEP)  # the child's request
            page.locator("button.agentnb-approve").click()
            transcript = page.locator(".agentnb-transcript").first
            expect(transcript).to_contain_text("The buyer ordered three pens.", timeout=STEP)
            expect(page.locator(".agentnb-tasks").first).to_contain_text("completed")
            expect(card).to_contain_text("Three pens are ordered.", timeout=STEP)  # its answer
            card.locator("button.agentnb-subagent-open").click()
            nested = card.locator(".agentnb-view")
            expect(nested).to_have_count(1, timeout=STEP)
            expect(nested.locator(".agentnb-transcript")).to_contain_text(
                "Checking the catalogue first.", timeout=STEP
            )
            expect(nested).to_contain_text("create_order \u00b7 success")
            assert dialogs == [], f"page script ran: {dialogs}"
            screenshot(
                page.locator(".agentnb-view").first, f"subagent_view-{request.node.callspec.id}"
            )
        finally:
            browser.close()
    assert (root / "subagents.sqlite").exists()
