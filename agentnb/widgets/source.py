"""What ``SessionView`` needs of a session: the reads and verbs it calls, as a protocol.

A local ``agentnb.Session`` satisfies it, and so does ``agentnb.client.RemoteSession`` (a
session of an agentnb service): the view imports neither, so a notebook on a laptop shows
the team's service's sessions with the same view.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any, Protocol, runtime_checkable

from agentnb.events import Event
from agentnb.ids import SessionKey
from agentnb.projections.chat import ChatState
from agentnb.projections.state import InboxState
from agentnb.records import Child, Interaction

__all__ = ["ViewedSession"]


class _Log(Protocol):
    def head(self) -> int: ...

    def read_after(self, seq: int, limit: int = ...) -> list[Event]: ...

    def follow(
        self,
        after: int = ...,
        *,
        idle_timeout: float | None = ...,
        stop: threading.Event | None = ...,
    ) -> Iterable[Event]: ...


class _Inbox(Protocol):
    def head(self) -> int: ...

    def read_after(self, seq: int, limit: int = ...) -> list[Event]: ...


class _Agent(Protocol):
    def tool_named(self, name: str) -> Any: ...


class _Runtime(Protocol):
    @property
    def agent(self) -> _Agent: ...

    def check_open(self) -> None: ...


@runtime_checkable
class ViewedSession(Protocol):
    """A session as ``SessionView`` reads and drives it.

    ``chat_copy()``: private copies of the chat fold and the inbox fold at their heads (the
    view folds on by itself); ``log`` / ``inbox``: reads after a seq and a follow of the
    committed events; ``executing()``: whether some runtime executes it now;
    ``runtime.agent.tool_named``: the agent's tools (whether Resume may re-run a call);
    ``runtime.check_open()``: raises once the runtime (or the connection) is closed;
    ``pending()`` with its sub-agents' requests (their ``path``), ``children(turn_id)`` and
    ``child(call_id)`` for the sub-agent cards (the nested view opens ``child`` the same
    way); and the verbs its buttons call (``reconcile`` and ``resume(uncertain=)`` for the
    recovery buttons after a process stopped under a tool call).
    """

    @property
    def key(self) -> SessionKey: ...

    @property
    def log(self) -> _Log: ...

    @property
    def inbox(self) -> _Inbox: ...

    @property
    def runtime(self) -> _Runtime: ...

    def chat_copy(self) -> tuple[ChatState, InboxState]: ...

    def executing(self) -> bool: ...

    def pending(self) -> dict[str, Interaction]: ...
    def block_bytes(self, sha256: str) -> tuple[bytes, Any]: ...

    def children(self, turn_id: str | None = ...) -> list[Child]: ...

    def child(self, call_id: str) -> ViewedSession: ...

    def submit(self, input: str, key: str | None = ...) -> Any: ...

    def steer(self, input: str, task: str | None = ...) -> Any: ...

    def inject(self, material: str) -> Any: ...

    def interrupt(self, run_id: str | None = ...) -> bool: ...

    def resume(self, turn_id: str, *, uncertain: str = ...) -> Any: ...

    def reconcile(self, outcomes: Mapping[str, Any], reason: str) -> None: ...

    def feedback(
        self,
        turn_id: str,
        *,
        score: float | None = ...,
        label: str | None = ...,
        comment: str | None = ...,
        by: str | None = ...,
    ) -> str: ...

    def respond(self, request_id: str | Mapping[str, object], answer: object = ...) -> Any: ...
