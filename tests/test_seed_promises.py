"""The seeds' promises, walked in the order the seeds make them, each checked on a runtime.

The seeds are AgentScope's AgentSession guide (English and Chinese) and Everruns' sessions
page. Each test's docstring quotes the seed's words it checks; the English guide is quoted
unless the docstring says otherwise. Scenarios that touch the store run on every backend;
those that need a killed process (``kill -9`` of a real child) on SQLite and PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import agentnb as nb
from agentnb.events import unregister_event_type
from agentnb.export.base import Exporter
from tests.blocks_helpers import BIG
from tests.runtime import _dead_run_child as dead
from tests.runtime.helpers import WAIT, Gate, events_of, gated_script, kill_mid_tool

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


@nb.tool(confirm=True)
def create_order(item: str) -> str:
    """Create a purchase order (a person approves it).

    Args:
        item: what to order
    """
    return f"ordered {item}"


@nb.tool(external=True)
def annual_quote(vendor: str) -> str:
    """A vendor's annual quote, obtained outside.

    Args:
        vendor: whom to ask
    """
    raise AssertionError("external tools never run here")


@pytest.fixture
def gate() -> Any:
    _gates["g"] = Gate()
    yield _gates["g"]
    _gates["g"].release()


@pytest.fixture(params=["sqlite", "postgres"])
def shared_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store two processes can share."""
    if request.param == "postgres":
        url: str = request.getfixturevalue("pg_store_url")
        return url
    return f"sqlite:///{tmp_path / 'agentnb.sqlite'}"


def _echo(messages: list[nb.Message]) -> str:
    return f"done: {messages[-1].text}"


def _held_then_answer(messages: list[nb.Message]) -> object:
    if messages[-1].role == "tool":
        return "answered"
    return nb.ToolCall("held", {"name": "g"})


class TestSubmit:
    def test_submit_accepts_durably_and_allocates_a_turn(self, make_runtime: MakeRuntime) -> None:
        """Seed: "`submit` durably accepts the input and allocates a `turnId`; execution can still
        be queued, so its `runId` may be absent.\""""
        gate = Gate()
        model = nb.ScriptedModel(gated_script(["done"], {0: gate}))
        session = make_runtime(model).session("conversation-001", user_id="alice")
        receipt = session.submit("Compare the operating costs of plans A and B")
        assert receipt.turn_id.startswith("turn_")
        assert receipt.run_id is None
        accepted = [
            e for e in session.inbox.scan() if e.payload["command_id"] == receipt.command_id
        ]
        assert accepted
        gate.release()
        assert receipt.wait(WAIT).status == "completed"

    def test_a_retry_with_the_same_key_and_input_returns_the_existing_receipt(
        self, make_runtime: MakeRuntime
    ) -> None:
        """Seed: "Retry a failed submission request with the same request key and identical input
        to obtain the existing receipt. A different task needs a different key.\""""
        session = make_runtime(nb.ScriptedModel(_echo)).session("s1")
        first = session.submit("compare", key="request-001")
        outcome = first.wait(WAIT)
        again = session.submit("compare", key="request-001")
        assert (again.command_id, again.turn_id, again.run_id) == (
            first.command_id,
            first.turn_id,
            outcome.run_id,
        )
        assert again.status == "completed"
        with pytest.raises(nb.IdempotencyConflict):
            session.submit("draft an email", key="request-001")
        assert len(session.tasks()) == 1

    def test_further_submissions_queue_in_acceptance_order(self, make_runtime: MakeRuntime) -> None:
        """Seed: "Further submissions queue in acceptance order while the session is busy.\""""
        session = make_runtime(nb.ScriptedModel(_echo)).session("s1")
        receipts = [session.submit(f"task {i}") for i in range(3)]
        outcomes = [r.wait(WAIT) for r in receipts]
        assert [o.output for o in outcomes] == [f"done: task {i}" for i in range(3)]
        starts = [e.turn_id for e in events_of(session, "turn/start")]
        assert starts == [r.turn_id for r in receipts]

    def test_pending_human_input_parks_the_queue(self, make_runtime: MakeRuntime) -> None:
        """Seed: "Interruption or pending human input parks the queue until the unfinished task
        continues.\""""
        model = nb.ScriptedModel([nb.ToolCall("create_order", {"item": "desk"}), "ordered", "next"])
        session = make_runtime(model, [create_order]).session("s1")
        first = session.submit("order a desk")
        assert first.wait(WAIT).status == "suspended"
        second = session.submit("then this")
        with pytest.raises(nb.Parked):
            second.wait(WAIT)
        session.respond(next(iter(session.pending())), True)
        assert second.wait(WAIT).output == "next"


