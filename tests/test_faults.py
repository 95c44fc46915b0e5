"""Fault injection: every failure ends its run with a committed reason, and nothing hangs.

A failure is injected at each await point of a step (each commit, the model call, the tool
call, the tool's result, the observers) and at the fault path itself. Each time the turn must
end within the guard with its reason in the log, the session's driver must go idle (no task
left looping), and the next task must run.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import agentnb as nb
from agentnb.models.base import Finish, ModelRequest, StreamItem, TextDelta
from agentnb.runtime.tool_call import MAX_PROGRESS_EVENTS, MAX_RECORDS
from agentnb.stores.sqlite import SQLiteStore
from tests.runtime.helpers import WAIT, events_of

Fail = Callable[[int], BaseException | None]
"""commit number (1, 2, ...) -> the error to raise at that execution commit, or None."""


class _Faults:
    """Mixed into a store: its n-th fenced commit (an execution commit) fails as told."""

    fail: Fail = staticmethod(lambda n: None)  # type: ignore[assignment]
    after: bool = False
    """Raise after the commit landed (a lost acknowledgement) instead of before it."""
    commits = 0

    def append(self, key: Any, events: Any, **kwargs: Any) -> Any:
        if kwargs.get("fence") is None:
            return super().append(key, events, **kwargs)  # type: ignore[misc]
        self.commits += 1
        exc = self.fail(self.commits)
        if exc is not None and not self.after:
            raise exc
        out = super().append(key, events, **kwargs)  # type: ignore[misc]
        if exc is not None:
            raise exc
        return out


class FaultyMemory(_Faults, nb.MemoryStore):
    pass


class FaultySQLite(_Faults, SQLiteStore):
    pass


@pytest.fixture(params=["memory", "sqlite"])
def faulty(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], _Faults]]:
    """Make fresh faulty stores of one backend; closed after the test."""
    made: list[Any] = []

    def make() -> _Faults:
        if request.param == "memory":
            store: Any = FaultyMemory()
        else:
            store = FaultySQLite(str(tmp_path / f"db{len(made)}.sqlite"))
        made.append(store)
        return store  # type: ignore[no-any-return]

    yield make
    for store in made:
        store.close()


@nb.tool
def lookup(plan: str) -> str:
    """Look up a plan's price.

    Args:
        plan: the plan's name
    """
    return f"{plan}: $10"


def tool_then_answer(messages: list[nb.Message]) -> Any:
    """One tool call, then an answer naming what the tool said (any number of turns)."""
    last = messages[-1]
    if last.role == "tool":
        return f"answer after {last.text[:40]}"
    return nb.ToolCall("lookup", {"plan": "pro"})


def make_session(
    store: Any, tools: list[Any] | None = None, script: Any = tool_then_answer, **agent: Any
) -> tuple[nb.Runtime, nb.Session]:
    model = agent.pop("model", None) or nb.ScriptedModel(script)
    runtime = nb.Runtime(
        nb.Agent(
            name="Faults",
            agent_id="faults",
            model=model,
            tools=[lookup] if tools is None else tools,
            **agent,
        ),
        store=store,
        lease_ttl=5.0,
    )
    return runtime, runtime.session("s1")


def wait_idle(runtime: nb.Runtime, session: nb.Session) -> None:
    """The session's driver ends (after its short linger): nothing is left looping."""
    deadline = time.monotonic() + WAIT
    while runtime.active(session.key):
        assert time.monotonic() < deadline, "the driver never went idle"
        time.sleep(0.02)


def check_ended_with_reason(
    session: nb.Session, outcome: nb.Outcome, status: str, reason: str
) -> None:
    """The outcome and the committed log both say how the turn ended, and why."""
    assert outcome.status == status, outcome
    assert reason in (outcome.error or ""), outcome
    ends = [e for e in session.log.scan() if e.type == f"turn/{status}"]
    assert ends, f"no turn/{status} committed"
    assert reason in (ends[-1].payload.get("error") or "")
    task = session.task(outcome.turn_id)
    assert task.status == status


def next_task_runs(session: nb.Session, turn_id: str) -> None:
    """Once the failed turn is dropped, the queue moves: a new task completes."""
    session.cancel(turn_id, timeout=WAIT)
    assert session.run("again", timeout=WAIT).status == "completed"


