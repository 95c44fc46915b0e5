"""The bounds a runtime keeps on its sessions: queues, recovery replay and session size.

Each limit refuses with its typed error and writes nothing (both logs are counted before and
after); a run refused in the middle ends with its reason committed.
"""

from __future__ import annotations

from typing import Any

import pytest

import agentnb as nb
from agentnb.limits import END_RESERVE_EVENTS, check_queue, check_replay, check_room
from tests.runtime.helpers import WAIT, Gate, gated_script

START = 100 - 2 * END_RESERVE_EVENTS
"""In a session capped at 100 events: where new work stops starting ..."""
RUN = 100 - END_RESERVE_EVENTS
"""... and where commits in the middle of a run stop (ending ones may fill the cap)."""


@nb.tool
def lookup_price(plan: str) -> str:
    """Look up a plan's price.

    Args:
        plan: the plan's name
    """
    return f"{plan}: 10 EUR"


@nb.tool(confirm=True)
def create_order(item: str) -> str:
    """Create a purchase order.

    Args:
        item: what to buy
    """
    return f"ordered {item}"


def _agent(script: Any = ("Done.",), tools: list[Any] | None = None) -> nb.Agent:
    replies = list(script) if isinstance(script, list | tuple) else script
    return nb.Agent(
        name="Test",
        agent_id="test-agent",
        model=nb.ScriptedModel(replies),
        tools=tools or [],
        instructions="Be brief.",
    )


@pytest.fixture
def runtimes(store_url: str) -> Any:
    """Build runtimes over one shared store; all closed after the test."""
    store = nb.open_store(store_url)
    made: list[nb.Runtime] = []

    def make(agent: nb.Agent, **kwargs: Any) -> nb.Runtime:
        runtime = nb.Runtime(agent, store=store, lease_ttl=5.0, **kwargs)
        made.append(runtime)
        return runtime

    yield make
    for runtime in made:
        runtime.close()
    store.close()


def _heads(session: nb.Session) -> tuple[int, int]:
    store = session.runtime.store
    return store.head(session.key), store.inbox_head(session.key)


def _notes(count: int, size: int = 10) -> list[nb.Event]:
    """Optional application events, to grow a log without running anything."""
    return [nb.Event.create("acme/note", {"text": "n" * size}) for _ in range(count)]


class TestLimitsRecord:
    @pytest.mark.parametrize(
        "fields",
        [
            {"max_pending_steers": 0},
            {"max_queued_commands": -1},
            {"max_queued_commands": True},
            {"max_pending_steers": None},
            {"max_recovery_events": 1.5},
            {"max_recovery_bytes": "128MiB"},
            {"max_session_events": 2 * END_RESERVE_EVENTS},
            {"max_session_bytes": 1000},
        ],
    )
    def test_bad_values_are_invalid_input(self, fields: dict[str, Any]) -> None:
        """Each bound is a positive int (recovery bounds and caps may be None); a cap must
        leave room above the reserve for ending runs."""
        with pytest.raises(nb.InvalidInput, match=next(iter(fields))):
            nb.Limits(**fields)

    def test_the_defaults_are_the_seeds_bounds(self) -> None:
        """256 steers per turn, 64 queued commands, 1,000,000 events / 128 MiB replayed."""
        limits = nb.Limits()
        assert (limits.max_pending_steers, limits.max_queued_commands) == (256, 64)
        assert (limits.max_recovery_events, limits.max_recovery_bytes) == (
            1_000_000,
            128 * 1024 * 1024,
        )
        assert (limits.max_session_events, limits.max_session_bytes) == (None, None)

    def test_the_runtime_takes_only_a_limits_record(self) -> None:
        """Runtime(limits=...) refuses anything but an nb.Limits."""
        with pytest.raises(nb.InvalidInput, match=r"nb\.Limits"):
            nb.Runtime(_agent(), store="memory://", limits={"max_queued_commands": 3})  # type: ignore[arg-type]

    def test_the_pure_checks_draw_their_lines_exactly(self) -> None:
        """A full queue at the limit, a replay just past a bound, and a cap whose reserve
        only ending commits may use."""
        limits = nb.Limits(max_queued_commands=2, max_session_events=100)
        check_queue(1, limits, session="s")
        with pytest.raises(nb.QueueFull) as caught:
            check_queue(2, limits, session="s")
        assert (caught.value.queue, caught.value.limit) == ("commands", 2)
        check_replay(1_000_000, 0, nb.Limits(), session="s")
        with pytest.raises(nb.RecoveryLimitExceeded):
            check_replay(1_000_001, 0, nb.Limits(), session="s")

        def room(held: int, adding: int, stage: Any) -> bool:
            try:
                check_room(held, 0, stage=stage, adding_events=adding, limits=limits, session="s")
            except nb.SessionFull:
                return False
            return True

        assert room(START - 1, 0, "start")
        assert not room(START, 0, "start")  # no new work from the line on
        assert room(RUN - 1, 1, "run")
        assert not room(RUN - 1, 2, "run")
        assert room(RUN, 100 - RUN, "end")
        assert not room(RUN, 100 - RUN + 1, "end")