class TestAwait:
    def test_await_observes_and_never_acts(self, make_runtime: MakeRuntime) -> None:
        """Seed: "`await` observes the submitted command's execution until completion, suspension,
        interruption or failure. It does not start, retry or cancel execution; a suspended
        task still needs an answer.\""""
        model = nb.ScriptedModel([nb.ToolCall("create_order", {"item": "desk"}), "ordered"])
        session = make_runtime(model, [create_order]).session("s1")
        receipt = session.submit("order a desk")
        assert receipt.wait(WAIT).status == "suspended"
        head = session.log.head()
        assert receipt.wait(WAIT).status == "suspended"
        assert session.log.head() == head
        assert list(session.pending())

    def test_respond_returns_a_new_receipt_and_the_first_observes_the_suspended_run(
        self, make_runtime: MakeRuntime
    ) -> None:
        """Seed: "`respond` and `resume` return new receipts to observe with `await`";
        (zh) "原提交的 await(task) 观察的是挂起前的那次执行" (the original await(task)
        observes the run before the suspension).\""""
        model = nb.ScriptedModel([nb.ToolCall("create_order", {"item": "desk"}), "ordered"])
        session = make_runtime(model, [create_order]).session("s1")
        task = session.submit("order a desk")
        suspended = task.wait(WAIT)
        answered = session.respond(next(iter(session.pending())), True)
        assert answered.command_id != task.command_id
        continued = answered.wait(WAIT)
        assert (continued.status, continued.turn_id) == ("completed", task.turn_id)
        assert continued.run_id != suspended.run_id
        assert task.wait(WAIT) == suspended

    def test_disconnecting_an_observer_does_not_cancel_background_work(
        self, make_runtime: MakeRuntime
    ) -> None:
        """Seed: "Disconnecting an observer does not cancel background work.\""""
        gate = Gate()
        session = make_runtime(nb.ScriptedModel(gated_script(["done"], {0: gate}))).session("s1")
        receipt = session.submit("work")
        gate.wait_arrived()
        with pytest.raises(TimeoutError):
            receipt.wait(timeout=0.05)
        gate.release()
        assert receipt.wait(WAIT).status == "completed"

    def test_obtaining_a_session_or_reading_history_never_starts_inference(
        self, make_runtime: MakeRuntime
    ) -> None:
        """Seed: "Obtaining `agent.session(ctx)` or reading history never starts inference.\""""
        model = nb.ScriptedModel(_echo)
        runtime = make_runtime(model)
        runtime.session("s1").run("hello", timeout=WAIT)
        calls = len(model.requests)
        session = runtime.session("s1")
        session.history()
        session.transcript()
        session.snapshot()
        session.tasks()
        assert len(model.requests) == calls


class TestSteerAndInject:
    def test_steer_bound_to_a_task_is_rejected_once_it_no_longer_runs(
        self, make_runtime: MakeRuntime
    ) -> None:
        """Seed: "`steer(task, ...)` binds the guidance to the expected task and rejects it if that
        task is no longer running.\""""
        session = make_runtime(nb.ScriptedModel(_echo)).session("s1")
        done = session.run("compare", timeout=WAIT)
        with pytest.raises(nb.NotRunning):
            session.steer("prioritize staffing cost", task=done.turn_id)

    def test_steer_reaches_the_running_task_at_its_next_step(
        self, make_runtime: MakeRuntime, gate: Gate
    ) -> None:
        """Seed: "`steer(input)` instead targets whichever task is currently running. Guidance
        becomes available at the next reasoning step; it does not rewrite an already-sent
        model request.\""""
        model = nb.ScriptedModel(_held_then_answer)
        session = make_runtime(model, [held]).session("s1")
        receipt = session.submit("compare")
        gate.wait_arrived()
        steered = session.steer("prioritize staffing cost")
        assert steered.turn_id == receipt.turn_id
        gate.release()
        receipt.wait(WAIT)
        first, second = model.requests[0], model.requests[1]
        assert all("staffing" not in m.text for m in first)
        assert any("staffing" in m.text for m in second)

    def test_unconsumed_guidance_stays_bound_to_its_turn_across_interruption(
        self, make_runtime: MakeRuntime, gate: Gate
    ) -> None:
        """Seed: "Unconsumed guidance remains bound to the original turn across interruption.\""""
        model = nb.ScriptedModel(_held_then_answer)
        session = make_runtime(model, [held]).session("s1")
        receipt = session.submit("compare")
        gate.wait_arrived()
        session.steer("prioritize staffing cost")
        session.interrupt()
        gate.release()
        stopped = receipt.wait(WAIT)
        if stopped.status == "interrupted":  # the interrupt came before the step took it
            session.resume(receipt.turn_id).wait(WAIT)
        applied = [e for e in events_of(session, "input/received") if e.payload["kind"] == "steer"]
        assert [e.turn_id for e in applied] == [receipt.turn_id]

    def test_inject_starts_nothing_and_is_applied_once_to_future_work(
        self, make_runtime: MakeRuntime
    ) -> None:
        """Seed: "`inject` persists reference material without starting execution. While idle, it
        waits for future work.\""""
        model = nb.ScriptedModel(_echo)
        session = make_runtime(model).session("s1")
        session.inject("plan A requires weekly maintenance")
        assert session.log.head() == 0
        session.run("compare", timeout=WAIT)
        session.run("again", timeout=WAIT)
        seen = [
            sum(m.role == "user" and "weekly maintenance" in m.text for m in r)
            for r in model.requests
        ]
        assert seen == [1, 1]  # in the first call's context, once, and kept in the history
        material = [
            e for e in events_of(session, "input/received") if e.payload["kind"] == "inject"
        ]
        assert len(material) == 1


