"""``/v1/sessions``: listing, creating, reading and the lifecycle of the caller's sessions.

Each route calls one ``Runtime`` / ``Session`` verb for the principal's user and answers
with what it returns (``agentnb.wire``); the verbs decide, the routes translate. Another
user's session is a 404, as one that does not exist.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import anyio.to_thread
from fastapi import APIRouter, Body, Depends, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from agentnb import wire
from agentnb.errors import InvalidInput, SessionNotFound
from agentnb.events import Message, PlanItem
from agentnb.history import HistoryPage
from agentnb.projections.chat import ChatItem
from agentnb.records import (
    Child,
    Inspection,
    Interaction,
    Outcome,
    PermissionRule,
    Receipt,
    SessionInfo,
    Task,
)
from agentnb.runtime.runtime import Runtime, session_info
from agentnb.server.auth import (
    SESSION,
    Principal,
    SessionId,
    check_session_id,
    current_user,
    open_session,
)
from agentnb.server.problems import PROBLEM_RESPONSES
from agentnb.server.render import item_json, status_of
from agentnb.server.stream import format_cursor
from agentnb.session import Session
from agentnb.stores.base import UNSET, Tombstone

__all__ = ["router"]

EVENTS_LIMIT = 256
"""Most events one ``/events`` (or ``/inbox``) page holds."""
WAIT_LIMIT = 30.0
"""Longest a ``/wait`` holds the request (the client asks again)."""

router = APIRouter(tags=["sessions"], responses=PROBLEM_RESPONSES)
User = Annotated[Principal, Depends(current_user)]

SessionInfoModel = wire.model_of(SessionInfo)
TaskModel = wire.model_of(Task)
InteractionModel = wire.model_of(Interaction)
InspectionModel = wire.model_of(Inspection)
HistoryPageModel = wire.model_of(HistoryPage)
TombstoneModel = wire.model_of(Tombstone)
OutcomeModel = wire.model_of(Outcome)
ChatItemModel = wire.model_of(ChatItem)
ChildModel = wire.model_of(Child)
PermissionRuleModel = wire.model_of(PermissionRule)
WAITS = anyio.CapacityLimiter(64)
"""Threads that may hold ``/wait`` requests at once (apart from the pool other routes use)."""


def _runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


def _info(runtime: Runtime, session: Session) -> dict[str, Any]:
    record = runtime.store.get_session(session.key)
    if record is None:
        raise SessionNotFound(f"session {session.key.session_id!r} was deleted meanwhile")
    return dict(wire.dump(session_info(record, now=runtime.store.clock.now())))


# -- models (the records' own field names) ----------------------------------------------------


class SessionList(BaseModel):
    """One page of sessions, newest activity first."""

    sessions: list[SessionInfoModel]  # type: ignore[valid-type]
    next_cursor: str | None = Field(
        description="pass as `before` for the next page; null on the last one"
    )


class NewSession(BaseModel):
    """A session to create (or get, if it exists)."""

    model_config = ConfigDict(extra="forbid")
    session_id: str | None = Field(
        default=None, description="an id of your own; a new one is made if absent"
    )
    title: str | None = None
    labels: dict[str, str] | None = None


class SessionPatch(BaseModel):
    """``session.update``: a title (null: back to the first task's first line) and labels to
    merge (a null value removes that label)."""

    model_config = ConfigDict(extra="forbid")
    title: str | None = None
    labels: dict[str, str | None] | None = None


class Snapshot(BaseModel):
    """``session.snapshot()`` with the session's status and its record, at one watermark."""

    session_id: str = Field(description="the session's own id (a child's: '<parent>/<call>')")
    cursor: str = Field(description="'<session_id>:<seq>': stream after it")
    seq: int = Field(description="the last execution-log seq the snapshot covers")
    status: str
    items: list[ChatItemModel]  # type: ignore[valid-type]
    messages: list[Message]
    pending: dict[str, InteractionModel]  # type: ignore[valid-type]
    tasks: list[TaskModel]  # type: ignore[valid-type]
    info: SessionInfoModel  # type: ignore[valid-type]
    agent_change: list[str] | None = Field(
        default=None,
        description="what differs from the agent the session is bound to, when new work "
        "would be refused (AgentChanged; agentnb serve --accept-agent-change takes it over)",
    )


class Status(BaseModel):
    """What a follower needs to know without reading the log."""

    session_id: str = Field(description="the session's own id (a child's: '<parent>/<call>')")
    seq: int
    inbox_seq: int
    executing: bool


class EventPage(BaseModel):
    """Committed events after a seq, as ``session.log.read_after`` returns them."""

    events: list[dict[str, Any]]
    head: int = Field(description="the log's head when the page was read")


class WaitRequest(BaseModel):
    """``session.wait(receipt, timeout)``: the receipt's fields, and at most 30 s."""

    model_config = ConfigDict(extra="allow")
    command_id: str
    turn_id: str
    run_id: str | None = None
    status: str = "queued"
    disposition: str | None = None
    timeout: float = Field(default=WAIT_LIMIT, gt=0, le=WAIT_LIMIT)
    whole_turn: bool = Field(
        default=False,
        description="observe the whole turn (Task.wait) instead of the command's run",
    )


class WaitResult(BaseModel):
    """The run's outcome, or null when it has not settled within the timeout."""

    outcome: OutcomeModel | None  # type: ignore[valid-type]


class ToolInfo(BaseModel):
    name: str
    description: str
    parameters: dict[str, Any]
    idempotent: bool
    confirm: bool
    external: bool


class AgentInfo(BaseModel):
    """The agent this service runs."""

    agent_id: str
    name: str
    model: str
    tools: list[ToolInfo]
    compaction: bool


# -- routes ------------------------------------------------------------------------------------


@router.get("/agent", response_model=AgentInfo, summary="The agent this service runs")
def agent(request: Request, principal: User) -> dict[str, Any]:
    a = _runtime(request).agent
    return {
        "agent_id": a.agent_id,
        "name": a.name,
        "model": str(getattr(a.model, "name", type(a.model).__name__)),
        "tools": [
            {
                "name": t.name,
                "description": t.description,
                "parameters": dict(t.parameters),
                "idempotent": t.idempotent,
                "confirm": t.confirm,
                "external": t.external,
            }
            for t in a.tools
        ],
        "compaction": a.compaction is not None,
    }


@router.get("/sessions", response_model=SessionList, summary="runtime.sessions(...)")
def list_sessions(
    request: Request,
    principal: User,
    status: Annotated[list[str] | None, Query()] = None,
    label: Annotated[list[str] | None, Query(description="K=V, repeat for several")] = None,
    since: datetime | None = None,
    until: datetime | None = None,
    search: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    before: str | None = None,
    archived: Literal["false", "true", "all"] = "false",
) -> dict[str, Any]:
    labels = None
    if label:
        labels = {}
        for item in label:
            k, sep, v = item.partition("=")
            if not sep or not k:
                raise InvalidInput(f"label must be K=V, got {item!r}")
            labels[k] = v
    infos = _runtime(request).sessions(
        principal.user_id,
        status=status or None,
        labels=labels,
        since=since,
        until=until,
        search=search,
        limit=limit,
        before=before,
        archived={"false": False, "true": True, "all": None}[archived],
    )
    return {
        "sessions": wire.dump(infos),
        "next_cursor": infos[-1].cursor if len(infos) == limit else None,
    }


@router.post(
    "/sessions",
    response_model=SessionInfoModel,
    status_code=201,
    summary="runtime.session(id): create (201), or get an existing one (200)",
)
def create_session(
    request: Request,
    response: Response,
    principal: User,
    body: Annotated[NewSession | None, Body()] = None,
) -> dict[str, Any]:
    body = body or NewSession()
    runtime = _runtime(request)
    if not body.session_id:  # no id of the caller's: the runtime makes one
        labels = dict(body.labels) if body.labels is not None else None
        created = runtime.create(user_id=principal.user_id, title=body.title, labels=labels)
        return _info(runtime, created)
    session_id = check_session_id(body.session_id)
    key_exists = True
    try:
        session = runtime.open(session_id, user_id=principal.user_id)
    except SessionNotFound as exc:
        if type(exc) is not SessionNotFound:
            raise  # deleted: the id does not come back
        key_exists = False
        session = runtime.session(session_id, user_id=principal.user_id)
    if body.title is not None or body.labels:
        session.update(
            title=body.title if body.title is not None else UNSET,
            labels=dict(body.labels) if body.labels else None,
        )
    if key_exists:
        response.status_code = 200
    return _info(runtime, session)


@router.get(SESSION, response_model=Snapshot, summary="session.snapshot()")
def get_session(
    request: Request,
    session_id: SessionId,
    principal: User,
    messages: bool = True,
    html: bool = False,
) -> dict[str, Any]:
    runtime = _runtime(request)
    session = open_session(request, session_id, principal)
    snap = session.snapshot()
    own_id = session.key.session_id
    return {
        "session_id": own_id,
        "cursor": format_cursor(own_id, snap.cursor),
        "seq": snap.cursor,
        "status": status_of(list(snap.tasks)),
        "items": [item_json(i, html=html) for i in snap.items],
        "messages": wire.dump(snap.messages) if messages else [],
        "pending": wire.dump(snap.pending),
        "tasks": wire.dump(snap.tasks),
        "info": _info(runtime, session),
        "agent_change": session.agent_change(),
    }


@router.patch(SESSION, response_model=SessionInfoModel, summary="session.update")
def patch_session(
    request: Request, session_id: SessionId, principal: User, body: SessionPatch
) -> dict[str, Any]:
    session = open_session(request, session_id, principal)
    title: Any = body.title if "title" in body.model_fields_set else UNSET
    session.update(title=title, labels=body.labels)
    return _info(_runtime(request), session)


@router.delete(
    SESSION,
    response_model=TombstoneModel,
    summary="session.delete(force=)",
)
def delete_session(
    request: Request,
    session_id: SessionId,
    principal: User,
    force: bool = False,
    reason: str = "",
) -> Any:
    session = open_session(request, session_id, principal)
    return wire.dump(session.delete(force=force, reason=reason))


@router.post(
    f"{SESSION}/archive",
    response_model=SessionInfoModel,
    summary="session.archive",
)
def archive(request: Request, session_id: SessionId, principal: User) -> Any:
    return wire.dump(open_session(request, session_id, principal).archive())


@router.post(
    f"{SESSION}/unarchive",
    response_model=SessionInfoModel,
    summary="session.unarchive",
)
def unarchive(request: Request, session_id: SessionId, principal: User) -> Any:
    return wire.dump(open_session(request, session_id, principal).unarchive())


@router.get(f"{SESSION}/inspect", response_model=InspectionModel)
def inspect(request: Request, session_id: SessionId, principal: User) -> Any:
    """``session.inspect()``, with ``context_tokens`` counted."""
    found = open_session(request, session_id, principal).inspect()
    data = wire.dump(found)
    data["context_tokens"] = found.context_tokens
    return data


@router.get(f"{SESSION}/history", response_model=HistoryPageModel)
def history(
    request: Request,
    session_id: SessionId,
    principal: User,
    limit: int = 100,
    after: str | None = None,
) -> Any:
    """``session.history(limit, after)``: one page of messages (limit 1..256)."""
    return wire.dump(open_session(request, session_id, principal).history(limit, after))


@router.get(f"{SESSION}/events", response_model=EventPage)
def events(
    request: Request,
    session_id: SessionId,
    principal: User,
    after: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=EVENTS_LIMIT)] = EVENTS_LIMIT,
) -> dict[str, Any]:
    """``session.log.read_after(after, limit)``: committed events, raw."""
    session = open_session(request, session_id, principal)
    head = session.log.head()
    found = session.log.read_after(after, limit) if after < head else []
    return {"events": [e.model_dump(mode="json") for e in found], "head": head}


