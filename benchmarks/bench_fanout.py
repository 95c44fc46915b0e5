"""What followers cost the process that commits: the same turns bare, with a view and page
streams attached, and with a live Parquet export as well.

A serving process (``--role serve``) runs a ``Runtime`` on a SQLite file with uvicorn and
``create_app`` on a thread, and runs ``--turns`` scripted turns in-process (a tool call,
then an answer). Three configurations, each a fresh process and store:

- ``bare``: nothing follows the session (uvicorn idles);
- ``followed``: one ``SessionView`` in the serving process and four SSE page streams
  (``mode=page``) held by real HTTP clients in another process;
- ``followed_export``: the same plus a live ``ParquetSink`` (``Runtime(export_to=...)``).

Value: CPU per turn of the serving process (all its threads, user and system) in ms;
baseline: the bare run's; target ``followed`` <= 1.3x bare, ``followed_export`` <= 1.5x.
Beside it, commit -> widget p95 (from a commit's moment, the runtime's ``committed``
notification, to the first drawing of the view whose cursor covers it) and commit -> frame
p95 (to the frame's arrival in the client process; both sides read ``CLOCK_MONOTONIC``).

    python benchmarks/bench_fanout.py [--turns 300] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import agentnb as nb

HERE = Path(__file__).resolve()
STREAMS = 4
TARGETS = {"followed": 1.3, "followed_export": 1.5}


@nb.tool
def lookup(plan: str) -> str:
    """The price of ``plan`` (the benchmark's tool)."""
    return f"{plan}: 10 EUR"


def _script(messages: list[nb.Message]) -> Any:
    if messages and messages[-1].role == "tool":
        return "basic costs 10 EUR"
    return nb.ToolCall("lookup", {"plan": "basic"})


def _agent() -> nb.Agent:
    return nb.Agent(
        name="Fanout", agent_id="fanout", model=nb.ScriptedModel(_script), tools=[lookup]
    )


def _p95(values: list[float]) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return round(values[min(len(values) - 1, int(0.95 * len(values)))] * 1000, 2)


def serve(store: str, turns: int, view: bool, sink: str | None) -> None:
    """The serving process: warm up, say the port, wait for ``go``, run the turns, report."""
    import uvicorn

    from agentnb.server import create_app

    sinks = []
    if sink:
        from agentnb.export import ParquetSink

        sinks = [ParquetSink(sink)]
    runtime = nb.Runtime(_agent(), store=store, export_to=sinks)
    session = runtime.session("s")
    session.run("warm up", timeout=60)
    committed: dict[int, float] = {}

    last = [session.log.head()]

    def on_commit(event: Any) -> None:  # the runtime's "committed" notification: every commit
        if event.kind == "committed":
            now = time.monotonic()
            seq = event.data["seq"]
            committed.update(dict.fromkeys(range(last[0] + 1, seq + 1), now))
            last[0] = max(last[0], seq)

    runtime.hub.watch(on_commit, session=session.key)
    widget_latency: list[float] = []
    if view:
        from agentnb.widgets import SessionView

        drawn = [session.log.head()]
        widget = SessionView(session, redraw_interval=0.05)

        def rendered(cursor: int) -> None:
            now = time.monotonic()
            for seq in range(drawn[0] + 1, cursor + 1):
                if seq in committed:
                    widget_latency.append(now - committed[seq])
            drawn[0] = max(drawn[0], cursor)

        widget.on_render = rendered
    app = create_app(runtime, auth=False)
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning")
    server = uvicorn.Server(config)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True).start()
    while not server.started:
        time.sleep(0.01)
    print(json.dumps({"port": sock.getsockname()[1], "head": session.log.head()}), flush=True)
    sys.stdin.readline()  # go
    cpu = time.process_time()
    wall = time.perf_counter()
    for i in range(turns):
        session.run(f"turn {i}", timeout=60)
    cpu = time.process_time() - cpu
    wall = time.perf_counter() - wall
    head = session.log.head()
    if view:
        deadline = time.monotonic() + 10
        while widget.rendered_seq < head and time.monotonic() < deadline:
            time.sleep(0.01)
    if runtime.exporter is not None:
        runtime.exporter.flush(30)
    print(
        json.dumps(
            {
                "cpu_ms_per_turn": cpu / turns * 1000,
                "turns_per_s": turns / wall,
                "head": head,
                "committed": {str(k): v for k, v in committed.items()},
                "widget_p95_ms": _p95(widget_latency),
            }
        ),
        flush=True,
    )
    sys.stdin.readline()  # done
    server.should_exit = True
    runtime.close()