class TestAnswers:
    def test_strings_answer_external_requests_and_booleans_confirmations(
        self, make_runtime: MakeRuntime
    ) -> None:
        """Seed: "Strings answer `external_execution` requests; booleans answer confirmation
        requests.\""""
        model = nb.ScriptedModel(
            [
                nb.ToolCall("annual_quote", {"vendor": "acme"}),
                nb.ToolCall("create_order", {"item": "desk"}),
                "both done",
            ]
        )
        session = make_runtime(model, [annual_quote, create_order]).session("s1")
        session.submit("quote then order").wait(WAIT)
        ((rid, request),) = session.pending().items()
        assert request.kind == "external_execution"
        session.respond(rid, "The annual quote is USD 12,000.").wait(WAIT)
        ((rid, request),) = session.pending().items()
        assert request.kind == "confirmation"
        assert session.respond(rid, True).wait(WAIT).output == "both done"

    def test_a_denial_with_a_reason_reaches_the_model(self, make_runtime: MakeRuntime) -> None:
        """Seed: "For a confirmation denial, use `SessionAnswer.reject(reason)`.\""""
        model = nb.ScriptedModel([nb.ToolCall("create_order", {"item": "desk"}), "ok"])
        session = make_runtime(model, [create_order]).session("s1")
        session.submit("order a desk").wait(WAIT)
        rid = next(iter(session.pending()))
        session.respond(rid, nb.Answer.reject("over budget")).wait(WAIT)
        (result,) = events_of(session, "tool/result")
        assert result.payload["status"] == "denied"
        assert "over budget" in model.requests[-1][-1].text

    def test_unknown_resolved_or_mismatched_requests_are_rejected(
        self, make_runtime: MakeRuntime
    ) -> None:
        """Seed: "Unknown, resolved or mismatched requests are rejected.\""""
        model = nb.ScriptedModel([nb.ToolCall("create_order", {"item": "desk"}), "ok"])
        session = make_runtime(model, [create_order]).session("s1")
        session.submit("order a desk").wait(WAIT)
        rid = next(iter(session.pending()))
        with pytest.raises(nb.InvalidAnswer):
            session.respond("request-nope", True)
        with pytest.raises(nb.InvalidAnswer):
            session.respond(rid, "yes please")  # a confirmation takes a boolean
        session.respond(rid, True).wait(WAIT)
        with pytest.raises(nb.InvalidAnswer):
            session.respond(rid, True)

    def test_a_confirmation_may_carry_a_permission_rule(self, make_runtime: MakeRuntime) -> None:
        """Seed: "`SessionAnswer.Confirmation` supports permission rules or edited tool
        arguments.\""""
        model = nb.ScriptedModel(
            [
                nb.ToolCall("create_order", {"item": "desk"}),
                "one",
                nb.ToolCall("create_order", {"item": "lamp"}),
                "two",
            ]
        )
        session = make_runtime(model, [create_order]).session("s1")
        session.submit("order a desk").wait(WAIT)
        rid = next(iter(session.pending()))
        answer = nb.Answer.approve(edited_args={"item": "oak desk"}, remember="session")
        session.respond(rid, answer).wait(WAIT)
        assert session.run("order a lamp", timeout=WAIT).output == "two"
        outputs = [e.payload["output"] for e in events_of(session, "tool/result")]
        assert outputs == ["ordered oak desk", "ordered lamp"]
        assert [e.payload["action"] for e in events_of(session, "permission/changed")] == [
            "granted"
        ]

    def test_an_output_answer_accepts_custom_result_blocks(self, make_runtime: MakeRuntime) -> None:
        """Seed: "`SessionAnswer.Output` accepts custom result blocks" (the Chinese text: use
        SessionAnswer.Output when custom tool result blocks are needed)."""
        model = nb.ScriptedModel([nb.ToolCall("annual_quote", {"vendor": "acme"}), "noted"])
        session = make_runtime(model, [annual_quote]).session("s1")
        session.submit("get the quote").wait(WAIT)
        rid = next(iter(session.pending()))
        image = nb.blocks.Image(BIG, name="quote.png")
        answer = nb.Answer.output(
            "The annual quote:", blocks=[image, nb.blocks.Json({"usd": 12000})]
        )
        assert session.respond(rid, answer).wait(WAIT).output == "noted"
        (result,) = events_of(session, "tool/result")
        kinds = [b["type"] for b in result.payload["blocks"]]
        assert kinds == ["text", "image", "json"]
        stored = result.payload["blocks"][1]
        assert "data" not in stored  # past INLINE_BYTES the bytes live in the store's blobs
        assert session.log.store.get_blob(stored["blob"]) == BIG
        tool = model.requests[-1][-1]
        assert tool.role == "tool"
        assert "[image: quote.png, image/png" in tool.text
        assert '{"usd":12000}' in tool.text


def _pending_soon(session: Any) -> str:
    """The id of the session's first pending request, once there is one."""
    follow = session.log.follow(0, idle_timeout=WAIT)
    try:
        for event in follow:
            if event.type == "interaction/requested":
                return str(event.payload["request_id"])
    finally:
        follow.close()
    raise AssertionError(f"no request was committed within {WAIT}s")


