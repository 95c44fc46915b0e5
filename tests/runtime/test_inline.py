"""Inline confirmation: a run that needs a person waits in place and goes on in the same run
(``Agent(wait_inline=)``, ``@nb.tool(wait_inline=)``), or falls back to suspending, with why."""

from __future__ import annotations

import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import agentnb as nb
from tests.remote import DOORS, through_doors
from tests.runtime import _inline_child as child
from tests.runtime.helpers import REPO, WAIT, events_of

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


@nb.tool(confirm=True, wait_inline=0)
def never_waits(item: str) -> str:
    """A confirm tool whose requests never wait in place (its own ``wait_inline=0``)."""
    ORDERS.append((item, 0))
    return f"done {item}"


@nb.tool(confirm=True, wait_inline=WAIT)
def always_waits(item: str) -> str:
    """A confirm tool whose requests wait in place even when the agent's do not."""
    ORDERS.append((item, 1))
    return f"done {item}"


@nb.tool(external=True)
def annual_quote(vendor: str) -> str:
    """Ask a vendor for an annual quote (answered outside)."""
    raise AssertionError("external tools never run here")


@nb.tool
def book(table: int, ctx: nb.ToolContext) -> str:
    """Book a table once the person says so (asks mid-call).

    Args:
        table: which table
    """
    answer = ctx.ask(f"Book table {table}?")
    ORDERS.append((f"table {answer.text}", table))
    return f"booked: {answer.text}"


@pytest.fixture(autouse=True)
def _clear_orders() -> None:
    ORDERS.clear()


@pytest.fixture
def make_runtime(
    make_runtime: MakeRuntime, door: str, request: pytest.FixtureRequest
) -> MakeRuntime:
    """The runtime, with sessions reached through the parametrized door (local or remote)."""
    return through_doors(make_runtime, request)


