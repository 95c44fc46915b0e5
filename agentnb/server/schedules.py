"""``/v1/sessions/{id}/schedules``: the session's schedules (``session.schedule``,
``session.schedules()``, ``session.unschedule(id)``). A door: each route calls the one
``Session`` verb; bad values are ``InvalidInput`` (400) naming the field."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Depends, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from agentnb import wire
from agentnb.server.auth import SESSION, Principal, SessionId, current_user, open_session
from agentnb.server.problems import PROBLEM_RESPONSES

__all__ = ["router"]

router = APIRouter(tags=["schedules"], responses=PROBLEM_RESPONSES)
User = Annotated[Principal, Depends(current_user)]


class ScheduleBody(BaseModel):
    """A new schedule: the task's text and exactly one of ``cron``, ``every``, ``at``."""

    model_config = ConfigDict(extra="forbid")

    text: str = Field(description="the task submitted at each due time")
    cron: str | None = Field(None, description="a cron expression, read in tz")
    every: float | None = Field(None, description="seconds between due times")
    at: str | None = Field(None, description="one due time, ISO 8601")
    tz: str = "UTC"
    overlap: Literal["skip", "queue", "steer"] = "skip"
    catch_up: Literal["one", "all", "none"] = "one"
    key: str | None = Field(None, description="an idempotency key for this schedule")


class ScheduleModel(BaseModel):
    """A schedule as ``session.schedules()`` gives it."""

    schedule_id: str
    text: str
    cron: str | None
    every: float | None
    at: str | None
    tz: str
    overlap: str
    catch_up: str
    key: str | None
    created_at: float
    last_fired: float | None
    next_due: float | None
    active: bool


@router.get(f"{SESSION}/schedules", response_model=list[ScheduleModel])
def schedules(request: Request, session_id: SessionId, principal: User) -> Any:
    """``session.schedules()``: the active schedules, with their last and next due times."""
    return wire.dump(open_session(request, session_id, principal).schedules())


@router.post(f"{SESSION}/schedules", status_code=201, response_model=ScheduleModel)
def add(
    request: Request,
    session_id: SessionId,
    principal: User,
    body: Annotated[ScheduleBody, Body()],
) -> Any:
    """``session.schedule(...)``: durable at once; fired by the runtimes that fire
    schedules, each due time once."""
    session = open_session(request, session_id, principal)
    return wire.dump(session.schedule(**body.model_dump()))


@router.delete(SESSION + "/schedules/{schedule_id}", status_code=204, response_class=Response)
def remove(request: Request, session_id: SessionId, schedule_id: str, principal: User) -> Response:
    """``session.unschedule(schedule_id)``: it fires no more."""
    open_session(request, session_id, principal).unschedule(schedule_id)
    return Response(status_code=204)