class TestInlineConfirmation:
    def test_inline_confirmation_continues_within_the_same_live_run(
        self, make_runtime: MakeRuntime
    ) -> None:
        """Seed: "This example uses suspended HITL; inline confirmation can continue within
        the same live run.\""""
        model = nb.ScriptedModel([nb.ToolCall("create_order", {"item": "desk"}), "ordered"])
        session = make_runtime(model, [create_order], wait_inline=WAIT).session("s1")
        task = session.submit("order a desk")
        rid = _pending_soon(session)
        outcome = session.respond(rid, True).wait(WAIT)
        assert outcome.output == "ordered"
        (run,) = [e.run_id for e in events_of(session, "run/start") if e.turn_id == task.turn_id]
        assert outcome.run_id == run
        assert [e.run_id for e in events_of(session, "interaction/resolved")] == [run]

    def test_suspended_hitl_ends_the_run_and_the_answer_starts_a_new_one(
        self, make_runtime: MakeRuntime
    ) -> None:
        """Seed (the table of turns and runs): "Suspend for approval, then answer | `T1` |
        `R2` ends; new `R3`": with no inline wait (the default), or once it expired."""
        model = nb.ScriptedModel([nb.ToolCall("create_order", {"item": "desk"}), "ordered"])
        session = make_runtime(model, [create_order], wait_inline=0.05).session("s1")
        suspended = session.submit("order a desk").wait(WAIT)
        assert (suspended.status, suspended.stop_reason) == ("suspended", "inline_wait_expired")
        rid = next(iter(session.pending()))
        answered = session.respond(rid, True).wait(WAIT)
        assert answered.output == "ordered"
        assert answered.run_id != suspended.run_id
        assert answered.turn_id == suspended.turn_id


class TestInterruptAndResume:
    def test_interrupt_is_a_request_and_resume_keeps_the_turn_in_a_new_run(
        self, make_runtime: MakeRuntime
    ) -> None:
        """Seed: "`interrupt()` is a cooperative request, not a completion acknowledgment ...
        `resume` restores the checkpoint and unapplied original input, preserves the `turnId`
        and starts a new run.\""""
        model = nb.ScriptedModel(["a" * 400, "resumed"], chunk_size=1, chunk_delay=0.002)
        session = make_runtime(model).session("s1")
        task = session.submit("write a lot")
        while not events_of(session, "model/chunk"):
            session.log.store.wait_for_head(session.key, session.log.head(), 0.1)
        assert session.interrupt() is True
        stopped = task.wait(WAIT)
        assert stopped.status == "interrupted"
        continued = session.resume(stopped.turn_id).wait(WAIT)
        assert (continued.turn_id, continued.output) == (stopped.turn_id, "resumed")
        assert continued.run_id != stopped.run_id
        assert [m.text for m in model.requests[1] if m.role == "user"] == ["write a lot"]

    def test_an_interrupt_naming_a_stale_run_stops_nothing(self, make_runtime: MakeRuntime) -> None:
        """Seed: "If the page knows the active run ID, use `session.interrupt(runId)` to avoid
        stopping a newer execution from a stale page.\""""
        session = make_runtime(nb.ScriptedModel(_echo)).session("s1")
        old = session.run("first", timeout=WAIT)
        with pytest.raises(nb.NotRunning):
            session.interrupt(old.run_id)

    def test_only_the_latest_unfinished_task_can_continue(self, make_runtime: MakeRuntime) -> None:
        """Seed: "Only the latest unfinished task can continue; completed or cancelled tasks cannot
        resume, and pending interactions require `respond` first.\""""
        model = nb.ScriptedModel(["fine", nb.ToolCall("create_order", {"item": "desk"})])
        session = make_runtime(model, [create_order]).session("s1")
        done = session.run("one", timeout=WAIT)
        with pytest.raises(nb.CannotResume, match="completed"):
            session.resume(done.turn_id)
        waiting = session.run("order", timeout=WAIT)
        with pytest.raises(nb.CannotResume, match="respond"):
            session.resume(waiting.turn_id)
        session.cancel(waiting.turn_id, timeout=WAIT)
        with pytest.raises(nb.CannotResume, match="cancelled"):
            session.resume(waiting.turn_id)

    def test_closing_stops_scheduling_and_interrupts_active_work(
        self, make_runtime: MakeRuntime
    ) -> None:
        """Seed: "Closing it stops scheduling and interrupts active work.\""""
        model = nb.ScriptedModel(["a" * 400], chunk_size=1, chunk_delay=0.002)
        session = make_runtime(model).session("s1")
        task = session.submit("write a lot")
        while not events_of(session, "model/chunk"):
            session.log.store.wait_for_head(session.key, session.log.head(), 0.1)
        session.close(timeout=WAIT)
        assert task.wait(WAIT).status == "interrupted"