def _pending(session: Any, count: int = 1) -> list[str]:
    """The ids of the session's pending requests, once there are ``count`` of them."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        pending = session.pending()
        if len(pending) >= count:
            return list(pending)
        time.sleep(0.02)
    raise AssertionError(f"fewer than {count} requests were pending within {WAIT}s")


def _order(make_runtime: MakeRuntime, wait: float, *tools: nb.Tool) -> tuple[Any, Any]:
    """A session whose model calls ``create_order`` (or ``tools[0]``) once, then answers."""
    tool = tools[0] if tools else create_order
    arguments = {"item": "desk", "qty": 2} if tool is create_order else {"item": "desk"}
    model = nb.ScriptedModel([nb.ToolCall(tool.name, arguments), "done"])
    runtime = make_runtime(model, [tool], wait_inline=wait)
    session = runtime.session("s1")
    return session, session.submit("order two desks")


def _runs(session: Any, turn_id: str) -> list[str]:
    return [e.run_id for e in events_of(session, "run/start") if e.turn_id == turn_id]


def _run_end(session: Any, run_id: str) -> dict[str, Any]:
    ends = [e.payload for e in events_of(session, "run/end") if e.run_id == run_id]
    assert len(ends) == 1
    return dict(ends[0])


@pytest.mark.parametrize("door", DOORS, indirect=True)
class TestSameRun:
    def test_an_answer_in_time_continues_the_same_run(self, make_runtime: MakeRuntime) -> None:
        """Answered while the run waits, the turn goes on in the run that asked."""
        session, receipt = _order(make_runtime, WAIT)
        (request_id,) = _pending(session)
        answered = session.respond(request_id, True)
        outcome = session.wait(answered, timeout=WAIT)
        assert outcome.status == "completed"
        assert outcome.output == "done"
        (run_id,) = _runs(session, receipt.turn_id)
        assert outcome.run_id == run_id  # the respond receipt observes that run
        (resolved,) = events_of(session, "interaction/resolved")
        assert resolved.run_id == run_id
        assert ORDERS == [("desk", 2)]
        assert _run_end(session, run_id)["stop_reason"] == "final_answer"
        assert session.wait(receipt, timeout=WAIT).run_id == run_id

    def test_a_rejection_in_time_continues_the_same_run(self, make_runtime: MakeRuntime) -> None:
        """A rejection is carried out in the same run too: the tool never runs."""
        session, receipt = _order(make_runtime, WAIT)
        (request_id,) = _pending(session)
        outcome = session.wait(session.respond(request_id, False), timeout=WAIT)
        assert outcome.status == "completed"
        assert len(_runs(session, receipt.turn_id)) == 1
        assert ORDERS == []

    def test_a_tool_of_its_own_waits_when_the_agent_does_not(
        self, make_runtime: MakeRuntime
    ) -> None:
        """``@nb.tool(wait_inline=)`` overrides the agent's 0: its request waits in place."""
        session, receipt = _order(make_runtime, 0.0, always_waits)
        (request_id,) = _pending(session)
        outcome = session.wait(session.respond(request_id, True), timeout=WAIT)
        assert outcome.status == "completed"
        assert len(_runs(session, receipt.turn_id)) == 1

    @pytest.mark.parametrize(
        ("tool", "arguments", "answer"),
        [
            (annual_quote, {"vendor": "acme"}, "USD 12,000"),
            (book, {"table": 4}, "yes"),
            (nb.ask_user, {"question": "Which plan?"}, "plan B"),
        ],
        ids=["external", "ctx-ask", "ask_user"],
    )
    def test_every_kind_of_request_is_answered_in_the_same_run(
        self, make_runtime: MakeRuntime, tool: nb.Tool, arguments: dict[str, Any], answer: str
    ) -> None:
        """An external result, a tool's own question and ``ask_user`` are answered in the
        run that asked, like an approval."""
        model = nb.ScriptedModel([nb.ToolCall(tool.name, arguments), "done"])
        runtime = make_runtime(model, [tool], wait_inline=WAIT)
        session = runtime.session("s1")
        receipt = session.submit("go")
        (request_id,) = _pending(session)
        outcome = session.wait(session.respond(request_id, answer), timeout=WAIT)
        assert outcome.status == "completed"
        (run_id,) = _runs(session, receipt.turn_id)
        (result,) = events_of(session, "tool/result")
        assert answer in result.payload["output"]
        assert result.run_id == run_id

    def test_two_parallel_calls_answered_one_after_the_other_wait_together(
        self, make_runtime: MakeRuntime
    ) -> None:
        """Two confirm calls of one step wait together: two answers, one run."""
        model = nb.ScriptedModel(
            [
                [
                    nb.ToolCall("create_order", {"item": "desk", "qty": 1}),
                    nb.ToolCall("create_order", {"item": "lamp", "qty": 2}),
                ],
                "done",
            ]
        )
        runtime = make_runtime(model, [create_order], wait_inline=WAIT)
        session = runtime.session("s1")
        receipt = session.submit("order a desk and a lamp")
        first, second = _pending(session, 2)
        session.respond(first, True)
        deadline = time.monotonic() + WAIT
        while first in session.pending() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert list(session.pending()) == [second]  # recorded, the run still waits
        assert [t.status for t in session.tasks()] == ["running"]
        outcome = session.wait(session.respond(second, True), timeout=WAIT)
        assert outcome.status == "completed"
        (run_id,) = _runs(session, receipt.turn_id)
        assert {e.run_id for e in events_of(session, "interaction/resolved")} == {run_id}
        assert sorted(ORDERS) == [("desk", 1), ("lamp", 2)]


@pytest.mark.parametrize("door", DOORS, indirect=True)
class TestFallBack:
    def test_the_wait_running_out_suspends_with_the_reason(self, make_runtime: MakeRuntime) -> None:
        """Past the wait, the run ends suspended saying the inline wait expired; the answer
        then continues the turn in a new run, as without a wait."""
        session, receipt = _order(make_runtime, 0.2)
        outcome = session.wait(receipt, timeout=WAIT)
        assert outcome.status == "suspended"
        end = _run_end(session, outcome.run_id)
        assert end["status"] == "suspended"
        assert end["stop_reason"] == "inline_wait_expired"
        assert "inline wait of 0.2 s expired" in end["reason"]
        (request_id,) = session.pending()
        answered = session.wait(session.respond(request_id, True), timeout=WAIT)
        assert answered.status == "completed"
        assert len(_runs(session, receipt.turn_id)) == 2
        assert ORDERS == [("desk", 2)]

    def test_an_interrupt_during_the_wait_suspends_and_keeps_the_request(
        self, make_runtime: MakeRuntime
    ) -> None:
        """An interrupt ends the wait: the run ends suspended (the request stays pending,
        the reason says the wait ended early), and the answer still continues the turn."""
        session, receipt = _order(make_runtime, WAIT)
        (request_id,) = _pending(session)
        assert session.interrupt()
        outcome = session.wait(receipt, timeout=WAIT)
        assert outcome.status == "suspended"
        end = _run_end(session, outcome.run_id)
        assert end["stop_reason"] == "interrupted"
        assert "ended early" in end["reason"]
        assert list(session.pending()) == [request_id]
        assert events_of(session, "run/stop_requested")
        answered = session.wait(session.respond(request_id, True), timeout=WAIT)
        assert answered.status == "completed"
        assert ORDERS == [("desk", 2)]

    def test_a_tool_that_never_waits_suspends_at_once(self, make_runtime: MakeRuntime) -> None:
        """``@nb.tool(wait_inline=0)`` overrides the agent's wait: its request suspends."""
        session, receipt = _order(make_runtime, WAIT, never_waits)
        outcome = session.wait(receipt, timeout=WAIT)
        assert outcome.status == "suspended"
        assert _run_end(session, outcome.run_id)["stop_reason"] == "needs_person"


