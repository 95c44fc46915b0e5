"""OpenTelemetry export benchmark: ``OTelSink`` vs ``ParquetSink`` over the same events.

Run with ``make bench`` or ``python benchmarks/bench_otel.py [--quick] [--events N]``.
Prints the environment, a table, then one JSON line per metric with the keys ``metric``,
``value``, ``baseline``, ``ratio``, ``unit``, ``target`` and ``ok``.

``export_otel``
    Seconds for ``Exporter(store, OTelSink(OTLPSpanExporter(...))).drain()`` of N events
    (default 1,000,000; 100,000 with ``--quick``) from an SQLite store: reading the log,
    making the spans (``invoke_agent``, ``chat``, ``execute_tool``), encoding them as OTLP
    protobuf and posting them over HTTP to a receiver on loopback (another process) that
    reads and discards each request. Baseline: ``Exporter(store, ParquetSink(dir)).drain()``
    of the very same store, in the same run. Target ratio <= 2.
``export_otel_cpu``
    The same two drains measured in CPU seconds of this process (the receiver is another
    process): steadier than wall time on a shared machine. Target ratio <= 2.

The store is the one ``bench_export.py`` builds: turns of 24 events (two model calls with
usage, one tool call), 10,000 events per session.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_export import build_store

from agentnb.export import Exporter, ParquetSink

_RECEIVER = """
import http.server, sys

class Discard(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass

server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Discard)
print(server.server_address[1], flush=True)
server.serve_forever()
"""
"""An OTLP/HTTP receiver on loopback, in its own process (it must not share the sink's GIL),
that reads each request and answers 200."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="100,000 events instead of 1,000,000")
    parser.add_argument("--events", type=int, default=None, help="number of events to export")
    args = parser.parse_args(argv)
    events = args.events or (100_000 if args.quick else 1_000_000)

    import opentelemetry.sdk
    from opentelemetry.exporter.otlp.proto.http import Compression
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from agentnb.export.otel import OTelSink

    receiver = subprocess.Popen(
        [sys.executable, "-c", _RECEIVER], stdout=subprocess.PIPE, text=True
    )
    assert receiver.stdout is not None
    endpoint = f"http://127.0.0.1:{int(receiver.stdout.readline())}/v1/traces"
    tmp = Path(tempfile.mkdtemp(prefix="agentnb-bench-otel-"))
    try:
        version = getattr(opentelemetry.sdk, "__version__", "?")
        print(f"python {platform.python_version()} on {platform.platform()}; otel sdk {version}")
        print(f"{events:,} events")
        t = time.perf_counter()
        store, sessions = build_store(tmp / "store.sqlite", events)
        print(f"setup: {sessions} sessions written in {time.perf_counter() - t:.1f}s")

        # Warm both paths (first-use imports of pyarrow.compute, protobuf, duckdb).
        warm, _ = build_store(tmp / "warm.sqlite", 2_000)
        Exporter(warm, ParquetSink(tmp / "warm-export"), progress=False).drain()
        Exporter(warm, OTelSink(InMemorySpanExporter()), progress=False).drain()
        warm.close()

        t, c = time.perf_counter(), time.process_time()
        assert Exporter(store, ParquetSink(tmp / "export"), progress=False).drain() == events
        parquet_s, parquet_cpu = time.perf_counter() - t, time.process_time() - c

        exporter = OTLPSpanExporter(endpoint=endpoint, compression=Compression.NoCompression)
        sink = OTelSink(exporter)
        t, c = time.perf_counter(), time.process_time()
        delivered = Exporter(store, sink, progress=False).drain()
        otel_s, otel_cpu = time.perf_counter() - t, time.process_time() - c
        sink.shutdown()
        assert delivered == events, delivered
        store.close()

        spans = sink.spans_sent
        metrics = [
            ("export_otel", otel_s, parquet_s, "s", 2.0, f"{events:,} events, {spans:,} spans"),
            ("export_otel_cpu", otel_cpu, parquet_cpu, "s", 2.0, "CPU seconds of this process"),
        ]
        print(f"\n{'metric':<16} {'agentnb':>10} {'parquet':>10} {'ratio':>7} {'target':>8}  note")
        for name, value, base, unit, target, note in metrics:
            print(f"{name:<16} {value:>9.3f}{unit} {base:>9.3f}{unit} {value / base:>7.2f} "
                  f"{'<= ' + str(target):>8}  {note}")  # fmt: skip
        for name, value, base, unit, target, _ in metrics:
            ratio = value / base
            print(json.dumps({
                "metric": name, "value": round(value, 4), "baseline": round(base, 4),
                "ratio": round(ratio, 3), "unit": unit, "target": f"<= {target}",
                "ok": ratio <= target,
            }))  # fmt: skip
    finally:
        receiver.kill()
        receiver.wait()
        receiver.stdout.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
