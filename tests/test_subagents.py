"""Sub-agents: a call of ``nb.subagent`` runs in a child session, which the parent waits for.

A coordinator delegates to child agents; these tests read the three logs (the parent's and
each child's), the facade (``children``, ``pending``, ``respond``, ``inspect``), the chat fold
and the exports. The scenarios a person drives run through both doors (``door``): the local
``Session`` and a ``RemoteSession`` of the service (``tests/remote.py``). Crashes with real
processes are in ``tests/recovery/test_subagent_crash.py``, workers on PostgreSQL in
``tests/test_pg_subagents.py``.

Timeouts here only stop a broken test from hanging; nothing asserts on how long a step takes.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import agentnb as nb
from agentnb.projections.chat import ChatState
from tests.remote import DOORS, RemoteDoor

WAIT = 20.0
"""Seconds any one wait may take before the test fails instead of hanging."""


def _until(condition: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + WAIT
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.02)


def worker_agent(
    agent_id: str, tool: nb.Tool | None = None, answer: str = "done", **kwargs: Any
) -> nb.Agent:
    """A child agent: calls ``tool`` once (with ``{"x": agent_id}``) then answers ``answer``."""

    def script(messages: list[nb.Message]) -> Any:
        if tool is not None and not any(m.role == "tool" for m in messages):
            return nb.ToolCall(tool.name, {"x": agent_id})
        return answer

    return nb.Agent(
        name=agent_id.title(),
        agent_id=agent_id,
        model=nb.ScriptedModel(script),
        tools=[tool] if tool is not None else [],
        instructions=kwargs.pop("instructions", f"You are the {agent_id}."),
        **kwargs,
    )


def coordinator(
    replies: list[Any], *tools: nb.Tool, agent_id: str = "coordinator", **kwargs: Any
) -> nb.Agent:
    return nb.Agent(
        name="Coordinator",
        agent_id=agent_id,
        model=nb.ScriptedModel(replies),
        tools=list(tools),
        instructions="Delegate.",
        **kwargs,
    )


@pytest.fixture
def runtimes(door: str) -> Iterator[Callable[..., nb.Runtime]]:
    """Runtimes of the test's agents; with ``door="remote"`` (``tests/remote.py``) their
    sessions are ``RemoteSession`` objects of a service serving the runtime."""
    made: list[Any] = []

    def make(agent: nb.Agent, store: Any = "memory://", **kwargs: Any) -> nb.Runtime:
        runtime = nb.Runtime(agent, store=store, lease_ttl=kwargs.pop("lease_ttl", 5.0), **kwargs)
        made.append(runtime if door == "local" else RemoteDoor(runtime))
        return made[-1]  # type: ignore[no-any-return]

    yield make
    for runtime in made:
        runtime.close()


def children_keys(session: nb.Session) -> list[nb.SessionKey]:
    return [c.key for c in session.children()]


def types(session: nb.Session) -> list[str]:
    return [e.type for e in session.log.scan()]


# -- delegating ----------------------------------------------------------------------------------


class TestDelegation:
    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_two_subagents_of_one_step_run_concurrently_and_the_logs_agree(
        self, store_url: str, runtimes: Callable[..., nb.Runtime]
    ) -> None:
        """Two calls of one reply run at once; results reach the next request; logs agree."""
        both = threading.Barrier(2, timeout=WAIT)  # passes only if both tools run at once

        @nb.tool
        def research(x: str) -> str:
            """Research."""
            both.wait()
            return f"facts for {x}"

        researcher = worker_agent("researcher", research, answer="found facts")
        reviewer = worker_agent("reviewer", research, answer="reviewed")
        boss = coordinator(
            [
                [
                    nb.ToolCall("researcher", {"task": "find the facts"}),
                    nb.ToolCall("reviewer", {"task": "review the draft"}),
                ],
                "all done",
            ],
            nb.subagent(researcher),
            reviewer.as_tool(),
        )
        session = runtimes(boss, store_url).session("s1")
        out = session.run("coordinate", timeout=WAIT)
        assert out.status == "completed"
        assert out.output == "all done"
        last_request = boss.model.requests[-1]  # type: ignore[attr-defined]
        tool_texts = {m.name: m.text for m in last_request if m.role == "tool"}
        assert tool_texts == {"researcher": "found facts", "reviewer": "reviewed"}
        spawned = [e for e in session.log.scan() if e.type == "subagent/spawned"]
        completed = [e for e in session.log.scan() if e.type == "subagent/completed"]
        assert len(spawned) == len(completed) == 2
        for event in spawned:
            key = nb.SessionKey(**event.payload["child"])
            child = session.child(event.payload["call_id"])
            assert child.key == key
            first = child.log.read_after(0, 1)[0]
            assert first.type == "subagent/linked"
            assert first.payload["parent"] == {
                "namespace": session.key.namespace,
                "user_id": session.key.user_id,
                "agent_id": session.key.agent_id,
                "session_id": session.key.session_id,
            }
            assert first.payload["call_id"] == event.payload["call_id"]
            assert first.payload["turn_id"] == out.turn_id
            task = child.tasks()
            assert len(task) == 1
            assert task[0].status == "completed"
            assert task[0].input == event.payload["task"]
            done = next(e for e in completed if e.payload["call_id"] == event.payload["call_id"])
            assert done.payload["output"] == child.transcript().messages[-1].text
            assert done.payload["usage"]["input_tokens"] == task[0].usage.input_tokens  # type: ignore[union-attr]

    def test_a_call_whose_child_is_not_made_yet_is_listed_as_the_parent_recorded_it(
        self,
    ) -> None:
        """Between ``subagent/spawned`` and the child's creation, children() lists the call
        with the parent's record (a reader then, a page's panel, must not fail)."""
        from agentnb.children import children_of
        from agentnb.projections.subagents import key_ref

        store = nb.MemoryStore()
        key = nb.SessionKey("default", "u", "helper", "s/call_1")
        call = {
            "call_id": "call_1",
            "turn_id": "turn_1",
            "child": key_ref(key),
            "agent_id": "helper",
            "name": "helper",
            "task": "help",
            "status": "running",
        }
        (child,) = children_of(store, [call])
        assert (child.key, child.status, child.usage, child.child_turn_id) == (
            key,
            "running",
            None,
            None,
        )

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_the_child_key_derives_from_the_parent_and_the_call(
        self, runtimes: Callable[..., nb.Runtime]
    ) -> None:
        """A child is keyed ``<parent session>/<call id>``, of its own agent, user and namespace."""
        boss = coordinator(
            [nb.ToolCall("helper", {"task": "help"}), "ok"], worker_agent("helper").as_tool()
        )
        session = runtimes(boss).session("conv-7", user_id="alice")
        session.run("go", timeout=WAIT)
        (child,) = session.children()
        assert child.key == nb.SessionKey("default", "alice", "helper", f"conv-7/{child.call_id}")
        assert (child.agent_id, child.name, child.task, child.status) == (
            "helper",
            "helper",
            "help",
            "completed",
        )

    def test_session_info_says_parent_root_and_depth(
        self, tmp_path: Path, runtimes: Callable[..., nb.Runtime]
    ) -> None:
        """SessionInfo of a child names its parent and root and its depth; a root's is 0."""
        store = f"sqlite:///{tmp_path / 'db.sqlite'}"
        leaf = worker_agent("leaf")
        middle = nb.Agent(
            name="Middle",
            agent_id="middle",
            model=nb.ScriptedModel(
                lambda m: (
                    "mid done"
                    if any(x.role == "tool" for x in m)
                    else nb.ToolCall("leaf", {"task": "deep"})
                )
            ),
            tools=[leaf.as_tool()],
        )
        boss = coordinator([nb.ToolCall("middle", {"task": "delegate"}), "ok"], middle.as_tool())
        runtime = runtimes(boss, store)
        session = runtime.session("root")
        assert session.run("go", timeout=WAIT).status == "completed"
        (mid,) = session.children()
        (low,) = session.child(mid.call_id).children()
        root_info = runtime.sessions()[0]
        assert (root_info.parent, root_info.root, root_info.depth) == (None, session.key, 0)
        lineage = {}
        for agent in (middle, leaf):  # listing is per agent: each child by its own agent's
            with nb.Runtime(agent, store=store) as other:
                info = other.sessions()[0]
                lineage[info.key] = (info.parent, info.root, info.depth)
        assert lineage == {
            mid.key: (session.key, session.key, 1),
            low.key: (mid.key, session.key, 2),
        }

    def test_shared_context_reaches_the_child_as_material(
        self, runtimes: Callable[..., nb.Runtime]
    ) -> None:
        """share_context="last_n" hands the child the caller's last messages; "none" nothing."""
        helper = worker_agent("helper")
        quiet = worker_agent("quiet")
        boss = coordinator(
            [
                nb.Reply(
                    text="Let me ask for help.",
                    tool_calls=[
                        nb.ToolCall("helper", {"task": "summarise"}),
                        nb.ToolCall("quiet", {"task": "nothing shared"}),
                    ],
                ),
                "ok",
            ],
            nb.subagent(helper, share_context="last_n", last_n=2),
            quiet.as_tool(),
        )
        runtimes(boss).session("s").run("The budget is 42 dollars.", timeout=WAIT)
        seen = helper.model.requests[0]  # type: ignore[attr-defined]
        material = [m.text for m in seen if "delegated this task" in m.text]
        assert len(material) == 1
        assert "The budget is 42 dollars." in material[0]
        assert "Let me ask for help." in material[0]
        assert not any(
            "delegated this task" in m.text
            for m in quiet.model.requests[0]  # type: ignore[attr-defined]
        )

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_a_failed_child_is_a_tool_error_for_the_parent(
        self, runtimes: Callable[..., nb.Runtime]
    ) -> None:
        """A child whose task fails gives the parent's model the reason; the parent goes on."""
        broken = nb.Agent(name="Broken", agent_id="broken", model=nb.ScriptedModel([]))
        boss = coordinator([nb.ToolCall("broken", {"task": "try"}), "handled it"], broken.as_tool())
        session = runtimes(boss).session("s")
        out = session.run("go", timeout=WAIT)
        assert (out.status, out.output) == ("completed", "handled it")
        result = next(e for e in session.log.scan() if e.type == "tool/result")
        assert result.payload["status"] == "error"
        assert result.payload["output"].startswith("Error: the sub-agent broken failed:")
        (child,) = session.children()
        assert child.status == "failed"
        assert child.error
        assert child.error in result.payload["output"]

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_a_subagent_call_names_its_attempt_and_its_failed_child_keeps_the_traceback(
        self, runtimes: Callable[..., nb.Runtime]
    ) -> None:
        """The call's dispatch, start and end carry one action_id, the end says failed; the
        child's failed model call keeps its traceback in the child's log."""
        broken = nb.Agent(name="Broken", agent_id="broken", model=nb.ScriptedModel([]))
        boss = coordinator([nb.ToolCall("broken", {"task": "try"}), "handled it"], broken.as_tool())
        session = runtimes(boss).session("s")
        session.run("go", timeout=WAIT)
        by_type = {e.type: e.payload for e in session.log.scan() if "action_id" in e.payload}
        ids = {by_type[t]["action_id"] for t in ("tool/dispatch", "action/start", "action/end")}
        assert len(ids) == 1
        assert None not in ids
        assert by_type["action/end"]["status"] == "failed"
        (child,) = session.children()
        (end,) = [e for e in session.child(child.call_id).log.scan() if e.type == "model/end"]
        assert end.payload["status"] == "failed"
        assert "Traceback" in end.payload["traceback"]

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_the_child_session_is_bound_to_the_child_agent(
        self, runtimes: Callable[..., nb.Runtime]
    ) -> None:
        """The child's first turn records the child agent's fingerprint, not the parent's."""
        helper = worker_agent("helper", instructions="Helper rules.")
        boss = coordinator([nb.ToolCall("helper", {"task": "x"}), "ok"], helper.as_tool())
        session = runtimes(boss).session("s")
        session.run("go", timeout=WAIT)
        child = session.child(session.children()[0].call_id)
        bound = next(e for e in child.log.scan() if e.type == "agent/bound")
        assert dict(bound.payload) == dict(helper.fingerprint)
        assert child.inspect().next_context[0].text == "Helper rules."


