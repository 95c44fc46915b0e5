"""People in the loop, interrupts, resume, cancel and reconcile, on a real runtime."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

import agentnb as nb
from agentnb.events import canonical_json, unregister_event_type
from tests.remote import DOORS, through_doors
from tests.runtime.helpers import WAIT, Gate, events_of, gated_script

MakeRuntime = Callable[..., nb.Runtime]

ORDERS: list[tuple[str, int]] = []


@nb.tool(confirm=True)
def create_order(item: str, qty: int) -> str:
    """Create a purchase order.

    Args:
        item: what to buy
        qty: how many
    """
    ORDERS.append((item, qty))
    return f"ordered {qty} x {item}"


@nb.tool(external=True)
def annual_quote(vendor: str) -> str:
    """Ask a vendor for an annual quote (answered outside)."""
    raise AssertionError("external tools never run here")


@pytest.fixture(autouse=True)
def _clear_orders() -> None:
    ORDERS.clear()


@pytest.fixture
def make_runtime(
    make_runtime: MakeRuntime, door: str, request: pytest.FixtureRequest
) -> MakeRuntime:
    """The runtime, with sessions reached through the parametrized door (local or remote)."""
    return through_doors(make_runtime, request)


def _suspended_order(
    make_runtime: MakeRuntime, *replies: object
) -> tuple[nb.Runtime, nb.Session, nb.Outcome]:
    model = nb.ScriptedModel([nb.ToolCall("create_order", {"item": "desk", "qty": 2}), *replies])
    runtime = make_runtime(model, [create_order])
    session = runtime.session("s1")
    return runtime, session, session.run("order two desks", timeout=WAIT)


class TestApproval:
    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_confirm_tool_suspends_without_running(self, make_runtime: MakeRuntime) -> None:
        """A confirm tool suspends the turn with a confirmation request and does not run."""
        _, session, outcome = _suspended_order(make_runtime, "done")
        assert outcome.status == "suspended"
        pending = session.pending()
        assert len(pending) == 1
        request = next(iter(pending.values()))
        assert request.kind == "confirmation"
        assert request.tool_name == "create_order"
        assert request.arguments == {"item": "desk", "qty": 2}
        assert request.turn_id == outcome.turn_id
        assert ORDERS == []
        assert [t.status for t in session.tasks()] == ["suspended"]

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_approval_after_restart_runs_the_tool_once_in_a_new_run(
        self, make_runtime: MakeRuntime
    ) -> None:
        """respond(True) after a runtime rebuild continues the same turn, new run, tool once."""
        first, session, outcome = _suspended_order(make_runtime)
        request_id = next(iter(session.pending()))
        first.close()
        model = nb.ScriptedModel(["Ordered two desks."])
        session = make_runtime(model, [create_order]).open("s1")
        assert list(session.pending()) == [request_id]
        receipt = session.respond(request_id, True)
        done = receipt.wait(timeout=WAIT)
        assert done.status == "completed"
        assert done.turn_id == outcome.turn_id
        assert done.run_id != outcome.run_id
        assert ORDERS == [("desk", 2)]
        assert session.pending() == {}
        roles = [m.role for m in session.transcript().messages]
        assert roles == ["user", "assistant", "tool", "assistant"]
        assert "Allow" not in " ".join(m.text for m in session.transcript().messages)

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_reject_with_reason_reaches_the_model(self, make_runtime: MakeRuntime) -> None:
        """A rejection never runs the tool; the model reads the reason as the call's result."""
        runtime, session, _ = _suspended_order(make_runtime, "Understood, no order.")
        request_id = next(iter(session.pending()))
        session.respond(request_id, nb.Answer.reject("over budget")).wait(timeout=WAIT)
        assert ORDERS == []
        model = runtime.agent.model
        assert isinstance(model, nb.ScriptedModel)
        assert "over budget" in model.requests[-1][-1].text
        assert events_of(session, "tool/result")[-1].payload["status"] == "denied"

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_rejected_call_result_is_marked_synthetic(self, make_runtime: MakeRuntime) -> None:
        """A rejected call never ran, so its made-up result says synthetic (ToolResult doc)."""
        _, session, _ = _suspended_order(make_runtime, "No order then.")
        request_id = next(iter(session.pending()))
        session.respond(request_id, nb.Answer.reject("over budget")).wait(timeout=WAIT)
        result = events_of(session, "tool/result")[-1].payload
        assert result["status"] == "denied"
        assert result["synthetic"] is True

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_approve_with_edited_arguments_runs_them(self, make_runtime: MakeRuntime) -> None:
        """Answer.approve(edited_args=...) runs the tool with the corrected arguments."""
        _, session, _ = _suspended_order(make_runtime, "ok")
        request_id = next(iter(session.pending()))
        answer = nb.Answer.approve(edited_args={"item": "desk", "qty": 3})
        session.respond({request_id: answer}).wait(timeout=WAIT)
        assert ORDERS == [("desk", 3)]
        dispatch = events_of(session, "tool/dispatch")[-1]
        assert dispatch.payload["arguments"] == {"item": "desk", "qty": 3}

    def test_retried_identical_answer_returns_the_same_receipt(
        self, make_runtime: MakeRuntime
    ) -> None:
        """Sending the same answers twice before they apply is harmless: same receipt."""
        gate = Gate()
        model = nb.ScriptedModel(
            gated_script([nb.ToolCall("create_order", {"item": "desk", "qty": 2}), "ok"], {1: gate})
        )
        session = make_runtime(model, [create_order]).session("s1")
        session.run("order", timeout=WAIT)
        request_id = next(iter(session.pending()))
        # Another holder keeps the lease, so the runtime cannot apply the first answer
        # before the second is sent: both see the request open.
        store = session.runtime.store
        deadline = time.monotonic() + WAIT
        while True:
            try:
                lease = store.acquire_lease(session.key, "elsewhere:1:rt_test", 60.0)
                break
            except nb.LeaseHeld:
                assert time.monotonic() < deadline, "the runtime never released the lease"
                time.sleep(0.05)
        first = session.respond(request_id, True)
        again = session.respond(request_id, True)
        assert again == first
        store.release_lease(lease)
        session.start()
        gate.wait_arrived()
        gate.release()
        first.wait(timeout=WAIT)
        assert ORDERS == [("desk", 2)]
        with pytest.raises(nb.InvalidAnswer):
            session.respond(request_id, True)