@router.get(f"{SESSION}/inbox", response_model=EventPage)
def inbox(
    request: Request,
    session_id: SessionId,
    principal: User,
    after: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 1000,
) -> dict[str, Any]:
    """``session.inbox.read_after(after, limit)``: the command log (what a view folds)."""
    session = open_session(request, session_id, principal)
    head = session.inbox.head()
    found = session.inbox.read_after(after, limit) if after < head else []
    return {"events": [e.model_dump(mode="json") for e in found], "head": head}


@router.get(
    f"{SESSION}/blocks/{{sha256}}",
    response_class=Response,
    summary="session.block_bytes(sha256): the bytes of an image or file block",
)
def block(request: Request, session_id: SessionId, sha256: str, principal: User) -> Response:
    """The bytes of an image or file block of this session's results, with its type. An
    image shows inline (the chat page's thumbnails); anything else downloads. Bytes a
    browser could run (not a checked image) never show inline."""
    data, part = open_session(request, session_id, principal).block_bytes(sha256)
    shown = part.type == "image"
    name = (part.name or f"{part.type}-{sha256[:12]}").replace('"', "")
    return Response(
        data,
        media_type=part.mime if shown else "application/octet-stream",
        headers={
            "Content-Disposition": f'{"inline" if shown else "attachment"}; filename="{name}"',
            "X-Content-Type-Options": "nosniff",
            "Cache-Control": "private, max-age=31536000, immutable",
            "Content-Security-Policy": "default-src 'none'; sandbox",
        },
    )


