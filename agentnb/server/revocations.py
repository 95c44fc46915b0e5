"""``TokenWatch``: the open streams of each token, ended as soon as the token stops working.

A stream is one long request: the token it was opened with was checked once. The watch
checks every token with an open stream again every ``CHECK`` seconds (one store read per
token, however many streams it has, on a worker thread), and at once when this app
revokes one (``DELETE /v1/tokens/{id}``, sign-out: ``check_now``). A token revoked,
expired, or whose parent token was revoked (a sign-in's) ends each of its streams with
the ``end`` event's reason; a token revoked by another process (``agentnb token revoke``)
is seen within ``CHECK`` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import anyio.to_thread

from agentnb.errors import StorageError
from agentnb.server.auth import Auth, Principal

__all__ = ["CHECK", "REVOKED", "TokenWatch"]

log = logging.getLogger("agentnb.server")

CHECK = 0.5
"""Seconds between the checks of the tokens with open streams."""
REVOKED = "the token was revoked or the sign-in ended"
"""The ``end`` event's reason for a stream whose token stopped working."""

End = Callable[[str], None]


class TokenWatch:
    """The streams open per token, and the one task that checks those tokens (loop side)."""

    def __init__(self, auth: Auth) -> None:
        self.auth = auth
        self._held: dict[str, tuple[Principal, set[End]]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._poke: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    def hold(self, principal: Principal, end: End) -> Callable[[], None]:
        """Call ``end(reason)`` once ``principal``'s token stops working (on the loop);
        returns what forgets it (the stream ended). A principal without a token (a
        service without auth) is never ended."""
        token_id = principal.token_id
        if token_id is None:
            return lambda: None
        _, ends = self._held.setdefault(token_id, (principal, set()))
        ends.add(end)
        self._start()

        def release() -> None:
            held = self._held.get(token_id)
            if held is not None:
                held[1].discard(end)
                if not held[1]:
                    del self._held[token_id]

        return release

    def check_now(self) -> None:
        """Check the tokens at once (a token was revoked here); callable from any thread."""
        loop, poke = self._loop, self._poke
        if loop is not None and poke is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed: nothing streams
                loop.call_soon_threadsafe(poke.set)

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    def _start(self) -> None:
        if self._task is None or self._task.done():
            self._loop = asyncio.get_running_loop()
            self._poke = asyncio.Event()
            self._task = self._loop.create_task(self._run(self._poke))

    async def _run(self, poke: asyncio.Event) -> None:
        while self._held:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(poke.wait(), CHECK)
            poke.clear()
            principals = [principal for principal, _ in self._held.values()]
            try:
                gone = await anyio.to_thread.run_sync(self._gone, principals)
            except StorageError as exc:  # the store is away: streams go on, checked later
                log.warning("could not check the tokens of open streams: %s", exc)
                continue
            for token_id in gone:
                held = self._held.pop(token_id, None)
                for end in () if held is None else held[1]:
                    end(REVOKED)

    def _gone(self, principals: list[Principal]) -> list[str]:
        return [p.token_id for p in principals if p.token_id and not self.auth.still_valid(p)]