class TestDeclaring:
    def test_subagent_refuses_what_it_cannot_use(self) -> None:
        """Anything but an Agent, an unknown policy or sharing mode, a bad last_n: InvalidInput."""
        helper = worker_agent("helper")
        with pytest.raises(nb.InvalidInput, match=r"takes an nb\.Agent"):
            nb.subagent("helper")  # type: ignore[arg-type]
        with pytest.raises(nb.InvalidInput, match="share_context"):
            nb.subagent(helper, share_context="everything")  # type: ignore[arg-type]
        with pytest.raises(nb.InvalidInput, match="on_parent_stop"):
            nb.subagent(helper, on_parent_stop="ignore")  # type: ignore[arg-type]
        with pytest.raises(nb.InvalidInput, match="last_n"):
            nb.subagent(helper, last_n=0)

    def test_a_subagent_is_a_tool_with_a_task(self) -> None:
        """The tool takes one ``task``; its name and description come from the agent."""
        helper = worker_agent("help desk", instructions="Answer support questions.\nMore.")
        spec = nb.subagent(helper).spec()
        assert spec["name"] == "help_desk"
        assert "Answer support questions." in spec["description"]
        assert spec["parameters"]["required"] == ["task"]
        assert helper.as_tool(name="support").spec()["name"] == "support"

    def test_a_runtime_refuses_two_different_agents_with_one_id(self) -> None:
        """A tree holding two different agents under one agent_id is refused: InvalidInput."""
        one = worker_agent("twin", instructions="One.")
        two = worker_agent("twin", instructions="Two.")
        boss = coordinator(["x"], one.as_tool(name="a"), two.as_tool(name="b"))
        with pytest.raises(nb.InvalidInput, match="agent_id 'twin'"):
            nb.Runtime(boss, store="memory://")

    def test_limits_refuse_bad_bounds(self) -> None:
        """Sub-agent bounds are positive ints: anything else is InvalidInput."""
        with pytest.raises(nb.InvalidInput, match="max_subagent_depth"):
            nb.Limits(max_subagent_depth=0)
        with pytest.raises(nb.InvalidInput, match="max_children_per_turn"):
            nb.Limits(max_children_per_turn=True)