@router.get(f"{SESSION}/status", response_model=Status)
def status(request: Request, session_id: SessionId, principal: User) -> dict[str, Any]:
    """Both heads and whether a runtime executes the session now."""
    session = open_session(request, session_id, principal)
    return {
        "session_id": session.key.session_id,
        "seq": session.log.head(),
        "inbox_seq": session.inbox.head(),
        "executing": session.executing(),
    }


@router.get(f"{SESSION}/tasks", response_model=list[TaskModel])  # type: ignore[valid-type]
def tasks(
    request: Request,
    session_id: SessionId,
    principal: User,
    limit: Annotated[int | None, Query(ge=1)] = None,
    before: str | None = None,
) -> Any:
    """``session.tasks(limit, before)``."""
    return wire.dump(open_session(request, session_id, principal).tasks(limit, before))


@router.get(
    f"{SESSION}/pending",
    response_model=dict[str, InteractionModel],  # type: ignore[valid-type]
)
def pending(request: Request, session_id: SessionId, principal: User) -> Any:
    """``session.pending()``: its own requests and its sub-agents' (each with its ``path``
    of agents and the ``session`` it lives in; answer them here, they are routed)."""
    return wire.dump(open_session(request, session_id, principal).pending())


@router.get(
    f"{SESSION}/children",
    response_model=list[ChildModel],  # type: ignore[valid-type]
)
def children(
    request: Request,
    session_id: SessionId,
    principal: User,
    turn_id: Annotated[str | None, Query(description="only this turn's calls")] = None,
) -> Any:
    """``session.children(turn_id)``: the session's sub-agent calls, oldest first, each with
    its child session's key and where the child's task stands now. A child is addressed as
    ``/v1/sessions/{session_id}/children/{call_id}`` (every per-session route works there)."""
    return wire.dump(open_session(request, session_id, principal).children(turn_id))


