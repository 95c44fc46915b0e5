"""Answers that are exactly true: receipts, steering, inspection and the log say what happened.

Each class covers one misreport of issue 25 (or 28) and runs on every store backend where the
store takes part.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import agentnb as nb
from agentnb.live import Lagged, LiveEvent, Subscription
from tests.runtime import _dead_run_child as dead
from tests.runtime.helpers import REPO, WAIT, Gate, events_of, kill_mid_tool, wait_for_event

MakeRuntime = Callable[..., nb.Runtime]

_gates: dict[str, Gate] = {}


@nb.tool
def held(name: str) -> str:
    """Wait at a gate the test opens.

    Args:
        name: the gate
    """
    _gates[name].pass_sync()
    return f"passed {name}"


@pytest.fixture
def gate() -> Iterator[Gate]:
    """A fresh gate named ``g`` for the ``held`` tool."""
    _gates["g"] = Gate()
    yield _gates["g"]
    _gates["g"].release()


class TestInspectWhatRunsAndWhatComesNext:
    def test_calls_of_a_live_run_are_running_not_uncertain(
        self, make_runtime: MakeRuntime, gate: Gate
    ) -> None:
        """A tool call of a run a live runtime executes is listed as running, never uncertain."""
        model = nb.ScriptedModel([nb.ToolCall("held", {"name": "g"}), "done"])
        session = make_runtime(model, [held]).session("s1")
        receipt = session.submit("go")
        gate.wait_arrived()
        seen = session.inspect()
        assert [c.tool_name for c in seen.running_tool_calls] == ["held"]
        assert seen.uncertain_tool_calls == ()
        gate.release()
        assert receipt.wait(timeout=WAIT).status == "completed"
        assert session.inspect().running_tool_calls == ()

    def test_reconcile_of_a_running_call_is_refused_saying_it_runs(
        self, make_runtime: MakeRuntime, gate: Gate
    ) -> None:
        """reconcile() naming a call that a live run executes raises InvalidInput: it runs."""
        model = nb.ScriptedModel([nb.ToolCall("held", {"name": "g"}), "done"])
        session = make_runtime(model, [held]).session("s1")
        receipt = session.submit("go")
        gate.wait_arrived()
        call = session.inspect().running_tool_calls[0]
        with pytest.raises(nb.InvalidInput, match="running"):
            session.reconcile({call.call_id: nb.ToolOutcome.unknown()}, "checked")
        gate.release()
        assert receipt.wait(timeout=WAIT).status == "completed"

    def test_inspect_names_the_model_tools_and_instructions_of_the_next_call(
        self, make_runtime: MakeRuntime
    ) -> None:
        """inspect() says which model, tools and instructions the next model call uses."""
        model = nb.ScriptedModel(["hi"])
        runtime = make_runtime(model, [held], instructions="Answer in French.")
        seen = runtime.session("s1").inspect()
        assert seen.model == model.name
        assert [t["name"] for t in seen.tools] == ["held"]
        assert seen.tools[0]["parameters"]["properties"]["name"]["type"] == "string"
        assert seen.instructions == "Answer in French."
        assert seen.next_context[0].text == "Answer in French."
        assert events_of(runtime.session("s1"), "run/start") == []


@pytest.fixture(params=["sqlite", "postgres"])
def shared_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store URL two processes can share (memory stores are per process)."""
    if request.param == "postgres":
        url: str = request.getfixturevalue("pg_store_url")
        return url
    return f"sqlite:///{tmp_path / 'agentnb.sqlite'}"


def _open_dead(url: str, **kwargs: Any) -> tuple[nb.Runtime, nb.Session, str, str]:
    """A runtime on ``url`` and the session a killed child left with its run open."""
    turn_id, call_id = kill_mid_tool(url)
    runtime = nb.Runtime(dead.make_agent(), store=url, **kwargs)
    return runtime, runtime.open(dead.SESSION_ID, user_id=dead.USER_ID), turn_id, call_id


