"""The agents the service tests serve, importable as ``tests.service._agent:agent`` (and
``:slow``, which streams its replies a piece every 30 ms for the browser to watch).

A task's first word says what it does:

- ``order <item> <qty>``: calls ``create_order`` (a person approves it first);
- ``hostile``: calls ``hostile``, whose result is HTML that must never run in a page;
- ``ask <question>``: asks the person (``ask_user``);
- ``progress <n>``: calls ``report``, which reports ``n`` progress steps;
- ``sleep <s>``: calls ``pause`` (``s`` seconds, not idempotent: a crash leaves it uncertain);
- ``nap <s>``: calls ``nap`` (``s`` seconds, idempotent);
- ``snooze <s>``: calls ``snooze`` (``s`` seconds, async: an interrupt cancels it);
- ``long <n>``: answers with ``n`` numbered lines of Markdown;
- ``delegate <task>``: hands ``<task>`` to the sub-agent ``service-helper`` (a child session whose
  agent follows these same rules, so ``delegate order pen 2`` needs a person's approval in
  the child);
- ``plan <a> <b> ...``: writes a plan of those steps with ``nb.todo``;
- ``fail``: the model fails;
- anything else: ``You said: <task>``.

After a tool result the final answer is ``done: <result>``; steering messages the turn got
are added as `` + <steer>``.
"""

from __future__ import annotations

import asyncio
import time

import agentnb as nb

HOSTILE = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'


@nb.tool(confirm=True)
def create_order(item: str, qty: int) -> str:
    """Order ``qty`` of ``item`` (a person approves first)."""
    return f"ordered {qty} {item}"


@nb.tool
def hostile() -> str:
    """Return markup that must stay text."""
    return HOSTILE


@nb.tool
def report(steps: int, ctx: nb.ToolContext) -> str:
    """Report progress ``steps`` times."""
    for i in range(steps):
        ctx.progress({"step": i + 1, "of": steps})
        time.sleep(0.02)
    return f"reported {steps} steps"


@nb.tool
def pause(seconds: float) -> str:
    """Sleep (not safe to run twice)."""
    time.sleep(seconds)
    return f"paused {seconds}"


@nb.tool(idempotent=True)
def nap(seconds: float) -> str:
    """Sleep (safe to run again)."""
    time.sleep(seconds)
    return f"napped {seconds}"


@nb.tool
async def snooze(seconds: float) -> str:
    """Sleep without blocking (an interrupt cancels it at once)."""
    await asyncio.sleep(seconds)
    return f"snoozed {seconds}"


def _reply(messages: list[nb.Message]) -> str | nb.ToolCall | nb.Reply:
    users = [m for m in messages if m.role == "user"]
    turn = users[-1].turn_id
    mine = [m for m in users if m.turn_id == turn]
    task, steers = mine[0], [m.text for m in mine[1:]]
    words = task.text.split()
    verb = words[0] if words else ""
    last = messages[-1]
    if last.role == "tool":
        return " + ".join([f"done: {last.text}", *steers])
    if verb == "order" and len(words) >= 3:
        return nb.ToolCall("create_order", {"item": words[1], "qty": int(words[2])})
    if verb == "hostile":
        return nb.ToolCall("hostile", {})
    if verb == "ask":
        return nb.ToolCall("ask_user", {"question": " ".join(words[1:]) or "Which one?"})
    if verb == "progress":
        return nb.ToolCall("report", {"steps": int(words[1]) if len(words) > 1 else 3})
    if verb == "sleep":
        return nb.ToolCall("pause", {"seconds": float(words[1])})
    if verb == "snooze":
        return nb.ToolCall("snooze", {"seconds": float(words[1])})
    if verb == "nap":
        return nb.ToolCall("nap", {"seconds": float(words[1])})
    if verb == "long":
        n = int(words[1]) if len(words) > 1 else 20
        return "\n".join(f"{i}. line **{i}** of the answer" for i in range(1, n + 1))
    if verb == "delegate":
        return nb.ToolCall("service-helper", {"task": " ".join(words[1:]) or "help"})
    if verb == "plan":
        return nb.ToolCall("todo", {"steps": [{"content": w} for w in words[1:] or ["think"]]})
    if verb == "fail":
        raise nb.ModelError("the scripted model was told to fail")
    if verb == "think":
        return nb.Reply(text="Thought it **through**.", reasoning="Weigh <b>both</b> first.")
    return " + ".join([f"You said: {task.text}", *steers])


CHILD_TOOLS = [create_order, hostile, report, pause, nap, snooze, nb.ask_user]

helper = nb.Agent(
    name="Helper",
    agent_id="service-helper",
    model=nb.ScriptedModel(_reply),
    tools=CHILD_TOOLS,
    instructions="You help the service test agent.",
)

TOOLS = [*CHILD_TOOLS, helper.as_tool(), nb.todo]

agent = nb.Agent(
    name="Service test",
    agent_id="service-agent",
    model=nb.ScriptedModel(_reply),
    tools=TOOLS,
)

slow = nb.Agent(
    name="Service test (slow)",
    agent_id="service-agent",
    model=nb.ScriptedModel(_reply, chunk_size=6, chunk_delay=0.03),
    tools=TOOLS,
)
