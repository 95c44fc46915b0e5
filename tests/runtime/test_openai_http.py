"""OpenAIChatModel against a real HTTP server on 127.0.0.1 speaking chat-completions SSE.

No mocks: the server is a thread reading HTTP/1.1 requests off real sockets and writing the
bytes each test scripts (chunked event streams, error statuses, streams cut mid-way), and it
counts the TCP connections it accepts.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import random
import socket
import socketserver
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import pytest

import agentnb as nb
from agentnb.events import Message
from agentnb.models import (
    Backoff,
    Completion,
    ModelError,
    ModelRequest,
    StreamItem,
    TextDelta,
)
from agentnb.models.openai import OpenAIChatModel

Reply = Callable[[BinaryIO], bool]
"""Writes one response; returns False to close the connection afterwards."""


class LoopbackServer:
    """A chat-completions server on 127.0.0.1 that answers with scripted replies, in order."""

    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.requests: list[dict[str, Any]] = []
        self.connections = 0
        self._lock = threading.Lock()
        owner = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                with owner._lock:
                    owner.connections += 1
                while self.rfile.readline():  # the request line; empty when the client left
                    headers = {}
                    for line in iter(self.rfile.readline, b"\r\n"):
                        if not line:
                            return
                        key, _, value = line.decode("latin-1").partition(":")
                        headers[key.strip().lower()] = value.strip()
                    body = self.rfile.read(int(headers.get("content-length", "0")))
                    with owner._lock:
                        owner.requests.append(json.loads(body))
                        reply = owner.replies.pop(0)
                    if not reply(self.wfile):
                        return

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self._server = Server(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )
        self._thread.start()

    def script(self, *replies: Reply) -> None:
        self.replies.extend(replies)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    srv = LoopbackServer()
    try:
        yield srv
    finally:
        srv.close()


def event(chunk: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n".encode()


def delta(**fields: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": fields, "finish_reason": None}]}


def finish(reason: str = "stop") -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": {}, "finish_reason": reason}]}


DONE = b"data: [DONE]\n\n"
USAGE = event({"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 2}})


def _head(out: BinaryIO, status: str, headers: dict[str, str]) -> None:
    lines = [f"HTTP/1.1 {status}", *(f"{k}: {v}" for k, v in headers.items()), "", ""]
    out.write("\r\n".join(lines).encode())


def _chunk(out: BinaryIO, piece: bytes) -> None:
    # One HTTP chunk per piece, each its own write: the client receives them apart.
    out.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
    out.flush()


def stream(*pieces: bytes) -> Reply:
    """A 200 event stream sent as one HTTP chunk per piece; the connection stays open."""

    def reply(out: BinaryIO) -> bool:
        _head(out, "200 OK", {"Content-Type": "text/event-stream", "Transfer-Encoding": "chunked"})
        for piece in pieces:
            _chunk(out, piece)
        out.write(b"0\r\n\r\n")
        return True

    return reply


def answer(text: str) -> Reply:
    """A whole streamed answer: the text, the finish, usage and [DONE]."""
    return stream(event(delta(role="assistant", content="")), event(delta(content=text)),
                  event(finish()), USAGE, DONE)  # fmt: skip


def cut(*pieces: bytes) -> Reply:
    """A 200 event stream that sends ``pieces`` and then closes the socket mid-body."""

    def reply(out: BinaryIO) -> bool:
        _head(out, "200 OK", {"Content-Type": "text/event-stream", "Transfer-Encoding": "chunked"})
        for piece in pieces:
            _chunk(out, piece)
        return False

    return reply


def status(code: int, reason: str, **headers: str) -> Reply:
    """An error status with a JSON error body (Content-Length, so the connection is reused)."""

    def reply(out: BinaryIO) -> bool:
        body = json.dumps({"error": {"message": reason}}).encode()
        _head(
            out,
            f"{code} {reason}",
            {"Content-Type": "application/json", "Content-Length": str(len(body)), **headers},
        )
        out.write(body)
        return True

    return reply


def model_for(server: LoopbackServer, **kwargs: Any) -> OpenAIChatModel:
    return OpenAIChatModel(
        "gpt-test", base_url=server.base_url, api_key="sk-loopback", timeout=10, **kwargs
    )


def request(text: str = "hi") -> ModelRequest:
    return ModelRequest(messages=(Message(id="m1", role="user", text=text),))


async def call_with_retries(
    model: OpenAIChatModel, req: ModelRequest, retries: int = 3
) -> tuple[Completion, list[float]]:
    """The runtime's retry rule: a retryable failure is tried again after
    ``model.backoff.delay``; the waits are returned instead of slept."""
    waits: list[float] = []
    for attempt in range(1, retries + 2):
        try:
            return await model.complete(req), waits
        except ModelError as exc:
            if not exc.retryable or attempt > retries:
                raise
            waits.append(model.backoff.delay(attempt, exc))
    raise AssertionError("unreachable")


def run(model: OpenAIChatModel, *calls: Callable[[], Any]) -> list[Any]:
    """Await each call in order on one event loop, then close the model's client there."""

    async def main() -> list[Any]:
        try:
            return [await call() for call in calls]
        finally:
            await model.aclose()

    return asyncio.run(main())


