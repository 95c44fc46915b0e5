"""Session operations on a real runtime: submit, queue, steer, inject, send, wait, restart."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import agentnb as nb
from agentnb.live import LiveEvent
from agentnb.projections.state import INSIDE_A_STEP, SessionState
from agentnb.runtime.engine import LINGER
from tests.remote import DOORS, through_doors
from tests.runtime.helpers import WAIT, Gate, event_types, events_of, gated_script

MakeRuntime = Callable[..., nb.Runtime]


@pytest.fixture
def make_runtime(
    make_runtime: MakeRuntime, door: str, request: pytest.FixtureRequest
) -> MakeRuntime:
    """The runtime, with sessions reached through the parametrized door (local or remote)."""
    return through_doors(make_runtime, request)


def _normalise(events: list[nb.Event]) -> list[tuple[str, Any]]:
    """Event types and payloads with ids and times taken out (for determinism checks)."""
    import re

    id_pattern = re.compile(r"\b([a-z]+)_(?:[a-z]+_)*[0-9a-f]{32}\b")

    def scrub(value: Any) -> Any:
        if isinstance(value, dict):
            # A checkpoint's context digest covers the messages' ids, which are random.
            skip = {"latency_ms", "duration_ms", "context_digest"}
            return {k: scrub(v) for k, v in value.items() if k not in skip}
        if isinstance(value, list | tuple):
            return [scrub(v) for v in value]
        if isinstance(value, str):
            return id_pattern.sub(r"\1_<id>", value)
        return value

    return [(e.type, scrub(e.payload)) for e in events]


@nb.tool
def lookup_price(plan: str) -> str:
    """Look up the monthly price of a plan.

    Args:
        plan: the plan's name
    """
    return {"basic": "$5", "pro": "$10"}.get(plan, "unknown")


class TestSubmit:
    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_submit_returns_before_the_model_is_called(self, make_runtime: MakeRuntime) -> None:
        """submit() returns a queued receipt (run_id None) before any model call happens."""
        gate = Gate()
        model = nb.ScriptedModel(gated_script(["done"], {0: gate}))
        session = make_runtime(model).session("s1", user_id="alice")
        receipt = session.submit("hello")
        assert receipt.run_id is None
        assert receipt.status == "queued"
        assert receipt.turn_id.startswith("turn_")
        gate.wait_arrived()
        gate.release()
        outcome = receipt.wait(timeout=WAIT)
        assert outcome.status == "completed"
        assert outcome.output == "done"
        assert outcome.turn_id == receipt.turn_id

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_transcript_holds_user_assistant_and_tool_messages_in_order(
        self, make_runtime: MakeRuntime
    ) -> None:
        """A tool-using turn leaves user, assistant (tool call), tool and assistant messages."""
        model = nb.ScriptedModel([nb.ToolCall("lookup_price", {"plan": "pro"}), "Pro costs $10."])
        session = make_runtime(model, [lookup_price]).session("s1")
        outcome = session.run("How much is pro?", timeout=WAIT)
        assert outcome.status == "completed"
        messages = session.transcript().messages
        assert [m.role for m in messages] == ["user", "assistant", "tool", "assistant"]
        assert messages[1].tool_calls[0].name == "lookup_price"
        assert messages[2].text == "$10"
        assert messages[2].call_id == messages[1].tool_calls[0].call_id
        assert messages[3].text == "Pro costs $10."
        assert session.transcript().as_of_seq == session.log.head()

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_await_receipt_works_from_asyncio(self, make_runtime: MakeRuntime) -> None:
        """A receipt is awaitable, so async code can wait without blocking its loop."""
        session = make_runtime(nb.ScriptedModel(["hi"])).session("s1")

        async def main() -> nb.Outcome:
            return await session.submit("hello")

        assert asyncio.run(main()).output == "hi"

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_empty_or_non_text_input_is_refused(self, make_runtime: MakeRuntime) -> None:
        """Empty, blank or non-string input raises InvalidInput and writes nothing."""
        session = make_runtime(nb.ScriptedModel(["x"])).session("s1")
        for bad in ["", "   ", None, 42]:
            with pytest.raises(nb.InvalidInput):
                session.submit(bad)  # type: ignore[arg-type]
        assert session.inbox.head() == 0
        assert session.log.head() == 0

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_wait_times_out_without_side_effects(self, make_runtime: MakeRuntime) -> None:
        """wait(timeout) raises TimeoutError and leaves the turn running."""
        gate = Gate()
        session = make_runtime(nb.ScriptedModel(gated_script(["ok"], {0: gate}))).session("s1")
        receipt = session.submit("hello")
        gate.wait_arrived()
        with pytest.raises(TimeoutError):
            session.wait(receipt, timeout=0.2)
        gate.release()
        assert receipt.wait(timeout=WAIT).status == "completed"


class TestDriverWakeups:
    def test_work_accepted_while_the_driver_finds_none_is_not_lost(
        self, make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A command accepted while an idle driver is deciding it has no work runs: the
        driver looks again instead of stopping (a lost wake-up left it queued forever)."""
        from agentnb.runtime.engine import SessionDriver

        original = SessionDriver._has_work
        looked, go_on = threading.Event(), threading.Event()

        async def slow_has_work(self: SessionDriver) -> bool:
            found = await original(self)
            if not found and not looked.is_set():
                looked.set()
                await asyncio.to_thread(go_on.wait, WAIT)
            return found

        monkeypatch.setattr(SessionDriver, "_has_work", slow_has_work)
        session = make_runtime(nb.ScriptedModel(["done"])).session("s1")
        session.start()  # nothing to do: the driver looks and finds no work
        assert looked.wait(WAIT)
        receipt = session.submit("hi")  # accepted while the driver is about to stop
        go_on.set()
        assert receipt.wait(timeout=WAIT).status == "completed"


