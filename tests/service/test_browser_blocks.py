"""The chat page shows a rich result's images as thumbnails, in a real browser (Debian's
chromium through Playwright) against ``agentnb serve``: the large image loads from the
session's blocks route (the sign-in cookie), the small one from its inline bytes, and both
decode to their real size; the JSON block shows as text.

Screenshot: ``artifacts/chat-blocks.png``. Skips, saying so, only without /usr/bin/chromium.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.service.helpers import ServerProcess, issue
from tests.service.test_browser_chat import CHROMIUM, FLAGS, STEP, shot, sign_in

pytestmark = pytest.mark.skipif(
    not os.path.exists(CHROMIUM),
    reason=f"no Debian chromium at {CHROMIUM} (apt-get install chromium; .ci/run does)",
)


def test_a_tools_images_show_as_thumbnails(tmp_path: Path) -> None:
    """The chart's card shows both images (decoded, thumbnail-sized) and its JSON."""
    from playwright.sync_api import expect, sync_playwright

    url = f"sqlite:///{tmp_path / 'chat.sqlite'}"
    token = issue(url, "alice", "browser")
    with (
        ServerProcess(url, agent="tests.blocks_helpers:agent") as server,
        sync_playwright() as p,
    ):
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 800})
            sign_in(page, server.url, token)
            page.locator("#input").fill("chart")
            page.locator("#submit").click()
            card = page.locator("#items .tool-card").last
            expect(card).to_be_visible(timeout=STEP)
            expect(page.locator("#items")).to_contain_text("done: The cost chart:", timeout=STEP)
            # The thumbnails on the card's line show while it is folded.
            small = card.locator("summary img.thumb-small")
            expect(small).to_have_count(2, timeout=STEP)
            card.locator("summary").click()
            thumbs = card.locator(".result-blocks img.thumb")
            expect(thumbs).to_have_count(2, timeout=STEP)
            expect(card.locator(".result-blocks")).to_contain_text('"plan_a": 12000')
            page.wait_for_function(
                "() => [...document.querySelectorAll('.result-blocks img.thumb')]"
                ".every(i => i.complete && i.naturalWidth > 0)",
                timeout=STEP,
            )
            sizes = thumbs.evaluate_all(
                "els => els.map(e => [e.naturalWidth, e.naturalHeight, e.src.slice(0, 5)])"
            )
            assert sizes == [[120, 80, "http:"], [48, 32, "data:"]]
            width = thumbs.first.evaluate("e => e.getBoundingClientRect().width")
            assert 0 < width <= 240
            card.scroll_into_view_if_needed()
            shot(page, "blocks")
        finally:
            browser.close()
