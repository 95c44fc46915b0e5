"""``export_state`` / ``import_baseline``: agentnb's own state round-trips with its plan and
permission rules; OpenAI chat messages and AgentScope ``AgentState`` convert with a report of
what was dropped; every near miss is an ``InvalidInput`` naming the field."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from pydantic import ValidationError

import agentnb as nb
from tests.runtime.helpers import WAIT, events_of

MakeRuntime = Callable[..., nb.Runtime]


@nb.tool(confirm=True)
def create_order(item: str) -> str:
    """Create a purchase order (a person approves it).

    Args:
        item: what to order
    """
    return f"ordered {item}"


@nb.tool
def lookup_price(plan: str) -> str:
    """The monthly price of a plan.

    Args:
        plan: the plan's name
    """
    return "$10"


def _echo(messages: list[nb.Message]) -> str:
    return f"done: {messages[-1].text}"


def _planned_and_approved(make_runtime: MakeRuntime, remember: str = "session") -> nb.Session:
    """A quiescent session with a plan and a remembered approval of ``create_order``."""
    model = nb.ScriptedModel(
        [
            nb.ToolCall("todo", {"steps": [{"content": "price"}, {"content": "order"}]}),
            nb.ToolCall("create_order", {"item": "desk"}),
            "ordered",
            nb.ToolCall("create_order", {"item": "desk"}),
            "ordered again",
        ]
    )
    session = make_runtime(model, [create_order, nb.todo]).session("source")
    assert session.submit("order a desk").wait(WAIT).status == "suspended"
    answer = nb.Answer.approve(remember=remember, match={"item": "desk"})
    assert session.respond(next(iter(session.pending())), answer).wait(WAIT).status == ("completed")
    return session


class TestOwnState:
    def test_a_round_trip_keeps_context_plan_and_permission_rules(
        self, make_runtime: MakeRuntime
    ) -> None:
        """An exported state imported into a new session gives the same context, plan and
        session rules, and the report drops nothing."""
        source = _planned_and_approved(make_runtime)
        state = source.export_state()
        assert (state["format"], state["version"]) == ("agentnb/state", 1)
        target = source.runtime.session("target")
        report = target.import_baseline(state)
        assert (report.format, report.dropped, report.imported) == ("agentnb", (), True)
        assert report.source == str(source.key)
        assert report.messages == len(state["messages"])
        assert target.plan() == source.plan()
        assert [p.content for p in target.plan()] == ["price", "order"]
        assert [(r.tool_name, dict(r.match)) for r in target.permissions()] == [
            ("create_order", {"item": "desk"})
        ]
        assert target.inspect().next_context == source.inspect().next_context
        assert target.export_state()["permissions"] == state["permissions"]

    def test_an_imported_rule_lets_the_new_session_skip_the_approval(
        self, make_runtime: MakeRuntime
    ) -> None:
        """A call the imported rule matches runs in the new session without asking."""
        source = _planned_and_approved(make_runtime)
        target = source.fork("target")
        outcome = target.run("order another", timeout=WAIT)
        assert outcome.output == "ordered again"
        assert target.pending() == {}

    def test_an_agent_wide_rule_is_reported_as_staying_with_its_session(
        self, make_runtime: MakeRuntime
    ) -> None:
        """An agent-wide rule is not copied (it already holds for the agent and user); the
        report says so."""
        source = _planned_and_approved(make_runtime, remember="agent")
        report = source.runtime.session("target").import_baseline(source.export_state())
        (dropped,) = report.dropped
        assert dropped.path == "permissions[0]"
        assert "agent-wide" in dropped.reason

    def test_a_second_import_of_the_same_state_writes_nothing(
        self, make_runtime: MakeRuntime
    ) -> None:
        """A retried import reports ``imported=False`` and leaves the log as it was."""
        source = make_runtime(nb.ScriptedModel(_echo)).session("source")
        source.run("hello", timeout=WAIT)
        target = source.runtime.session("target")
        state = source.export_state()
        assert target.import_baseline(state).imported
        assert not target.import_baseline(state).imported
        assert target.log.head() == 1

    def test_provenance_and_version_are_recorded(self, make_runtime: MakeRuntime) -> None:
        """``source`` and ``source_version`` land on the ``migration/baseline`` event."""
        session = make_runtime(nb.ScriptedModel(_echo)).session("target")
        session.import_baseline(
            [{"role": "user", "content": "hi"}], source="openai:thread-42", source_version="v1"
        )
        (event,) = events_of(session, "migration/baseline")
        assert (event.payload["source"], event.payload["source_version"]) == (
            "openai:thread-42",
            "v1",
        )
        assert event.payload["format"] == "openai"

    @pytest.mark.parametrize(
        ("state", "field"),
        [
            ({"messages": [{"id": "m1", "text": "hi"}]}, "messages[0].role"),
            ({"messages": [{"id": "m1", "role": "robot", "text": "hi"}]}, "messages[0].role"),
            ({"messages": [{"id": "m1", "role": "user", "text": 3}]}, "messages[0].text"),
            (
                {"messages": [{"id": "m1", "role": "user", "text": "hi", "colour": "red"}]},
                "messages[0].colour",
            ),
            ({"format": "agentnb/state", "messages": "hi"}, "messages"),
            ({"format": "agentnb/state", "version": 99, "messages": []}, "version"),
            ({"messages": [], "plan": [{"id": "a", "content": "x", "status": "?"}]}, "plan[0]"),
            ({"messages": [], "permissions": [{"rule_id": "r"}]}, "permissions[0]"),
            ({"messages": [], "memories": []}, "memories"),
        ],
    )
    def test_a_near_miss_is_invalid_input_naming_the_field(
        self, make_runtime: MakeRuntime, state: dict[str, Any], field: str
    ) -> None:
        """A state that is almost agentnb's raises ``InvalidInput`` (never pydantic's
        ``ValidationError``) naming the field, and writes nothing."""
        session = make_runtime(nb.ScriptedModel(_echo)).session("target")
        with pytest.raises(nb.InvalidInput) as raised:
            session.import_baseline(state, source="agentnb")
        assert not isinstance(raised.value, ValidationError)
        assert field in str(raised.value)
        assert session.log.head() == 0

    def test_a_shape_of_no_kind_asks_for_source(self, make_runtime: MakeRuntime) -> None:
        """A state that fits no known shape is refused with the ``source=`` names to pass."""
        session = make_runtime(nb.ScriptedModel(_echo)).session("target")
        with pytest.raises(nb.InvalidInput, match="source='agentnb'"):
            session.import_baseline({"nope": 1})


OPENAI_CHAT: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a pricing bot."},
    {"role": "user", "content": [{"type": "text", "text": "How much is pro?"}]},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "lookup_price", "arguments": '{"plan": "pro"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "$10"},
    {"role": "assistant", "content": "Pro costs $10."},
    {
        "role": "user",
        "name": "alice",
        "content": [
            {"type": "text", "text": "And this one?"},
            {"type": "image_url", "image_url": {"url": "https://example.invalid/a.png"}},
        ],
    },
    {"role": "assistant", "content": "That is basic."},
]


class TestOpenAIMessages:
    def test_chat_messages_become_the_context_the_model_sees(
        self, make_runtime: MakeRuntime
    ) -> None:
        """Users, assistant tool calls and tool results convert; the next model call sees
        them after the agent's own instructions."""
        model = nb.ScriptedModel(_echo)
        session = make_runtime(model, [lookup_price]).session("target")
        report = session.import_baseline(OPENAI_CHAT)
        assert (report.format, report.messages) == ("openai", 6)
        session.run("thanks", timeout=WAIT)
        seen = model.requests[-1]
        assert [(m.role, m.text) for m in seen[1:]] == [
            ("user", "How much is pro?"),
            ("assistant", ""),
            ("tool", "$10"),
            ("assistant", "Pro costs $10."),
            ("user", "And this one?"),
            ("assistant", "That is basic."),
            ("user", "thanks"),
        ]
        (call,) = seen[2].tool_calls
        assert (call.call_id, call.name, call.arguments) == (
            "call_1",
            "lookup_price",
            {"plan": "pro"},
        )
        assert (seen[3].call_id, seen[3].name) == ("call_1", "lookup_price")

    def test_what_is_not_kept_is_reported_by_path(self, make_runtime: MakeRuntime) -> None:
        """The system prompt, the image part and the speaker's name are listed as dropped."""
        session = make_runtime(nb.ScriptedModel(_echo)).session("target")
        report = session.import_baseline({"messages": OPENAI_CHAT})
        assert [d.path for d in report.dropped] == [
            "messages[0]",
            "messages[5].content[1]",
            "messages[5].name",
        ]
        assert "instructions" in report.dropped[0].reason
        (event,) = events_of(session, "migration/baseline")
        assert event.payload["dropped"][1].startswith("messages[5].content[1]: image_url")

    @pytest.mark.parametrize(
        ("change", "field"),
        [
            ({3: {"role": "tool", "tool_call_id": "call_9", "content": "$10"}}, "tool_call_id"),
            ({3: {"role": "tool", "content": "$10"}}, "messages[3].tool_call_id"),
            ({1: {"role": "customer", "content": "hi"}}, "messages[1].role"),
            ({1: {"role": "user", "content": 42}}, "messages[1].content"),
            ({1: {"role": "user", "content": [{"text": "hi"}]}}, "messages[1].content[0]"),
            (
                {2: {"role": "assistant", "tool_calls": [{"id": "call_1", "function": {}}]}},
                "messages[2].tool_calls[0].function.name",
            ),
            (
                {
                    2: {
                        "role": "assistant",
                        "tool_calls": [
                            {"id": "call_1", "function": {"name": "f", "arguments": "{nope"}}
                        ],
                    }
                },
                "messages[2].tool_calls[0].function.arguments",
            ),
            ({3: {"role": "user", "content": "skipped the result"}}, "call_1"),
        ],
    )
    def test_a_near_miss_is_invalid_input_naming_the_field(
        self, make_runtime: MakeRuntime, change: dict[int, dict[str, Any]], field: str
    ) -> None:
        """A message that is almost OpenAI's raises ``InvalidInput`` naming where, and nothing
        is written."""
        chat = [change.get(i, m) for i, m in enumerate(OPENAI_CHAT)]
        session = make_runtime(nb.ScriptedModel(_echo)).session("target")
        with pytest.raises(nb.InvalidInput, match=field.replace("[", r"\[").replace("]", r"\]")):
            session.import_baseline(chat, source="openai")
        assert session.log.head() == 0