@contextlib.contextmanager
def given_up(
    faulty: Callable[[], _Faults],
) -> Iterator[tuple[Any, dict[str, bool], nb.Runtime, nb.Session, nb.Receipt]]:
    """A session whose store fails every execution commit after the first while
    ``broken["on"]``: its driver gave the session up and the waiter was told why."""
    store = faulty()
    broken = {"on": True}
    store.fail = lambda i: RuntimeError("disk on fire") if broken["on"] and i >= 2 else None
    runtime, session = make_session(store)
    try:
        receipt = session.submit("how much?")
        with pytest.raises(nb.StorageError, match="disk on fire"):
            receipt.wait(timeout=WAIT)
        wait_idle(runtime, session)
        yield store, broken, runtime, session, receipt
    finally:
        runtime.close()


def baseline_commits(make: Callable[[], _Faults]) -> int:
    store = make()
    runtime, session = make_session(store)
    try:
        assert session.run("how much?", timeout=WAIT).status == "completed"
        return store.commits
    finally:
        runtime.close()


class TestEveryCommitFails:
    def test_a_failed_commit_at_each_point_fails_the_turn_with_the_reason(
        self, faulty: Callable[[], _Faults]
    ) -> None:
        """A commit that raises, at each commit of a step, ends the turn failed and recorded."""
        commits = baseline_commits(faulty)
        assert commits >= 3  # run start + model dispatch, tool dispatch, ..., completion
        for n in range(1, commits + 1):
            store = faulty()
            store.fail = lambda i, n=n: RuntimeError(f"injected at commit {n}") if i == n else None
            runtime, session = make_session(store)
            try:
                outcome = session.submit("how much?").wait(timeout=WAIT)
                check_ended_with_reason(session, outcome, "failed", f"injected at commit {n}")
                wait_idle(runtime, session)
                next_task_runs(session, outcome.turn_id)
            finally:
                runtime.close()

    def test_a_lost_acknowledgement_keeps_what_was_committed(
        self, faulty: Callable[[], _Faults]
    ) -> None:
        """A commit that landed but raised: the turn ends as the log says, nothing twice."""
        commits = baseline_commits(faulty)
        for n in range(1, commits + 1):
            store = faulty()
            store.after = True
            store.fail = lambda i, n=n: RuntimeError(f"ack lost at {n}") if i == n else None
            runtime, session = make_session(store)
            try:
                outcome = session.submit("how much?").wait(timeout=WAIT)
                assert outcome.status in {"completed", "failed"}, outcome
                if outcome.status == "failed":
                    assert f"ack lost at {n}" in (outcome.error or "")
                dispatches = [e.payload["call_id"] for e in events_of(session, "tool/dispatch")]
                assert len(dispatches) == len(set(dispatches)) <= 1
                wait_idle(runtime, session)
            finally:
                runtime.close()

    def test_the_fault_path_failing_once_still_ends_the_turn(
        self, faulty: Callable[[], _Faults]
    ) -> None:
        """The commit that records the failure fails too: it is retried under the lease."""
        store = faulty()
        store.fail = lambda i: RuntimeError(f"injected at commit {i}") if i in {2, 3} else None
        runtime, session = make_session(store)
        try:
            outcome = session.submit("how much?").wait(timeout=WAIT)
            check_ended_with_reason(session, outcome, "failed", "injected at commit 2")
            wait_idle(runtime, session)
            next_task_runs(session, outcome.turn_id)
        finally:
            runtime.close()

    def test_a_store_that_keeps_failing_gives_the_session_up_with_a_word(
        self, faulty: Callable[[], _Faults]
    ) -> None:
        """When nothing can be committed, the driver stops and the waiter is told why."""
        with given_up(faulty) as (_, broken, _, session, receipt):
            broken["on"] = False  # the store heals: start() closes the cut-off run
            session.start()
            recovered = next(
                e for e in session.log.follow(0, idle_timeout=WAIT) if e.type == "recovery/applied"
            )
            assert recovered.turn_id == receipt.turn_id
            outcome = receipt.wait(timeout=WAIT)
            assert outcome.status == "interrupted"

    def test_a_recovery_that_cannot_commit_lets_the_lease_go(
        self, faulty: Callable[[], _Faults]
    ) -> None:
        """A driver that takes the lease to close a cut-off run, and cannot commit even that,
        stops with the reason and releases the lease (nothing keeps renewing it), so a later
        start, once the store heals, recovers the run at once."""
        with given_up(faulty) as (store, broken, runtime, session, receipt):
            session.start()  # the store still fails: the recovery's commit fails too
            deadline = time.monotonic() + WAIT
            while runtime.failure(session.key) is None:  # the new driver tried and stopped
                assert time.monotonic() < deadline, "the recovery was never tried"
                time.sleep(0.02)
            assert "disk on fire" in (runtime.failure(session.key) or "")
            with pytest.raises(nb.StorageError, match="disk on fire"):
                receipt.wait(timeout=WAIT)
            assert store.current_lease(session.key) is None
            broken["on"] = False
            session.start()
            # The waiter waits for the driver just kicked: the run is closed by its recovery,
            # not called cut off before the driver even looked.
            assert receipt.wait(timeout=WAIT).status == "interrupted"
            assert "recovery/applied" in [e.type for e in session.log.scan()]

    def test_an_observer_that_raises_does_not_fail_the_run(
        self, faulty: Callable[[], _Faults]
    ) -> None:
        """Live observers are told after a commit; their failure is not the run's."""
        runtime, session = make_session(faulty())

        def explode(event: Any) -> None:
            raise RuntimeError("observer broke")

        runtime.hub.publish = explode  # type: ignore[method-assign]
        try:
            assert session.run("how much?", timeout=WAIT).status == "completed"
        finally:
            runtime.close()