class TestSteeringADeadRun:
    def test_steer_of_a_run_whose_process_died_raises_not_running_naming_resume(
        self, shared_url: str
    ) -> None:
        """After kill -9, steer() is refused (NotRunning naming resume) and nothing is accepted."""
        runtime, session, turn_id, _ = _open_dead(shared_url, execute=False)
        with runtime:
            assert session.tasks()[-1].status == "interrupted"
            assert session.interrupt() is False
            inbox_head = session.inbox.head()
            with pytest.raises(nb.NotRunning, match=r"resume\("):
                session.steer("prefer oak")
            with pytest.raises(nb.NotRunning, match=r"resume\("):
                session.steer("prefer oak", task=turn_id)
            assert session.inbox.head() == inbox_head

    def test_send_to_a_dead_run_queues_a_new_task_instead_of_steering(
        self, shared_url: str
    ) -> None:
        """send() never claims to steer a run with no live executor: it queues a new task."""
        runtime, session, turn_id, _ = _open_dead(shared_url, execute=False)
        with runtime:
            receipt = session.send("prefer oak")
            assert receipt.disposition == "queued"
            assert receipt.turn_id != turn_id
            assert receipt.run_id is None
            kinds = [e.payload["kind"] for e in session.inbox.scan()]
            assert kinds == ["submit", "submit"]  # no steer was accepted
            assert [t.status for t in session.tasks()] == ["interrupted", "queued"]


class TestResumeWithUncertainCalls:
    def test_default_refuses_and_unknown_records_the_outcome_and_goes_on(
        self, shared_url: str
    ) -> None:
        """resume() refuses an uncertain call; resume(uncertain="unknown") records it as
        unknown with the reason, tells the model, does not run it again, and completes."""
        runtime, session, turn_id, call_id = _open_dead(shared_url)
        with runtime:
            with pytest.raises(nb.UncertainToolCalls, match="uncertain='unknown'"):
                session.resume(turn_id)
            with pytest.raises(nb.InvalidInput, match="uncertain"):
                session.resume(turn_id, uncertain="guess")
            outcome = session.resume(turn_id, uncertain="unknown").wait(WAIT)
            assert (outcome.status, outcome.output) == ("completed", dead.ANSWER)
            results = [
                e for e in events_of(session, "tool/result") if e.payload["call_id"] == call_id
            ]
            assert [r.payload["status"] for r in results] == ["unknown"]
            assert "not run again" in results[0].payload["output"]
            assert [e.payload["call_id"] for e in events_of(session, "action/start")] == [call_id]
            (recovery,) = [
                e for e in events_of(session, "recovery/applied") if e.payload["resolved_call_ids"]
            ]
            assert list(recovery.payload["resolved_call_ids"]) == [call_id]
            model = runtime.agent.model
            assert isinstance(model, nb.ScriptedModel)
            assert "unknown" in model.requests[-1][-1].text
            assert session.inspect().uncertain_tool_calls == ()

    def test_a_runtime_with_auto_resume_unknown_resumes_by_itself(self, shared_url: str) -> None:
        """Runtime(auto_resume="unknown") settles the uncertain call as unknown and completes."""
        runtime, session, turn_id, call_id = _open_dead(shared_url, auto_resume="unknown")
        with runtime:
            session.start()
            outcome = session.task(turn_id).wait(WAIT)
            assert (outcome.status, outcome.output) == ("completed", dead.ANSWER)
            statuses = {
                e.payload["call_id"]: e.payload["status"] for e in events_of(session, "tool/result")
            }
            assert statuses == {call_id: "unknown"}

    def test_a_stopping_worker_with_auto_resume_unknown_queues_a_resume_that_settles(
        self, tmp_path: Path
    ) -> None:
        """A worker (auto_resume="unknown") that stops mid-call queues the turn's resume
        with uncertain="unknown"; the next worker records the call as unknown and completes."""
        import asyncio
        import threading

        @nb.tool
        async def pay(amount: int) -> str:
            """Pay (not safe to repeat)."""
            await asyncio.sleep(3600)
            return "paid"

        def script(messages: list[nb.Message]) -> Any:
            return "settled" if messages[-1].role == "tool" else nb.ToolCall("pay", {"amount": 5})

        agent = nb.Agent(name="P", agent_id="pay", model=nb.ScriptedModel(script), tools=[pay])
        url = f"sqlite:///{tmp_path / 'shared.sqlite'}"

        def serve() -> tuple[threading.Event, threading.Thread, nb.Runtime]:
            runtime = nb.Runtime(agent, store=url, lease_ttl=2.0, auto_resume="unknown")
            stop = threading.Event()
            thread = threading.Thread(target=runtime.serve, kwargs={"poll": 0.1, "stop": stop})
            thread.start()
            return stop, thread, runtime

        with nb.Runtime(agent, store=url, execute=False) as client:
            session = client.session("w")
            receipt = session.submit("pay five")
            stop, thread, first = serve()
            wait_for_event(session, "action/start")
            stop.set()
            thread.join(WAIT)
            first.close()
            resumes = [c.payload for c in session.inbox.scan() if c.payload.get("kind") == "resume"]
            assert [r["data"] for r in resumes] == [{"uncertain": "unknown"}]
            stop, thread, second = serve()
            try:
                outcome = session.task(receipt.turn_id).wait(WAIT)
            finally:
                stop.set()
                thread.join(WAIT)
                second.close()
            assert (outcome.status, outcome.output) == ("completed", "settled")
            (result,) = events_of(session, "tool/result")
            assert result.payload["status"] == "unknown"

    def test_a_bad_auto_resume_is_refused_before_the_store_opens(self, tmp_path: Path) -> None:
        """Runtime(auto_resume="yes") raises InvalidInput naming the choices; no store is made."""
        path = tmp_path / "agentnb.sqlite"
        agent = nb.Agent(name="A", agent_id="a", model=nb.ScriptedModel(["ok"]))
        with pytest.raises(nb.InvalidInput, match="'unknown'"):
            nb.Runtime(agent, store=f"sqlite:///{path}", auto_resume="yes")
        assert not path.exists()

    def test_the_worker_flag_auto_resume_unknown_does_the_same(self, tmp_path: Path) -> None:
        """agentnb worker --auto-resume=unknown resumes a turn a crash cut off, as above."""
        url = f"sqlite:///{tmp_path / 'agentnb.sqlite'}"
        turn_id, call_id = kill_mid_tool(url)
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "agentnb",
                "worker",
                "--store",
                url,
                "--poll",
                "0.2",
                "--agent",
                "tests.runtime._dead_run_child:RESUMING_AGENT",
                "--auto-resume=unknown",
            ],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            with nb.Runtime(dead.make_agent(), store=url, execute=False) as client:
                session = client.open(dead.SESSION_ID, user_id=dead.USER_ID)
                wait_for_event(session, "turn/completed")
                outcome = session.task(turn_id).wait(WAIT)
                assert (outcome.status, outcome.output) == ("completed", dead.ANSWER)
                (result,) = events_of(session, "tool/result")
                assert (result.payload["call_id"], result.payload["status"]) == (call_id, "unknown")
        finally:
            worker.send_signal(signal.SIGTERM)
            _, err = worker.communicate(timeout=WAIT)
        assert worker.returncode == 0, err


