"""The service's one error mapping: agentnb error type -> HTTP status + RFC 9457 problem.

Every error a route lets out becomes ``application/problem+json``::

    {"type": "QueueFull", "title": "Queue full", "status": 429,
     "detail": "<the error's message: what happened and what to do>",
     "instance": "/v1/sessions/s1/turns", ...extension members}

``type`` is the name of the error's class in ``agentnb.errors`` (a relative URI reference),
so the remote client raises the same class again (``agentnb.client``). The status is that of
the class's nearest listed ancestor in ``STATUS``, so a new subclass inherits its parent's
status, and a test walks the error tree to check every class is covered. The errors that
carry data keep it as extension members (``Parked``: ``turn_id``, ``blocking_turn``,
``blocking_status``; ``QueueFull``: ``queue``, ``limit``; ``UncertainToolCalls``:
``calls``; ``AgentChanged``: ``changes``; ``SessionBusy``: ``turn_id``,
``busy_status``; ``WorkspaceChanged``: ``bound``, ``current``). A body never holds a
stack trace: anything that is not an agentnb error is logged here and answered with a 500
that says only that.
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import BaseModel, ConfigDict

from agentnb import errors, wire
from agentnb.errors import AgentnbError

__all__ = [
    "HTTP_PROBLEMS",
    "PROBLEM_RESPONSES",
    "STATUS",
    "Problem",
    "ProblemModel",
    "problem_body",
    "problem_of",
    "status_of",
]

log = logging.getLogger("agentnb.server")

PROBLEM_JSON = "application/problem+json"

STATUS: dict[type[BaseException], int] = {
    errors.AgentnbError: 500,
    errors.InvalidInput: 400,
    errors.HistoryError: 400,
    errors.Unauthorized: 401,
    errors.SessionNotFound: 404,
    errors.SessionDeleted: 410,
    errors.IdempotencyConflict: 409,
    errors.NotRunning: 409,
    errors.InvalidAnswer: 409,
    errors.CannotResume: 409,
    errors.SessionBusy: 409,
    errors.Parked: 409,
    errors.AgentChanged: 409,
    errors.WorkspaceChanged: 409,
    errors.ReducerFailed: 409,
    errors.MiddlewareFailed: 500,
    errors.SessionArchived: 423,
    errors.QueueFull: 429,
    errors.StorageError: 503,
    errors.AppendConflict: 409,
    errors.LeaseHeld: 409,
    errors.Fenced: 409,
    errors.SessionFull: 409,
    errors.SubagentLimitExceeded: 409,
    errors.EvalRegression: 409,
    errors.ToolsetUnavailable: 503,
    errors.Corrupt: 500,
    errors.ArchiveCorrupt: 422,  # an archive the caller named, not the store
    errors.StoreNotEmpty: 409,
    TimeoutError: 504,
}
"""Status of each error class; a class not listed takes its nearest listed ancestor's."""

HTTP_PROBLEMS: dict[int, tuple[str, str]] = {
    400: ("InvalidInput", "the request is not valid"),
    401: ("Unauthorized", "a valid bearer token or sign-in is required"),
    403: ("Forbidden", "this request needs the CSRF header the sign-in gave"),
    404: ("NotFound", "no such route; see /docs"),
    405: ("MethodNotAllowed", "this route does not take that method; see /docs"),
    413: ("PayloadTooLarge", "the request body is larger than the service accepts"),
    415: ("UnsupportedMediaType", "send JSON (Content-Type: application/json)"),
    421: ("MisdirectedRequest", "this service does not answer to that host name"),
    500: ("InternalError", "the service failed unexpectedly; its log says why"),
}
"""Problems of the HTTP layer itself (no agentnb error behind them): status -> (type, title)."""

RETRY_AFTER = {429: 1, 503: 2}
"""Seconds a client should wait before retrying (``Retry-After``), by status."""


class ProblemModel(BaseModel):
    """An RFC 9457 problem: ``type`` is agentnb's error name, ``detail`` says what to do."""

    model_config = ConfigDict(extra="allow")
    type: str
    title: str
    status: int
    detail: str
    instance: str | None = None


