"""The doors' rules, the same on every backend: what search finds, which characters text may
hold, and bad arguments as typed errors that say what to do (never a bare Python error)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import agentnb as nb
from agentnb.errors import InvalidInput

Make = Callable[..., nb.Runtime]


def scripted(*replies: Any) -> nb.ScriptedModel:
    return nb.ScriptedModel(list(replies) or ["ok"] * 8)


class TestSearchFoldsCaseBeyondAscii:
    @pytest.mark.parametrize(
        ("search", "found"),
        [
            ("été", "summer"),
            ("ÉTÉ", "summer"),
            ("ärger", "trouble"),
            ("ÄRGER", "trouble"),
            ("büro", "trouble"),
            ("жизнь", "life"),
        ],
    )
    def test_every_backend_finds_non_ascii_capitals(
        self, make_runtime: Make, search: str, found: str
    ) -> None:
        """sessions(search=) matches letters beyond ASCII in any case, in titles and first
        tasks, on every backend."""
        runtime = make_runtime(scripted())
        runtime.session("summer").update(title="ÉTÉ en Provence")
        runtime.session("trouble").submit("Ärger im BÜRO")
        runtime.session("life").update(title="ЖИЗНЬ")
        runtime.session("other").update(title="plain")
        assert [i.key.session_id for i in runtime.sessions(search=search)] == [found]

    def test_postgres_without_a_folding_collation_folds_by_the_table(
        self, pg_store_url: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A PostgreSQL database whose collations fold only ASCII still finds them."""
        from agentnb.stores import postgres

        monkeypatch.setattr(postgres, "_FOLDING_COLLATIONS", ())
        store = postgres.PostgresStore(pg_store_url)
        try:
            if store._folds_with(""):
                pytest.skip("this database's own collation folds beyond ASCII")
            agent = nb.Agent(name="a", agent_id="a", model=scripted())
            with nb.Runtime(agent, store=store) as runtime:
                runtime.session("summer").update(title="ÉTÉ")
                assert [i.key.session_id for i in runtime.sessions(search="été")] == ["summer"]
        finally:
            store.close()


BAD = ["a\ud800b", "a\x00b"]
"""A lone surrogate (not valid Unicode) and a NUL character."""


class TestOneCharacterRuleAtEveryDoor:
    @pytest.mark.parametrize("bad", BAD)
    @pytest.mark.parametrize(
        "door",
        [
            "submit",
            "send",
            "inject",
            "steer",
            "title",
            "label value",
            "label key",
            "search",
            "delete reason",
            "reconcile reason",
            "submit timeout text",
        ],
    )
    def test_refused_as_invalid_input_with_nothing_written(
        self, make_runtime: Make, door: str, bad: str
    ) -> None:
        """Every entry point of user text refuses a lone surrogate or NUL with InvalidInput
        naming it, before anything is written, on every backend."""
        runtime = make_runtime(scripted())
        session = runtime.session("s")
        store = runtime.store
        before = (store.head(session.key), store.inbox_head(session.key))
        calls: dict[str, Callable[[], Any]] = {
            "submit": lambda: session.submit(bad),
            "send": lambda: session.send(bad),
            "inject": lambda: session.inject(bad),
            "steer": lambda: session.steer(bad),
            "title": lambda: session.update(title=bad),
            "label value": lambda: session.update(labels={"k": bad}),
            "label key": lambda: session.update(labels={bad: "v"}),
            "search": lambda: runtime.sessions(search=bad),
            "delete reason": lambda: session.delete(reason=bad),
            "reconcile reason": lambda: session.reconcile({}, bad),
            "submit timeout text": lambda: session.submit(f"x {bad}", timeout=5),
        }
        with pytest.raises(InvalidInput) as caught:
            calls[door]()
        assert ("NUL" in str(caught.value)) == ("\x00" in bad)
        assert ("surrogate" in str(caught.value)) == ("\ud800" in bad)
        assert (store.head(session.key), store.inbox_head(session.key)) == before
        assert store.get_session(session.key) is not None

    @pytest.mark.parametrize("bad", BAD)
    def test_answers_are_refused_the_same_way(self, make_runtime: Make, bad: str) -> None:
        """An answer's text, reason or edited arguments with such a character is refused."""

        @nb.tool(confirm=True)
        def order(item: str) -> str:
            """Order it."""
            return item

        model = scripted(
            nb.ToolCall("order", {"item": "x"}), nb.ToolCall("ask_user", {"question": "?"}), "ok"
        )
        runtime = make_runtime(model, [order, nb.ask_user])
        session = runtime.session("s")
        assert session.run("go", timeout=30).status == "suspended"
        (request_id,) = session.pending()
        with pytest.raises(InvalidInput):
            nb.Answer.reject(bad)
        with pytest.raises(InvalidInput):
            nb.Answer.approve(edited_args={"item": bad})
        assert session.respond(request_id, True).wait(timeout=30).status == "suspended"
        (question,) = session.pending()
        with pytest.raises(nb.InvalidAnswer):
            session.respond(question, bad)
        assert list(session.pending()) == [question]