class TestLimits:
    def test_children_per_turn_past_the_bound_are_refused_and_nothing_is_made(
        self, runtimes: Callable[..., nb.Runtime]
    ) -> None:
        """Past max_children_per_turn the call is refused with the reason; no child is made."""
        helper = worker_agent("helper")
        boss = coordinator(
            [[nb.ToolCall("helper", {"task": f"t{i}"}) for i in range(3)], "ok"],
            helper.as_tool(),
        )
        runtime = runtimes(boss, limits=nb.Limits(max_children_per_turn=2))
        session = runtime.session("s")
        assert session.run("go", timeout=WAIT).status == "completed"
        assert len(session.children()) == 2
        assert len(runtime.store.list_sessions(agent_id="helper")) == 2
        denied = [
            e
            for e in session.log.scan()
            if e.type == "tool/decision" and e.payload["decision"] == "denied"
        ]
        assert len(denied) == 1
        assert "max_children_per_turn=2" in denied[0].payload["reason"]
        assert nb.SubagentLimitExceeded.__name__  # the typed error the reason comes from

    def test_the_depth_bound_stops_a_chain_of_delegation(
        self, runtimes: Callable[..., nb.Runtime]
    ) -> None:
        """A session at max_subagent_depth cannot delegate further; its model is told why."""
        leaf = worker_agent("leaf")
        middle = nb.Agent(
            name="Middle",
            agent_id="middle",
            model=nb.ScriptedModel(
                lambda m: (
                    next((x.text for x in m if x.role == "tool"), None)
                    or nb.ToolCall("leaf", {"task": "deeper"})
                )
            ),
            tools=[leaf.as_tool()],
        )
        boss = coordinator([nb.ToolCall("middle", {"task": "go deep"}), "ok"], middle.as_tool())
        runtime = runtimes(boss, limits=nb.Limits(max_subagent_depth=1))
        session = runtime.session("s")
        assert session.run("go", timeout=WAIT).status == "completed"
        (mid,) = session.children()
        assert "may nest at most 1 deep" in (mid.output or "")
        assert runtime.store.list_sessions(agent_id="leaf") == []

    def test_the_limit_error_is_typed(self) -> None:
        """check_subagent raises SubagentLimitExceeded naming the bound."""
        from agentnb.limits import check_subagent

        with pytest.raises(nb.SubagentLimitExceeded) as caught:
            check_subagent(3, 0, nb.Limits(), agent="x")
        assert (caught.value.limit, caught.value.value) == ("max_subagent_depth", 3)
        with pytest.raises(nb.SubagentLimitExceeded) as caught:
            check_subagent(0, 16, nb.Limits(), agent="x")
        assert caught.value.limit == "max_children_per_turn"


# -- people in the loop --------------------------------------------------------------------------


@nb.tool(confirm=True)
def place_order(x: str) -> str:
    """Place an order."""
    return f"ordered for {x}"


def buyer_tree(**kwargs: Any) -> tuple[nb.Agent, nb.Agent]:
    buyer = worker_agent("buyer", place_order, answer="bought it")
    boss = coordinator(
        [nb.ToolCall("buyer", {"task": "buy a pen"}), "all done"], buyer.as_tool(), **kwargs
    )
    return boss, buyer


