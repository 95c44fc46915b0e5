"""The chat projection: items rebuilt from the committed log, the same every time."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

import agentnb as nb
from agentnb.events import Event
from agentnb.folds import _encode
from agentnb.models.base import TextDelta, ToolCallDelta
from agentnb.projections.chat import ChatState
from agentnb.projections.state import InboxState
from tests.widgets.helpers import (
    WAIT,
    PausingModel,
    committed,
    text_pieces,
    until,
    wait_committed,
)

MakeRuntime = Callable[..., nb.Runtime]
TURN, RUN = "turn_1", "run_1"


class _Log:
    """Hand-made committed events, numbered from 1."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def add(self, type_: str, payload: dict[str, Any], run: str | None = RUN) -> Event:
        event = Event.create(type_, payload, turn_id=TURN, run_id=run)
        event = event.with_seq(len(self.events) + 1)
        self.events.append(event)
        return event

    def chunk(self, mc: str, index: int, text: str = "", fragments: Any = ()) -> None:
        self.add(
            "model/chunk",
            {"model_call_id": mc, "index": index, "text": text, "tool_call_fragments": fragments},
        )


def _frag(index: int, delta: str, name: str | None = None) -> dict[str, Any]:
    return {"index": index, "call_id": None, "name": name, "arguments_delta": delta}


