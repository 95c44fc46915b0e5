"""``/openai/v1``: the OpenAI Responses and Conversations API over agentnb sessions.

``OpenAI(base_url="http://HOST:PORT/openai/v1", api_key=<agentnb token>)`` drives a
session unchanged: a *conversation* is a session (its id is the session id, so a session
made over ``/v1`` or the chat page is a conversation too), a *response* is the run one
command starts (a task's first run, or the run an answer starts), and ``model`` is the
agent id (``GET /models``).

Nothing is kept here: a response's id names its session, turn, command and the log seq it
was accepted after, and every view of it (``GET /responses/{id}``, its stream, its
resumption with ``starting_after``) is folded from the log by ``ResponseFold``, a pure
function of the committed events. So ``sequence_number`` means the same after a restart of
the server, for as long as the store keeps the session.

Routes: ``GET /models``, ``GET /models/{id}``; ``POST /conversations`` (``metadata``: the
session's labels), ``GET|DELETE /conversations/{id}``, ``GET /conversations/{id}/items``;
``POST /responses`` (``input``, ``conversation``, ``previous_response_id``, ``background``,
``stream``, ``metadata``), ``GET /responses/{id}`` (``stream=true&starting_after=N``),
``POST /responses/{id}/cancel``.

Input items: user messages (text) become a task (``session.submit``); an
``mcp_approval_response`` answers an approval (``approve``, or a rejection with
``reason``); a ``function_call_output`` answers an ``@nb.tool(external=True)`` call or a
question of ``nb.ask_user`` (both are ``function_call`` items of the output). The agent's
own tools show as ``mcp_call`` items (``server_label`` ``agentnb``), approvals as
``mcp_approval_request`` items. Errors are the Responses shape, ``{"error": {"message",
"type", "param", "code"}}``, with the status ``/v1`` gives the same error and ``code`` its
agentnb name; a parameter the door does not support is a 400 naming it.

A model's reasoning is a ``reasoning`` item (one per reasoning part, before the reply's
message) whose summary streams with ``response.reasoning_summary_text.delta``. A stream
whose token stops working ends with an ``error`` event (``code`` ``token_revoked``) that
takes no number of its own (see ``_ended``).
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Annotated, Any

import anyio.to_thread
import orjson
from fastapi import APIRouter, Depends, FastAPI, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from agentnb.answers import Answer
from agentnb.errors import AgentnbError, SessionNotFound, Unauthorized
from agentnb.events import Event, Message
from agentnb.ids import new_id
from agentnb.server.auth import Principal, current_user, open_session
from agentnb.server.doors import Ended, committed, reasoning_of_chunk, reasoning_of_message
from agentnb.server.problems import HTTP_PROBLEMS, Problem, problem_of
from agentnb.session import Session

__all__ = ["PREFIX", "ResponseFold", "create_door", "error_body"]

PREFIX = "/openai/v1"
SERVER_LABEL = "agentnb"
"""The ``server_label`` of the agent's own tools (``mcp_call``, ``mcp_approval_request``)."""
MAX_ITEMS = 100
"""Most items one ``/conversations/{id}/items`` page holds."""

User = Annotated[Principal, Depends(current_user)]

_CREATE_PARAMS = frozenset(
    {
        "model",
        "input",
        "conversation",
        "previous_response_id",
        "background",
        "stream",
        "metadata",
        "store",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "user",
    }
)
"""What ``POST /responses`` takes; any other parameter is a 400 naming it."""
_TERMINAL = frozenset({"completed", "failed", "cancelled", "incomplete"})
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    409: "invalid_request_error",
    410: "invalid_request_error",
    413: "invalid_request_error",
    423: "invalid_request_error",
    429: "rate_limit_error",
}


# -- errors ------------------------------------------------------------------------------------


def error_body(status: int, message: str, code: str, param: str | None = None) -> dict[str, Any]:
    """The Responses API's error object."""
    kind = _ERROR_TYPES.get(status, "server_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def _refuse(param: str, message: str) -> Problem:
    """A 400 about one parameter of the request (nothing was written)."""
    return Problem(400, message, param=param)


def _error_response(exc: BaseException, path: str) -> JSONResponse:
    status, body = problem_of(exc, path)
    param = body.get("param") if isinstance(exc, Problem) else None
    headers = {"WWW-Authenticate": 'Bearer realm="agentnb"'} if status == 401 else {}
    return JSONResponse(
        error_body(status, body["detail"], body["type"], param), status, headers=headers
    )


# -- ids -----------------------------------------------------------------------------------


def _response_id(
    session_id: str, turn_id: str, command_id: str, after: int, created: int, background: bool
) -> str:
    raw = orjson.dumps([session_id, turn_id, command_id, after, created, int(background)])
    return "resp_" + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _parse_response_id(response_id: str) -> tuple[str, str, str, int, int, bool]:
    """(session id, turn id, command id, seq accepted after, created_at, background);
    ``SessionNotFound`` for an id this door did not make."""
    try:
        if not response_id.startswith("resp_") or len(response_id) > 2048:
            raise ValueError
        text = response_id[5:]
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        sid, turn, command, after, created, background = orjson.loads(raw)
        if not all(isinstance(v, str) for v in (sid, turn, command)):
            raise ValueError
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (after, created)):
            raise ValueError
        return sid, turn, command, after, created, bool(background)
    except (ValueError, TypeError, binascii.Error, orjson.JSONDecodeError):
        raise SessionNotFound(
            f"no response {response_id[:80]!r}; response ids are those POST /responses made"
        ) from None