class TestPeople:
    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_a_childs_request_shows_in_the_parents_pending_with_its_path(
        self, runtimes: Callable[..., nb.Runtime]
    ) -> None:
        """The child's approval is in parent.pending(), with the agents' path and its session."""
        boss, _ = buyer_tree()
        session = runtimes(boss).session("s")
        out = session.run("buy", timeout=WAIT)
        assert (out.status, out.stop_reason) == ("suspended", "needs_person")
        (child,) = session.children()
        assert child.status == "suspended"
        ((rid, request),) = session.pending().items()
        assert (request.kind, request.tool_name, request.path, request.session) == (
            "confirmation",
            "place_order",
            ("buyer",),
            child.key,
        )
        assert rid in session.child(child.call_id).pending()
        assert session.tasks()[-1].status == "suspended"
        assert [c.call_id for c in session.inspect().children] == [child.call_id]

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_no_lease_is_held_while_the_child_waits_for_a_person(
        self, runtimes: Callable[..., nb.Runtime]
    ) -> None:
        """A parent suspended for its child's person lets its lease (and its child's) go."""
        boss, _ = buyer_tree()
        runtime = runtimes(boss)
        session = runtime.session("s")
        session.run("buy", timeout=WAIT)
        (child,) = session.children()
        _until(
            lambda: (
                runtime.store.current_lease(session.key) is None
                and runtime.store.current_lease(child.key) is None
            ),
            "both leases to be released",
        )

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_an_answer_through_the_parent_reaches_the_child_and_both_complete(
        self, runtimes: Callable[..., nb.Runtime]
    ) -> None:
        """parent.respond routes the answer; its receipt observes the parent's continuation
        (the run the wake-up starts), which completes once the child did."""
        boss, _ = buyer_tree()
        session = runtimes(boss).session("s")
        first = session.run("buy", timeout=WAIT)
        rid = next(iter(session.pending()))
        receipt = session.respond(rid, True)
        assert receipt.turn_id == session.tasks()[-1].turn_id
        out = receipt.wait(WAIT)
        assert (out.status, out.output) == ("completed", "all done")
        assert out.run_id == session.tasks()[-1].run_ids[-1] != first.run_id
        (child,) = session.children()
        assert (child.status, child.output) == ("completed", "bought it")
        assert session.pending() == {}
        wakes = [
            e
            for e in session.inbox.scan()
            if e.type == "inbox/accepted" and "wake" in e.payload["data"]
        ]
        assert len(wakes) == 1  # the routed answer's and the child driver's are one record

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_receipts_observe_their_runs_and_the_task_the_whole_turn(
        self, runtimes: Callable[..., nb.Runtime]
    ) -> None:
        """The submit's receipt observes the run that suspended for the child's person; the
        task (by turn) observes the turn through the answer to its completion."""
        boss, _ = buyer_tree()
        session = runtimes(boss).session("s")
        submitted = session.submit("buy")
        assert submitted.wait(WAIT).status == "suspended"
        task = session.task(submitted.command_id)
        session.respond(next(iter(session.pending())), True)
        whole = task.wait(WAIT)
        assert (whole.status, whole.output) == ("completed", "all done")
        again = submitted.wait(WAIT)
        assert (again.status, again.run_id) == ("suspended", session.tasks()[-1].run_ids[0])

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_a_childs_answer_that_starts_no_run_reports_the_parents_run_as_it_stands(
        self, runtimes: Callable[..., nb.Runtime]
    ) -> None:
        """With a request of its own still open, the parent's turn does not go on for a
        child's answer: that receipt reports the suspended run as it stands; the parent's own
        answer starts the continuation, which collects the child's result."""
        buyer = worker_agent("buyer", place_order, answer="bought it")
        boss = coordinator(
            [
                [nb.ToolCall("buyer", {"task": "buy"}), nb.ToolCall("place_order", {"x": "boss"})],
                "all done",
            ],
            buyer.as_tool(),
            place_order,
        )
        session = runtimes(boss).session("s")
        first = session.run("go", timeout=WAIT)
        assert first.status == "suspended"
        requests = session.pending()
        (own,) = [rid for rid, r in requests.items() if not r.path]
        (childs,) = [rid for rid, r in requests.items() if r.path == ("buyer",)]
        out = session.respond(childs, True).wait(WAIT)
        assert (out.status, out.run_id) == ("suspended", first.run_id)
        _until(lambda: session.children()[0].status == "completed", "the buyer to finish")
        assert session.tasks()[-1].run_ids == (first.run_id,)
        done = session.respond(own, True).wait(WAIT)
        assert (done.status, done.output) == ("completed", "all done")
        assert done.run_id != first.run_id

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_an_answer_in_the_child_wakes_the_parent(
        self, runtimes: Callable[..., nb.Runtime]
    ) -> None:
        """Answered in the child session directly, the parent goes on by itself."""
        boss, _ = buyer_tree()
        session = runtimes(boss).session("s")
        first = session.run("buy", timeout=WAIT)
        child = session.child(session.children()[0].call_id)
        child.respond(next(iter(child.pending())), True).wait(WAIT)
        _until(lambda: session.tasks()[-1].status == "completed", "the parent to complete")
        assert session.tasks()[-1].turn_id == first.turn_id

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_a_grandchilds_request_is_answered_through_the_root(
        self, runtimes: Callable[..., nb.Runtime]
    ) -> None:
        """Two levels down, the request shows at the root with the whole path; answered there."""
        buyer = worker_agent("buyer", place_order, answer="bought it")
        manager = nb.Agent(
            name="Manager",
            agent_id="manager",
            model=nb.ScriptedModel(
                lambda m: (
                    next((x.text for x in m if x.role == "tool"), None)
                    or nb.ToolCall("buyer", {"task": "buy"})
                )
            ),
            tools=[buyer.as_tool()],
        )
        boss = coordinator([nb.ToolCall("manager", {"task": "get a pen"}), "ok"], manager.as_tool())
        session = runtimes(boss).session("s")
        assert session.run("go", timeout=WAIT).status == "suspended"
        ((rid, request),) = session.pending().items()
        assert request.path == ("manager", "buyer")
        out = session.respond(rid, True).wait(WAIT)
        assert (out.status, out.output) == ("completed", "ok")
        (mid,) = session.children()
        assert mid.output == "bought it"

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_a_rule_remembered_through_the_parent_covers_the_next_child(
        self, runtimes: Callable[..., nb.Runtime]
    ) -> None:
        """approve(remember="agent") answered through the parent is the child agent's rule:
        the next child of that agent runs the call without asking and cites the rule."""
        buyer = worker_agent("buyer", place_order, answer="bought it")
        boss = coordinator(
            lambda m: "all done" if m[-1].role == "tool" else nb.ToolCall("buyer", {"task": "buy"}),
            buyer.as_tool(),
        )
        session = runtimes(boss).session("s")
        assert session.run("buy", timeout=WAIT).status == "suspended"
        rid = next(iter(session.pending()))
        assert session.respond(rid, nb.Answer.approve(remember="agent")).wait(WAIT).status == (
            "completed"
        )
        out = session.run("buy again", timeout=WAIT)
        assert (out.status, out.output) == ("completed", "all done")
        first, second = (session.child(c.call_id) for c in session.children())
        (rule,) = first.permissions()
        ends = [e.payload for e in second.log.scan() if e.type == "action/end"]
        assert [(e["name"], e["rule_id"]) for e in ends] == [("place_order", rule.rule_id)]

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_answers_that_fit_no_request_write_nothing(
        self, runtimes: Callable[..., nb.Runtime]
    ) -> None:
        """An unknown id is InvalidAnswer; the inboxes of parent and child do not move."""
        boss, _ = buyer_tree()
        session = runtimes(boss).session("s")
        session.run("buy", timeout=WAIT)
        child = session.child(session.children()[0].call_id)
        heads = (session.inbox.head(), child.inbox.head())
        with pytest.raises(nb.InvalidAnswer, match="no request"):
            session.respond("nope", True)
        with pytest.raises(nb.InvalidAnswer):
            session.respond(next(iter(session.pending())), "not a yes or no")
        assert (session.inbox.head(), child.inbox.head()) == heads


# -- stopping ------------------------------------------------------------------------------------