def _call_held_once(messages: list[nb.Message]) -> object:
    """Call ``held`` until a tool result is in the context, then answer."""
    if any(m.role == "tool" for m in messages):
        return "done"
    return nb.ToolCall("held", {"name": "g"})


def _interrupted(make_runtime: MakeRuntime, gate: Gate, **kwargs: Any) -> tuple[nb.Runtime, str]:
    """A runtime whose session ``s1`` holds one turn interrupted mid-tool (tool finished)."""
    model = nb.ScriptedModel(_call_held_once)
    runtime = make_runtime(model, [held], **kwargs)
    session = runtime.session("s1")
    receipt = session.submit("go")
    gate.wait_arrived()
    assert session.interrupt() is True
    gate.release()
    assert receipt.wait(WAIT).status == "interrupted"
    return runtime, receipt.turn_id


class TestRetriedSubmit:
    def test_a_retry_after_the_task_finished_returns_its_current_status_and_run(
        self, make_runtime: MakeRuntime
    ) -> None:
        """submit(text, key=k) again returns the existing receipt: its status and run now."""
        session = make_runtime(nb.ScriptedModel(["done"])).session("s1")
        first = session.submit("hello", key="req-1")
        assert (first.status, first.run_id) == ("queued", None)
        outcome = first.wait(WAIT)
        again = session.submit("hello", key="req-1")
        assert (again.command_id, again.turn_id) == (first.command_id, first.turn_id)
        assert (again.status, again.run_id) == ("completed", outcome.run_id)
        assert again.wait(WAIT) == outcome
        assert len(session.tasks()) == 1