def _assistant(mc: str, text: str, calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    message = {"id": f"msg_{mc}", "role": "assistant", "text": text, "turn_id": TURN}
    message["tool_calls"] = calls or []
    return {"message": message, "model_call_id": mc}


@nb.tool
def lookup_price(plan: str, ctx: nb.ToolContext) -> str:
    """Look up the monthly price of a plan.

    Args:
        plan: the plan's name
    """
    ctx.progress({"looked_at": plan})
    ctx.progress("priced")
    return {"basic": "$5", "pro": "$10"}.get(plan, "unknown")


@nb.tool(confirm=True)
def create_order(item: str, qty: int) -> str:
    """Create a purchase order.

    Args:
        item: what to buy
        qty: how many
    """
    return f"ordered {qty} x {item}"


def _by_id(state_or_items: Any) -> dict[str, Any]:
    items = state_or_items.items if hasattr(state_or_items, "items") else state_or_items
    return {item.id: item for item in items}


class TestDrafts:
    def test_committed_chunks_are_the_unfinished_text(self) -> None:
        """Committed model/chunk text is the reply's draft, in order, while it streams."""
        log = _Log()
        log.add("model/dispatch", {"model_call_id": "mc_1"})
        log.chunk("mc_1", 0, "Hel")
        log.chunk("mc_1", 1, "lo, wor")
        state = ChatState.fold(log.events)
        (item,) = state.items
        assert (item.id, item.role, item.status, item.text) == (
            "mc_1",
            "assistant",
            "streaming",
            "Hello, wor",
        )

    def test_final_message_replaces_its_draft_in_place(self) -> None:
        """message/assistant (same model_call_id) replaces the draft: same id, same place."""
        log = _Log()
        log.add("message/user", {"message": {"id": "msg_u", "role": "user", "text": "hi"}})
        log.add("model/dispatch", {"model_call_id": "mc_1"})
        log.chunk("mc_1", 0, "Hel")
        log.add("model/end", {"model_call_id": "mc_1", "status": "completed", "model": "m"})
        log.add("message/assistant", _assistant("mc_1", "Hello there."))
        items = ChatState.fold(log.events).items
        assert [i.id for i in items] == ["msg_u", "mc_1"]
        assert (items[1].text, items[1].status) == ("Hello there.", "completed")

    def test_late_chunks_never_overwrite_a_final_message(self) -> None:
        """A chunk after the final message (never emitted, but harmless) changes nothing."""
        log = _Log()
        log.add("message/assistant", _assistant("mc_1", "Final."))
        log.chunk("mc_1", 0, "draft")
        (item,) = ChatState.fold(log.events).items
        assert (item.text, item.status) == ("Final.", "completed")

    def test_a_retry_starts_the_draft_afresh(self) -> None:
        """A retried model call discards the failed attempt's draft text and arguments."""
        log = _Log()
        log.add("model/dispatch", {"model_call_id": "mc_1"})
        log.chunk("mc_1", 0, "Partial", [_frag(0, '{"pl', "lookup_price")])
        log.add("model/retry", {"model_call_id": "mc_1", "attempt": 1, "error": "503"})
        log.add("model/dispatch", {"model_call_id": "mc_1", "attempt": 2})
        log.chunk("mc_1", 0, "Again", [_frag(0, '{"plan":"pro"}', "lookup_price")])
        reply, card = ChatState.fold(log.events).items
        assert (reply.text, reply.status) == ("Again", "streaming")
        assert card.arguments_text == '{"plan":"pro"}'
        assert card.arguments == {"plan": "pro"}

    def test_a_run_that_stops_keeps_the_prefix_it_streamed(self) -> None:
        """An interrupted reply keeps the committed prefix and says it was interrupted."""
        log = _Log()
        log.add("model/dispatch", {"model_call_id": "mc_1"})
        log.chunk("mc_1", 0, "I was say")
        log.add("model/end", {"model_call_id": "mc_1", "status": "cancelled", "model": "m"})
        log.add("run/end", {"status": "interrupted"})
        (item,) = ChatState.fold(log.events).items
        assert (item.text, item.status) == ("I was say", "interrupted")

    def test_a_crash_cut_off_draft_is_settled_by_recovery(self) -> None:
        """recovery/applied marks the open draft of the crashed run as interrupted."""
        log = _Log()
        log.add("model/dispatch", {"model_call_id": "mc_1"})
        log.chunk("mc_1", 0, "Half")
        log.add("recovery/applied", {"reason": "crash", "interrupted_runs": [RUN]})
        (item,) = ChatState.fold(log.events).items
        assert (item.text, item.status) == ("Half", "interrupted")

    def test_unfinished_text_survives_a_restart(self, make_runtime: MakeRuntime) -> None:
        """Mid-stream, a fresh fold in another runtime shows the committed prefix."""
        model = PausingModel([text_pieces("The answer is forty-two.")], {0: 3})
        runtime = make_runtime(model)
        session = runtime.session("s1")
        session.submit("question")
        until(model.paused.is_set, what="the model to pause")
        until(lambda: committed(session, "model/chunk"), what="committed chunks")
        draft = next(i for i in session.snapshot().items if i.role == "assistant")
        assert draft.status == "streaming"
        assert "The answer is forty-two.".startswith(draft.text)
        assert draft.text
        # Another runtime on the same store (a restarted kernel) rebuilds the same draft.
        again = make_runtime(nb.ScriptedModel(["unused"])).open("s1")
        rebuilt = next(i for i in again.snapshot().items if i.role == "assistant")
        assert rebuilt == draft
        model.release()
        until(lambda: committed(session, "turn/completed"), what="completion")
        final = [i for i in session.snapshot().items if i.role == "assistant"]
        assert [(i.id, i.text, i.status) for i in final] == [
            (draft.id, "The answer is forty-two.", "completed")
        ]


class TestToolCards:
    def test_interleaved_fragments_build_each_card(self) -> None:
        """Fragments of several calls, interleaved, are gathered per call while they stream."""
        log = _Log()
        log.add("model/dispatch", {"model_call_id": "mc_1"})
        log.chunk("mc_1", 0, "", [_frag(0, '{"pla', "lookup_price"), _frag(1, '{"ite', "order")])
        log.chunk("mc_1", 2, "", [_frag(0, 'n":"pro"}'), _frag(1, 'm":"desk",')])
        reply, first, second = ChatState.fold(log.events).items
        assert reply.status == "streaming"
        assert (first.id, first.tool_name, first.status) == ("mc_1:0", "lookup_price", "generating")
        assert first.arguments_text == '{"plan":"pro"}'
        assert first.arguments == {"plan": "pro"}
        assert (second.id, second.tool_name) == ("mc_1:1", "order")
        assert second.arguments_text == '{"item":"desk",'
        assert second.arguments is None  # still partial

    def test_streamed_cards_take_their_call_ids_in_place(self) -> None:
        """The final message names the calls; the streamed cards take those ids, same order."""
        log = _Log()
        log.add("model/dispatch", {"model_call_id": "mc_1"})
        log.chunk("mc_1", 0, "", [_frag(1, "{}", "b"), _frag(0, '{"x":1}', "a")])
        calls = [
            {"call_id": "call_a", "name": "a", "arguments": {"x": 1}},
            {"call_id": "call_b", "name": "b", "arguments": {}},
        ]
        log.add("message/assistant", _assistant("mc_1", "", calls))
        log.add("tool/requested", {"call_id": "call_a", "name": "a", "arguments": {"x": 1}})
        items = ChatState.fold(log.events).items
        assert [i.id for i in items] == ["mc_1", "call_b", "call_a"]
        assert _by_id(items)["call_a"].status == "requested"
        assert _by_id(items)["mc_1"].tool_call_ids == ("call_a", "call_b")

    def test_a_call_id_streamed_by_the_provider_is_the_card_id(self) -> None:
        """When the stream carries the call id, the card has it from the first fragment."""
        log = _Log()
        log.add("model/dispatch", {"model_call_id": "mc_1"})
        fragment = {"index": 0, "call_id": "call_x", "name": "a", "arguments_delta": "{"}
        log.chunk("mc_1", 0, "", [fragment])
        assert [i.id for i in ChatState.fold(log.events).items] == ["mc_1", "call_x"]

    def test_cards_the_final_message_lacks_are_dropped(self) -> None:
        """A streamed card with no call in the final message disappears."""
        log = _Log()
        log.add("model/dispatch", {"model_call_id": "mc_1"})
        log.chunk("mc_1", 0, "", [_frag(0, "{}", "a"), _frag(1, "{}", "b")])
        calls = [{"call_id": "call_a", "name": "a", "arguments": {}}]
        log.add("message/assistant", _assistant("mc_1", "", calls))
        assert [i.id for i in ChatState.fold(log.events).items] == ["mc_1", "call_a"]

    def test_fragments_progress_and_results_survive_replay_without_duplicates(
        self, make_runtime: MakeRuntime
    ) -> None:
        """A real run: each card has its arguments, progress and result once, on every fold."""
        calls = [
            ToolCallDelta(0, name="lookup_price", arguments_delta='{"pl'),
            ToolCallDelta(1, name="lookup_price", arguments_delta='{"pla'),
            ToolCallDelta(0, arguments_delta='an":"basic"}'),
            ToolCallDelta(1, arguments_delta='n":"pro"}'),
        ]
        model = PausingModel([[TextDelta("Checking both."), *calls], text_pieces("Done.")], {})
        session = make_runtime(model, [lookup_price]).session("s1")
        assert session.run("prices?", timeout=WAIT).status == "completed"
        events = list(session.log.scan())
        once = ChatState.fold(events)
        twice = ChatState.fold(events + events)  # re-delivered events are ignored
        assert twice.to_json() == once.to_json()
        cards = [i for i in once.items if i.kind == "tool"]
        assert [c.arguments for c in cards] == [{"plan": "basic"}, {"plan": "pro"}]
        assert [c.progress for c in cards] == [
            ({"looked_at": "basic"}, "priced"),
            ({"looked_at": "pro"}, "priced"),
        ]
        assert [c.result["output"] for c in cards if c.result] == ["$5", "$10"]
        assert [c.status for c in cards] == ["success", "success"]
        assert all(c.id.startswith("call_") for c in cards)
        ids = [i.id for i in once.items]
        assert len(ids) == len(set(ids))

    def test_half_streamed_tool_arguments_survive_a_restart(
        self, make_runtime: MakeRuntime
    ) -> None:
        """Interleaved argument fragments committed mid-stream are rebuilt by a fresh fold."""
        pieces = [
            ToolCallDelta(0, name="lookup_price", arguments_delta='{"pl'),
            ToolCallDelta(1, name="lookup_price", arguments_delta='{"pla'),
            ToolCallDelta(0, arguments_delta='an":'),
            ToolCallDelta(1, arguments_delta='n":"pro"}'),
            ToolCallDelta(0, arguments_delta='"basic"}'),
        ]
        model = PausingModel([pieces, text_pieces("ok")], {0: 4})
        session = make_runtime(model, [lookup_price]).session("s1")
        session.submit("prices?")
        until(model.paused.is_set, what="the model to pause")
        wait_committed(session, "model/chunk")
        fresh = make_runtime(nb.ScriptedModel(["unused"])).open("s1")
        cards = [i for i in fresh.snapshot().items if i.kind == "tool"]
        assert [(c.id.endswith(":0"), c.status) for c in cards] == [
            (True, "generating"),
            (False, "generating"),
        ]
        assert [c.arguments_text for c in cards] == ['{"plan":', '{"plan":"pro"}']
        model.release()
        until(lambda: committed(session, "turn/completed"), what="completion")

    def test_a_pending_request_shows_on_its_card_and_in_pending(
        self, make_runtime: MakeRuntime
    ) -> None:
        """An approval request is on its tool card and in the snapshot's pending requests."""
        model = nb.ScriptedModel([nb.ToolCall("create_order", {"item": "desk", "qty": 2}), "ok"])
        session = make_runtime(model, [create_order]).session("s1")
        session.run("order", timeout=WAIT)
        snap = session.snapshot()
        (card,) = [i for i in snap.items if i.kind == "tool"]
        assert card.status == "waiting"
        assert card.request is not None
        assert card.request["status"] == "pending"
        assert card.request["request_id"] in snap.pending
        session.respond(card.request["request_id"], nb.Answer.reject("too dear")).wait(WAIT)
        (card,) = [i for i in session.snapshot().items if i.kind == "tool"]
        assert card.status == "denied"
        assert card.request is not None
        assert card.request["status"] == "answered"
        assert card.request["answer"]["approved"] is False


class TestSnapshot:
    def _multi_step(self, make_runtime: MakeRuntime) -> nb.Session:
        script = [
            nb.Reply(
                text="Let me look.", tool_calls=[nb.ToolCall("lookup_price", {"plan": "pro"})]
            ),
            nb.ToolCall("create_order", {"item": "pro plan", "qty": 1}),
            "Ordered the pro plan.",
            "Second task done.",
        ]
        model = nb.ScriptedModel(script, chunk_size=3)
        session = make_runtime(model, [lookup_price, create_order]).session("s1")
        session.run("buy the pro plan", timeout=WAIT)
        request_id = next(iter(session.pending()))
        session.respond(request_id, True).wait(WAIT)
        session.inject("Budget is $50.")
        session.run("and again", timeout=WAIT)
        return session

    def test_matches_the_session_reads(self, make_runtime: MakeRuntime) -> None:
        """messages, pending and tasks equal transcript(), pending() and tasks()."""
        session = self._multi_step(make_runtime)
        snap = session.snapshot()
        assert snap.messages == session.transcript().messages
        assert snap.cursor == session.transcript().as_of_seq == session.log.head()
        assert snap.pending == session.pending()
        assert list(snap.tasks) == session.tasks()
        sources = [i.source for i in snap.items if i.role == "user"]
        assert sources == ["submit", "submit", "inject"]

    def test_same_events_give_byte_identical_json(self, make_runtime: MakeRuntime) -> None:
        """Two folds of the same events give the same canonical JSON."""
        session = self._multi_step(make_runtime)
        events = list(session.log.scan())
        assert ChatState.fold(events).to_json() == ChatState.fold(list(events)).to_json()
        json.loads(session.snapshot().to_json())

    def test_applying_events_after_a_cursor_equals_a_fresh_fold(
        self, make_runtime: MakeRuntime
    ) -> None:
        """For every cursor: fold up to it, apply the rest, get what a fresh fold gives."""
        session = self._multi_step(make_runtime)
        events = list(session.log.scan())
        fresh = ChatState.fold(events).to_json()
        for cut in range(0, len(events) + 1, 3):
            state = ChatState.fold(events[:cut])
            for event in events[cut:]:
                state.apply(event)
            assert state.to_json() == fresh, f"differs when cut at {cut}"

    def test_rebuilt_after_a_restart_gives_identical_json_and_cursor(
        self, make_runtime: MakeRuntime
    ) -> None:
        """A multi-step session read by a new runtime gives the same snapshot JSON and cursor."""
        session = self._multi_step(make_runtime)
        before = session.snapshot()
        session.runtime.close()
        after = make_runtime(nb.ScriptedModel(["unused"])).open("s1").snapshot()
        assert after.cursor == before.cursor
        assert after.to_json() == before.to_json()

    def test_one_read_at_one_watermark(self, make_runtime: MakeRuntime) -> None:
        """The head is read once and exactly (0, head] is folded, even if more commits land."""
        session = self._multi_step(make_runtime)
        store = session.runtime.store
        for _ in range(100):  # the runtime keeps the lease a moment after the last task
            if store.current_lease(session.key) is None:
                break
            store.wait_for_head(session.key, session.log.head(), 0.05)
        head = session.log.head()
        real_head = session.log.head

        def head_then_commit() -> int:
            seen = real_head()
            # Another writer commits right after the head was read: not part of this read.
            session.log.append(
                [nb.Event.create("acme/late", {"n": 1}, required=False)], expected_seq=seen
            )
            return seen

        session.log.head = head_then_commit  # type: ignore[method-assign]
        try:
            snap = session.snapshot()
        finally:
            del session.log.head
        assert snap.cursor == head
        assert session.log.head() == head + 1
        folded = ChatState.fold(session.log.scan(0, head)).snapshot()
        assert (snap.items, snap.messages, snap.pending) == (
            folded.items,
            folded.messages,
            folded.pending,
        )

    def test_queued_tasks_come_from_the_inbox(self, make_runtime: MakeRuntime) -> None:
        """A task accepted while another one waits for a person shows as queued."""
        model = nb.ScriptedModel([nb.ToolCall("create_order", {"item": "desk", "qty": 1}), "ok"])
        session = make_runtime(model, [create_order]).session("s1")
        session.run("first", timeout=WAIT)
        session.submit("second")
        tasks = session.snapshot().tasks
        assert [(t.input, t.status) for t in tasks] == [
            ("first", "suspended"),
            ("second", "queued"),
        ]


@pytest.mark.parametrize("cut", [1, 2, 3])
def test_reapplying_a_prefix_changes_nothing(cut: int) -> None:
    """Events at or below the cursor are ignored (a follower may re-deliver them)."""
    log = _Log()
    log.add("model/dispatch", {"model_call_id": "mc_1"})
    log.chunk("mc_1", 0, "abc")
    log.add("tool/chunk", {"call_id": "call_1", "index": 0, "data": "p"})
    state = ChatState.fold(log.events)
    before = state.to_json()
    for event in log.events[:cut]:
        state.apply(event)
    assert state.to_json() == before


class TestChatSnapshotCache:
    def test_dump_and_load_give_the_same_fold(self, make_runtime: MakeRuntime) -> None:
        """A chat fold saved as a snapshot and loaded again renders the same JSON."""
        session = TestSnapshot()._multi_step(make_runtime)
        from agentnb.folds import load_context

        fold = ChatState.fold(session.log.scan())
        store = session.runtime.store
        again = ChatState.load(
            json.loads(json.dumps(fold.dump())),
            lambda through: load_context(store, session.key, through),
        )
        assert again.to_json() == fold.to_json()
        assert again.snapshot().tasks == fold.snapshot().tasks

    def test_snapshot_of_a_long_session_starts_from_the_cached_fold(
        self, make_runtime: MakeRuntime
    ) -> None:
        """A new reader loads the saved chat fold and folds only the events after it."""
        from agentnb.folds import ChatFolds

        session = TestSnapshot()._multi_step(make_runtime)
        store = session.runtime.store
        head = session.log.head()
        writer = ChatFolds(store, session.key)
        writer.refresh()
        store.put_snapshot(
            session.key, "chat-state", head, _encode(writer.chat.dump(), store, session.key)
        )
        reader = ChatFolds(store, session.key)
        scanned: list[int] = []
        real_scan = store.scan

        def scan(key: Any, after: int = 0, through: int | None = None) -> Any:
            scanned.append(after)
            return real_scan(key, after, through)

        store.scan = scan  # type: ignore[method-assign]
        try:
            snap = reader.snapshot(head, InboxState(), executing=False)
        finally:
            del store.scan
        assert all(after >= head for after in scanned)  # nothing before it was read again
        assert snap.cursor == head
        assert snap.items == ChatState.fold(session.log.scan(0, head)).items


class TestProgressBound:
    def test_a_chatty_tool_keeps_only_its_latest_progress(self) -> None:
        """A tool card keeps the newest PROGRESS_KEEP reports, so the fold stays small."""
        from agentnb.projections.chat import PROGRESS_KEEP

        events = [
            nb.Event.create(
                "tool/requested",
                {"call_id": "c1", "name": "t", "arguments": {}},
                turn_id="t1",
                run_id="r1",
            ),
            *[
                nb.Event.create(
                    "tool/chunk",
                    {"call_id": "c1", "index": i, "data": i},
                    turn_id="t1",
                    run_id="r1",
                )
                for i in range(PROGRESS_KEEP * 3)
            ],
        ]
        fold = ChatState.fold(e.with_seq(n) for n, e in enumerate(events, start=1))
        (card,) = fold.items
        assert list(card.progress) == list(range(PROGRESS_KEEP * 2, PROGRESS_KEEP * 3))