class _BrokenModel(nb.Model):
    """A model whose stream breaks after ``pieces`` text pieces, with a non-model error."""

    name = "broken"

    def __init__(self, pieces: int) -> None:
        self.pieces = pieces

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        for i in range(self.pieces):
            yield TextDelta(f"piece {i} ")
            await asyncio.sleep(0)
        raise KeyError("the provider's SDK broke")
        yield Finish("stop")  # pragma: no cover - unreachable, makes this a generator


class TestModelFaults:
    @pytest.mark.parametrize("pieces", [0, 3])
    def test_an_unexpected_model_error_fails_the_turn(
        self, faulty: Callable[[], _Faults], pieces: int
    ) -> None:
        """Any exception from the model, before or during its stream, fails the turn."""
        runtime, session = make_session(faulty(), model=_BrokenModel(pieces))
        try:
            outcome = session.submit("hi").wait(timeout=WAIT)
            check_ended_with_reason(session, outcome, "failed", "the provider's SDK broke")
            assert events_of(session, "model/end")[-1].payload["status"] == "failed"
            wait_idle(runtime, session)
        finally:
            runtime.close()

    def test_a_lone_surrogate_from_the_model_is_replaced(
        self, faulty: Callable[[], _Faults]
    ) -> None:
        """Text that UTF-8 cannot carry is repaired at the boundary, never a failed commit."""
        runtime, session = make_session(faulty(), script=["half an emoji \ud83d", "next"])
        try:
            outcome = session.run("hi", timeout=WAIT)
            assert outcome.status == "completed"
            assert outcome.output == "half an emoji \ufffd"
            assert session.run("again", timeout=WAIT).output == "next"
        finally:
            runtime.close()

    def test_a_surrogate_pair_split_across_chunks_is_joined(
        self, faulty: Callable[[], _Faults]
    ) -> None:
        """An emoji streamed as two halves becomes the emoji, not two replacement marks."""
        model = nb.ScriptedModel(["smile \ud83d\ude00"], chunk_size=7)
        runtime, session = make_session(faulty(), model=model)
        try:
            assert session.run("hi", timeout=WAIT).output == "smile \U0001f600"
        finally:
            runtime.close()

    def test_tool_arguments_nested_too_deep_go_back_to_the_model(
        self, faulty: Callable[[], _Faults]
    ) -> None:
        """Arguments nested too deeply to record (70 levels) are a tool error the model is
        told, as malformed JSON is; the turn goes on."""
        deep: Any = 1
        for _ in range(70):
            deep = {"a": deep}
        runtime, session = make_session(
            faulty(), script=[nb.ToolCall("lookup", {"plan": deep}), "told"]
        )
        try:
            outcome = session.submit("hi").wait(timeout=WAIT)
            assert outcome.status == "completed"
            result = events_of(session, "tool/result")[-1].payload
            assert result["status"] == "error"
            assert "nested deeper than" in result["output"]
        finally:
            runtime.close()


