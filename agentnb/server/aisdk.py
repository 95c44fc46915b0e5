"""``/aisdk/chat``: the AI SDK UI message stream (v1) over sessions, for ``useChat``.

``useChat({transport: new DefaultChatTransport({api: "/aisdk/chat", headers: {Authorization:
"Bearer <token>"}}), resume: true})`` drives a session: the chat ``id`` is the session id
(scoped to the token's user, created on first use). Of the ``messages`` a request carries only
the last one is read (the log is the history): a user message's text becomes a task
(``session.submit``); an assistant message whose tool parts were answered in the client
(``addToolApprovalResponse`` → ``approval-responded``; ``addToolOutput`` for an external tool
or a question → ``output-available``) answers those requests (``session.respond``).

The response is ``text/event-stream`` with ``x-vercel-ai-ui-message-stream: v1``: ``start``
(``messageId`` is the run id), ``start-step`` / ``finish-step`` per step, ``text-start/-delta/
-end``, ``reasoning-start/-delta/-end`` (when a model streams reasoning),
``tool-input-start/-delta/-available``, ``tool-approval-request`` (``approvalId`` is the
request id), ``tool-output-available`` / ``-error`` / ``-denied``, ``data-agentnb-plan`` (the
plan, as ``nb.todo`` writes it) and ``data-agentnb-status`` (the run's status at its start and
end), ``finish`` (``finishReason``: ``stop``, ``tool-calls`` when the turn waits for a person,
``error``, ``other``), then ``[DONE]``. An ``@nb.tool(external=True)`` call and ``ask_user``
are tool calls without output: the client's ``onToolCall`` / ``addToolOutput`` answers them.

``GET /aisdk/chat/{id}/stream`` (``resume: true``) replays the running turn's current run from
its start out of the log — no Redis, no ``resumable-stream`` — and follows it to its end; 204
when nothing runs. ``POST /aisdk/chat/{id}/stop`` cancels the running turn (a client's abort
only disconnects it): ``{"stopped": false}`` when nothing runs.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Annotated, Any

import anyio.to_thread
import orjson
from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentnb.answers import Answer
from agentnb.errors import InvalidAnswer, InvalidInput
from agentnb.events import Event
from agentnb.server.auth import Principal, check_session_id, current_user, open_session
from agentnb.server.doors import Ended, committed, reasoning_of_chunk, reasoning_of_message
from agentnb.server.problems import PROBLEM_RESPONSES
from agentnb.session import Session

__all__ = ["HEADERS", "ChatRequest", "PartTranslator", "router"]

router = APIRouter(tags=["aisdk"], responses=PROBLEM_RESPONSES)
User = Annotated[Principal, Depends(current_user)]

HEADERS = {
    "x-vercel-ai-ui-message-stream": "v1",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}
"""The headers of every UI message stream (the SDK refuses a stream without the first)."""
_BACK = 16
"""Events read by the first look back for a run's start (``GET .../stream``)."""
_BACK_MAX = 4096
"""Most events one look back reads."""
_FINISH = {"completed": "stop", "suspended": "tool-calls", "failed": "error"}


class ChatRequest(BaseModel):
    """What ``DefaultChatTransport`` posts."""

    model_config = ConfigDict(extra="allow")
    id: str = Field(description="the chat id: the session id")
    messages: list[dict[str, Any]] = Field(min_length=1)
    trigger: str = "submit-message"
    messageId: str | None = None  # the SDK's own field name