class Holding:
    """A child tool that waits until released (idempotent: it may run again on resume)."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        self.runs = 0

        async def hold(x: str) -> str:
            """Work for a while."""
            import asyncio

            self.runs += 1
            self.started.set()
            await asyncio.to_thread(self.release.wait, WAIT)
            return f"worked on {x}"

        self.tool = nb.tool(hold, idempotent=True)


class TestStopping:
    def tree(self, policy: str) -> tuple[nb.Agent, Holding]:
        holding = Holding()
        worker = worker_agent("worker", holding.tool, answer="finished")
        boss = nb.Agent(
            name="Coordinator",
            agent_id="coordinator",
            model=nb.ScriptedModel(
                lambda m: (
                    "all done"
                    if any(x.role == "tool" for x in m)
                    else nb.ToolCall("worker", {"task": "work"})
                )
            ),
            tools=[nb.subagent(worker, on_parent_stop=policy)],  # type: ignore[arg-type]
        )
        return boss, holding

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_interrupting_the_parent_interrupts_the_child_and_resume_continues_both(
        self, runtimes: Callable[..., nb.Runtime]
    ) -> None:
        """on_parent_stop="interrupt": the child stops with the parent and resumes with it."""
        boss, holding = self.tree("interrupt")
        session = runtimes(boss).session("s")
        receipt = session.submit("go")
        assert holding.started.wait(WAIT)
        assert session.interrupt()
        assert receipt.wait(WAIT).status == "interrupted"
        _until(lambda: session.children()[0].status == "interrupted", "the child to stop")
        holding.release.set()
        out = session.resume(receipt.turn_id).wait(WAIT)
        assert (out.status, out.output) == ("completed", "all done")
        (child,) = session.children()
        assert (child.status, child.output) == ("completed", "finished")
        assert len(session.child(child.call_id).tasks()) == 1  # the same child turn went on

    def test_an_interrupted_subagent_call_is_never_uncertain(
        self, runtimes: Callable[..., nb.Runtime]
    ) -> None:
        """Cut off while its child runs, the call is not uncertain: not in inspect(), not in
        reconcile's set, and the export calls it waiting."""
        pytest.importorskip("duckdb")
        from agentnb import analysis

        boss, holding = self.tree("interrupt")
        runtime = runtimes(boss)
        session = runtime.session("s")
        receipt = session.submit("go")
        assert holding.started.wait(WAIT)
        session.interrupt()
        assert receipt.wait(WAIT).status == "interrupted"
        holding.release.set()
        assert session.inspect().uncertain_tool_calls == ()
        with pytest.raises(nb.InvalidInput, match="exactly the uncertain calls"):
            session.reconcile({session.children()[0].call_id: nb.ToolOutcome.unknown()}, "x")
        calls = analysis.tool_calls(session, session_id="s")
        row = calls[calls["tool_name"] == "worker"].iloc[0]
        assert (row["status"], bool(row["uncertain"])) == ("waiting", False)

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_a_subagent_call_is_running_while_its_run_waits_and_never_uncertain(
        self, runtimes: Callable[..., nb.Runtime]
    ) -> None:
        """inspect() names the sub-agent call among the running calls while the parent's run
        waits for the child; cut off, the call is neither running nor uncertain."""
        boss, holding = self.tree("interrupt")
        session = runtimes(boss).session("s")
        receipt = session.submit("go")
        assert holding.started.wait(WAIT)
        seen = session.inspect()
        assert [c.tool_name for c in seen.running_tool_calls] == ["worker"]
        assert seen.uncertain_tool_calls == ()
        session.interrupt()
        assert receipt.wait(WAIT).status == "interrupted"
        holding.release.set()
        after = session.inspect()
        assert (after.running_tool_calls, after.uncertain_tool_calls) == ((), ())

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_resuming_with_uncertain_unknown_attaches_to_the_child_again(
        self, runtimes: Callable[..., nb.Runtime]
    ) -> None:
        """resume(uncertain="unknown") settles no sub-agent call as unknown: the new run
        attaches to the same child turn and collects its answer."""
        boss, holding = self.tree("interrupt")
        session = runtimes(boss).session("s")
        receipt = session.submit("go")
        assert holding.started.wait(WAIT)
        session.interrupt()
        assert receipt.wait(WAIT).status == "interrupted"
        holding.release.set()
        out = session.resume(receipt.turn_id, uncertain="unknown").wait(WAIT)
        assert (out.status, out.output) == ("completed", "all done")
        results = [e.payload for e in session.log.scan() if e.type == "tool/result"]
        assert [(r["status"], r["output"]) for r in results] == [("success", "finished")]
        assert "recovery/applied" not in types(session)
        assert len(session.child(session.children()[0].call_id).tasks()) == 1

    def test_closing_the_parent_stops_it_and_its_child_as_on_parent_stop_says(
        self, runtimes: Callable[..., nb.Runtime]
    ) -> None:
        """session.close() interrupts a parent waiting for its child (stop reason
        session_closed) and interrupts the child; resume continues both."""
        boss, holding = self.tree("interrupt")
        session = runtimes(boss).session("s")
        receipt = session.submit("go")
        assert holding.started.wait(WAIT)
        session.close()
        out = receipt.wait(WAIT)
        assert (out.status, out.stop_reason) == ("interrupted", "session_closed")
        _until(lambda: session.children()[0].status == "interrupted", "the child to stop")
        holding.release.set()
        resumed = session.resume(receipt.turn_id).wait(WAIT)
        assert (resumed.status, resumed.output) == ("completed", "all done")

    def test_closing_the_parent_cancels_a_child_whose_policy_says_cancel(
        self, runtimes: Callable[..., nb.Runtime]
    ) -> None:
        """on_parent_stop="cancel": closing the parent cancels the child's task."""
        boss, holding = self.tree("cancel")
        session = runtimes(boss).session("s")
        receipt = session.submit("go")
        assert holding.started.wait(WAIT)
        session.close()
        assert receipt.wait(WAIT).stop_reason == "session_closed"
        _until(lambda: session.children()[0].status == "cancelled", "the child to be cancelled")
        holding.release.set()

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_cancelling_the_parent_cancels_the_child(
        self, runtimes: Callable[..., nb.Runtime]
    ) -> None:
        """Cancelling a running parent cancels its child; the call is recorded cancelled."""
        boss, holding = self.tree("interrupt")
        session = runtimes(boss).session("s")
        receipt = session.submit("go")
        assert holding.started.wait(WAIT)
        session.cancel(receipt.turn_id)
        assert receipt.wait(WAIT).status == "cancelled"
        holding.release.set()
        _until(lambda: session.children()[0].status == "cancelled", "the child to be cancelled")
        done = [e for e in session.log.scan() if e.type == "subagent/completed"]
        assert [e.payload["status"] for e in done] == ["cancelled"]

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_on_parent_stop_cancel_cancels_the_child_at_an_interrupt(
        self, runtimes: Callable[..., nb.Runtime]
    ) -> None:
        """on_parent_stop="cancel": interrupting the parent cancels the child's task."""
        boss, holding = self.tree("cancel")
        session = runtimes(boss).session("s")
        receipt = session.submit("go")
        assert holding.started.wait(WAIT)
        session.interrupt()
        assert receipt.wait(WAIT).status == "interrupted"
        _until(lambda: session.children()[0].status == "cancelled", "the child to be cancelled")
        holding.release.set()
        out = session.resume(receipt.turn_id).wait(WAIT)
        assert out.status == "completed"
        result = [e for e in session.log.scan() if e.type == "tool/result"][-1]
        assert "was cancelled" in result.payload["output"]

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_on_parent_stop_abandon_leaves_the_child_running(
        self, runtimes: Callable[..., nb.Runtime]
    ) -> None:
        """on_parent_stop="abandon": the child runs on; a resumed parent collects its answer."""
        boss, holding = self.tree("abandon")
        session = runtimes(boss).session("s")
        receipt = session.submit("go")
        assert holding.started.wait(WAIT)
        session.interrupt()
        assert receipt.wait(WAIT).status == "interrupted"
        assert session.children()[0].status == "running"
        holding.release.set()
        _until(lambda: session.children()[0].status == "completed", "the child to finish")
        assert session.resume(receipt.turn_id).wait(WAIT).status == "completed"
        assert holding.runs == 1