class _NoStr(Exception):
    def __str__(self) -> str:
        raise RuntimeError("even the message is broken")


class _Unprintable:
    def __str__(self) -> str:
        raise ValueError("cannot print me")


@nb.tool
def surrogate() -> str:
    """Returns text with a lone surrogate."""
    return "x \ud800 y"


@nb.tool
def exits() -> str:
    """Calls sys.exit inside the tool."""
    raise SystemExit(3)


@nb.tool
async def interrupted() -> str:
    """Raises KeyboardInterrupt from an async tool."""
    raise KeyboardInterrupt


@nb.tool
def unprintable_error() -> str:
    """Raises an exception whose message cannot be read."""
    raise _NoStr


@nb.tool
def unprintable_result() -> Any:
    """Returns an object that cannot become text."""
    return _Unprintable()


@nb.tool
def chatty(ctx: nb.ToolContext) -> str:
    """Reports progress far past one write batch."""
    for i in range(12_000):
        ctx.progress({"step": i})
    return "done"


@nb.tool
def recorder(ctx: nb.ToolContext) -> str:
    """Records application events past the per-call limit."""
    for i in range(MAX_RECORDS + 5):
        ctx.record("acme/note", {"i": i})
    return "unreachable"


class TestToolFaults:
    @pytest.mark.parametrize(
        ("tool", "status", "says"),
        [
            (surrogate, "success", "x \ufffd y"),
            (exits, "error", "SystemExit"),
            (interrupted, "error", "KeyboardInterrupt"),
            (unprintable_error, "error", "could not be read"),
            (unprintable_result, "error", "cannot print me"),
            (recorder, "error", "limit per call"),
        ],
        ids=["surrogate", "exit", "keyboard", "no-str", "unprintable", "records"],
    )
    def test_a_misbehaving_tool_becomes_a_result_the_model_sees(
        self, faulty: Callable[[], _Faults], tool: nb.Tool, status: str, says: str
    ) -> None:
        """Whatever a tool raises or returns, the model gets a result and the turn completes."""
        script = [nb.ToolCall(tool.name, {}), "recovered", "next one"]
        runtime, session = make_session(faulty(), tools=[tool], script=script)
        try:
            outcome = session.run("go", timeout=WAIT)
            assert outcome.status == "completed", outcome
            result = events_of(session, "tool/result")[-1].payload
            assert result["status"] == status
            assert says in result["output"]
            assert session.run("again", timeout=WAIT).output == "next one"
        finally:
            runtime.close()

    def test_progress_past_the_bound_is_coalesced_with_a_count(
        self, faulty: Callable[[], _Faults]
    ) -> None:
        """12,000 progress reports keep the first ones and the newest, counting the rest."""
        script = [nb.ToolCall("chatty", {}), "done"]
        runtime, session = make_session(faulty(), tools=[chatty], script=script)
        try:
            assert session.run("go", timeout=WAIT).status == "completed"
            chunks = events_of(session, "tool/chunk")
            assert len(chunks) == MAX_PROGRESS_EVENTS
            last = chunks[-1].payload
            assert last["data"] == {"step": 11_999}
            assert last["index"] == 11_999
            assert last["skipped"] == 12_000 - MAX_PROGRESS_EVENTS
            assert [c.payload["skipped"] for c in chunks[:-1]] == [0] * (len(chunks) - 1)
        finally:
            runtime.close()


@nb.tool
async def slow(seconds: float) -> str:
    """Sleeps (an async tool: cancellable).

    Args:
        seconds: how long
    """
    await asyncio.sleep(seconds)
    return "slept"


@nb.tool
def stubborn(seconds: float) -> str:
    """Sleeps in a thread and ignores every stop request.

    Args:
        seconds: how long
    """
    time.sleep(seconds)
    return "slept anyway"


