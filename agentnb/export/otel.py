"""``OTelSink``: every session as OpenTelemetry traces (GenAI semantic conventions).

``pip install -e ".[otel]"``. An export sink like ``ParquetSink`` and ``DuckDBSink``: the
``Exporter`` (or ``Runtime(export_to=[...])``, or ``agentnb export --otlp URL``) hands it
committed events and keeps the store's watermark; ``accept`` returns once the span exporter
took the spans, so delivery is at least once. What becomes a span:

- ``invoke_agent {agent_id}`` per run (``run/start`` to ``run/end``), a root span of the
  turn's trace: one trace per turn, whose runs (a resume, an answer) are its root spans;
- ``chat {model}`` per model call (``model/dispatch`` to ``model/end``), a child of its run:
  model, token usage, finish reason, status; an auxiliary call (the summariser of a
  compaction, ``request/prepared.purpose``) is marked ``agentnb.model.purpose``, so it is
  not read as a step of the conversation;
- ``execute_tool {tool}`` per tool call attempt (``tool/dispatch`` to ``tool/result``, or to
  the run's end for a call that asked the person or whose outcome is unknown), a child of its
  run: tool name, call id, status.

Ids are derived from the log: the trace id from the session and turn, each span id from the
event that opened it (a tool call's from its call id and attempt), so exporting the same
events again sends the same spans, which receivers keep once. Start and end times are the
events' ``occurred_at``. A sub-agent's session (its log opens with ``subagent/linked``) joins
its parent's trace, under the parent's ``execute_tool`` span; the link is read from that first
event, so a sink that starts past it (a new process resuming a live export mid-session) sends
the child's later runs as traces of their own.

A span is sent when it ends; until then the sink tells the exporter to hold its watermark
before the span's first event (``holds_back``), so a process that dies with a run open
re-reads that run next time. Message and tool contents are sent only with
``capture_content=True``; even then, values under keys that name secrets (``password``,
``token``, ``api_key``, ``authorization``...) are replaced by ``[redacted]``.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from agentnb.errors import DISTRIBUTION, InvalidInput, StorageError, install_hint
from agentnb.events import decode_json
from agentnb.export.base import sink_name
from agentnb.export.columns import Batch
from agentnb.ids import SessionKey

__all__ = ["OTelSink", "otlp_sink", "redact", "tool_span_id", "trace_id"]

_INSTALL = install_hint("otel")
REQUEST_SPANS = 2_000
"""Most spans in one export request (collectors refuse large requests, often over 4 MB)."""
_TYPES = (
    "run/start",
    "run/end",
    "model/dispatch",
    "model/end",
    "tool/dispatch",
    "tool/result",
    "action/end",
    "request/prepared",
    "message/assistant",
    "subagent/linked",
)
"""The event types spans are made from; the others are skipped before decoding."""
_SECRET = re.compile(
    r"pass(word|wd|phrase)?|secret|token|api[-_]?key|auth(orization)?|cookie|credential|"
    r"private[-_]?key",
    re.IGNORECASE,
)


def _resource(resource: Any) -> Any:
    """``resource`` with its hash computed once: the OTLP encoder groups spans by resource,
    hashing it per span (a JSON dump each time)."""
    from opentelemetry.sdk.resources import Resource

    class _Fixed(Resource):
        def __hash__(self) -> int:
            return digest

        def __eq__(self, other: object) -> bool:
            return super().__eq__(other)

    fixed = _Fixed(resource.attributes, resource.schema_url)
    digest = Resource.__hash__(fixed)
    return fixed


def _require() -> Any:
    try:
        from opentelemetry.sdk import trace
    except ImportError:
        raise ImportError(f"OTelSink needs the OpenTelemetry SDK: {_INSTALL}") from None
    return trace


def _id(bits: int, text: str) -> int:
    """A nonzero id of ``bits`` bits derived from ``text``: its parts joined by ``\\x1f``
    (stable across processes)."""
    digest = hashlib.blake2b(text.encode(), digest_size=bits // 8).digest()
    return int.from_bytes(digest, "big") or 1


def trace_id(key: SessionKey, turn_id: str) -> int:
    """The trace id of a turn."""
    return _id(128, f"agentnb-trace\x1f{key}\x1f{turn_id}")


def tool_span_id(key: SessionKey, call_id: str, attempt: int) -> int:
    """The span id of a tool call attempt (a sub-agent's runs nest under attempt 1)."""
    return _id(64, f"agentnb-tool\x1f{key}\x1f{call_id}\x1f{attempt}")


def redact(value: Any) -> Any:
    """``value`` with every value under a key that names a secret replaced."""
    if isinstance(value, Mapping):
        return {
            k: "[redacted]" if isinstance(k, str) and _SECRET.search(k) else redact(v)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [redact(v) for v in value]
    return value


@dataclass
class _Open:
    """A span that started and has not ended: what its end needs."""

    seq: int
    name: str
    span_id: int
    parent: int | None
    trace: int
    start_ns: int
    attributes: dict[str, Any]
    run_id: str | None = None


@dataclass
class _Session:
    """What the sink knows of one session in this process: its open spans, where it is."""

    seen: int = 0
    """The last seq taken (re-delivered events up to it are skipped)."""
    runs: dict[str, _Open] = field(default_factory=dict)
    chats: dict[str, _Open] = field(default_factory=dict)
    tools: dict[str, _Open] = field(default_factory=dict)
    prepared: dict[str, Any] = field(default_factory=dict)
    """model_call_id -> its ``request/prepared`` payload (model name, new messages)."""
    parent: tuple[int, int] | None = None
    """(trace id, span id) this session's runs nest under (a sub-agent), if any."""


class OTelSink:
    """Exports committed events as OpenTelemetry spans (GenAI semantic conventions).

    ``exporter`` is any OpenTelemetry ``SpanExporter`` (OTLP over HTTP or gRPC, a console or
    in-memory one); None means OTLP over HTTP configured by the ``OTEL_EXPORTER_OTLP_*``
    environment variables. ``capture_content`` adds message texts and tool arguments and
    results (secrets redacted); ``service_name`` is the resource's ``service.name``. ``name``
    is the sink's watermark name (default ``otel:<service_name>``): give each destination its
    own.
    """

    def __init__(
        self,
        exporter: Any = None,
        *,
        capture_content: bool = False,
        service_name: str = "agentnb",
        name: str | None = None,
    ) -> None:
        trace = _require()
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        if not isinstance(capture_content, bool):
            raise InvalidInput("capture_content must be True or False")
        if not isinstance(service_name, str) or not service_name:
            raise InvalidInput("service_name must be a non-empty string")
        if exporter is None:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporter = OTLPSpanExporter()
        if not callable(getattr(exporter, "export", None)):
            raise InvalidInput(
                f"exporter must be an OpenTelemetry SpanExporter, got {type(exporter).__name__}"
            )
        self.exporter = exporter
        self.capture_content = capture_content
        self.service_name = service_name
        self.name = name or sink_name("otel", service_name)
        self._trace = trace
        from opentelemetry import trace as api
        from opentelemetry.trace import Status, StatusCode

        # What every span shares, made once (a span is made per model call, tool call, run).
        self._api = api
        self._flags = api.TraceFlags(api.TraceFlags.SAMPLED)
        self._unset = Status(StatusCode.UNSET)
        self._resource = _resource(Resource.create({"service.name": service_name}))
        self._scope = InstrumentationScope("agentnb", _version())
        self._sessions: dict[SessionKey, _Session] = {}
        self.spans_sent = 0
        """Spans the exporter took (in this process)."""
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None

    def __repr__(self) -> str:
        return f"OTelSink(name={self.name!r})"

    # -- the sink protocol -------------------------------------------------------------------

    def accept(self, events: Batch) -> None:
        """Make the spans that ended in ``events`` and hand them to the exporter.

        Spans go out in requests of at most ``REQUEST_SPANS``, each sent on a helper thread
        while the next are made; ``accept`` returns once the exporter took every one. Raises
        ``StorageError`` when it did not (nothing is acknowledged; the next drain sends them
        again, with the same ids).
        """
        sent: list[concurrent.futures.Future[Any]] = []
        spans: list[Any] = []
        try:
            for key, group in events.items():
                session = self._sessions.setdefault(key, _Session())
                for row in _rows(group, session.seen):
                    self._apply(key, session, spans, row)
                    session.seen = row.seq
                    if len(spans) >= REQUEST_SPANS:
                        sent.append(self._send(spans))
                        spans = []
            if spans:
                sent.append(self._send(spans))
            refused = [r for r in (f.result() for f in sent) if r is not None]
        except BaseException:
            self._sessions.clear()
            raise
        if refused:
            # Forget what was folded: the next drain re-delivers from the watermark (held
            # before every open span), and the spans rebuilt then have the same ids.
            self._sessions.clear()
            raise StorageError(
                f"the span exporter refused spans ({refused[0]}); nothing was acknowledged, "
                "and the next drain sends them again"
            )

    def _send(self, spans: list[Any]) -> concurrent.futures.Future[Any]:
        """Export ``spans`` on the helper thread: a future of None, or what went wrong."""
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(1, "agentnb-otel")

        def export() -> Any:
            from opentelemetry.sdk.trace.export import SpanExportResult

            result = self.exporter.export(spans)
            if result is not SpanExportResult.SUCCESS:
                return result
            self.spans_sent += len(spans)
            return None

        return self._pool.submit(export)

    def holds_back(self, key: SessionKey) -> int | None:
        """The seq of the first event of a span still open in ``key`` (the watermark must
        stay below it), or None."""
        session = self._sessions.get(key)
        if session is None:
            return None
        opened = [
            s.seq for part in (session.runs, session.chats, session.tools) for s in part.values()
        ]
        return min(opened) if opened else None

    def forget(self, tombstones: Iterable[Any]) -> None:
        """Deleted sessions: spans already sent stay with the receiver (OpenTelemetry has no
        delete); what this sink keeps of them is dropped."""
        for tombstone in tombstones:
            self._sessions.pop(tombstone.key, None)

    def shutdown(self) -> None:
        """Flush and shut the span exporter down."""
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
        self.exporter.shutdown()

    # -- spans -------------------------------------------------------------------------------

    def _apply(self, key: SessionKey, s: _Session, spans: list[Any], row: _Row) -> None:
        handler = _HANDLERS.get(row.type)
        if handler is not None:
            handler(self, key, s, spans, row)

    def _on_linked(self, key: SessionKey, s: _Session, spans: list[Any], row: _Row) -> None:
        s.parent = self._parent_of(row.payload)

    def _on_run_start(self, key: SessionKey, s: _Session, spans: list[Any], row: _Row) -> None:
        if not (row.turn_id and row.run_id):
            return
        trace, parent = trace_id(key, row.turn_id), None
        if s.parent is not None:
            trace, parent = s.parent
        s.runs[row.run_id] = _Open(
            row.seq,
            f"invoke_agent {key.agent_id}",
            _id(64, f"agentnb-run\x1f{key}\x1f{row.run_id}"),
            parent,
            trace,
            row.at,
            run_id=row.run_id,
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.id": key.agent_id,
                "gen_ai.conversation.id": key.session_id,
                "agentnb.user_id": key.user_id,
                "agentnb.turn_id": row.turn_id,
                "agentnb.run_id": row.run_id,
            },
        )
        # Only what differs from the common case: every attribute costs in each export.
        run = s.runs[row.run_id]
        if key.namespace != "default":
            run.attributes["agentnb.namespace"] = key.namespace
        if row.payload.get("reason") not in (None, "submit"):
            run.attributes["agentnb.run.reason"] = str(row.payload["reason"])

    def _on_prepared(self, key: SessionKey, s: _Session, spans: list[Any], row: _Row) -> None:
        s.prepared[str(row.payload.get("model_call_id"))] = row.payload

    def _on_model_dispatch(self, key: SessionKey, s: _Session, spans: list[Any], row: _Row) -> None:
        run = s.runs.get(row.run_id or "")
        if run is None:
            return
        call = str(row.payload.get("model_call_id"))
        prepared = s.prepared.pop(call, {})
        model = str(prepared.get("model") or "")
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": model,
            "agentnb.model_call_id": call,
        }
        if (row.payload.get("attempt") or 1) != 1:
            attributes["agentnb.attempt"] = int(row.payload["attempt"])
        purpose = prepared.get("purpose")
        if purpose not in (None, "reasoning"):  # an auxiliary call, not a step of the agent
            attributes["agentnb.model.purpose"] = str(purpose)
        if self.capture_content:
            attributes["gen_ai.input.messages"] = _messages(prepared.get("messages") or ())
            if prepared.get("instructions"):
                attributes["gen_ai.system_instructions"] = str(prepared["instructions"])
        span_id = _id(64, f"agentnb-chat\x1f{key}\x1f{call}\x1f{row.seq}")
        s.chats[call] = _Open(
            row.seq,
            f"chat {model}".strip(),
            span_id,
            run.span_id,
            run.trace,
            row.at,
            attributes,
            row.run_id,
        )

    def _on_model_end(self, key: SessionKey, s: _Session, spans: list[Any], row: _Row) -> None:
        p = row.payload
        chat = s.chats.pop(str(p.get("model_call_id")), None)
        if chat is None:
            return
        a = chat.attributes
        model = str(p.get("model") or a["gen_ai.request.model"])
        if not a["gen_ai.request.model"]:
            a["gen_ai.request.model"] = model
        elif model != a["gen_ai.request.model"]:
            a["gen_ai.response.model"] = model
        chat.name = f"chat {model}"
        for src, dst in _USAGE:
            if p.get(src) is not None:
                a[dst] = int(p[src])
        if p.get("finish_reason"):
            a["gen_ai.response.finish_reasons"] = (str(p["finish_reason"]),)
        status = str(p.get("status"))
        error = None if status == "completed" else str(p.get("error") or status)
        if error is not None:
            a["agentnb.status"] = status
        spans.append(self._span(chat, row.at, error=error))

    def _on_assistant(self, key: SessionKey, s: _Session, spans: list[Any], row: _Row) -> None:
        run = s.runs.get(row.run_id or "")
        if run is not None and self.capture_content:
            message = row.payload.get("message") or {}
            run.attributes["gen_ai.output.messages"] = _messages([message])

    def _on_tool_dispatch(self, key: SessionKey, s: _Session, spans: list[Any], row: _Row) -> None:
        run = s.runs.get(row.run_id or "")
        if run is None:
            return
        p = row.payload
        call_id = str(p.get("call_id"))
        attempt = int(p.get("attempt") or 1)
        name = str(p.get("name"))
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": call_id,
            "gen_ai.tool.type": "function",
        }
        if attempt != 1:
            attributes["agentnb.attempt"] = attempt
        if p.get("idempotent"):
            attributes["agentnb.idempotent"] = True
        if self.capture_content:
            attributes["gen_ai.tool.call.arguments"] = _json(redact(p.get("arguments") or {}))
        s.tools[call_id] = _Open(
            row.seq,
            f"execute_tool {name}",
            tool_span_id(key, call_id, attempt),
            run.span_id,
            run.trace,
            row.at,
            attributes,
            row.run_id,
        )

    def _on_action_end(self, key: SessionKey, s: _Session, spans: list[Any], row: _Row) -> None:
        tool = s.tools.get(str(row.payload.get("call_id")))
        if tool is not None and row.payload.get("status") == "suspended":
            tool.attributes["agentnb.tool.status"] = "waiting_for_person"

    def _on_tool_result(self, key: SessionKey, s: _Session, spans: list[Any], row: _Row) -> None:
        p = row.payload
        tool = s.tools.pop(str(p.get("call_id")), None)
        if tool is None:
            return
        status = str(p.get("status"))
        tool.attributes["agentnb.tool.status"] = status
        if p.get("duration_ms") is not None:
            tool.attributes["agentnb.duration_ms"] = float(p["duration_ms"])
        if self.capture_content:
            tool.attributes["gen_ai.tool.call.result"] = _text(p.get("output"))
        failed = status in ("error", "unknown")
        spans.append(
            self._span(tool, row.at, error=_text(p.get("output"))[:500] if failed else None)
        )

    def _on_run_end(self, key: SessionKey, s: _Session, spans: list[Any], row: _Row) -> None:
        run = s.runs.pop(row.run_id or "", None)
        if run is None:
            return
        for call_id, tool in list(s.tools.items()):
            if tool.run_id == run.run_id:  # no result in this run: it asked, or is unknown
                del s.tools[call_id]
                tool.attributes.setdefault("agentnb.tool.status", "uncertain")
                spans.append(self._span(tool, row.at, error=None))
        for call, chat in list(s.chats.items()):
            if chat.run_id == run.run_id:
                del s.chats[call]
                spans.append(self._span(chat, row.at, error="the run ended during the call"))
        p = row.payload
        status = str(p.get("status"))
        run.attributes["agentnb.run.status"] = status
        if p.get("stop_reason"):
            run.attributes["agentnb.stop_reason"] = str(p["stop_reason"])
        error = str(p.get("error") or "failed") if status == "failed" else None
        spans.append(self._span(run, row.at, error=error))

    def _parent_of(self, p: Mapping[str, Any]) -> tuple[int, int] | None:
        """Where a sub-agent's runs nest: the parent's turn trace and its tool call's span."""
        parent = p.get("parent")
        turn_id, call_id = p.get("turn_id"), p.get("call_id")
        if not (turn_id and call_id):
            return None
        names = ("namespace", "user_id", "agent_id", "session_id")
        if isinstance(parent, Mapping):
            fields: list[Any] = [parent.get(f) for f in names]
        elif isinstance(parent, list | tuple):
            fields = list(parent)
        elif isinstance(parent, str):
            fields = parent.split("/")
        else:
            return None
        if len(fields) != len(names) or not all(isinstance(f, str) for f in fields):
            return None
        key = SessionKey(*(str(f) for f in fields))
        return trace_id(key, str(turn_id)), tool_span_id(key, str(call_id), 1)

    def _span(self, span: _Open, end_ns: int, *, error: str | None) -> Any:
        api, flags = self._api, self._flags
        context = api.SpanContext(span.trace, span.span_id, is_remote=False, trace_flags=flags)
        parent = None
        if span.parent is not None:
            parent = api.SpanContext(span.trace, span.parent, is_remote=False, trace_flags=flags)
        kind = api.SpanKind.CLIENT if span.name.startswith("chat") else api.SpanKind.INTERNAL
        status = self._unset
        if error is not None:
            status = api.Status(api.StatusCode.ERROR, error)
        return self._trace.ReadableSpan(
            name=span.name,
            context=context,
            parent=parent,
            resource=self._resource,
            attributes=span.attributes,
            kind=kind,
            status=status,
            start_time=span.start_ns,
            end_time=max(end_ns, span.start_ns),
            instrumentation_scope=self._scope,
        )