class TestQueue:
    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_second_submit_while_busy_is_queued_and_runs_after(
        self, make_runtime: MakeRuntime
    ) -> None:
        """Two submits while busy: the second is queued with a new turn and runs after."""
        gate = Gate()
        session = make_runtime(
            nb.ScriptedModel(gated_script(["first", "second"], {0: gate}))
        ).session("s1")
        first = session.submit("one")
        gate.wait_arrived()
        second = session.submit("two")
        assert second.turn_id != first.turn_id
        statuses = {t.turn_id: t.status for t in session.tasks()}
        assert statuses == {first.turn_id: "running", second.turn_id: "queued"}
        gate.release()
        assert second.wait(timeout=WAIT).output == "second"
        tasks = session.tasks()
        assert [t.turn_id for t in tasks] == [first.turn_id, second.turn_id]
        assert [t.status for t in tasks] == ["completed", "completed"]
        assert tasks[0].ended_at is not None
        assert tasks[1].started_at is not None
        assert tasks[0].ended_at <= tasks[1].started_at
        starts = [e.turn_id for e in events_of(session, "turn/start")]
        assert starts == [first.turn_id, second.turn_id]

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_each_turn_gets_its_own_run(self, make_runtime: MakeRuntime) -> None:
        """Every dispatch starts a new run id; run ids of two turns differ."""
        session = make_runtime(nb.ScriptedModel(["a", "b"])).session("s1")
        a = session.run("one", timeout=WAIT)
        b = session.run("two", timeout=WAIT)
        assert a.run_id
        assert b.run_id
        assert a.run_id != b.run_id


class TestIdempotency:
    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_same_key_same_input_returns_the_same_receipt(self, make_runtime: MakeRuntime) -> None:
        """A retried submit with the same key and input returns the original receipt (its
        command and turn; status and run as they stand by then)."""
        session = make_runtime(nb.ScriptedModel(["a", "b"])).session("s1")
        first = session.submit("hello", key="k-1")
        again = session.submit("hello", key="k-1")
        assert (again.command_id, again.turn_id) == (first.command_id, first.turn_id)
        first.wait(timeout=WAIT)
        assert len(session.tasks()) == 1

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_same_key_other_input_conflicts(self, make_runtime: MakeRuntime) -> None:
        """The same key with different input raises IdempotencyConflict and queues nothing."""
        session = make_runtime(nb.ScriptedModel(["a"])).session("s1")
        session.submit("hello", key="k-1").wait(timeout=WAIT)
        with pytest.raises(nb.IdempotencyConflict):
            session.submit("something else", key="k-1")
        assert len(session.tasks()) == 1


