"""Fake provider servers, written from the providers' API references, on loopback uvicorn.

``FakeProvider`` serves Anthropic's ``POST /v1/messages`` and OpenAI's ``POST /v1/responses``
as streamed server-sent events, answering with the replies a test scripts, in order. Like
the real APIs, it checks what it receives and refuses with the documented 400 what the real
one refuses:

- Anthropic: a thinking block must come back exactly as it was sent (text and signature,
  byte for byte: "the signature ... is verified"), redacted thinking with its data; with
  thinking on, an assistant message that calls tools must start with its thinking block;
  every ``tool_use`` must be answered by a ``tool_result`` in the next user message.
- Responses: a reasoning item sent back must carry the ``encrypted_content`` it was given;
  with ``store=False`` nothing can be looked up by id, so a reasoning item without it is
  refused.

Every request (body and headers) is kept in ``requests`` / ``headers`` for the tests to read.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route


@dataclass
class Stream:
    """A streamed reply: ``events`` as ``(type, data)``; ``cut_after`` events then the
    connection drops; ``hold``: after the events, wait until ``FakeProvider.release()``."""

    events: list[tuple[str, dict[str, Any]]]
    cut_after: int | None = None
    hold: bool = False
    delay: float = 0.0


@dataclass
class Failure:
    """An error status with a JSON body and headers."""

    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


Scripted = Stream | Failure


class _Cut(Exception):
    """Raised inside a streamed body: uvicorn drops the connection mid-response."""


class FakeProvider:
    """Both fake APIs on one loopback port; ``base_url`` is ``http://127.0.0.1:PORT``."""

    def __init__(self) -> None:
        self.replies: deque[Scripted] = deque()
        self.requests: list[dict[str, Any]] = []
        self.raw: list[bytes] = []
        self.headers: list[dict[str, str]] = []
        self.refusals: list[str] = []
        self.thinking_sent: dict[str, str] = {}
        """signature -> thinking text, of every thinking block streamed."""
        self.redacted_sent: set[str] = set()
        self.encrypted_sent: dict[str, str] = {}
        """reasoning item id -> encrypted_content streamed."""
        self.received = threading.Event()
        self._release: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        app = Starlette(
            routes=[
                Route("/v1/messages", self._messages, methods=["POST"]),
                Route("/v1/responses", self._responses, methods=["POST"]),
            ]
        )
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=lambda: asyncio.run(self._serve(sock)), daemon=True)
        self._thread.start()
        while not self._server.started:
            threading.Event().wait(0.01)

    async def _serve(self, sock: socket.socket) -> None:
        self._loop = asyncio.get_running_loop()
        self._release = asyncio.Event()
        await self._server.serve(sockets=[sock])

    def close(self) -> None:
        self.release()
        self._server.should_exit = True
        self._thread.join(10)

    def release(self) -> None:
        """End every held stream."""
        if self._loop is not None and self._release is not None:
            self._loop.call_soon_threadsafe(self._release.set)

    def script(self, *replies: Scripted) -> None:
        self.replies.extend(replies)

    # -- the two APIs ----------------------------------------------------------------------

    async def _messages(self, request: Request) -> Response:
        body = await self._record(request)
        problem = self._check_messages(body)
        if problem:
            self.refusals.append(problem)
            return _invalid(problem)
        return self._answer(body)

    async def _responses(self, request: Request) -> Response:
        body = await self._record(request)
        problem = self._check_responses(body)
        if problem:
            self.refusals.append(problem)
            return JSONResponse(
                {"error": {"type": "invalid_request_error", "message": problem}}, status_code=400
            )
        return self._answer(body)

    async def _record(self, request: Request) -> dict[str, Any]:
        raw = await request.body()
        body = json.loads(raw)
        self.raw.append(raw)
        self.requests.append(body)
        self.headers.append({k.lower(): v for k, v in request.headers.items()})
        self.received.set()
        return body

    def _answer(self, body: dict[str, Any]) -> Response:
        if not body.get("stream"):
            return _invalid("this fake serves streamed requests only (stream: true)")
        if not self.replies:
            return _invalid("the test scripted no more replies")
        reply = self.replies.popleft()
        if isinstance(reply, Failure):
            return JSONResponse(reply.body, status_code=reply.status, headers=reply.headers)
        self._remember(reply)
        return StreamingResponse(self._sse(reply), media_type="text/event-stream")

    async def _sse(self, reply: Stream) -> AsyncIterator[bytes]:
        for n, (kind, data) in enumerate(reply.events):
            if reply.cut_after is not None and n >= reply.cut_after:
                raise _Cut("the test cut the stream here")
            if reply.delay:
                await asyncio.sleep(reply.delay)
            yield f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode()
        if reply.hold and self._release is not None:
            await self._release.wait()

    def _remember(self, reply: Stream) -> None:
        thinking: dict[int, dict[str, str]] = {}
        for kind, data in reply.events:
            if kind == "content_block_start":
                block = data["content_block"]
                if block["type"] == "thinking":
                    thinking[data["index"]] = {"text": block["thinking"], "signature": ""}
                elif block["type"] == "redacted_thinking":
                    self.redacted_sent.add(block["data"])
            elif kind == "content_block_delta" and data["index"] in thinking:
                delta = data["delta"]
                if delta["type"] == "thinking_delta":
                    thinking[data["index"]]["text"] += delta["thinking"]
                elif delta["type"] == "signature_delta":
                    thinking[data["index"]]["signature"] = delta["signature"]
            elif kind == "response.output_item.done" and data["item"]["type"] == "reasoning":
                item = data["item"]
                self.encrypted_sent[item["id"]] = item.get("encrypted_content") or ""
        for block in thinking.values():
            self.thinking_sent[block["signature"]] = block["text"]

    # -- what the real APIs refuse ----------------------------------------------------------

    def _check_messages(self, body: dict[str, Any]) -> str | None:
        for name in ("model", "max_tokens", "messages"):
            if name not in body:
                return f"{name}: Field required"
        thinking_on = (body.get("thinking") or {}).get("type") in ("enabled", "adaptive")
        messages = body["messages"]
        for i, message in enumerate(messages):
            content = message["content"]
            if isinstance(content, str):
                continue
            for block in content:
                if block["type"] == "text" and not block["text"]:
                    return f"messages.{i}: text content blocks must be non-empty"
                if block["type"] == "thinking":
                    if "cache_control" in block:
                        return f"messages.{i}: thinking blocks cannot carry cache_control"
                    sent = self.thinking_sent.get(block.get("signature", ""))
                    if sent is None or sent != block.get("thinking"):
                        return f"messages.{i}: Invalid `signature` in `thinking` block"
                if block["type"] == "redacted_thinking" and block["data"] not in self.redacted_sent:
                    return f"messages.{i}: Invalid `data` in `redacted_thinking` block"
            if message["role"] == "assistant":
                calls = [b["id"] for b in content if b["type"] == "tool_use"]
                if (
                    calls
                    and thinking_on
                    and content[0]["type"]
                    not in (
                        "thinking",
                        "redacted_thinking",
                    )
                ):
                    return (
                        f"messages.{i}.content.0.type: Expected `thinking` or "
                        f"`redacted_thinking`, but found `{content[0]['type']}`. When `thinking` "
                        "is enabled, a final `assistant` message must start with a thinking block"
                    )
                if calls:
                    following = messages[i + 1]["content"] if i + 1 < len(messages) else []
                    answered = {b.get("tool_use_id") for b in following if isinstance(b, dict)}
                    missing = [c for c in calls if c not in answered]
                    if missing:
                        return (
                            f"messages.{i + 1}: `tool_use` ids were found without "
                            f"`tool_result` blocks immediately after: {', '.join(missing)}"
                        )
        return None

    def _check_responses(self, body: dict[str, Any]) -> str | None:
        for name in ("model", "input"):
            if name not in body:
                return f"Missing required parameter: '{name}'."
        for item in body["input"]:
            if item.get("type") == "reasoning":
                sent = self.encrypted_sent.get(item.get("id", ""))
                if body.get("store", True) is False and not item.get("encrypted_content"):
                    return (
                        f"Item with id '{item.get('id')}' not found. Items are not persisted "
                        "when `store` is set to false."
                    )
                if sent is not None and item.get("encrypted_content") != sent:
                    return "The encrypted content for item could not be verified."
        return None


