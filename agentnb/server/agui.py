"""``POST /agui`` and ``GET /agui/{threadId}/connect``: the AG-UI protocol (1.0) over sessions.

An ``HttpAgent`` (``@ag-ui/client``), CopilotKit or assistant-ui's AG-UI runtime points at
``/agui``. ``threadId`` is the session id, scoped to the token's user and created on first
use; the client's older ``messages`` are not trusted (the log is the history): the last user
message is the new input, sent with ``session.send`` (it starts or queues a turn, or steers
the running one; a ``CUSTOM`` event ``agentnb.disposition`` says which). ``resume[]``
answers the interrupts of the run before (``session.respond``).

A run's stream (one JSON event per SSE ``data:`` line, with ``id: <session>:<seq>`` of the
last committed event behind it): ``RUN_STARTED``, a ``CUSTOM`` disposition,
``MESSAGES_SNAPSHOT`` of the thread, ``STATE_SNAPSHOT`` (``plan``, ``tasks``, ``pending``),
then for the agentnb run it drives ``STEP_STARTED/FINISHED``, ``TEXT_MESSAGE_START/CONTENT/
END``, ``REASONING_*`` (when a model streams reasoning), ``TOOL_CALL_START/ARGS/END/
RESULT``, and at the end ``RUN_FINISHED`` with the outcome ``success``, ``interrupt`` (one
``Interrupt`` per pending approval, question or external call: ``id`` is the request id,
``toolCallId`` the call, ``responseSchema`` what an answer looks like) or ``cancelled``, or
``RUN_ERROR`` for a failed turn. A ``resume[]`` entry answers with ``status: "resolved"``
and a payload (``{"approved": true}``, ``{"approved": true, "arguments": {...}}`` to approve
edited arguments, ``{"approved": false, "reason": "..."}``, ``{"output": "..."}``) or
``status: "cancelled"`` (a rejection).

``connect`` replays the thread's runs after ``after`` (a ``<session>:<seq>`` cursor, the
stream's ``id:``; or ``Last-Event-ID``; none: from the start), each run as ``RUN_STARTED``
… ``RUN_FINISHED`` with the agentnb run id as ``runId``, and keeps following the thread
across later runs, whoever starts them, until the client leaves.

The events are ``ag-ui-protocol``'s models, encoded by its ``EventEncoder``; what a stream
says is a function of the committed log (``agentnb.server.doors``), apart from the state
snapshots, which read the session's state when they are sent.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Annotated, Any

import anyio.to_thread
from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import StreamingResponse
from pydantic import ValidationError

from agentnb.answers import Answer
from agentnb.errors import InvalidAnswer, InvalidInput, install_hint
from agentnb.events import Event, Message
from agentnb.server.auth import Principal, check_session_id, current_user, open_session
from agentnb.server.doors import Ended, committed, reasoning_of_chunk, reasoning_of_message
from agentnb.server.problems import PROBLEM_RESPONSES
from agentnb.server.stream import parse_cursor
from agentnb.session import Session

try:
    from ag_ui import core as ag
    from ag_ui.encoder import EventEncoder
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "the AG-UI door needs the ag-ui-protocol package: " + install_hint("server")
    ) from exc

__all__ = ["RESPONSE_SCHEMAS", "RunTranslator", "router"]

router = APIRouter(tags=["agui"], responses=PROBLEM_RESPONSES)
User = Annotated[Principal, Depends(current_user)]

RESPONSE_SCHEMAS: dict[str, dict[str, Any]] = {
    "confirmation": {
        "type": "object",
        "properties": {
            "approved": {"type": "boolean"},
            "arguments": {"type": "object", "description": "edited arguments to run it with"},
            "reason": {"type": "string", "description": "why it is rejected"},
        },
        "required": ["approved"],
    },
    "output": {
        "type": "object",
        "properties": {"output": {"type": "string"}},
        "required": ["output"],
    },
}
"""What a ``resume[]`` payload looks like, by the kind of request it answers."""
_REASONS = {
    "confirmation": "tool_approval",
    "external_execution": "external_tool",
    "ask_user": "user_input",
}
_ENCODER = EventEncoder()


def interrupt_of(request: Mapping[str, Any]) -> ag.Interrupt:
    """The AG-UI interrupt of an ``interaction/requested`` payload."""
    kind = str(request.get("kind"))
    return ag.Interrupt(
        id=str(request.get("request_id")),
        reason=_REASONS.get(kind, kind),
        message=request.get("prompt") or None,
        tool_call_id=request.get("call_id") or None,
        response_schema=RESPONSE_SCHEMAS["confirmation" if kind == "confirmation" else "output"],
        metadata={"kind": kind, "tool": request.get("tool_name")},
    )


class RunTranslator:
    """AG-UI events from a thread's committed events: a pure fold.

    ``follow`` names the agentnb runs it translates: a function of a ``run/start`` event
    that answers the AG-UI ``runId`` to give that run, or None to leave it out. Events of
    other runs give nothing. ``open_run`` and ``announce`` say whether ``RUN_STARTED`` is
    the translator's to send (``connect``) or was sent already (a ``POST``).
    """

    def __init__(
        self,
        thread_id: str,
        follow: Callable[[Event], str | None],
        *,
        announce: bool,
        mid_run: bool = False,
    ) -> None:
        self.thread_id = thread_id
        self.lazy = mid_run
        """The first event may belong to a run whose start came before it (``connect``)."""
        self.follow = follow
        self.announce = announce
        self.run_id: str | None = None
        """The agentnb run being translated."""
        self.agui_run: str | None = None
        self.finished = False
        """A run translated has ended (the POST's stream ends then)."""
        self.interrupts: list[ag.Interrupt] = []
        self._text: dict[str, str] = {}
        """Open text messages by model call id -> the text sent so far."""
        self._reasoning: dict[str, int] = {}
        """Open reasoning messages by model call id -> the reasoning part's index."""
        self._reasoned: set[tuple[str, int]] = set()
        """Reasoning parts streamed (model call id, index): the reply does not repeat them."""
        self._steps: dict[str, str] = {}
        """Open steps by step id -> their name."""

    def adopt(self, run_id: str, agui_run: str) -> None:
        """Translate ``run_id`` (already running: a steered run) as ``agui_run``."""
        self.run_id, self.agui_run = run_id, agui_run

    def apply(self, event: Event) -> list[ag.BaseEvent]:
        lazy, self.lazy = self.lazy, False
        if lazy and self.run_id is None and event.run_id is not None and event.type != "run/start":
            # The stream starts inside a run (a cursor in its middle): that run is followed
            # from here, announced first.
            agui_run = self.follow(event)
            if agui_run is not None:
                self.adopt(event.run_id, agui_run)
                started = ag.RunStartedEvent(thread_id=self.thread_id, run_id=agui_run)
                return [started, *self.apply(event)]
        if event.type == "run/start" and self.run_id is None:
            agui_run = self.follow(event)
            if agui_run is None:
                return []
            self.run_id, self.agui_run = event.run_id, agui_run
            self.interrupts = []
            if self.announce:
                return [ag.RunStartedEvent(thread_id=self.thread_id, run_id=agui_run)]
            return []
        if self.run_id is None or event.run_id != self.run_id:
            return []
        handler = _HANDLERS.get(event.type)
        return handler(self, event.payload) if handler is not None else []

    def _on_user(self, p: Mapping[str, Any]) -> list[ag.BaseEvent]:
        message = p.get("message") or {}
        mid = str(message.get("id"))
        return [
            ag.TextMessageStartEvent(message_id=mid, role="user"),
            ag.TextMessageContentEvent(message_id=mid, delta=str(message.get("text") or " ")),
            ag.TextMessageEndEvent(message_id=mid),
        ]

    def _on_step_start(self, p: Mapping[str, Any]) -> list[ag.BaseEvent]:
        name = f"step {p.get('iteration')}"
        self._steps[str(p.get("step_id"))] = name
        return [ag.StepStartedEvent(step_name=name)]

    def _on_step_end(self, p: Mapping[str, Any]) -> list[ag.BaseEvent]:
        name = self._steps.pop(str(p.get("step_id")), None)
        if name is None:
            return []  # begun before the cursor this stream started at
        return [*self._close_all(), ag.StepFinishedEvent(step_name=name)]

    def _on_chunk(self, p: Mapping[str, Any]) -> list[ag.BaseEvent]:
        out: list[ag.BaseEvent] = []
        call = str(p.get("model_call_id"))
        # A chunk's reasoning came before its text: the model thinks, then answers.
        for index, delta in reasoning_of_chunk(p):
            out += self._reason(call, index, delta)
        text = str(p.get("text") or "")
        if text:
            out += self._close_reasoning(call)
            mid = f"msg_{call}"
            if call not in self._text:
                self._text[call] = ""
                out.append(ag.TextMessageStartEvent(message_id=mid, role="assistant"))
            self._text[call] += text
            out.append(ag.TextMessageContentEvent(message_id=mid, delta=text))
        return out

    def _reason(self, call: str, index: int, delta: str) -> list[ag.BaseEvent]:
        """A piece of reasoning part ``index`` of ``call``: its messages opened as needed."""
        out: list[ag.BaseEvent] = []
        if self._reasoning.get(call) != index:
            out += self._close_reasoning(call)
            rid = f"rs_{call}_{index}"
            self._reasoning[call] = index
            self._reasoned.add((call, index))
            out.append(ag.ReasoningStartEvent(message_id=rid))
            out.append(ag.ReasoningMessageStartEvent(message_id=rid, role="reasoning"))
        rid = f"rs_{call}_{index}"
        out.append(ag.ReasoningMessageContentEvent(message_id=rid, delta=delta))
        return out

    def _close_reasoning(self, call: str) -> list[ag.BaseEvent]:
        index = self._reasoning.pop(call, None)
        if index is None:
            return []
        rid = f"rs_{call}_{index}"
        return [ag.ReasoningMessageEndEvent(message_id=rid), ag.ReasoningEndEvent(message_id=rid)]

    def _close_all(self) -> list[ag.BaseEvent]:
        out: list[ag.BaseEvent] = []
        for call in list(self._reasoning):
            out += self._close_reasoning(call)
        for call in list(self._text):
            del self._text[call]
            out.append(ag.TextMessageEndEvent(message_id=f"msg_{call}"))
        return out

    def _on_assistant(self, p: Mapping[str, Any]) -> list[ag.BaseEvent]:
        message = p.get("message") or {}
        call = str(p.get("model_call_id"))
        mid = str(message.get("id") or f"msg_{call}")
        text = str(message.get("text") or "")
        out: list[ag.BaseEvent] = []
        if call not in self._text:
            # Reasoning no chunk carried (a stream taken up after it): whole, before the text.
            for index, thought in reasoning_of_message(p):
                if (call, index) not in self._reasoned:
                    out += self._reason(call, index, thought)
        out += self._close_reasoning(call)
        self._reasoned = {r for r in self._reasoned if r[0] != call}
        sent = self._text.pop(call, None)
        if sent is None and text:
            out.append(ag.TextMessageStartEvent(message_id=mid, role="assistant"))
            sent = ""
        if sent is not None:
            if text.startswith(sent) and len(text) > len(sent):
                out.append(ag.TextMessageContentEvent(message_id=mid, delta=text[len(sent) :]))
            out.append(ag.TextMessageEndEvent(message_id=mid))
        return out

    def _on_tool_requested(self, p: Mapping[str, Any]) -> list[ag.BaseEvent]:
        call_id = str(p.get("call_id"))
        return [
            ag.ToolCallStartEvent(
                tool_call_id=call_id,
                tool_call_name=str(p.get("name")),
                parent_message_id=p.get("message_id") or None,
            ),
            ag.ToolCallArgsEvent(tool_call_id=call_id, delta=json.dumps(p.get("arguments") or {})),
            ag.ToolCallEndEvent(tool_call_id=call_id),
        ]

    def _on_tool_result(self, p: Mapping[str, Any]) -> list[ag.BaseEvent]:
        call_id = str(p.get("call_id"))
        output = str(p.get("output") or "")
        if p.get("status") != "success":
            output = f"[{p.get('status')}] {output}"
        return [
            ag.ToolCallResultEvent(
                message_id=f"msg_{call_id}", tool_call_id=call_id, content=output, role="tool"
            )
        ]

    def _on_request(self, p: Mapping[str, Any]) -> list[ag.BaseEvent]:
        self.interrupts.append(interrupt_of(p))
        return []

    def _on_run_end(self, p: Mapping[str, Any]) -> list[ag.BaseEvent]:
        out = self._close_all()
        status = p.get("status")
        thread, run = self.thread_id, str(self.agui_run)
        if status == "failed":
            message = str(p.get("error") or p.get("reason") or "the run failed")
            out.append(ag.RunErrorEvent(message=message, code="failed"))
        elif status == "suspended" and self.interrupts:
            outcome = ag.RunFinishedInterruptOutcome(interrupts=self.interrupts)
            out.append(ag.RunFinishedEvent(thread_id=thread, run_id=run, outcome=outcome))
        elif status in ("interrupted", "cancelled"):
            outcome_c = ag.RunFinishedCancelledOutcome()
            out.append(ag.RunFinishedEvent(thread_id=thread, run_id=run, outcome=outcome_c))
        else:
            outcome_s = ag.RunFinishedSuccessOutcome()
            out.append(ag.RunFinishedEvent(thread_id=thread, run_id=run, outcome=outcome_s))
        self.run_id = self.agui_run = None
        self.finished = True
        return out


_HANDLERS: dict[str, Callable[[RunTranslator, Mapping[str, Any]], list[ag.BaseEvent]]] = {
    "message/user": RunTranslator._on_user,
    "step/start": RunTranslator._on_step_start,
    "step/end": RunTranslator._on_step_end,
    "model/chunk": RunTranslator._on_chunk,
    "message/assistant": RunTranslator._on_assistant,
    "tool/requested": RunTranslator._on_tool_requested,
    "tool/result": RunTranslator._on_tool_result,
    "interaction/requested": RunTranslator._on_request,
    "run/end": RunTranslator._on_run_end,
}
_STATE_CHANGES = frozenset(
    {"plan/changed", "task/changed", "interaction/requested", "interaction/resolved"}
)
"""Committed types after which the thread's state snapshot is sent again."""


# -- reading the thread ------------------------------------------------------------------------


def _message(m: Message) -> Any:
    if m.role == "user":
        return ag.UserMessage(id=m.id, content=m.text or " ")
    if m.role == "tool":
        return ag.ToolMessage(id=m.id, content=m.text, tool_call_id=m.call_id or "")
    if m.role == "system":
        return ag.SystemMessage(id=m.id, content=m.text)
    calls = [
        ag.ToolCall(
            id=c.call_id,
            function=ag.FunctionCall(name=c.name, arguments=json.dumps(c.arguments)),
        )
        for c in m.tool_calls
    ]
    return ag.AssistantMessage(id=m.id, content=m.text or None, tool_calls=calls or None)


def _reasoning_messages(m: Message) -> list[Any]:
    """The reasoning of an assistant message as AG-UI reasoning messages (before it)."""
    return [
        ag.ReasoningMessage(id=f"rs_{m.id}_{i}", content=part.text)
        for i, part in enumerate(m.reasoning)
        if part.text
    ]


def _messages(session: Session) -> tuple[ag.MessagesSnapshotEvent, int]:
    """The thread's messages (each reply's reasoning before it), and the seq they are as of."""
    transcript = session.transcript()
    messages = [out for m in transcript.messages for out in (*_reasoning_messages(m), _message(m))]
    return ag.MessagesSnapshotEvent(messages=messages), transcript.as_of_seq


def _state(session: Session) -> ag.StateSnapshotEvent:
    """The thread's plan, latest tasks and pending requests."""
    plan = [item.model_dump(mode="json") for item in session.plan()]
    tasks = [
        {"turn_id": t.turn_id, "status": t.status, "input": t.input[:200]}
        for t in session.tasks(limit=20)
    ]
    pending = [
        interrupt_of(vars_of(i)).model_dump(by_alias=True) for i in session.pending().values()
    ]
    return ag.StateSnapshotEvent(snapshot={"plan": plan, "tasks": tasks, "pending": pending})


def vars_of(interaction: Any) -> dict[str, Any]:
    """An ``Interaction`` as the ``interaction/requested`` payload it came from."""
    return {
        "request_id": interaction.request_id,
        "kind": interaction.kind,
        "call_id": interaction.call_id,
        "tool_name": interaction.tool_name,
        "arguments": dict(interaction.arguments or {}),
        "prompt": interaction.prompt,
    }


def _encode(event: ag.BaseEvent, cursor: str | None = None) -> str:
    text = _ENCODER.encode(event)
    return f"id: {cursor}\n{text}" if cursor is not None else text


async def _translate(
    request: Request,
    session: Session,
    translator: RunTranslator,
    after: int,
    principal: Principal,
    head: list[str],
    *,
    until_finished: bool,
) -> AsyncIterator[str]:
    sid = session.key.session_id
    changed = False
    for text in head:
        yield text
    async for event in committed(request, session, after, principal):
        if event is None:
            yield ": keepalive\n\n"
            if await request.is_disconnected():
                return
            continue
        if isinstance(event, Ended):
            # The token stopped working: the run goes on in the session, this stream ends.
            yield _encode(ag.RunErrorEvent(message=event.reason, code="revoked"))
            return
        ours = translator.run_id is not None and event.run_id == translator.run_id
        suspended = event.type == "run/end" and event.payload.get("status") == "suspended"
        if ours and suspended and not translator.interrupts:
            # Asked before the cursor this stream started at: the session's pending requests.
            pending = await anyio.to_thread.run_sync(session.pending)
            translator.interrupts = [
                interrupt_of(vars_of(i)) for i in pending.values() if i.turn_id == event.turn_id
            ]
        if ours and event.type in _STATE_CHANGES:
            changed = True
        out = translator.apply(event)
        # The state is sent again after what changes it, and at the end of a run that
        # changed it (a run that only talked leaves it as its first snapshot said).
        state_due = event.type in _STATE_CHANGES or (event.type == "run/end" and changed)
        if event.type == "run/end" and ours:
            changed = False
        if state_due and (ours or out):
            state = await anyio.to_thread.run_sync(_state, session)
            ends = (ag.RunFinishedEvent, ag.RunErrorEvent)
            at = next((i for i, e in enumerate(out) if isinstance(e, ends)), len(out))
            out.insert(at, state)
        texts = [_encode(e, f"{sid}:{event.seq}") for e in out]
        if texts:
            yield "".join(texts)
        if until_finished and translator.finished:
            return


def _streaming(body: AsyncIterator[str]) -> StreamingResponse:
    return StreamingResponse(
        body,
        media_type=_ENCODER.get_content_type(),
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


# -- the input -----------------------------------------------------------------------------------


def _answer(entry: ag.ResumeEntry, kinds: Mapping[str, str]) -> Any:
    kind = kinds.get(entry.interrupt_id)
    if entry.status == "cancelled":
        return (
            Answer.reject("cancelled by the user")
            if kind == "confirmation"
            else Answer.output("the person declined to answer")
        )
    payload = entry.payload
    if kind == "confirmation":
        if isinstance(payload, bool):
            return payload
        if not isinstance(payload, dict) or not isinstance(payload.get("approved"), bool):
            raise InvalidInput(
                f"resume entry {entry.interrupt_id!r}: an approval's payload is "
                '{"approved": true|false, "arguments"?: {...}, "reason"?: "..."}'
            )
        if not payload["approved"]:
            reason = payload.get("reason")
            return Answer.reject(reason) if isinstance(reason, str) and reason else False
        edited = payload.get("arguments")
        if edited is not None and not isinstance(edited, dict):
            raise InvalidInput(f"resume entry {entry.interrupt_id!r}: arguments must be an object")
        return Answer.approve(edited_args=edited) if edited else True
    if isinstance(payload, str):
        return payload
    if isinstance(payload, dict) and isinstance(payload.get("output"), str):
        return payload["output"]
    raise InvalidInput(
        f"resume entry {entry.interrupt_id!r}: the answer's payload is "
        '{"output": "..."} (or a string)'
    )


def _last_user_text(run_input: ag.RunAgentInput) -> str:
    for message in reversed(run_input.messages):
        if message.role == "user":
            content = message.content
            if isinstance(content, str):
                return content
            return "".join(getattr(part, "text", "") or "" for part in content)
    return ""


@router.post(
    "/agui",
    summary="Run the agent on a thread (AG-UI 1.0 RunAgentInput; Server-Sent Events)",
    response_class=StreamingResponse,
)
async def run_agent(request: Request, principal: User) -> StreamingResponse:
    try:
        run_input = ag.RunAgentInput.model_validate_json(await request.body())
    except ValidationError as exc:
        errors = exc.errors()
        where = ".".join(str(p) for p in errors[0]["loc"]) if errors else ""
        why = errors[0]["msg"] if errors else "invalid"
        raise InvalidInput(f"the body is not an AG-UI RunAgentInput: {where}: {why}") from None
    thread = check_session_id(run_input.thread_id)
    resume = run_input.resume or []
    text = "" if resume else _last_user_text(run_input)
    if not resume and not text.strip():
        raise InvalidInput(
            "the run has nothing to do: send a user message (the last one is the new input) "
            "or resume[] entries answering the last run's interrupts"
        )

    def accept() -> tuple[Session, Any, int, list[str]]:
        runtime = request.app.state.runtime
        if resume:
            session = open_session(request, thread, principal)
            kinds = {r: i.kind for r, i in session.pending().items()}
            for entry in resume:
                if entry.interrupt_id not in kinds:
                    raise InvalidAnswer(
                        f"thread {thread!r} has no pending interrupt "
                        f"{entry.interrupt_id[:80]!r}; the last run's RUN_FINISHED lists them"
                    )
            answers = {e.interrupt_id: _answer(e, kinds) for e in resume}
        else:
            session = runtime.session(thread, user_id=principal.user_id)
        snapshot, as_of = _messages(session)
        receipt = session.respond(answers) if resume else session.send(text)
        state = _state(session)
        disposition = "resumed" if resume else receipt.disposition
        custom = ag.CustomEvent(
            name="agentnb.disposition",
            value={
                "disposition": disposition,
                "turn_id": receipt.turn_id,
                "command_id": receipt.command_id,
            },
        )
        started = ag.RunStartedEvent(thread_id=thread, run_id=run_input.run_id)
        head = [_encode(e) for e in (started, custom, snapshot, state)]
        return session, receipt, as_of, head

    session, receipt, as_of, head = await anyio.to_thread.run_sync(accept)
    agui_run = run_input.run_id

    def follow(event: Event) -> str | None:
        ours = event.payload.get("command_id") == receipt.command_id
        if receipt.disposition == "steered" and receipt.run_id is None:
            # It steered a task that had not started: that task's first run is this run.
            ours = event.type == "run/start" and event.turn_id == receipt.turn_id
        return agui_run if ours else None

    translator = RunTranslator(thread, follow, announce=False)
    if receipt.disposition == "steered" and receipt.run_id is not None:
        translator.adopt(receipt.run_id, agui_run)
    return _streaming(
        _translate(request, session, translator, as_of, principal, head, until_finished=True)
    )


@router.get(
    "/agui/{thread_id}/connect",
    summary="Replay a thread's runs from a cursor and follow its later runs (AG-UI events)",
    response_class=StreamingResponse,
)
async def connect(
    request: Request,
    thread_id: str,
    principal: User,
    after: Annotated[
        str | None, Query(description="a cursor '<threadId>:<seq>' (a stream's id:)")
    ] = None,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
) -> StreamingResponse:
    def open_() -> tuple[Session, int]:
        session = open_session(request, thread_id, principal)
        head = session.log.head()
        start = max(
            parse_cursor(after, session.key.session_id, head),
            parse_cursor(last_event_id, session.key.session_id, head),
        )
        return session, start

    session, start = await anyio.to_thread.run_sync(open_)
    translator = RunTranslator(
        thread_id, lambda event: event.run_id, announce=True, mid_run=start > 0
    )
    return _streaming(
        _translate(request, session, translator, start, principal, [], until_finished=False)
    )