class TestInvalidAnswers:
    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_bad_answers_raise_and_write_nothing(self, make_runtime: MakeRuntime) -> None:
        """Unknown ids, wrong kinds, empty or mixed answers raise InvalidAnswer, no write."""
        _, session, _ = _suspended_order(make_runtime)
        request_id = next(iter(session.pending()))
        inbox_head = session.inbox.head()
        bad_calls: list[Callable[[], object]] = [
            lambda: session.respond("no-such-request", True),
            lambda: session.respond(request_id, "yes please"),
            lambda: session.respond(request_id, nb.Answer.output("text")),
            lambda: session.respond({}),
            lambda: session.respond(request_id),
            lambda: session.respond({request_id: True}, True),
            lambda: session.respond(request_id, nb.Answer.approve(edited_args={"qty": "x"})),
        ]
        for call in bad_calls:
            with pytest.raises(nb.InvalidAnswer):
                call()
        assert session.inbox.head() == inbox_head

    def test_answers_for_two_turns_are_refused(self) -> None:
        """One respond() may not answer requests of two different turns (pure decision)."""
        from agentnb.projections.decisions import check_respond
        from agentnb.projections.state import SessionState

        events = []
        for n, turn in enumerate(["turn_a", "turn_b"], start=1):
            events.append(
                nb.Event.create(
                    "interaction/requested",
                    {"request_id": f"req_{turn}", "kind": "ask_user", "prompt": "?"},
                    turn_id=turn,
                ).with_seq(n)
            )
        state = SessionState.fold(events)
        with pytest.raises(nb.InvalidAnswer, match="different turns"):
            check_respond(state, {"req_turn_a": "x", "req_turn_b": "y"}, tool=lambda n: None)
        assert check_respond(state, {"req_turn_a": "x"}, tool=lambda n: None) == (
            "turn_a",
            {"req_turn_a": {"output": "x"}},
        )


