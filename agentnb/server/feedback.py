"""``/v1/sessions/{id}/.../feedback``: ratings of turns, added, listed and retracted.

Each route calls the one ``Session`` verb (``feedback``, ``retract_feedback``) for the
principal's session; its typed errors (``UnknownTurn``, ``SessionDeleted``, ``InvalidInput``)
become problems like every route's.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from agentnb.feedback import live_feedback
from agentnb.server.auth import SESSION, Principal, SessionId, current_user, open_session
from agentnb.server.problems import PROBLEM_RESPONSES

__all__ = ["router"]

router = APIRouter(tags=["feedback"], responses=PROBLEM_RESPONSES)
User = Annotated[Principal, Depends(current_user)]


class NewFeedback(BaseModel):
    """``session.feedback(turn_id, score=, label=, comment=, by=)``."""

    model_config = ConfigDict(extra="forbid")
    score: float | None = None
    label: str | None = None
    comment: str | None = None
    by: str | None = Field(default=None, description="who gave it; the caller's user if unset")


class FeedbackCreated(BaseModel):
    feedback_id: str


class FeedbackItem(BaseModel):
    """One rating in force (``feedback/added``, not retracted)."""

    feedback_id: str
    turn_id: str
    score: float | None
    label: str | None
    comment: str | None
    by: str | None
    seq: int
    at: datetime


@router.post(
    SESSION + "/turns/{turn_id}/feedback",
    response_model=FeedbackCreated,
    status_code=201,
    summary="session.feedback(turn_id, ...)",
)
def add_feedback(
    request: Request, session_id: SessionId, turn_id: str, principal: User, body: NewFeedback
) -> dict[str, str]:
    session = open_session(request, session_id, principal)
    by = body.by if body.by is not None else principal.user_id
    feedback_id = session.feedback(
        turn_id, score=body.score, label=body.label, comment=body.comment, by=by
    )
    return {"feedback_id": feedback_id}


@router.get(
    f"{SESSION}/feedback",
    response_model=list[FeedbackItem],
    summary="the session's ratings in force, oldest first",
)
def list_feedback(request: Request, session_id: SessionId, principal: User) -> list[Any]:
    session = open_session(request, session_id, principal)
    return [
        FeedbackItem(
            feedback_id=f.feedback_id,
            turn_id=f.turn_id,
            score=f.score,
            label=f.label,
            comment=f.comment,
            by=f.by,
            seq=f.seq,
            at=f.at,
        )
        for f in live_feedback(session.log.scan()).values()
    ]


@router.delete(
    SESSION + "/feedback/{feedback_id}",
    status_code=204,
    response_class=Response,
    summary="session.retract_feedback(feedback_id)",
)
def retract_feedback(
    request: Request, session_id: SessionId, feedback_id: str, principal: User
) -> Response:
    open_session(request, session_id, principal).retract_feedback(feedback_id)
    return Response(status_code=204)
