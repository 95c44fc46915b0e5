"""Agents for the evaluation tests: a price lookup with a side-effect counter, a confirmed
order, and scripted models whose replies are functions of the messages (deterministic at any
concurrency)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import agentnb as nb


class Counter:
    """How many times the real tools ran (the side effects a replay must not repeat)."""

    def __init__(self) -> None:
        self.n = 0
        self._lock = threading.Lock()

    def bump(self) -> None:
        with self._lock:
            self.n += 1


def tools(counter: Counter, *, renamed: bool = False) -> list[nb.Tool]:
    def lookup(plan: str) -> str:
        counter.bump()
        return f"{plan} costs {10 * len(plan)} EUR"

    lookup.__doc__ = "Price of a plan."

    @nb.tool(confirm=True)
    def place_order(plan: str) -> str:
        """Order a plan (a person approves it first)."""
        counter.bump()
        return f"ordered {plan}"

    return [nb.tool(lookup, name="find_price" if renamed else "lookup_price"), place_order]


TASKS = ("price", "order")
"""How the tasks start (material and steering given beside them do not)."""


def last_word(text: str) -> str:
    return text.rsplit(maxsplit=1)[-1].strip("?.")


def script(
    *, tool: str = "lookup_price", upper: bool = False, prefix: str = "Answer"
) -> Callable[[list[nb.Message]], object]:
    """v1 with the defaults; ``upper``: new arguments; ``tool``: a renamed tool."""

    def reply(messages: list[nb.Message]) -> object:
        last = messages[-1]
        if last.role != "user":
            return f"{prefix}: {last.text}"
        asks = [m.text for m in messages if m.role == "user" and m.text.startswith(TASKS)]
        task = asks[-1]
        if task.startswith("order"):
            return nb.ToolCall("place_order", {"plan": last_word(task)})
        plan = last_word(task)
        return nb.ToolCall(tool, {"plan": plan.upper() if upper else plan})

    return reply


def agent(
    counter: Counter, *, name: str = "v1", renamed: bool = False, **kwargs: object
) -> nb.Agent:
    return nb.Agent(
        name=name,
        agent_id="pricing",
        model=nb.ScriptedModel(script(**kwargs)),  # type: ignore[arg-type]
        tools=tools(counter, renamed=renamed),
        instructions=f"You are {name}.",
    )


def record(runtime: nb.Runtime, sessions: int) -> list[str]:
    """``sessions`` sessions of one price question each; returns their turn ids."""
    turns = []
    for i in range(sessions):
        outcome = runtime.session(f"s{i:02d}").run(f"price of plan{'x' * (i % 4)}{i}?")
        assert outcome.status == "completed", outcome
        turns.append(outcome.turn_id)
    return turns
