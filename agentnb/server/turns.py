"""Work: ``/v1/sessions/{id}/turns`` and the commands that steer, feed, answer and stop runs.

Each route calls the one ``Session`` verb and answers with what it returns (a ``Receipt``,
an ``InputReceipt``, ``interrupted``, or 204 for the verbs that return None); the verb's
typed errors become problems (``agentnb.server.problems``). ``Idempotency-Key`` on a
submit is the verb's ``key``: the same key and input give the same receipt, other input
``IdempotencyConflict`` (409).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar

from fastapi import APIRouter, Depends, Header, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from agentnb import wire
from agentnb.answers import Answer, ToolOutcome
from agentnb.errors import InvalidAnswer
from agentnb.records import InputReceipt, Receipt, Task
from agentnb.server.auth import (
    SESSION,
    Principal,
    SessionId,
    current_user,
    open_session,
    short_call,
)
from agentnb.server.problems import PROBLEM_RESPONSES

__all__ = ["answer_of", "router"]

T = TypeVar("T")
router = APIRouter(tags=["turns"], responses=PROBLEM_RESPONSES)
User = Annotated[Principal, Depends(current_user)]

ReceiptModel = wire.model_of(Receipt)
InputReceiptModel = wire.model_of(InputReceipt)
TaskModel = wire.model_of(Task)


# -- models ------------------------------------------------------------------------------------


class NewTurn(BaseModel):
    """``session.submit(input, timeout=, if_busy=)``; the ``Idempotency-Key`` header is its
    ``key``."""

    model_config = ConfigDict(extra="forbid")
    input: str
    timeout: float | None = Field(default=None, gt=0)
    if_busy: Literal["queue", "reject", "interrupt", "steer"] = Field(
        default="queue",
        description="what to do when the session is busy: queue the task, reject it "
        "(409 SessionBusy), interrupt the running turn, or steer it",
    )


class Text(BaseModel):
    """``session.send(input)``."""

    model_config = ConfigDict(extra="forbid")
    input: str


class Steer(BaseModel):
    """``session.steer(input, task=)``."""

    model_config = ConfigDict(extra="forbid")
    input: str
    task: str | None = None


class Material(BaseModel):
    """``session.inject(material)``."""

    model_config = ConfigDict(extra="forbid")
    material: str


class AnswerModel(BaseModel):
    """``nb.Answer``: ``approve`` (optionally with ``edited_args``, and ``remember``
    ``session`` / ``agent`` to record a permission rule, narrowed by ``match``), ``reject``
    (with a ``reason``) or ``output`` (``text``, and ``blocks``)."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["approve", "reject", "output"]
    reason: str | None = None
    edited_args: dict[str, Any] | None = None
    text: str | None = None
    remember: Literal["session", "agent"] | None = None
    match: dict[str, Any] | None = None
    blocks: list[dict[str, Any]] | None = Field(
        default=None,
        description="for an output: result blocks (agentnb.blocks), each {type: text|json|"
        "image|file, ...}; images and files carry their bytes as base64 data",
    )


class Answers(BaseModel):
    """``session.respond({request_id: answer})``: ``true`` / ``false`` approve or reject a
    confirmation, a string answers a question or an external call, or an ``Answer``."""

    model_config = ConfigDict(extra="forbid")
    answers: dict[str, bool | str | AnswerModel]


class Resume(BaseModel):
    """``session.resume(turn_id, uncertain=)``: ``refuse`` (reconcile uncertain calls first)
    or ``unknown`` (record their outcomes as unknown and go on)."""

    model_config = ConfigDict(extra="forbid")
    uncertain: Literal["refuse", "unknown"] = "refuse"


class Interrupt(BaseModel):
    """``session.interrupt(run_id)``: with the run id a page shows, a newer run is not
    stopped (409 ``NotRunning``)."""

    model_config = ConfigDict(extra="forbid")
    run_id: str | None = None


class Interrupted(BaseModel):
    interrupted: bool = Field(description="false when nothing was running")


class OutcomeModel(BaseModel):
    """``nb.ToolOutcome``: what really happened to an uncertain call."""

    model_config = ConfigDict(extra="forbid")
    status: Literal["success", "error", "unknown"]
    text: str = ""


class Reconcile(BaseModel):
    """``session.reconcile({call_id: outcome}, reason)``."""

    model_config = ConfigDict(extra="forbid")
    outcomes: dict[str, OutcomeModel]
    reason: str


def answer_of(value: bool | str | AnswerModel) -> object:
    """The ``respond`` answer a JSON answer stands for (``InvalidAnswer`` if it cannot be)."""
    if isinstance(value, bool | str):
        return value
    if value.kind == "approve":
        return Answer.approve(
            edited_args=value.edited_args, remember=value.remember, match=value.match
        )
    if value.kind == "reject":
        return Answer.reject(value.reason if value.reason is not None else "")
    if value.blocks is not None:
        return Answer.output(value.text, blocks=value.blocks)
    if value.text is None:
        raise InvalidAnswer("an output answer needs its text")
    return Answer.output(value.text)