class TestRestartAndUncertainCalls:
    def test_start_dispatches_work_accepted_before_a_restart(
        self, make_runtime: MakeRuntime
    ) -> None:
        """Seed: "Read its history immediately, then explicitly start dispatching accepted
        work.\""""
        client = make_runtime(nb.ScriptedModel(_echo), execute=False).session("s1")
        queued = client.submit("compare")
        assert client.log.head() == 0  # accepted, nothing ran
        make_runtime(nb.ScriptedModel(_echo)).open("s1").start()
        assert client.wait(queued, WAIT).output == "done: compare"

    def test_start_never_resumes_an_interrupted_task(self, shared_url: str) -> None:
        """Seed: "`session.start(); // Dispatch queued work; interrupted tasks still need
        resume(turnId).`\""""
        turn_id, _ = kill_mid_tool(shared_url)
        with nb.Runtime(dead.make_agent(), store=shared_url) as runtime:
            session = runtime.open(dead.SESSION_ID, user_id=dead.USER_ID)
            session.start()
            follow = session.log.follow(0, idle_timeout=1.0)
            types = [e.type for e in follow]
            assert types[-1] == "run/end"  # the crash is recorded, and nothing after it
            assert session.task(turn_id).status == "interrupted"
            assert len(session.task(turn_id).run_ids) == 1

    def test_uncertain_calls_are_listed_and_reconciled_without_running_them(
        self, shared_url: str
    ) -> None:
        """Seed: "`session.inspect().uncertainToolCalls()` identifies calls whose outcomes need
        verification ... Supply results covering exactly the uncertain call IDs.
        Reconciliation saves the verified results and checkpoint without executing those
        tools again; continuation is explicit.\""""
        turn_id, call_id = kill_mid_tool(shared_url)
        with nb.Runtime(dead.make_agent(), store=shared_url) as runtime:
            session = runtime.open(dead.SESSION_ID, user_id=dead.USER_ID)
            assert [c.call_id for c in session.inspect().uncertain_tool_calls] == [call_id]
            with pytest.raises(nb.InvalidInput, match="exactly"):
                session.reconcile({}, "checked nothing")
            session.reconcile(
                {call_id: nb.ToolOutcome.success("Order ORD-42 confirmed created")},
                "Verified order-system records",
            )
            assert session.task(turn_id).status == "interrupted"  # continuation is explicit
            outcome = session.resume(turn_id).wait(WAIT)
            assert outcome.output == dead.ANSWER
            assert [e.payload["call_id"] for e in events_of(session, "action/start")] == [call_id]

    def test_a_still_unknown_outcome_is_said_to_be_unknown(self, shared_url: str) -> None:
        """Seed: "If the outcome is still unknown, investigate it rather than inventing an empty
        successful result"; Everruns: "Any other unfinished call is recorded as interrupted
        ... so the model learns its outcome is unknown and nothing runs twice.\""""
        turn_id, call_id = kill_mid_tool(shared_url)
        with nb.Runtime(dead.make_agent(), store=shared_url) as runtime:
            session = runtime.open(dead.SESSION_ID, user_id=dead.USER_ID)
            outcome = session.resume(turn_id, uncertain="unknown").wait(WAIT)
            assert outcome.status == "completed"
            (result,) = events_of(session, "tool/result")
            assert (result.payload["call_id"], result.payload["status"]) == (call_id, "unknown")
            assert result.payload["output"]  # never an empty success


class TestTheLog:
    def test_seq_starts_at_one_and_reads_never_execute(self, make_runtime: MakeRuntime) -> None:
        """Seed: "Native `seq` starts at 1 and increases within a session ... `scan(0, through)`
        reads a fixed committed prefix; `readAfter(seq, limit)` reads a batch after a cursor.
        Neither executes models or tools.\""""
        model = nb.ScriptedModel(_echo)
        session = make_runtime(model).session("s1")
        session.run("hello", timeout=WAIT)
        calls = len(model.requests)
        through = session.log.head()
        events = list(session.log.scan(0, through))
        assert [e.seq for e in events] == list(range(1, through + 1))
        assert len({e.event_id for e in events}) == through
        assert session.log.read_after(2, 3) == events[2:5]
        assert len(model.requests) == calls

    def test_a_recorded_application_event_is_flushed_before_the_side_effect(
        self, make_runtime: MakeRuntime
    ) -> None:
        """Seed: "`recorder.append("acme/review_note", Map.of("note", note), false); return
        recorder.flush();` ... Await the returned `Mono` as part of the tool or middleware
        pipeline.\""""
        seen: list[bool] = []

        @nb.tool
        def review(note: str, ctx: nb.ToolContext) -> str:
            """Record a review note.

            Args:
                note: the note
            """
            ctx.record("acme/review_note", {"note": note}, False)
            ctx.flush()
            seen.append(any(e.type == "acme/review_note" for e in store.scan(ctx.key)))
            return "noted"

        model = nb.ScriptedModel([nb.ToolCall("review", {"note": "ok"}), "done"])
        runtime = make_runtime(model, [review])
        store = runtime.store
        runtime.session("s1").run("review", timeout=WAIT)
        assert seen == [True]

    def test_export_drains_committed_events_without_re_executing(
        self, make_runtime: MakeRuntime
    ) -> None:
        """Seed: "`drain()` exports committed events without re-executing the Agent" and
        "duplicate `eventId` deliveries must be harmless.\""""

        class Sink:
            name = "audit"

            def __init__(self) -> None:
                self.rows: dict[str, int] = {}

            def accept(self, events: Any) -> None:
                for batch in events.values():
                    for event in batch:
                        self.rows[event.event_id] = event.seq

        model = nb.ScriptedModel(_echo)
        session = make_runtime(model).session("s1")
        session.run("hello", timeout=WAIT)
        calls = len(model.requests)
        sink = Sink()
        assert Exporter(session.log, sink, progress=False).drain() == session.log.head()
        assert Exporter(session.log, sink, progress=False).drain() == 0
        assert sorted(sink.rows.values()) == list(range(1, session.log.head() + 1))
        assert len(model.requests) == calls

    def test_a_fork_starts_from_a_baseline_without_copying_history(
        self, make_runtime: MakeRuntime
    ) -> None:
        """Seed: "The destination starts from an imported baseline. It does not copy the source
        event history.\""""
        session = make_runtime(nb.ScriptedModel(_echo)).session("conversation-001")
        session.run("compare", timeout=WAIT)
        fork = session.fork("comparison-alternative")
        assert [e.type for e in fork.log.scan()] == ["migration/baseline"]
        assert fork.transcript().messages == session.transcript().messages

    def test_an_agentstate_imports_into_an_empty_session_with_provenance(
        self, make_runtime: MakeRuntime
    ) -> None:
        """Seed: "`importBaseline(target, state, source, sourceVersion)` imports a complete
        `AgentState` into an empty target with provenance"; (zh) "已有应用若保存的是AgentState ...
        可以把它作为一份起始状态导入新的空会话 ... 不会补造更早的执行历史" (an application that
        saved an AgentState can import it as the starting state of a new, empty session ... it
        does not invent earlier execution history)."""
        state = {
            "messages": [
                {"role": "USER", "content": [{"type": "text", "text": "Compare A and B"}]},
                {"role": "ASSISTANT", "content": [{"type": "text", "text": "A is cheaper."}]},
            ]
        }
        session = make_runtime(nb.ScriptedModel(_echo)).session("imported")
        report = session.import_baseline(
            state, source="agentscope:conversation-001", source_version=2
        )
        assert (report.format, report.messages, report.dropped) == ("agentscope", 2, ())
        (event,) = session.log.scan()
        assert event.type == "migration/baseline"
        assert (event.payload["source"], event.payload["source_version"]) == (
            "agentscope:conversation-001",
            2,
        )
        assert [m.text for m in session.transcript().messages] == [
            "Compare A and B",
            "A is cheaper.",
        ]
        used = make_runtime(nb.ScriptedModel(_echo)).session("used")
        used.run("hello", timeout=WAIT)
        with pytest.raises(nb.InvalidInput, match="not empty"):
            used.import_baseline(state)


