"""SessionView is an ipywidgets VBox (it goes inside layouts) and renders assistant Markdown
safely: markdown-it with raw HTML disabled, images off, links checked, text escaped."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import ipywidgets as w
import pytest

import agentnb as nb
from agentnb.projections.chat import ChatItem
from agentnb.widgets import SessionView
from agentnb.widgets import view as view_module
from tests.widgets.helpers import WAIT

MakeRuntime = Callable[..., nb.Runtime]


@pytest.fixture
def views() -> Iterator[list[SessionView]]:
    made: list[SessionView] = []
    yield made
    for view in made:
        view.close()


def _reply(text: str, role: str = "assistant") -> ChatItem:
    return ChatItem("m1", "message", role, "turn_1", "run_1", 1, "completed", text)


class TestAWidget:
    def test_the_view_is_a_vbox_that_fits_in_a_layout(
        self, make_runtime: MakeRuntime, views: list[SessionView]
    ) -> None:
        """SessionView is a VBox with the view's parts as children; it nests in an HBox."""
        session = make_runtime(nb.ScriptedModel(["hi"])).session("s1")
        view = SessionView(session, follow=False)
        views.append(view)
        assert isinstance(view, w.VBox)
        assert view.widget is view
        assert "agentnb-view" in view._dom_classes
        assert view.status in view.children
        assert view.transcript in view.children
        box = w.HBox([view, w.HTML("notes")])
        assert box.children[0] is view
        box.close()

    def test_displaying_gives_the_widget_and_a_stable_text(
        self, make_runtime: MakeRuntime, views: list[SessionView]
    ) -> None:
        """The mime bundle holds the widget view and a text form without changing parts."""
        session = make_runtime(nb.ScriptedModel(["hi"])).session("s1")
        view = SessionView(session, follow=False)
        views.append(view)
        bundle = view._repr_mimebundle_()
        assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"] == view.model_id
        assert bundle["text/plain"] == f"SessionView({session.key})"

    def test_close_closes_every_part_once(
        self, make_runtime: MakeRuntime, views: list[SessionView]
    ) -> None:
        """close() stops following and closes the view's parts; again is harmless."""
        session = make_runtime(nb.ScriptedModel(["hi"])).session("s1")
        session.run("say hi", timeout=20)
        view = SessionView(session)
        views.append(view)
        parts = list(view.children)
        view.close()
        view.close()
        assert not view.following
        assert view.closed
        assert all(part.comm is None for part in parts)
        assert repr(view).startswith(f"SessionView({session.key}")

    def test_a_closed_view_shows_its_last_state(
        self, make_runtime: MakeRuntime, views: list[SessionView]
    ) -> None:
        """After close() the output still shows the conversation and says it is closed."""
        session = make_runtime(nb.ScriptedModel(["**hi** there"])).session("s1")
        session.run("say hi", timeout=20)
        view = SessionView(session)
        views.append(view)
        view.close()
        (still,) = view.children
        assert view.comm is not None  # still displayed
        assert "say hi" in still.value
        assert "<strong>hi</strong> there" in still.value
        assert "completed" in still.value
        assert "This view is closed" in still.value
        assert view._repr_mimebundle_()["application/vnd.jupyter.widget-view+json"]

    def test_a_closed_runtime_freezes_the_view_with_its_last_state(
        self, make_runtime: MakeRuntime, views: list[SessionView]
    ) -> None:
        """When the session's runtime closes, the view keeps its drawing and says why."""
        session = make_runtime(nb.ScriptedModel(["done"])).session("s1")
        session.run("quick", timeout=20)
        view = SessionView(session)
        views.append(view)
        session.runtime.close()
        session.runtime.store.close()  # a shared memory:// store outlives its runtime
        deadline = time.monotonic() + 20
        while not view.closed:
            assert time.monotonic() < deadline, "the view did not notice the closed runtime"
            time.sleep(0.02)
        (still,) = view.children
        assert "quick" in still.value
        assert "runtime of this session is closed" in still.value


class TestMarkdown:
    def test_assistant_markdown_is_rendered(self) -> None:
        """Emphasis, lists and code blocks of a reply become markup."""
        markup = view_module.message_html(_reply("**Pro** is $10.\n\n- a\n- b\n\n```\nx<1\n```"))
        assert "<strong>Pro</strong>" in markup
        assert "<li>a</li>" in markup
        assert "<pre><code>x&lt;1" in markup

    def test_raw_html_in_a_reply_stays_text(self) -> None:
        """Raw HTML is disabled: a <script> in a reply is escaped, never a tag."""
        markup = view_module.message_html(_reply("<script>alert(1)</script> <b onclick=x>b</b>"))
        assert "<script>" not in markup
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in markup
        assert "<b onclick" not in markup

    def test_links_are_checked_and_images_are_off(self) -> None:
        """javascript: links stay text; http links open in a new tab; images never load."""
        markup = view_module.markdown_html(
            "[bad](javascript:alert(1)) [good](https://example.org) ![px](https://t.example/p.gif)"
        )
        assert 'href="javascript' not in markup
        assert 'href="https://example.org"' in markup
        assert 'rel="noopener noreferrer"' in markup
        assert "<img" not in markup

    def test_user_text_is_not_markdown(self) -> None:
        """What a person typed shows exactly as typed (no Markdown)."""
        markup = view_module.message_html(_reply("**literal**", role="user"))
        assert "**literal**" in markup
        assert "<strong>" not in markup

    def test_a_reply_in_a_live_view_is_rendered(
        self, make_runtime: MakeRuntime, views: list[SessionView]
    ) -> None:
        """The transcript of a real session shows the reply's Markdown as markup."""
        session = make_runtime(nb.ScriptedModel(["Use **pro**."])).session("s1")
        session.run("which plan?", timeout=WAIT)
        view = SessionView(session, follow=False)
        views.append(view)
        markup = "".join(getattr(c, "value", "") for c in view.transcript.children)
        assert "Use <strong>pro</strong>." in markup
