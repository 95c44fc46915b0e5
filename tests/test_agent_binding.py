"""A session is bound to its agent: another agent may read it, but not give it new work."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import agentnb as nb
from agentnb.agent import agent_changes, check_agent
from tests.runtime.helpers import WAIT, Gate, events_of, gated_script

MakeRuntime = Callable[..., nb.Runtime]


@nb.tool
def lookup_price(plan: str) -> str:
    """Look up a plan's price.

    Args:
        plan: the plan's name
    """
    return f"{plan}: 10 EUR"


@nb.tool(name="lookup_price")
def lookup_price_v2(plan: str, currency: str) -> str:
    """Look up a plan's price in a currency.

    Args:
        plan: the plan's name
        currency: ISO code
    """
    return f"{plan}: 10 {currency}"


@nb.tool
def fetch_quote(vendor: str) -> str:
    """Ask a vendor for a quote.

    Args:
        vendor: who to ask
    """
    return f"{vendor}: 12 EUR"


@nb.tool(confirm=True)
def create_order(item: str) -> str:
    """Create a purchase order.

    Args:
        item: what to buy
    """
    return f"ordered {item}"


def _agent(
    tools: list[Any] | None = None,
    instructions: str = "Be brief.",
    model: str = "scripted",
    script: Any = ("Done.",),
) -> nb.Agent:
    replies = list(script) if isinstance(script, list | tuple) else script
    return nb.Agent(
        name="Test",
        agent_id="test-agent",
        model=nb.ScriptedModel(replies, name=model),
        tools=tools or [],
        instructions=instructions,
    )


@pytest.fixture
def store(store_url: str) -> nb.SessionStore:
    """One store that every runtime of a test shares (closed by the caller's runtimes)."""
    return nb.open_store(store_url)


@pytest.fixture
def runtimes(store: nb.SessionStore) -> Any:
    """Build runtimes over the shared store; all closed after the test."""
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
    return session.log.head(), session.inbox.head()


class TestFingerprint:
    def test_the_fingerprint_holds_id_instructions_hash_tool_schemas_and_model(self) -> None:
        """An agent's fingerprint: its id, a SHA-256 of its instructions, each tool's
        parameter schema by name, and its model's name; two equal definitions match."""
        agent = _agent([lookup_price], instructions="Be brief.", model="m1")
        fp = agent.fingerprint
        assert fp["agent_id"] == "test-agent"
        assert len(fp["instructions_sha256"]) == 64
        assert (
            fp["instructions_sha256"]
            != _agent(instructions="Be long.").fingerprint["instructions_sha256"]
        )
        assert set(fp["tools"]) == {"lookup_price"}
        assert fp["tools"]["lookup_price"]["properties"]["plan"]["type"] == "string"
        assert fp["model"] == "m1"
        assert _agent([lookup_price], model="m1").fingerprint == fp

    def test_changes_name_every_difference(self) -> None:
        """Instructions, tools added, removed or with a new schema, and the model are each
        named once; equal fingerprints have no changes."""
        old = _agent([lookup_price, create_order], model="m1").fingerprint
        new = _agent(
            [lookup_price_v2, fetch_quote], instructions="Be kind.", model="m2"
        ).fingerprint
        assert agent_changes(old, new) == [
            "instructions changed",
            "tools added: fetch_quote",
            "tools removed: create_order",
            "tools with a new schema: lookup_price",
            "model: m1 → m2",
        ]
        assert agent_changes(old, old) == []

    def test_the_rule_binds_keeps_refuses_or_records_a_change(self) -> None:
        """Not bound yet: agent/bound. The same: nothing. Another: AgentChanged, or with
        accept, agent/changed carrying both fingerprints."""
        old, new = _agent(), _agent(instructions="Be kind.")
        assert check_agent(None, old, accept=False, session="s")[0] == "agent/bound"  # type: ignore[index]
        assert check_agent(old.fingerprint, old, accept=False, session="s") is None
        with pytest.raises(nb.AgentChanged, match="instructions changed") as caught:
            check_agent(old.fingerprint, new, accept=False, session="s")
        assert caught.value.changes == ("instructions changed",)
        found = check_agent(old.fingerprint, new, accept=True, session="s")
        assert found is not None
        type_, payload = found
        assert type_ == "agent/changed"
        data = nb.Event.create(type_, payload).payload
        assert data["previous"] == old.fingerprint
        assert data["current"] == new.fingerprint
        assert data["reason"] == "instructions changed"


class TestBinding:
    def test_the_first_turn_records_the_agent_once(self, runtimes: Any) -> None:
        """agent/bound commits with the first turn's start and is not written again."""
        agent = _agent(script=["One.", "Two."])
        session = runtimes(agent).session("s1")
        session.run("first", timeout=WAIT)
        session.run("second", timeout=WAIT)
        (bound,) = events_of(session, "agent/bound")
        (start, _) = events_of(session, "turn/start")
        assert bound.seq < start.seq
        assert bound.payload == agent.fingerprint

    def test_another_agent_is_refused_new_work_naming_what_changed(self, runtimes: Any) -> None:
        """submit, send, inject and compact with another agent raise AgentChanged naming
        each change, and neither log moves."""
        old = runtimes(_agent([lookup_price], model="m1"))
        old.session("s1").run("hello", timeout=WAIT)
        old.close()
        new_agent = nb.Agent(
            name="Test",
            agent_id="test-agent",
            model=nb.ScriptedModel(["x"], name="m2"),
            tools=[lookup_price, fetch_quote],
            instructions="Be kind.",
            compaction=nb.TrimCompactor(keep_last=1),
        )
        session = runtimes(new_agent).open("s1")
        heads = _heads(session)
        expected = "instructions changed; tools added: fetch_quote; model: m1 → m2"
        for action in (
            lambda: session.submit("more"),
            lambda: session.send("more"),
            lambda: session.inject("material"),
            session.compact,
        ):
            with pytest.raises(nb.AgentChanged, match=expected) as caught:
                action()
            assert "accept_agent_change=True" in str(caught.value)
        assert _heads(session) == heads

    def test_resume_and_respond_are_new_work_too(self, runtimes: Any) -> None:
        """A suspended turn of the old agent cannot be answered, nor a failed one resumed,
        by another agent; nothing is written."""
        old = runtimes(_agent([create_order], script=[nb.ToolCall("create_order", {"item": "x"})]))
        session = old.session("s1")
        assert session.run("order", timeout=WAIT).status == "suspended"
        (request_id,) = session.pending()
        old.close()
        other = runtimes(_agent([create_order], instructions="Other.")).open("s1")
        heads = _heads(other)
        with pytest.raises(nb.AgentChanged):
            other.respond(request_id, True)
        assert _heads(other) == heads

    def test_reading_always_works(self, runtimes: Any) -> None:
        """Another agent reads the transcript, history, snapshot, tasks, inspection and log."""
        old = runtimes(_agent())
        old.session("s1").run("hello", timeout=WAIT)
        old.close()
        session = runtimes(_agent(instructions="Other.")).open("s1")
        assert [m.text for m in session.transcript().messages] == ["hello", "Done."]
        assert [m.text for m in session.history().messages] == ["hello", "Done."]
        assert session.snapshot().cursor == session.log.head()
        assert [t.status for t in session.tasks()] == ["completed"]
        assert session.inspect().as_of_seq == session.log.head()
        assert len(list(session.log.scan())) == session.log.head()

    def test_ending_work_is_not_refused(self, runtimes: Any) -> None:
        """Another agent may still cancel the old agent's suspended turn."""
        old = runtimes(_agent([create_order], script=[nb.ToolCall("create_order", {"item": "x"})]))
        receipt = old.session("s1").submit("order")
        assert receipt.wait(WAIT).status == "suspended"
        old.close()
        session = runtimes(_agent(instructions="Other.")).open("s1")
        session.cancel(receipt.turn_id, timeout=WAIT)
        assert session.tasks()[-1].status == "cancelled"

    def test_accepting_the_change_records_it_and_rebinds_the_session(self, runtimes: Any) -> None:
        """With accept_agent_change=True the new agent works; agent/changed holds both
        fingerprints; afterwards the old agent is the one refused."""
        first = _agent(model="m1")
        old = runtimes(first)
        old.session("s1").run("hello", timeout=WAIT)
        old.close()
        second = _agent([fetch_quote], model="m2", script=["Again."])
        new = runtimes(second, accept_agent_change=True)
        session = new.open("s1")
        assert session.run("more", timeout=WAIT).output == "Again."
        (changed,) = events_of(session, "agent/changed")
        assert changed.payload["previous"] == first.fingerprint
        assert changed.payload["current"] == second.fingerprint
        assert changed.payload["reason"] == "tools added: fetch_quote; model: m1 → m2"
        (start,) = [e for e in events_of(session, "turn/start") if e.turn_id == changed.turn_id]
        assert changed.seq < start.seq
        new.close()
        again = runtimes(_agent(model="m1")).open("s1")
        with pytest.raises(nb.AgentChanged, match="tools removed: fetch_quote; model: m2 → m1"):
            again.submit("back")

    def test_a_driver_with_another_agent_rejects_the_command_with_the_reason(
        self, runtimes: Any
    ) -> None:
        """A client whose agent matches queues a task; a runtime executing another agent
        (a worker) rejects it in the inbox with why, starts nothing, and lets go."""
        first = runtimes(_agent())
        first.session("s1").run("hello", timeout=WAIT)
        first.close()  # nothing of the bound agent executes any more
        client = runtimes(_agent(), execute=False).open("s1")
        receipt = client.submit("more")
        head = client.log.head()
        worker = runtimes(_agent(instructions="Other."))
        worker.open("s1").start()
        outcome = receipt.wait(WAIT)
        assert outcome.status == "rejected"
        assert "instructions changed" in (outcome.error or "")
        assert client.log.head() == head  # no turn was opened
        assert client.inbox.head() == 3  # accepted, accepted, rejected: nothing else
        assert [t.status for t in client.tasks()] == ["completed", "rejected"]

    def test_a_running_turn_is_steered_only_by_its_own_agent(self, runtimes: Any) -> None:
        """While the bound agent runs a turn, another agent's steer is refused; the run
        goes on and completes."""
        gate = Gate()
        agent = _agent(script=gated_script(["Done."], {0: gate}))
        session = runtimes(agent).session("s1")
        receipt = session.submit("work")
        gate.wait_arrived()
        other = runtimes(_agent(instructions="Other."), execute=False).open("s1")
        heads = _heads(other)
        with pytest.raises(nb.AgentChanged):
            other.steer("faster")
        with pytest.raises(nb.AgentChanged):
            other.send("faster")
        assert other.inbox.head() == heads[1]
        gate.release()
        assert receipt.wait(WAIT).status == "completed"


class TestRuntimeArgument:
    @pytest.mark.parametrize("value", [1, "yes", None])
    def test_accept_agent_change_must_be_a_bool(self, value: object) -> None:
        """accept_agent_change takes True or False only; nothing is opened otherwise."""
        with pytest.raises(nb.InvalidInput, match="accept_agent_change"):
            nb.Runtime(_agent(), store="memory://", accept_agent_change=value)  # type: ignore[arg-type]


class TestWorkerProcess:
    def test_a_worker_process_with_another_agent_rejects_once_and_serves_on(
        self, pg_url: str
    ) -> None:
        """On PostgreSQL: a session bound to a changed agent gets a task from a client; an
        `agentnb worker` process running the old agent rejects it with the reason, opens no
        turn, writes nothing more for it, and goes on serving a session of its own agent."""
        from tests._pg_worker_agent import _reply, charge, idem, risky
        from tests._pg_worker_agent import agent as worker_agent
        from tests.test_pg_workers import Workers

        changed = nb.Agent(
            name="PG worker test",
            agent_id=worker_agent.agent_id,
            model=nb.ScriptedModel(_reply),
            tools=[idem, risky, charge],
            instructions="Answer in French.",
        )
        with nb.Runtime(changed, store=pg_url) as first:
            first.session("changed").run("task 1", timeout=WAIT)  # bound to the changed agent
        pool = Workers(pg_url)
        try:
            worker = pool.start()
            with nb.Runtime(changed, store=pg_url, execute=False) as client:
                session = client.open("changed")
                head = session.log.head()
                outcome = session.submit("task 2").wait(WAIT)
                assert outcome.status == "rejected"
                assert "instructions changed" in (outcome.error or "")
                heads = _heads(session)
                assert heads == (head, 3)  # accepted, accepted, rejected: no turn opened
                with nb.Runtime(worker_agent, store=pg_url, execute=False) as own:
                    done = own.session("own").run("task 3", timeout=WAIT)
                    assert done.output == "done: task 3"
                assert _heads(session) == heads  # rejected once, never retried
            assert worker.poll() is None
            pool.stop(worker)
        finally:
            pool.close()

    def test_a_worker_that_accepts_agent_changes_runs_and_records_the_change(
        self, pg_url: str
    ) -> None:
        """`agentnb worker --accept-agent-change` runs a task of a session bound to another
        version of its agent and records agent/changed with both fingerprints."""
        import subprocess
        import sys

        from tests._pg_worker_agent import _reply, charge, idem, risky
        from tests._pg_worker_agent import agent as worker_agent
        from tests.test_pg_workers import REPO

        changed = nb.Agent(
            name="PG worker test",
            agent_id=worker_agent.agent_id,
            model=nb.ScriptedModel(_reply),
            tools=[idem, risky, charge],
            instructions="Answer in French.",
        )
        with nb.Runtime(changed, store=pg_url) as first:
            first.session("changed").run("task 1", timeout=WAIT)
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "agentnb.cli",
                "worker",
                "--store",
                pg_url,
                "--agent",
                "tests._pg_worker_agent:agent",
                "--poll",
                "0.3",
                "--accept-agent-change",
            ],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stdout is not None
            assert "worker for" in proc.stdout.readline()
            with nb.Runtime(changed, store=pg_url, execute=False) as client:
                session = client.open("changed")
                assert session.submit("task 2").wait(WAIT).output == "done: task 2"
                (event,) = events_of(session, "agent/changed")
                assert event.payload["previous"] == changed.fingerprint
                assert event.payload["current"] == worker_agent.fingerprint
                assert event.payload["reason"] == "instructions changed"
        finally:
            proc.terminate()
            proc.communicate(timeout=WAIT)