class TestAgentChange:
    def tree(self, instructions: str, holding: Holding) -> nb.Agent:
        worker = worker_agent("worker", holding.tool, instructions=instructions)
        return coordinator([nb.ToolCall("worker", {"task": "work"}), "all done"], worker.as_tool())

    def test_a_changed_child_agent_is_refused_in_its_bound_child_then_accepted(self) -> None:
        """A child bound to v1, attached again with v2: refused naming the change; accepted
        with accept_agent_change, which records agent/changed."""
        store = nb.MemoryStore()
        first = Holding()
        with nb.Runtime(self.tree("Version one.", first), store=store) as runtime:
            session = runtime.session("s")
            receipt = session.submit("go")
            assert first.started.wait(WAIT)
            session.interrupt()
            assert receipt.wait(WAIT).status == "interrupted"
            _until(lambda: session.children()[0].status == "interrupted", "the child to stop")
            first.release.set()
        second = Holding()
        second.release.set()
        with nb.Runtime(self.tree("Version two.", second), store=store) as runtime:
            session = runtime.session("s")
            assert session.resume(receipt.turn_id).wait(WAIT).status == "suspended"
            (child,) = session.children()
            assert child.status == "interrupted"
            refused = [
                e.payload["reason"]
                for e in session.child(child.call_id).inbox.scan()
                if e.type == "inbox/rejected"
            ]
            assert len(refused) == 1
            assert "instructions changed" in refused[0]
        with nb.Runtime(
            self.tree("Version two.", second), store=store, accept_agent_change=True
        ) as runtime:
            session = runtime.session("s")
            out = session.resume(receipt.turn_id).wait(WAIT)
            assert (out.status, out.output) == ("completed", "all done")
            worker = session.child(session.children()[0].call_id)
            assert [e.type for e in worker.log.scan()].count("agent/changed") == 1
            assert len(worker.tasks()) == 1


# -- usage ---------------------------------------------------------------------------------------


class TestUsage:
    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_the_parents_usage_includes_its_childrens_and_says_how_much(
        self, runtimes: Callable[..., nb.Runtime]
    ) -> None:
        """Outcome.usage adds the child's tokens and model calls; subagent_* say how much."""
        helper = worker_agent("helper")
        boss = coordinator([nb.ToolCall("helper", {"task": "x"}), "ok"], helper.as_tool())
        session = runtimes(boss).session("s")
        out = session.run("go", timeout=WAIT)
        used = out.usage
        assert used is not None
        (child,) = session.children()
        mine = [e for e in session.log.scan() if e.type == "model/end"]
        own_in = sum(e.payload["input_tokens"] for e in mine)
        assert child.usage is not None
        assert child.usage.input_tokens > 0
        assert used.subagent_calls == 1
        assert used.subagent_input_tokens == child.usage.input_tokens
        assert used.input_tokens == own_in + child.usage.input_tokens
        assert used.model_calls == len(mine) + child.usage.model_calls

    def test_a_childs_compaction_rolls_up_with_its_other_usage(
        self, runtimes: Callable[..., nb.Runtime]
    ) -> None:
        """The summariser calls a child made count in the parent's compaction_* counters."""

        @nb.tool
        def fetch(x: str) -> str:
            """Fetch a page."""
            return "data " * 40

        def script(messages: list[nb.Message]) -> Any:
            if sum(m.role == "tool" for m in messages) < 3:
                return nb.ToolCall("fetch", {"x": "page"})
            return "read them"

        reader = nb.Agent(
            name="Reader",
            agent_id="reader",
            model=nb.ScriptedModel(script),
            tools=[fetch],
            compaction=nb.SummaryCompactor(
                trigger=0.5, keep_last=2, model=nb.ScriptedModel(lambda m: "a summary")
            ),
            context_window=300,
        )
        # The parent's conversation, shared, comes first: the summariser can replace it.
        boss = coordinator(
            [nb.ToolCall("reader", {"task": "read"}), "ok"],
            nb.subagent(reader, share_context="all"),
        )
        session = runtimes(boss).session("s")
        used = session.run("go " + "context " * 60, timeout=WAIT).usage
        (child,) = session.children()
        assert child.usage is not None
        assert child.usage.compaction_calls > 0
        assert used is not None
        assert (used.compaction_calls, used.compaction_input_tokens) == (
            child.usage.compaction_calls,
            child.usage.compaction_input_tokens,
        )

    def test_max_turn_tokens_counts_the_childrens(
        self, runtimes: Callable[..., nb.Runtime]
    ) -> None:
        """A child's tokens count against the parent turn's budget: it stops at its next step."""
        helper = worker_agent("helper", instructions="x" * 2000)  # a big first request
        boss = coordinator(
            [nb.ToolCall("helper", {"task": "x"}), "never reached"],
            helper.as_tool(),
            max_turn_tokens=300,
        )
        session = runtimes(boss).session("s")
        out = session.run("go", timeout=WAIT)
        assert (out.status, out.stop_reason) == ("failed", "max_turn_tokens")
        assert out.usage is not None
        assert out.usage.subagent_input_tokens > 0


# -- the plan, the chat, the view ----------------------------------------------------------------


