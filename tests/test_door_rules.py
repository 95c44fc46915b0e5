"""The doors' rules, the same on every backend: what search finds, which characters text may
hold, and bad arguments as typed errors that say what to do (never a bare Python error)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

import agentnb as nb
from agentnb.errors import InvalidInput
from agentnb.models import Finish, ModelRequest, StreamItem, TextDelta, ToolCallDelta

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


class RawModel(nb.Model):
    """Streams the given items for its first call, then answers "done"."""

    name = "raw"

    def __init__(self, *items: Any) -> None:
        self.items = items
        self.calls = 0

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        self.calls += 1
        for item in self.items if self.calls == 1 else (TextDelta("done"), Finish("stop")):
            yield item


def raw_call(arguments: str) -> tuple[StreamItem, ...]:
    return (
        ToolCallDelta(index=0, call_id="call_1", name="echo", arguments_delta=arguments),
        Finish("tool_calls"),
    )


@nb.tool
def echo(x: Any = None) -> str:
    """Say it back."""
    return "echoed"


class TestBadArgumentsAreTypedErrors:
    def test_malformed_store_url_is_invalid_input_without_its_password(self) -> None:
        """A store URL urllib cannot split is InvalidInput that does not echo the URL."""
        with pytest.raises(InvalidInput, match="malformed") as caught:
            nb.open_store("postgresql://u:hunter2@[::1/db")
        assert "hunter2" not in str(caught.value)

    def test_reconcile_with_nothing_uncertain(self, make_runtime: Make) -> None:
        """reconcile({}) with no uncertain call says there is nothing to reconcile."""
        session = make_runtime(scripted()).session("s")
        with pytest.raises(InvalidInput, match="no uncertain tool calls"):
            session.reconcile({}, "checked")

    @pytest.mark.parametrize("status", [5, [5], object(), [["idle"]]])
    def test_sessions_status_of_the_wrong_type(self, make_runtime: Make, status: Any) -> None:
        """sessions(status=) that is neither a status nor a collection of them is InvalidInput."""
        with pytest.raises(InvalidInput, match="status must be"):
            make_runtime(scripted()).sessions(status=status)

    @pytest.mark.parametrize("timeout", ["5", -1, float("nan"), True])
    def test_wait_timeout_that_is_not_seconds(self, make_runtime: Make, timeout: Any) -> None:
        """wait(timeout=) takes seconds >= 0 or None; anything else is InvalidInput."""
        session = make_runtime(scripted()).session("s")
        receipt = session.submit("hi")
        with pytest.raises(InvalidInput, match="timeout"):
            session.wait(receipt, timeout=timeout)
        with pytest.raises(InvalidInput, match="timeout"):
            receipt.wait(timeout=timeout)

    @pytest.mark.parametrize("call", ["cancel", "reconcile", "delete"])
    def test_other_timeouts_are_checked_before_anything_is_written(
        self, make_runtime: Make, call: str
    ) -> None:
        """cancel, reconcile and delete check their timeout before they write anything."""
        runtime = make_runtime(scripted())
        session = runtime.session("s")
        session.run("hi", timeout=30)
        before = runtime.store.inbox_head(session.key)
        calls: dict[str, Callable[[], Any]] = {
            "cancel": lambda: session.cancel(session.tasks()[-1].turn_id, timeout="x"),
            "reconcile": lambda: session.reconcile({}, "r", timeout="x"),
            "delete": lambda: session.runtime.delete(session.key, timeout="x"),  # type: ignore[attr-defined]
        }
        with pytest.raises(InvalidInput, match="timeout"):
            calls[call]()
        assert runtime.store.inbox_head(session.key) == before

    @pytest.mark.parametrize(
        "arguments",
        ["[" * 100_000 + "]" * 100_000, '{"x": ' + "[" * 40 + "]" * 40 + "}"],
        ids=["past-the-parser", "past-the-bound"],
    )
    def test_deeply_nested_tool_arguments_go_back_to_the_model(
        self, make_runtime: Make, arguments: str
    ) -> None:
        """Tool arguments nested too deeply are a tool error the model sees, not a failed run."""
        runtime = make_runtime(RawModel(*raw_call(arguments)), [echo])
        session = runtime.session("s")
        outcome = session.run("go", timeout=30)
        assert outcome.status == "completed"
        (result,) = [e.payload for e in session.log.scan() if e.type == "tool/result"]
        assert result["status"] == "error"
        assert "nested" in result["output"]

    def test_deeply_nested_chunk_from_a_server_is_a_model_error(self) -> None:
        """A server chunk nested past the JSON parser's depth is a ModelError saying so."""
        from tests.runtime.test_openai_http import DONE, LoopbackServer, model_for, request, run
        from tests.runtime.test_openai_http import stream as sse

        server = LoopbackServer()
        try:
            deep = b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
            server.script(sse(b"data: " + deep + b"\n\n", DONE))
            model = model_for(server)
            with pytest.raises(nb.ModelError, match="nested too deeply"):
                run(model, lambda: model.complete(request()))
        finally:
            server.close()