def _invalid(message: str) -> JSONResponse:
    return JSONResponse(
        {"type": "error", "error": {"type": "invalid_request_error", "message": message}},
        status_code=400,
    )


# -- Anthropic stream builders -----------------------------------------------------------------


def anthropic_reply(
    *,
    thinking: str | None = None,
    signature: str = "",
    redacted: str | None = None,
    text: str = "",
    tool_uses: list[tuple[str, str, str]] = (),  # type: ignore[assignment]
    stop_reason: str | None = None,
    usage: dict[str, int] | None = None,
    output_tokens: int = 7,
    pieces: int = 3,
) -> list[tuple[str, dict[str, Any]]]:
    """The events of one streamed Messages reply, as the API reference shows them."""
    start_usage = {"input_tokens": 10, "output_tokens": 1, **(usage or {})}
    events: list[tuple[str, dict[str, Any]]] = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_fake",
                    "type": "message",
                    "role": "assistant",
                    "content": [],
                    "model": "claude-fake",
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": start_usage,
                },
            },
        ),
        ("ping", {"type": "ping"}),
    ]
    index = 0

    def block(start: dict[str, Any], deltas: list[dict[str, Any]]) -> None:
        nonlocal index
        events.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": start},
            )
        )
        for delta in deltas:
            events.append(
                (
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": delta},
                )
            )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
        index += 1

    if redacted is not None:
        block({"type": "redacted_thinking", "data": redacted}, [])
    if thinking is not None:
        block(
            {"type": "thinking", "thinking": "", "signature": ""},
            [{"type": "thinking_delta", "thinking": p} for p in _split(thinking, pieces)]
            + [{"type": "signature_delta", "signature": signature}],
        )
    if text:
        block(
            {"type": "text", "text": ""},
            [{"type": "text_delta", "text": p} for p in _split(text, pieces)],
        )
    for call_id, name, arguments in tool_uses:
        block(
            {"type": "tool_use", "id": call_id, "name": name, "input": {}},
            [{"type": "input_json_delta", "partial_json": p} for p in _split(arguments, pieces)],
        )
    reason = stop_reason or ("tool_use" if tool_uses else "end_turn")
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": reason, "stop_sequence": None},
                "usage": {"output_tokens": output_tokens},
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def anthropic_error_event(kind: str, message: str) -> tuple[str, dict[str, Any]]:
    return ("error", {"type": "error", "error": {"type": kind, "message": message}})