AGENTSCOPE_STATE: dict[str, Any] = {
    "name": "Friday",
    "sys_prompt": "You are a helpful assistant.",
    "memory": {
        "content": [
            [{"id": "u1", "role": "user", "name": "user", "content": "Compare plans A and B"}, []],
            {
                "id": "a1",
                "role": "ASSISTANT",
                "name": "Friday",
                "content": [
                    {"type": "thinking", "thinking": "I should look up plan A."},
                    {"type": "text", "text": "Looking it up."},
                    {
                        "type": "tool_use",
                        "id": "t1",
                        "name": "lookup_price",
                        "input": {"plan": "a"},
                    },
                ],
            },
            {
                "id": "r1",
                "role": "TOOL",
                "name": "system",
                "content": [
                    {
                        "type": "tool_result",
                        "id": "t1",
                        "name": "lookup_price",
                        "output": [
                            {"type": "text", "text": "$10"},
                            {"type": "image", "source": {"type": "url", "url": "x"}},
                        ],
                    }
                ],
            },
            {"id": "a2", "role": "ASSISTANT", "content": [{"type": "text", "text": "A is $10."}]},
        ]
    },
}


class TestAgentScopeState:
    def test_content_blocks_become_messages_calls_results_and_reasoning(
        self, make_runtime: MakeRuntime
    ) -> None:
        """Text, thinking, tool_use and tool_result blocks convert, roles in any case."""
        session = make_runtime(nb.ScriptedModel(_echo)).session("target")
        report = session.import_baseline(AGENTSCOPE_STATE)
        assert (report.format, report.messages) == ("agentscope", 4)
        context = session.inspect().next_context
        assert [(m.role, m.text) for m in context[-4:]] == [
            ("user", "Compare plans A and B"),
            ("assistant", "Looking it up."),
            ("tool", "$10"),
            ("assistant", "A is $10."),
        ]
        assistant, tool = context[-3], context[-2]
        assert [r.text for r in assistant.reasoning] == ["I should look up plan A."]
        assert [(c.call_id, c.name, c.arguments) for c in assistant.tool_calls] == [
            ("t1", "lookup_price", {"plan": "a"})
        ]
        assert (tool.call_id, tool.name) == ("t1", "lookup_price")
        assert assistant.id == "a1"

    def test_the_report_lists_the_prompt_names_and_media(self, make_runtime: MakeRuntime) -> None:
        """The system prompt, the agent's name, speaker names and the image block are reported."""
        session = make_runtime(nb.ScriptedModel(_echo)).session("target")
        report = session.import_baseline(AGENTSCOPE_STATE, source="agentscope:friday")
        paths = [d.path for d in report.dropped]
        assert paths == [
            "name",
            "sys_prompt",
            "memory.content[0].name",
            "memory.content[1].name",
            "memory.content[2].content[0].output[1]",
            "memory.content[2].name",
        ]
        assert report.source == "agentscope:friday"

    @pytest.mark.parametrize(
        ("messages", "field"),
        [
            ([{"role": "user", "content": 7}], "messages[0].content"),
            ([{"role": "boss", "content": "hi"}], "messages[0].role"),
            (
                [{"role": "assistant", "content": [{"type": "tool_use", "name": "f"}]}],
                "messages[0].content[0].id",
            ),
            (
                [
                    {
                        "role": "tool",
                        "content": [
                            {"type": "tool_result", "id": "t9", "name": "f", "output": "x"}
                        ],
                    }
                ],
                "messages[0].content[0].id",
            ),
            ([{"role": "user", "content": [{"type": "text", "text": None}]}], "text"),
        ],
    )
    def test_a_near_miss_is_invalid_input_naming_the_field(
        self, make_runtime: MakeRuntime, messages: list[dict[str, Any]], field: str
    ) -> None:
        """A block or message that is almost AgentScope's raises ``InvalidInput`` naming it."""
        session = make_runtime(nb.ScriptedModel(_echo)).session("target")
        with pytest.raises(nb.InvalidInput, match=field.replace("[", r"\[").replace("]", r"\]")):
            session.import_baseline({"messages": messages}, source="agentscope")
        assert session.log.head() == 0