class TestEverrunsSessions:
    def test_send_steers_an_active_turn_and_starts_one_otherwise(
        self, make_runtime: MakeRuntime, gate: Gate
    ) -> None:
        """Everruns: "If a turn is active, the message steers that turn; if the previous turn
        has already finished, it starts a follow-up turn. The receipt reports which case
        occurred.\""""
        session = make_runtime(nb.ScriptedModel(_held_then_answer), [held]).session("s1")
        initial = session.send("Plan my trip.")
        assert initial.disposition == "started"
        gate.wait_arrived()
        latest = session.send("Prefer trains.")
        assert (latest.disposition, latest.turn_id) == ("steered", initial.turn_id)
        gate.release()
        assert latest.wait(WAIT).status == "completed"
        _gates["g"] = Gate()
        _gates["g"].release()
        follow_up = session.send("Now hotels.")
        assert follow_up.disposition == "started"
        assert follow_up.turn_id != initial.turn_id

    def test_a_send_right_after_a_send_steers_the_turn_it_started(
        self, make_runtime: MakeRuntime
    ) -> None:
        """Everruns: "`send` accepts a message without waiting for a response. If a turn is
        active, the message steers that turn" — also the turn the previous send just started,
        before its first step: `SendDisposition::Steered`, `latest.turn_id ==
        initial.turn_id`, and "waiting on the latest receipt works in both cases.\""""
        session = make_runtime(nb.ScriptedModel([]), execute=False).session("s1")
        initial = session.send("Plan my trip.")
        latest = session.send("Prefer trains.")
        assert (latest.disposition, latest.turn_id) == ("steered", initial.turn_id)
        model = nb.ScriptedModel(_echo)
        make_runtime(model).session("s1").start()
        assert latest.wait(WAIT).output == "done: Prefer trains."
        assert [m.text for m in model.requests[0] if m.role == "user"] == [
            "Plan my trip.",
            "Prefer trains.",
        ]

    def test_double_texting_policies_on_submit(self, make_runtime: MakeRuntime, gate: Gate) -> None:
        """The peers' double-texting policies (LangGraph's multitask strategies, named in
        issue 37 beside Everruns' `send`): `reject` refuses while a turn is busy,
        `interrupt` stops it (interrupted, not cancelled) and starts the new one.\""""
        session = make_runtime(nb.ScriptedModel(_held_then_answer), [held]).session("s1")
        running = session.submit("compare plans")
        gate.wait_arrived()
        with pytest.raises(nb.SessionBusy):
            session.submit("something else", if_busy="reject")
        newer = session.submit("something else", if_busy="interrupt")
        gate.release()
        assert running.wait(WAIT).status == "interrupted"
        _gates["g"] = Gate()
        _gates["g"].release()
        assert newer.wait(WAIT).status == "completed"

    def test_inspect_returns_what_the_next_model_call_uses(self, make_runtime: MakeRuntime) -> None:
        """Everruns: "`Session::inspect` returns the context assembled for the next model
        call.\""""
        model = nb.ScriptedModel(_echo)
        session = make_runtime(model, [held], instructions="Remember the conversation.").session(
            "s1"
        )
        session.run("My project is Atlas.", timeout=WAIT)
        seen = session.inspect()
        assert (seen.model, seen.instructions) == (model.name, "Remember the conversation.")
        assert [t["name"] for t in seen.tools] == ["held"]
        assert [m.text for m in seen.next_context][-2:] == [
            "My project is Atlas.",
            "done: My project is Atlas.",
        ]

    def test_history_pages_are_bounded(self, make_runtime: MakeRuntime) -> None:
        """Everruns: "The maximum is 256 messages; an excessive value returns
        `HistoryError::InvalidLimit` with the allowed maximum.\""""
        session = make_runtime(nb.ScriptedModel(_echo)).session("s1")
        with pytest.raises(nb.InvalidLimit, match="256"):
            session.history(limit=257)

    def test_a_crash_left_turn_resumes_with_unknown_calls_only_when_allowed(
        self, shared_url: str
    ) -> None:
        """Everruns: "A call runs again only when that is safe ... Any other unfinished call
        is recorded as interrupted" — by default agentnb waits for a person instead.\""""
        turn_id, _ = kill_mid_tool(shared_url)
        with nb.Runtime(dead.make_agent(), store=shared_url) as runtime:
            session = runtime.open(dead.SESSION_ID, user_id=dead.USER_ID)
            with pytest.raises(nb.UncertainToolCalls):
                session.resume(turn_id)
            assert events_of(session, "tool/result") == []  # the refusal wrote nothing


