"""Long conversations: what a reopen reads and what a turn costs do not grow with history.

Sessions here are built by the real runtime (10,000 turns in one of them), never by hand.
Costs are counted (events read, store calls), never timed.
"""

from __future__ import annotations

import gc
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import agentnb as nb
from agentnb.folds import SNAPSHOT_EVERY
from agentnb.projections.state import KEEP_TURNS, TurnState
from agentnb.runtime.engine import LINGER
from agentnb.widgets import SessionView

WAIT = 30.0
LONG, SHORT = 10_000, 100


class CountingStore(nb.MemoryStore):
    """A memory store that counts the events it hands out and the calls it serves."""

    def __init__(self) -> None:
        super().__init__()
        self.events_read = 0
        self.calls: Counter[str] = Counter()
        self.by_thread: Counter[str] = Counter()
        self.inbox_reads_by_thread: Counter[str] = Counter()
        self.empty_inbox_reads_by_thread: Counter[str] = Counter()
        self._count_lock = threading.Lock()

    def _took(self, name: str, rows: int = 0) -> None:
        with self._count_lock:
            self.calls[name] += 1
            self.events_read += rows
            thread = threading.current_thread().name.split("_")[0]
            if name == "inbox_read_after":
                self.inbox_reads_by_thread[thread] += 1
                self.empty_inbox_reads_by_thread[thread] += rows == 0
            else:  # execution-log events, by reading thread
                self.by_thread[thread] += rows

    def reset(self) -> None:
        with self._count_lock:
            self.events_read = 0
            self.calls.clear()
            self.by_thread.clear()
            self.inbox_reads_by_thread.clear()
            self.empty_inbox_reads_by_thread.clear()

    def read_raw(self, key: Any, after: int, limit: int) -> Any:
        rows = super().read_raw(key, after, limit)
        self._took("read_raw", len(rows))
        return rows

    def read_after(self, key: Any, after: int, limit: int) -> Any:
        rows = super().read_after(key, after, limit)
        self._took("read_after", len(rows))
        return rows

    def inbox_read_after(self, key: Any, after: int, limit: int) -> Any:
        rows = super().inbox_read_after(key, after, limit)
        self._took("inbox_read_after", len(rows))
        return rows

    def scan(self, key: Any, after: int = 0, through: int | None = None) -> Iterator[Any]:
        self._took("scan")
        for event in super().scan(key, after, through):
            self._took("scan_row", 1)
            yield event

    def append(self, key: Any, events: Any, **kwargs: Any) -> Any:
        self._took("append")
        return super().append(key, events, **kwargs)

    def get_snapshot(self, key: Any, name: str) -> Any:
        self._took("get_snapshot")
        return super().get_snapshot(key, name)


def _agent() -> nb.Agent:
    return nb.Agent(
        name="Long",
        agent_id="long",
        model=nb.ScriptedModel(lambda messages: "ok", keep_requests=0),
    )


@pytest.fixture(scope="module")
def long_store() -> Iterator[CountingStore]:
    """One store holding a 10,000-turn and a 100-turn session, both built by the runtime."""
    store = CountingStore()
    runtime = nb.Runtime(_agent(), store=store)
    try:
        for session_id, turns in (("long", LONG), ("short", SHORT)):
            session = runtime.session(session_id)
            for i in range(turns):
                outcome = session.run(f"task {i}", timeout=WAIT)
                assert outcome.status == "completed"
    finally:
        runtime.close()
    yield store
    store.close()


def _reopen(store: CountingStore, session_id: str) -> int:
    """Events read by a notebook reopen: runtime, session, inspect, pending, snapshot, view."""
    store.reset()
    runtime = nb.Runtime(_agent(), store=store)
    try:
        session = runtime.session(session_id)
        session.inspect()
        session.pending()
        session.snapshot()
        view = SessionView(session, follow=False)
        view.close()
        return store.events_read
    finally:
        runtime.close()


