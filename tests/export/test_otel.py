"""OTelSink: spans per the GenAI conventions, ids from the log, at least once, no contents
unless asked; the SDK's in-memory exporter, and a loopback OTLP receiver for the CLI."""

from __future__ import annotations

import gzip
import http.server
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import agentnb as nb
from agentnb.cli import main
from agentnb.export import Exporter

pytest.importorskip("opentelemetry.sdk")
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)

from agentnb.export.otel import OTelSink


@nb.tool
def price(plan: str, api_key: str = "") -> str:
    """The price of a plan.

    Args:
        plan: the plan
        api_key: a credential
    """
    return f"{plan}: 10 EUR"


@nb.tool
def explode() -> str:
    """Always fails."""
    raise RuntimeError("the price list is gone")


@nb.tool(confirm=True)
def order(item: str) -> str:
    """Order an item."""
    return f"ordered {item}"


def script(messages: list[Any]) -> Any:
    last = messages[-1]
    if last.role == "user" and "order" in last.text:
        return nb.ToolCall("order", {"item": "pen"})
    if last.role == "user" and "break" in last.text:
        return nb.ToolCall("explode")
    if last.role == "user":
        return nb.Reply(tool_calls=[nb.ToolCall("price", {"plan": "pro", "api_key": "sk-live"})])
    return "It costs 10 EUR."


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[nb.Runtime]:
    agent = nb.Agent(
        name="Cost", agent_id="cost", model=nb.ScriptedModel(script), tools=[price, order, explode]
    )
    with nb.Runtime(agent, store=f"sqlite:///{tmp_path / 'a.sqlite'}") as rt:
        yield rt


def export(runtime: nb.Runtime, **options: Any) -> list[Any]:
    memory = InMemorySpanExporter()
    Exporter(runtime.store, OTelSink(memory, **options)).drain()
    return list(memory.get_finished_spans())


def by_name(spans: list[Any]) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for span in spans:
        out.setdefault(span.attributes["gen_ai.operation.name"], []).append(span)
    return out


def events(session: nb.Session, type_: str) -> list[nb.Event]:
    return [e for e in session.log.scan(0, None) if e.type == type_]


class TestSpanShapes:
    def test_a_run_its_model_calls_and_tool_calls_are_spans(self, runtime: nb.Runtime) -> None:
        """invoke_agent per run, chat per model call, execute_tool per call, nested."""
        runtime.session("s", user_id="u").run("price?")
        spans = by_name(export(runtime))
        (run,) = spans["invoke_agent"]
        assert len(spans["chat"]) == 2
        (tool,) = spans["execute_tool"]
        assert run.parent is None
        assert {s.parent.span_id for s in spans["chat"] + [tool]} == {run.context.span_id}
        assert len({s.context.trace_id for s in spans["chat"] + [tool, run]}) == 1
        assert run.name == "invoke_agent cost"
        assert tool.name == "execute_tool price"

    def test_chat_spans_carry_model_usage_and_finish_reason(self, runtime: nb.Runtime) -> None:
        """A chat span has the model, token usage and finish reason of its model/end."""
        session = runtime.session("s", user_id="u")
        session.run("price?")
        ends = [e.payload for e in events(session, "model/end")]
        chats = by_name(export(runtime))["chat"]
        chats.sort(key=lambda s: s.start_time)
        for span, end in zip(chats, ends, strict=True):
            assert span.attributes["gen_ai.request.model"] == "scripted"
            assert span.attributes["gen_ai.usage.input_tokens"] == end["input_tokens"]
            assert span.attributes["gen_ai.usage.output_tokens"] == end["output_tokens"]
            assert span.attributes["gen_ai.response.finish_reasons"] == (end["finish_reason"],)

    def test_tool_spans_carry_name_call_id_and_status(self, runtime: nb.Runtime) -> None:
        """An execute_tool span names the tool, its call id and its result's status."""
        session = runtime.session("s", user_id="u")
        session.run("price?")
        (result,) = events(session, "tool/result")
        (tool,) = by_name(export(runtime))["execute_tool"]
        assert tool.attributes["gen_ai.tool.name"] == "price"
        assert tool.attributes["gen_ai.tool.call.id"] == result.payload["call_id"]
        assert tool.attributes["agentnb.tool.status"] == "success"

    def test_times_come_from_the_log(self, runtime: nb.Runtime) -> None:
        """A run's span starts at run/start and ends at run/end, as committed."""
        session = runtime.session("s", user_id="u")
        session.run("price?")
        (start,) = events(session, "run/start")
        (end,) = events(session, "run/end")
        (run,) = by_name(export(runtime))["invoke_agent"]
        assert run.start_time == int(start.occurred_at.timestamp() * 1e6) * 1000
        assert run.end_time == int(end.occurred_at.timestamp() * 1e6) * 1000

    def test_the_runs_of_one_turn_share_its_trace(self, runtime: nb.Runtime) -> None:
        """A turn answered after a confirmation has two runs, root spans of one trace."""
        session = runtime.session("s", user_id="u")
        assert session.run("order a pen").status == "suspended"
        (request_id,) = session.pending()
        session.respond(request_id, True).wait(30)
        runs = by_name(export(runtime))["invoke_agent"]
        assert len(runs) == 2
        assert len({r.context.trace_id for r in runs}) == 1
        assert {r.attributes["agentnb.run.status"] for r in runs} == {"suspended", "completed"}

    def test_a_failed_tool_call_is_an_error_span(self, runtime: nb.Runtime) -> None:
        """A tool call that failed is an execute_tool span with status ERROR and the reason."""
        runtime.session("s", user_id="u").run("break it")
        (tool,) = by_name(export(runtime))["execute_tool"]
        assert not tool.status.is_ok
        assert "the price list is gone" in (tool.status.description or "")


