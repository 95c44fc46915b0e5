"""The chat page in a real browser (Debian's chromium through Playwright) against
``agentnb serve`` in a subprocess: sign in, submit, watch the reply stream, reload mid-stream
(the same items, none twice), approve a request, restart the server under the open page (it
says it reconnects, then goes on), and a hostile tool result that stays text. Then child work:
a sub-agent's card with its live status, its approval answered in the parent's page, its own
chat opened inside the card, a plan card, and a question an MCP server asks (an elicitation,
an ``ask_user`` request) answered on the page.

Screenshots go to ``artifacts/chat-*.png``. Never downloads a browser: it uses
``/usr/bin/chromium`` and skips, saying so, only when that is absent.
"""

from __future__ import annotations

import os
import re
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


def sign_in(page: Any, url: str, token: str) -> None:
    from playwright.sync_api import expect

    page.goto(url + "/")
    expect(page.locator("#sign-in")).to_be_visible(timeout=STEP)
    page.locator("#token").fill(token)
    page.locator("#sign-in-button").click()
    expect(page.locator("#app")).to_be_visible(timeout=STEP)
    page.locator("#new-session").click()
    expect(page.locator("#title")).not_to_have_text("No session open", timeout=STEP)


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
            # Plain words: the notice names the task by its text, the header by the title
            # the session takes from its first task; no ids on screen.
            expect(page.locator("#notice")).to_contain_text("“long 60”")
            expect(page.locator("#notice")).not_to_contain_text("turn_")
            expect(page.locator("#title")).to_have_text("long 60", timeout=STEP)
            # The log position is on hover only (the status badge's title), never on screen.
            expect(page.locator("#status")).to_have_attribute("title", re.compile(r"event \d+"))
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
            expect(page.locator("#status")).to_have_text("waiting for you", timeout=STEP)
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


