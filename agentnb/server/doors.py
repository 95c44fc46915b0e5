"""What the doors of standard protocols share: one narrow reading of a session's log.

The doors (``agui``, ``aisdk``, ``openai_api``) translate; they decide nothing and keep no
copy of a conversation. Each reads a session through ``committed(request, session,
after)``: the session's committed events after a seq, in order, each once, then the new
ones as they commit, from the same feed the chat page and ``/v1/.../stream`` read
(``agentnb.server.stream.Feeds``: one reader of the store per followed session in this
process, its ring of recent events, the store read by cursor for older ones). It yields
``None`` every ``TICK`` seconds while nothing commits, so a door can send its keepalive and
see that its client left. This function is the only place a door touches the feed.

A stream lives only as long as its token works: ``committed`` holds the principal on the
app's ``TokenWatch`` (``agentnb.server.revocations``), as ``/v1/.../stream`` does, and
when the token is revoked, expires, or its sign-in ends it yields ``Ended`` (with the
reason) and stops: within a second, however busy or quiet the session is. Each door then
says so in its protocol's words (AG-UI ``RUN_ERROR``, an AI SDK ``error`` part, a
Responses ``error`` event) and closes the stream.

The doors translate committed events only, never the live chunks of ``session.events()``:
what a client is sent is then a pure function of the log, so a stream resumed from any
point, by any door, after any restart, gives the same events with the same numbers. Text
arrives as the writer commits it (in groups, a few per 100 ms).

Reasoning is its own kind of piece in the log (``model/chunk.reasoning_fragments``, then
``Message.reasoning`` on the reply), never text: ``reasoning_of_chunk`` and
``reasoning_of_message`` read it for every door, which send it as their protocol's
reasoning (before the reply's text, as the model streamed it).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import anyio.to_thread
from fastapi import Request

from agentnb.events import Event
from agentnb.server.auth import Principal
from agentnb.server.revocations import TokenWatch
from agentnb.server.stream import READ, Feeds
from agentnb.session import Session

__all__ = ["TICK", "Ended", "committed", "reasoning_of_chunk", "reasoning_of_message"]

TICK = 15.0
"""Seconds of silence after which ``committed`` yields ``None`` (a door's keepalive)."""


@dataclass(frozen=True)
class Ended:
    """The last thing ``committed`` yields when the stream's token stopped working."""

    reason: str
    """Why, in words a person reads (``agentnb.server.revocations.REVOKED``)."""


async def committed(
    request: Request,
    session: Session,
    after: int,
    principal: Principal,
    *,
    tick: float = TICK,
) -> AsyncIterator[Event | Ended | None]:
    """The committed events of ``session`` after seq ``after``, then each new one as it
    commits, until the caller stops iterating or the feed ends (the session was deleted,
    the server shuts down); ``None`` after ``tick`` quiet seconds; ``Ended`` last when
    ``principal``'s token stops working."""
    feeds: Feeds = request.app.state.feeds
    watch: TokenWatch = request.app.state.token_watch
    feed = await feeds.get(session)
    sub = feed.subscribe("frames")
    revoked: list[str] = []

    def end(reason: str) -> None:  # the watch, on the loop
        revoked.append(reason)
        sub.wake.set()

    release = watch.hold(principal, end)
    pos = after
    try:
        while True:
            if revoked:
                yield Ended(revoked[0])
                return
            if pos < feed.head:
                ring = feed.ring
                if ring and ring[0].seq <= pos + 1:
                    events = [
                        frame.event for frame in itertools.islice(ring, pos + 1 - ring[0].seq, None)
                    ]
                else:
                    target = ring[0].seq - 1 if ring else feed.head
                    events = await anyio.to_thread.run_sync(
                        session.log.read_after, pos, min(READ, target - pos)
                    )
                    if not events:
                        return  # the log is shorter than the feed says: the session went away
                for event in events:
                    if revoked:
                        break
                    yield event
                    pos = event.seq
                continue
            if feed.ended is not None:
                return
            sub.wake.clear()
            sub.live.clear()  # the feed's live pieces: the doors translate commits only
            if pos < feed.head or feed.ended is not None or revoked:
                continue
            try:
                await asyncio.wait_for(sub.wake.wait(), tick)
            except TimeoutError:
                yield None
    finally:
        release()
        feed.unsubscribe(sub)


def reasoning_of_chunk(payload: Mapping[str, Any]) -> list[tuple[int, str]]:
    """The reasoning text a ``model/chunk`` payload carries, as ``(part index, text)`` in
    stream order, the pieces of one part run together (a part with no text to show, such
    as redacted thinking, gives nothing)."""
    out: list[tuple[int, str]] = []
    for fragment in payload.get("reasoning_fragments") or ():
        text = str(fragment.get("text") or "")
        if not text:
            continue
        index = int(fragment.get("index") or 0)
        if out and out[-1][0] == index:
            out[-1] = (index, out[-1][1] + text)
        else:
            out.append((index, text))
    return out


def reasoning_of_message(payload: Mapping[str, Any]) -> list[tuple[int, str]]:
    """The reasoning parts of a ``message/assistant`` payload's reply, as ``(part index,
    text)`` (the whole text of each part that has some)."""
    message = payload.get("message") or {}
    parts = message.get("reasoning") or ()
    return [(i, str(part.get("text"))) for i, part in enumerate(parts) if part.get("text")]