# -- Responses stream builders -----------------------------------------------------------------


def responses_reply(
    *,
    reasoning: list[str] | None = None,
    encrypted: str = "",
    reasoning_id: str = "rs_1",
    text: str = "",
    calls: list[tuple[str, str, str]] = (),  # type: ignore[assignment]
    usage: dict[str, Any] | None = None,
    status: str = "completed",
    pieces: int = 3,
) -> list[tuple[str, dict[str, Any]]]:
    """The events of one streamed Responses reply, as the API reference shows them."""
    seq = 0
    events: list[tuple[str, dict[str, Any]]] = []

    def add(kind: str, **data: Any) -> None:
        nonlocal seq
        events.append((kind, {"type": kind, "sequence_number": seq, **data}))
        seq += 1

    response = {
        "id": "resp_fake",
        "object": "response",
        "created_at": 1,
        "model": "gpt-fake",
        "status": "in_progress",
        "output": [],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    }
    add("response.created", response=response)
    output: list[dict[str, Any]] = []
    index = 0
    if reasoning is not None:
        item = {"type": "reasoning", "id": reasoning_id, "summary": []}
        add("response.output_item.added", output_index=index, item=item)
        for k, summary in enumerate(reasoning):
            add(
                "response.reasoning_summary_part.added",
                item_id=reasoning_id,
                output_index=index,
                summary_index=k,
                part={"type": "summary_text", "text": ""},
            )
            for p in _split(summary, pieces):
                add(
                    "response.reasoning_summary_text.delta",
                    item_id=reasoning_id,
                    output_index=index,
                    summary_index=k,
                    delta=p,
                )
        done = {
            "type": "reasoning",
            "id": reasoning_id,
            "summary": [{"type": "summary_text", "text": s} for s in reasoning],
            "encrypted_content": encrypted,
        }
        add("response.output_item.done", output_index=index, item=done)
        output.append(done)
        index += 1
    if text:
        item = {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "status": "in_progress",
            "content": [],
        }
        add("response.output_item.added", output_index=index, item=item)
        for p in _split(text, pieces):
            add(
                "response.output_text.delta",
                item_id="msg_1",
                output_index=index,
                content_index=0,
                delta=p,
                logprobs=[],
            )
        done = dict(
            item,
            status="completed",
            content=[{"type": "output_text", "text": text, "annotations": []}],
        )
        add("response.output_item.done", output_index=index, item=done)
        output.append(done)
        index += 1
    for call_id, name, arguments in calls:
        item_id = f"fc_{index}"
        item = {
            "type": "function_call",
            "id": item_id,
            "call_id": call_id,
            "name": name,
            "arguments": "",
            "status": "in_progress",
        }
        add("response.output_item.added", output_index=index, item=item)
        for p in _split(arguments, pieces):
            add(
                "response.function_call_arguments.delta",
                item_id=item_id,
                output_index=index,
                delta=p,
            )
        done = dict(item, arguments=arguments, status="completed")
        add("response.output_item.done", output_index=index, item=done)
        output.append(done)
        index += 1
    final = dict(
        response,
        status=status,
        output=output,
        usage=usage
        or {
            "input_tokens": 20,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 9,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 29,
        },
    )
    if status == "incomplete":
        final["incomplete_details"] = {"reason": "max_output_tokens"}
    add("response.completed" if status == "completed" else "response.incomplete", response=final)
    return events


def _split(text: str, pieces: int) -> list[str]:
    if not text:
        return []
    size = max(1, -(-len(text) // pieces))
    return [text[i : i + size] for i in range(0, len(text), size)]
