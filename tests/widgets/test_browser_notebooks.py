"""The tutorial notebooks as a reader sees them: JupyterLab 4, Debian's chromium, no internet.

One JupyterLab serves copies of ``notebooks/01-quickstart.ipynb`` and
``notebooks/04-analytics.ipynb``; each is opened and run with Run All, the way a new user
does, while the browser refuses every request that leaves the machine (and records it).
Then what is on the page is checked as text and as layout, and screenshots go under
``artifacts/`` (``notebook01-*.png``, ``notebook04-*.png``) to be looked at.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.widgets.jupyter import CHROMIUM, FLAGS, STEP, Server, jupyter_server, run_all, screenshot

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
RUN_ALL = 180_000  # ms: a failure guard for a whole notebook, never a timing assertion

pytestmark = pytest.mark.skipif(
    not os.path.exists(CHROMIUM),
    reason=f"no Debian chromium at {CHROMIUM} (apt-get install chromium; .ci/run does)",
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One JupyterLab for the module, serving copies of the tutorials."""
    scratch = tmp_path_factory.mktemp("lab")
    root = scratch / "root"
    root.mkdir()
    for name in ("01-quickstart.ipynb", "04-analytics.ipynb"):
        shutil.copy(REPO / "notebooks" / name, root / name)
    shutil.copy(HERE / "browser" / "reprs.ipynb", root / "reprs.ipynb")
    with jupyter_server("jupyterlab", root, scratch) as running:
        yield running


class Offline:
    """A page whose requests beyond this machine are refused, and listed in ``refused``."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.refused: list[str] = []
        page.route("**/*", self._route)

    def _route(self, route: Any) -> None:
        url = route.request.url
        if url.startswith(("http://127.0.0.1", "ws://127.0.0.1", "data:", "blob:")):
            route.continue_()
        else:
            self.refused.append(url)
            route.abort()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's chromium, headless, for the module."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        try:
            yield launched
        finally:
            launched.close()


def _run_notebook(browser: Any, server: Server, name: str) -> Offline:
    """Open ``name`` in JupyterLab offline, Run All, and wait until its last cell has run
    without an error."""
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    offline = Offline(page)
    page.goto(server.url(name))
    run_all(page)
    page.wait_for_function(
        """() => {
            const cells = [...document.querySelectorAll('.jp-Notebook .jp-CodeCell')];
            const prompt = cells.length && cells[cells.length - 1].querySelector('.jp-InputPrompt');
            return !!prompt && /\\[\\d+\\]/.test(prompt.textContent);
        }""",
        timeout=RUN_ALL,
    )
    errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.error']")
    assert errors.count() == 0, errors.all_inner_texts()
    return offline


@pytest.fixture(scope="module")
def quickstart(browser: Any, server: Server) -> Offline:
    """01-quickstart.ipynb after Run All."""
    return _run_notebook(browser, server, "01-quickstart.ipynb")


@pytest.fixture(scope="module")
def records(browser: Any, server: Server) -> Offline:
    """browser/reprs.ipynb after Run All: each record of a session with $ prices."""
    return _run_notebook(browser, server, "reprs.ipynb")


@pytest.fixture(scope="module")
def analytics(browser: Any, server: Server) -> Offline:
    """04-analytics.ipynb after Run All."""
    return _run_notebook(browser, server, "04-analytics.ipynb")


def _output_of(page: Any, source: str) -> Any:
    """The output area of the code cell whose source contains ``source``."""
    cell = page.locator(".jp-Notebook .jp-CodeCell").filter(
        has=page.locator(".jp-InputArea", has_text=source)
    )
    return cell.locator(".jp-OutputArea").first


class TestQuickstart:
    def test_run_all_leaves_the_live_view_showing_the_conversation(
        self, quickstart: Offline
    ) -> None:
        """After Run All the live view shows the whole conversation, not an empty output."""
        from playwright.sync_api import expect

        page = quickstart.page
        # The first view (closed with the runtime) and the live one the tutorial ends with.
        expect(page.locator(".agentnb-view")).to_have_count(2, timeout=STEP)
        view = page.locator(".agentnb-view").first
        expect(view).to_be_visible()
        expect(view.locator(".agentnb-transcript")).to_contain_text(
            "Done: two pro seats are ordered.", timeout=STEP
        )
        expect(view.locator(".agentnb-tasks")).to_contain_text("completed")
        view.scroll_into_view_if_needed()
        screenshot(view, "notebook01-view")

    def test_tables_keep_words_whole_and_times_unclipped(self, quickstart: Offline) -> None:
        """In the task table no word breaks across lines, times fit, ids are short."""
        tasks = _output_of(quickstart.page, "show(session.tasks())")
        screenshot(tasks, "notebook01-tasks")
        _assert_reads(tasks)


_NAMES = {
    "outcome": "outcome",
    "show(session.tasks())": "tasks",
    "show(session.pending())": "pending",
    "session.transcript()": "transcript",
}


class TestRecords:
    @pytest.mark.parametrize(
        "cell",
        ["outcome", "show(session.tasks())", "show(session.pending())", "session.transcript()"],
    )
    def test_dollar_amounts_stay_text(self, records: Offline, cell: str) -> None:
        """$5 ... $10 in a record's table is shown as written, never typeset as math."""
        output = _output_of(records.page, cell)
        text = output.inner_text()
        assert "$5" in text, text
        assert "$10" in text, text
        assert output.locator("mjx-container, .MathJax").count() == 0
        screenshot(output, f"records-{_NAMES[cell]}")

    @pytest.mark.parametrize(
        "cell",
        ["outcome", "show(session.tasks())", "show(session.pending())", "session.transcript()"],
    )
    def test_tables_read(self, records: Offline, cell: str) -> None:
        """No word breaks mid-word, no cell clips its text, ids are shortened."""
        _assert_reads(_output_of(records.page, cell))

    def test_markdown_in_the_transcript_is_rendered_as_in_the_view(self, records: Offline) -> None:
        """**Basic** is bold and `basic` is code in transcript(), as in the chat view."""
        output = _output_of(records.page, "session.transcript()")
        assert output.locator("strong", has_text="Basic").count() == 1
        assert output.locator("code", has_text="basic").count() >= 1
        assert "**Basic**" not in output.inner_text()

    def test_a_receipt_is_a_sentence_not_a_raw_repr(self, records: Offline) -> None:
        """inject()'s receipt shows in words, not as InputReceipt(...)."""
        output = _output_of(records.page, "session.inject(PRICES)")
        text = output.inner_text()
        assert "InputReceipt(" not in text
        assert "material" in text.lower()
        screenshot(output, "records-receipt")

    def test_the_view_speaks_in_the_users_words(self, records: Offline) -> None:
        """The live view's status names the task and the approval it waits for, no ids."""
        from playwright.sync_api import expect

        view = records.page.locator(".agentnb-view")
        expect(view).to_have_count(1, timeout=STEP)
        status = view.locator(".agentnb-status")
        expect(status).to_contain_text("approval", timeout=STEP)
        text = status.inner_text()
        for word in ("seq", "turn_", "call_", "session.", "respond(", "idle"):
            assert word not in text, text
        assert "Order two basic seats." in text
        assert "$5" in view.inner_text()
        assert view.locator("mjx-container").count() == 0
        view.scroll_into_view_if_needed()
        screenshot(view, "records-view")