class TestSteer:
    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_steer_changes_the_next_model_request(self, make_runtime: MakeRuntime) -> None:
        """Steering accepted during a tool call is in the next request/prepared and request."""
        gate = Gate()

        @nb.tool
        def slow(topic: str) -> str:
            """Research a topic slowly."""
            gate.pass_sync()
            return "notes"

        model = nb.ScriptedModel([nb.ToolCall("slow", {"topic": "plans"}), "final"])
        session = make_runtime(model, [slow]).session("s1")
        receipt = session.submit("research plans")
        gate.wait_arrived()
        steer = session.steer("focus on price", task=receipt.turn_id)
        assert steer.turn_id == receipt.turn_id
        gate.release()
        receipt.wait(timeout=WAIT)
        prepared = events_of(session, "request/prepared")
        assert len(prepared) == 2
        assert "focus on price" in [m["text"] for m in prepared[1].payload["messages"]]
        assert "focus on price" in [m.text for m in model.requests[1]]
        applied = [i for e in events_of(session, "input/applied") for i in e.payload["input_ids"]]
        assert applied.count(steer.input_id) == 1

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_steer_of_a_finished_task_raises_not_running(self, make_runtime: MakeRuntime) -> None:
        """Steering a task that already finished is refused with NotRunning."""
        session = make_runtime(nb.ScriptedModel(["done"])).session("s1")
        receipt = session.submit("x")
        receipt.wait(timeout=WAIT)
        with pytest.raises(nb.NotRunning):
            session.steer("too late", task=receipt.turn_id)
        with pytest.raises(nb.NotRunning):
            session.steer("nothing runs")

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_steer_during_the_final_model_call_gets_one_more_step(
        self, make_runtime: MakeRuntime
    ) -> None:
        """Guidance accepted while the final answer streams gets another step, same run."""
        gate = Gate()
        model = nb.ScriptedModel(gated_script(["first answer", "revised answer"], {0: gate}))
        session = make_runtime(model).session("s1")
        receipt = session.submit("question")
        gate.wait_arrived()
        session.steer("also mention the price")
        gate.release()
        outcome = receipt.wait(timeout=WAIT)
        assert outcome.output == "revised answer"
        assert model.calls == 2
        runs = {e.run_id for e in events_of(session, "model/dispatch")}
        assert runs == {outcome.run_id}
        assert "also mention the price" in [m.text for m in model.requests[1]]

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_steer_of_another_task_is_refused(self, make_runtime: MakeRuntime) -> None:
        """steer(task=...) naming a turn that is not running raises NotRunning."""
        gate = Gate()
        session = make_runtime(nb.ScriptedModel(gated_script(["a", "b"], {0: gate}))).session("s1")
        session.submit("one")
        gate.wait_arrived()
        queued = session.submit("two")
        try:
            with pytest.raises(nb.NotRunning):
                session.steer("hi", task=queued.turn_id)
        finally:
            gate.release()
        queued.wait(timeout=WAIT)


def texts(messages: Any) -> list[str]:
    return [m.text for m in messages]