class TestReceiptsObserveTheirRun:
    def test_the_submit_receipt_keeps_the_suspended_run_and_respond_has_its_own(
        self, make_runtime: MakeRuntime
    ) -> None:
        """After respond, the submit's receipt reports the run before the suspension; the
        receipt respond returned reports the continuation; the task reports the turn."""

        @nb.tool(confirm=True)
        def buy(item: str) -> str:
            """Buy an item.

            Args:
                item: what
            """
            return f"bought {item}"

        model = nb.ScriptedModel([nb.ToolCall("buy", {"item": "desk"}), "bought it"])
        session = make_runtime(model, [buy]).session("s1")
        receipt = session.submit("buy a desk")
        suspended = receipt.wait(WAIT)
        assert suspended.status == "suspended"
        answered = session.respond(next(iter(session.pending())), True)
        continued = answered.wait(WAIT)
        assert (continued.status, continued.output) == ("completed", "bought it")
        assert continued.turn_id == suspended.turn_id
        assert continued.run_id != suspended.run_id
        assert receipt.wait(WAIT) == suspended
        whole = session.task(receipt.turn_id).wait(WAIT)
        assert (whole.status, whole.run_id) == ("completed", continued.run_id)
        assert session.tasks()[-1].outcome == whole

    def test_the_interrupted_receipt_stays_interrupted_after_resume(
        self, make_runtime: MakeRuntime, gate: Gate
    ) -> None:
        """The receipt of an interrupted run still says interrupted once a resume completed
        the turn; the resume's receipt says completed."""
        runtime, turn_id = _interrupted(make_runtime, gate)
        session = runtime.session("s1")
        first_run = session.tasks()[-1].run_ids[0]
        resumed = session.resume(turn_id).wait(WAIT)
        assert resumed.status == "completed"
        (task,) = session.tasks()
        assert task.outcome is not None
        assert task.outcome.status == "completed"
        submit = nb.Receipt(task.command_id or "", turn_id, None, "queued", None, session)
        stopped = submit.wait(WAIT)
        assert (stopped.status, stopped.run_id) == ("interrupted", first_run)


class TestConcurrentResume:
    def test_a_second_resume_while_one_is_queued_is_refused(
        self, make_runtime: MakeRuntime, gate: Gate
    ) -> None:
        """resume() while a resume of the turn waits to run raises CannotResume, writing nothing."""
        runtime, turn_id = _interrupted(make_runtime, gate)
        runtime.close()
        client = make_runtime(nb.ScriptedModel(["done"]), [held], execute=False).open("s1")
        client.resume(turn_id)
        head = client.inbox.head()
        with pytest.raises(nb.CannotResume, match="already queued"):
            client.resume(turn_id)
        assert client.inbox.head() == head

    def test_a_racing_second_resume_is_rejected_with_the_reason(
        self, make_runtime: MakeRuntime, gate: Gate
    ) -> None:
        """Two resumes accepted at once: one continues the turn; the other's outcome is
        rejected, with "a continuation is already queued", never cancelled."""
        runtime, turn_id = _interrupted(make_runtime, gate)
        runtime.close()
        client = make_runtime(nb.ScriptedModel(["done"]), [held], execute=False).open("s1")
        first = client.resume(turn_id)
        # A second caller (another process) that checked before the first was accepted:
        racing, _ = client.inbox.accept("resume", turn_id=turn_id)
        second = nb.Receipt(racing.payload["command_id"], turn_id, None, "queued", None, client)
        make_runtime(nb.ScriptedModel(["done"]), [held]).open("s1").start()
        assert first.wait(WAIT).status == "completed"
        refused = second.wait(WAIT)
        assert (refused.status, refused.run_id) == ("rejected", None)
        assert "a continuation is already queued" in (refused.error or "")


class TestAuxiliaryModelCalls:
    def test_the_summariser_call_is_marked_kept_out_of_the_chat_and_counted_apart(
        self, store_url: str
    ) -> None:
        """A compaction's model call is request/prepared purpose="compaction": no empty reply
        item is left in the chat, and its tokens count under compaction, not as a model call
        (nor as an unreported one)."""
        agent = nb.Agent(
            name="C",
            agent_id="compact",
            model=nb.ScriptedModel(lambda messages: "ok"),
            compaction=nb.SummaryCompactor(
                trigger=1.0, keep_last=2, model=nb.ScriptedModel(lambda messages: "a summary")
            ),
            context_window=100_000,
        )
        with nb.Runtime(agent, store=store_url) as runtime:
            session = runtime.session("s1")
            for i in range(3):
                assert session.run(f"task {i}", timeout=WAIT).status == "completed"
            session.compact(timeout=WAIT)
            purposes = [e.payload["purpose"] for e in events_of(session, "request/prepared")]
            assert purposes == ["reasoning"] * 3 + ["compaction"]
            (end,) = [
                e for e in events_of(session, "model/end") if e.payload["purpose"] != "reasoning"
            ]
            assert end.payload["input_tokens"] > 0
            items = session.snapshot().items
            assert all(i.model_call_id != end.payload["model_call_id"] for i in items)
            assert {i.status for i in items if i.kind == "message"} == {"completed"}
            usage = session.inspect().usage
            assert usage is not None
            assert (usage.model_calls, usage.unreported_calls, usage.compaction_calls) == (3, 0, 1)
            assert usage.compaction_input_tokens == end.payload["input_tokens"]
            assert usage.total_tokens == (
                usage.input_tokens
                + usage.output_tokens
                + usage.compaction_input_tokens
                + usage.compaction_output_tokens
            )


