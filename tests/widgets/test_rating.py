"""The thumbs and comment box under each answer of SessionView: they record feedback on the
answer's turn, locally and through the service, and show the comment escaped."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import agentnb as nb
from agentnb.widgets import SessionView
from tests.remote import DOORS, through_doors


@pytest.fixture
def make_runtime(make_runtime, door, request):
    return through_doors(make_runtime, request)


@pytest.fixture
def views() -> Iterator[list[SessionView]]:
    made: list[SessionView] = []
    yield made
    for view in made:
        view.close()


def bars(view: SessionView) -> list[Any]:
    return [c for c in view.transcript.children if "agentnb-rating" in c._dom_classes]


def rated(session: Any) -> list[Any]:
    return [e for e in session.log.read_after(0, 1000) if e.type == "feedback/added"]


@pytest.mark.parametrize("door", DOORS, indirect=True)
class TestRatingBar:
    def test_one_bar_per_answer(self, make_runtime, views) -> None:
        """Each completed answer has one bar; the user's message has none."""
        session = make_runtime(nb.ScriptedModel(["first", "second"])).session("s")
        session.run("one")
        session.run("two")
        view = SessionView(session, follow=False)
        views.append(view)
        assert len(bars(view)) == 2

    def test_thumbs_down_with_a_comment_records_feedback(self, make_runtime, views) -> None:
        """Thumbs down with a comment records score 0 and the comment on the answer's turn."""
        session = make_runtime(nb.ScriptedModel(["an answer"])).session("s")
        turn = session.run("a question").turn_id
        view = SessionView(session, follow=False)
        views.append(view)
        _up, down, comment, said = bars(view)[0].children
        comment.value = "<b>wrong</b> & late"
        down.click()
        [added] = rated(session)
        assert added.turn_id == turn
        assert (added.payload["score"], added.payload["comment"]) == (0.0, "<b>wrong</b> & late")
        assert "&lt;b&gt;wrong&lt;/b&gt; &amp; late" in said.value
        assert "<b>" not in said.value
        assert comment.value == ""

    def test_thumbs_up(self, make_runtime, views) -> None:
        """Thumbs up records score 1 with no comment."""
        session = make_runtime(nb.ScriptedModel(["an answer"])).session("s")
        session.run("a question")
        view = SessionView(session, follow=False)
        views.append(view)
        bars(view)[0].children[0].click()
        [added] = rated(session)
        assert (added.payload["score"], added.payload["comment"]) == (1.0, None)