class TestLease:
    def test_the_waiting_run_keeps_renewing_its_lease(self, make_runtime: MakeRuntime) -> None:
        """A run waiting longer than its lease's life keeps the lease (same holder, same
        epoch, later expiry) and still goes on in the same run."""
        model = nb.ScriptedModel([nb.ToolCall("create_order", {"item": "desk", "qty": 2}), "ok"])
        runtime = make_runtime(model, [create_order], wait_inline=WAIT, lease_ttl=1.0)
        session = runtime.session("s1")
        receipt = session.submit("order two desks")
        (request_id,) = _pending(session)
        before = runtime.store.current_lease(session.key)
        assert before is not None
        time.sleep(2.5)  # past the lease's life: only renewals keep it
        after = runtime.store.current_lease(session.key)
        assert after is not None
        assert (after.owner, after.epoch) == (before.owner, before.epoch)
        assert after.expires_at > before.expires_at
        outcome = session.wait(session.respond(request_id, True), timeout=WAIT)
        assert outcome.status == "completed"
        assert _runs(session, receipt.turn_id) == [outcome.run_id]


class TestTimeLimit:
    def test_the_wait_does_not_count_toward_the_task_s_time_limit(
        self, make_runtime: MakeRuntime
    ) -> None:
        """Waiting in place for a person is not executing: a task whose time limit passes
        while it waits still goes on when the answer arrives."""
        model = nb.ScriptedModel([nb.ToolCall("create_order", {"item": "desk", "qty": 2}), "ok"])
        session = make_runtime(model, [create_order], wait_inline=WAIT).session("s1")
        receipt = session.submit("order two desks", timeout=1.0)
        (request_id,) = _pending(session)
        time.sleep(1.5)  # past the task's limit, all of it spent waiting for the answer
        assert [t.status for t in session.tasks()] == ["running"]
        outcome = session.wait(session.respond(request_id, True), timeout=WAIT)
        assert (outcome.status, outcome.stop_reason) == ("completed", "final_answer")
        assert _runs(session, receipt.turn_id) == [outcome.run_id]


class TestClose:
    def test_closing_the_session_during_the_wait_suspends(self, make_runtime: MakeRuntime) -> None:
        """``close()`` ends the wait: the run ends suspended with the close's code."""
        session, receipt = _order(make_runtime, WAIT)
        (request_id,) = _pending(session)
        session.close()
        outcome = session.wait(receipt, timeout=WAIT)
        assert outcome.status == "suspended"
        assert _run_end(session, outcome.run_id)["stop_reason"] == "session_closed"
        assert list(session.pending()) == [request_id]

    def test_closing_the_runtime_during_the_wait_suspends(self, tmp_path: Path) -> None:
        """Closing the runtime ends the wait: the run ends suspended (``runtime_closed``), and
        the next runtime's answer continues the turn."""
        url = f"sqlite:///{tmp_path / 'agentnb.sqlite'}"
        runtime = nb.Runtime(child.make_agent(wait_inline=WAIT), store=url)
        session = runtime.session("s1")
        receipt = session.submit(child.TASK)
        (request_id,) = _pending(session)
        runtime.close()
        with nb.Runtime(child.make_agent(wait_inline=WAIT), store=url) as again:
            reopened = again.open("s1")
            (task,) = reopened.tasks()
            assert task.status == "suspended"
            (run_id,) = _runs(reopened, receipt.turn_id)
            end = _run_end(reopened, run_id)
            assert (end["status"], end["stop_reason"]) == ("suspended", "runtime_closed")
            outcome = reopened.wait(reopened.respond(request_id, True), timeout=WAIT)
            assert outcome.output == child.ANSWER


