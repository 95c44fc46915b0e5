"""Double-texting: ``send`` steers a task that is about to start, and ``submit(...,
if_busy=)`` queues, refuses, interrupts or steers when the session is busy."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import agentnb as nb
from tests.remote import DOORS, through_doors
from tests.runtime.helpers import WAIT, Gate, events_of, gated_script

MakeRuntime = Callable[..., nb.Runtime]


@pytest.fixture
def make_runtime(
    make_runtime: MakeRuntime, door: str, request: pytest.FixtureRequest
) -> MakeRuntime:
    """The runtime, with sessions reached through the parametrized door (local or remote)."""
    return through_doors(make_runtime, request)


def _user_texts(request: list[nb.Message]) -> list[str]:
    return [m.text for m in request if m.role == "user"]


@pytest.mark.parametrize("door", DOORS, indirect=True)
class TestSendSteersAStartingTurn:
    def test_a_second_send_steers_the_turn_the_first_started(
        self, make_runtime: MakeRuntime
    ) -> None:
        """A send before the turn another send started has run steers that turn: one turn,
        the guidance applied at its first step."""
        submitter = make_runtime(nb.ScriptedModel([]), execute=False)
        session = submitter.session("s1")
        initial = session.send("Plan my trip.")
        latest = session.send("Prefer trains.")
        assert initial.disposition == "started"
        assert latest.disposition == "steered"
        assert latest.turn_id == initial.turn_id
        assert latest.run_id is None
        assert latest.status == "queued"
        model = nb.ScriptedModel(["Trains it is."])
        worker = make_runtime(model)
        getattr(worker, "runtime", worker).session("s1").start()  # a worker takes it up
        outcome = latest.wait(timeout=WAIT)
        assert outcome.status == "completed"
        assert outcome.output == "Trains it is."
        assert outcome.turn_id == initial.turn_id
        assert initial.wait(timeout=WAIT).run_id == outcome.run_id
        assert len(model.requests) == 1  # one model call saw both messages
        assert _user_texts(model.requests[0]) == ["Plan my trip.", "Prefer trains."]
        assert len(session.tasks()) == 1

    def test_send_behind_two_waiting_tasks_queues(self, make_runtime: MakeRuntime) -> None:
        """With more than one task waiting, a send does not guess which to steer: it queues."""
        session = make_runtime(nb.ScriptedModel([]), execute=False).session("s1")
        session.submit("one")
        session.submit("two")
        receipt = session.send("three")
        assert receipt.disposition == "queued"
        assert len(session.tasks()) == 3

    def test_a_cancelled_starting_task_is_not_steered(self, make_runtime: MakeRuntime) -> None:
        """Once the task about to start is cancelled, a send starts a task of its own."""
        session = make_runtime(nb.ScriptedModel([]), execute=False).session("s1")
        first = session.submit("one")
        session.cancel(first.turn_id)
        receipt = session.send("two")
        assert receipt.disposition == "started"
        assert receipt.turn_id != first.turn_id


@pytest.mark.parametrize("door", DOORS, indirect=True)
class TestIfBusy:
    def test_queue_is_the_default_and_today_s_behaviour(self, make_runtime: MakeRuntime) -> None:
        """if_busy="queue" (the default) queues behind the running turn, no disposition."""
        gate = Gate()
        session = make_runtime(nb.ScriptedModel(gated_script(["a", "b"], {0: gate}))).session("s1")
        first = session.submit("one")
        gate.wait_arrived()
        second = session.submit("two", if_busy="queue")
        assert second.disposition is None
        assert second.turn_id != first.turn_id
        gate.release()
        assert first.wait(timeout=WAIT).output == "a"
        assert second.wait(timeout=WAIT).output == "b"

    def test_reject_raises_session_busy_and_writes_nothing(self, make_runtime: MakeRuntime) -> None:
        """if_busy="reject" while a turn runs raises SessionBusy naming it; nothing written."""
        gate = Gate()
        session = make_runtime(nb.ScriptedModel(gated_script(["a"], {0: gate}))).session("s1")
        first = session.submit("one")
        gate.wait_arrived()
        head = session.inbox.head()
        with pytest.raises(nb.SessionBusy) as caught:
            session.submit("two", if_busy="reject")
        assert caught.value.turn_id == first.turn_id
        assert caught.value.status == "running"
        assert "if_busy='queue'" in str(caught.value)
        assert session.inbox.head() == head
        gate.release()
        first.wait(timeout=WAIT)
        assert [t.turn_id for t in session.tasks()] == [first.turn_id]

    def test_reject_starts_a_task_when_idle(self, make_runtime: MakeRuntime) -> None:
        """if_busy="reject" on an idle session starts the task (disposition "started")."""
        session = make_runtime(nb.ScriptedModel(["a"])).session("s1")
        receipt = session.submit("one", if_busy="reject")
        assert receipt.disposition == "started"
        assert receipt.wait(timeout=WAIT).output == "a"

    def test_reject_counts_a_parked_queue_as_busy(self, make_runtime: MakeRuntime) -> None:
        """A task that would wait behind a turn waiting for a person is refused too."""
        session = make_runtime(
            nb.ScriptedModel([nb.ToolCall("ask_user", {"question": "which?"})]), [nb.ask_user]
        ).session("s1")
        first = session.submit("one")
        assert first.wait(timeout=WAIT).status == "suspended"
        with pytest.raises(nb.SessionBusy) as caught:
            session.submit("two", if_busy="reject")
        assert caught.value.turn_id == first.turn_id
        assert caught.value.status == "suspended"

    def test_interrupt_stops_the_running_turn_and_starts_the_new_one(
        self, make_runtime: MakeRuntime
    ) -> None:
        """if_busy="interrupt" ends the running turn interrupted (not cancelled) and the new
        task runs next, ahead of it, seeing its work so far."""
        gate = Gate()
        model = nb.ScriptedModel(
            gated_script([nb.ToolCall("lookup", {"q": "x"}), "new answer"], {0: gate})
        )

        @nb.tool
        def lookup(q: str) -> str:
            """Look something up.

            Args:
                q: what
            """
            return f"found {q}"

        session = make_runtime(model, [lookup]).session("s1")
        first = session.submit("old task")
        gate.wait_arrived()
        second = session.submit("new task", if_busy="interrupt")
        assert second.disposition == "started"
        gate.release()
        assert first.wait(timeout=WAIT).status == "interrupted"
        outcome = second.wait(timeout=WAIT)
        assert outcome.status == "completed"
        assert outcome.output == "new answer"
        statuses = {t.turn_id: t.status for t in session.tasks()}
        assert statuses == {first.turn_id: "interrupted", second.turn_id: "completed"}
        assert "old task" in _user_texts(model.requests[-1])  # its work stays in the context
        assert not events_of(session, "turn/cancelled")

    def test_the_stopped_turn_is_set_aside_and_can_be_closed(
        self, make_runtime: MakeRuntime
    ) -> None:
        """After if_busy="interrupt", resuming the stopped turn is refused naming the task
        that went ahead; cancel() closes it; the queue moves on."""
        gate = Gate()
        session = make_runtime(
            nb.ScriptedModel(gated_script(["x", "new", "third"], {0: gate}))
        ).session("s1")
        first = session.submit("old task")
        gate.wait_arrived()
        second = session.submit("new task", if_busy="interrupt")
        gate.release()
        second.wait(timeout=WAIT)
        with pytest.raises(nb.CannotResume, match=second.turn_id):
            session.resume(first.turn_id)
        session.cancel(first.turn_id)
        assert session.run("third task", timeout=WAIT).output == "third"
        statuses = [t.status for t in session.tasks()]
        assert statuses == ["cancelled", "completed", "completed"]

    def test_interrupt_on_an_idle_session_just_starts(self, make_runtime: MakeRuntime) -> None:
        """if_busy="interrupt" with nothing running starts the task; nothing is interrupted."""
        session = make_runtime(nb.ScriptedModel(["a"])).session("s1")
        receipt = session.submit("one", if_busy="interrupt")
        assert receipt.disposition == "started"
        assert receipt.wait(timeout=WAIT).status == "completed"

    def test_steer_guides_the_running_turn(self, make_runtime: MakeRuntime) -> None:
        """if_busy="steer" while a turn runs steers it: same turn, no second task."""
        gate = Gate()
        model = nb.ScriptedModel(gated_script(["a", "a2"], {0: gate}))
        session = make_runtime(model).session("s1")
        first = session.submit("one")
        gate.wait_arrived()
        steered = session.submit("focus on cost", if_busy="steer")
        assert steered.disposition == "steered"
        assert steered.turn_id == first.turn_id
        gate.release()
        assert steered.wait(timeout=WAIT).output == "a2"
        assert "focus on cost" in _user_texts(model.requests[-1])
        assert len(session.tasks()) == 1

    def test_a_retried_steer_under_its_key_is_the_same_receipt(
        self, make_runtime: MakeRuntime
    ) -> None:
        """if_busy="steer" with a key: a retry returns the same steered receipt and writes
        nothing; other input under the key is IdempotencyConflict."""
        session = make_runtime(nb.ScriptedModel([]), execute=False).session("s1")
        first = session.submit("plan the trip")
        steered = session.submit("prefer trains", key="k1", if_busy="steer")
        assert steered.disposition == "steered"
        assert steered.turn_id == first.turn_id
        head = session.inbox.head()
        again = session.submit("prefer trains", key="k1", if_busy="steer")
        assert (again.command_id, again.disposition) == (steered.command_id, "steered")
        assert session.inbox.head() == head
        with pytest.raises(nb.IdempotencyConflict):
            session.submit("prefer planes", key="k1", if_busy="steer")

    def test_steer_when_idle_starts_a_task(self, make_runtime: MakeRuntime) -> None:
        """if_busy="steer" with nothing to steer submits the task as usual."""
        session = make_runtime(nb.ScriptedModel(["a"])).session("s1")
        receipt = session.submit("one", if_busy="steer")
        assert receipt.disposition == "started"
        assert receipt.wait(timeout=WAIT).output == "a"

    @pytest.mark.parametrize("bad", ["later", "", None, 3, "QUEUE"])
    def test_a_bad_policy_is_a_typed_error_naming_the_four(
        self, make_runtime: MakeRuntime, bad: object
    ) -> None:
        """An unknown if_busy raises InvalidInput naming the four policies; nothing written."""
        session = make_runtime(nb.ScriptedModel([])).session("s1")
        with pytest.raises(nb.InvalidInput) as caught:
            session.submit("one", if_busy=bad)  # type: ignore[arg-type]
        for policy in ("'queue'", "'reject'", "'interrupt'", "'steer'"):
            assert policy in str(caught.value)
        assert session.tasks() == []