class TestObserverOfAnotherProcess:
    @pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)
    def test_a_waiter_rereads_a_live_holders_lease_only_now_and_then(
        self, make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A runtime that only observes (another process executes) wakes at each of the
        turn's commits; the holder it found alive is trusted for a moment instead of being
        read at every wake-up. The turn still settles as it ran."""

        @nb.tool
        def pause(seconds: float) -> str:
            """Wait a moment."""
            time.sleep(seconds)
            return "ok"

        steps = 5
        model = nb.ScriptedModel([nb.ToolCall("pause", {"seconds": 0.05})] * steps + ["done"])
        executor = make_runtime(model, [pause])
        executor.session("s1")
        observer = make_runtime(model, [pause], execute=False)
        reads = []
        current_lease = observer.store.current_lease

        def counted(key: nb.SessionKey) -> Any:
            reads.append(time.monotonic())
            return current_lease(key)

        monkeypatch.setattr(observer.store, "current_lease", counted)
        commits = []
        append = executor.store.append

        def committed(*args: Any, **kwargs: Any) -> Any:
            commits.append(1)
            return append(*args, **kwargs)

        monkeypatch.setattr(executor.store, "append", committed)
        session = observer.session("s1")
        started = time.monotonic()
        receipt = session.submit("pause a few times")
        executor.kick(session.key)
        outcome = receipt.wait(timeout=WAIT)
        elapsed = time.monotonic() - started
        assert outcome.status == "completed"
        assert len(commits) > steps
        # one read per recheck window, plus the reads around the turn's start and end
        assert len(reads) <= elapsed / 0.5 + 3, (len(reads), elapsed)


class TestWaiterSleepsThroughSteps:
    @pytest.mark.parametrize("store_url", ["memory", "sqlite", "postgres"], indirect=True)
    def test_a_waiter_wakes_for_commits_that_can_settle_its_turn(
        self, make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The driver commits twice per tool step; ``wait`` sleeps through the commits of
        only a step's own events (they cannot end the turn) and still returns the outcome
        as soon as the turn ends."""

        @nb.tool
        def noop(n: int) -> str:
            """Do nothing."""
            return "ok"

        steps = 10
        model = nb.ScriptedModel([nb.ToolCall("noop", {"n": i}) for i in range(steps)] + ["done"])
        runtime = make_runtime(model, [noop])
        session = runtime.session("s1")
        wakes, commits = [], []
        wait_for_head, append = runtime.store.wait_for_head, runtime.store.append

        def waited(*args: Any, **kwargs: Any) -> Any:
            wakes.append(1)
            return wait_for_head(*args, **kwargs)

        def committed(*args: Any, **kwargs: Any) -> Any:
            commits.append(1)
            return append(*args, **kwargs)

        monkeypatch.setattr(runtime.store, "wait_for_head", waited)
        monkeypatch.setattr(runtime.store, "append", committed)
        started = time.monotonic()
        outcome = session.run("call the tool ten times", timeout=WAIT)
        elapsed = time.monotonic() - started
        assert outcome.status == "completed"
        assert outcome.output == "done"
        assert len(commits) > 2 * steps
        # besides the poll's own wake-ups, which a slow machine makes more of
        polls = elapsed / runtime.store.poll_interval
        assert len(wakes) < len(commits) / 2 + polls, (len(wakes), len(commits), elapsed)


def _what_settles(state: SessionState) -> Any:
    """Everything a waiter's outcome reads from the execution log's fold."""
    return (
        {r.run_id: (r.status, r.error, r.stop_reason) for r in state.runs.values()},
        {t.turn_id: (t.status, t.output, tuple(t.run_ids)) for t in state.turns.values()},
        dict(state.run_of_command),
        set(state.handled),
        set(state.pending),
        state.active_run,
    )


@pytest.mark.parametrize("store_url", ["memory"], indirect=True)
def test_events_inside_a_step_never_change_what_settles_a_turn(make_runtime: MakeRuntime) -> None:
    """Refolding real logs (tool calls, a failing tool, a question, a cancelled task), no
    event of a type the writer calls minor changes what a waiter's outcome is read from:
    sleeping through such commits can never delay an outcome."""

    @nb.tool
    def noop(n: int) -> str:
        """Do nothing."""
        return "ok"

    @nb.tool
    def broken(n: int) -> str:
        """Fail."""
        raise RuntimeError("the tool broke")

    model = nb.ScriptedModel(
        [
            nb.ToolCall("noop", {"n": 1}),
            nb.ToolCall("broken", {"n": 2}),
            "after the failure",
            nb.ToolCall("ask_user", {"question": "which one?"}),
            "thanks",
        ]
    )
    runtime = make_runtime(model, [noop, broken, nb.ask_user])
    session = runtime.session("s1")
    assert session.run("use the tools", timeout=WAIT).status == "completed"
    asked = session.run("ask me", timeout=WAIT)
    assert asked.status == "suspended"
    queued = session.submit("never runs")
    (request_id,) = session.pending()
    session.cancel(queued.turn_id)
    assert session.respond(request_id, "the first").wait(timeout=WAIT).status == "completed"
    state = SessionState()
    minor = 0
    for event in session.log.scan():
        before = _what_settles(state)
        state.apply(event)
        if event.type in INSIDE_A_STEP:
            minor += 1
            assert _what_settles(state) == before, event.type
    assert minor > 10


class TestSteerFromAnotherWriter:
    """Steering accepted through another store object (what another process does) while a
    turn runs is applied in that run, exactly once, even when this process has not seen it
    yet: the driver skips inbox reads its store's hint says are empty, and the completion's
    commit, conditioned on the inbox head, catches what the hint missed."""

    @pytest.mark.parametrize("store_url", ["sqlite", "postgres"], indirect=True)
    def test_steer_during_a_tool_call_is_applied_in_the_same_run(
        self, make_runtime: MakeRuntime
    ) -> None:
        gate = Gate()

        @nb.tool
        def slow(topic: str) -> str:
            """Research a topic slowly."""
            gate.pass_sync()
            return "notes"

        model = nb.ScriptedModel([nb.ToolCall("slow", {"topic": "plans"}), "draft", "final"])
        runtime = make_runtime(model, [slow])
        runtime.store.poll_interval = 60.0  # the watcher does not poll again in this test
        other = make_runtime(model, [slow], execute=False)
        session = runtime.session("s1")
        receipt = session.submit("research plans")
        gate.wait_arrived()
        steer = other.session("s1").steer("focus on price", task=receipt.turn_id)
        gate.release()
        outcome = receipt.wait(timeout=WAIT)
        assert outcome.status == "completed"
        applied = [i for e in events_of(session, "input/applied") for i in e.payload["input_ids"]]
        assert applied.count(steer.input_id) == 1
        # Seen at the step after the tool, or else when the completion's commit was refused
        # for it: then one more step of the same run answers with it.
        steered = [
            i for i, request in enumerate(model.requests) if "focus on price" in texts(request)
        ]
        assert steered
        assert steered[0] in (1, 2)
        assert outcome.output == ("draft" if steered[0] == 1 else "final")
        assert {e.run_id for e in events_of(session, "model/dispatch")} == {outcome.run_id}

    @pytest.mark.parametrize("store_url", ["sqlite", "postgres"], indirect=True)
    def test_steer_during_the_final_model_call_gets_one_more_step(
        self, make_runtime: MakeRuntime
    ) -> None:
        gate = Gate()
        model = nb.ScriptedModel(gated_script(["first answer", "revised answer"], {0: gate}))
        runtime = make_runtime(model)
        runtime.store.poll_interval = 60.0
        other = make_runtime(model, execute=False)
        session = runtime.session("s1")
        receipt = session.submit("question")
        gate.wait_arrived()
        other.session("s1").steer("also mention the price")
        gate.release()
        outcome = receipt.wait(timeout=WAIT)
        assert outcome.output == "revised answer"
        assert model.calls == 2
        assert "also mention the price" in [m.text for m in model.requests[1]]
        assert {e.run_id for e in events_of(session, "model/dispatch")} == {outcome.run_id}


class TestHandOver:
    """A task submitted here is handed to the running driver, not read back; tasks that
    another process (another store object) queued meanwhile still run, in inbox order."""

    @pytest.mark.parametrize("store_url", ["sqlite", "postgres"], indirect=True)
    def test_tasks_of_another_writer_queued_around_ours_all_run_in_order(
        self, make_runtime: MakeRuntime
    ) -> None:
        model = nb.ScriptedModel(lambda messages: f"re: {messages[-1].text}")
        runtime = make_runtime(model)
        other = make_runtime(model, execute=False)
        here, there = runtime.session("s1"), other.session("s1")
        assert here.run("warm up", timeout=WAIT).status == "completed"  # the driver lingers
        before = there.submit("queued there first")  # accepted, not handed to our driver
        ours = here.submit("submitted here")
        after = there.submit("queued there after")
        outcomes = [r.wait(timeout=WAIT) for r in (before, ours, after)]
        assert [o.output for o in outcomes] == [
            "re: queued there first",
            "re: submitted here",
            "re: queued there after",
        ]
        starts = [e.payload["command_id"] for e in events_of(here, "inbox/started")]
        assert starts[-3:] == [before.command_id, ours.command_id, after.command_id]


class TestInject:
    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_inject_while_idle_starts_nothing(self, make_runtime: MakeRuntime) -> None:
        """inject() only writes to the inbox: the execution log does not move."""
        model = nb.ScriptedModel(["ok"])
        session = make_runtime(model).session("s1")
        session.run("first", timeout=WAIT)
        head = session.log.head()
        receipt = session.inject("Reference: pro costs $10.")
        assert receipt.turn_id is None
        assert session.log.head() == head
        assert model.calls == 1

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_injected_material_is_seen_exactly_once_across_restarts(
        self, make_runtime: MakeRuntime
    ) -> None:
        """Material injected before a restart reaches the next task once, and only once."""
        first = make_runtime(nb.ScriptedModel(["ok"]))
        s1 = first.session("s1")
        s1.inject("MATERIAL-42")
        first.close()
        model = nb.ScriptedModel(["one", "two"])
        s2 = make_runtime(model).session("s1")
        s2.run("use it", timeout=WAIT)
        s2.run("again", timeout=WAIT)
        seen = [sum(m.text == "MATERIAL-42" for m in request) for request in model.requests]
        assert seen == [1, 1]  # in the context of both calls, as one message
        received = [e for e in events_of(s2, "input/received") if e.payload["kind"] == "inject"]
        assert len(received) == 1
        assert "MATERIAL-42" in [m.text for m in s2.inspect().next_context]


class TestSend:
    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_send_starts_then_steers_then_starts_a_new_turn(
        self, make_runtime: MakeRuntime
    ) -> None:
        """send(): started when idle, steered while running, a new turn after it finished."""
        gate = Gate()
        model = nb.ScriptedModel(gated_script(["a", "a2", "b"], {0: gate}))
        session = make_runtime(model).session("s1")
        first = session.send("one")
        assert first.disposition == "started"
        gate.wait_arrived()
        steered = session.send("more detail")
        assert steered.disposition == "steered"
        assert steered.turn_id == first.turn_id
        gate.release()
        assert first.wait(timeout=WAIT).output == "a2"
        assert steered.wait(timeout=WAIT).status == "completed"
        third = session.send("two")
        assert third.disposition == "started"
        assert third.turn_id != first.turn_id
        assert third.wait(timeout=WAIT).output == "b"

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_send_while_busy_with_a_queue_says_queued(self, make_runtime: MakeRuntime) -> None:
        """send() after a queued submit queues too (it cannot steer a queued turn)."""
        gate = Gate()
        model = nb.ScriptedModel(gated_script(["a", "b", "c"], {0: gate}))
        session = make_runtime(model, lease_ttl=5.0).session("s1")
        session.submit("one")
        gate.wait_arrived()
        session.submit("two")
        receipt = session.send("three")
        assert receipt.disposition == "steered"  # the running turn takes it as guidance
        gate.release()
        receipt.wait(timeout=WAIT)


class TestRestart:
    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_rebuilt_runtime_shows_the_same_conversation_without_model_calls(
        self, make_runtime: MakeRuntime
    ) -> None:
        """A new runtime on the same store shows the same transcript and tasks; no model call."""
        first = make_runtime(
            nb.ScriptedModel([nb.ToolCall("lookup_price", {"plan": "basic"}), "Basic is $5."]),
            [lookup_price],
        )
        s1 = first.session("s1", user_id="alice")
        s1.run("price of basic?", timeout=WAIT)
        transcript, tasks = s1.transcript(), s1.tasks()
        first.close()
        model = nb.ScriptedModel([])
        second = make_runtime(model, [lookup_price])
        s2 = second.open("s1", user_id="alice")
        assert s2.transcript() == transcript
        assert s2.tasks() == tasks
        s2.inspect()
        list(s2.log.scan())
        s2.start()
        assert model.calls == 0
        assert second.all_keys(user_id="alice") == [s2.key]
        assert second.all_keys(user_id="bob") == []

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_open_of_an_unknown_session_raises(self, make_runtime: MakeRuntime) -> None:
        """runtime.open() never creates: an unknown id raises SessionNotFound."""
        runtime = make_runtime(nb.ScriptedModel([]))
        with pytest.raises(nb.SessionNotFound):
            runtime.open("nope")
        assert runtime.sessions() == []

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_same_session_run_twice_gives_the_same_log(self, make_runtime: MakeRuntime) -> None:
        """Deterministic: one script, two sessions -> same event types, payloads and order."""

        def script() -> nb.ScriptedModel:
            return nb.ScriptedModel(
                [nb.ToolCall("lookup_price", {"plan": "pro"}), "Pro is $10.", "bye"]
            )

        logs = []
        for name in ("a", "b"):
            session = make_runtime(script(), [lookup_price]).session(name)
            session.run("price?", timeout=WAIT)
            session.run("thanks", timeout=WAIT)
            logs.append(_normalise(list(session.log.scan())))
        assert logs[0] == logs[1]


class TestFailures:
    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_model_error_fails_the_turn_and_parks_the_queue(
        self, make_runtime: MakeRuntime
    ) -> None:
        """A model error fails the turn with the error recorded; later submits stay queued."""
        gate = Gate()
        model = nb.ScriptedModel(
            gated_script([nb.ModelError("provider exploded"), "never"], {0: gate})
        )
        session = make_runtime(model).session("s1")
        failing = session.submit("one")
        gate.wait_arrived()
        queued = session.submit("two")
        gate.release()
        outcome = failing.wait(timeout=WAIT)
        assert outcome.status == "failed"
        assert "provider exploded" in (outcome.error or "")
        assert events_of(session, "model/end")[-1].payload["status"] == "failed"
        with pytest.raises(nb.Parked) as parked:
            queued.wait(timeout=WAIT)
        assert parked.value.blocking_turn == failing.turn_id
        assert parked.value.blocking_status == "failed"
        assert [t.status for t in session.tasks()] == ["failed", "queued"]

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_retryable_model_error_is_retried(self, make_runtime: MakeRuntime) -> None:
        """A transient model error is recorded as model/retry and the call is made again."""
        model = nb.ScriptedModel([nb.ModelError("429", retryable=True), "ok"])
        session = make_runtime(model).session("s1")
        assert session.run("x", timeout=WAIT).output == "ok"
        assert len(events_of(session, "model/retry")) == 1
        assert len(events_of(session, "model/dispatch")) == 2

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_tool_exception_becomes_an_error_result(self, make_runtime: MakeRuntime) -> None:
        """A tool that raises gives the model an error result; the turn goes on."""

        @nb.tool
        def broken(x: int) -> str:
            """Always fails."""
            raise ValueError("no such record")

        model = nb.ScriptedModel([nb.ToolCall("broken", {"x": 1}), "recovered"])
        session = make_runtime(model, [broken]).session("s1")
        assert session.run("go", timeout=WAIT).output == "recovered"
        result = events_of(session, "tool/result")[0].payload
        assert result["status"] == "error"
        assert "no such record" in result["output"]
        assert "no such record" in model.requests[1][-1].text

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_invalid_arguments_become_an_error_result(self, make_runtime: MakeRuntime) -> None:
        """Arguments that do not fit the tool never run it; the model sees what was wrong."""
        model = nb.ScriptedModel(
            [
                nb.ToolCall("lookup_price", {"plan": 5, "extra": 1}),
                nb.ToolCall("no_such_tool", {}),
                "ok",
            ]
        )
        session = make_runtime(model, [lookup_price]).session("s1")
        assert session.run("go", timeout=WAIT).status == "completed"
        results = [e.payload for e in events_of(session, "tool/result")]
        assert [r["status"] for r in results] == ["error", "error"]
        assert "no_such_tool" in results[1]["output"]
        assert events_of(session, "tool/dispatch") == []

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_step_limit_fails_the_turn(self, make_runtime: MakeRuntime) -> None:
        """A model that never stops calling tools is failed after max_steps with the reason."""
        model = nb.ScriptedModel(lambda messages: nb.ToolCall("lookup_price", {"plan": "pro"}))
        session = make_runtime(model, [lookup_price], max_steps=3).session("s1")
        outcome = session.run("loop", timeout=WAIT)
        assert outcome.status == "failed"
        assert "max_steps=3" in (outcome.error or "")
        assert model.calls == 3

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_script_that_runs_out_fails_clearly(self, make_runtime: MakeRuntime) -> None:
        """A scripted model without replies left fails the turn with a clear error."""
        session = make_runtime(nb.ScriptedModel([])).session("s1")
        outcome = session.run("x", timeout=WAIT)
        assert outcome.status == "failed"
        assert "ran out" in (outcome.error or "")


class TestCommitRules:
    def test_model_and_tool_dispatch_commit_before_the_side_effect(
        self, make_runtime: MakeRuntime
    ) -> None:
        """When a tool body runs, its tool/dispatch (and the model/dispatch) are committed."""
        seen: list[list[str]] = []
        holder: dict[str, nb.Session] = {}

        @nb.tool
        def probe(x: int) -> str:
            """Look at the log from inside the tool."""
            seen.append(event_types(holder["s"]))
            return "ok"

        model = nb.ScriptedModel([nb.ToolCall("probe", {"x": 1}), "done"])
        session = make_runtime(model, [probe]).session("s1")
        holder["s"] = session
        session.run("go", timeout=WAIT)
        assert seen
        assert seen[0][-1] == "action/start"
        assert "tool/dispatch" in seen[0]
        assert "model/dispatch" in seen[0]

    def test_tool_context_records_and_progress(self, make_runtime: MakeRuntime) -> None:
        """ctx.record() writes an application event and ctx.progress() a tool/chunk."""

        @nb.tool
        def review(doc: str, ctx: nb.ToolContext) -> str:
            """Review a document."""
            ctx.progress({"done": 50})
            ctx.record("acme/review_note", {"doc": doc, "call": ctx.call_id})
            return "reviewed"

        model = nb.ScriptedModel([nb.ToolCall("review", {"doc": "d1"}), "ok"])
        session = make_runtime(model, [review]).session("s1")
        session.run("go", timeout=WAIT)
        types = event_types(session)
        assert (
            types.index("tool/chunk") < types.index("acme/review_note") < types.index("tool/result")
        )
        note = events_of(session, "acme/review_note")[0]
        assert note.payload["doc"] == "d1"
        assert note.required is False

    def test_live_events_show_chunks_before_commit(self, make_runtime: MakeRuntime) -> None:
        """events() streams model chunks of this process as they arrive."""
        session = make_runtime(nb.ScriptedModel(["x" * 64], chunk_size=8)).session("s1")
        sub = session.events()
        chunks: list[str] = []
        done = threading.Event()

        def reader() -> None:
            for item in sub:
                if isinstance(item, LiveEvent) and item.kind == "model/chunk":
                    chunks.append(item.data["text"])
                if (
                    isinstance(item, LiveEvent)
                    and item.kind == "status"
                    and item.data.get("status") == "completed"
                ):
                    done.set()
                    return

        thread = threading.Thread(target=reader)
        thread.start()
        session.run("go", timeout=WAIT)
        assert done.wait(WAIT)
        sub.close()
        thread.join(WAIT)
        assert "".join(chunks) == "x" * 64
        assert len(chunks) == 8

    def test_status_notifications_carry_the_task_text(self, make_runtime: MakeRuntime) -> None:
        """A run's status notifications (its start and its end) carry the task's own text,
        so an observer that shows it (the worker's task lines) need not read it back."""
        session = make_runtime(nb.ScriptedModel(["ok"])).session("s1")
        sub = session.events()
        statuses: list[tuple[str, str]] = []
        done = threading.Event()

        def reader() -> None:
            for item in sub:
                if isinstance(item, LiveEvent) and item.kind == "status":
                    statuses.append((item.data["status"], item.data.get("task", "")))
                    if item.data["status"] == "completed":
                        done.set()
                        return

        thread = threading.Thread(target=reader)
        thread.start()
        session.run("count the invoices", timeout=WAIT)
        assert done.wait(WAIT)
        sub.close()
        thread.join(WAIT)
        assert statuses == [("running", "count the invoices"), ("completed", "count the invoices")]


class TestBadInputs:
    def test_agent_refuses_what_cannot_run(self) -> None:
        """Agent rejects a non-Model, duplicate tool names and a bad max_steps."""
        model = nb.ScriptedModel(["x"])
        with pytest.raises(nb.InvalidInput):
            nb.Agent(name="A", agent_id="a", model="gpt")  # type: ignore[arg-type]
        with pytest.raises(nb.InvalidInput, match="unique"):
            nb.Agent(name="A", agent_id="a", model=model, tools=[lookup_price, lookup_price])
        for bad in (0, -1, True, 2.5):
            with pytest.raises(nb.InvalidInput):
                nb.Agent(name="A", agent_id="a", model=model, max_steps=bad)  # type: ignore[arg-type]
        with pytest.raises(nb.InvalidInput):
            nb.Agent(name="", agent_id="a", model=model)

    def test_runtime_refuses_bad_arguments(self, tmp_path: Any) -> None:
        """Runtime rejects a non-Agent, an out-of-range lease and an unknown store URL."""
        agent = nb.Agent(name="A", agent_id="a", model=nb.ScriptedModel([]))
        with pytest.raises(nb.InvalidInput):
            nb.Runtime("agent", store="memory://")  # type: ignore[arg-type]
        for ttl in (0, 0.1, 10_000):
            with pytest.raises(nb.InvalidInput):
                nb.Runtime(agent, store="memory://", lease_ttl=ttl)
        with pytest.raises(nb.InvalidInput):
            nb.Runtime(agent, store="redis://localhost")
        with pytest.raises(nb.InvalidInput):
            nb.Runtime(agent, store=f"sqlite:///{tmp_path}")  # a directory, not a file

    def test_session_ids_and_operation_arguments_are_checked(
        self, make_runtime: MakeRuntime
    ) -> None:
        """Ids that are not strings and unknown command ids raise InvalidInput, writing nothing."""
        runtime = make_runtime(nb.ScriptedModel(["ok"]))
        with pytest.raises(nb.InvalidInput):
            runtime.session(42)  # type: ignore[arg-type]
        with pytest.raises(nb.InvalidInput):
            runtime.session("s1", user_id="")
        session = runtime.session("s1")
        with pytest.raises(nb.InvalidInput):
            session.submit("x", key=7)  # type: ignore[arg-type]
        with pytest.raises(nb.InvalidInput):
            session.steer("x", task=7)  # type: ignore[arg-type]
        with pytest.raises(nb.InvalidInput):
            session.interrupt(run_id=7)  # type: ignore[arg-type]
        with pytest.raises(nb.InvalidInput):
            session.wait("receipt")  # type: ignore[arg-type]
        with pytest.raises(nb.InvalidInput):
            session.task("cmd_unknown")
        assert session.inbox.head() == 0
        assert session.log.head() == 0

    def test_task_is_found_by_command_id_or_turn_id(self, make_runtime: MakeRuntime) -> None:
        """task() returns the task a submit created, by its command id or its turn id."""
        session = make_runtime(nb.ScriptedModel(["ok"])).session("s1")
        receipt = session.submit("hello")
        receipt.wait(timeout=WAIT)
        by_command = session.task(receipt.command_id)
        assert by_command.turn_id == receipt.turn_id
        assert by_command.status == "completed"
        assert session.task(receipt.turn_id) == by_command


class TestIdleLease:
    def test_wakeups_without_work_do_not_keep_the_lease(
        self, make_runtime: Callable[..., nb.Runtime]
    ) -> None:
        """A driver lingers a moment after its work, then releases the lease, even when it is
        woken again and again with nothing to do (a worker polls more often than that)."""
        runtime = make_runtime(nb.ScriptedModel(["Done."]))
        session = runtime.session("s1")
        assert session.run("hi", timeout=WAIT).status == "completed"
        deadline = time.monotonic() + 10 * LINGER
        while session.inspect().holder is not None and time.monotonic() < deadline:
            runtime.kick(session.key)  # nothing to do: it must not extend the linger
            time.sleep(LINGER / 5)
        assert session.inspect().holder is None
