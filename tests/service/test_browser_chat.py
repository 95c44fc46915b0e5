"""The chat page in a real browser (Debian's chromium through Playwright) against
``agentnb serve`` in a subprocess: sign in, submit, watch the reply stream, reload mid-stream
(the same items, none twice), approve a request, restart the server under the open page (it
says it reconnects, then goes on), and a hostile tool result that stays text.

Screenshots go to ``artifacts/chat-*.png``. Never downloads a browser: it uses
``/usr/bin/chromium`` and skips, saying so, only when that is absent.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.service.helpers import ServerProcess, issue

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
STEP = 30_000  # ms: a failure guard for each browser wait, never a timing assertion

pytestmark = pytest.mark.skipif(
    not os.path.exists(CHROMIUM),
    reason=f"no Debian chromium at {CHROMIUM} (apt-get install chromium; .ci/run does)",
)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, str]]:
    """The slow-streaming agent served on SQLite, and a token of alice's."""
    root = tmp_path_factory.mktemp("chat")
    url = f"sqlite:///{root / 'chat.sqlite'}"
    token = issue(url, "alice", "browser")
    with ServerProcess(url, agent="tests.service._agent:slow") as server:
        yield server, token


def shot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"chat-{name}.png"
    page.screenshot(path=str(path), full_page=True)
    print(f"screenshot: {path}")


def item_ids(page: Any) -> list[str]:
    ids: list[str] = page.eval_on_selector_all(
        "#items > .item", "els => els.map(e => e.dataset.id)"
    )
    return ids


def test_chat_page_streams_reloads_approves_and_survives_a_restart(
    served: tuple[ServerProcess, str],
) -> None:
    """One session in the page: stream, reload mid-stream, approve, restart, hostile text."""
    from playwright.sync_api import expect, sync_playwright

    server, token = served
    dialogs: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 950})
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            page.goto(server.url + "/")
            expect(page.locator("#sign-in")).to_be_visible(timeout=STEP)
            page.locator("#token").fill(token)
            page.locator("#sign-in-button").click()
            expect(page.locator("#app")).to_be_visible(timeout=STEP)
            expect(page.locator("#user")).to_contain_text("alice")

            page.locator("#new-session").click()
            expect(page.locator("#title")).not_to_have_text("No session open", timeout=STEP)
            items = page.locator("#items")

            # Submit; the reply streams in piece by piece.
            page.locator("#input").fill("long 60")
            page.locator("#submit").click()
            expect(items).to_contain_text("long 60", timeout=STEP)
            expect(items.locator(".item-assistant")).to_contain_text("line 3", timeout=STEP)
            partial = items.locator(".item-assistant").last.inner_text()
            assert "line 60" not in partial, "the reply did not stream"
            shot(page, "1-streaming")

            # Reload mid-stream: the snapshot, then the stream after its cursor.
            page.reload()
            expect(page.locator("#app")).to_be_visible(timeout=STEP)
            expect(items.locator(".item-assistant")).to_contain_text("line 60", timeout=STEP)
            expect(page.locator("#status")).to_have_text("idle", timeout=STEP)
            ids = item_ids(page)
            assert len(ids) == len(set(ids)), f"an item is shown twice: {ids}"
            text = items.locator(".item-assistant").last.inner_text()
            assert text.count("line 30 of the answer") == 1, "text was shown twice"
            assert "<strong>" not in text  # Markdown rendered, not shown as markup
            assert items.locator(".item-assistant strong").count() >= 60
            shot(page, "2-reloaded")

            # An approval: edit the arguments, approve; the tool runs with them.
            page.locator("#input").fill("order pen 2")
            page.locator("#submit").click()
            card = page.locator(".request-card")
            expect(card).to_be_visible(timeout=STEP)
            expect(page.locator("#status")).to_have_text("suspended", timeout=STEP)
            shot(page, "3-approval")
            card.locator("button.edit").click()
            card.locator("textarea.edit-args").fill('{"item": "pencil", "qty": 5}')
            card.locator("button.approve").click()
            expect(items).to_contain_text("done: ordered 5 pencil", timeout=STEP)
            expect(card).to_have_count(0)

            # The server restarts under the open page: it says so and goes on.
            before = item_ids(page)
            server.kill()
            expect(page.locator("#banner")).to_contain_text("reconnecting", timeout=STEP)
            shot(page, "4-reconnecting")
            server.start()
            expect(page.locator("#banner")).to_contain_text("Reconnected", timeout=STEP)
            assert item_ids(page) == before
            page.locator("#input").fill("hello after the restart")
            page.locator("#submit").click()
            expect(items).to_contain_text("You said: hello after the restart", timeout=STEP)
            ids = item_ids(page)
            assert len(ids) == len(set(ids))

            # Hostile markup in a tool result and in the reply stays text.
            page.locator("#input").fill("hostile")
            page.locator("#submit").click()
            tool = items.locator(".tool-card", has_text="hostile").last
            expect(tool).to_be_visible(timeout=STEP)
            expect(items).to_contain_text("done: <img src=x", timeout=STEP)
            tool.locator("summary").click()
            expect(tool.locator("pre.result")).to_contain_text("<script>window.__pwned=2</script>")
            assert page.evaluate("window.__pwned") is None
            assert items.locator("img").count() == 0
            assert items.locator("script").count() == 0
            assert dialogs == [], f"page script ran: {dialogs}"
            shot(page, "5-hostile")
        finally:
            browser.close()