@pytest.mark.parametrize("door", DOORS, indirect=True)
class TestExternalAndQuestions:
    def test_external_request_survives_restart_and_text_answer_continues(
        self, make_runtime: MakeRuntime
    ) -> None:
        """A pending external call survives a restart; resume is refused; text continues it."""
        first = make_runtime(
            nb.ScriptedModel([nb.ToolCall("annual_quote", {"vendor": "acme"})]), [annual_quote]
        )
        outcome = first.session("s1").run("get a quote", timeout=WAIT)
        first.close()
        model = nb.ScriptedModel(["Acme quotes 1200."])
        session = make_runtime(model, [annual_quote]).open("s1")
        ((request_id, request),) = session.pending().items()
        assert request.kind == "external_execution"
        with pytest.raises(nb.CannotResume):
            session.resume(outcome.turn_id)
        done = session.respond(request_id, "1200 USD per year").wait(timeout=WAIT)
        assert done.turn_id == outcome.turn_id
        assert done.output == "Acme quotes 1200."
        assert "1200 USD per year" in [m.text for m in model.requests[0]]

    def test_ask_user_question_is_answered(self, make_runtime: MakeRuntime) -> None:
        """nb.ask_user makes an ask_user request whose prompt is the model's question."""
        model = nb.ScriptedModel(
            [nb.ToolCall("ask_user", {"question": "Which plan?"}), "Going with pro."]
        )
        session = make_runtime(model, [nb.ask_user]).session("s1")
        session.run("pick a plan", timeout=WAIT)
        ((request_id, request),) = session.pending().items()
        assert request.kind == "ask_user"
        assert request.prompt == "Which plan?"
        assert (
            session.respond(request_id, nb.Answer.output("pro")).wait(timeout=WAIT).output
            == "Going with pro."
        )