class TestPlan:
    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_the_todo_tool_records_the_plan_and_each_changed_step(
        self, runtimes: Callable[..., nb.Runtime]
    ) -> None:
        """todo calls write plan/changed and task/changed; plan() and the chat item show it."""
        boss = coordinator(
            [
                nb.ToolCall("todo", {"steps": [{"content": "find"}, {"content": "write"}]}),
                nb.ToolCall(
                    "todo",
                    {
                        "steps": [
                            {"content": "find", "status": "completed"},
                            {"content": "write", "status": "in_progress"},
                        ]
                    },
                ),
                "done",
            ],
            nb.todo,
        )
        session = runtimes(boss).session("s")
        assert session.run("plan it", timeout=WAIT).status == "completed"
        assert [(p.id, p.content, p.status) for p in session.plan()] == [
            ("step-1", "find", "completed"),
            ("step-2", "write", "in_progress"),
        ]
        changes = [
            (e.payload["id"], e.payload["status"], e.payload["previous"])
            for e in session.log.scan()
            if e.type == "task/changed"
        ]
        assert changes == [
            ("step-1", "pending", None),
            ("step-2", "pending", None),
            ("step-1", "completed", "pending"),
            ("step-2", "in_progress", "pending"),
        ]
        plans = [i for i in session.snapshot().items if i.kind == "plan"]
        assert [len(i.plan) for i in plans] == [2, 2]
        assert plans[-1].plan[0]["status"] == "completed"


class TestChat:
    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_the_chat_snapshot_has_a_subagent_item(
        self, runtimes: Callable[..., nb.Runtime]
    ) -> None:
        """A sub-agent call is a ``subagent`` item with its child, task, status and answer."""
        helper = worker_agent("helper", answer="helped")
        boss = coordinator([nb.ToolCall("helper", {"task": "x"}), "ok"], helper.as_tool())
        session = runtimes(boss).session("s")
        session.run("go", timeout=WAIT)
        (item,) = [i for i in session.snapshot().items if i.kind == "subagent"]
        (child,) = session.children()
        assert item.id == child.call_id
        assert item.subagent is not None
        assert nb.SessionKey(**item.subagent["child"]) == child.key
        assert (item.subagent["task"], item.subagent["status"], item.subagent["output"]) == (
            "x",
            "completed",
            "helped",
        )
        again = ChatState.fold(session.log.scan())  # the item survives the fold's snapshot
        loaded = ChatState.load(again.dump())
        assert [i.to_dict() for i in loaded.items] == [i.to_dict() for i in again.items]

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_presentation_hints_reach_the_chat_items(
        self, runtimes: Callable[..., nb.Runtime]
    ) -> None:
        """A tool's presentation/hint marks its card; a sub-agent waiting for a person, expand."""

        @nb.tool
        def quiet(x: str, ctx: nb.ToolContext) -> str:
            """A tool whose card starts closed."""
            ctx.record("presentation/hint", {"hint": "collapse", "target": ctx.call_id})
            return "shh"

        boss, _ = buyer_tree()
        boss = coordinator(
            [[nb.ToolCall("quiet", {"x": "a"}), nb.ToolCall("buyer", {"task": "buy"})], "ok"],
            quiet,
            *(t for t in boss.tools if t.name == "buyer"),
        )
        session = runtimes(boss).session("s")
        session.run("go", timeout=WAIT)
        hints = {i.kind: i.hint for i in session.snapshot().items if i.kind != "message"}
        assert hints == {"tool": "collapse", "subagent": "expand"}

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_records_show_their_subagents_as_tables(
        self, runtimes: Callable[..., nb.Runtime]
    ) -> None:
        """children(), a Child, pending() and inspect() render the sub-agents (escaped)."""
        from agentnb.html import show

        boss, _ = buyer_tree()
        session = runtimes(boss).session("s")
        session.run("buy <b>pens</b>", timeout=WAIT)
        listing = show(session.children())._repr_html_()
        assert "buyer" in listing
        assert "buy a pen" in listing
        assert "suspended" in session.children()[0]._repr_html_()
        assert "from" in show(session.pending())._repr_html_()
        inspected = session.inspect()._repr_html_()
        assert "1 sub-agent at work" in inspected
        assert "<b>pens</b>" not in inspected

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    def test_the_view_shows_a_subagent_card_that_opens_the_childs_chat(
        self, runtimes: Callable[..., nb.Runtime]
    ) -> None:
        """SessionView: a sub-agent card, the child's request answerable there, its chat nested."""
        pytest.importorskip("ipywidgets")
        from agentnb.widgets import SessionView

        boss, _ = buyer_tree()
        session = runtimes(boss).session("s")
        view = SessionView(session, follow=False)
        try:
            session.run("buy", timeout=WAIT)
            view.refresh()
            (card,) = [c for c in view.transcript.children if "agentnb-subagent" in c._dom_classes]
            assert "sub-agent buyer" in card.titles[0]
            (request,) = view.requests.children
            assert "from buyer" in request.children[0].value
            assert view.approve(next(iter(session.pending()))) is not None
            _until(lambda: session.tasks()[-1].status == "completed", "the parent to complete")
            view.refresh()
            nested = view.toggle_child(session.children()[0].call_id)
            assert nested is not None
            assert nested.session.key == session.children()[0].key
            texts = [i.text for i in nested.snapshot().items]
            assert "bought it" in texts
        finally:
            view.close()


# -- exports -------------------------------------------------------------------------------------