def _writes_then_reads(messages: list[nb.Message]) -> object:
    task = next(m.text for m in reversed(messages) if m.role == "user")
    if messages[-1].role == "tool":
        return f"done: {messages[-1].text}"
    if task.startswith("write"):
        return nb.ToolCall("write_file", {"path": "notes.txt", "content": task})
    return nb.ToolCall("read_file", {"path": "notes.txt"})


class TestWorkspaceBinding:
    def test_a_session_never_switches_heads(
        self, make_runtime: MakeRuntime, tmp_path: Path
    ) -> None:
        """Everruns: "To fix a session to an isolated project view, bind an `Environment`
        before execution. A session can never switch heads after it starts.\""""
        model = nb.ScriptedModel(_writes_then_reads)
        first = make_runtime(model, nb.workspace_tools(), workspace=nb.Workspace(tmp_path / "a"))
        session = first.session("s1")
        session.run("write the plan", timeout=WAIT)
        assert len(events_of(session, "workspace/bound")) == 1
        first.close()
        other = make_runtime(model, nb.workspace_tools(), workspace=nb.Workspace(tmp_path / "b"))
        with pytest.raises(nb.WorkspaceChanged, match="accept_workspace_change"):
            other.open("s1").submit("read the plan")

    def test_recovery_finds_the_same_working_files(
        self, make_runtime: MakeRuntime, tmp_path: Path
    ) -> None:
        """Seed: "Durable recovery needs the same tools, credentials and working files as the
        original task" — a new runtime reaches the files the session bound, and inspect()
        says they still match the last run's end.\""""
        workspace = nb.Workspace(tmp_path)
        model = nb.ScriptedModel(_writes_then_reads)
        first = make_runtime(model, nb.workspace_tools(), workspace=workspace)
        first.session("s1").run("write staffing cost first", timeout=WAIT)
        first.close()
        again = make_runtime(model, nb.workspace_tools(), workspace=workspace).open("s1")
        assert again.inspect().workspace.matches is True
        assert again.run("read it back", timeout=WAIT).output == "done: write staffing cost first"


REVIEW_NOTE = "acme.seed/review_note"
LEDGER = "acme.seed/ledger"
DIAGNOSTIC = "acme.seed/diagnostic"


def _ledger(state: dict[str, Any], event: nb.Event) -> dict[str, Any]:
    """Adds up the amounts reviewed; refuses a negative one."""
    amount = event.payload["amount"]
    if amount < 0:
        raise ValueError("a negative amount cannot be folded")
    return {"total": state.get("total", 0) + amount, "reviews": state.get("reviews", 0) + 1}


def _amount(data: Any) -> Any:
    if not isinstance(data.get("amount"), int):
        raise ValueError("amount must be an int")
    return data


@pytest.fixture
def seed_types() -> Any:
    nb.register_event_type(REVIEW_NOTE)
    nb.register_event_type(LEDGER, validate=_amount, reducer=_ledger, required=True)
    nb.register_event_type(DIAGNOSTIC, reducer=_ledger)
    yield
    for name in (REVIEW_NOTE, LEDGER, DIAGNOSTIC):
        unregister_event_type(name)


class _Reviewer:
    """Middleware: reviews each tool call before it runs, in the ledger."""

    def __init__(self, amount: int, required: bool = True, type_: str = LEDGER) -> None:
        self.amount, self.required, self.type_ = amount, required, type_

    async def before_tool(self, ctx: nb.MiddlewareContext, call: Any) -> None:
        ctx.record(REVIEW_NOTE, {"note": f"reviewed {call.name}"})
        ctx.record(self.type_, {"amount": self.amount}, self.required)
        await ctx.aflush()


def _middleware_runtime(store_url: str, middleware: list[object]) -> nb.Runtime:
    seen: list[bool] = []

    @nb.tool
    def pay(ctx: nb.ToolContext) -> str:
        """Pay (the side effect the review precedes)."""
        seen.append(any(e.type == REVIEW_NOTE for e in runtime.store.scan(ctx.key)))
        return f"paid; review committed first: {seen[-1]}"

    model = nb.ScriptedModel([nb.ToolCall("pay", {}), "done", nb.ToolCall("pay", {}), "again"])
    agent = nb.Agent(
        name="Seed", agent_id="seed-mw", model=model, tools=[pay], middleware=middleware
    )
    runtime = nb.Runtime(agent, store=store_url)
    return runtime


