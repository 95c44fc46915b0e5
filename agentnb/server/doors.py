"""What the doors of standard protocols share: one narrow reading of a session's log.

The doors (``agui``, ``aisdk``, ``openai_api``) translate; they decide nothing and keep no
copy of a conversation. Each reads a session through ``committed(request, session,
after)``: the session's committed events after a seq, in order, each once, then the new
ones as they commit, from the same feed the chat page and ``/v1/.../stream`` read
(``agentnb.server.stream.Feeds``: one reader of the store per followed session in this
process, its ring of recent events, the store read by cursor for older ones). It yields
``None`` every ``TICK`` seconds while nothing commits, so a door can send its keepalive and
see that its client left. This function is the only place a door touches the feed.

The doors translate committed events only, never the live chunks of ``session.events()``:
what a client is sent is then a pure function of the log, so a stream resumed from any
point, by any door, after any restart, gives the same events with the same numbers. Text
arrives as the writer commits it (in groups, a few per 100 ms).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator

import anyio.to_thread
from fastapi import Request

from agentnb.events import Event
from agentnb.server.stream import READ, Feeds
from agentnb.session import Session

__all__ = ["TICK", "committed"]

TICK = 15.0
"""Seconds of silence after which ``committed`` yields ``None`` (a door's keepalive)."""


async def committed(
    request: Request, session: Session, after: int, *, tick: float = TICK
) -> AsyncIterator[Event | None]:
    """The committed events of ``session`` after seq ``after``, then each new one as it
    commits, until the caller stops iterating or the feed ends (the session was deleted,
    the server shuts down); ``None`` after ``tick`` quiet seconds."""
    feeds: Feeds = request.app.state.feeds
    feed = await feeds.get(session)
    sub = feed.subscribe("frames")
    pos = after
    try:
        while True:
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
                    yield event
                pos = events[-1].seq
                continue
            if feed.ended is not None:
                return
            sub.wake.clear()
            sub.live.clear()  # the feed's live pieces: the doors translate commits only
            if pos < feed.head or feed.ended is not None:
                continue
            try:
                await asyncio.wait_for(sub.wake.wait(), tick)
            except TimeoutError:
                yield None
    finally:
        feed.unsubscribe(sub)