class TestAnalytics:
    def test_the_interactive_timeline_renders_offline(self, analytics: Offline) -> None:
        """timeline_chart draws its bars with no request beyond this machine."""
        from playwright.sync_api import expect

        page = analytics.page
        chart = _output_of(page, "analysis.timeline_chart(root)")
        canvas = chart.locator(".vega-embed canvas, .vega-embed svg.marks")
        expect(canvas.first).to_be_visible(timeout=STEP)
        chart.scroll_into_view_if_needed()
        screenshot(chart, "notebook04-timeline-chart")
        assert analytics.refused == [], analytics.refused
        # Hovering the first run of the first turn shows its tooltip (turn, status, seconds).
        box = canvas.first.bounding_box()
        assert box is not None
        tooltip = page.locator("#vg-tooltip-element")
        for dx in range(0, 200, 8):  # along the first row until the pointer meets a bar
            page.mouse.move(box["x"] + 200 + dx, box["y"] + 26)
            if tooltip.is_visible() and "Compare basic and pro." in tooltip.inner_text():
                break
        expect(tooltip).to_contain_text("Compare basic and pro.", timeout=STEP)
        expect(tooltip).to_contain_text("seconds")

    def test_the_static_charts_are_drawn(self, analytics: Offline) -> None:
        """The matplotlib timeline and the three small charts are images on the page."""
        page = analytics.page
        timeline = _output_of(page, "fig = analysis.timeline(root)")
        screenshot(timeline, "notebook04-timeline")
        bars = _output_of(page, "fig, (left, middle, right)")
        screenshot(bars, "notebook04-aggregates")
        assert timeline.locator("img").count() == 1
        assert bars.locator("img").count() == 1


def _assert_reads(output: Any) -> None:
    report = output.evaluate(_LAYOUT_JS)
    assert report["broken_words"] == [], report
    assert report["clipped"] == [], report
    assert report["long_ids"] == [], report


# Each text cell of a table: a word split over two lines shows as a line box that starts
# inside a word; a clipped cell is wider inside than outside; an id longer than 16
# characters is shown whole.
_LAYOUT_JS = """(area) => {
    const report = {broken_words: [], clipped: [], long_ids: []};
    for (const cell of area.querySelectorAll('td')) {
        if (cell.scrollWidth > cell.clientWidth + 1) report.clipped.push(cell.innerText);
        for (const code of cell.querySelectorAll('code')) {
            if (/^[a-z]+_[0-9a-f]{16,}$/.test(code.innerText)) report.long_ids.push(code.innerText);
        }
        const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
        for (let node = walker.nextNode(); node; node = walker.nextNode()) {
            const text = node.textContent;
            const range = document.createRange();
            let top = null;
            for (let i = 0; i < text.length; i++) {
                range.setStart(node, i); range.setEnd(node, i + 1);
                const box = range.getBoundingClientRect();
                if (box.width === 0) continue;
                const inWord = i > 0 && /\\w/.test(text[i - 1]) && /\\w/.test(text[i]);
                if (top !== null && box.top > top + 2 && inWord) {
                    report.broken_words.push(text);
                    break;
                }
                top = box.top;
            }
        }
    }
    return report;
}"""