@router.get(
    f"{SESSION}/permissions",
    response_model=list[PermissionRuleModel],  # type: ignore[valid-type]
)
def permissions(request: Request, session_id: SessionId, principal: User) -> Any:
    """``session.permissions()``: the permission rules in force for the session's calls."""
    return wire.dump(open_session(request, session_id, principal).permissions())


@router.delete(
    SESSION + "/permissions/{rule_id}",
    status_code=204,
    response_class=Response,
)
def revoke(request: Request, session_id: SessionId, rule_id: str, principal: User) -> Response:
    """``session.revoke(rule_id)``: calls the rule allowed ask again from now on."""
    open_session(request, session_id, principal).revoke(rule_id)
    return Response(status_code=204)


@router.get(f"{SESSION}/plan", response_model=list[PlanItem])
def plan(request: Request, session_id: SessionId, principal: User) -> Any:
    """``session.plan()``: the plan the model keeps with the built-in ``todo`` tool."""
    return wire.dump(open_session(request, session_id, principal).plan())


@router.get(SESSION + "/app-state/{name:path}")
def app_state(request: Request, session_id: SessionId, name: str, principal: User) -> Any:
    """``session.app_state(name)``: what the reducer of event type ``name`` folded, as this
    service's registrations fold it."""
    return open_session(request, session_id, principal).app_state(name)


@router.post(f"{SESSION}/wait", response_model=WaitResult)
async def wait(request: Request, session_id: SessionId, principal: User, body: WaitRequest) -> Any:
    """``session.wait(receipt, timeout)``, holding the request at most 30 s: null when the
    run has not settled by then (ask again). With ``whole_turn`` it is ``task.wait()``: the
    task of ``command_id`` (the submit), through its answers and resumes. ``Parked`` (409)
    when it cannot move."""
    fields = body.model_dump(exclude={"timeout", "whole_turn"})

    def wait_for() -> Any:
        session = open_session(request, session_id, principal)
        watched: Receipt | Task = (
            session.task(body.command_id) if body.whole_turn else wire.load(Receipt, fields)
        )
        try:
            return {"outcome": wire.dump(session.wait(watched, body.timeout))}
        except TimeoutError:
            return {"outcome": None}

    return await anyio.to_thread.run_sync(wait_for, limiter=WAITS)
