"""Model adapter benchmark: the adapters' own cost per streamed token, and a real model's turn.

Run with ``python benchmarks/bench_models.py [--quick] [--tokens N] [--rounds R]``. Prints
the environment, a table, then one JSON line per metric with the keys ``metric``, ``value``,
``baseline``, ``ratio``, ``unit``, ``target`` and ``ok``.

``anthropic_cpu_per_token``
    CPU microseconds of this process per streamed text token when ``AnthropicModel.stream``
    reads a Messages stream of N text deltas, against the bare SDK (``AsyncAnthropic.messages.
    create(stream=True)``, each event's ``delta.text`` read) reading the very same bytes. The
    server is another process that writes one precomputed body for every request, so its CPU
    is not counted. Target ratio <= 1.3.
``responses_cpu_per_token``
    The same for ``OpenAIResponsesModel`` against ``AsyncOpenAI.responses.create(stream=True)``.
    Target ratio <= 1.3.
``chat_cpu_per_token``
    The same for ``OpenAIChatModel`` against ``AsyncOpenAI.chat.completions.create(stream=True)``
    (each chunk's ``choices[0].delta.content`` read). Target ratio <= 1.3.
``chat_raw_cpu_per_token``
    ``OpenAIChatModel`` against the SDK's cheapest stream, the one the adapter reads: the raw
    response parsed as ``AsyncStream[object]`` (each chunk the JSON dict the server sent, no
    pydantic model built per chunk). Target ratio <= 1.3.
``real_turn_overhead``
    With the real model (SmolLM2-135M under llama.cpp's server, when installed): wall seconds
    of a whole durable agentnb turn (``OpenAIChatModel``, SQLite store) against the bare
    ``openai`` SDK streaming the same request from the same server; the difference is what
    agentnb adds around llama.cpp's own generation. Reported, no target. Skipped (a note on
    stderr) without the build.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import agentnb as nb
from agentnb.events import Message
from agentnb.models import ModelRequest
from agentnb.models.anthropic import AnthropicModel
from agentnb.models.openai import OpenAIChatModel
from agentnb.models.openai_responses import OpenAIResponsesModel

KEY = "sk-bench-0000000000000000"

_SERVER = r"""
import http.server, sys
bodies = {"/v1/messages": open(sys.argv[1], "rb").read(),
          "/v1/responses": open(sys.argv[2], "rb").read(),
          "/v1/chat/completions": open(sys.argv[3], "rb").read()}