class PartTranslator:
    """UI message stream parts from a session's committed events: a pure fold.

    ``follow(event)`` says whether a ``run/start`` starts the run to translate; the parts of
    that run come out until its ``run/end`` (then ``finished``). ``started`` marks a run
    taken up after its start (a resumed stream that reads from the run's start on)."""

    def __init__(
        self, follow: Callable[[Event], bool], external: frozenset[str], *, continues: bool = False
    ) -> None:
        self.follow = follow
        self.continues = continues
        """The run continues the client's last assistant message (answers): no new id."""
        self.external = external
        """Tools whose results a person or the client brings: their calls end without output."""
        self.run_id: str | None = None
        self.finished = False
        self._text: set[str] = set()
        self._reasoning: dict[str, int] = {}
        """Open reasoning parts by model call id -> the reasoning part's index."""
        self._reasoned: set[tuple[str, int]] = set()
        """Reasoning parts streamed (model call id, index): the reply does not repeat them."""
        self._inputs: set[str] = set()

    def apply(self, event: Event) -> list[dict[str, Any]]:
        if self.finished:
            return []
        if self.run_id is None:
            if event.type != "run/start" or not self.follow(event):
                return []
            self.run_id = event.run_id
            status = {"status": "running", "turn_id": event.turn_id, "run_id": event.run_id}
            start = (
                {"type": "start"}
                if self.continues
                else {"type": "start", "messageId": f"msg_{event.run_id}"}
            )
            return [
                start,
                {"type": "data-agentnb-status", "data": status},
            ]
        if event.run_id != self.run_id and event.type != "plan/changed":
            return []
        handler = _HANDLERS.get(event.type)
        return handler(self, event) if handler is not None else []

    def _on_step_start(self, event: Event) -> list[dict[str, Any]]:
        return [{"type": "start-step"}]

    def _on_step_end(self, event: Event) -> list[dict[str, Any]]:
        return [*self._close(), {"type": "finish-step"}]

    def _close(self) -> list[dict[str, Any]]:
        reasoning = sorted(self._reasoning.items())
        out = [{"type": "reasoning-end", "id": f"rs_{c}_{i}"} for c, i in reasoning]
        out += [{"type": "text-end", "id": f"msg_{c}"} for c in sorted(self._text)]
        self._reasoning.clear()
        self._text.clear()
        return out

    def _reason(self, call: str, index: int, delta: str) -> list[dict[str, Any]]:
        """A piece of reasoning part ``index`` of ``call``: its part opened as needed."""
        out: list[dict[str, Any]] = []
        rid = f"rs_{call}_{index}"
        if self._reasoning.get(call) != index:
            out += self._close_reasoning(call)
            self._reasoning[call] = index
            self._reasoned.add((call, index))
            out.append({"type": "reasoning-start", "id": rid})
        out.append({"type": "reasoning-delta", "id": rid, "delta": delta})
        return out

    def _close_reasoning(self, call: str) -> list[dict[str, Any]]:
        index = self._reasoning.pop(call, None)
        return [] if index is None else [{"type": "reasoning-end", "id": f"rs_{call}_{index}"}]

    def _on_chunk(self, event: Event) -> list[dict[str, Any]]:
        p = event.payload
        out: list[dict[str, Any]] = []
        call = str(p.get("model_call_id"))
        # A chunk's reasoning came before its text: the model thinks, then answers.
        for index, delta in reasoning_of_chunk(p):
            out += self._reason(call, index, delta)
        text = str(p.get("text") or "")
        if text:
            out += self._close_reasoning(call)
            if call not in self._text:
                self._text.add(call)
                out.append({"type": "text-start", "id": f"msg_{call}"})
            out.append({"type": "text-delta", "id": f"msg_{call}", "delta": text})
        for fragment in p.get("tool_call_fragments") or ():
            call_id = fragment.get("call_id")
            if call_id and call_id not in self._inputs and fragment.get("name"):
                self._inputs.add(call_id)
                out.append(
                    {
                        "type": "tool-input-start",
                        "toolCallId": call_id,
                        "toolName": fragment["name"],
                    }
                )
            if call_id in self._inputs and fragment.get("arguments_delta"):
                out.append(
                    {
                        "type": "tool-input-delta",
                        "toolCallId": call_id,
                        "inputTextDelta": fragment["arguments_delta"],
                    }
                )
        return out

    def _on_assistant(self, event: Event) -> list[dict[str, Any]]:
        p = event.payload
        call = str(p.get("model_call_id"))
        text = str((p.get("message") or {}).get("text") or "")
        out: list[dict[str, Any]] = []
        if call not in self._text:
            # Reasoning no chunk carried (a stream taken up after it): whole, before the text.
            for index, thought in reasoning_of_message(p):
                if (call, index) not in self._reasoned:
                    out += self._reason(call, index, thought)
        out += self._close_reasoning(call)
        self._reasoned = {r for r in self._reasoned if r[0] != call}
        if call in self._text:
            self._text.discard(call)
            out.append({"type": "text-end", "id": f"msg_{call}"})
        elif text:
            mid = f"msg_{call}"
            out += [
                {"type": "text-start", "id": mid},
                {"type": "text-delta", "id": mid, "delta": text},
                {"type": "text-end", "id": mid},
            ]
        return out

    def _on_tool_requested(self, event: Event) -> list[dict[str, Any]]:
        p = event.payload
        call_id, name = str(p.get("call_id")), str(p.get("name"))
        out: list[dict[str, Any]] = []
        if call_id not in self._inputs:
            self._inputs.add(call_id)
            out.append({"type": "tool-input-start", "toolCallId": call_id, "toolName": name})
        out.append(
            {
                "type": "tool-input-available",
                "toolCallId": call_id,
                "toolName": name,
                "input": p.get("arguments") or {},
            }
        )
        return out

    def _on_request(self, event: Event) -> list[dict[str, Any]]:
        p = event.payload
        if p.get("kind") != "confirmation":
            return []  # an external call or a question: the client's tool call to answer
        return [
            {
                "type": "tool-approval-request",
                "approvalId": str(p.get("request_id")),
                "toolCallId": str(p.get("call_id")),
            }
        ]

    def _on_tool_result(self, event: Event) -> list[dict[str, Any]]:
        p = event.payload
        call_id = str(p.get("call_id"))
        if call_id not in self._inputs and p.get("name") in self.external:
            return []  # the client's own answer, in the run that it started
        status = p.get("status")
        if status == "success":
            return [
                {"type": "tool-output-available", "toolCallId": call_id, "output": p.get("output")}
            ]
        if status == "denied":
            return [{"type": "tool-output-denied", "toolCallId": call_id}]
        error = f"{status}: {p.get('output') or ''}".strip()
        return [{"type": "tool-output-error", "toolCallId": call_id, "errorText": error}]

    def _on_plan(self, event: Event) -> list[dict[str, Any]]:
        items = [dict(item) for item in event.payload.get("items") or ()]
        return [{"type": "data-agentnb-plan", "id": "plan", "data": items}]

    def _on_run_end(self, event: Event) -> list[dict[str, Any]]:
        p = event.payload
        status = str(p.get("status"))
        out = self._close()
        if status == "failed":
            out.append({"type": "error", "errorText": str(p.get("error") or "the run failed")})
        data = {"status": status, "turn_id": event.turn_id, "run_id": event.run_id}
        out.append({"type": "data-agentnb-status", "data": data})
        out.append({"type": "finish", "finishReason": _FINISH.get(status, "other")})
        self.finished = True
        return out