def test_sub_agent_card_approval_child_chat_plan_and_an_mcp_question(
    served: tuple[ServerProcess, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A coordinator's sub-agent needs approval: its card shows the child's live status, the
    approval is answered in the parent's page, the child's chat opens inside the card and
    streams on; a plan card; an MCP server's question answered on the page."""
    from playwright.sync_api import expect, sync_playwright

    server, token = served
    dialogs: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            sign_in(page, server.url, token)
            items = page.locator("#items")

            # The coordinator delegates; the child asks for approval of an order.
            page.locator("#input").fill("delegate order pen 2")
            page.locator("#submit").click()
            card = items.locator(".subagent-card")
            expect(card).to_be_visible(timeout=STEP)
            expect(card.locator("summary")).to_contain_text("service-helper")
            expect(card.locator(".child-status")).to_have_text("waiting for you", timeout=STEP)
            expect(card.locator(".child-live")).to_contain_text("1 step(s)")
            expect(card.locator(".task")).to_have_text("order pen 2")
            request = page.locator(".request-card.from-subagent")
            expect(request).to_contain_text("from sub-agent service-helper", timeout=STEP)
            expect(request).to_contain_text("create_order")
            expect(page.locator("#children")).to_contain_text("Sub-agents at work")
            expect(page.locator("#status")).to_have_text("waiting for you", timeout=STEP)
            # The answer continues the task: Resume waits until the child's request is answered.
            expect(page.locator("#resume")).to_be_disabled()
            row = page.locator(".session-row.current")
            expect(row).to_contain_text("delegate order pen 2", timeout=STEP)
            expect(row.locator(".small")).to_have_text(re.compile(r"\b1 task$"), timeout=STEP)
            expect(card).not_to_contain_text("call_")
            shot(page, "6-subagent-approval")

            # Its own chat, inside the card: the child's snapshot, then its stream.
            card.locator("button.child-open").click()
            nested = card.locator(".nested-items")
            expect(nested).to_contain_text("order pen 2", timeout=STEP)
            expect(nested.locator(".tool-card")).to_contain_text("create_order")
            shot(page, "7-child-chat")

            # Approved in the parent's page: the child goes on (its chat streams it), then
            # the parent; the open child chat survives the card's updates.
            request.locator("button.approve").click()
            expect(nested).to_contain_text("done: ordered 2 pen", timeout=STEP)
            expect(items).to_contain_text("done: done: ordered 2 pen", timeout=STEP)
            expect(page.locator(".request-card")).to_have_count(0)
            expect(card.locator(".answer")).to_have_text("done: ordered 2 pen")
            expect(card.locator(".nested-items")).to_be_visible()
            expect(page.locator("#status")).to_have_text("idle", timeout=STEP)
            shot(page, "8-subagent-done")
            card.locator("button.child-open").click()
            expect(card.locator(".nested-items")).to_have_count(0)

            # The model's plan (nb.todo) is a card of its steps.
            page.locator("#input").fill("plan gather <b>write</b>")
            page.locator("#submit").click()
            plan = items.locator(".plan-card").last
            expect(plan).to_be_visible(timeout=STEP)
            expect(plan.locator(".plan-step")).to_have_count(2)
            expect(plan).to_contain_text("<b>write</b>")  # as text
            expect(plan.locator(".plan-step .badge").first).to_have_text("to do")
            shot(page, "9-plan")
            assert dialogs == []

            # The API docs render from this server alone (no CDN): Swagger UI, its routes.
            asked: list[str] = []
            page.on("request", lambda r: asked.append(r.url))
            page.goto(server.url + "/docs")
            expect(page.locator(".swagger-ui .info .title")).to_contain_text(
                "agentnb", timeout=STEP
            )
            expect(page.locator(".opblock-summary-path").first).to_be_visible()
            paths = page.locator(".opblock-summary-path").all_inner_texts()
            assert any(p.replace("\u200b", "").endswith("/children") for p in paths), paths
            shot(page, "11-docs")
            assert all(u.startswith(server.url) for u in asked), asked
        finally:
            browser.close()

    # An MCP server's elicitation (an ask_user request) answered on the page.
    monkeypatch.setenv("MCP_TEST_DIR", str(tmp_path))
    url = f"sqlite:///{tmp_path / 'mcp.sqlite'}"
    mcp_token = issue(url, "alice", "browser")
    with (
        ServerProcess(url, agent="tests.service._mcp_agent:agent") as mcp_server,
        sync_playwright() as p,
    ):
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 800})
            sign_in(page, mcp_server.url, mcp_token)
            page.locator("#input").fill('book {"table": "7"}')
            page.locator("#submit").click()
            question = page.locator(".request-card")
            expect(question).to_contain_text("Book table 7?", timeout=STEP)
            expect(question.locator("button.decline")).to_be_visible()
            shot(page, "10-mcp-question")
            question.locator("textarea.answer-input").fill("yes")
            question.locator("button.answer").click()
            expect(page.locator("#items")).to_contain_text("result: booked table 7", timeout=STEP)
            expect(page.locator(".request-card")).to_have_count(0)
        finally:
            browser.close()
    assert (tmp_path / "effects.log").read_text().splitlines() == ["book 7"]


def test_reasoning_shows_as_a_closed_thinking_fold(served: tuple[ServerProcess, str]) -> None:
    """A reply's reasoning is a closed "Thinking" fold of escaped text above its answer."""
    from playwright.sync_api import expect, sync_playwright

    server, token = served
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 700})
            sign_in(page, server.url, token)
            page.locator("#input").fill("think")
            page.locator("#submit").click()
            reply = page.locator("#items .item-assistant").last
            expect(reply).to_contain_text("Thought it through.", timeout=STEP)
            fold = reply.locator("details.thinking")
            expect(fold).to_have_count(1)
            expect(fold.locator("summary")).to_have_text("Thinking (24 characters)")
            assert fold.get_attribute("open") is None  # closed until the reader opens it
            shot(page, "thinking-closed")
            fold.locator("summary").click()
            expect(fold.locator(".text")).to_have_text("Weigh <b>both</b> first.")
            assert fold.locator("b").count() == 0  # text, never markup
            shot(page, "thinking-open")
        finally:
            browser.close()