class TestInterruptResume:
    def test_interrupt_then_resume_keeps_the_turn_with_a_new_run(
        self, make_runtime: MakeRuntime
    ) -> None:
        """Interrupt stops the run; resume continues the same turn and input in a new run."""
        model = nb.ScriptedModel(["a" * 400, "resumed answer"], chunk_size=1, chunk_delay=0.002)
        session = make_runtime(model).session("s1")
        receipt = session.submit("write a lot")
        while not events_of(session, "model/chunk"):
            session.log.store.wait_for_head(session.key, session.log.head(), 0.1)
        assert session.interrupt() is True
        stopped = receipt.wait(timeout=WAIT)
        assert stopped.status == "interrupted"
        assert session.inspect().interrupted_turn == stopped.turn_id
        assert events_of(session, "model/end")[-1].payload["status"] == "cancelled"
        resumed = session.resume(stopped.turn_id).wait(timeout=WAIT)
        assert resumed.status == "completed"
        assert resumed.turn_id == stopped.turn_id
        assert resumed.run_id != stopped.run_id
        task = session.tasks()[0]
        assert task.input == "write a lot"
        assert task.run_ids == (stopped.run_id, resumed.run_id)

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_interrupt_when_idle_and_with_a_stale_run_id(self, make_runtime: MakeRuntime) -> None:
        """interrupt() is False when nothing runs; a stale run id raises NotRunning."""
        session = make_runtime(nb.ScriptedModel(["ok"])).session("s1")
        outcome = session.run("x", timeout=WAIT)
        assert session.interrupt() is False
        with pytest.raises(nb.NotRunning):
            session.interrupt(run_id=outcome.run_id)

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_async_tool_is_cancelled_and_its_call_left_uncertain(
        self, make_runtime: MakeRuntime
    ) -> None:
        """An interrupted async tool is cancelled; its call is uncertain until reconciled."""
        started = Gate()

        @nb.tool
        async def long_job(n: int) -> str:
            """Takes a long time."""
            started.arrived.set()
            await asyncio.sleep(30)
            return "never"

        model = nb.ScriptedModel([nb.ToolCall("long_job", {"n": 1}), "after reconcile"])
        session = make_runtime(model, [long_job]).session("s1")
        receipt = session.submit("run the job")
        started.wait_arrived()
        session.interrupt()
        stopped = receipt.wait(timeout=WAIT)
        assert stopped.status == "interrupted"
        uncertain = session.inspect().uncertain_tool_calls
        assert [c.tool_name for c in uncertain] == ["long_job"]
        with pytest.raises(nb.UncertainToolCalls) as info:
            session.resume(stopped.turn_id)
        assert [c.call_id for c in info.value.calls] == [uncertain[0].call_id]
        session.reconcile(
            {uncertain[0].call_id: nb.ToolOutcome.unknown()},
            reason="job system shows no trace of it",
        )
        assert session.inspect().uncertain_tool_calls == ()
        done = session.resume(stopped.turn_id).wait(timeout=WAIT)
        assert done.output == "after reconcile"
        assert "unknown" in model.requests[-1][-1].text
        assert events_of(session, "tool/result")[-1].payload["reconciled"] is True

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_queued_task_waits_for_the_interrupted_one_across_restart(
        self, make_runtime: MakeRuntime
    ) -> None:
        """A task queued behind an interrupted turn stays queued across a restart, then runs."""
        gate = Gate()
        model = nb.ScriptedModel(gated_script(["never"], {0: gate}))
        first = make_runtime(model)
        session = first.session("s1")
        one = session.submit("first")
        gate.wait_arrived()
        two = session.submit("second")
        session.interrupt()
        gate.release()
        assert one.wait(timeout=WAIT).status == "interrupted"
        first.close()
        model2 = nb.ScriptedModel(["first done", "second done"])
        session = make_runtime(model2).open("s1")
        session.start()
        assert [t.status for t in session.tasks()] == ["interrupted", "queued"]
        session.resume(one.turn_id).wait(timeout=WAIT)
        assert session.wait(two, timeout=WAIT).output == "second done"
        assert [t.status for t in session.tasks()] == ["completed", "completed"]

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_resume_refusals(self, make_runtime: MakeRuntime) -> None:
        """resume() refuses completed, unknown and not-latest turns with CannotResume."""
        session = make_runtime(nb.ScriptedModel(["one", "two"])).session("s1")
        done = session.run("a", timeout=WAIT)
        with pytest.raises(nb.CannotResume):
            session.resume(done.turn_id)
        with pytest.raises(nb.CannotResume):
            session.resume("turn_unknown")

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_steering_left_unapplied_is_applied_on_resume(self, make_runtime: MakeRuntime) -> None:
        """Guidance accepted but not applied before an interrupt reaches the resumed run."""
        gate = Gate()
        model = nb.ScriptedModel(gated_script(["cut off", "with guidance"], {0: gate}))
        session = make_runtime(model).session("s1")
        receipt = session.submit("task")
        gate.wait_arrived()
        session.steer("prefer the cheaper plan")
        session.interrupt()
        gate.release()
        stopped = receipt.wait(timeout=WAIT)
        assert stopped.status == "interrupted"
        session.resume(stopped.turn_id).wait(timeout=WAIT)
        seen = [m.text for m in model.requests[-1]]
        assert seen.count("prefer the cheaper plan") == 1