class TestQueueFull:
    def test_a_full_command_queue_refuses_submit_and_send(self, runtimes: Any) -> None:
        """With 3 tasks waiting (nobody executes), a 4th submit or send raises QueueFull
        and neither log moves; a re-send under an accepted key still gets its receipt."""
        runtime = runtimes(_agent(), execute=False, limits=nb.Limits(max_queued_commands=3))
        session = runtime.session("s1")
        first = session.submit("one", key="k1")
        session.submit("two")
        session.submit("three")
        heads = _heads(session)
        with pytest.raises(nb.QueueFull, match=r"3 commands waiting.*max_queued_commands"):
            session.submit("four")
        with pytest.raises(nb.QueueFull) as caught:
            session.send("four")
        assert (caught.value.queue, caught.value.limit) == ("commands", 3)
        assert session.submit("one", key="k1").command_id == first.command_id
        assert _heads(session) == heads

    def test_answers_are_never_refused_so_a_parked_queue_drains(self, runtimes: Any) -> None:
        """Tasks parked behind a suspended turn fill the queue; the answer still goes in,
        the turn completes and the parked tasks run."""
        agent = _agent(
            [nb.ToolCall("create_order", {"item": "desk"}), "Ordered.", "One.", "Two."],
            [create_order],
        )
        runtime = runtimes(agent, limits=nb.Limits(max_queued_commands=2))
        session = runtime.session("s1")
        assert session.run("order a desk", timeout=WAIT).status == "suspended"
        parked = [session.submit("one"), session.submit("two")]
        with pytest.raises(nb.QueueFull):
            session.submit("three")
        (request_id,) = session.pending()
        assert session.respond(request_id, True).wait(WAIT).output == "Ordered."
        assert [r.wait(WAIT).output for r in parked] == ["One.", "Two."]

    def test_a_full_steering_queue_refuses_steer_and_send(self, runtimes: Any) -> None:
        """Two unapplied steers fill a queue of 2: a third steer or send raises QueueFull
        (a send never falls back to queueing a task), nothing is written, and the turn
        takes the two at its next step."""
        gate = Gate()
        agent = _agent(gated_script(["Done.", "Done, faster."], {0: gate}))
        runtime = runtimes(agent, limits=nb.Limits(max_pending_steers=2))
        session = runtime.session("s1")
        receipt = session.submit("work")
        gate.wait_arrived()
        session.steer("faster")
        session.steer("cheaper")
        heads = session.inbox.head()
        with pytest.raises(nb.QueueFull, match=r"2 steering inputs.*max_pending_steers") as caught:
            session.steer("and better")
        assert caught.value.queue == "steering"
        with pytest.raises(nb.QueueFull):
            session.send("and better")
        assert session.inbox.head() == heads
        gate.release()
        outcome = receipt.wait(WAIT)
        assert (outcome.status, outcome.output) == ("completed", "Done, faster.")
        applied = [m.text for m in session.transcript().messages if m.role == "user"]
        assert applied == ["work", "faster", "cheaper"]