_DESCRIBED = {
    400: "bad input (InvalidInput, InvalidLimit, InvalidCursor, ...); nothing was written",
    401: "no valid token or sign-in (Unauthorized)",
    403: "a signed-in page's change without its CSRF header",
    404: "no such session for this user (SessionNotFound), or no such route",
    409: (
        "a conflict with the session's state or a bound (NotRunning, CannotResume, "
        "SessionBusy, SubagentLimitExceeded, ...)"
    ),
    410: "the session was deleted (SessionDeleted)",
    413: "the request body is too large",
    423: "the session is archived (SessionArchived)",
    429: "a queue is full (QueueFull); retry after Retry-After seconds",
    500: "an unexpected failure (never with a stack trace)",
    503: (
        "the store refused or could not be reached (StorageError), or a toolset would not "
        "start (ToolsetUnavailable)"
    ),
    504: "accepted, but not carried out in time (Timeout)",
}
PROBLEM_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {
        "model": ProblemModel,
        "description": text,
        "content": {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/ProblemModel"}}},
    }
    for status, text in _DESCRIBED.items()
}
"""The problems every route may answer, for the OpenAPI schema."""


def status_of(exc: BaseException) -> int:
    """The HTTP status of ``exc`` (its class's, or its nearest listed ancestor's)."""
    for klass in type(exc).__mro__:
        if klass in STATUS:
            return STATUS[klass]
    return 500


def _title(name: str) -> str:
    words = "".join(f" {c.lower()}" if c.isupper() else c for c in name).strip()
    return words[:1].upper() + words[1:]


class Problem(Exception):
    """An HTTP-level refusal that is not an agentnb error (unknown route, body too large)."""

    def __init__(self, status: int, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.extra = extra


def problem_body(
    status: int, type_: str, detail: str, instance: str | None = None, **extra: Any
) -> dict[str, Any]:
    """An RFC 9457 problem object."""
    body: dict[str, Any] = {
        "type": type_,
        "title": _title(type_),
        "status": status,
        "detail": detail,
    }
    if instance is not None:
        body["instance"] = instance
    body.update(extra)
    return body


def problem_of(exc: BaseException, instance: str | None = None) -> tuple[int, dict[str, Any]]:
    """(status, problem body) for any exception a route raised."""
    if isinstance(exc, Problem):
        type_ = HTTP_PROBLEMS.get(exc.status, ("Problem", ""))[0]
        return exc.status, problem_body(exc.status, type_, exc.detail, instance, **exc.extra)
    if not isinstance(exc, AgentnbError | TimeoutError):
        log.error("unexpected error answering %s", instance, exc_info=exc)
        type_, title = HTTP_PROBLEMS[500]
        return 500, problem_body(500, type_, title, instance)
    status = status_of(exc)
    extra: dict[str, Any] = {}
    if isinstance(exc, errors.Parked):
        extra = {
            "turn_id": exc.turn_id,
            "blocking_turn": exc.blocking_turn,
            "blocking_status": exc.blocking_status,
        }
    elif isinstance(exc, errors.QueueFull):
        extra = {"queue": exc.queue, "limit": exc.limit}
    elif isinstance(exc, errors.UncertainToolCalls):
        extra = {"calls": wire.dump(exc.calls)}
    elif isinstance(exc, errors.AgentChanged):
        extra = {"changes": list(exc.changes)}
    elif isinstance(exc, errors.SubagentLimitExceeded):
        extra = {"limit": exc.limit, "value": exc.value}
    elif isinstance(exc, errors.ToolsetUnavailable):
        extra = {"toolset": exc.toolset}
    elif isinstance(exc, errors.WorkspaceChanged):
        extra = {"bound": exc.bound, "current": exc.current}
    elif isinstance(exc, errors.SessionBusy):
        extra = {"turn_id": exc.turn_id, "busy_status": exc.status}
    type_ = "Timeout" if isinstance(exc, TimeoutError) else type(exc).__name__
    detail = str(exc) or _title(type_)
    if status >= 500:
        log.warning("%s answering %s: %s", type_, instance, detail)
    return status, problem_body(status, type_, detail, instance, **extra)