class TestToolFlush:
    def _run(self, make_runtime: MakeRuntime, tool: nb.Tool) -> tuple[nb.Session, list[bool]]:
        model = nb.ScriptedModel([nb.ToolCall(tool.name, {"note": "checked"}), "noted"])
        runtime = make_runtime(model, [tool])
        _stores["store"] = runtime.store
        session = runtime.session("s1")
        assert session.run("review it", timeout=WAIT).output == "noted"
        return session, _seen

    def test_a_sync_tool_makes_its_record_durable_before_its_side_effect(
        self, make_runtime: MakeRuntime
    ) -> None:
        """ctx.flush() returns once the event ctx.record() added is committed to the store."""
        _seen.clear()
        session, seen = self._run(make_runtime, review_sync)
        assert seen == [True]
        (note,) = events_of(session, "acme/review_note")
        (effect,) = events_of(session, "tool/result")
        assert note.seq < effect.seq

    def test_an_async_tool_awaits_aflush(self, make_runtime: MakeRuntime) -> None:
        """await ctx.aflush() in an async tool commits the record before it goes on."""
        _seen.clear()
        _, seen = self._run(make_runtime, review_async)
        assert seen == [True]

    def test_the_blocking_flush_in_an_async_tool_is_refused_with_the_way_out(
        self, make_runtime: MakeRuntime
    ) -> None:
        """ctx.flush() on the runtime's loop (an async tool) raises, naming ctx.aflush()."""
        _seen.clear()
        session, seen = self._run(make_runtime, review_async_blocking)
        assert seen == []
        (result,) = events_of(session, "tool/result")
        assert result.payload["status"] == "error"
        assert "await ctx.aflush()" in result.payload["output"]


_stores: dict[str, nb.SessionStore] = {}
_seen: list[bool] = []


def _committed(key: nb.SessionKey) -> bool:
    return any(e.type == "acme/review_note" for e in _stores["store"].scan(key))


@nb.tool
def review_sync(note: str, ctx: nb.ToolContext) -> str:
    """Record a review note, then act on it.

    Args:
        note: the note
    """
    ctx.record("acme/review_note", {"note": note})
    ctx.flush()
    _seen.append(_committed(ctx.key))  # the side effect: the note is durable by now
    return "done"


@nb.tool
async def review_async(note: str, ctx: nb.ToolContext) -> str:
    """Record a review note, then act on it.

    Args:
        note: the note
    """
    ctx.record("acme/review_note", {"note": note})
    await ctx.aflush()
    _seen.append(_committed(ctx.key))
    return "done"


@nb.tool
async def review_async_blocking(note: str, ctx: nb.ToolContext) -> str:
    """Record a review note with the blocking flush (wrong in an async tool).

    Args:
        note: the note
    """
    ctx.record("acme/review_note", {"note": note})
    ctx.flush()
    _seen.append(_committed(ctx.key))
    return "done"


class TestLaggedSubscriber:
    def test_a_slow_subscriber_gets_the_marker_at_the_gap_and_resyncs_from_the_log(
        self, make_runtime: MakeRuntime
    ) -> None:
        """A subscriber that falls behind keeps the oldest notifications, then one Lagged
        marker counting exactly those it missed; the log holds every commit it missed."""
        model = nb.ScriptedModel(["x" * 300], chunk_size=1)
        session = make_runtime(model).session("s1")
        everything = session.events(maxsize=100_000)
        slow = session.events(maxsize=8)
        assert session.run("stream a lot", timeout=WAIT).status == "completed"
        reference = _drain(everything)
        taken = _drain(slow)
        assert [type(i).__name__ for i in taken] == ["LiveEvent"] * 8 + ["Lagged"]
        assert taken[:8] == reference[:8]
        lagged = taken[8]
        assert isinstance(lagged, Lagged)
        assert lagged.dropped == len(reference) - 8
        seen = [
            i.data["seq"] for i in taken[:8] if isinstance(i, LiveEvent) and i.kind == "committed"
        ]
        missed = [
            i.data["seq"]
            for i in reference[8:]
            if isinstance(i, LiveEvent) and i.kind == "committed"
        ]
        assert missed
        resync = session.log.read_after(seen[-1] if seen else 0, 10_000)
        assert resync[-1].seq == session.log.head() == missed[-1]
        assert {e.seq for e in resync} >= set(missed)

    def test_the_buffer_size_must_be_positive(self, make_runtime: MakeRuntime) -> None:
        """events(maxsize=0 or -1) raises InvalidInput instead of an unbounded buffer."""
        session = make_runtime(nb.ScriptedModel(["hi"])).session("s1")
        for bad in (0, -1, 1.5):
            with pytest.raises(nb.InvalidInput, match="maxsize"):
                session.events(maxsize=bad)  # type: ignore[arg-type]