class TestTimeLimits:
    def test_agent_time_limit_interrupts_with_the_reason(self) -> None:
        """Agent(max_turn_seconds=) interrupts a task that runs too long, saying so."""
        script = [nb.ToolCall("slow", {"seconds": 30}), "resumed answer"]
        runtime, session = make_session(
            "memory://", tools=[slow], script=script, max_turn_seconds=0.3
        )
        try:
            outcome = session.submit("go").wait(timeout=WAIT)
            assert outcome.status == "interrupted"
            assert "time limit" in (outcome.error or "")
            stop = events_of(session, "run/stop_requested")[-1].payload
            assert "time limit" in stop["reason"]
            assert session.inspect().interrupted_turn == outcome.turn_id
        finally:
            runtime.close()

    def test_submit_timeout_applies_to_that_task_only(self) -> None:
        """submit(timeout=) bounds one task; the next task runs without it."""
        script = [
            nb.ToolCall("slow", {"seconds": 30}),
            nb.ToolCall("slow", {"seconds": 0.05}),
            "ok",
        ]
        runtime, session = make_session("memory://", tools=[slow], script=script)
        try:
            outcome = session.submit("go", timeout=0.3).wait(timeout=WAIT)
            assert outcome.status == "interrupted"
            assert "0.3 s" in (outcome.error or "")
            session.reconcile(
                {
                    c.call_id: nb.ToolOutcome.unknown()
                    for c in session.inspect().uncertain_tool_calls
                },
                reason="the sleep had no effect",
            )
            assert session.resume(outcome.turn_id).wait(timeout=WAIT).status == "interrupted"
        finally:
            runtime.close()

    def test_bad_time_limits_are_refused(self) -> None:
        """A limit that is not a positive number of seconds raises InvalidInput, writes nothing."""
        runtime, session = make_session("memory://")
        try:
            for bad in [0, -1, float("nan"), float("inf"), "10", True]:
                with pytest.raises(nb.InvalidInput):
                    session.submit("go", timeout=bad)  # type: ignore[arg-type]
                with pytest.raises(nb.InvalidInput):
                    nb.Agent(
                        name="a",
                        agent_id="a",
                        model=nb.ScriptedModel([]),
                        max_turn_seconds=bad,  # type: ignore[arg-type]
                    )
            assert session.inbox.head() == 0
        finally:
            runtime.close()