class TestReopenIsBounded:
    def test_a_10000_turn_session_reopens_reading_what_a_100_turn_one_reads(
        self, long_store: CountingStore
    ) -> None:
        """A reopen reads a snapshot and its tail, whatever the history's length."""
        short = _reopen(long_store, "short")
        long = _reopen(long_store, "long")
        # Each fold reads at most the tail after its snapshot (and the view its own items).
        assert long <= 4 * SNAPSHOT_EVERY
        assert long <= short + 2 * SNAPSHOT_EVERY

    def test_history_stays_complete_after_retirement(self, long_store: CountingStore) -> None:
        """Retired turns are still there for who asks: tasks, old receipts, the transcript."""
        runtime = nb.Runtime(_agent(), store=long_store)
        try:
            session = runtime.session("long")
            long_store.reset()
            newest = session.tasks(limit=5)
            assert [t.input for t in newest] == [f"task {i}" for i in range(LONG - 5, LONG)]
            assert long_store.events_read <= 2 * SNAPSHOT_EVERY  # a recent page: no history
            tasks = session.tasks()
            assert len(tasks) == LONG
            assert tasks[0].input == "task 0"
            assert tasks[0].status == "completed"
            page = session.tasks(limit=3, before=tasks[10].turn_id)
            assert [t.input for t in page] == ["task 7", "task 8", "task 9"]
            messages = session.transcript().messages
            assert len(messages) == 2 * LONG
            assert messages[0].text == "task 0"
            assert len(session.inspect().next_context) == 2 * LONG
        finally:
            runtime.close()

    def test_the_view_shows_earlier_items_of_retired_turns(self, long_store: CountingStore) -> None:
        """Show earlier pages back past the turns kept in memory, from the log."""
        runtime = nb.Runtime(_agent(), store=long_store)
        try:
            session = runtime.session("long")
            view = SessionView(session, follow=False, max_items=4, page=2 * KEEP_TURNS * 3)
            try:
                assert "task 9999" in str(list(view.transcript.children))
                view.show_earlier()
                items = view._state.last_items(view._limit)
                texts = [i.text for i in items]
                assert len(items) == view._limit
                assert texts[-1] == "ok"
                assert "task 9940" in texts  # older than the 20 kept turns
            finally:
                view.close()
        finally:
            runtime.close()


class TestMemoryIsBounded:
    def test_a_caller_that_only_waits_holds_a_bounded_number_of_turns(self, tmp_path: Path) -> None:
        """A notebook that only runs tasks one after another (its session handle is fed
        every commit and, the store's hints saying nothing else is new, never refreshes)
        keeps no more turns in memory than the folds keep, however many it ran."""
        runtime = nb.Runtime(_agent(), store=f"sqlite:///{tmp_path / 'agentnb.sqlite'}")
        try:
            session = runtime.session("s")
            turns = 10 * KEEP_TURNS
            for i in range(turns):
                assert session.run(f"task {i}", timeout=WAIT).status == "completed"
            # the turn ids from the log itself: tasks() would refresh the handle's folds
            ids = {e.turn_id for e in session.log.scan() if e.type == "turn/start"}
            assert len(ids) == turns
            gc.collect()
            live = [o for o in gc.get_objects() if isinstance(o, TurnState) and o.turn_id in ids]
            # the driver's, the handle's and the chat view's folds, each at most twice
            # the turns they keep before they retire the older ones
            assert len(live) <= 3 * (2 * KEEP_TURNS + 1), len(live)
        finally:
            runtime.close()

    def test_the_folds_of_one_process_share_each_message(self, tmp_path: Path) -> None:
        """The driver's, the session handle's and the chat view's folds fold the same
        committed events: each message (and each tool result's message) is one object in
        memory, not one per fold."""

        @nb.tool
        def noop(n: int) -> str:
            """Do nothing."""
            return "ok"

        model = nb.ScriptedModel(
            lambda messages: nb.ToolCall("noop", {"n": 1}) if messages[-1].role == "user" else "ok",
            keep_requests=0,
        )
        agent = nb.Agent(name="Long", agent_id="long", model=model, tools=[noop])
        runtime = nb.Runtime(agent, store=f"sqlite:///{tmp_path / 'agentnb.sqlite'}")
        try:
            session = runtime.session("s")
            for i in range(KEEP_TURNS):
                assert session.run(f"task {i}", timeout=WAIT).status == "completed"
            session.snapshot()  # the chat view's fold too
            turns = {e.turn_id for e in session.log.scan() if e.type == "turn/start"}
            gc.collect()
            copies = Counter(
                o.id for o in gc.get_objects() if isinstance(o, nb.Message) and o.turn_id in turns
            )
            assert len(copies) >= 4 * KEEP_TURNS  # user, call, tool result, answer
            assert max(copies.values()) == 1, copies.most_common(3)
        finally:
            runtime.close()

    def test_messages_compaction_let_go_are_not_kept_by_token_counts(self, tmp_path: Path) -> None:
        """With a bounded context (a window and compaction), the messages older than it are
        let go by the folds and the context; counting tokens must not keep them alive."""
        window = 2000
        model = nb.ScriptedModel(lambda messages: "done " * 20, keep_requests=0)
        agent = nb.Agent(
            name="Compact",
            agent_id="compact",
            model=model,
            context_window=window,
            compaction=nb.SummaryCompactor(
                keep_last=6, model=nb.ScriptedModel(lambda messages: "a summary")
            ),
        )
        runtime = nb.Runtime(agent, store=f"sqlite:///{tmp_path / 'agentnb.sqlite'}")
        try:
            session = runtime.session("s")
            turns = 8 * KEEP_TURNS
            for _ in range(turns):
                assert session.run("task " * 30, timeout=WAIT).status == "completed"
            ids = {e.turn_id for e in session.log.scan() if e.type == "turn/start"}
            compactions = sum(1 for e in session.log.scan() if e.type == "context/replaced")
            assert compactions > 3  # the context was cut again and again
            session.snapshot()  # the chat view's fold takes what it was fed, and retires
            gc.collect()
            live = sum(
                1 for o in gc.get_objects() if isinstance(o, nb.Message) and o.turn_id in ids
            )
            # What may hold them: the folds (a bounded number of turns, two messages each,
            # shared between folds) and the working context, which fits the window.
            smallest = model.count_tokens([nb.Message(id="m", role="assistant", text="done " * 20)])
            bound = 2 * (2 * KEEP_TURNS + 1) + window // smallest
            assert live <= bound < 2 * turns, (live, bound, 2 * turns)
        finally:
            runtime.close()


