"""The notebook user's first hour in a real browser: JupyterLab 4 and Notebook 7, Debian's
chromium, Playwright.

``view_demo.ipynb``: the first Submit's notice names the task; the view never scrolls
sideways at 1,400 and 800 px wide; disabled Interrupt, Steer and Resume look disabled; a
double click on Approve sends one answer and says so. ``recovery_demo.ipynb``: a task whose
tool blocks, the kernel restarted under it, the cell run again, and the recovery clicked
through ("It did not run") to a completed queue. ``notebooks/01-quickstart.ipynb``: Run All
leaves a live view with an approval waiting, and clicking Approve completes it. Screenshots
go under ``artifacts/`` (``first-hour-*.png``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import agentnb
from tests.widgets.jupyter import CHROMIUM, FLAGS, STEP, Server, jupyter_server, run_all, screenshot

HERE = Path(__file__).parent
REPO = Path(agentnb.__file__).resolve().parent.parent
RUN_ALL = 180_000  # ms: a failure guard for a whole notebook, never a timing assertion

pytestmark = pytest.mark.skipif(
    not os.path.exists(CHROMIUM),
    reason=f"no Debian chromium at {CHROMIUM} (apt-get install chromium; .ci/run does)",
)


@pytest.fixture(params=["jupyterlab", "notebook"])
def lab(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Server]:
    """JupyterLab 4 or Notebook 7 on loopback, serving the demo notebooks and tutorial 01."""
    root = tmp_path / "root"
    root.mkdir()
    for demo in ("view_demo.ipynb", "recovery_demo.ipynb"):
        shutil.copy(HERE / "browser" / demo, root / demo)
    shutil.copy(REPO / "notebooks" / "01-quickstart.ipynb", root / "01-quickstart.ipynb")
    with jupyter_server(request.param, root, tmp_path) as server:
        yield server


@pytest.fixture
def page(lab: Server) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        try:
            opened = browser.new_page(viewport={"width": 1400, "height": 1000})
            dialogs: list[str] = []
            opened.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            yield opened
            assert dialogs == [], f"page script ran: {dialogs}"
        finally:
            browser.close()


# Overflow: the view (and the output area around it) wider inside than its box.
_OVERFLOW = """(view) => {
    const area = view.closest('.jp-OutputArea-output') || view.parentElement;
    return {view: view.scrollWidth - view.clientWidth, area: area.scrollWidth - area.clientWidth};
}"""

_LOOK = """(button) => {
    const style = getComputedStyle(button);
    return {opacity: parseFloat(style.opacity), filter: style.filter, cursor: style.cursor};
}"""


def _restart_kernel(page: Any, app: str) -> None:
    """Restart the kernel of the open notebook (as the toolbar's restart button does)."""
    page.evaluate("window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.restart()")


def _name(lab: Server, request: pytest.FixtureRequest) -> str:
    return str(request.node.callspec.id)


class TestTheViewInABrowser:
    def test_first_submit_scrollbar_and_disabled_controls(
        self, lab: Server, page: Any, request: pytest.FixtureRequest
    ) -> None:
        """The first Submit names the task; no sideways scroll at 1,400 and 800 px; disabled
        controls look disabled (faint, grey), enabled ones do not."""
        from playwright.sync_api import expect

        page.goto(lab.url("view_demo.ipynb"))
        run_all(page)
        view = page.locator(".agentnb-view")
        expect(view).to_have_count(1, timeout=STEP)
        for width in (1400, 800):
            page.set_viewport_size({"width": width, "height": 1000})
            page.wait_for_timeout(300)  # the layout settles (a guard, never an assertion)
            overflow = view.evaluate(_OVERFLOW)
            assert overflow == {"view": 0, "area": 0}, (width, overflow)
            screenshot(view, f"first-hour-idle-{width}-{_name(lab, request)}")
        page.set_viewport_size({"width": 1400, "height": 1000})
        interrupt = page.locator("button.agentnb-interrupt")
        submit = page.locator("button.agentnb-submit")
        expect(interrupt).to_be_disabled()
        disabled, enabled = interrupt.evaluate(_LOOK), submit.evaluate(_LOOK)
        assert disabled["opacity"] <= 0.5, disabled
        assert "grayscale" in disabled["filter"], disabled
        assert enabled["opacity"] == 1, enabled
        assert "grayscale" not in enabled["filter"], enabled
        assert page.locator("button.agentnb-resume").evaluate(_LOOK) == disabled

        page.locator(".agentnb-input textarea").fill("Order two desks")
        submit.click()
        notice = page.locator(".agentnb-notice")
        expect(notice).to_contain_text("You submitted \u201cOrder two desks\u201d.", timeout=STEP)
        assert "the task" not in notice.inner_text()
        approve = page.locator("button.agentnb-approve")
        expect(approve).to_be_visible(timeout=STEP)
        expect(page.locator(".agentnb-status")).to_contain_text(
            "waiting for your approval below", timeout=STEP
        )
        overflow = view.evaluate(_OVERFLOW)
        assert overflow == {"view": 0, "area": 0}, overflow
        screenshot(view, f"first-hour-approval-{_name(lab, request)}")
        approve.dblclick()
        expect(page.locator(".agentnb-tasks")).to_contain_text("completed", timeout=STEP)
        said = notice.inner_text() + page.locator(".agentnb-error").inner_text()
        assert "You approved create_order" in said or "already answered" in said.lower(), said
        transcript = page.locator(".agentnb-transcript")
        assert transcript.inner_text().count("ordered 2 x desk") <= 1
        screenshot(view, f"first-hour-done-{_name(lab, request)}")

    def test_recovery_after_a_kernel_restart_is_clicked_through(
        self, lab: Server, page: Any, request: pytest.FixtureRequest
    ) -> None:
        """Kernel restarted mid-tool, cell run again: the view offers the ways out; "It did
        not run" completes the task and the queue."""
        from playwright.sync_api import expect

        page.goto(lab.url("recovery_demo.ipynb"))
        run_all(page)
        expect(page.locator(".agentnb-view")).to_have_count(1, timeout=STEP)
        page.locator(".agentnb-input textarea").fill("Look into rust")
        page.locator("button.agentnb-submit").click()
        expect(page.locator(".agentnb-transcript")).to_contain_text(
            "research \u00b7 running", timeout=STEP
        )
        _restart_kernel(page, lab.app)
        run_all(page)
        view = page.locator(".agentnb-view")
        expect(view).to_have_count(1, timeout=STEP)
        card = page.locator(".agentnb-uncertain-call")
        expect(card).to_have_count(1, timeout=60_000)  # once the dead kernel's lease lapsed
        expect(card).to_contain_text("research(topic='rust')")
        status = page.locator(".agentnb-status")
        expect(status).to_contain_text("while research ran")
        expect(page.locator(".agentnb-tasks")).to_contain_text("while research ran")
        for word in ("record what happened from code", "resume()", "turn_", "call_"):
            assert word not in view.inner_text(), view.inner_text()
        view.scroll_into_view_if_needed()
        screenshot(view, f"first-hour-recovery-{_name(lab, request)}")
        page.locator("button.agentnb-not-run").click()
        expect(page.locator(".agentnb-transcript")).to_contain_text("Rust is fast.", timeout=STEP)
        expect(page.locator(".agentnb-tasks")).to_contain_text("completed", timeout=STEP)
        expect(card).to_have_count(0, timeout=STEP)
        assert page.locator(".agentnb-error").inner_text() == ""
        screenshot(view, f"first-hour-recovered-{_name(lab, request)}")

    @pytest.mark.parametrize("lab", ["jupyterlab"], indirect=True)
    def test_tutorial_01_ends_waiting_for_a_click_on_approve(
        self, lab: Server, page: Any, request: pytest.FixtureRequest
    ) -> None:
        """After Run All, 01's last view waits for an approval; clicking Approve completes it."""
        from playwright.sync_api import expect

        page.goto(lab.url("01-quickstart.ipynb"))
        run_all(page)
        live = page.locator(".agentnb-view").last
        approve = live.locator("button.agentnb-approve")
        expect(approve).to_be_visible(timeout=RUN_ALL)
        expect(page.locator(".jp-Notebook")).to_contain_text("click Approve")
        live.scroll_into_view_if_needed()
        screenshot(live, f"first-hour-tutorial-waiting-{_name(lab, request)}")
        approve.click()
        expect(live.locator(".agentnb-transcript")).to_contain_text(
            "Done: one basic seat is ordered.", timeout=STEP
        )
        expect(live.locator(".agentnb-tasks")).not_to_contain_text("suspended", timeout=STEP)
        screenshot(live, f"first-hour-tutorial-approved-{_name(lab, request)}")
