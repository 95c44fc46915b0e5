"""What the operations tests share: an agent whose turns take a while (a tool call and
streamed text), and comparisons of two stores' logs row by row."""

from __future__ import annotations

import time

import agentnb as nb
from agentnb.ops._format import inbox_events, log_digests, raw_events
from agentnb.stores.base import RawEvent

WAIT = 60.0


@nb.tool(idempotent=True)
def pause(seconds: float) -> str:
    """Sleep a little, then say so."""
    time.sleep(seconds)
    return f"paused {seconds}"


def _reply(messages: list[nb.Message]) -> str | nb.ToolCall:
    last = messages[-1]
    if last.role == "user":
        return nb.ToolCall("pause", {"seconds": 0.05})
    return f"done after {last.text}: " + "words " * 20


AGENT = nb.Agent(
    name="Ops test",
    agent_id="ops-agent",
    model=nb.ScriptedModel(_reply, chunk_size=8, chunk_delay=0.002),
    tools=[pause],
)


def rows(store: nb.SessionStore, key: nb.SessionKey, head: int) -> list[RawEvent]:
    return list(raw_events(store, key, head))


def inbox_rows(store: nb.SessionStore, key: nb.SessionKey, head: int) -> list[RawEvent]:
    return [RawEvent.of(e) for e in inbox_events(store, key, head)]


def same_logs(a: nb.SessionStore, b: nb.SessionStore, key: nb.SessionKey) -> None:
    """The two stores hold the same rows of ``key``'s logs: seqs, ids, payloads, digests."""
    da, db = log_digests(a, key), log_digests(b, key)
    assert da == db, f"{key}: {da} != {db}"