def collect(model: OpenAIChatModel, seen: list[StreamItem]) -> Callable[[], Any]:
    async def call() -> None:
        async for item in model.stream(request()):
            seen.append(item)

    return call


class TestOneClientPerModel:
    def test_calls_reuse_one_connection(self, server: LoopbackServer) -> None:
        """Three calls in a row go over one TCP connection of the model's pooled client."""
        server.script(answer("one"), answer("two"), answer("three"))
        model = model_for(server)
        texts = run(model, *[lambda: model.complete(request())] * 3)
        assert [t.text for t in texts] == ["one", "two", "three"]
        assert len(server.requests) == 3
        assert server.connections == 1

    def test_aclose_ends_the_pool_and_a_later_call_reconnects(self, server: LoopbackServer) -> None:
        """After aclose() the model still works: the next call opens a new connection."""
        server.script(answer("before"), answer("after"))
        model = model_for(server)
        run(model, lambda: model.complete(request()))
        assert run(model, lambda: model.complete(request()))[0].text == "after"
        assert server.connections == 2

    def test_error_statuses_keep_the_connection(self, server: LoopbackServer) -> None:
        """A 429 answer is read whole, so the retry goes over the same connection."""
        server.script(status(429, "slow down"), answer("ok"))
        model = model_for(server)
        result, _ = run(model, lambda: call_with_retries(model, request()))[0]
        assert result.text == "ok"
        assert server.connections == 1


class TestRetryAfter:
    def test_429_retry_after_seconds_is_honoured(self, server: LoopbackServer) -> None:
        """A 429 with Retry-After: 3 makes the runtime's wait 3 seconds, not the backoff's."""
        server.script(status(429, "rate limited", **{"Retry-After": "3"}), answer("done"))
        model = model_for(server, backoff=Backoff(base=0.2, rng=random.Random(1).random))
        result, waits = run(model, lambda: call_with_retries(model, request()))[0]
        assert result.text == "done"
        assert waits == [3.0]
        assert len(server.requests) == 2

    def test_503_retry_after_http_date_is_honoured(self, server: LoopbackServer) -> None:
        """A Retry-After given as an HTTP date 20 s ahead makes a wait of about 20 seconds."""
        when = email.utils.formatdate(time.time() + 20, usegmt=True)
        server.script(status(503, "busy", **{"Retry-After": when}), answer("done"))
        model = model_for(server, backoff=Backoff(base=0.2))
        _, waits = run(model, lambda: call_with_retries(model, request()))[0]
        assert len(waits) == 1
        assert 15 < waits[0] <= 20

    def test_retry_after_is_on_the_error(self, server: LoopbackServer) -> None:
        """The adapter reports the server's Retry-After as ModelError.retry_after."""
        server.script(status(429, "rate limited", **{"Retry-After": "12"}))
        model = model_for(server)
        with pytest.raises(ModelError, match="HTTP 429: rate limited") as info:
            run(model, lambda: model.complete(request()))
        assert info.value.retryable
        assert info.value.retry_after == 12.0


class TestJitteredBackoff:
    def test_delays_lie_in_the_jitter_range(self, server: LoopbackServer) -> None:
        """Three 503s without Retry-After are retried after delays drawn within
        [ceiling * (1 - jitter), ceiling] of an exponentially growing ceiling."""
        server.script(*[status(503, "overloaded")] * 3, answer("finally"))
        backoff = Backoff(base=0.2, factor=2, jitter=0.5, rng=random.Random(11).random)
        model = model_for(server, backoff=backoff)
        result, waits = run(model, lambda: call_with_retries(model, request()))[0]
        assert result.text == "finally"
        ceilings = [0.2, 0.4, 0.8]
        assert len(waits) == 3
        for wait, ceiling in zip(waits, ceilings, strict=True):
            assert ceiling * 0.5 <= wait <= ceiling
        assert waits != ceilings  # the jitter moved them
        assert server.connections == 1

    def test_seeded_source_gives_repeatable_delays(self, server: LoopbackServer) -> None:
        """The same seed gives the same delays for the same failures."""
        server.script(*[status(503, "overloaded")] * 2, answer("a"))
        server.script(*[status(503, "overloaded")] * 2, answer("b"))
        runs = []
        for _ in range(2):
            model = model_for(server, backoff=Backoff(rng=random.Random(5).random))
            runs.append(run(model, lambda m=model: call_with_retries(m, request()))[0][1])
        assert runs[0] == runs[1]