class TestExports:
    @pytest.fixture
    def tree(
        self, tmp_path: Path, runtimes: Callable[..., nb.Runtime]
    ) -> tuple[nb.Session, Path, str]:
        pytest.importorskip("duckdb")
        store = f"sqlite:///{tmp_path / 'db.sqlite'}"

        @nb.tool
        def lookup(x: str) -> str:
            """Look up."""
            return f"looked up {x}"

        leaf = worker_agent("leaf", lookup, answer="leaf answer")
        middle = nb.Agent(
            name="Middle",
            agent_id="middle",
            model=nb.ScriptedModel(
                lambda m: (
                    "middle answer"
                    if any(x.role == "tool" for x in m)
                    else nb.ToolCall("leaf", {"task": "deep"})
                )
            ),
            tools=[leaf.as_tool()],
        )
        other = worker_agent("other", lookup, answer="other answer")
        boss = coordinator(
            [
                [nb.ToolCall("middle", {"task": "a"}), nb.ToolCall("other", {"task": "b"})],
                "ok",
            ],
            middle.as_tool(),
            other.as_tool(),
        )
        runtime = runtimes(boss, store)
        session = runtime.session("root")
        out = session.run("go", timeout=WAIT)
        assert out.status == "completed"
        from agentnb.export import Exporter, ParquetSink

        sink = ParquetSink(tmp_path / "export")
        Exporter(runtime.store, sink).drain()
        return session, tmp_path / "export", out.turn_id

    def test_the_tree_is_rebuilt_from_the_exports_alone(
        self, tree: tuple[nb.Session, Path, str]
    ) -> None:
        """Reading only the export's sessions view draws the tree the runtime made."""
        import pandas as pd

        from agentnb import analysis

        session, export, _ = tree
        frame = analysis.sessions(str(export))
        rows = {r["session_key"]: r for r in frame.to_dict("records")}
        below: dict[str | None, list[str]] = {}
        for key, row in rows.items():
            parent = None if pd.isna(row["parent_key"]) else row["parent_key"]
            below.setdefault(parent, []).append(key)

        def draw(key: str, depth: int = 0) -> list[str]:
            lines = [f"{'  ' * depth}{rows[key]['agent_id']} (depth {rows[key]['depth']})"]
            for child in sorted(below.get(key, ()), key=lambda k: rows[k]["agent_id"]):
                lines += draw(child, depth + 1)
            return lines

        (root,) = below[None]
        assert draw(root) == [
            "coordinator (depth 0)",
            "  middle (depth 1)",
            "    leaf (depth 2)",
            "  other (depth 1)",
        ]
        assert {r["root_key"] for r in rows.values()} == {root}
        assert root == str(session.key)
        expected = {str(c.key) for c in session.children()} | {
            str(g.key) for c in session.children() for g in session.child(c.call_id).children()
        }
        assert set(rows) - {root} == expected

    def test_a_runtimes_live_export_carries_the_children_it_ran(
        self, tmp_path: Path, runtimes: Callable[..., nb.Runtime]
    ) -> None:
        """export_to drains the child sessions the runtime executed, not only those opened."""
        pytest.importorskip("duckdb")
        from agentnb import analysis
        from agentnb.export import ParquetSink

        helper = worker_agent("helper")
        boss = coordinator([nb.ToolCall("helper", {"task": "x"}), "ok"], helper.as_tool())
        sink = ParquetSink(tmp_path / "live")
        runtime = runtimes(boss, f"sqlite:///{tmp_path / 'db.sqlite'}", export_to=[sink])
        runtime.session("s").run("go", timeout=WAIT)
        assert runtime.exporter is not None
        assert runtime.exporter.flush(WAIT)
        frame = analysis.sessions(str(tmp_path / "live"))
        assert sorted(frame["agent_id"]) == ["coordinator", "helper"]

    def test_subagent_work_lists_the_calls_below_a_turn(
        self, tree: tuple[nb.Session, Path, str]
    ) -> None:
        """The audit query walks the tree below the turn: depth, agent, answer, tools used."""
        from agentnb import analysis

        _, export, turn_id = tree
        df = analysis.query("subagent_work", str(export), turn_id=turn_id)
        got = sorted(
            (r["depth"], r["child_agent_id"], r["status"], r["result"], r["tools_used"])
            for r in df.to_dict("records")
        )
        assert got == [
            (1, "middle", "completed", "middle answer", "leaf"),  # its sub-agent tool
            (1, "other", "completed", "other answer", "lookup"),
            (2, "leaf", "completed", "leaf answer", "lookup"),
        ]

    def test_cost_per_agent_covers_the_tree_without_counting_twice(
        self, tree: tuple[nb.Session, Path, str]
    ) -> None:
        """Per agent of the tree: its sessions' own tokens; the sum equals all model calls'."""
        from agentnb import analysis

        session, export, _ = tree
        df = analysis.query("cost_per_agent", str(export), root_key=str(session.key))
        assert set(df["agent_id"]) == {"coordinator", "middle", "leaf", "other"}
        calls = analysis.model_calls(str(export))
        assert int(df["input_tokens"].sum()) == int(calls["input_tokens"].sum())

    def test_turns_roll_up_their_subagents(self, tree: tuple[nb.Session, Path, str]) -> None:
        """turns(subagents=True): the root turn's totals add its sub-agents' whole tree."""
        from agentnb import analysis

        session, export, turn_id = tree
        df = analysis.turns(str(export), subagents=True)
        row = df[df["turn_id"] == turn_id].iloc[0]
        used = session.tasks()[-1].usage
        assert used is not None
        assert int(row["total_input_tokens"]) == used.input_tokens
        assert int(row["subagent_input_tokens"]) == used.subagent_input_tokens

    def test_the_timeline_nests_child_turns_under_the_calling_turn(
        self, tree: tuple[nb.Session, Path, str]
    ) -> None:
        """Child turns follow the turn that called them, one group per tree, with their depth."""
        from agentnb import analysis

        _, export, turn_id = tree
        data = analysis.timeline_data(str(export))
        turns = data[data["kind"] == "turn"]
        labels = [str(x).strip().split(":")[0] for x in turns["label"]]
        depths = dict(zip(labels, turns["depth"], strict=True))
        assert depths == {"go": 0, "\u21b3 middle": 1, "\u21b3 other": 1, "\u21b3 leaf": 2}
        assert turns["turn_id"].iloc[0] == turn_id
        # The two children started together: either comes first, the leaf right under middle.
        assert labels.index("\u21b3 leaf") == labels.index("\u21b3 middle") + 1
        assert set(turns["session"]) == {"default/root"}
        figure = analysis.timeline(str(export))
        assert figure is not None


class TestCommandLine:
    def test_show_lists_the_sub_agent_calls_and_opens_a_child(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """``agentnb show`` names each sub-agent call with its child's status and answer;
        ``agentnb show <session>/<call id>`` prints the child's own tasks."""
        from agentnb.cli import EXIT_OK, main

        url = f"sqlite:///{tmp_path / 'cli.sqlite'}"
        helper = worker_agent("helper", answer="the facts")
        boss = coordinator(
            [nb.ToolCall("helper", {"task": "find the facts"}), "all done"], nb.subagent(helper)
        )
        with nb.Runtime(boss, store=url) as runtime:
            session = runtime.session("s1")
            assert session.run("coordinate", timeout=WAIT).status == "completed"
            (child,) = session.children()
        assert main(["show", "s1", "--store", url, "--width", "0"]) == EXIT_OK
        out = capsys.readouterr().out
        assert "sub-agents (agentnb show <session>/<call id> opens one):" in out
        (row,) = [line for line in out.splitlines() if child.call_id in line]
        assert row.split() == [
            child.call_id,
            "completed",
            "helper",
            "'find",
            "the",
            "facts'",
            "->",
            "the",
            "facts",
        ]
        assert main(["show", f"s1/{child.call_id}", "--store", url]) == EXIT_OK
        out = capsys.readouterr().out
        assert "'find the facts'" in out
        assert "sub-agents" not in out
        assert main(["show", "s1", "--store", url, "--json"]) == EXIT_OK
        (listed,) = json.loads(capsys.readouterr().out)["subagents"]
        assert listed["call_id"] == child.call_id
        assert listed["status"] == "completed"
        assert listed["output"] == "the facts"