def otlp_sink(url: str, *, name: str | None = None, **options: Any) -> OTelSink:
    """An ``OTelSink`` sending OTLP over HTTP to ``url``: a collector's base URL
    (``http://localhost:4318``, ``/v1/traces`` is added) or its full traces endpoint."""
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise InvalidInput(f"an OTLP endpoint is an http(s) URL, got {url!r}")
    _require()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    endpoint = url if url.rstrip("/").endswith("/v1/traces") else url.rstrip("/") + "/v1/traces"
    return OTelSink(
        OTLPSpanExporter(endpoint=endpoint), name=name or sink_name("otlp", endpoint), **options
    )


class _Row(NamedTuple):
    """One span-making event: what the handlers read (a tuple: made once per event)."""

    seq: int
    at: int
    """``occurred_at`` in nanoseconds since the epoch."""
    type: str
    turn_id: str | None
    run_id: str | None
    payload: Mapping[str, Any]


_USAGE = (
    ("input_tokens", "gen_ai.usage.input_tokens"),
    ("output_tokens", "gen_ai.usage.output_tokens"),
    ("cached_tokens", "gen_ai.usage.cache_read.input_tokens"),
    ("cache_write_tokens", "gen_ai.usage.cache_creation.input_tokens"),
    ("reasoning_tokens", "gen_ai.usage.reasoning.output_tokens"),
)
_HANDLERS = {
    "subagent/linked": OTelSink._on_linked,
    "run/start": OTelSink._on_run_start,
    "request/prepared": OTelSink._on_prepared,
    "model/dispatch": OTelSink._on_model_dispatch,
    "model/end": OTelSink._on_model_end,
    "message/assistant": OTelSink._on_assistant,
    "tool/dispatch": OTelSink._on_tool_dispatch,
    "action/end": OTelSink._on_action_end,
    "tool/result": OTelSink._on_tool_result,
    "run/end": OTelSink._on_run_end,
}