class Serve(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        body = bodies[self.path]
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Serve)
print(server.server_address[1], flush=True)
server.serve_forever()
"""
"""A loopback server in its own process writing one precomputed SSE body per request."""


def _sse(events: list[tuple[str, dict[str, Any]]]) -> bytes:
    return b"".join(f"event: {k}\ndata: {json.dumps(d)}\n\n".encode() for k, d in events)


def anthropic_body(tokens: int) -> bytes:
    events: list[tuple[str, dict[str, Any]]] = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_b",
                    "type": "message",
                    "role": "assistant",
                    "content": [],
                    "model": "claude-bench",
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {"input_tokens": 10, "output_tokens": 1},
                },
            },
        ),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        ),
    ]
    events += [
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": " word"},
            },
        )
        for _ in range(tokens)
    ]
    events += [
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": tokens},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return _sse(events)


def responses_body(tokens: int) -> bytes:
    seq = iter(range(10**9))
    base = {
        "id": "resp_b",
        "object": "response",
        "created_at": 1,
        "model": "gpt-bench",
        "output": [],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    }
    item = {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "status": "in_progress",
        "content": [],
    }
    events: list[tuple[str, dict[str, Any]]] = [
        (
            "response.created",
            {
                "type": "response.created",
                "sequence_number": next(seq),
                "response": dict(base, status="in_progress"),
            },
        ),
        (
            "response.output_item.added",
            {
                "type": "response.output_item.added",
                "sequence_number": next(seq),
                "output_index": 0,
                "item": item,
            },
        ),
    ]
    events += [
        (
            "response.output_text.delta",
            {
                "type": "response.output_text.delta",
                "sequence_number": next(seq),
                "item_id": "msg_1",
                "output_index": 0,
                "content_index": 0,
                "delta": " word",
                "logprobs": [],
            },
        )
        for _ in range(tokens)
    ]
    usage = {
        "input_tokens": 10,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": tokens + 10,
    }
    events.append(
        (
            "response.completed",
            {
                "type": "response.completed",
                "sequence_number": next(seq),
                "response": dict(base, status="completed", usage=usage),
            },
        )
    )
    return _sse(events)


def chat_body(tokens: int) -> bytes:
    head = {"id": "chatcmpl-b", "object": "chat.completion.chunk", "created": 1, "model": "gpt-b"}
    chunks: list[dict[str, Any]] = [
        dict(head, choices=[{"index": 0, "delta": {"role": "assistant", "content": ""}}])
    ]
    chunks += [
        dict(head, choices=[{"index": 0, "delta": {"content": " word"}, "finish_reason": None}])
        for _ in range(tokens)
    ]
    chunks.append(dict(head, choices=[{"index": 0, "delta": {}, "finish_reason": "stop"}]))
    usage = {"prompt_tokens": 10, "completion_tokens": tokens, "total_tokens": tokens + 10}
    chunks.append(dict(head, choices=[], usage=usage))
    lines = [f"data: {json.dumps(c)}\n\n".encode() for c in chunks]
    return b"".join(lines) + b"data: [DONE]\n\n"


def _request() -> ModelRequest:
    return ModelRequest(messages=(Message(id="m1", role="user", text="go"),))


async def _adapter_cpu(model: Any, rounds: int) -> list[float]:
    async def once() -> None:
        await _drain(model.stream(_request()))

    return await _cpu(once, model.aclose, rounds)


async def _drain(stream: Any) -> None:
    async for _ in stream:
        pass


async def _cpu(
    once: Callable[[], Awaitable[None]], close: Callable[[], Awaitable[None]], rounds: int
) -> list[float]:
    """CPU seconds of each of ``rounds`` calls of ``once`` after a warm one; then ``close``."""
    out = []
    try:
        await once()
        for _ in range(rounds):
            started = time.process_time()
            await once()
            out.append(time.process_time() - started)
    finally:
        await close()
    return out


async def _bare_anthropic_cpu(base_url: str, rounds: int) -> list[float]:
    import anthropic

    client = anthropic.AsyncAnthropic(api_key=KEY, base_url=base_url, max_retries=0)
    body = AnthropicModel("claude-bench", api_key=KEY, base_url=base_url).body(_request())

    async def once() -> None:
        stream = await client.messages.create(**body, stream=True)
        async for event in stream:
            if event.type == "content_block_delta":
                _ = event.delta.text  # type: ignore[union-attr]

    return await _cpu(once, client.close, rounds)


async def _bare_responses_cpu(base_url: str, rounds: int) -> list[float]:
    import openai

    client = openai.AsyncOpenAI(api_key=KEY, base_url=base_url, max_retries=0)
    body = OpenAIResponsesModel("gpt-bench", api_key=KEY, base_url=base_url).body(_request())

    async def once() -> None:
        stream = await client.responses.create(**body, stream=True)
        async for event in stream:
            if event.type == "response.output_text.delta":
                _ = event.delta

    return await _cpu(once, client.close, rounds)


async def _bare_chat_cpu(base_url: str, rounds: int, *, raw: bool = False) -> list[float]:
    import openai

    client = openai.AsyncOpenAI(api_key=KEY, base_url=base_url, max_retries=0)

    async def once() -> None:
        if raw:
            response = await client.chat.completions.with_raw_response.create(
                model="gpt-bench",
                messages=[{"role": "user", "content": "go"}],
                stream=True,
                stream_options={"include_usage": True},
            )
            async for data in response.parse(to=openai.AsyncStream[object]):
                if data["choices"]:  # type: ignore[index]
                    _ = data["choices"][0]["delta"].get("content")  # type: ignore[index]
            return
        stream = await client.chat.completions.create(
            model="gpt-bench",
            messages=[{"role": "user", "content": "go"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        async for chunk in stream:
            if chunk.choices:
                _ = chunk.choices[0].delta.content

    return await _cpu(once, client.close, rounds)


def _record(
    metric: str, value: float, baseline: float, unit: str, target: float | None
) -> dict[str, Any]:
    ratio = value / baseline
    return {
        "metric": metric,
        "value": round(value, 3),
        "baseline": round(baseline, 3),
        "ratio": round(ratio, 3),
        "unit": unit,
        "target": target,
        "ok": None if target is None else ratio <= target,
    }


def _real_turn(rounds: int) -> dict[str, Any] | None:
    from agentnb.testing.llama_server import LlamaServer, missing

    why = missing()
    if why is not None:
        print(f"real_turn_overhead skipped: {why}", file=sys.stderr)
        return None
    import openai

    options = {"max_tokens": 16, "temperature": 0, "seed": 7}
    question = "What is the capital of France?"
    with LlamaServer() as llama, tempfile.TemporaryDirectory() as tmp:
        model = OpenAIChatModel("smollm2", base_url=llama.base_url, api_key="", options=options)
        agent = nb.Agent(name="Smol", agent_id="smol", model=model)
        runtime = nb.Runtime(agent, store=f"sqlite:///{Path(tmp) / 'bench.sqlite'}")

        async def bare() -> float:
            client = openai.AsyncOpenAI(api_key="none", base_url=llama.base_url, max_retries=0)
            try:
                started = time.perf_counter()
                stream = await client.chat.completions.create(
                    model="smollm2",
                    messages=[{"role": "user", "content": question}],
                    stream=True,
                    **options,  # type: ignore[arg-type]
                )
                async for _ in stream:
                    pass
                return time.perf_counter() - started
            finally:
                await client.close()

        try:
            asyncio.run(bare())  # warm: the first request also loads the weights' pages
            runtime.session("warm").run(question, timeout=300)
            ours, theirs = [], []
            for n in range(rounds):  # interleaved, so load changes hit both sides alike
                theirs.append(asyncio.run(bare()))
                started = time.perf_counter()
                runtime.session(f"s{n}").run(question, timeout=300)
                ours.append(time.perf_counter() - started)
        finally:
            runtime.close()
    value, baseline = statistics.median(ours), statistics.median(theirs)
    record = _record("real_turn_overhead", value, baseline, "s per turn", None)
    record["overhead_ms"] = round((value - baseline) * 1000, 1)
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer tokens and rounds")
    parser.add_argument("--tokens", type=int, default=None, help="text deltas per stream")
    parser.add_argument("--rounds", type=int, default=None, help="streams per side")
    parser.add_argument("--no-real", action="store_true", help="skip the real-model turn")
    args = parser.parse_args(argv)
    tokens = args.tokens or (500 if args.quick else 5_000)
    rounds = args.rounds or (3 if args.quick else 7)

    with tempfile.TemporaryDirectory() as tmp:
        messages, responses = Path(tmp) / "messages.sse", Path(tmp) / "responses.sse"
        chat = Path(tmp) / "chat.sse"
        messages.write_bytes(anthropic_body(tokens))
        responses.write_bytes(responses_body(tokens))
        chat.write_bytes(chat_body(tokens))
        server = subprocess.Popen(
            [sys.executable, "-c", _SERVER, str(messages), str(responses), str(chat)],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert server.stdout is not None
            url = f"http://127.0.0.1:{int(server.stdout.readline())}"
            per = 1e6 / tokens
            claude = AnthropicModel("claude-bench", api_key=KEY, base_url=url)
            gpt = OpenAIResponsesModel("gpt-bench", api_key=KEY, base_url=f"{url}/v1")
            chat_model = OpenAIChatModel("gpt-bench", api_key=KEY, base_url=f"{url}/v1")
            records = [
                _record(
                    "anthropic_cpu_per_token",
                    statistics.median(asyncio.run(_adapter_cpu(claude, rounds))) * per,
                    statistics.median(asyncio.run(_bare_anthropic_cpu(url, rounds))) * per,
                    "us CPU per token",
                    1.3,
                ),
                _record(
                    "responses_cpu_per_token",
                    statistics.median(asyncio.run(_adapter_cpu(gpt, rounds))) * per,
                    statistics.median(asyncio.run(_bare_responses_cpu(f"{url}/v1", rounds))) * per,
                    "us CPU per token",
                    1.3,
                ),
            ]
            chat_cpu = statistics.median(asyncio.run(_adapter_cpu(chat_model, rounds))) * per
            for metric, raw in (("chat_cpu_per_token", False), ("chat_raw_cpu_per_token", True)):
                bare = asyncio.run(_bare_chat_cpu(f"{url}/v1", rounds, raw=raw))
                records.append(
                    _record(
                        metric, chat_cpu, statistics.median(bare) * per, "us CPU per token", 1.3
                    )
                )
        finally:
            server.terminate()
            server.wait(10)
    if not args.no_real:
        real = _real_turn(1 if args.quick else 3)
        if real is not None:
            records.append(real)

    print(
        f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs, "
        f"load {os.getloadavg()[0]:.2f}; {tokens} deltas per stream, {rounds} rounds"
    )
    print(f"{'metric':<28} {'agentnb':>12} {'baseline':>12} {'ratio':>7} {'target':>7}")
    for r in records:
        target = "" if r["target"] is None else f"<= {r['target']}"
        print(f"{r['metric']:<28} {r['value']:>12} {r['baseline']:>12} {r['ratio']:>7} {target:>7}")
    for r in records:
        print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