def follow(port: int, after: int, streams: int) -> None:
    """The clients' process: hold ``streams`` page streams, stamp each committed frame."""
    import httpx

    arrivals: list[dict[int, float]] = [{} for _ in range(streams)]
    stop = threading.Event()

    def one(i: int) -> None:
        params = {"mode": "page", "after": f"s:{after}"}
        with (
            httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=None) as client,
            client.stream("GET", "/v1/sessions/s/stream", params=params) as response,
        ):
            event = ""
            for line in response.iter_lines():
                if stop.is_set():
                    return
                if line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("id: ") and event != "chunk":
                    seq = int(line.rpartition(":")[2])
                    arrivals[i].setdefault(seq, time.monotonic())

    for i in range(streams):
        threading.Thread(target=one, args=(i,), daemon=True).start()
    print(json.dumps({"ready": True}), flush=True)
    head = int(sys.stdin.readline().split()[1])  # report <head>: once every stream has it
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not all(head in a for a in arrivals):
        time.sleep(0.01)
    stop.set()
    print(json.dumps([{str(k): v for k, v in a.items()} for a in arrivals]), flush=True)


def _run(turns: int, *, view: bool, streams: int, export: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        store = f"sqlite:///{Path(tmp) / 'fanout.sqlite'}"
        args = [sys.executable, str(HERE), "--role", "serve", "--store", store]
        args += ["--turns", str(turns)]
        if view:
            args.append("--view")
        if export:
            args += ["--sink", str(Path(tmp) / "pq")]
        server = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert server.stdin is not None
        assert server.stdout is not None
        hello = json.loads(server.stdout.readline())
        clients = None
        if streams:
            clients = subprocess.Popen(
                [
                    *(sys.executable, str(HERE), "--role", "follow", "--port", str(hello["port"])),
                    *("--after", str(hello["head"]), "--streams", str(streams)),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            assert clients.stdout is not None
            json.loads(clients.stdout.readline())
            time.sleep(1.0)  # every stream connected and caught up
        server.stdin.write("go\n")
        server.stdin.flush()
        result = json.loads(server.stdout.readline())
        frame_latency: list[float] = []
        if clients is not None:
            assert clients.stdin is not None
            assert clients.stdout is not None
            clients.stdin.write(f"report {result['head']}\n")
            clients.stdin.flush()
            arrivals = json.loads(clients.stdout.readline())
            committed = result["committed"]
            for stream in arrivals:
                frame_latency += [t - committed[s] for s, t in stream.items() if s in committed]
            missing = sum(1 for s in committed for a in arrivals if s not in a)
            result["frames_missing"] = missing
            clients.kill()
        server.stdin.write("done\n")
        server.stdin.flush()
        server.wait(30)
        result["frame_p95_ms"] = _p95(frame_latency)
        del result["committed"]
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--quick", action="store_true", help="60 turns")
    parser.add_argument("--role", choices=["main", "serve", "follow"], default="main")
    parser.add_argument("--store")
    parser.add_argument("--view", action="store_true")
    parser.add_argument("--sink")
    parser.add_argument("--port", type=int)
    parser.add_argument("--after", type=int, default=0)
    parser.add_argument("--streams", type=int, default=STREAMS)
    args = parser.parse_args()
    if args.role == "serve":
        serve(args.store, args.turns, args.view, args.sink)
        return
    if args.role == "follow":
        follow(args.port, args.after, args.streams)
        return
    turns = 60 if args.quick else args.turns
    print(f"python {platform.python_version()}, {os.cpu_count()} cpus, {turns} turns")
    bare = _run(turns, view=False, streams=0, export=False)
    runs = {
        "followed": _run(turns, view=True, streams=STREAMS, export=False),
        "followed_export": _run(turns, view=True, streams=STREAMS, export=True),
    }
    base = bare["cpu_ms_per_turn"]
    records = []
    for name, run in runs.items():
        ratio = run["cpu_ms_per_turn"] / base
        records.append(
            {
                "metric": f"fanout_cpu_{name}",
                "value": round(run["cpu_ms_per_turn"], 2),
                "baseline": round(base, 2),
                "ratio": round(ratio, 3),
                "target": f"ratio <= {TARGETS[name]}",
                "ok": ratio <= TARGETS[name],
                "unit": "ms of CPU per turn of the serving process (baseline: bare)",
                "turns_per_s": round(run["turns_per_s"], 1),
                "bare_turns_per_s": round(bare["turns_per_s"], 1),
                "commit_to_widget_p95_ms": run["widget_p95_ms"],
                "commit_to_frame_p95_ms": run["frame_p95_ms"],
                "frames_missing": run.get("frames_missing"),
            }
        )
    for record in records:
        print(json.dumps(record))
    print()
    print(
        f"{'metric':28} {'value':>8} {'baseline':>9} {'ratio':>7}  target    widget p95  frame p95"
    )
    for r in records:
        print(
            f"{r['metric']:28} {r['value']:8.2f} {r['baseline']:9.2f} {r['ratio']:7.3f}  "
            f"{r['target']:9} {r['commit_to_widget_p95_ms']!s:>10} "
            f"{r['commit_to_frame_p95_ms']!s:>10}"
        )


if __name__ == "__main__":
    main()