class TestRecoveryLimit:
    def test_an_open_past_the_event_bound_raises_and_writes_nothing(self, runtimes: Any) -> None:
        """600 events and no snapshot: a runtime bounded at 300 cannot read or submit
        (RecoveryLimitExceeded saying what to do); neither log moves."""
        runtimes(_agent()).session("s1").log.append(_notes(600), expected_seq=0)
        session = runtimes(_agent(), limits=nb.Limits(max_recovery_events=300)).open("s1")
        heads = _heads(session)
        with pytest.raises(nb.RecoveryLimitExceeded, match=r"300 events.*max_recovery_events"):
            session.transcript()
        with pytest.raises(nb.RecoveryLimitExceeded):
            session.submit("hello")
        assert _heads(session) == heads

    def test_an_open_past_the_byte_bound_raises(self, runtimes: Any) -> None:
        """Three 50,000-character payloads pass a 100,000-byte bound."""
        runtimes(_agent()).session("s1").log.append(_notes(3, 50_000), expected_seq=0)
        session = runtimes(_agent(), limits=nb.Limits(max_recovery_bytes=100_000)).open("s1")
        with pytest.raises(nb.RecoveryLimitExceeded, match=r"100,000 bytes.*max_recovery_bytes"):
            session.inspect()

    def test_one_open_with_a_higher_bound_saves_the_snapshot_later_opens_use(
        self, runtimes: Any
    ) -> None:
        """After a runtime with the default bounds opened it (and saved a snapshot), the
        bounded one reads it, the handle that failed before included."""
        runtimes(_agent()).session("s1").log.append(_notes(600), expected_seq=0)
        bounded = runtimes(_agent(), limits=nb.Limits(max_recovery_events=300))
        failed = bounded.open("s1")
        with pytest.raises(nb.RecoveryLimitExceeded):
            failed.transcript()
        assert runtimes(_agent()).open("s1").inspect().as_of_seq == 600
        assert failed.inspect().as_of_seq == 600
        fresh = runtimes(_agent(), limits=nb.Limits(max_recovery_events=300)).open("s1")
        assert fresh.run("hello", timeout=WAIT).output == "Done."

    def test_a_handle_far_behind_starts_again_from_the_newest_snapshot(
        self, runtimes: Any, store_url: str
    ) -> None:
        """A bounded handle that read the session early is refused once 600 events another
        process committed passed it with no snapshot, and reads again once a snapshot
        covers them."""
        if store_url == "memory://":
            pytest.skip("a memory store has no other process to commit to it")
        writer = runtimes(_agent()).session("s1")
        writer.log.append(_notes(5), expected_seq=0)
        early = runtimes(_agent(), limits=nb.Limits(max_recovery_events=300)).open("s1")
        assert early.inspect().as_of_seq == 5
        elsewhere = nb.Runtime(_agent(), store=store_url)  # another store: not on this bus
        try:
            elsewhere.open("s1").log.append(_notes(600), expected_seq=5)
        finally:
            elsewhere.close()
        with pytest.raises(nb.RecoveryLimitExceeded):
            early.inspect()
        runtimes(_agent()).open("s1").inspect()  # folds the tail and saves a snapshot
        assert early.inspect().as_of_seq == 605

    def test_a_handle_handed_the_commits_of_its_process_replays_nothing(
        self, runtimes: Any
    ) -> None:
        """The commit bus hands a bounded handle what its own process commits: 600 events
        past it are folded as they come, not replayed, so the bound does not refuse them."""
        writer = runtimes(_agent()).session("s1")
        writer.log.append(_notes(5), expected_seq=0)
        early = runtimes(_agent(), limits=nb.Limits(max_recovery_events=300)).open("s1")
        assert early.inspect().as_of_seq == 5
        writer.log.append(_notes(600), expected_seq=5)
        assert early.inspect().as_of_seq == 605


class TestSessionFull:
    def test_a_run_that_reaches_the_cap_ends_failed_with_the_reason(self, runtimes: Any) -> None:
        """A tool loop in a session capped at 100 events: the commit past the line is
        refused, the run ends failed (stop_reason session_full) within the cap, and the
        session stays readable but takes no new work."""
        agent = _agent(
            lambda messages: nb.ToolCall("lookup_price", {"plan": "pro"}), [lookup_price]
        )
        runtime = runtimes(agent, limits=nb.Limits(max_session_events=100))
        session = runtime.session("s1")
        outcome = session.run("loop", timeout=WAIT)
        assert (outcome.status, outcome.stop_reason) == ("failed", "session_full")
        assert "max_session_events" in (outcome.error or "")
        assert START <= session.log.head() <= 100
        assert session.transcript().messages[0].text == "loop"
        heads = _heads(session)
        with pytest.raises(nb.SessionFull, match=r"holds .* events; its cap is 100"):
            session.submit("more")
        with pytest.raises(nb.SessionFull):
            session.inject("more")
        assert _heads(session) == heads

    def test_a_task_too_big_for_the_byte_cap_is_rejected_and_the_session_goes_on(
        self, runtimes: Any
    ) -> None:
        """A task whose first commit would pass the byte cap is rejected with the reason,
        nothing of it reaches the log, and a small task runs after it."""
        runtime = runtimes(_agent(["Small."]), limits=nb.Limits(max_session_bytes=200_000))
        session = runtime.session("s1")
        big = session.submit("x" * 150_000)
        outcome = big.wait(WAIT)
        assert outcome.status == "rejected"
        assert "max_session_bytes" in (outcome.error or "")
        assert session.log.head() == 0
        assert session.run("small", timeout=WAIT).output == "Small."

    def test_a_driver_rejects_work_for_a_full_session(self, runtimes: Any) -> None:
        """Work accepted by a runtime without the cap is rejected, with the reason, by an
        executing runtime whose cap the session has passed; nothing is written to its log."""
        first = runtimes(_agent(["One.", "Two.", "Three.", "Four."]))
        session = first.session("s1")
        for text in ("one", "two", "three", "four"):
            session.run(text, timeout=WAIT)
        first.close()
        assert session.log.head() >= START
        receipt = runtimes(_agent(), execute=False).open("s1").submit("five")
        head = session.log.head()
        worker = runtimes(_agent(), limits=nb.Limits(max_session_events=100))
        worker.open("s1").start()
        outcome = receipt.wait(WAIT)
        assert outcome.status == "rejected"
        assert "its cap is 100" in (outcome.error or "")
        assert session.log.head() == head