class TestEventStreamParsing:
    def test_utf8_sequence_split_across_chunks(self, server: LoopbackServer) -> None:
        """A multi-byte character whose bytes arrive in two network chunks decodes whole."""
        text = "naïve 東京 🎉"
        data = event(delta(content=text))
        split = data.index("東".encode()) + 1  # inside the 3-byte sequence
        emoji = data.index("🎉".encode()) + 2  # inside the 4-byte sequence
        server.script(stream(data[:split], data[split:emoji], data[emoji:], event(finish()), DONE))
        seen: list[StreamItem] = []
        model = model_for(server)
        run(model, collect(model, seen))
        assert [i.text for i in seen if isinstance(i, TextDelta)] == [text]

    def test_multi_line_data_is_one_event(self, server: LoopbackServer) -> None:
        """An event whose JSON comes in two data: lines is joined and parsed as one chunk."""
        body = json.dumps(delta(content="joined")).replace(
            ', "finish_reason"', ',\n"finish_reason"'
        )
        lines = "".join(f"data: {line}\n" for line in body.split("\n")) + "\n"
        assert lines.count("data:") == 2
        server.script(stream(lines.encode(), event(finish()), DONE))
        model = model_for(server)
        assert run(model, lambda: model.complete(request()))[0].text == "joined"

    def test_comments_event_id_and_retry_fields_are_ignored(self, server: LoopbackServer) -> None:
        """Comment lines, event:, id: and retry: fields change nothing about the reply."""
        server.script(
            stream(
                b": keep-alive\n\n",
                b"event: message\nid: 7\nretry: 1000\n" + event(delta(content="a")),
                b": another comment\n" + event(delta(content="b")),
                event(finish()),
                DONE,
            )
        )
        model = model_for(server)
        assert run(model, lambda: model.complete(request()))[0].text == "ab"

    def test_crlf_line_ends_even_split_between_chunks(self, server: LoopbackServer) -> None:
        """Events with CRLF line ends parse, also when a chunk ends between CR and LF."""
        first = event(delta(content="cr")).replace(b"\n", b"\r\n")
        second = event(delta(content="lf")).replace(b"\n", b"\r\n")
        server.script(
            stream(first[:-1], first[-1:] + second, event(finish()).replace(b"\n", b"\r\n"), DONE)
        )
        model = model_for(server)
        assert run(model, lambda: model.complete(request()))[0].text == "crlf"


class TestCutStreams:
    def test_cut_after_output_fails_clearly_and_is_not_retried(
        self, server: LoopbackServer
    ) -> None:
        """A server that closes the socket after part of the reply raises a non-retryable
        ModelError saying so; what streamed before stays with the consumer."""
        server.script(cut(event(delta(content="Hel"))), answer("never asked for"))
        seen: list[StreamItem] = []
        model = model_for(server)
        with pytest.raises(ModelError, match="broke off after part of it was streamed") as info:
            run(model, collect(model, seen))
        assert not info.value.retryable
        assert info.value.retry_after is None
        assert "RemoteProtocolError" in str(info.value)
        assert seen == [TextDelta("Hel")]

    def test_cut_after_output_is_not_retried_by_the_retry_rule(
        self, server: LoopbackServer
    ) -> None:
        """The runtime's retry rule sends no second request for a reply that broke off."""
        server.script(cut(event(delta(content="Hel"))), answer("never asked for"))
        model = model_for(server)
        with pytest.raises(ModelError):
            run(model, lambda: call_with_retries(model, request()))
        assert len(server.requests) == 1

    def test_cut_before_output_is_retryable(self, server: LoopbackServer) -> None:
        """A stream closed before any reply text is retryable, and the retry succeeds on a
        fresh connection."""
        server.script(cut(event(delta(role="assistant", content=""))), answer("second try"))
        model = model_for(server)
        result, waits = run(model, lambda: call_with_retries(model, request()))[0]
        assert result.text == "second try"
        assert len(waits) == 1
        assert server.connections == 2

    def test_connection_refused_is_retryable(self) -> None:
        """Nobody listening on the port gives a retryable connection error."""
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        model = OpenAIChatModel("m", base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-x")
        with pytest.raises(ModelError, match="ConnectError") as info:
            run(model, lambda: model.complete(request()))
        assert info.value.retryable


class TestTurnThroughTheRuntime:
    def test_stream_cut_mid_way_fails_the_turn_clearly(
        self, server: LoopbackServer, tmp_path: Path
    ) -> None:
        """A turn whose reply breaks off mid-stream fails with that reason, after one request."""
        server.script(cut(event(delta(content="Partial answ"))))
        model = model_for(server)
        agent = nb.Agent(name="H", agent_id="h", model=model, instructions="Be brief.")
        with nb.Runtime(agent, store=f"sqlite:///{tmp_path / 's.sqlite'}") as runtime:
            outcome = runtime.session("s", user_id="u").run("hello")
        assert outcome.status == "failed"
        assert outcome.error is not None
        assert "broke off after part of it was streamed" in outcome.error
        assert len(server.requests) == 1
