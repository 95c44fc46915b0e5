"""Reasoning as its own stream: chunk kind, message part, closed "Thinking" folds, exports."""

from __future__ import annotations

import pytest

import agentnb as nb
from agentnb import analysis
from agentnb.projections.chat import ChatState
from agentnb.server.render import item_json
from agentnb.widgets.view import message_html

THOUGHT = "Let me weigh <b>both</b> options & pick one."
WAIT = 30.0


def _session() -> tuple[nb.Runtime, nb.Session]:
    model = nb.ScriptedModel([nb.Reply(text="Option **A**.", reasoning=THOUGHT)], chunk_size=8)
    agent = nb.Agent(name="Thinker", agent_id="thinker", model=model)
    runtime = nb.Runtime(agent, store="memory://")
    return runtime, runtime.session("s1")


class TestReasoningStream:
    def test_reasoning_streams_as_its_own_kind_and_is_kept_on_the_message(self) -> None:
        """model/chunk carries reasoning fragments apart from text; the message keeps it."""
        runtime, session = _session()
        try:
            outcome = session.run("which?", timeout=WAIT)
            events = session.log.read_after(0, limit=1000)
            transcript = session.transcript()
        finally:
            runtime.close()
        assert outcome.output == "Option **A**."
        chunks = [e.payload for e in events if e.type == "model/chunk"]
        thought = "".join(f["text"] for c in chunks for f in c.get("reasoning_fragments", ()))
        assert thought == THOUGHT
        assert "".join(c["text"] for c in chunks) == "Option **A**."
        (reply,) = [m for m in transcript.messages if m.role == "assistant"]
        assert [p.text for p in reply.reasoning] == [THOUGHT]
        (end,) = [e.payload for e in events if e.type == "model/end"]
        assert end["reasoning_chars"] == len(THOUGHT)

    def test_a_reply_without_reasoning_stores_what_it_stored_before(self) -> None:
        """No reasoning: no new keys on the chunk, the message or model/end."""
        runtime = nb.Runtime(
            nb.Agent(name="a", agent_id="a", model=nb.ScriptedModel(["plain"])), store="memory://"
        )
        try:
            session = runtime.session("s1")
            session.run("hi", timeout=WAIT)
            events = session.log.read_after(0, limit=1000)
        finally:
            runtime.close()
        for event in events:
            if event.type == "model/chunk":
                assert "reasoning_fragments" not in event.payload
            if event.type == "message/assistant":
                assert "reasoning" not in event.payload["message"]
            if event.type == "model/end":
                assert not {"reasoning_chars", "cache_write_tokens", "usage_estimated"} & set(
                    event.payload
                )


class TestThinkingFold:
    def test_transcript_session_view_and_chat_page_show_a_closed_fold(self) -> None:
        """The reasoning shows as a closed, escaped "Thinking" fold, never as Markdown."""
        runtime, session = _session()
        try:
            session.run("which?", timeout=WAIT)
            page = session.transcript()._repr_html_()
            events = session.log.read_after(0, limit=1000)
            frame = analysis.model_calls(session)
        finally:
            runtime.close()
        chat = ChatState.fold(events)
        (item,) = [i for i in chat.items if i.role == "assistant"]
        assert item.reasoning == THOUGHT
        escaped = "Let me weigh &lt;b&gt;both&lt;/b&gt; options &amp; pick one."
        for markup in (page, message_html(item)):
            assert '<details class="agentnb-thinking">' in markup
            assert "<details open" not in markup
            assert f"Thinking ({len(THOUGHT)} characters)" in markup
            assert escaped in markup
            assert "<b>both</b>" not in markup
        assert item_json(item)["reasoning"] == THOUGHT
        assert int(frame.iloc[0].reasoning_chars) == len(THOUGHT)

    def test_a_draft_shows_the_reasoning_streamed_so_far(self) -> None:
        """While the reply streams, the chat item's reasoning grows with the chunks."""
        runtime, session = _session()
        try:
            session.run("which?", timeout=WAIT)
            events = session.log.read_after(0, limit=1000)
        finally:
            runtime.close()
        chat = ChatState()
        seen = []
        for event in events:
            chat.apply(event)
            if event.type == "model/chunk":
                (item,) = [i for i in chat.items if i.role == "assistant"]
                seen.append(item.reasoning)
        assert seen[0]
        assert THOUGHT.startswith(seen[0])
        assert seen[-1] == THOUGHT


class TestScriptedReasoning:
    def test_a_reply_with_reasoning_that_is_not_text_is_refused(self) -> None:
        """Reply(reasoning=...) takes a string; anything else is InvalidInput."""
        with pytest.raises(nb.InvalidInput, match="reasoning"):
            nb.Reply(text="x", reasoning=["not", "text"])  # type: ignore[arg-type]