def _drain(sub: Subscription) -> list[LiveEvent | Lagged]:
    items: list[LiveEvent | Lagged] = []
    while (item := sub.get(timeout=0.2)) is not None:
        items.append(item)
    sub.close()
    return items


class TestSessionClose:
    def test_close_interrupts_the_active_run_and_resume_continues_it(
        self, make_runtime: MakeRuntime
    ) -> None:
        """session.close() interrupts the run it executes (recorded as session_closed) and
        returns once it ended; resume() continues the turn."""
        model = nb.ScriptedModel(["x" * 400, "resumed"], chunk_size=1, chunk_delay=0.002)
        session = make_runtime(model).session("s1")
        receipt = session.submit("write a lot")
        wait_for_event(session, "model/chunk")
        session.close(timeout=WAIT)
        (end,) = events_of(session, "run/end")
        assert (end.payload["status"], end.payload["stop_reason"]) == (
            "interrupted",
            "session_closed",
        )
        (stop,) = events_of(session, "run/stop_requested")
        assert stop.payload["reason"] == "the session was closed"
        assert receipt.wait(WAIT).status == "interrupted"
        assert session.resume(receipt.turn_id).wait(WAIT).output == "resumed"


@nb.tool
def explode(reason: str) -> str:
    """Fail on purpose.

    Args:
        reason: what to say
    """
    return _fail_deep(reason)


def _fail_deep(reason: str) -> str:
    raise ValueError(f"boom: {reason}")


