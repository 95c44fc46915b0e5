"""The chat page as a new user meets it, in a real browser (Debian's chromium through
Playwright) against ``agentnb serve`` in a subprocess: Submit with no session open, a phone-
sized window, words for a person instead of a developer's advice, one vocabulary with ids on
hover, notices that go, a revoked token that keeps the message being typed, material handed
over shown in the chat, an interrupted answer folded once the resumed run answers, where
committed and live text meet, and the favicon.

Screenshots go to ``artifacts/first-*.png``. Never downloads a browser: it uses
``/usr/bin/chromium`` and skips, saying so, only when that is absent.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import agentnb as nb
from agentnb import tokens
from tests.service.helpers import ServerProcess, issue

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(nb.__file__).resolve().parent.parent / "artifacts"
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
RAW_ID = re.compile(r"\b(?:cmd|turn|run|req|call|msg|mc)_[0-9a-z]{6,}")

pytestmark = pytest.mark.skipif(
    not os.path.exists(CHROMIUM),
    reason=f"no Debian chromium at {CHROMIUM} (apt-get install chromium; .ci/run does)",
)


class Served:
    """The slow-streaming agent served on SQLite, and the store the test reaches into."""

    def __init__(self, server: ServerProcess, url: str) -> None:
        self.server = server
        self.store_url = url

    def token(self, user: str = "alice") -> str:
        return issue(self.store_url, user, "browser")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("first")
    url = f"sqlite:///{root / 'first.sqlite'}"
    # A session of alice's bound to an older version of the served agent, made before the
    # server starts (a serving runtime would claim its task, and refuse it).
    older = nb.Agent(
        name="Service test",
        agent_id="service-agent",
        model=nb.ScriptedModel(["An older answer."]),
        instructions="An older version of the instructions.",
    )
    with nb.Runtime(older, store=url) as runtime:
        runtime.session("older", user_id="alice").run("from before", timeout=30)
    with ServerProcess(url, agent="tests.service._agent:slow") as server:
        yield Served(server, url)


@pytest.fixture
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        try:
            yield chromium
        finally:
            chromium.close()


def shot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"first-{name}.png"
    page.screenshot(path=str(path), full_page=False)
    print(f"screenshot: {path}")


def sign_in(page: Any, url: str, token: str, *, new_session: bool = True) -> None:
    from playwright.sync_api import expect

    page.goto(url + "/")
    expect(page.locator("#sign-in")).to_be_visible(timeout=STEP)
    page.locator("#token").fill(token)
    page.locator("#sign-in-button").click()
    expect(page.locator("#app")).to_be_visible(timeout=STEP)
    if new_session:
        page.locator("#new-session").click()
        expect(page.locator("#title")).not_to_have_text("No session open", timeout=STEP)


class TestNoSessionOpen:
    def test_submit_with_no_session_open_starts_one(self, served: Served, browser: Any) -> None:
        """Signed in with no session open, the composer says Submit starts one, and it does."""
        from playwright.sync_api import expect

        page = browser.new_page(viewport={"width": 1300, "height": 850})
        sign_in(page, served.server.url, served.token(), new_session=False)
        expect(page.locator("#composer-note")).to_contain_text("Submit starts a new one")
        expect(page.locator("#inject")).to_be_disabled()
        shot(page, "1-no-session")
        page.locator("#input").fill("hello there")
        page.locator("#submit").click()
        expect(page.locator("#items")).to_contain_text("You said: hello there", timeout=STEP)
        expect(page.locator("#title")).to_have_text("hello there", timeout=STEP)
        expect(page.locator("#error")).to_have_text("")
        expect(page.locator("#composer-note")).to_have_text("")


class TestNarrowWindow:
    def test_a_420_px_window_shows_the_chat_and_opens_the_panes(
        self, served: Served, browser: Any
    ) -> None:
        """At 420 px the chat fills the width with no horizontal scrollbar; the session list
        and the task panel open from the header, one at a time."""
        from playwright.sync_api import expect

        page = browser.new_page(viewport={"width": 420, "height": 800})
        sign_in(page, served.server.url, served.token(), new_session=False)
        page.locator("#input").fill("order pen 2")
        page.locator("#submit").click()
        expect(page.locator(".request-card")).to_be_visible(timeout=STEP)
        chat = page.locator("main.chat").bounding_box()
        assert chat is not None
        assert chat["width"] >= 400, chat
        assert page.evaluate("document.documentElement.scrollWidth") <= 420
        expect(page.locator("#sidebar")).to_be_hidden()
        expect(page.locator("#panel")).to_be_hidden()
        expect(page.locator("#submit")).to_be_in_viewport()
        shot(page, "2-narrow-chat")
        page.locator("#show-tasks").click()
        expect(page.locator("#panel")).to_be_visible()
        expect(page.locator("#tasks")).to_contain_text("order pen 2")
        shot(page, "3-narrow-tasks")
        page.locator("#show-sessions").click()
        expect(page.locator("#panel")).to_be_hidden()
        expect(page.locator("#sidebar")).to_be_visible()
        shot(page, "4-narrow-sessions")
        page.locator(".session-row.current").click()
        expect(page.locator("#sidebar")).to_be_hidden()
        page.locator(".request-card button.approve").click()
        expect(page.locator("#items")).to_contain_text("done: ordered 2 pen", timeout=STEP)


class TestWordsForAPerson:
    def test_an_unknown_session_gets_words_not_python(self, served: Served, browser: Any) -> None:
        """A link to a session that does not exist: plain words on the page, the problem's
        developer text on hover only, and the composer offers a new session."""
        from playwright.sync_api import expect

        page = browser.new_page(viewport={"width": 1300, "height": 850})
        sign_in(page, served.server.url, served.token(), new_session=False)
        page.goto(served.server.url + "/#s=no-such-session")
        page.reload()
        error = page.locator("#error")
        expect(error).to_contain_text("does not exist, or it is not yours", timeout=STEP)
        expect(error).not_to_contain_text("runtime.session")
        assert "SessionNotFound" in (error.get_attribute("title") or "")
        expect(page.locator("#composer-note")).to_contain_text("Submit starts a new one")
        shot(page, "5-unknown-session")

    def test_a_session_of_another_agent_version_says_so_before_typing(
        self, served: Served, browser: Any
    ) -> None:
        """A session bound to another version of the agent (the fixture's "older"): the
        composer names agentnb serve --accept-agent-change as soon as it opens."""
        from playwright.sync_api import expect

        page = browser.new_page(viewport={"width": 1300, "height": 850})
        sign_in(page, served.server.url, served.token(), new_session=False)
        page.locator(".session-row[data-id='older']").click()
        note = page.locator("#composer-note")
        expect(note).to_contain_text("agentnb serve --accept-agent-change", timeout=STEP)
        expect(note).to_contain_text("instructions changed")
        expect(note).not_to_contain_text("accept_agent_change=True")
        shot(page, "6-agent-changed")

    def test_one_vocabulary_ids_on_hover_and_notices_that_go(
        self, served: Served, browser: Any
    ) -> None:
        """A task waiting for approval, with one queued behind it: one word for the state
        everywhere, tasks named by their text, no ids on screen, and the notice goes."""
        from playwright.sync_api import expect

        page = browser.new_page(viewport={"width": 1300, "height": 900})
        sign_in(page, served.server.url, served.token())
        page.locator("#input").fill("order pen 2")
        page.locator("#submit").click()
        expect(page.locator(".request-card")).to_be_visible(timeout=STEP)
        expect(page.locator("#status")).to_have_text("waiting for you", timeout=STEP)
        page.locator("#input").fill("hello after it")
        page.locator("#submit").click()
        parked = page.locator("#parked")
        expect(parked).to_have_text(
            "1 queued task waits for “order pen 2”, which is waiting for you: answer it "
            "above, or cancel it.",
            timeout=STEP,
        )
        expect(page.locator("#notice")).to_contain_text("waits its turn in the queue")
        card = page.locator(".tool-card").last
        expect(card.locator(".section", has_text="approval")).to_have_text(
            "approval: waiting for you"
        )
        row = page.locator(".session-row.current")
        expect(row.locator(".small")).to_have_text(re.compile(r"\b1 task$"), timeout=STEP)
        shot(page, "7-vocabulary")
        seen = page.locator("#app").inner_text()
        for word in ("suspended", "parked", "pending", "turn(s)", "task(s)", "event "):
            assert word not in seen, word
        assert not RAW_ID.search(seen), RAW_ID.search(seen)
        assert (page.locator("#tasks li").first.get_attribute("title") or "").startswith("turn_")
        expect(page.locator("#notice")).to_be_hidden(timeout=STEP)
        page.locator(".request-card button.approve").click()
        expect(page.locator("#items")).to_contain_text("You said: hello after it", timeout=STEP)


class TestRevokedToken:
    def test_a_revoked_token_says_why_and_keeps_the_message(
        self, served: Served, browser: Any
    ) -> None:
        """The token is revoked under the open page: Submit lands on the sign-in form, which
        says why; signed in again, the message typed is still there and goes out."""
        from playwright.sync_api import expect

        token = served.token()
        page = browser.new_page(viewport={"width": 1300, "height": 850})
        sign_in(page, served.server.url, token)
        page.locator("#input").fill("words I do not want to type again")
        store = nb.open_store(served.store_url)
        try:
            tokens.revoke(store, token.split(".")[0])
        finally:
            store.close()
        page.locator("#submit").click()
        expect(page.locator("#sign-in")).to_be_visible(timeout=STEP)
        expect(page.locator("#sign-in-error")).to_contain_text("You are signed out")
        expect(page.locator("#sign-in-error")).to_contain_text("revoked")
        shot(page, "8-revoked")
        page.locator("#token").fill(served.token())
        page.locator("#sign-in-button").click()
        expect(page.locator("#app")).to_be_visible(timeout=STEP)
        expect(page.locator("#input")).to_have_value("words I do not want to type again")
        page.locator("#submit").click()
        expect(page.locator("#items")).to_contain_text(
            "You said: words I do not want to type again", timeout=STEP
        )

    def test_an_idle_page_whose_token_is_revoked_signs_out_saying_why(
        self, served: Served, browser: Any
    ) -> None:
        """Nobody clicks: the stream's recheck ends it, and the page shows the sign-in form
        with the reason, the typed message kept."""
        from playwright.sync_api import expect

        token = served.token()
        page = browser.new_page(viewport={"width": 1300, "height": 850})
        sign_in(page, served.server.url, token)
        page.locator("#input").fill("half a thought")
        store = nb.open_store(served.store_url)
        try:
            tokens.revoke(store, token.split(".")[0])
        finally:
            store.close()
        # The stream rechecks its token at each keepalive (15 s): a guard, not a speed check.
        expect(page.locator("#sign-in-error")).to_contain_text("revoked", timeout=3 * STEP)
        page.locator("#token").fill(served.token())
        page.locator("#sign-in-button").click()
        expect(page.locator("#input")).to_have_value("half a thought", timeout=STEP)


class TestChatItems:
    def test_material_handed_to_an_idle_session_shows_in_the_chat(
        self, served: Served, browser: Any
    ) -> None:
        """Inject on an idle session: the material is a chat item at once, and after the next
        task's step reads it, it is the material message (shown once)."""
        from playwright.sync_api import expect

        page = browser.new_page(viewport={"width": 1300, "height": 850})
        sign_in(page, served.server.url, served.token())
        page.locator("#input").fill("the price list: pro is $10")
        page.locator("#inject").click()
        material = page.locator("#items .item-material")
        expect(material).to_contain_text("the price list: pro is $10", timeout=STEP)
        expect(material).to_contain_text("read at the next step")
        shot(page, "9-material")
        page.locator("#input").fill("what does pro cost")
        page.locator("#submit").click()
        expect(page.locator("#items")).to_contain_text("You said: what does pro cost", timeout=STEP)
        expect(material).to_have_count(1)
        expect(material).not_to_contain_text("read at the next step")

    def test_an_interrupted_answer_folds_once_the_resumed_run_answers(
        self, served: Served, browser: Any
    ) -> None:
        """Interrupted mid-stream and resumed: the cut-off answer folds to one line, so the
        opening text shows once; a click shows it again."""
        from playwright.sync_api import expect

        page = browser.new_page(viewport={"width": 1300, "height": 950})
        sign_in(page, served.server.url, served.token())
        items = page.locator("#items")
        page.locator("#input").fill("long 80")
        page.locator("#submit").click()
        expect(items.locator(".item-assistant")).to_contain_text("line 3", timeout=STEP)
        page.locator("#interrupt").click()
        expect(page.locator("#status")).to_have_text("interrupted", timeout=STEP)
        expect(page.locator("#resume")).to_be_enabled(timeout=STEP)
        page.locator("#resume").click()
        expect(items.locator(".item-assistant").last).to_contain_text("line 80", timeout=STEP)
        expect(page.locator("#status")).to_have_text("idle", timeout=STEP)
        old = items.locator(".item-assistant.superseded")
        expect(old).to_have_count(1)
        expect(old.locator(".superseded-note")).to_be_visible()
        assert items.inner_text().count("line 1 of the answer") == 1
        shot(page, "10-superseded")
        old.locator(".superseded-note").click()
        expect(old.locator(".md")).to_be_visible()

    def test_committed_and_live_text_meet_with_their_space(self, browser: Any) -> None:
        """A drafted reply whose committed part ends in a space, then live text: the page
        shows "costs. Here", not "costs.Here" (the service is played by page.route)."""
        from playwright.sync_api import expect

        item = {
            "id": "mc_1",
            "kind": "message",
            "role": "assistant",
            "turn_id": "turn_1",
            "run_id": "run_1",
            "seq": 3,
            "status": "streaming",
            "text": "Pro costs $10 costs. ",
            "html": "<p>Pro costs $10 costs.</p>",
            "model_call_id": "mc_1",
            "tool_call_ids": [],
        }
        answers = {
            "/v1/auth/me": {"user_id": "alice", "csrf": "x", "auth": "sign-in"},
            "/v1/agent": {"name": "Played"},
            "/v1/sessions?limit=100": {"sessions": []},
            "/v1/sessions/s1?html=true&messages=false": {
                "session_id": "s1",
                "cursor": "s1:3",
                "seq": 3,
                "status": "running",
                "items": [item],
                "messages": [],
                "pending": {},
                "tasks": [],
                "info": {"title": "played"},
            },
        }
        chunk = {"kind": "model/chunk", "model_call_id": "mc_1", "piece": 4, "text": "Here is"}
        stream = f"event: chunk\ndata: {json.dumps(chunk)}\n\n"

        static = Path(nb.__file__).resolve().parent / "server" / "static"
        types = {".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml"}

        def fulfil(route: Any) -> None:
            path = httpx.URL(route.request.url).raw_path.decode()
            if path == "/":
                route.fulfill(content_type="text/html", body=(static / "index.html").read_text())
            elif path.startswith("/static/"):
                name = path.removeprefix("/static/")
                body = (static / name).read_text()
                route.fulfill(content_type=types[Path(name).suffix], body=body)
            elif "/stream" in path:
                route.fulfill(content_type="text/event-stream", body=stream)
            elif path in answers:
                route.fulfill(json=answers[path])
            else:
                route.fulfill(status=404, json={"type": "NotFound", "detail": path})

        page = browser.new_page(viewport={"width": 900, "height": 600})
        page.route(re.compile(r"http://played\.test/.*"), fulfil)
        page.goto("http://played.test/#s=s1")
        reply = page.locator("#items .item-assistant")
        expect(reply).to_contain_text("Here is", timeout=STEP)
        # innerText breaks around a <p> even shown inline; the text itself is what shows.
        assert "costs. Here is" in (reply.text_content() or "")
        shot(page, "11-committed-and-live")


class TestFavicon:
    def test_the_favicon_is_served(self, served: Served) -> None:
        """/favicon.ico answers 200 with an image, with no token."""
        response = httpx.get(served.server.url + "/favicon.ico", timeout=30)
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("image/")
