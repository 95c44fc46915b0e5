"""The plan a model keeps with the built-in ``todo`` tool, as a pure decision.

The model hands over the whole plan each time (``steps``); ``plan_update`` gives each step
a stable id (the one it named, else the step of the old plan with the same text, else a new
``step-N``) and says which steps changed (``task/changed`` payloads: added, moved to another
status, reworded, removed). The runtime records the new plan as ``plan/changed`` and the
changes beside it; ``SessionState.plan`` folds the newest plan.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["plan_summary", "plan_update"]

_STEP_ID = re.compile(r"^step-(\d+)$")


def plan_update(
    old: Sequence[Mapping[str, Any]], steps: Sequence[Mapping[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the new plan's items, the ``task/changed`` payloads of the steps that changed)."""
    by_id: dict[str, Mapping[str, Any]] = {item["id"]: item for item in old}
    free = list(old)  # old steps not matched yet
    numbers = [int(m.group(1)) for item in old if (m := _STEP_ID.match(item["id"]))]
    next_number = max(numbers, default=0) + 1
    items: list[dict[str, Any]] = []
    used: set[str] = set()
    for step in steps:
        content = str(step["content"])
        status = str(step.get("status") or "pending")
        wanted = step.get("id")
        match: Mapping[str, Any] | None = (
            by_id.get(wanted) if isinstance(wanted, str) and wanted not in used else None
        )
        if match is None:
            match = next((o for o in free if o["content"] == content and o["id"] not in used), None)
        if match is not None:
            step_id = match["id"]
        elif isinstance(wanted, str) and wanted and wanted not in used and wanted not in by_id:
            step_id = wanted
        else:
            while f"step-{next_number}" in used or f"step-{next_number}" in by_id:
                next_number += 1
            step_id = f"step-{next_number}"
            next_number += 1
        used.add(step_id)
        free = [o for o in free if o["id"] != step_id]
        items.append({"id": step_id, "content": content, "status": status})
    changes: list[dict[str, Any]] = []
    for item in items:
        before = by_id.get(item["id"])
        if before is None:
            changes.append(dict(item, previous=None))
        elif before["status"] != item["status"] or before["content"] != item["content"]:
            changes.append(dict(item, previous=before["status"]))
    for gone in old:
        if gone["id"] not in used:
            changes.append(
                {
                    "id": gone["id"],
                    "content": gone["content"],
                    "status": "removed",
                    "previous": gone["status"],
                }
            )
    return items, changes


def plan_summary(items: Sequence[Mapping[str, Any]]) -> str:
    """The tool result the model sees after it wrote the plan: where it stands."""
    if not items:
        return "The plan is empty."
    done = sum(1 for i in items if i["status"] == "completed")
    current = next((i["content"] for i in items if i["status"] == "in_progress"), None)
    text = f"Plan recorded: {done} of {len(items)} steps completed."
    if current is not None:
        text += f" In progress: {current}."
    return text
