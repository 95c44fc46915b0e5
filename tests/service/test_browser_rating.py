"""The chat page's thumbs and comment box under an answer, in a real browser (Debian's
chromium through Playwright) against ``agentnb serve``: a thumbs down with a comment that
holds markup records feedback on the answer's turn, and the page shows the comment as text.

Screenshot: ``artifacts/chat-rating.png``. Skips, saying so, only without /usr/bin/chromium.
"""

from __future__ import annotations

import os

import pytest

import agentnb as nb
from tests.service.helpers import ServerProcess, issue
from tests.service.test_browser_chat import CHROMIUM, FLAGS, STEP, shot, sign_in

pytestmark = pytest.mark.skipif(
    not os.path.exists(CHROMIUM),
    reason=f"no Debian chromium at {CHROMIUM} (apt-get install chromium; .ci/run does)",
)

HOSTILE = '<img src=x onerror="window.pwned=1"> late'


def test_thumbs_down_with_a_comment(tmp_path) -> None:
    """Thumbs down and a comment under the reply: recorded as feedback, shown as text."""
    from playwright.sync_api import expect, sync_playwright

    url = f"sqlite:///{tmp_path / 'chat.sqlite'}"
    token = issue(url, "alice", "browser")
    with ServerProcess(url, agent="tests.service._agent:slow") as server, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 800})
            sign_in(page, server.url, token)
            page.locator("#input").fill("hello there")
            page.locator("#submit").click()
            reply = page.locator("#items .item-assistant").last
            expect(reply).to_contain_text("You said: hello there", timeout=STEP)
            bar = reply.locator(".rating")
            expect(bar).to_be_visible(timeout=STEP)
            bar.locator(".rating-comment").fill(HOSTILE)
            bar.locator(".thumb-down").click()
            expect(bar.locator(".rated")).to_contain_text("recorded as bad", timeout=STEP)
            expect(bar.locator(".rated")).to_contain_text("onerror", timeout=STEP)
            assert page.evaluate("window.pwned") is None
            assert bar.locator(".rated img").count() == 0
            shot(page, "rating")
        finally:
            browser.close()
    store = nb.open_store(url)
    try:
        [key] = [r.key for r in store.list_sessions()]
        added = [e for e in nb.SessionLog(store, key).scan() if e.type == "feedback/added"]
    finally:
        store.close()
    assert [(e.payload["score"], e.payload["comment"], e.payload["by"]) for e in added] == [
        (0.0, HOSTILE, "alice")
    ]