@pytest.mark.parametrize("door", DOORS, indirect=True)
class TestCancel:
    def test_cancel_queued_suspended_and_idempotent(self, make_runtime: MakeRuntime) -> None:
        """cancel() ends a suspended turn (closing its request) and a queued one; twice is ok."""
        _, session, outcome = _suspended_order(make_runtime, "next task done")
        queued = session.submit("later")
        third = session.submit("even later")
        session.cancel(third.turn_id)
        session.cancel(outcome.turn_id)
        session.cancel(outcome.turn_id)
        assert session.pending() == {}
        assert events_of(session, "interaction/resolved")[-1].payload["status"] == "cancelled"
        assert queued.wait(timeout=WAIT).output == "next task done"
        assert [t.status for t in session.tasks()] == ["cancelled", "completed", "cancelled"]
        assert ORDERS == []

    def test_cancel_of_a_completed_or_unknown_turn_is_refused(
        self, make_runtime: MakeRuntime
    ) -> None:
        """Cancelling a completed or unknown turn raises InvalidInput."""
        session = make_runtime(nb.ScriptedModel(["ok"])).session("s1")
        done = session.run("x", timeout=WAIT)
        with pytest.raises(nb.InvalidInput):
            session.cancel(done.turn_id)
        with pytest.raises(nb.InvalidInput):
            session.cancel("turn_nope")


@pytest.mark.parametrize("door", DOORS, indirect=True)
class TestReconcileValidation:
    def test_reconcile_needs_the_exact_set_and_a_reason(self, make_runtime: MakeRuntime) -> None:
        """reconcile() refuses a partial or extra key set, a missing reason, bad outcomes."""
        session = make_runtime(nb.ScriptedModel(["ok"])).session("s1")
        session.run("x", timeout=WAIT)
        with pytest.raises(nb.InvalidInput):
            session.reconcile({}, reason="")
        with pytest.raises(nb.InvalidInput):
            session.reconcile({"call_x": nb.ToolOutcome.success("ok")}, reason="checked")
        with pytest.raises(nb.InvalidInput):
            nb.ToolOutcome.success(5)  # type: ignore[arg-type]


class TestApplicationEvents:
    def test_unknown_required_type_stops_recovery(self, make_runtime: MakeRuntime) -> None:
        """A required application event this reader cannot decode fails closed, naming it."""
        nb.register_event_type("acme/audit", required=True)
        try:

            @nb.tool
            def audited(x: int, ctx: nb.ToolContext) -> str:
                """Records a required audit event."""
                ctx.record("acme/audit", {"x": x}, required=True)
                return "ok"

            model = nb.ScriptedModel([nb.ToolCall("audited", {"x": 1}), "fine"])
            first = make_runtime(model, [audited])
            first.session("s1").run("go", timeout=WAIT)
            first.close()
        finally:
            unregister_event_type("acme/audit")
        session = make_runtime(nb.ScriptedModel([])).open("s1")
        with pytest.raises(nb.UnknownRequiredEvent, match="acme/audit") as info:
            session.transcript()
        assert "seq" in str(info.value)


class TestAutoResume:
    def test_worker_runtime_resumes_a_crashed_turn(self, make_runtime: MakeRuntime) -> None:
        """With auto_resume, a run left open by a dead runtime is recovered and resumed."""
        model = nb.ScriptedModel(["finished after the crash"])
        runtime = make_runtime(model, auto_resume=True)
        store = runtime.store  # the runtime's own: closed with it
        key = nb.SessionKey("default", "default", "test-agent", "s1")
        store.create_session(key)
        log = nb.SessionLog(store, key)
        inbox = nb.Inbox(store, key)
        accepted, _ = inbox.accept("submit", turn_id="turn_dead", input="finish me")
        cmd = accepted.payload["command_id"]
        dead = [
            nb.Event.create(
                "inbox/started",
                {"command_id": cmd, "kind": "submit"},
                turn_id="turn_dead",
                run_id="run_dead",
            ),
            nb.Event.create(
                "turn/start",
                {"input": "finish me", "command_id": cmd},
                turn_id="turn_dead",
                run_id="run_dead",
            ),
            nb.Event.create(
                "run/start",
                {"reason": "submit", "command_id": cmd},
                turn_id="turn_dead",
                run_id="run_dead",
            ),
            nb.Event.create(
                "message/user",
                {"message": {"id": "msg_1", "role": "user", "text": "finish me"}},
                turn_id="turn_dead",
                run_id="run_dead",
            ),
        ]
        log.append(dead, expected_seq=0)
        session = runtime.open("s1")
        assert session.tasks()[0].status == "interrupted"
        session.start()
        deadline_receipt = nb.Receipt(cmd, "turn_dead", None, "queued", None, session)
        deadline_receipt.wait(timeout=WAIT)
        for _ in range(200):
            if session.tasks()[0].status == "completed":
                break
            store.wait_for_head(key, session.log.head(), 0.1)
        assert session.tasks()[0].status == "completed"
        runs = events_of(session, "recovery/applied")[0].payload["interrupted_runs"]
        assert list(runs) == ["run_dead"]
        assert session.transcript().messages[-1].text == "finished after the crash"


