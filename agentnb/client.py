"""The remote client: ``nb.connect(url, token)`` drives the sessions of an agentnb service.

``RemoteRuntime`` and ``RemoteSession`` offer the ``Runtime`` / ``Session`` verbs and reads
over HTTP (``agentnb serve``), with the same records (rebuilt by ``agentnb.wire`` from the
answers) and the same typed errors (rebuilt from the RFC 9457 problems: a ``QueueFull`` from
the server is a ``QueueFull`` here, with its ``queue`` and ``limit``). ``receipt.wait()``
(and ``await receipt``) asks the service to wait, 30 s at a time. ``session.log.follow()``
reads the stream of committed events, reconnecting with ``Last-Event-ID`` after a dropped
connection or a server restart, so it yields every event once, in order. A ``SessionView``
works on a ``RemoteSession`` as on a local one. Sub-agents too: ``children()``, ``child(call_id)``
(a ``RemoteSession`` of the child), ``plan()``; ``pending()`` holds the children's requests
with their ``path`` and ``session``, and ``respond`` through the parent routes them as the
local ``Session`` does (the service calls the same verbs). Schedules too: ``schedule(...)``,
``schedules()``, ``unschedule(id)``, fired by the service's runtime. A service that cannot
be reached raises ``StorageError`` saying so; a refused token ``Unauthorized``.

Needs httpx (the ``openai`` or ``server`` extra): ``pip install -e ".[server]"``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote, urlsplit

from agentnb.errors import install_hint

try:
    import httpx
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("the remote client needs httpx: " + install_hint("server")) from exc

from agentnb import errors, wire
from agentnb.answers import Answer, ToolOutcome
from agentnb.blocks import FilePart, ImagePart
from agentnb.errors import AgentnbError, InvalidInput, StorageError
from agentnb.events import Event, PlanItem, decode_json, decode_payload
from agentnb.history import HistoryPage
from agentnb.ids import SessionKey, check_id
from agentnb.live import LiveEvent, LiveHub, Subscription
from agentnb.ops.schedules import Schedule
from agentnb.projections.chat import ChatSnapshot, ChatState
from agentnb.projections.state import InboxState
from agentnb.records import (
    Child,
    Children,
    InputReceipt,
    Inspection,
    Interaction,
    Outcome,
    PermissionRule,
    PermissionRules,
    Receipt,
    Requests,
    SessionInfo,
    SessionInfos,
    Task,
    Tasks,
    ToolCallRef,
    Transcript,
)
from agentnb.stores.base import UNSET, Tombstone, Unset

__all__ = ["RemoteRuntime", "RemoteSession", "connect", "error_of"]

WAIT_SLICE = 30.0
"""Seconds one ``/wait`` request may hold (the service's limit)."""
RECONNECT = (0.2, 0.5, 1.0, 2.0, 5.0)
"""Pauses before the reconnections of a follow (the last one repeats)."""
_PAGE = 256
_STOP_CHECK = 0.25
"""Seconds between a follow's looks at its ``stop`` event while it waits on the stream."""


def error_of(problem: Mapping[str, Any], status: int) -> Exception:
    """The exception a problem body stands for: the same class the service raised, with
    the data it carries (the one mapping of this door, problem type -> class)."""
    name = str(problem.get("type") or "")
    detail = str(problem.get("detail") or problem.get("title") or f"HTTP {status}")
    if name == "Parked":
        return errors.Parked(
            detail,
            turn_id=str(problem.get("turn_id", "")),
            blocking_turn=str(problem.get("blocking_turn", "")),
            blocking_status=str(problem.get("blocking_status", "")),
        )
    if name == "QueueFull":
        return errors.QueueFull(
            detail, queue=str(problem.get("queue", "")), limit=int(problem.get("limit") or 0)
        )
    if name == "UncertainToolCalls":
        calls = [wire.load(ToolCallRef, c) for c in problem.get("calls") or ()]
        return errors.UncertainToolCalls(detail, calls)
    if name == "AgentChanged":
        return errors.AgentChanged(detail, changes=problem.get("changes") or ())
    if name == "SubagentLimitExceeded":
        return errors.SubagentLimitExceeded(
            detail, limit=str(problem.get("limit", "")), value=int(problem.get("value") or 0)
        )
    if name == "ToolsetUnavailable":
        return errors.ToolsetUnavailable(detail, toolset=str(problem.get("toolset", "")))
    if name == "WorkspaceChanged":
        return errors.WorkspaceChanged(
            detail, bound=problem.get("bound"), current=problem.get("current")
        )
    if name == "SessionBusy":
        turn = problem.get("turn_id")
        return errors.SessionBusy(
            detail,
            turn_id=None if turn is None else str(turn),
            status=str(problem.get("busy_status") or ""),
        )
    if name == "Timeout":
        return TimeoutError(detail)
    klass = _HTTP_TYPES.get(name) or getattr(errors, name, None)
    if isinstance(klass, type) and issubclass(klass, AgentnbError):
        return klass(detail)
    return StorageError(detail) if status >= 500 else AgentnbError(detail)


_HTTP_TYPES: dict[str, type[AgentnbError]] = {
    "Forbidden": errors.Unauthorized,
    "PayloadTooLarge": errors.InvalidInput,
    "UnsupportedMediaType": errors.InvalidInput,
    "NotFound": errors.InvalidInput,
    "MethodNotAllowed": errors.InvalidInput,
    "InternalError": errors.AgentnbError,
}
"""Problems of the HTTP layer (no agentnb error behind them) -> the class raised here."""


class _Http:
    """One httpx client, the token, and the mapping of answers to records or errors."""

    def __init__(self, url: str, token: str | None, timeout: float) -> None:
        headers = {"Accept": "application/json"}
        self.token = token
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        self.url = url.rstrip("/")
        self.timeout = timeout
        # Nagle's algorithm off: a POST's body would wait ~40 ms for the server's delayed ACK.
        transport = httpx.HTTPTransport(
            socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
        )
        self.client = httpx.Client(
            base_url=self.url, headers=headers, timeout=timeout, transport=transport
        )

    def call(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
        raw: bool = False,
    ) -> Any:
        """The JSON answer of one request (``raw``: its bytes), or the error it maps to."""
        try:
            response = self.client.request(
                method,
                path,
                json=json_body,
                params={k: v for k, v in (params or {}).items() if v is not None},
                headers=headers,
                timeout=self.timeout if timeout is None else timeout,
            )
        except httpx.TimeoutException as exc:
            raise TimeoutError(
                f"the agentnb service at {self.url} did not answer {method} {path} in time "
                f"({exc.__class__.__name__}); the command may or may not have been accepted"
            ) from None
        except httpx.TransportError as exc:
            raise StorageError(
                f"cannot reach the agentnb service at {self.url} ({exc}); is it running? "
                "(agentnb serve)"
            ) from None
        if raw and response.is_success:
            return response.content
        try:
            return self.answer(response)
        except errors.Unauthorized as exc:
            if self.token is not None or response.status_code != 401:
                raise
            # The service's words are for any HTTP client; this one takes the token itself.
            raise errors.Unauthorized(
                f"the agentnb service at {self.url} needs a token: nb.connect({self.url!r}, "
                "token='tok_...'), with a token from agentnb token add USER"
            ) from exc

    @staticmethod
    def answer(response: httpx.Response) -> Any:
        if response.status_code == 204:
            return None
        try:
            data = response.json()
        except ValueError:
            data = None
        if response.status_code >= 400:
            if not isinstance(data, Mapping):
                data = {"detail": f"HTTP {response.status_code}: {response.text[:200]}"}
            raise error_of(data, response.status_code)
        return data

    def close(self) -> None:
        self.client.close()


@dataclass(frozen=True, slots=True)
class RemoteTool:
    """A tool of the service's agent, as ``GET /v1/agent`` describes it."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    idempotent: bool
    confirm: bool
    external: bool


@dataclass(frozen=True, slots=True)
class RemoteAgent:
    """The agent the service runs (its id, name, model and tools)."""

    agent_id: str
    name: str
    model: str
    tools: tuple[RemoteTool, ...]
    compaction: bool

    def tool_named(self, name: str) -> RemoteTool | None:
        return next((t for t in self.tools if t.name == name), None)


class RemoteRuntime:
    """An agentnb service, seen as a runtime (``nb.connect(url, token)``)."""

    def __init__(self, url: str, token: str | None = None, *, timeout: float = 30.0) -> None:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise InvalidInput(f"url must be an http(s) URL of an agentnb service, got {url!r}")
        if token is not None and not isinstance(token, str):
            raise InvalidInput("token must be a string (from agentnb token add USER)")
        if not isinstance(timeout, int | float) or isinstance(timeout, bool) or timeout <= 0:
            raise InvalidInput(f"timeout must be positive seconds, got {timeout!r}")
        if urlsplit(url).path.rstrip("/").endswith("/v1"):
            root = url.rstrip("/")[: -len("/v1")]
            raise InvalidInput(
                f"pass the service's root URL, without /v1: nb.connect({root!r}, token=...); "
                "the client adds /v1 to each route itself"
            )
        self.url = url.rstrip("/")
        self.http = _Http(self.url, token, float(timeout))
        self._token = token
        self._agent: RemoteAgent | None = None
        self._user: str | None = None
        self._sessions: dict[str, RemoteSession] = {}
        self._closed = False

    # -- who and what ------------------------------------------------------------------------

    @property
    def user_id(self) -> str:
        """The user the token acts for."""
        if self._user is None:
            self._user = str(self.http.call("GET", "/v1/auth/me")["user_id"])
        return self._user

    @property
    def agent(self) -> RemoteAgent:
        """The agent the service runs."""
        if self._agent is None:
            data = self.http.call("GET", "/v1/agent")
            tools = tuple(
                RemoteTool(
                    t["name"],
                    t["description"],
                    t["parameters"],
                    t["idempotent"],
                    t["confirm"],
                    t["external"],
                )
                for t in data["tools"]
            )
            self._agent = RemoteAgent(
                data["agent_id"], data["name"], data["model"], tools, data["compaction"]
            )
        return self._agent

    def _check_user(self, user_id: str | None) -> None:
        if user_id is not None and user_id != self.user_id:
            raise InvalidInput(
                f"this token acts for user {self.user_id!r}, not {user_id!r}: every session "
                "of the service is its token's user's (use that user's token)"
            )

    # -- sessions ----------------------------------------------------------------------------

    def session(self, session_id: str, user_id: str | None = None) -> RemoteSession:
        """Get or create a session of the token's user."""
        self._check_user(user_id)
        data = self.http.call("POST", "/v1/sessions", json_body={"session_id": session_id})
        return self._handle(wire.load(SessionInfo, data).key)

    def create(
        self,
        *,
        user_id: str | None = None,
        title: str | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> RemoteSession:
        """A new session of the token's user with an id the service makes (``Runtime.create``:
        opaque and sortable by creation time), with its title and labels set."""
        self._check_user(user_id)
        body: dict[str, Any] = {}
        if title is not None:
            body["title"] = title
        if labels is not None:
            body["labels"] = dict(labels)
        data = self.http.call("POST", "/v1/sessions", json_body=body)
        return self._handle(wire.load(SessionInfo, data).key)

    def open(self, session_id: str, user_id: str | None = None) -> RemoteSession:
        """An existing session; ``SessionNotFound`` if the token's user has none of that id."""
        self._check_user(user_id)
        check_id(session_id, "session_id")
        data = self.http.call("GET", f"/v1/sessions/{_seg(session_id)}", params={"messages": 0})
        return self._handle(wire.load(SessionInfo, data["info"]).key)

    def _handle(self, key: SessionKey, path: str | None = None) -> RemoteSession:
        session = self._sessions.get(key.session_id)
        if session is None:
            session = self._sessions[key.session_id] = RemoteSession(self, key, path)
        return session

    def sessions(
        self,
        user_id: str | None = None,
        *,
        status: str | list[str] | None = None,
        labels: Mapping[str, str] | None = None,
        since: datetime | float | None = None,
        until: datetime | float | None = None,
        search: str | None = None,
        limit: int = 50,
        before: str | None = None,
        archived: bool | None = False,
    ) -> SessionInfos:
        """The token's user's sessions, newest activity first (``Runtime.sessions``)."""
        self._check_user(user_id)
        params: dict[str, Any] = {
            "status": [status] if isinstance(status, str) else status,
            "label": [f"{k}={v}" for k, v in labels.items()] if labels else None,
            "since": _when(since),
            "until": _when(until),
            "search": search,
            "limit": limit,
            "before": before,
            "archived": {False: "false", True: "true", None: "all"}[archived],
        }
        data = self.http.call("GET", "/v1/sessions", params=params)
        return SessionInfos(wire.load(SessionInfo, s) for s in data["sessions"])

    def delete(self, session_id: str, *, force: bool = False, reason: str = "") -> Tombstone:
        return self._handle_of(session_id).delete(force=force, reason=reason)

    def archive(self, session_id: str) -> SessionInfo:
        return self._handle_of(session_id).archive()

    def unarchive(self, session_id: str) -> SessionInfo:
        return self._handle_of(session_id).unarchive()

    def _handle_of(self, session_id: str) -> RemoteSession:
        check_id(session_id, "session_id")
        return self._sessions.get(session_id) or self.open(session_id)

    def check_open(self) -> None:
        """Raise ``StorageError`` once this connection is closed."""
        if self._closed:
            raise StorageError(f"the connection to {self.url} is closed; connect again")

    def close(self) -> None:
        """Close the connections (follows end); the service and its sessions go on."""
        self._closed = True
        for session in list(self._sessions.values()):
            session.close()
        self.http.close()

    def __enter__(self) -> RemoteRuntime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RemoteRuntime({self.url!r})"


def connect(url: str, token: str | None = None, *, timeout: float = 30.0) -> RemoteRuntime:
    """The agentnb service at ``url`` (``agentnb serve``), acting as the token's user."""
    return RemoteRuntime(url, token, timeout=timeout)


def _seg(text: str) -> str:
    return quote(text, safe="")


def _when(value: datetime | float | None) -> str | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.isoformat()
    return datetime.fromtimestamp(float(value)).astimezone().isoformat()


def _event_of(frame: Mapping[str, Any]) -> Event:
    """An ``Event`` from a raw stream frame or an ``/events`` item."""
    if "payload" in frame:
        return Event.model_validate(frame)
    return Event.model_validate(
        {
            "event_id": frame["event_id"],
            "seq": frame["seq"],
            "occurred_at": frame["occurred_at"],
            "type": frame["type"],
            "turn_id": frame.get("turn_id"),
            "run_id": frame.get("run_id"),
            "required": frame.get("required", True),
            "payload": frame.get("data") or {},
        }
    )


_DATA = ',"data":'


def _event_of_frame(text: str) -> Event:
    """The ``Event`` of a raw stream's ``committed`` frame (its JSON text).

    The server splices the event's own payload text (``Event.payload_json``, its store row's
    canonical JSON) in after the envelope, as the frame's last field: that text is read once
    here and kept as this event's, not encoded again. The envelope is checked as any foreign
    data is (``Event.model_validate``). A frame of another shape is read whole."""
    at = text.find(_DATA)  # the envelope's strings escape their quotes: the first is the field
    if at > 0 and text.endswith("}"):
        payload_json = text[at + len(_DATA) : -1]
        try:
            envelope = decode_json(text[:at] + "}")
            payload = decode_payload(payload_json)
        except ValueError:
            pass  # not a frame this client splits: read it whole
        else:
            if not isinstance(envelope, dict):
                return _event_of(json.loads(text))
            checked = _event_of({**envelope, "data": {}})
            return Event.stored(
                checked.schema_version,
                checked.event_id,
                checked.seq,
                checked.occurred_at,
                checked.type,
                checked.turn_id,
                checked.run_id,
                checked.required,
                payload,
                payload_json,
            )
    return _event_of(json.loads(text))


class _Status:
    """What the session's stream said last: heads and whether it executes."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.live = 0
        """Follows reading the stream now (their status is current)."""
        self.data: dict[str, Any] | None = None


class RemoteLog:
    """``session.log`` of a remote session: head, reads and a reconnecting follow."""

    def __init__(self, session: RemoteSession) -> None:
        self.session = session

    def head(self) -> int:
        """Last committed seq (0 when empty)."""
        return int(self.session._status()["seq"])

    def read_after(self, seq: int, limit: int = 100) -> list[Event]:
        """Up to ``limit`` committed events after ``seq`` (pages of at most 256)."""
        out: list[Event] = []
        while len(out) < limit:
            want = min(_PAGE, limit - len(out))
            data = self.session._call("GET", "/events", params={"after": seq, "limit": want})
            events = [_event_of(e) for e in data["events"]]
            out += events
            if len(events) < want:
                break
            seq = events[-1].seq
        return out

    def scan(self, after: int = 0, through: int | None = None) -> Iterator[Event]:
        """Committed events in ``(after, through]`` (through: the head now)."""
        end = self.head() if through is None else through
        pos = after
        while pos < end:
            batch = self.read_after(pos, min(_PAGE, end - pos))
            if not batch:
                return
            yield from (e for e in batch if e.seq <= end)
            pos = batch[-1].seq

    def follow(
        self,
        after: int = 0,
        *,
        idle_timeout: float | None = None,
        stop: threading.Event | None = None,
    ) -> RemoteFollow:
        """Committed events after ``after`` as they commit (``for`` or ``async for``)."""
        if not isinstance(after, int) or isinstance(after, bool) or after < 0:
            raise InvalidInput(f"after must be a non-negative int, got {after!r}")
        return RemoteFollow(self.session, after, idle_timeout, stop)

    def __repr__(self) -> str:
        return f"RemoteLog({self.session.key})"


class RemoteInbox:
    """``session.inbox`` of a remote session (what a view folds for the queue)."""

    def __init__(self, session: RemoteSession) -> None:
        self.session = session

    def head(self) -> int:
        return int(self.session._status()["inbox_seq"])

    def read_after(self, seq: int, limit: int = 100) -> list[Event]:
        # While a follow reads the stream, its status says the inbox head: nothing after it
        # needs no request (a view that redraws would otherwise ask every redraw).
        head = self.session._streamed_inbox_head()
        if head is not None and seq >= head:
            return []
        data = self.session._call(
            "GET", "/inbox", params={"after": seq, "limit": min(max(limit, 1), 1000)}
        )
        return [_event_of(e) for e in data["events"]]

    def scan(self, after: int = 0, through: int | None = None) -> Iterator[Event]:
        """Inbox records in ``(after, through]`` (through: the head now)."""
        end = self.head() if through is None else through
        pos = after
        while pos < end:
            batch = self.read_after(pos, 1000)
            if not batch:
                return
            yield from (e for e in batch if e.seq <= end)
            pos = batch[-1].seq


class RemoteFollow:
    """The committed events of a remote session after a position, read from its stream.

    Reconnects after a dropped connection or a server restart, with ``Last-Event-ID`` the
    last event it yielded, so every event comes once, in order. Stops when ``stop`` is set,
    ``close()`` is called, ``idle_timeout`` seconds pass with no event, or the session is
    gone (``SessionNotFound``) or the token refused (``Unauthorized``): those raise.
    """

    def __init__(
        self,
        session: RemoteSession,
        after: int,
        idle_timeout: float | None,
        stop: threading.Event | None,
        *,
        live: LiveHub | None = None,
    ) -> None:
        self.session = session
        self.position = after
        """Seq of the last event yielded."""
        self.reconnects = 0
        """How many times the stream was opened again after it dropped."""
        self._idle = idle_timeout
        self._stop = stop or threading.Event()
        self._response: httpx.Response | None = None
        self._lock = threading.Lock()
        self._live = live
        self.connected = threading.Event()
        """Set once the service accepted the stream (it sends live chunks from then on)."""

    def close(self) -> None:
        """Stop following (a waiting iterator returns at once)."""
        self._stop.set()
        self._drop()

    def _drop(self) -> None:
        """End the open response from any thread: its socket is shut down, which wakes a
        reader blocked on it (closing alone does not), then the response is closed."""
        with self._lock:
            response = self._response
        if response is None:
            return
        stream = response.extensions.get("network_stream")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        # Closing from another thread may race the reader: it then ends by itself.
        with contextlib.suppress(Exception):
            response.close()

    def __iter__(self) -> Iterator[Event]:
        session = self.session
        session._follows_started()
        done = threading.Event()
        threading.Thread(target=self._watch_stop, args=(done,), daemon=True).start()
        failures = 0
        deadline = None if self._idle is None else time.monotonic() + self._idle
        try:
            while not self._stop.is_set():
                try:
                    for event in self._read(deadline):
                        failures = 0
                        if self._idle is not None:
                            deadline = time.monotonic() + self._idle
                        yield event
                    if self._stop.is_set():
                        return
                    if deadline is not None and time.monotonic() >= deadline:
                        return
                except (httpx.TransportError, _Dropped):
                    if self._stop.is_set():
                        return
                    if deadline is not None and time.monotonic() >= deadline:
                        return
                # The stream ended or dropped (a restart): come back after the last event.
                pause = RECONNECT[min(failures, len(RECONNECT) - 1)]
                failures += 1
                self.reconnects += 1
                if self._stop.wait(pause):
                    return
        finally:
            done.set()  # ends the watcher; a later iteration goes on from the position
            session._follows_ended()

    def _watch_stop(self, done: threading.Event) -> None:
        """Close the open response once ``stop`` is set (the reader may be blocked in it)."""
        while not done.wait(_STOP_CHECK):
            if self._stop.is_set():
                self._drop()
                return

    def _signal(self, kind: str, data: Any) -> None:
        """A frame of the stream other than a committed event: a status, a live chunk, or
        the end of the stream (raised as the error it says)."""
        session = self.session
        if kind == "status":
            session._status_seen(data)
        elif kind == "chunk" and self._live is not None:
            info = {k: v for k, v in data.items() if k not in {"kind", "turn_id", "run_id"}}
            self._live.publish(
                LiveEvent(data["kind"], data.get("turn_id"), data.get("run_id"), info, session.key)
            )
        elif kind == "end":
            reason = str(data.get("reason", "")) if isinstance(data, Mapping) else ""
            if "revoked" in reason or "sign-in" in reason:
                raise errors.Unauthorized(reason)
            raise errors.SessionNotFound(reason or "the session is gone")

    def _read(self, deadline: float | None) -> Iterator[Event]:
        session = self.session
        http = session.runtime.http
        headers = {"Accept": "text/event-stream"}
        if self.position:
            headers["Last-Event-ID"] = f"{session.key.session_id}:{self.position}"
        read = 20.0 if deadline is None else max(0.05, min(20.0, deadline - time.monotonic()))
        timeout = httpx.Timeout(http.timeout, read=read)
        request = http.client.build_request(
            "GET",
            f"{session._path}/stream",
            params={"mode": "raw"},
            headers=headers,
            timeout=timeout,
        )
        try:
            response = http.client.send(request, stream=True)
        except httpx.TimeoutException as exc:
            raise _Dropped() from exc
        with self._lock:
            self._response = response
        try:
            if response.status_code != 200:
                response.read()
                _Http.answer(response)  # raises the typed error
                raise _Dropped()
            self.connected.set()
            for kind, text, _id in _sse_events(response):
                if kind == "committed":
                    event = _event_of_frame(text)
                    if event.seq <= self.position:
                        continue
                    self.position = event.seq
                    if self._live is not None:
                        self._live.publish(
                            LiveEvent(
                                "committed",
                                event.turn_id,
                                event.run_id,
                                {"session": str(session.key), "seq": event.seq},
                                session.key,
                            )
                        )
                    yield event
                elif kind in ("status", "chunk", "end"):
                    self._signal(kind, json.loads(text))
                if deadline is not None and time.monotonic() >= deadline:
                    return
                if self._stop.is_set():
                    return
        except httpx.ReadTimeout:
            return
        except (httpx.StreamClosed, httpx.ReadError, httpx.RemoteProtocolError) as exc:
            if self._stop.is_set():
                return
            raise _Dropped() from exc
        finally:
            with self._lock:
                self._response = None
            response.close()

    async def _agen(self) -> AsyncIterator[Event]:
        iterator = iter(self)
        done = object()
        while True:
            event = await asyncio.to_thread(next, iterator, done)
            if event is done:
                return
            yield event  # type: ignore[misc]

    def __aiter__(self) -> AsyncIterator[Event]:
        return self._agen()


class _Dropped(Exception):
    """The stream dropped; the follow reconnects."""


def _sse_events(response: httpx.Response) -> Iterator[tuple[str, str, str | None]]:
    """(event, data text, id) of each server-sent event (comments skipped)."""
    kind, id_ = "message", None
    data: list[str] = []
    for line in response.iter_lines():
        if line == "":
            if data:
                yield kind, "\n".join(data), id_
            kind, data, id_ = "message", [], None
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "event":
            kind = value
        elif name == "data":
            data.append(value)
        elif name == "id":
            id_ = value


class RemoteSession:
    """A session of an agentnb service, with ``Session``'s verbs, reads and records.

    A sub-agent's child session (``session.child(call_id)``) is a ``RemoteSession`` too,
    addressed through its parent (``/v1/sessions/<id>/children/<call id>``).
    """

    def __init__(self, runtime: RemoteRuntime, key: SessionKey, path: str | None = None) -> None:
        self.runtime = runtime
        self.key = key
        self._path = path or f"/v1/sessions/{_seg(key.session_id)}"
        self.log = RemoteLog(self)
        self.inbox = RemoteInbox(self)
        self._state = _Status()
        self._hub: LiveHub | None = None
        self._live_follow: RemoteFollow | None = None
        self._live_thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _call(self, method: str, path: str = "", **kwargs: Any) -> Any:
        return self.runtime.http.call(method, self._path + path, **kwargs)

    # -- what the stream says ------------------------------------------------------------------

    def _follows_started(self) -> None:
        with self._state.lock:
            self._state.live += 1

    def _follows_ended(self) -> None:
        with self._state.lock:
            self._state.live -= 1
            if not self._state.live:
                self._state.data = None

    def _status_seen(self, data: Mapping[str, Any]) -> None:
        with self._state.lock:
            self._state.data = dict(data)

    def _streamed_inbox_head(self) -> int | None:
        """The inbox head a live stream reported last, or None when no stream is open."""
        with self._state.lock:
            if self._state.live and self._state.data is not None:
                return int(self._state.data["inbox_seq"])
        return None

    def _status(self) -> dict[str, Any]:
        """Heads and whether it executes: from a live stream when one is open, else asked."""
        with self._state.lock:
            if self._state.live and self._state.data is not None:
                return dict(self._state.data)
        data: dict[str, Any] = self._call("GET", "/status")
        return data

    # -- reading -------------------------------------------------------------------------------

    def executing(self) -> bool:
        """Whether some runtime executes the session now."""
        return bool(self._status()["executing"])

    def snapshot(self) -> ChatSnapshot:
        """One consistent read at one watermark (``Session.snapshot``)."""
        data = self._call("GET", "")
        return wire.load(ChatSnapshot, {**data, "cursor": data["seq"]})

    def agent_change(self) -> list[str] | None:
        """What new work would be refused for (``Session.agent_change``, on the service)."""
        data = self._call("GET", "", params={"messages": False})
        change = data.get("agent_change")
        return None if change is None else [str(c) for c in change]

    def transcript(self) -> Transcript:
        """The complete committed messages, as of one seq."""
        snap = self.snapshot()
        return Transcript(tuple(snap.messages), snap.cursor)

    def history(self, limit: int = 100, after: str | None = None) -> HistoryPage:
        """One bounded page of committed messages (``Session.history``)."""
        data = self._call("GET", "/history", params={"limit": limit, "after": after})
        return wire.load(HistoryPage, data)

    def history_pages(self, limit: int = 100) -> Iterator[HistoryPage]:
        """Every page of the history, lazily."""
        cursor: str | None = None
        while True:
            page = self.history(limit, cursor)
            yield page
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def tasks(self, limit: int | None = None, before: str | None = None) -> Tasks:
        data = self._call("GET", "/tasks", params={"limit": limit, "before": before})
        return Tasks(wire.load(Task, t, _session=self) for t in data)

    def task(self, command_id: str) -> Task:
        """The task a submit's command id or a turn id names (``Session.task``);
        ``task.wait()`` observes the whole turn."""
        check_id(command_id, "command_id")
        return wire.load(Task, self._call("GET", f"/turns/{_seg(command_id)}"), _session=self)

    def permissions(self) -> PermissionRules:
        """The permission rules in force for this session's calls (``Session.permissions``)."""
        rules = self._call("GET", "/permissions")
        return PermissionRules(wire.load(PermissionRule, r) for r in rules)

    def revoke(self, rule_id: str) -> None:
        """Remove a permission rule (``Session.revoke``)."""
        check_id(rule_id, "rule_id")
        self._call("DELETE", f"/permissions/{_seg(rule_id)}")

    def schedule(
        self,
        text: str,
        *,
        cron: str | None = None,
        every: float | timedelta | None = None,
        at: datetime | str | None = None,
        tz: str = "UTC",
        overlap: str = "skip",
        key: str | None = None,
        catch_up: str = "one",
    ) -> Schedule:
        """Submit ``text`` as a task at each due time (``Session.schedule``): the service's
        runtime fires it. ``every`` may be a ``timedelta``, ``at`` a ``datetime`` (a naive
        one is read in ``tz``, as locally). Bad values are ``InvalidInput`` naming the field."""
        if isinstance(every, timedelta):
            every = every.total_seconds()
        if isinstance(at, datetime):
            at = at.isoformat()
        body = {
            "text": text, "cron": cron, "every": every, "at": at, "tz": tz,
            "overlap": overlap, "catch_up": catch_up, "key": key,
        }  # fmt: skip
        return wire.load(Schedule, self._call("POST", "/schedules", json_body=body))

    def schedules(self) -> list[Schedule]:
        """The session's active schedules, with their last and next due times
        (``Session.schedules``)."""
        return [wire.load(Schedule, s) for s in self._call("GET", "/schedules")]

    def unschedule(self, schedule_id: str) -> None:
        """Remove a schedule: it fires no more (``Session.unschedule``); ``InvalidInput``
        for one that is not active."""
        check_id(schedule_id, "schedule_id")
        self._call("DELETE", f"/schedules/{_seg(schedule_id)}")

    def feedback(
        self,
        turn_id: str,
        *,
        score: float | None = None,
        label: str | None = None,
        comment: str | None = None,
        by: str | None = None,
    ) -> str:
        """Rate a turn's answer (``Session.feedback``); ``by`` defaults to the token's user.
        Returns the feedback id."""
        check_id(turn_id, "turn_id")
        body = {"score": score, "label": label, "comment": comment, "by": by}
        data = self._call("POST", f"/turns/{_seg(turn_id)}/feedback", json_body=body)
        return str(data["feedback_id"])

    def retract_feedback(self, feedback_id: str) -> None:
        """Take back a rating (``Session.retract_feedback``)."""
        check_id(feedback_id, "feedback_id")
        self._call("DELETE", f"/feedback/{_seg(feedback_id)}")

    def pending(self) -> Requests:
        """Open requests, its sub-agents' too (each with its ``path`` and ``session``):
        ``respond`` here routes them (``Session.pending``)."""
        data = self._call("GET", "/pending")
        return Requests({rid: wire.load(Interaction, i) for rid, i in data.items()})

    def children(self, turn_id: str | None = None) -> Children:
        """The sub-agent calls of this session (of turn ``turn_id`` if given), oldest first,
        with where each child's task stands now (``Session.children``)."""
        if turn_id is not None:
            check_id(turn_id, "turn_id")
        data = self._call("GET", "/children", params={"turn_id": turn_id})
        return Children(wire.load(Child, c) for c in data)

    def child(self, call_id: str) -> RemoteSession:
        """The child session of the sub-agent call ``call_id`` (``Session.child``)."""
        check_id(call_id, "call_id")
        found = next((c for c in self.children() if c.call_id == call_id), None)
        if found is None:
            raise InvalidInput(
                f"no sub-agent call {call_id!r} in session {self.key}; see session.children()"
            )
        return self.runtime._handle(found.key, f"{self._path}/children/{_seg(call_id)}")

    def plan(self) -> list[PlanItem]:
        """The plan the model keeps with the built-in ``nb.todo`` tool (``Session.plan``)."""
        return [PlanItem.model_validate(p) for p in self._call("GET", "/plan")]

    def app_state(self, name: str) -> dict[str, Any]:
        """What the service's reducer of event type ``name`` folded (``Session.app_state``)."""
        if not isinstance(name, str) or "/" not in name:
            raise InvalidInput(f"event type {name!r} must look like 'vendor/name'")
        return dict(self._call("GET", f"/app-state/{quote(name, safe='/')}"))

    def inspect(self) -> Inspection:
        data = self._call("GET", "/inspect")
        tokens = data.get("context_tokens")
        return wire.load(Inspection, data, _tokens=None if tokens is None else (lambda: tokens))

    def chat_copy(self) -> tuple[ChatState, InboxState]:
        """The chat fold and the inbox fold at their heads, folded here from the session's
        logs (what a ``SessionView`` starts from)."""
        chat, inbox = ChatState(), InboxState()
        for event in self.log.scan(0):
            chat.apply(event)
        while records := self.inbox.read_after(inbox.seq, 1000):
            for record in records:
                inbox.apply(record)
        return chat, inbox

    # -- commands ------------------------------------------------------------------------------

    def _receipt(self, data: Any) -> Receipt:
        return wire.load(Receipt, data, _session=self)

    def submit(
        self,
        input: str,
        key: str | None = None,
        *,
        timeout: float | None = None,
        if_busy: str = "queue",
    ) -> Receipt:
        """Durably accept a new task (``Session.submit``); ``key`` is the Idempotency-Key."""
        headers = {"Idempotency-Key": key} if key is not None else None
        body: dict[str, Any] = {"input": input}
        if timeout is not None:
            body["timeout"] = timeout
        if if_busy != "queue":
            body["if_busy"] = if_busy
        return self._receipt(self._call("POST", "/turns", json_body=body, headers=headers))

    def send(self, input: str) -> Receipt:
        return self._receipt(self._call("POST", "/send", json_body={"input": input}))

    def run(self, input: str, timeout: float | None = None) -> Outcome:
        return self.wait(self.submit(input), timeout)

    def steer(self, input: str, task: str | None = None) -> InputReceipt:
        data = self._call("POST", "/steer", json_body={"input": input, "task": task})
        return wire.load(InputReceipt, data)

    def inject(self, material: str) -> InputReceipt:
        return wire.load(
            InputReceipt, self._call("POST", "/inject", json_body={"material": material})
        )

    def respond(self, request_id: str | Mapping[str, object], answer: object = UNSET) -> Receipt:
        """Answer pending requests (``Session.respond``)."""
        if isinstance(request_id, Mapping):
            if not isinstance(answer, Unset):
                raise errors.InvalidAnswer(
                    "pass either respond(request_id, answer) or respond({request_id: answer})"
                )
            answers = dict(request_id)
        else:
            if isinstance(answer, Unset):
                raise errors.InvalidAnswer("respond(request_id, answer) needs the answer")
            answers = {request_id: answer}
        body = {"answers": {rid: _answer_json(a) for rid, a in answers.items()}}
        return self._receipt(self._call("POST", "/answers", json_body=body))

    def block_bytes(self, sha256: str) -> tuple[bytes, ImagePart | FilePart]:
        """The bytes of an image or file block and its part (``Session.block_bytes``)."""
        check_id(sha256, "sha256")
        for message in self.transcript().messages:
            for part in message.blocks:
                if isinstance(part, ImagePart | FilePart) and part.sha256 == sha256:
                    if part.data is not None:
                        return base64.b64decode(part.data), part
                    data: bytes = self._call("GET", f"/blocks/{_seg(sha256)}", raw=True)
                    return data, part
        raise errors.InvalidBlock(
            f"session {self.key.session_id} has no image or file block {sha256!r}"
        )

    def interrupt(self, run_id: str | None = None) -> bool:
        data = self._call("POST", "/interrupt", json_body={"run_id": run_id})
        return bool(data["interrupted"])

    def resume(self, turn_id: str, *, uncertain: str = "refuse") -> Receipt:
        """Continue the turn in a new run (``Session.resume``); ``uncertain="unknown"``
        records calls whose outcome is unknown as such and goes on."""
        check_id(turn_id, "turn_id")
        body = {"uncertain": uncertain}
        return self._receipt(self._call("POST", f"/turns/{_seg(turn_id)}/resume", json_body=body))

    def cancel(self, turn_id: str, timeout: float = 30.0) -> None:
        check_id(turn_id, "turn_id")
        self._call("POST", f"/turns/{_seg(turn_id)}/cancel", timeout=timeout + 10)

    def reconcile(
        self, outcomes: Mapping[str, ToolOutcome], reason: str, timeout: float = 30.0
    ) -> None:
        if not isinstance(outcomes, Mapping):
            raise InvalidInput("outcomes must map call ids to nb.ToolOutcome values")
        body = {
            "outcomes": {
                cid: {"status": o.status, "text": o.text} if isinstance(o, ToolOutcome) else o
                for cid, o in outcomes.items()
            },
            "reason": reason,
        }
        self._call("POST", "/reconcile", json_body=body, timeout=timeout + 10)

    def compact(self, timeout: float = 30.0) -> None:
        self._call("POST", "/compact", timeout=timeout + 10)

    def start(self) -> None:
        """Nothing to do: the service dispatches accepted work itself."""

    # -- waiting -------------------------------------------------------------------------------

    def wait(self, receipt: Receipt | Task, timeout: float | None = None) -> Outcome:
        """Block until what ``receipt`` observes settles (``Session.wait``): a receipt its
        command's run, a task its whole turn. Observes only."""
        if not isinstance(receipt, Receipt | Task):
            raise InvalidInput(f"wait() takes a Receipt or a Task, got {type(receipt).__name__}")
        deadline = None if timeout is None else time.monotonic() + timeout
        body = (
            wire.dump(receipt)
            if isinstance(receipt, Receipt)
            else {
                "command_id": receipt.command_id or receipt.turn_id,
                "turn_id": receipt.turn_id,
                "whole_turn": True,
            }
        )
        while True:
            left = WAIT_SLICE if deadline is None else deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"turn {receipt.turn_id} did not end within {timeout}s")
            slice_ = max(0.05, min(WAIT_SLICE, left))
            data = self._call(
                "POST", "/wait", json_body={**body, "timeout": slice_}, timeout=slice_ + 15
            )
            if data["outcome"] is not None:
                return wire.load(Outcome, data["outcome"])

    def events(self, maxsize: int = 1000) -> Subscription:
        """Live notifications of this session (chunks before they commit, commits), read
        from its stream by a background follow that starts with the first subscriber.

        Returns once the service accepted the stream (at most the client's timeout), so the
        chunks of a run started after this call are not missed: chunks are live only, and a
        stream that opens later gets the commits that hold them, not the chunks."""
        with self._lock:
            if self._hub is None:
                self._hub = LiveHub()
            follow = self._live_follow
            if follow is None:
                follow = RemoteFollow(self, self.log.head(), None, None, live=self._hub)
                self._live_follow = follow
                started = threading.Thread(
                    target=lambda: [None for _ in follow], daemon=True, name="agentnb-remote-live"
                )
                started.start()
                self._live_thread = started
            subscription = self._hub.subscribe(maxsize, session=self.key)
            thread = self._live_thread
        deadline = time.monotonic() + self.runtime.http.timeout
        while not follow.connected.wait(0.05):
            if thread is None or not thread.is_alive() or time.monotonic() >= deadline:
                break  # refused or unreachable: the follow says so, or keeps trying
        return subscription

    def close(self) -> None:
        """Stop this handle's background follow (the session goes on at the service)."""
        with self._lock:
            if self._live_follow is not None:
                self._live_follow.close()
                self._live_follow = None
                self._live_thread = None

    # -- lifecycle ------------------------------------------------------------------------------

    def update(
        self,
        *,
        title: str | Unset | None = UNSET,
        labels: dict[str, str | None] | None = None,
        key: str | None = None,
    ) -> None:
        """Set the title and merge labels (``Session.update``)."""
        body: dict[str, Any] = {}
        if not isinstance(title, Unset):
            body["title"] = title
        if labels is not None:
            body["labels"] = labels
        self._call("PATCH", "", json_body=body)

    def delete(self, *, force: bool = False, reason: str = "") -> Tombstone:
        data = self._call("DELETE", "", params={"force": str(force).lower(), "reason": reason})
        return wire.load(Tombstone, data)

    def archive(self) -> SessionInfo:
        return wire.load(SessionInfo, self._call("POST", "/archive"))

    def unarchive(self) -> SessionInfo:
        return wire.load(SessionInfo, self._call("POST", "/unarchive"))

    def __repr__(self) -> str:
        return f"RemoteSession({self.key} at {self.runtime.url})"

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> Any:
        """In a notebook a remote session shows as its live ``SessionView``."""
        try:
            from agentnb.widgets import SessionView  # optional: the widgets extra
        except ImportError:
            return {"text/plain": repr(self)}
        return SessionView(self)._repr_mimebundle_(include=include, exclude=exclude)


def _answer_json(answer: object) -> Any:
    if isinstance(answer, bool | str):
        return answer
    if isinstance(answer, Answer):
        blocks = answer.blocks
        # With blocks, the text is their first (Text) block already: it is sent once.
        plain = dataclasses.replace(answer, blocks=None, text=None) if blocks else answer
        out = {k: v for k, v in wire.dump(plain).items() if v is not None}
        if blocks:  # the bytes go as base64; the service checks them again
            out["blocks"] = [b.part() for b in blocks]
        return out
    raise errors.InvalidAnswer(
        f"an answer is True, False, a str or an nb.Answer, got {type(answer).__name__}"
    )