class TestClose:
    def test_close_mid_run_commits_the_runs_end_and_releases_the_lease(self) -> None:
        """close() stops the run cooperatively and records why before releasing the lease."""
        store = nb.MemoryStore()
        runtime, session = make_session(
            store, tools=[slow], script=[nb.ToolCall("slow", {"seconds": 30})]
        )
        receipt = session.submit("go")
        deadline = time.monotonic() + WAIT
        while not events_of(session, "action/start"):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        runtime.close(timeout=5)
        log = nb.SessionLog(store, session.key)
        events = list(log.scan())
        assert events[-1].type == "run/end"
        assert events[-1].payload["status"] == "interrupted"
        stops = [e for e in events if e.type == "run/stop_requested"]
        assert len(stops) == 1
        assert "closed" in stops[0].payload["reason"]
        assert store.current_lease(session.key) is None
        assert receipt.turn_id

    def test_a_sync_tool_that_ignores_close_is_left_behind_and_reported(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        """close(timeout) does not wait forever: the run ends, its call is uncertain."""
        store = nb.MemoryStore()
        runtime, session = make_session(
            store, tools=[stubborn], script=[nb.ToolCall("stubborn", {"seconds": 3})]
        )
        session.submit("go")
        deadline = time.monotonic() + WAIT
        while not events_of(session, "action/start"):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        with caplog.at_level("WARNING", logger="agentnb.runtime"):
            runtime.close(timeout=0.3)
        assert "stubborn" in caplog.text
        log = nb.SessionLog(store, session.key)
        ends = [e for e in log.scan() if e.type == "run/end"]
        assert ends[-1].payload["status"] == "interrupted"
        reopened = nb.Runtime(runtime.agent, store=store)
        try:
            calls = reopened.session("s1").inspect().uncertain_tool_calls
            assert [c.tool_name for c in calls] == ["stubborn"]
        finally:
            reopened.close()


class TestReceiptsAndCancel:
    def test_a_receipt_follows_its_turn_past_a_suspension(self) -> None:
        """wait() again after an approval let the turn complete returns completed."""

        @nb.tool(confirm=True)
        def order(item: str) -> str:
            """Orders an item.

            Args:
                item: what
            """
            return f"ordered {item}"

        script = [nb.ToolCall("order", {"item": "desk"}), "ordered it"]
        runtime, session = make_session("memory://", tools=[order], script=script)
        try:
            receipt = session.submit("order a desk")
            assert receipt.wait(timeout=WAIT).status == "suspended"
            session.respond(next(iter(session.pending())), True)
            outcome = receipt.wait(timeout=WAIT)
            assert outcome.status == "completed"
            assert outcome.output == "ordered it"
        finally:
            runtime.close()

    def test_cancel_of_a_running_turn_interrupts_then_cancels(self) -> None:
        """cancel() on a running turn ends it cancelled in one call; the queue moves on."""
        script = [nb.ToolCall("slow", {"seconds": 30}), "second task"]
        runtime, session = make_session("memory://", tools=[slow], script=script)
        try:
            first = session.submit("long")
            second = session.submit("next")
            deadline = time.monotonic() + WAIT
            while not events_of(session, "action/start"):
                assert time.monotonic() < deadline
                time.sleep(0.01)
            session.cancel(first.turn_id, timeout=WAIT)
            assert session.task(first.turn_id).status == "cancelled"
            assert first.wait(timeout=WAIT).status == "cancelled"
            assert second.wait(timeout=WAIT).output == "second task"
            types = [e.type for e in session.log.scan()]
            assert types.index("run/stop_requested") < types.index("turn/cancelled")
        finally:
            runtime.close()


class TestLiveEvents:
    def test_a_session_subscription_sees_only_its_own_session(self) -> None:
        """One person's streamed text never reaches another session's subscriber."""
        runtime, mine = make_session("memory://", script=lambda m: "a reply for whoever asks")
        other = runtime.session("someone-else", user_id="bob")
        sub = mine.events()
        everything = runtime.all_events()
        try:
            assert other.run("hello", timeout=WAIT).status == "completed"
            assert mine.run("hello", timeout=WAIT).status == "completed"
            seen: list[Any] = []
            while (item := sub.get(timeout=0.2)) is not None:
                seen.append(item)
            assert seen
            assert {e.session for e in seen} == {mine.key}
            sessions = set()
            while (item := everything.get(timeout=0.2)) is not None:
                sessions.add(item.session)
            assert sessions == {mine.key, other.key}
        finally:
            sub.close()
            everything.close()
            runtime.close()


class TestParked:
    def test_wait_and_inspect_name_the_turn_the_queue_waits_behind(self) -> None:
        """A task queued behind a failed turn: wait() raises Parked, inspect() names it."""
        runtime, session = make_session("memory://", script=[nb.ModelError("boom"), "later"])
        try:
            failed = session.submit("one")
            queued = session.submit("two")
            assert failed.wait(timeout=WAIT).status == "failed"
            with pytest.raises(nb.Parked) as parked:
                queued.wait(timeout=WAIT)
            assert parked.value.blocking_turn == failed.turn_id
            assert "session.resume" in str(parked.value)
            assert "session.cancel" in str(parked.value)
            inspection = session.inspect()
            assert inspection.blocked_by == failed.turn_id
            assert inspection.blocked_status == "failed"
            session.cancel(failed.turn_id, timeout=WAIT)
            assert queued.wait(timeout=WAIT).output == "later"
            assert session.inspect().blocked_by is None
        finally:
            runtime.close()


def test_threads_are_not_left_behind() -> None:
    """Closing every runtime of this module leaves no agentnb loop thread running."""
    deadline = time.monotonic() + WAIT
    while any(t.name.startswith("agentnb-runtime-faults") for t in threading.enumerate()):
        assert time.monotonic() < deadline
        time.sleep(0.05)


def _child(mode: str, db: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests._fault_child", mode, f"sqlite:///{db}"],
        cwd=Path(__file__).resolve().parent.parent,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _child_agent() -> nb.Agent:
    from tests import _fault_child

    return _fault_child.agent(["recovered"])


class TestProcesses:
    def test_a_dead_holder_on_this_host_is_taken_over_at_once(self, tmp_path: Path) -> None:
        """After kill -9, inspect() says the holder is dead and a new runtime recovers the run
        well before the dead process's 60 s lease would expire."""
        db = tmp_path / "db.sqlite"
        child = _child("hold", db)
        try:
            assert child.stdout is not None
            line = child.stdout.readline().split()
            assert line[:1] == ["RUNNING"], child.stderr.read() if child.stderr else ""
            owner = line[1]
            os.kill(child.pid, signal.SIGKILL)
            child.wait(WAIT)
        finally:
            if child.poll() is None:
                child.kill()
            child.communicate()
        store = nb.open_store(f"sqlite:///{db}")
        runtime = nb.Runtime(_child_agent(), store=store)
        try:
            session = runtime.session("s1")
            lease = store.current_lease(session.key)
            assert lease is not None  # not expired: a 60 s lease
            assert lease.owner == owner
            inspection = session.inspect()
            assert inspection.holder is not None
            assert inspection.holder.owner == owner
            assert inspection.holder.alive is False
            turn_id = session.tasks()[0].turn_id
            assert inspection.interrupted_turn == turn_id
            session.start()
            recovered = next(
                e for e in session.log.follow(0, idle_timeout=WAIT) if e.type == "recovery/applied"
            )
            assert recovered.turn_id == turn_id
            # Still well inside the dead holder's lease: the takeover did not wait for it.
            assert recovered.occurred_at.timestamp() < lease.expires_at
            assert [c.tool_name for c in session.inspect().uncertain_tool_calls] == ["nap"]
        finally:
            runtime.close()
            store.close()

    def test_a_script_that_never_closes_its_runtime_exits_cleanly(self, tmp_path: Path) -> None:
        """The README snippet as a script: exit status 0, no traceback, the lease released."""
        db = tmp_path / "db.sqlite"
        child = _child("finish", db)
        out, err = child.communicate(timeout=WAIT * 3)
        assert child.returncode == 0, err
        assert out.split("\n")[:2] == ["all done", "DONE"]
        assert "Traceback" not in err
        assert "never retrieved" not in err
        store = nb.open_store(f"sqlite:///{db}")
        try:
            key = nb.SessionKey("default", "default", "fault-child", "s1")
            assert store.current_lease(key) is None
        finally:
            store.close()

    def test_exit_in_the_middle_of_a_run_records_the_runs_end(self, tmp_path: Path) -> None:
        """An interpreter that exits mid-run stops the run and commits why, then lets go."""
        db = tmp_path / "db.sqlite"
        child = _child("exit-mid-run", db)
        out, err = child.communicate(timeout=WAIT * 3)
        assert child.returncode == 0, err
        assert out.startswith("RUNNING")
        assert "Traceback" not in err
        store = nb.open_store(f"sqlite:///{db}")
        try:
            key = nb.SessionKey("default", "default", "fault-child", "s1")
            assert store.current_lease(key) is None
            events = list(store.scan(key))
            assert events[-1].type == "run/end"
            assert events[-1].payload["status"] == "interrupted"
            assert "closed" in (events[-1].payload["reason"] or "")
        finally:
            store.close()


class TestModelRetries:
    def test_a_retryable_error_after_streamed_output_is_not_retried(self) -> None:
        """Once part of a reply streamed, a 'retryable' failure fails the turn, said why."""
        failing = nb.Reply(text="half an ans", error=nb.ModelError("connection reset", True))
        model = nb.ScriptedModel([failing, "never asked"])
        runtime, session = make_session("memory://", model=model)
        try:
            outcome = session.submit("hi").wait(timeout=WAIT)
            assert outcome.status == "failed"
            assert "not retried" in (outcome.error or "")
            assert model.calls == 1
            assert events_of(session, "model/retry") == []
        finally:
            runtime.close()


class TestIds:
    def test_an_id_with_a_lone_surrogate_is_refused(self, tmp_path: Path) -> None:
        """No store can encode a lone surrogate: an id holding one is InvalidInput, not a crash."""
        runtime = nb.Runtime(
            nb.Agent(name="I", agent_id="ids", model=nb.ScriptedModel(["x"])),
            store=f"sqlite:///{tmp_path / 'db.sqlite'}",
        )
        try:
            with pytest.raises(nb.InvalidInput, match="surrogate"):
                runtime.session("half \ud800 emoji")
            assert runtime.sessions() == []
        finally:
            runtime.close()