class TestFork:
    def test_fork_continues_with_the_same_context_and_leaves_the_source(
        self, make_runtime: MakeRuntime
    ) -> None:
        """A fork starts from a baseline with the source's context; the source is unchanged."""
        model = nb.ScriptedModel(["Pro costs $10.", "In the fork: yes."])
        runtime = make_runtime(model)
        source = runtime.session("s1")
        source.run("How much is pro?", timeout=WAIT)
        head, transcript = source.log.head(), source.transcript().messages
        fork = source.fork("s1-fork")
        assert [e.type for e in fork.log.scan()] == ["migration/baseline"]
        assert fork.transcript().messages == transcript
        assert fork.history().messages == transcript
        assert fork.run("Is that monthly?", timeout=WAIT).output == "In the fork: yes."
        assert [m.text for m in model.requests[-1]][1:] == [
            "How much is pro?",
            "Pro costs $10.",
            "Is that monthly?",
        ]
        assert source.log.head() == head
        assert source.transcript().messages == transcript
        assert sorted(k.session_id for k in runtime.all_keys()) == ["s1", "s1-fork"]

    def test_export_refuses_a_busy_session_and_import_refuses_a_used_one(
        self, make_runtime: MakeRuntime
    ) -> None:
        """export_state needs a quiescent session; import_baseline needs an empty one."""
        _, session, _ = _suspended_order(make_runtime)
        with pytest.raises(nb.InvalidInput, match="not quiescent"):
            session.export_state()
        with pytest.raises(nb.InvalidInput, match="not empty"):
            session.import_baseline({"messages": []})
        with pytest.raises(nb.InvalidInput):
            session.import_baseline({"nope": 1})

    def test_importing_the_same_baseline_twice_is_a_no_op(self, make_runtime: MakeRuntime) -> None:
        """A retried import of the same state writes nothing new."""
        runtime = make_runtime(nb.ScriptedModel(["a"]))
        source = runtime.session("s1")
        source.run("x", timeout=WAIT)
        state = source.export_state()
        target = runtime.session("t1")
        target.import_baseline(state)
        target.import_baseline(state)
        assert target.log.head() == 1


class TestSnapshots:
    def test_reopen_from_a_snapshot_gives_the_same_state(self, make_runtime: MakeRuntime) -> None:
        """Folds saved as a snapshot and reloaded equal a fold of the whole log."""
        from agentnb.folds import Folds
        from agentnb.projections.state import SessionState

        model = nb.ScriptedModel([nb.ToolCall("create_order", {"item": "a", "qty": 1}), "x"])
        runtime = make_runtime(model, [create_order])
        session = runtime.session("s1")
        session.run("order", timeout=WAIT)
        folds = Folds(runtime.store, session.key)
        folds.refresh()
        folds.save_if_due(every=1)
        full = SessionState.fold(session.log.scan())
        again = Folds(runtime.store, session.key)
        state, _ = again.refresh()
        assert runtime.store.get_snapshot(session.key, "session-folds") is not None
        # Equal as the JSON a snapshot is (the fold keeps frozen tuples where JSON has lists).
        assert canonical_json(state.dump()) == canonical_json(full.dump())
        assert again._saved_seq == full.seq  # loaded from the snapshot, not replayed
