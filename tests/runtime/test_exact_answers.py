"""Answers that are exactly true: receipts, steering, inspection and the log say what happened.

Each class covers one misreport of issue 25 (or 28) and runs on every store backend where the
store takes part.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

import agentnb as nb
from tests.runtime.helpers import WAIT, Gate, events_of

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
