"""Compaction: the working context stays inside the window, history keeps every message.

The log is never rewritten: ``context/replaced`` stands for the oldest part of the working
context; ``transcript()`` and the log keep every original message, and the log alone says
what each model call saw.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import agentnb as nb
from agentnb.projections.state import CONTEXT_TYPES, SessionState, build_context
from tests.runtime.helpers import WAIT, events_of

WINDOW = 200
TURNS = 300


def _answer(messages: list[nb.Message]) -> str:
    return f"done {messages[-1].text}"


def _summary(messages: list[nb.Message]) -> str:
    return f"summary of {messages[-1].text.count(chr(10)) + 1} messages"


def _session(compaction: Any, **agent: Any) -> nb.Session:
    model = agent.pop("model", None) or nb.ScriptedModel(_answer, keep_requests=20)
    runtime = nb.Runtime(
        nb.Agent(
            name="C",
            agent_id="compact",
            model=model,
            instructions="Be brief.",
            compaction=compaction,
            context_window=agent.pop("context_window", WINDOW),
            **agent,
        ),
        store="memory://",
    )
    return runtime.session("s")


def _close(session: nb.Session) -> None:
    session.runtime.close()  # type: ignore[attr-defined]


class TestLongConversation:
    @pytest.mark.parametrize(
        "compactor",
        [
            nb.TrimCompactor(trigger=0.8, keep_last=6),
            nb.SummaryCompactor(trigger=0.8, keep_last=6, model=nb.ScriptedModel(_summary)),
        ],
        ids=["trim", "summary"],
    )
    def test_300_turns_stay_inside_a_small_window(self, compactor: nb.Compactor) -> None:
        """The next context stays under the window; every original message stays in history."""
        session = _session(compactor)
        try:
            for i in range(TURNS):
                assert session.run(f"task {i}", timeout=WAIT).status == "completed"
            inspection = session.inspect()
            assert inspection.context_tokens is not None
            assert inspection.context_tokens <= WINDOW
            transcript = session.transcript().messages
            assert len(transcript) == 2 * TURNS
            assert transcript[0].text == "task 0"
            ends = [e.payload for e in events_of(session, "compaction/end")]
            assert ends
            assert all(e["status"] == "completed" for e in ends)
            assert all(e["tokens_after"] < e["tokens_before"] for e in ends)
            model = session.runtime.agent.model  # type: ignore[attr-defined]
            seen = [m.text for m in model.requests[-1]]
            marker = (
                "Summary of the conversation" if "summary" in compactor.name.lower() else "removed"
            )
            assert any(marker in t for t in seen)
        finally:
            _close(session)

    def test_the_log_alone_rebuilds_every_calls_context(self) -> None:
        """Folding the log's context events up to each context/build gives that call's context."""
        session = _session(nb.TrimCompactor(trigger=0.8, keep_last=6))
        try:
            for i in range(60):
                session.run(f"task {i}", timeout=WAIT)
            events = list(session.log.scan())
            state = SessionState()
            checked = 0
            for event in events:
                if event.type == "context/build":
                    messages = build_context("Be brief.", state.context)
                    assert len(messages) == event.payload["message_count"]
                    checked += 1
                elif event.type in CONTEXT_TYPES:
                    state.apply(event)
            assert checked == 60
        finally:
            _close(session)


class TestFailures:
    def test_a_failed_summary_keeps_the_context_and_the_turn_goes_on(self) -> None:
        """A summariser that fails is recorded; the context is as it was; the turn completes."""

        def broken(messages: list[nb.Message]) -> str:
            raise nb.ModelError("summariser down")

        compactor = nb.SummaryCompactor(trigger=0.5, keep_last=4, model=nb.ScriptedModel(broken))
        session = _session(compactor, context_window=10_000)
        try:
            for i in range(3):
                session.run(f"task {i}", timeout=WAIT)
            # Force the trigger with a smaller window on a second agent? Use compact() instead.
            with pytest.raises(nb.InvalidInput):
                _session(None).compact()
            session.compact(timeout=WAIT)
            end = events_of(session, "compaction/end")[-1].payload
            assert end["status"] == "failed"
            assert "summariser down" in end["error"]
            assert events_of(session, "context/replaced") == []
            assert len(session.inspect().next_context) == 1 + 6
            assert session.run("after", timeout=WAIT).status == "completed"
        finally:
            _close(session)

    def test_a_context_that_cannot_fit_fails_the_turn_with_a_typed_reason(self) -> None:
        """Without a compactor, a context past the window fails its turn: context_overflow."""
        session = _session(None, context_window=40)
        try:
            outcome = None
            for i in range(10):
                outcome = session.run(f"task {i}", timeout=WAIT)
                if outcome.status != "completed":
                    break
            assert outcome is not None
            assert outcome.status == "failed"
            assert outcome.stop_reason == "context_overflow"
            assert "does not fit" in (outcome.error or "")
        finally:
            _close(session)


class TestOnDemand:
    def test_compact_now_replaces_the_oldest_part_and_keeps_history(self) -> None:
        """session.compact() is an inbox command: the context shrinks, the transcript does not."""
        session = _session(nb.TrimCompactor(trigger=1.0, keep_last=2), context_window=100_000)
        try:
            for i in range(5):
                session.run(f"task {i}", timeout=WAIT)
            before = len(session.inspect().next_context)
            session.compact(timeout=WAIT)
            after = session.inspect().next_context
            assert len(after) < before
            assert after[-2].text == "task 4"
            assert len(session.transcript().messages) == 10
            start = events_of(session, "compaction/start")[-1].payload
            assert start["reason"] == "requested"
            state = session.export_state()
            assert len(state["messages"]) == len(after) - 1  # the compacted context, no system
        finally:
            _close(session)


class TestCrash:
    def test_a_kill_during_compaction_leaves_the_old_context_whole(self, tmp_path: Path) -> None:
        """kill -9 while the summariser runs: a fresh runtime sees the old context, whole."""
        db = tmp_path / "db.sqlite"
        child = subprocess.Popen(
            [sys.executable, "-m", "tests._fault_child", "compacting", f"sqlite:///{db}"],
            cwd=Path(__file__).resolve().parent.parent,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert child.stdout is not None
            line = child.stdout.readline()
            assert line.startswith("COMPACTING"), child.stderr.read() if child.stderr else ""
            os.kill(child.pid, signal.SIGKILL)
            child.wait(WAIT)
        finally:
            if child.poll() is None:
                child.kill()
            child.communicate()
        from tests import _fault_child

        runtime = nb.Runtime(_fault_child.agent(["resumed"]), store=f"sqlite:///{db}")
        try:
            session = runtime.session("s1")
            assert events_of(session, "compaction/start")
            assert events_of(session, "context/replaced") == []
            context = [m.text for m in session.inspect().next_context if m.role != "system"]
            transcript = [m.text for m in session.transcript().messages]
            assert context == transcript  # the whole old context, nothing replaced
        finally:
            runtime.close()


class TestExport:
    def test_compactions_view_and_context_growth_query(self, tmp_path: Path) -> None:
        """The export has one row per compaction (tokens saved) and the context per call."""
        from agentnb import analysis
        from agentnb.export import Exporter, ParquetSink

        session = _session(nb.TrimCompactor(trigger=0.8, keep_last=6))
        try:
            for i in range(40):
                session.run(f"task {i}", timeout=WAIT)
            store = session.runtime.store  # type: ignore[attr-defined]
            root = tmp_path / "export"
            Exporter(store, ParquetSink(str(root)), progress=False).drain()
            frame = analysis.compactions(str(root))
            ends = events_of(session, "compaction/end")
            assert len(frame) == len(ends) > 0
            assert (frame["tokens_saved"] > 0).all()
            assert set(frame["status"]) == {"completed"}
            growth = analysis.query("context_growth", str(root))
            assert len(growth) == len(events_of(session, "context/build")) == 40
            assert growth["tokens"].max() <= WINDOW
            assert growth["compactions"].iloc[-1] == len(ends)
        finally:
            _close(session)


class TestView:
    def test_the_view_marks_where_the_context_was_summarised(self) -> None:
        """A compaction shows as one 'earlier messages summarised' card holding the summary."""
        from agentnb.widgets import SessionView

        compactor = nb.SummaryCompactor(trigger=1.0, keep_last=2, model=nb.ScriptedModel(_summary))
        session = _session(compactor, context_window=100_000)
        try:
            for i in range(4):
                session.run(f"task {i}", timeout=WAIT)
            session.compact(timeout=WAIT)
            view = SessionView(session, follow=False)
            try:
                cards = [c for c in view.transcript.children if "agentnb-summary" in c._dom_classes]
                assert len(cards) == 1
                assert cards[0].titles == ("earlier messages summarised",)
                assert "summary of" in cards[0].children[0].value
                texts = str(list(view.transcript.children))
                assert "task 0" in texts  # history is still shown
            finally:
                view.close()
        finally:
            _close(session)


class TestBadInputs:
    def test_bad_compactor_settings_are_refused(self) -> None:
        """A trigger outside (0, 1], a keep_last below 1, a non-Model summariser, an empty
        prompt or a compaction that is not a Compactor raise InvalidInput."""
        for trigger in [0, 1.5, -0.1, "0.8", True]:
            with pytest.raises(nb.InvalidInput):
                nb.TrimCompactor(trigger=trigger)  # type: ignore[arg-type]
        for keep_last in [0, -1, 2.5, True]:
            with pytest.raises(nb.InvalidInput):
                nb.TrimCompactor(keep_last=keep_last)  # type: ignore[arg-type]
        with pytest.raises(nb.InvalidInput):
            nb.SummaryCompactor(model="gpt")  # type: ignore[arg-type]
        with pytest.raises(nb.InvalidInput):
            nb.SummaryCompactor(prompt="  ")
        with pytest.raises(nb.InvalidInput, match="Compactor"):
            nb.Agent(name="A", agent_id="a", model=nb.ScriptedModel([]), compaction="trim")  # type: ignore[arg-type]