# -- the fold ----------------------------------------------------------------------------------


class ResponseFold:
    """The Responses view of one command's run, folded from committed events.

    ``apply(event)`` returns the stream events the event makes (their
    ``sequence_number`` is their place in the whole list, from ``response.created`` at 0);
    ``response()`` is the Response object as of the events applied. Pure: the same events
    give the same output, which is what makes ``starting_after`` exact.
    """

    def __init__(
        self,
        response_id: str,
        *,
        session_id: str,
        turn_id: str,
        command_id: str,
        model: str,
        created_at: int,
        background: bool,
        external: frozenset[str] = frozenset(),
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        self.id = response_id
        self.session_id = session_id
        self.turn_id = turn_id
        self.command_id = command_id
        self.model = model
        self.created_at = created_at
        self.background = background
        self.external = external
        """Tools whose results a person brings (external ones, ``ask_user``): no mcp_call."""
        self.metadata = dict(metadata or {})
        self.status = "queued"
        self.run_id: str | None = None
        self.output: list[dict[str, Any]] = []
        self.error: dict[str, Any] | None = None
        self.incomplete: dict[str, Any] | None = None
        self.usage = {"input": 0, "output": 0, "cached": 0, "reasoning": 0}
        self.seen_usage = False
        self.sequence = 0
        self._text: dict[str, int] = {}
        """Open message items by model call id -> their output index."""
        self._reasoning: dict[str, tuple[int, int]] = {}
        """Open reasoning items by model call id -> (reasoning part index, output index)."""
        self._reasoned: set[tuple[str, int]] = set()
        """Reasoning parts streamed (model call id, index): the reply does not repeat them."""
        self._calls: dict[str, int] = {}
        """mcp_call items by call id -> output index."""

    @property
    def done(self) -> bool:
        return self.status in _TERMINAL

    def start(self) -> list[dict[str, Any]]:
        """The stream's first event (``response.created``)."""
        return [self._event("response.created", response=self.response())]

    def _event(self, type_: str, **fields: Any) -> dict[str, Any]:
        event = {"type": type_, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return event

    def response(self) -> dict[str, Any]:
        usage = None
        if self.seen_usage:
            u = self.usage
            usage = {
                "input_tokens": u["input"],
                "input_tokens_details": {"cached_tokens": u["cached"]},
                "output_tokens": u["output"],
                "output_tokens_details": {"reasoning_tokens": u["reasoning"]},
                "total_tokens": u["input"] + u["output"],
            }
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": self.status,
            "background": self.background,
            "model": self.model,
            "output": [dict(item) for item in self.output],
            "usage": usage,
            "error": self.error,
            "incomplete_details": self.incomplete,
            "metadata": self.metadata,
            "conversation": {"id": self.session_id},
            "previous_response_id": None,
            "instructions": None,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "temperature": None,
            "top_p": None,
            "text": {"format": {"type": "text"}},
            "truncation": "disabled",
            "store": True,
        }

    def apply(self, event: Event) -> list[dict[str, Any]]:
        if self.done or event.turn_id != self.turn_id:
            return []
        p = event.payload
        if self.run_id is None:
            if event.type == "run/start" and p.get("command_id") == self.command_id:
                self.run_id = event.run_id
                self.status = "in_progress"
                return [self._event("response.in_progress", response=self.response())]
            if event.type in ("turn/cancelled", "turn/failed"):
                return self._end("cancelled" if event.type == "turn/cancelled" else "failed", p)
            return []
        if event.run_id != self.run_id and event.type != "turn/cancelled":
            return []
        handler = _HANDLERS.get(event.type)
        return handler(self, p) if handler is not None else []

    # -- per event type --------------------------------------------------------------------

    def _on_chunk(self, p: Mapping[str, Any]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        call = str(p.get("model_call_id"))
        # A chunk's reasoning came before its text: the model thinks, then answers.
        for part, delta in reasoning_of_chunk(p):
            self._reason(call, part, delta, out)
        text = str(p.get("text") or "")
        if text:
            self._close_reasoning(call, out)
            index = self._open_text(call, out)
            out.append(
                self._event(
                    "response.output_text.delta",
                    item_id=self.output[index]["id"],
                    output_index=index,
                    content_index=0,
                    delta=text,
                    logprobs=[],
                )
            )
            self.output[index]["content"][0]["text"] += text
        return out

    def _reason(self, call: str, part: int, delta: str, out: list[dict[str, Any]]) -> None:
        """A piece of reasoning part ``part`` of ``call``: a ``reasoning`` item whose one
        summary is the part's text, opened as needed."""
        opened = self._reasoning.get(call)
        if opened is None or opened[0] != part:
            self._close_reasoning(call, out)
            item: dict[str, Any] = {
                "id": f"rs_{call}_{part}",
                "type": "reasoning",
                "summary": [],
                "status": "in_progress",
            }
            index = self._add(item, out)
            self._reasoning[call] = (part, index)
            self._reasoned.add((call, part))
            self.output[index]["summary"] = [{"type": "summary_text", "text": ""}]
            out.append(
                self._event(
                    "response.reasoning_summary_part.added",
                    item_id=item["id"],
                    output_index=index,
                    summary_index=0,
                    part={"type": "summary_text", "text": ""},
                )
            )
        _, index = self._reasoning[call]
        item = self.output[index]
        out.append(
            self._event(
                "response.reasoning_summary_text.delta",
                item_id=item["id"],
                output_index=index,
                summary_index=0,
                delta=delta,
            )
        )
        item["summary"][0]["text"] += delta

    def _close_reasoning(self, call: str, out: list[dict[str, Any]]) -> None:
        opened = self._reasoning.pop(call, None)
        if opened is None:
            return
        index = opened[1]
        item = self.output[index]
        summary = dict(item["summary"][0])
        common = {"item_id": item["id"], "output_index": index, "summary_index": 0}
        out.append(
            self._event("response.reasoning_summary_text.done", text=summary["text"], **common)
        )
        out.append(self._event("response.reasoning_summary_part.done", part=summary, **common))
        item["summary"], item["status"] = [summary], "completed"
        self._done(index, out)

    def _add(self, item: dict[str, Any], out: list[dict[str, Any]]) -> int:
        self.output.append(item)
        index = len(self.output) - 1
        out.append(self._event("response.output_item.added", output_index=index, item=dict(item)))
        return index

    def _done(self, index: int, out: list[dict[str, Any]]) -> None:
        item = self.output[index]
        out.append(self._event("response.output_item.done", output_index=index, item=dict(item)))

    def _open_text(self, call: str, out: list[dict[str, Any]]) -> int:
        index = self._text.get(call)
        if index is not None:
            return index
        item_id = f"msg_{call}"
        item = {
            "id": item_id,
            "type": "message",
            "role": "assistant",
            "status": "in_progress",
            "content": [],
        }
        index = self._add(item, out)
        part = {"type": "output_text", "text": "", "annotations": []}
        self.output[index]["content"] = [part]
        out.append(
            self._event(
                "response.content_part.added",
                item_id=item_id,
                output_index=index,
                content_index=0,
                part=dict(part),
            )
        )
        self._text[call] = index
        return index

    def _on_assistant(self, p: Mapping[str, Any]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        message = p.get("message") or {}
        call = str(p.get("model_call_id"))
        text = str(message.get("text") or "")
        if call not in self._text:
            # Reasoning no chunk carried (a stream taken up after it): whole, before the text.
            for part, thought in reasoning_of_message(p):
                if (call, part) not in self._reasoned:
                    self._reason(call, part, thought, out)
        self._close_reasoning(call, out)
        self._reasoned = {r for r in self._reasoned if r[0] != call}
        index = self._text.pop(call, None)
        if index is None:
            if not text:
                return out
            index = self._open_text(call, out)
            self._text.pop(call)
        item = self.output[index]
        part = item["content"][0]
        if text and part["text"] != text:  # the message is the truth; chunks may be coarser
            part["text"] = text
        item["status"] = "completed"
        common = {"item_id": item["id"], "output_index": index, "content_index": 0}
        out.append(
            self._event("response.output_text.done", text=part["text"], logprobs=[], **common)
        )
        out.append(self._event("response.content_part.done", part=dict(part), **common))
        item["content"] = [dict(part)]
        self._done(index, out)
        return out

    def _on_dispatch(self, p: Mapping[str, Any]) -> list[dict[str, Any]]:
        call_id = str(p.get("call_id"))
        if call_id in self._calls or p.get("name") in self.external:
            return []
        out: list[dict[str, Any]] = []
        self._calls[call_id] = self._add(self._mcp_call(p, call_id), out)
        return out

    def _mcp_call(self, p: Mapping[str, Any], call_id: str) -> dict[str, Any]:
        return {
            "id": f"mcp_{call_id}",
            "type": "mcp_call",
            "server_label": SERVER_LABEL,
            "name": str(p.get("name")),
            "arguments": json.dumps(p.get("arguments") or {}),
            "output": None,
            "error": None,
            "status": "in_progress",
        }

    def _on_result(self, p: Mapping[str, Any]) -> list[dict[str, Any]]:
        call_id = str(p.get("call_id"))
        status = p.get("status")
        out: list[dict[str, Any]] = []
        index = self._calls.pop(call_id, None)
        if index is None:
            if status not in ("denied", "cancelled") or p.get("name") in self.external:
                return []  # a person's answer (an external call's output): its own item
            index = self._add(self._mcp_call({"name": p.get("name")}, call_id), out)
        item = self.output[index]
        text = str(p.get("output") or "")
        if status == "success":
            item["output"], item["status"] = text, "completed"
        else:
            item["error"], item["status"] = f"{status}: {text}", "failed"
        self._done(index, out)
        return out

    def _on_request(self, p: Mapping[str, Any]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        request_id = str(p.get("request_id"))
        arguments = json.dumps(p.get("arguments") or {})
        if p.get("kind") == "confirmation":
            item = {
                "id": request_id,
                "type": "mcp_approval_request",
                "server_label": SERVER_LABEL,
                "name": str(p.get("tool_name")),
                "arguments": arguments,
            }
            self._done(self._add(item, out), out)
            return out
        name = str(p.get("tool_name") or "ask_user")
        item_id = f"fc_{request_id}"
        item = {
            "id": item_id,
            "type": "function_call",
            "call_id": str(p.get("call_id") or request_id),
            "name": name,
            "arguments": "",
            "status": "in_progress",
        }
        index = self._add(item, out)
        common = {"item_id": item_id, "output_index": index}
        out.append(self._event("response.function_call_arguments.delta", delta=arguments, **common))
        out.append(
            self._event(
                "response.function_call_arguments.done", arguments=arguments, name=name, **common
            )
        )
        self.output[index].update(arguments=arguments, status="completed")
        self._done(index, out)
        return out

    def _on_model_end(self, p: Mapping[str, Any]) -> list[dict[str, Any]]:
        self.seen_usage = True
        for name, field in (
            ("input", "input_tokens"),
            ("output", "output_tokens"),
            ("cached", "cached_tokens"),
            ("reasoning", "reasoning_tokens"),
        ):
            self.usage[name] += int(p.get(field) or 0)
        return []

    def _on_run_end(self, p: Mapping[str, Any]) -> list[dict[str, Any]]:
        status = p.get("status")
        if status in ("completed", "suspended"):
            return self._end("completed", p)
        if status == "failed":
            return self._end("failed", p)
        # Stopped by a person (cancel, or an interrupt from any door): the response is
        # cancelled (its turn may still be resumed, as a new run). Stopped by anything else
        # (a crash, a time limit, a worker going away): incomplete, with the reason.
        if status == "cancelled" or p.get("stop_reason") == "interrupted":
            return self._end("cancelled", p)
        return self._end("incomplete", p)

    def _on_turn_cancelled(self, p: Mapping[str, Any]) -> list[dict[str, Any]]:
        return self._end("cancelled", p)

    def _end(self, status: str, p: Mapping[str, Any]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        reasoning = [index for _, index in self._reasoning.values()]
        for index in [*self._text.values(), *reasoning, *self._calls.values()]:
            self.output[index]["status"] = "incomplete"
            self._done(index, out)
        self._text.clear()
        self._reasoning.clear()
        self._calls.clear()
        self.status = status
        if status == "failed":
            message = str(p.get("error") or p.get("reason") or "the run failed")
            self.error = {"code": "server_error", "message": message}
        elif status == "incomplete":
            self.incomplete = {"reason": str(p.get("stop_reason") or "interrupted")}
        kind = {"completed": "completed", "failed": "failed", "cancelled": "cancelled"}
        out.append(
            self._event(f"response.{kind.get(status, 'incomplete')}", response=self.response())
        )
        return out


_HANDLERS = {
    "model/chunk": ResponseFold._on_chunk,
    "message/assistant": ResponseFold._on_assistant,
    "tool/dispatch": ResponseFold._on_dispatch,
    "tool/result": ResponseFold._on_result,
    "interaction/requested": ResponseFold._on_request,
    "model/end": ResponseFold._on_model_end,
    "run/end": ResponseFold._on_run_end,
    "turn/cancelled": ResponseFold._on_turn_cancelled,
}


# -- reading a response from the log -------------------------------------------------------------


def _fold_of(
    request: Request, response_id: str, principal: Principal
) -> tuple[Session, ResponseFold, int]:
    """The session of ``response_id`` (404 if not the principal's) and a fresh fold of it:
    (session, fold, the seq to read after)."""
    sid, turn, command, after, created, background = _parse_response_id(response_id)
    session = open_session(request, sid, principal)
    agent = session.runtime.agent
    external = frozenset(
        {"ask_user"} | {t.name for t in agent.tools if getattr(t, "external", False)}
    )
    record = session.runtime.store.get_session(session.key)
    labels = dict(record.labels) if record is not None else {}
    fold = ResponseFold(
        response_id,
        session_id=sid,
        turn_id=turn,
        command_id=command,
        model=agent.agent_id,
        created_at=created,
        background=background,
        external=external,
        metadata=labels,
    )
    return session, fold, after


def _read(session: Session, fold: ResponseFold, after: int) -> None:
    """Fold what the log holds now (a worker thread)."""
    fold.start()
    for event in session.log.scan(after):
        fold.apply(event)
        if fold.done:
            return


async def _stream(
    request: Request,
    session: Session,
    fold: ResponseFold,
    after: int,
    starting_after: int,
    principal: Principal,
) -> AsyncIterator[bytes]:
    """The response's events after ``starting_after`` (-1: all), folded as they commit."""
    for event in fold.start():
        if event["sequence_number"] > starting_after:
            yield _sse(event)
    async for committed_event in committed(request, session, after, principal):
        if committed_event is None:
            yield b": keepalive\n\n"
            continue
        if isinstance(committed_event, Ended):
            yield _sse(_ended(fold, committed_event, starting_after))
            return
        chunk = b"".join(
            _sse(e) for e in fold.apply(committed_event) if e["sequence_number"] > starting_after
        )
        if chunk:
            yield chunk
        if fold.done:
            return


def _ended(fold: ResponseFold, ended: Ended, starting_after: int) -> dict[str, Any]:
    """The ``error`` event that ends a stream whose token stopped working. The response
    itself goes on (it is not ``failed``), so the event takes no place of its own in the
    response's numbering: it carries the last number the client holds, and a stream
    resumed ``starting_after`` it (with a working token) misses nothing."""
    return {
        "type": "error",
        "code": "token_revoked",
        "message": f"{ended.reason}: sign in again and resume the stream with starting_after",
        "param": None,
        "sequence_number": max(starting_after, fold.sequence - 1),
    }


async def _settle(
    request: Request, session: Session, fold: ResponseFold, after: int, principal: Principal
) -> None:
    """Fold until the response ends (401 if the token stops working meanwhile)."""
    fold.start()
    async for event in committed(request, session, after, principal):
        if isinstance(event, Ended):
            raise Unauthorized(f"{event.reason}; the response goes on: retrieve it later")
        if event is not None:
            fold.apply(event)
        if fold.done:
            return


def _sse(event: Mapping[str, Any]) -> bytes:
    return b"event: " + str(event["type"]).encode() + b"\ndata: " + orjson.dumps(event) + b"\n\n"


def _streaming(body: AsyncIterator[bytes]) -> StreamingResponse:
    return StreamingResponse(
        body,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


# -- parsing a request -------------------------------------------------------------------------


async def _body(request: Request) -> dict[str, Any]:
    try:
        body = orjson.loads(await request.body())
    except orjson.JSONDecodeError:
        raise _refuse("body", "the request body is not JSON") from None
    if not isinstance(body, dict):
        raise _refuse("body", "the request body must be a JSON object")
    return body


def _text_of(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _refuse(where, f"{where} must be a string or a list of input_text parts")
    texts = []
    for i, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") not in ("input_text", "output_text"):
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            raise _refuse(
                f"{where}[{i}]", f"{where}[{i}]: only text parts are supported, got {kind!r}"
            )
        text = part.get("text")
        if not isinstance(text, str):
            raise _refuse(f"{where}[{i}].text", f"{where}[{i}].text must be a string")
        texts.append(text)
    return "".join(texts)


def _parse_input(value: Any) -> tuple[str, dict[str, Any], dict[str, str]]:
    """(task text, approvals by request id, outputs by call id) of ``input``."""
    if isinstance(value, str):
        return value, {}, {}
    if not isinstance(value, list) or not value:
        raise _refuse("input", "input must be a string or a non-empty list of items")
    texts: list[str] = []
    approvals: dict[str, Any] = {}
    outputs: dict[str, str] = {}
    for i, item in enumerate(value):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise _refuse(where, f"{where} must be an object")
        kind = item.get("type", "message")
        if kind == "message":
            if item.get("role") != "user":
                raise _refuse(
                    f"{where}.role",
                    f"{where}.role: only user messages are taken (the agent's instructions "
                    f"and the conversation's history are its own), got {item.get('role')!r}",
                )
            texts.append(_text_of(item.get("content"), f"{where}.content"))
        elif kind == "mcp_approval_response":
            request_id = item.get("approval_request_id")
            approve = item.get("approve")
            if not isinstance(request_id, str) or not isinstance(approve, bool):
                raise _refuse(
                    where,
                    f"{where}: an mcp_approval_response needs approval_request_id and approve",
                )
            reason = item.get("reason")
            approvals[request_id] = (
                True
                if approve
                else Answer.reject(reason)
                if isinstance(reason, str) and reason
                else False
            )
        elif kind == "function_call_output":
            call_id = item.get("call_id")
            if not isinstance(call_id, str):
                raise _refuse(f"{where}.call_id", f"{where}: a function_call_output needs call_id")
            outputs[call_id] = _text_of(item.get("output"), f"{where}.output")
        else:
            raise _refuse(f"{where}.type", f"{where}.type {kind!r} is not supported by agentnb")
    if texts and (approvals or outputs):
        raise _refuse(
            "input",
            "input mixes a new message with answers: answer first (its response continues "
            "the turn), then send the message",
        )
    return "\n\n".join(texts), approvals, outputs


def _check_params(body: Mapping[str, Any], agent_id: str, tool_names: Iterable[str]) -> None:
    for name in body:
        if name not in _CREATE_PARAMS:
            raise _refuse(name, f"parameter {name!r} is not supported by agentnb's Responses door")
    model = body.get("model")
    if model is not None and model != agent_id:
        raise _refuse(
            "model", f"model {model!r} is not served here; GET /models lists {agent_id!r}"
        )
    if body.get("store") is False:
        raise _refuse("store", "store=false is not supported: every response is in the log")
    choice = body.get("tool_choice")
    if choice not in (None, "auto"):
        raise _refuse("tool_choice", "tool_choice: only 'auto' is supported (the agent chooses)")
    tools = body.get("tools")
    if tools is not None:
        known = set(tool_names)
        if not isinstance(tools, list):
            raise _refuse("tools", "tools must be a list")
        for i, tool in enumerate(tools):
            kind = tool.get("type") if isinstance(tool, dict) else None
            tool_name = tool.get("name") if isinstance(tool, dict) else None
            if kind != "function":
                raise _refuse(
                    f"tools[{i}]", f"tools[{i}]: hosted tools ({kind!r}) are not supported"
                )
            if tool_name not in known:
                raise _refuse(
                    f"tools[{i}]",
                    f"tools[{i}]: the agent has no tool {tool_name!r}; its tools are its own "
                    "(GET /v1/agent lists them)",
                )
    for flag in ("background", "stream"):
        if body.get(flag) not in (None, True, False):
            raise _refuse(flag, f"{flag} must be a boolean")
    metadata = body.get("metadata")
    if metadata is not None and (
        not isinstance(metadata, dict)
        or len(metadata) > 16
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())
    ):
        raise _refuse("metadata", "metadata must be at most 16 string keys with string values")


def _conversation_id(body: Mapping[str, Any]) -> str | None:
    conversation = body.get("conversation")
    if conversation is None:
        return None
    if isinstance(conversation, dict):
        conversation = conversation.get("id")
    if not isinstance(conversation, str) or not conversation:
        raise _refuse("conversation", "conversation must be an id or {'id': ...}")
    return conversation


# -- routes --------------------------------------------------------------------------------------

router = APIRouter()


@router.get("/models", summary="The agent this service serves, as a model")
def models(request: Request, principal: User) -> dict[str, Any]:
    return {"object": "list", "data": [_model(request)]}


@router.get("/models/{model_id}", summary="One served model")
def model(request: Request, model_id: str, principal: User) -> dict[str, Any]:
    data = _model(request)
    if model_id != data["id"]:
        raise SessionNotFound(f"no model {model_id!r} here; GET /models lists {data['id']!r}")
    return data


def _model(request: Request) -> dict[str, Any]:
    agent = request.app.state.runtime.agent
    return {"id": agent.agent_id, "object": "model", "created": 0, "owned_by": SERVER_LABEL}


def _conversation(session: Session) -> dict[str, Any]:
    record = session.runtime.store.get_session(session.key)
    if record is None:
        raise SessionNotFound(f"conversation {session.key.session_id!r} was deleted meanwhile")
    return {
        "id": session.key.session_id,
        "object": "conversation",
        "created_at": int(record.created_at),
        "metadata": dict(record.labels),
    }


@router.post("/conversations", summary="A new conversation (a new session)")
async def create_conversation(request: Request, principal: User) -> dict[str, Any]:
    body = await _body(request)
    for name in body:
        if name not in ("items", "metadata"):
            raise _refuse(name, f"parameter {name!r} is not supported")
    if body.get("items"):
        raise _refuse(
            "items",
            "items: a conversation starts empty here; send the first message as the input "
            "of POST /responses with this conversation",
        )
    metadata = body.get("metadata") or {}
    _check_params({"metadata": metadata}, "", ())

    def create() -> dict[str, Any]:
        runtime = request.app.state.runtime
        session = runtime.session(new_id("conv"), user_id=principal.user_id)
        if metadata:
            session.update(labels=metadata)
        return _conversation(session)

    return await anyio.to_thread.run_sync(create)


@router.get("/conversations/{conversation_id}", summary="A conversation (a session)")
async def get_conversation(
    request: Request, conversation_id: str, principal: User
) -> dict[str, Any]:
    def read() -> dict[str, Any]:
        return _conversation(open_session(request, conversation_id, principal))

    return await anyio.to_thread.run_sync(read)


@router.delete("/conversations/{conversation_id}", summary="Delete a conversation")
async def delete_conversation(
    request: Request, conversation_id: str, principal: User
) -> dict[str, Any]:
    def delete() -> None:
        open_session(request, conversation_id, principal).delete()

    await anyio.to_thread.run_sync(delete)
    return {"id": conversation_id, "object": "conversation.deleted", "deleted": True}


def _items_of(message: Message) -> list[dict[str, Any]]:
    if message.role == "tool":
        return [
            {
                "id": message.id,
                "type": "function_call_output",
                "call_id": message.call_id,
                "output": message.text,
                "status": "completed",
            }
        ]
    items: list[dict[str, Any]] = [
        {
            "id": f"rs_{message.id}_{i}",
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": part.text}],
            "status": "completed",
        }
        for i, part in enumerate(message.reasoning)
        if part.text
    ]
    if message.text or not message.tool_calls:
        kind = "output_text" if message.role == "assistant" else "input_text"
        part: dict[str, Any] = {"type": kind, "text": message.text}
        if kind == "output_text":
            part["annotations"] = []
        items.append(
            {
                "id": message.id,
                "type": "message",
                "role": message.role,
                "status": "completed",
                "content": [part],
            }
        )
    for call in message.tool_calls:
        items.append(
            {
                "id": f"fc_{call.call_id}",
                "type": "function_call",
                "call_id": call.call_id,
                "name": call.name,
                "arguments": json.dumps(call.arguments),
                "status": "completed",
            }
        )
    return items


@router.get("/conversations/{conversation_id}/items", summary="A conversation's items")
async def conversation_items(
    request: Request,
    conversation_id: str,
    principal: User,
    limit: Annotated[int, Query(ge=1, le=MAX_ITEMS)] = 20,
    order: Annotated[str, Query(pattern="^(asc|desc)$")] = "desc",
    after: str | None = None,
) -> dict[str, Any]:
    def read() -> list[dict[str, Any]]:
        session = open_session(request, conversation_id, principal)
        return [item for m in session.transcript().messages for item in _items_of(m)]

    items = await anyio.to_thread.run_sync(read)
    if order == "desc":
        items.reverse()
    if after is not None:
        ids = [item["id"] for item in items]
        if after not in ids:
            raise _refuse("after", f"after: the conversation has no item {after[:80]!r}")
        items = items[ids.index(after) + 1 :]
    page = items[:limit]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": len(items) > limit,
    }


def _accept(
    request: Request, principal: Principal, body: Mapping[str, Any]
) -> tuple[str, Session, int]:
    """Submit the task (or send the answers) of a checked request (a worker thread): the
    response id, its session and the seq it was accepted after."""
    runtime = request.app.state.runtime
    text, approvals, outputs = _parse_input(body["input"])
    sid = _conversation_id(body)
    previous = body.get("previous_response_id")
    if previous is not None:
        if not isinstance(previous, str):
            raise _refuse("previous_response_id", "previous_response_id must be a string")
        prev_sid = _parse_response_id(previous)[0]
        if sid is not None and sid != prev_sid:
            raise _refuse(
                "previous_response_id",
                "previous_response_id belongs to another conversation than conversation",
            )
        sid = prev_sid
    if sid is None and (approvals or outputs):
        raise _refuse(
            "input",
            "answers need the conversation they answer (conversation or previous_response_id)",
        )
    if not (approvals or outputs) and not text.strip():
        raise _refuse("input", "input holds no text: send the task to do")
    if sid is None:
        session = runtime.session(new_id("conv"), user_id=principal.user_id)
    else:
        session = open_session(request, sid, principal)
    after = session.log.head()
    if approvals or outputs:
        receipt = session.respond(_answers(session, approvals, outputs))
    else:
        receipt = session.submit(text, key=request.headers.get("Idempotency-Key"))
    if body.get("metadata"):
        session.update(labels=body["metadata"])
    rid = _response_id(
        session.key.session_id,
        receipt.turn_id,
        receipt.command_id,
        after,
        int(time.time()),
        bool(body.get("background")),
    )
    return rid, session, after


def _answers(
    session: Session, approvals: Mapping[str, Any], outputs: Mapping[str, str]
) -> dict[str, Any]:
    """The answers for ``session.respond``: function call outputs by the request of the
    pending call they name (``InvalidInput`` for a call that is not pending)."""
    answers: dict[str, Any] = dict(approvals)
    if outputs:
        by_call = {(i.call_id or i.request_id): i.request_id for i in session.pending().values()}
        for call_id, output in outputs.items():
            if call_id not in by_call:
                raise _refuse(
                    "input",
                    f"no pending function call {call_id[:80]!r} in this conversation; its "
                    "pending calls are the function_call items of its last response",
                )
            answers[by_call[call_id]] = output
    return answers


@router.post("/responses", summary="A response: a task (or answers) for a conversation")
async def create_response(request: Request, principal: User) -> Response:
    body = await _body(request)
    agent = request.app.state.runtime.agent
    _check_params(body, agent.agent_id, (t.name for t in agent.tools))
    if "input" not in body:
        raise _refuse("input", "input is required")
    rid, session, after = await anyio.to_thread.run_sync(_accept, request, principal, body)
    _, fold, _ = await anyio.to_thread.run_sync(_fold_of, request, rid, principal)
    if body.get("stream"):
        return _streaming(_stream(request, session, fold, after, -1, principal))
    if body.get("background"):
        await anyio.to_thread.run_sync(_read, session, fold, after)
    else:
        await _settle(request, session, fold, after, principal)
    return JSONResponse(fold.response())


@router.get("/responses/{response_id}", summary="A response, or its stream resumed")
async def get_response(
    request: Request,
    response_id: str,
    principal: User,
    stream: bool = False,
    starting_after: Annotated[int | None, Query(ge=-1)] = None,
) -> Response:
    session, fold, after = await anyio.to_thread.run_sync(_fold_of, request, response_id, principal)
    if stream:
        start = -1 if starting_after is None else starting_after
        return _streaming(_stream(request, session, fold, after, start, principal))
    if starting_after is not None:
        raise _refuse("starting_after", "starting_after needs stream=true")
    await anyio.to_thread.run_sync(_read, session, fold, after)
    return JSONResponse(fold.response())


@router.post("/responses/{response_id}/cancel", summary="Cancel a response (its turn)")
async def cancel_response(request: Request, response_id: str, principal: User) -> Response:
    session, fold, after = await anyio.to_thread.run_sync(_fold_of, request, response_id, principal)
    await anyio.to_thread.run_sync(_read, session, fold, after)
    if not fold.done:
        await anyio.to_thread.run_sync(session.cancel, fold.turn_id)
        session, fold, after = await anyio.to_thread.run_sync(
            _fold_of, request, response_id, principal
        )
        await _settle(request, session, fold, after, principal)
    return JSONResponse(fold.response())


# -- the door ------------------------------------------------------------------------------------


class _BodyLimit:
    """Refuses request bodies over ``limit`` bytes (declared or streamed) with a 413 in the
    Responses shape, before a route reads them (``create_app``'s own limit skips the door)."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        message = (
            f"the request body is larger than this service accepts ({self.limit} bytes); send less"
        )
        declared = dict(scope.get("headers") or ()).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            response = JSONResponse(error_body(413, message, "PayloadTooLarge"), 413)
            await response(scope, receive, send)
            return
        seen = 0

        async def limited() -> Any:
            nonlocal seen
            got = await receive()
            if got["type"] == "http.request":
                seen += len(got.get("body", b""))
                if seen > self.limit:
                    raise StarletteHTTPException(413, message)
            return got

        await self.app(scope, limited, send)


def create_door(parent: FastAPI, max_body: int) -> FastAPI:
    """The door as an app mounted at ``PREFIX`` by ``create_app``: the parent's runtime,
    tokens and feeds, the Responses API's error shape, bodies up to ``max_body`` bytes."""
    door = FastAPI(
        title="agentnb: OpenAI Responses and Conversations",
        description=__doc__,
        docs_url=None,
        redoc_url=None,
    )
    door.state.runtime = parent.state.runtime
    door.state.auth = parent.state.auth
    door.state.feeds = parent.state.feeds
    door.state.token_watch = parent.state.token_watch
    door.include_router(router)

    @door.exception_handler(AgentnbError)
    @door.exception_handler(Problem)
    @door.exception_handler(TimeoutError)
    @door.exception_handler(Exception)
    async def _error(request: Request, exc: Exception) -> Response:
        return _error_response(exc, request.url.path)

    @door.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> Response:
        errors = exc.errors()
        first = errors[0] if errors else {}
        param = ".".join(str(p) for p in first.get("loc", ())[1:]) or None
        message = f"the request is not valid: {param}: {first.get('msg', 'invalid')}"
        return JSONResponse(error_body(400, message, "InvalidInput", param), 400)

    @door.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        code, title = HTTP_PROBLEMS.get(exc.status_code, ("Problem", "the request failed"))
        message = exc.detail if isinstance(exc.detail, str) and exc.status_code != 404 else title
        return JSONResponse(error_body(exc.status_code, message, code), exc.status_code)

    door.add_middleware(_BodyLimit, limit=max_body)
    return door