def _outcome(value: OutcomeModel) -> ToolOutcome:
    if value.status == "success":
        return ToolOutcome.success(value.text)
    if value.status == "error":
        return ToolOutcome.error(value.text)
    return ToolOutcome.unknown()


# -- routes ------------------------------------------------------------------------------------
# The verbs that only accept a command (submit, resume, send, steer, inject, answers,
# interrupt) run on the server's loop when the store's I/O is local: no hand-off to the
# threadpool and back for a turn's start. ``cancel`` waits for its commit: a worker thread.


async def _enqueue(request: Request, accept: Callable[[], T]) -> T:
    return await short_call(request.app.state.runtime.store, accept)


@router.post(
    f"{SESSION}/turns",
    response_model=ReceiptModel,
    status_code=202,
    summary="session.submit(input, key=Idempotency-Key)",
)
async def submit(
    request: Request,
    session_id: SessionId,
    principal: User,
    body: NewTurn,
    idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key")] = None,
) -> Any:
    def accept() -> Receipt:
        session = open_session(request, session_id, principal)
        return session.submit(
            body.input, key=idempotency_key, timeout=body.timeout, if_busy=body.if_busy
        )

    return wire.dump(await _enqueue(request, accept))


@router.get(
    SESSION + "/turns/{turn_id}",
    response_model=TaskModel,
    summary="session.task",
)
def task(request: Request, session_id: SessionId, turn_id: str, principal: User) -> Any:
    return wire.dump(open_session(request, session_id, principal).task(turn_id))


@router.post(
    SESSION + "/turns/{turn_id}/resume",
    response_model=ReceiptModel,
    status_code=202,
    summary="session.resume(turn_id, uncertain=)",
)
async def resume(
    request: Request,
    session_id: SessionId,
    turn_id: str,
    principal: User,
    body: Resume | None = None,
) -> Any:
    uncertain = body.uncertain if body is not None else "refuse"

    def accept() -> Receipt:
        session = open_session(request, session_id, principal)
        return session.resume(turn_id, uncertain=uncertain)

    return wire.dump(await _enqueue(request, accept))


@router.post(
    SESSION + "/turns/{turn_id}/cancel",
    status_code=204,
    response_class=Response,
    summary="session.cancel(turn_id)",
)
def cancel(request: Request, session_id: SessionId, turn_id: str, principal: User) -> Response:
    open_session(request, session_id, principal).cancel(turn_id)
    return Response(status_code=204)


@router.post(
    f"{SESSION}/send",
    response_model=ReceiptModel,
    status_code=202,
    summary="session.send(input)",
)
async def send(request: Request, session_id: SessionId, principal: User, body: Text) -> Any:
    def accept() -> Receipt:
        return open_session(request, session_id, principal).send(body.input)

    return wire.dump(await _enqueue(request, accept))


@router.post(
    f"{SESSION}/steer",
    response_model=InputReceiptModel,
    status_code=202,
    summary="session.steer(input, task=)",
)
async def steer(request: Request, session_id: SessionId, principal: User, body: Steer) -> Any:
    def accept() -> InputReceipt:
        return open_session(request, session_id, principal).steer(body.input, body.task)

    return wire.dump(await _enqueue(request, accept))


@router.post(
    f"{SESSION}/inject",
    response_model=InputReceiptModel,
    status_code=202,
    summary="session.inject(material)",
)
async def inject(request: Request, session_id: SessionId, principal: User, body: Material) -> Any:
    def accept() -> InputReceipt:
        return open_session(request, session_id, principal).inject(body.material)

    return wire.dump(await _enqueue(request, accept))


@router.post(
    f"{SESSION}/answers",
    response_model=ReceiptModel,
    status_code=202,
    summary="session.respond({request_id: answer})",
)
async def answers(request: Request, session_id: SessionId, principal: User, body: Answers) -> Any:
    given = {rid: answer_of(a) for rid, a in body.answers.items()}

    def accept() -> Receipt:
        return open_session(request, session_id, principal).respond(given)

    return wire.dump(await _enqueue(request, accept))


@router.post(
    f"{SESSION}/interrupt",
    response_model=Interrupted,
    summary="session.interrupt(run_id)",
)
async def interrupt(
    request: Request, session_id: SessionId, principal: User, body: Interrupt | None = None
) -> Any:
    run_id = body.run_id if body is not None else None

    def accept() -> bool:
        return open_session(request, session_id, principal).interrupt(run_id)

    return {"interrupted": await _enqueue(request, accept)}


@router.post(
    f"{SESSION}/reconcile",
    status_code=204,
    response_class=Response,
    summary="session.reconcile(outcomes, reason)",
)
def reconcile(
    request: Request, session_id: SessionId, principal: User, body: Reconcile
) -> Response:
    outcomes = {call_id: _outcome(o) for call_id, o in body.outcomes.items()}
    open_session(request, session_id, principal).reconcile(outcomes, body.reason)
    return Response(status_code=204)


@router.post(
    f"{SESSION}/compact",
    status_code=204,
    response_class=Response,
    summary="session.compact()",
)
def compact(request: Request, session_id: SessionId, principal: User) -> Response:
    open_session(request, session_id, principal).compact()
    return Response(status_code=204)