class TestBadInput:
    @pytest.mark.parametrize("bad", [-1, float("nan"), float("inf"), True, "30"])
    def test_a_bad_agent_wait_is_refused_naming_the_field(self, bad: object) -> None:
        """``Agent(wait_inline=)`` refuses what is not 0 or positive finite seconds."""
        with pytest.raises(nb.InvalidInput, match="wait_inline"):
            nb.Agent("a", "a", nb.ScriptedModel(["x"]), wait_inline=bad)  # type: ignore[arg-type]

    @pytest.mark.parametrize("bad", [-1, float("nan"), True, "30"])
    def test_a_bad_tool_wait_is_refused_naming_the_field(self, bad: object) -> None:
        """``@nb.tool(wait_inline=)`` refuses it the same way, naming the tool."""
        with pytest.raises(nb.InvalidInput, match=r"'shout'.*wait_inline"):

            @nb.tool(confirm=True, wait_inline=bad)  # type: ignore[arg-type]
            def shout(text: str) -> str:
                """Shout."""
                return text.upper()

    def test_the_default_is_today_s_suspension(self) -> None:
        """An agent made without ``wait_inline`` does not wait (0), and its tools defer to it."""
        agent = nb.Agent("a", "a", nb.ScriptedModel(["x"]), tools=[create_order])
        assert agent.wait_inline == 0.0
        assert create_order.wait_inline is None
        assert agent.with_opened(()).wait_inline == 0.0
        assert (
            nb.Agent("a", "a", nb.ScriptedModel(["x"]), wait_inline=3).with_opened(()).wait_inline
            == 3.0
        )


def _kill_while_waiting(url: str) -> tuple[str, str]:
    """Run ``_inline_child`` on ``url`` until its run waits in place, then ``kill -9`` it:
    (turn_id, request_id) of the request it waited on, its lease held by a dead process."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.runtime._inline_child", url],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True).start()
        deadline = time.monotonic() + WAIT
        while True:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError("the child never waited for the answer") from None
            if line.startswith("WAITING "):
                _, turn_id, request_id = line.split()
                break
        proc.send_signal(signal.SIGKILL)
        proc.wait(WAIT)
        return turn_id, request_id
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(WAIT)
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


@pytest.fixture(params=["sqlite", "postgres"])
def shared_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store URL two processes can share (memory stores are per process)."""
    if request.param == "postgres":
        url: str = request.getfixturevalue("pg_store_url")
        return url
    return f"sqlite:///{tmp_path / 'agentnb.sqlite'}"


class TestCrash:
    def test_kill_9_during_the_wait_leaves_the_turn_suspended_and_answerable(
        self, shared_url: str
    ) -> None:
        """After kill -9 of the waiting process, a new runtime closes the run as suspended
        (not running, not interrupted) and the answer continues the turn once."""
        url = shared_url
        turn_id, request_id = _kill_while_waiting(url)
        child.ORDERS.clear()
        with nb.Runtime(child.make_agent(wait_inline=0.0), store=url) as runtime:
            session = runtime.open(child.SESSION_ID, user_id=child.USER_ID)
            (task,) = session.tasks()
            assert task.status == "suspended"  # read before anyone recovered it
            outcome = session.wait(task, timeout=WAIT)
            assert (outcome.status, outcome.stop_reason) == ("suspended", "crash")
            assert list(session.pending()) == [request_id]
            (crashed,) = _runs(session, turn_id)
            answered = session.wait(session.respond(request_id, True), timeout=WAIT)
            assert answered.status == "completed"
            assert answered.output == child.ANSWER
            assert child.ORDERS == ["desk"]
            assert _runs(session, turn_id) == [crashed, answered.run_id]
            end = _run_end(session, crashed)  # closed on recovery as the suspension
            assert (end["status"], end["stop_reason"]) == ("suspended", "crash")
            assert "waited for a person" in end["reason"]