class TestIds:
    def test_a_re_export_sends_the_same_ids(self, runtime: nb.Runtime) -> None:
        """Exporting the same events again (another sink name) yields identical ids."""
        runtime.session("s", user_id="u").run("price?")
        first = export(runtime)
        second = export(runtime, name="otel:again")
        ids = {(s.context.trace_id, s.context.span_id) for s in first}
        assert ids == {(s.context.trace_id, s.context.span_id) for s in second}
        assert len(ids) == len(first)

    def test_a_second_drain_sends_nothing_new(self, runtime: nb.Runtime) -> None:
        """The watermark moves past sent spans: a second drain of the same sink is empty."""
        runtime.session("s", user_id="u").run("price?")
        memory = InMemorySpanExporter()
        sink = OTelSink(memory)
        Exporter(runtime.store, sink).drain()
        count = len(memory.get_finished_spans())
        Exporter(runtime.store, sink).drain()
        assert len(memory.get_finished_spans()) == count


class TestContent:
    def test_no_contents_by_default(self, runtime: nb.Runtime) -> None:
        """Without capture_content no message, argument or result text leaves."""
        runtime.session("s", user_id="u").run("price?")
        for span in export(runtime):
            text = str(dict(span.attributes))
            assert "price?" not in text
            assert "10 EUR" not in text
            assert "sk-live" not in text

    def test_contents_on_request_with_secrets_redacted(self, runtime: nb.Runtime) -> None:
        """capture_content=True sends messages and tool contents, never a secret."""
        runtime.session("s", user_id="u").run("price?")
        spans = by_name(export(runtime, capture_content=True))
        (tool,) = spans["execute_tool"]
        assert tool.attributes["gen_ai.tool.call.result"] == "pro: 10 EUR"
        assert '"api_key":"[redacted]"' in tool.attributes["gen_ai.tool.call.arguments"]
        assert any("price?" in s.attributes.get("gen_ai.input.messages", "") for s in spans["chat"])
        every = [span for group in spans.values() for span in group]
        assert all("sk-live" not in str(dict(s.attributes)) for s in every)


class _Blocking:
    """A tool that waits until the test lets it go."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.go = threading.Event()


class TestAtLeastOnce:
    def test_an_open_run_holds_the_watermark_back(self, tmp_path: Path) -> None:
        """A drain during a run sends no run span and keeps the watermark before its start;
        a new process's sink then sends the whole run once it ends."""
        gate = _Blocking()

        @nb.tool
        def wait_here() -> str:
            """Waits."""
            gate.started.set()
            gate.go.wait(30)
            return "done"

        agent = nb.Agent(
            name="B",
            agent_id="b",
            model=nb.ScriptedModel([nb.ToolCall("wait_here"), "ok"]),
            tools=[wait_here],
        )
        with nb.Runtime(agent, store=f"sqlite:///{tmp_path / 'b.sqlite'}") as runtime:
            session = runtime.session("s", user_id="u")
            receipt = session.submit("go")
            assert gate.started.wait(30)
            first = InMemorySpanExporter()
            sink = OTelSink(first)
            Exporter(runtime.store, sink).drain()
            (start,) = events(session, "run/start")
            assert runtime.store.watermark(session.key, sink.name) < start.seq
            assert "invoke_agent" not in by_name(list(first.get_finished_spans()))
            gate.go.set()
            receipt.wait(30)
            later = InMemorySpanExporter()  # another process: nothing in memory
            Exporter(runtime.store, OTelSink(later)).drain()
            (run,) = by_name(list(later.get_finished_spans()))["invoke_agent"]
            assert run.start_time == int(start.occurred_at.timestamp() * 1e6) * 1000
            assert runtime.store.watermark(session.key, sink.name) == session.log.head()

    def test_a_refusing_exporter_acknowledges_nothing(self, runtime: nb.Runtime) -> None:
        """When the exporter fails, the drain raises and the watermark stays; the next drain
        sends everything."""

        class Flaky(InMemorySpanExporter):
            fail = True

            def export(self, spans: Any) -> SpanExportResult:
                if self.fail:
                    return SpanExportResult.FAILURE
                return super().export(spans)

        session = runtime.session("s", user_id="u")
        session.run("price?")
        flaky = Flaky()
        sink = OTelSink(flaky)
        with pytest.raises(nb.StorageError, match="refused"):
            Exporter(runtime.store, sink).drain()
        assert runtime.store.watermark(session.key, sink.name) == 0
        flaky.fail = False
        Exporter(runtime.store, sink).drain()
        assert len(by_name(list(flaky.get_finished_spans()))["invoke_agent"]) == 1

    def test_the_runtime_exports_live(self, tmp_path: Path) -> None:
        """Runtime(export_to=[OTelSink]) sends a run's spans in the background."""
        memory = InMemorySpanExporter()
        agent = nb.Agent(
            name="C", agent_id="c", model=nb.ScriptedModel(script), tools=[price, order, explode]
        )
        store = f"sqlite:///{tmp_path / 'c.sqlite'}"
        with nb.Runtime(agent, store=store, export_to=[OTelSink(memory)]) as runtime:
            runtime.session("s", user_id="u").run("price?")
            deadline = time.monotonic() + 30
            while "invoke_agent" not in by_name(list(memory.get_finished_spans())):
                assert time.monotonic() < deadline, "no run span exported"
                time.sleep(0.05)