class TestTracebacks:
    def test_a_tool_that_raises_leaves_its_traceback_scrubbed_and_logged(
        self,
        make_runtime: MakeRuntime,
        monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        """tool/result keeps the formatted traceback (secrets scrubbed); the model is told
        one line; the agentnb.tools logger has it too."""
        monkeypatch.setenv("ACME_API_KEY", "acme-live-4f9a8b7c6d")
        reason = "acme-live-4f9a8b7c6d rejected; password=hunter2hunter2"
        model = nb.ScriptedModel([nb.ToolCall("explode", {"reason": reason}), "sorry"])
        session = make_runtime(model, [explode]).session("s1")
        with caplog.at_level("INFO", logger="agentnb.tools"):
            assert session.run("go", timeout=WAIT).output == "sorry"
        (result,) = events_of(session, "tool/result")
        trace = result.payload["traceback"]
        assert trace.startswith("Traceback (most recent call last):")
        assert "_fail_deep" in trace
        assert "ValueError: boom: *** rejected; password=***" in trace
        assert "acme-live" not in trace
        assert "hunter2" not in trace
        assert result.payload["output"].startswith("Error: ValueError")
        assert "Traceback" not in result.payload["output"]
        logged = [r for r in caplog.records if r.name == "agentnb.tools"]
        assert logged
        assert "_fail_deep" in logged[-1].getMessage()
        assert "hunter2" not in logged[-1].getMessage()
        (card,) = [i for i in session.snapshot().items if i.kind == "tool"]
        assert card.result is not None
        assert card.result["traceback"] == trace

    def test_the_tool_card_shows_the_traceback_on_demand(self, make_runtime: MakeRuntime) -> None:
        """The view's tool card folds the traceback under a closed <details>, escaped."""
        from agentnb.widgets.view import tool_html

        model = nb.ScriptedModel([nb.ToolCall("explode", {"reason": "<b>x</b>"}), "sorry"])
        session = make_runtime(model, [explode]).session("s1")
        session.run("go", timeout=WAIT)
        (card,) = [i for i in session.snapshot().items if i.kind == "tool"]
        html = tool_html(card)
        assert '<details class="agentnb-traceback">' in html
        assert "<details open" not in html
        assert "_fail_deep" in html
        assert "<b>x</b>" not in html
        assert "&lt;b&gt;x&lt;/b&gt;" in html

    def test_a_failed_model_call_keeps_its_traceback(self, make_runtime: MakeRuntime) -> None:
        """model/end of a failed call carries the traceback of what raised in the model."""

        def broken(messages: list[nb.Message]) -> str:
            raise RuntimeError("the model broke")

        session = make_runtime(nb.ScriptedModel(broken)).session("s1")
        assert session.run("go", timeout=WAIT).status == "failed"
        (end,) = events_of(session, "model/end")
        assert end.payload["status"] == "failed"
        assert "RuntimeError: the model broke" in end.payload["traceback"]
        assert "in broken" in end.payload["traceback"]

    def test_a_huge_traceback_is_cut_keeping_its_start_and_end(self) -> None:
        """format_traceback keeps at most the limit: the first lines and the innermost ones."""
        from agentnb.tracebacks import format_traceback

        try:
            _fail_deep("x" * 100_000)
        except ValueError as exc:
            text = format_traceback(exc, limit=4096)
        assert len(text) <= 4096
        assert text.startswith("Traceback (most recent call last):")
        assert "characters cut" in text
        assert text.rstrip().endswith("x" * 100)


@nb.tool
def noisy(name: str, ctx: nb.ToolContext) -> str:
    """Report progress twice.

    Args:
        name: anything
    """
    ctx.progress({"step": 1})
    ctx.progress({"step": 2})
    return f"noisy {name}"


class TestEventCatalogue:
    def test_the_catalogue_declares_the_seeds_remaining_types(self) -> None:
        """message/system, state/restored, verification/result and the inbox marks are
        built-in types, each with a typed payload the module documents."""
        import agentnb.events as events

        names = (
            "message/system",
            "state/restored",
            "verification/result",
            "inbox/opened",
            "inbox/closed",
        )
        for name in names:
            assert name in events.BUILTIN_TYPES
            assert name in events.PAYLOADS
            assert name in (events.__doc__ or "")

    def test_run_start_and_a_baseline_say_what_the_log_covers(
        self, make_runtime: MakeRuntime
    ) -> None:
        """run/start carries coverage="adapter_chunks"; migration/baseline "baseline_only"."""
        session = make_runtime(nb.ScriptedModel(["hi"])).session("s1")
        session.run("hello", timeout=WAIT)
        (start,) = events_of(session, "run/start")
        assert start.payload["coverage"] == "adapter_chunks"
        fork = session.fork("s2")
        (baseline,) = events_of(fork, "migration/baseline")
        assert baseline.payload["coverage"] == "baseline_only"

    def test_each_execution_of_a_tool_call_has_one_action_id_on_its_events(
        self, make_runtime: MakeRuntime
    ) -> None:
        """tool/dispatch, tool/chunk, action/start and action/end of one execution share its
        action_id; another call's execution has another."""
        model = nb.ScriptedModel(
            [nb.ToolCall("noisy", {"name": "a"}), nb.ToolCall("noisy", {"name": "b"}), "done"]
        )
        session = make_runtime(model, [noisy]).session("s1")
        session.run("go", timeout=WAIT)
        by_call: dict[str, set[str]] = {}
        for type_ in ("tool/dispatch", "tool/chunk", "action/start", "action/end"):
            for e in events_of(session, type_):
                by_call.setdefault(e.payload["call_id"], set()).add(e.payload["action_id"])
        assert len(by_call) == 2
        ids = [next(iter(a)) for a in by_call.values() if len(a) == 1]
        assert len(ids) == 2
        assert ids[0] != ids[1]
        assert all(i.startswith("act_") for i in ids)


@nb.tool(confirm=True)
def buy(item: str) -> str:
    """Buy an item (a person approves each purchase).

    Args:
        item: what to buy
    """
    return f"bought {item}"


def _buyer(messages: list[nb.Message]) -> object:
    """Buy what the latest task names; answer once the purchase has a result."""
    last = messages[-1]
    if last.role == "tool":
        return f"done: {last.text}"
    return nb.ToolCall("buy", {"item": last.text.split()[-1]})


def _asks(session: nb.Session, task: str) -> bool:
    """Whether ``task`` (a purchase) stops to ask a person (else it completes)."""
    outcome = session.submit(task).wait(WAIT)
    assert outcome.status in {"suspended", "completed"}, outcome
    return outcome.status == "suspended"


class TestPermissionRules:
    def test_a_remembered_approval_lets_later_calls_run_and_they_cite_the_rule(
        self, make_runtime: MakeRuntime
    ) -> None:
        """approve(remember="session") records permission/changed; a later call of the tool
        runs without asking and its action/end cites the rule; revoke() makes it ask again."""
        session = make_runtime(nb.ScriptedModel(_buyer), [buy]).session("s1")
        assert _asks(session, "buy desk")
        (request_id,) = session.pending()
        done = session.respond(request_id, nb.Answer.approve(remember="session")).wait(WAIT)
        assert done.output == "done: bought desk"
        (granted,) = events_of(session, "permission/changed")
        rule = granted.payload["rule"]
        assert (granted.payload["action"], rule["scope"], rule["tool"]) == (
            "granted",
            "session",
            "buy",
        )
        (listed,) = session.permissions()
        assert (listed.rule_id, listed.tool_name, listed.session_id) == (
            rule["rule_id"],
            "buy",
            "s1",
        )
        assert not _asks(session, "buy chair")
        ends = events_of(session, "action/end")
        assert ends[-1].payload["rule_id"] == rule["rule_id"]
        assert ends[0].payload["rule_id"] is None  # the first purchase a person approved
        session.revoke(rule["rule_id"])
        assert session.permissions() == []
        assert _asks(session, "buy lamp")
        assert events_of(session, "permission/changed")[-1].payload["action"] == "revoked"

    def test_a_rule_with_argument_constraints_covers_only_matching_calls(
        self, make_runtime: MakeRuntime
    ) -> None:
        """approve(remember=..., match={"item": "desk"}) allows desks, not chairs."""
        session = make_runtime(nb.ScriptedModel(_buyer), [buy]).session("s1")
        assert _asks(session, "buy desk")
        (request_id,) = session.pending()
        answer = nb.Answer.approve(remember="session", match={"item": "desk"})
        session.respond(request_id, answer).wait(WAIT)
        assert not _asks(session, "buy desk")
        assert _asks(session, "buy chair")

    def test_an_agent_rule_holds_in_the_agents_other_sessions_until_revoked_there(
        self, make_runtime: MakeRuntime
    ) -> None:
        """remember="agent" lets another session of the agent (same user) run the call; that
        session lists it and may revoke it, which records it in the granting session."""
        runtime = make_runtime(nb.ScriptedModel(_buyer), [buy])
        first, second = runtime.session("s1"), runtime.session("s2")
        other_user = runtime.session("s3", user_id="bob")
        assert _asks(first, "buy desk")
        (request_id,) = first.pending()
        first.respond(request_id, nb.Answer.approve(remember="agent")).wait(WAIT)
        assert not _asks(second, "buy chair")
        (rule,) = second.permissions()
        assert (rule.scope, rule.session_id) == ("agent", "s1")
        assert events_of(second, "action/end")[-1].payload["rule_id"] == rule.rule_id
        assert _asks(other_user, "buy chair")  # another user's approval is not bob's
        second.revoke(rule.rule_id)
        assert first.permissions() == second.permissions() == []
        assert _asks(second, "buy lamp")
        revoked = wait_for_event(
            first, "permission/changed", after=events_of(first, "permission/changed")[0].seq
        )
        assert revoked.payload["action"] == "revoked"

    def test_a_rule_never_outlives_an_agent_change_or_its_sessions_deletion(
        self, make_runtime: MakeRuntime
    ) -> None:
        """After the agent changes a session's rules are gone; deleting the session that
        granted an agent rule ends it in the other sessions."""
        runtime = make_runtime(nb.ScriptedModel(_buyer), [buy])
        first, second = runtime.session("s1"), runtime.session("s2")
        for session, scope in ((second, "session"), (first, "agent")):
            assert _asks(session, "buy desk")
            (request_id,) = session.pending()
            session.respond(request_id, nb.Answer.approve(remember=scope)).wait(WAIT)
        assert len(second.permissions()) == 2
        runtime.delete(first.key)
        assert [r.scope for r in second.permissions()] == ["session"]
        runtime.close()
        changed = make_runtime(
            nb.ScriptedModel(_buyer), [buy], instructions="Buy carefully.", accept_agent_change=True
        ).session("s2")
        assert changed.permissions() == []
        assert _asks(changed, "buy chair")

    def test_bad_rules_are_refused_before_anything_is_written(
        self, make_runtime: MakeRuntime
    ) -> None:
        """A bad remember, a match without remember or naming an argument the tool does not
        take, and an unknown rule id each raise a typed error; nothing is written."""
        with pytest.raises(nb.InvalidInput, match="remember"):
            nb.Answer.approve(remember="forever")
        with pytest.raises(nb.InvalidInput, match="remember"):
            nb.Answer.approve(match={"item": "desk"})
        session = make_runtime(nb.ScriptedModel(_buyer), [buy]).session("s1")
        assert _asks(session, "buy desk")
        (request_id,) = session.pending()
        heads = (session.log.head(), session.inbox.head())
        with pytest.raises(nb.InvalidAnswer, match="colour"):
            session.respond(
                request_id, nb.Answer.approve(remember="session", match={"colour": "red"})
            )
        with pytest.raises(nb.InvalidInput, match="permissions"):
            session.revoke("rule_unknown")
        assert (session.log.head(), session.inbox.head()) == heads