_HANDLERS: dict[str, Callable[[PartTranslator, Event], list[dict[str, Any]]]] = {
    "step/start": PartTranslator._on_step_start,
    "step/end": PartTranslator._on_step_end,
    "model/chunk": PartTranslator._on_chunk,
    "message/assistant": PartTranslator._on_assistant,
    "tool/requested": PartTranslator._on_tool_requested,
    "interaction/requested": PartTranslator._on_request,
    "tool/result": PartTranslator._on_tool_result,
    "plan/changed": PartTranslator._on_plan,
    "run/end": PartTranslator._on_run_end,
}


def _external(session: Session) -> frozenset[str]:
    agent = session.runtime.agent
    return frozenset({"ask_user"} | {t.name for t in agent.tools if getattr(t, "external", False)})


def _part(part: Mapping[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(part) + b"\n\n"


async def _parts(
    request: Request,
    session: Session,
    translator: PartTranslator,
    after: int,
    principal: Principal,
) -> AsyncIterator[bytes]:
    async for event in committed(request, session, after, principal):
        if event is None:
            yield b": keepalive\n\n"
            if await request.is_disconnected():
                return
            continue
        if isinstance(event, Ended):
            # The token stopped working: the answer goes on in the session, this stream ends.
            yield _part({"type": "error", "errorText": event.reason}) + b"data: [DONE]\n\n"
            return
        out = translator.apply(event)
        if out:
            yield b"".join(_part(p) for p in out)
        if translator.finished:
            yield b"data: [DONE]\n\n"
            return


def _streaming(body: AsyncIterator[bytes]) -> StreamingResponse:
    return StreamingResponse(body, media_type="text/event-stream", headers=HEADERS)


# -- the request -----------------------------------------------------------------------------


def _text_of(message: Mapping[str, Any]) -> str:
    parts = message.get("parts")
    if not isinstance(parts, list):
        raise InvalidInput("a message needs parts (the UI message format of AI SDK 5 and later)")
    texts = [p.get("text") for p in parts if isinstance(p, dict) and p.get("type") == "text"]
    return "".join(t for t in texts if isinstance(t, str))


def _answers(message: Mapping[str, Any], session: Session) -> dict[str, Any]:
    """The answers an assistant message's tool parts carry, by request id."""
    pending = session.pending()
    by_call = {i.call_id: i for i in pending.values() if i.call_id}
    answers: dict[str, Any] = {}
    for part in message.get("parts") or ():
        if not isinstance(part, dict):
            continue
        state, call_id = part.get("state"), part.get("toolCallId")
        approval = part.get("approval") if isinstance(part.get("approval"), dict) else None
        if state == "approval-responded" and approval is not None:
            request_id = approval.get("id")
            if not isinstance(request_id, str) or request_id not in pending:
                raise InvalidAnswer(
                    f"no pending approval {str(request_id)[:80]!r} in chat "
                    f"{session.key.session_id!r}; its approval requests are in the last answer"
                )
            if approval.get("approved") is True:
                answers[request_id] = True
            else:
                reason = approval.get("reason")
                answers[request_id] = Answer.reject(reason) if reason else False
        elif state == "output-available" and isinstance(call_id, str) and call_id in by_call:
            output = part.get("output")
            text = output if isinstance(output, str) else json.dumps(output)
            answers[by_call[call_id].request_id] = text
    return answers


@router.post(
    "/aisdk/chat",
    summary="Send a chat message or answers (AI SDK UI message stream v1)",
    response_class=StreamingResponse,
)
async def chat(request: Request, principal: User) -> StreamingResponse:
    try:
        body = ChatRequest.model_validate_json(await request.body())
    except ValidationError as exc:
        errors = exc.errors()
        where = ".".join(str(p) for p in errors[0]["loc"]) if errors else ""
        why = errors[0]["msg"] if errors else "invalid"
        raise InvalidInput(f"the body is not a chat request: {where}: {why}") from None
    if body.trigger != "submit-message":
        raise InvalidInput(
            f"trigger {body.trigger!r} is not supported: the log keeps every answer "
            "(regenerating one is not offered); send a new message"
        )
    chat_id = check_session_id(body.id)
    last = body.messages[-1]

    def accept() -> tuple[Session, str, int]:  # (session, command id, seq accepted after)
        if last.get("role") == "assistant":
            session = open_session(request, chat_id, principal)
            answers = _answers(last, session)
            if not answers:
                raise InvalidAnswer(
                    "the last message answers nothing: answer a pending approval "
                    "(addToolApprovalResponse) or tool call (addToolOutput), or send a message"
                )
            after = session.log.head()
            return session, session.respond(answers).command_id, after
        if last.get("role") != "user":
            raise InvalidInput(f"the last message must be the user's, got {last.get('role')!r}")
        text = _text_of(last)
        if not text.strip():
            raise InvalidInput("the message holds no text: send the task to do")
        session = request.app.state.runtime.session(chat_id, user_id=principal.user_id)
        after = session.log.head()
        return session, session.submit(text).command_id, after

    session, command_id, after = await anyio.to_thread.run_sync(accept)
    translator = PartTranslator(
        lambda event: event.payload.get("command_id") == command_id,
        _external(session),
        continues=last.get("role") == "assistant",
    )
    return _streaming(_parts(request, session, translator, after, principal))


def _active_run(session: Session) -> tuple[str, int] | None:
    """The running run and the seq just before its ``run/start`` (None: nothing runs).

    The start is looked for backwards from the head in pages that grow four times each
    (16, 64, 256, ... events): a run that began a moment ago is found in the first, so
    a reconnect costs what the run has written, not what the session holds."""
    runs = session.inspect().active_runs
    if not runs:
        return None
    run_id = runs[0]
    end = session.log.head()
    page = _BACK
    while end > 0:
        start = max(0, end - page)
        for event in reversed(session.log.read_after(start, end - start)):
            if event.type == "run/start" and event.run_id == run_id:
                return run_id, event.seq - 1
        end, page = start, min(page * 4, _BACK_MAX)
    return None


@router.get(
    "/aisdk/chat/{chat_id}/stream",
    summary="Resume the running answer's stream from the log (204 when nothing runs)",
    response_class=StreamingResponse,
    responses={204: {"description": "nothing runs in this chat"}},
)
async def resume_stream(request: Request, chat_id: str, principal: User) -> Response:
    def find() -> tuple[Session, tuple[str, int] | None]:
        session = open_session(request, chat_id, principal)
        return session, _active_run(session)

    session, active = await anyio.to_thread.run_sync(find)
    if active is None:
        return Response(status_code=204)
    run_id, after = active
    translator = PartTranslator(lambda event: event.run_id == run_id, _external(session))
    return _streaming(_parts(request, session, translator, after, principal))


class Stopped(BaseModel):
    stopped: bool = Field(description="false when nothing was running")


@router.post(
    "/aisdk/chat/{chat_id}/stop",
    summary="Stop the running answer (its turn is cancelled)",
    response_model=Stopped,
)
async def stop(request: Request, chat_id: str, principal: User) -> dict[str, bool]:
    def cancel() -> bool:
        session = open_session(request, chat_id, principal)
        active = session.inspect().active_runs
        if not active:
            return False
        turn = next((t for t in session.tasks(limit=20) if active[0] in t.run_ids), None)
        if turn is None:
            return False
        session.cancel(turn.turn_id)
        return True

    return {"stopped": await anyio.to_thread.run_sync(cancel)}