class TestOneDurableStep:
    def test_the_store_calls_of_one_turn_are_pinned(self) -> None:
        """One turn (model, tool, model) costs a fixed set of commits and re-reads nothing.

        If this fails because the hot path changed on purpose, re-pin the numbers and say why.
        """

        @nb.tool
        def look(q: str) -> str:
            """Look something up.

            Args:
                q: what
            """
            return "found"

        def script(messages: list[nb.Message]) -> Any:
            if messages[-1].role == "tool":
                return "done"
            return nb.ToolCall("look", {"q": "x"})

        store = CountingStore()
        agent = nb.Agent(
            name="Step",
            agent_id="step",
            model=nb.ScriptedModel(script, keep_requests=0),
            tools=[look],
        )
        runtime = nb.Runtime(agent, store=store)
        try:
            session = runtime.session("s")
            assert session.run("warm up", timeout=WAIT).status == "completed"
            head = session.log.head()
            store.reset()
            assert session.run("one more", timeout=WAIT).status == "completed"
            written = session.log.head() - head
            # 1: run start + the first model dispatch; 2: the tool's dispatch; 3: the second
            # model dispatch; 4: the completion. Streamed text commits with the next one.
            assert store.calls["append"] == 4
            # The driver never reads back what it wrote itself (it reads only the inbox).
            assert store.by_thread["agentnb"] == 0
            # The task is handed to the driver by the submit, not read back; the driver reads
            # the inbox only after a turn, for what comes next (that look of the warm-up may
            # land after the reset, and even find the task: at most two looks, at most one
            # finding it). At each step and before the completion it asks the store's hint
            # instead (commands accepted in this process are in it; a watcher reads for
            # other processes').
            reads, empty = store.inbox_reads_by_thread, store.empty_inbox_reads_by_thread
            assert reads["agentnb"] <= 2, (reads, empty)
            assert reads["agentnb"] - empty["agentnb"] <= 1, (reads, empty)
            # The waiting caller folds what its runtime hands it; only a poll that lands
            # between a commit and its hand-over reads those events, each once at most.
            assert sum(store.by_thread.values()) <= written, (store.by_thread, written)
        finally:
            runtime.close()
            store.close()

    def test_a_new_driver_takes_over_the_folds_its_session_left(self) -> None:
        """A task that comes after the driver let the session go (its linger passed) starts
        a new driver; it starts from the folds the last one left, so it loads no snapshot
        and reads back none of the log it already folded."""
        store = CountingStore()
        runtime = nb.Runtime(_agent(), store=store)
        try:
            session = runtime.session("s")
            for i in range(3):
                assert session.run(f"task {i}", timeout=WAIT).status == "completed"
            deadline = time.monotonic() + 10 * LINGER
            while runtime.active(session.key):  # the driver lingers, then lets go
                assert time.monotonic() < deadline, "the idle driver never let go"
                time.sleep(LINGER / 5)
            store.reset()
            assert session.run("after a pause", timeout=WAIT).status == "completed"
            assert store.calls["get_snapshot"] == 0, store.calls
            assert store.by_thread["agentnb"] == 0, store.by_thread
        finally:
            runtime.close()
            store.close()


class TestTaskPagesBadInputs:
    def test_bad_limits_and_unknown_before_are_refused(self) -> None:
        """tasks(limit=, before=) refuses a limit that is not a positive int and an unknown
        task with InvalidInput, and writes nothing."""
        runtime = nb.Runtime(_agent(), store="memory://")
        try:
            session = runtime.session("s")
            session.run("only", timeout=WAIT)
            head = session.log.head()
            for bad in [0, -1, 2.5, True, "3"]:
                with pytest.raises(nb.InvalidInput):
                    session.tasks(limit=bad)  # type: ignore[arg-type]
            with pytest.raises(nb.InvalidInput, match="no task"):
                session.tasks(before="turn_nope")
            with pytest.raises(nb.InvalidInput):
                session.tasks(before="")
            assert session.log.head() == head
        finally:
            runtime.close()