@pytest.mark.usefixtures("seed_types")
class TestMiddlewareAndReducers:
    def test_middleware_records_and_awaits_the_flush_before_the_side_effect(
        self, shared_url: str
    ) -> None:
        """Seed: "A business tool or middleware may want to record a review note alongside
        Agent events ... Await the returned `Mono` as part of the tool or middleware
        pipeline.\""""
        with _middleware_runtime(shared_url, [_Reviewer(5)]) as runtime:
            session = runtime.session("s1")
            assert session.run("pay", timeout=WAIT).status == "completed"
            (result,) = events_of(session, "tool/result")
            assert result.payload["output"] == "paid; review committed first: True"
            types = [e.type for e in session.log.scan()]
            assert types.index(REVIEW_NOTE) < types.index("tool/dispatch")

    def test_registered_reducers_rebuild_the_state_on_restoration(self, shared_url: str) -> None:
        """Seed: "For recovery-relevant types, register validators and reducers through
        `SessionEventCodecRegistry` before execution or restoration" — a new runtime folds the
        same application state from the log.\""""
        with _middleware_runtime(shared_url, [_Reviewer(5)]) as first:
            session = first.session("s1")
            session.run("pay", timeout=WAIT)
            session.run("pay again", timeout=WAIT)
            before = session.app_state(LEDGER)
        assert before == {"total": 10, "reviews": 2}
        with _middleware_runtime(shared_url, []) as second:
            assert second.session("s1").app_state(LEDGER) == before

    def test_a_required_type_that_cannot_be_folded_fails_closed(self, shared_url: str) -> None:
        """Seed: "an unknown required type prevents recovery" (Chinese: 标记为 required
        却无法识别的事件会阻止恢复) — a required record its reducer refuses fails the turn,
        with the reason, and is not written.\""""
        with _middleware_runtime(shared_url, [_Reviewer(-1)]) as runtime:
            session = runtime.session("s1")
            outcome = session.run("pay", timeout=WAIT)
            assert outcome.status == "failed"
            assert "a negative amount cannot be folded" in (outcome.error or "")
            assert events_of(session, LEDGER) == []
            assert events_of(session, "tool/dispatch") == []

    def test_diagnostic_facts_do_not_participate_in_recovery(self, shared_url: str) -> None:
        """Seed: "`required=false` suits diagnostic facts that do not participate in
        recovery" — a diagnostic its reducer refuses is kept; the state stays; the turn goes
        on.\""""
        reviewer = _Reviewer(-1, required=False, type_=DIAGNOSTIC)
        with _middleware_runtime(shared_url, [reviewer]) as runtime:
            session = runtime.session("s1")
            assert session.run("pay", timeout=WAIT).status == "completed"
            assert len(events_of(session, DIAGNOSTIC)) == 1
            assert session.app_state(DIAGNOSTIC) == {}

    def test_two_created_sessions_have_different_opaque_ids_and_isolated_histories(
        self, make_runtime: MakeRuntime
    ) -> None:
        """Everruns: "Two sessions opened on one engine have different opaque IDs and isolated
        histories." and "Reopen it by passing its typed `SessionId` to the engine that created
        it.\""""
        runtime = make_runtime(nb.ScriptedModel(_echo))
        first, second = runtime.create(), runtime.create()
        assert first.key.session_id != second.key.session_id
        first.run("My project is Atlas.", timeout=WAIT)
        assert second.transcript().messages == ()
        reopened = runtime.open(first.key.session_id)
        assert reopened.transcript().messages[0].text == "My project is Atlas."


class TestTheCatalogue:
    def test_message_history_includes_the_system_instructions(
        self, make_runtime: MakeRuntime
    ) -> None:
        """Seed (event table): "`message/system`, `message/user`, `message/assistant` | Message
        history".\""""
        session = make_runtime(nb.ScriptedModel(_echo), instructions="Be brief.").session("s1")
        session.run("hello", timeout=WAIT)
        types = [e.type for e in session.log.scan() if e.type.startswith("message/")]
        assert types == ["message/system", "message/user", "message/assistant"]
        assert events_of(session, "message/system")[0].payload["message"]["text"] == "Be brief."

    def test_verification_state_is_a_committed_event(self, store_url: str) -> None:
        """Seed (event table): "`task/changed`, `plan/changed`, `permission/changed`,
        `verification/result` | Task, plan, permission and verification state".\""""
        agent = nb.Agent(
            name="Test",
            agent_id="test-agent",
            model=nb.ScriptedModel(["maybe", "yes"]),
            verify=lambda text: text == "yes" or "answer yes or no",
        )
        with nb.Runtime(agent, store=store_url) as runtime:
            session = runtime.session("s1")
            assert session.run("decide", timeout=WAIT).output == "yes"
            results = [e.payload["passed"] for e in events_of(session, "verification/result")]
            assert results == [False, True]

    def test_saved_state_and_restoration_are_events(self, make_runtime: MakeRuntime) -> None:
        """Seed (event table): "`state/checkpoint`, `state/restored`, `recovery/applied`,
        `migration/baseline` | Saved state, restoration, reconciliation and imported state";
        "A checkpoint restores Agent working state" — and says which state it holds.\""""
        from agentnb.folds import load_context
        from agentnb.projections.digest import extend_digest

        session = make_runtime(nb.ScriptedModel(_held_then_answer), [held]).session("s1")
        _gates["g"] = Gate()
        _gates["g"].release()
        session.run("work", timeout=WAIT)
        for checkpoint in events_of(session, "state/checkpoint"):
            context = load_context(session.log.store, session.key, checkpoint.seq)
            assert checkpoint.payload["state"]["context_digest"] == extend_digest("", context)
        assert {"state/restored", "state/checkpoint"} <= nb.events.BUILTIN_TYPES