class TestBadInput:
    def test_an_exporter_must_be_a_span_exporter(self) -> None:
        """Anything without export() is refused with InvalidInput."""
        with pytest.raises(nb.InvalidInput, match="SpanExporter"):
            OTelSink(object())

    def test_capture_content_must_be_a_bool(self) -> None:
        """capture_content takes True or False only."""
        with pytest.raises(nb.InvalidInput):
            OTelSink(InMemorySpanExporter(), capture_content="yes")  # type: ignore[arg-type]


class _Receiver(http.server.BaseHTTPRequestHandler):
    bodies: list[bytes]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        type(self).bodies.append(body)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[bytes]]]:
    bodies: list[bytes] = []
    handler = type("Handler", (_Receiver,), {"bodies": bodies})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", bodies
    finally:
        server.shutdown()
        server.server_close()


class TestCommand:
    def test_export_otlp_sends_spans_to_a_collector(
        self, runtime: nb.Runtime, receiver: tuple[str, list[bytes]], capsys: Any
    ) -> None:
        """agentnb export --otlp URL posts the spans (OTLP/HTTP protobuf) to /v1/traces."""
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        runtime.session("s", user_id="u").run("price?")
        url, bodies = receiver
        assert main(["export", "--otlp", url, "--store", runtime.store.url]) == 0
        assert "exported" in capsys.readouterr().out
        names = []
        for body in bodies:
            request = ExportTraceServiceRequest.FromString(body)
            for resource in request.resource_spans:
                for scope in resource.scope_spans:
                    names += [span.name for span in scope.spans]
        assert sorted(names) == [
            "chat scripted",
            "chat scripted",
            "execute_tool price",
            "invoke_agent cost",
        ]

    def test_a_bad_otlp_url_is_a_clear_error(self, runtime: nb.Runtime, capsys: Any) -> None:
        """--otlp with something that is not an http(s) URL fails with a message."""
        assert main(["export", "--otlp", "localhost:4318", "--store", runtime.store.url]) != 0
        assert "http(s) URL" in capsys.readouterr().err


class TestSubAgents:
    def test_a_sub_agents_runs_nest_under_its_parents_tool_call(self) -> None:
        """A child session (its log opens with subagent/linked) joins the parent's turn
        trace, its run under the parent's execute_tool span of the delegating call."""
        from agentnb.export.otel import tool_span_id, trace_id

        helper = nb.Agent(
            name="Helper",
            agent_id="helper",
            model=nb.ScriptedModel(["facts"]),
            instructions="Help.",
        )
        boss = nb.Agent(
            name="Boss",
            agent_id="boss",
            model=nb.ScriptedModel([nb.ToolCall("helper", {"task": "find facts"}), "done"]),
            tools=[nb.subagent(helper)],
        )
        with nb.Runtime(boss, store="memory://") as runtime:
            parent = runtime.session("s1", user_id="u")
            assert parent.run("delegate", timeout=30).status == "completed"
            spawned = next(e for e in parent.log.scan() if e.type == "subagent/spawned")
            call_id = spawned.payload["call_id"]
            child = parent.child(call_id)
            logs = {parent.key: list(parent.log.scan()), child.key: list(child.log.scan())}
            turn_id = parent.tasks()[0].turn_id
        assert logs[child.key][0].type == "subagent/linked"
        memory = InMemorySpanExporter()
        OTelSink(memory).accept(logs)
        spans = memory.get_finished_spans()
        child_runs = [
            s
            for s in spans
            if s.name.startswith("invoke_agent") and s.attributes.get("gen_ai.agent.id") == "helper"
        ]
        (run,) = child_runs
        assert run.context.trace_id == trace_id(parent.key, turn_id)
        assert run.parent is not None
        assert run.parent.span_id == tool_span_id(parent.key, call_id, 1)
        tool_spans = [s for s in spans if s.context.span_id == run.parent.span_id]
        assert [s.name for s in tool_spans] == ["execute_tool helper"]
