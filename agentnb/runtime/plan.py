"""The built-in ``todo`` tool, carried out by the runtime: the plan the model keeps.

A call is recorded like any tool call (dispatch, action, result) with, between them, the new
plan (``plan/changed``) and one ``task/changed`` per step that was added, changed status or
wording, or was dropped (``projections/plan.py`` decides which). Nothing leaves the process,
so nothing is committed before it: the events commit with the step.
"""

from __future__ import annotations

from typing import Any

from agentnb.events import ToolCallData
from agentnb.projections.plan import plan_summary, plan_update
from agentnb.runtime.recipes import Recipes
from agentnb.runtime.scope import RunHost
from agentnb.tools import Tool

__all__ = ["record_plan"]


def record_plan(
    host: RunHost, recipes: Recipes, turn_id: str, run_id: str, call: ToolCallData, tool: Tool
) -> None:
    """Record the plan a ``todo`` call hands over, and the call's result."""
    w = host.writer
    arguments = dict(call.arguments)
    action_id = recipes.add_dispatch(turn_id, run_id, call, tool.name, idempotent=True, attempt=1)
    parsed = tool.validate(arguments)  # checked when the call was decided: it fits
    steps: list[dict[str, Any]] = [s.model_dump() for s in parsed["steps"]]
    items, changes = plan_update(host.state.plan, steps)
    w.add("plan/changed", {"items": items, "call_id": call.call_id}, turn_id=turn_id, run_id=run_id)
    for change in changes:
        w.add("task/changed", dict(change, call_id=call.call_id), turn_id=turn_id, run_id=run_id)
    w.add(
        "action/end",
        {"call_id": call.call_id, "name": tool.name, "status": "returned", "action_id": action_id},
        turn_id=turn_id,
        run_id=run_id,
    )
    recipes.add_result(
        call.call_id, tool.name, "success", plan_summary(items), turn_id=turn_id, run_id=run_id
    )