def _rows(group: Sequence[Any], after: int) -> Iterator[_Row]:
    """The span-making events past ``after``: filtered on the Arrow columns first (before
    any payload is decoded) when the exporter hands them over."""
    table = getattr(group, "table", None)
    if table is not None:
        import pyarrow as pa
        import pyarrow.compute as pc

        mask = pc.and_(
            pc.is_in(table.column("type"), pa.array(_TYPES)), pc.greater(table.column("seq"), after)
        )
        picked = table.filter(mask)
        micros = picked.column("occurred_at").cast(pa.int64()).to_pylist()
        columns = [
            picked.column(c).to_pylist() for c in ("seq", "type", "turn_id", "run_id", "payload")
        ]
        for (seq, type_, turn_id, run_id, payload), us in zip(
            zip(*columns, strict=True), micros, strict=True
        ):
            yield _Row(seq, us * 1000, type_, turn_id, run_id, decode_json(payload))
        return
    for event in group:
        if event.seq <= after or event.type not in _TYPES:
            continue
        if hasattr(event, "occurred_us"):  # a RawEvent (an Event has occurred_at)
            us, payload = event.occurred_us, decode_json(event.payload_json)
        else:
            at = event.occurred_at
            us, payload = int(at.timestamp()) * 1_000_000 + at.microsecond, event.payload
        yield _Row(event.seq, us * 1000, event.type, event.turn_id, event.run_id, payload)


def _messages(messages: Iterable[Any]) -> str:
    """Messages in the GenAI conventions' JSON shape (role and parts), secrets redacted."""
    out = []
    for message in messages:
        m = dict(message)
        parts: list[dict[str, Any]] = []
        if m.get("text"):
            parts.append({"type": "text", "content": m["text"]})
        for tool_call in m.get("tool_calls") or ():
            call = dict(tool_call)
            parts.append(
                {
                    "type": "tool_call",
                    "id": call.get("call_id"),
                    "name": call.get("name"),
                    "arguments": redact(call.get("arguments") or {}),
                }
            )
        if m.get("role") == "tool":
            parts = [
                {"type": "tool_call_response", "id": m.get("call_id"), "response": m.get("text")}
            ]
        out.append({"role": m.get("role"), "parts": parts})
    return _json(out)


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else _json(value)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "0"
