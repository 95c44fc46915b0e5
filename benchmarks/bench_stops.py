"""How soon a stop takes effect when the run waits, against a run that is busy streaming.

Three metrics, each the median of ``--repeats`` trials, side by side with its baseline
measured in the same run:

- interrupt → the run's end committed, while the model call waits on a loopback server that
  accepted the request and sends nothing; baseline: the same interrupt while a scripted
  model streams (the stop is seen between two pieces). Target: under 1,000 ms.
- a time limit (``submit(timeout=0.5)``) → the run's end, past the limit, against a server
  that trickles one byte every 50 ms (no read timeout ever fires); baseline: the same limit
  while a scripted model streams. Target: under 1,000 ms.
- Ctrl-C → process exit, for a script waiting on a task whose sync tool blocks; baseline:
  Ctrl-C → exit for the same script whose runtime is idle. Target: under 1,000 ms.

    python benchmarks/bench_stops.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import socketserver
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import agentnb as nb
from agentnb.models.openai import OpenAIChatModel

LONG = "a long answer streamed one piece at a time. " * 200


class Server:
    """A loopback chat-completions server that never finishes a reply: ``silent`` sends
    nothing, ``trickle`` sends the head of an event stream and then a byte every 50 ms."""

    def __init__(self, mode: str) -> None:
        done = self.done = threading.Event()

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                while self.rfile.readline() not in (b"\r\n", b""):
                    pass  # the request line and headers; the body is never read
                if mode == "trickle":
                    self.wfile.write(
                        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                        b"Transfer-Encoding: chunked\r\n\r\n1\r\n:\r\n"
                    )
                    self.wfile.flush()
                    try:
                        while not done.wait(0.05):
                            self.wfile.write(b"1\r\nx\r\n")
                            self.wfile.flush()
                    except OSError:
                        return
                else:
                    done.wait(60)

        class Threaded(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Threaded(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.done.set()
        self.server.shutdown()
        self.server.server_close()


def _model(server: Server | None) -> nb.Model:
    if server is None:
        return nb.ScriptedModel([LONG] * 4, chunk_size=8, chunk_delay=0.01)
    return OpenAIChatModel("gpt-bench", base_url=server.url, api_key="sk-bench", timeout=60)


def _ended(session: nb.Session, after: int) -> float:
    """When the next run/end committed (monotonic seconds)."""
    for event in session.log.follow(after=after, idle_timeout=60):
        if event.type == "run/end":
            return time.monotonic()
    raise RuntimeError("no run/end within 60 s")


def interrupt_ms(server: Server | None, work: Path) -> float:
    agent = nb.Agent(name="b", agent_id="b", model=_model(server))
    with nb.Runtime(agent, store=f"sqlite:///{work / f'i{time.monotonic_ns()}.sqlite'}") as runtime:
        session = runtime.session("s")
        session.submit("go")
        for event in session.log.follow(after=0, idle_timeout=60):
            if event.type == ("model/dispatch" if server else "model/chunk"):
                break
        time.sleep(0.2)  # the call is well under way
        start = time.monotonic()
        session.interrupt()
        return (_ended(session, 0) - start) * 1000


def time_limit_ms(server: Server | None, work: Path) -> float:
    agent = nb.Agent(name="b", agent_id="b", model=_model(server))
    with nb.Runtime(agent, store=f"sqlite:///{work / f't{time.monotonic_ns()}.sqlite'}") as runtime:
        session = runtime.session("s")
        start = time.monotonic()
        session.submit("go", timeout=0.5)
        return (_ended(session, 0) - start - 0.5) * 1000


@nb.tool
def block() -> str:
    """Block for ten minutes."""
    time.sleep(600)
    return "done"


def child(db: str, busy: bool) -> None:
    """A user's script: submit a task whose tool blocks (or nothing), say READY, wait."""
    # Ctrl-C as a terminal's script has it: run as a background job, this benchmark has
    # SIGINT ignored, which the child inherits (and Python then installs no handler).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    model = nb.ScriptedModel([nb.ToolCall("block", {}), "finished"])
    agent = nb.Agent(name="c", agent_id="c", model=model, tools=[block])
    runtime = nb.Runtime(agent, store=f"sqlite:///{db}")
    session = runtime.session("s")
    if busy:
        receipt = session.submit("go")
        for event in session.log.follow(after=0, idle_timeout=60):
            if event.type == "action/start":
                break
        print("READY", flush=True)
        receipt.wait()
    else:
        print("READY", flush=True)
        time.sleep(600)


def ctrl_c_ms(busy: bool, work: Path) -> float:
    db = work / f"c{time.monotonic_ns()}.sqlite"
    proc = subprocess.Popen(
        [sys.executable, __file__, "--child", str(db), "busy" if busy else "idle"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "READY":
            raise RuntimeError("the child did not get ready")
        time.sleep(0.2)  # inside the wait
        start = time.monotonic()
        proc.send_signal(signal.SIGINT)
        proc.wait(120)
        return (time.monotonic() - start) * 1000
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], args.child[1] == "busy")
        return
    print(f"python {platform.python_version()} on {platform.system()}: stops while a run waits")
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)

        def median(measure: Any, *margs: Any) -> float:
            return statistics.median(measure(*margs) for _ in range(args.repeats))

        for name, measure, mode in (
            ("interrupt_waiting_model_ms", interrupt_ms, "silent"),
            ("time_limit_trickling_model_ms", time_limit_ms, "trickle"),
        ):
            server = Server(mode)
            try:
                value = median(measure, server, work)
            finally:
                server.close()
            baseline = median(measure, None, work)
            rows.append({"metric": name, "value": value, "baseline": baseline})
        value = median(ctrl_c_ms, True, work)
        baseline = median(ctrl_c_ms, False, work)
        rows.append({"metric": "ctrl_c_exit_blocked_tool_ms", "value": value, "baseline": baseline})
    print(f"{'metric':<34} {'agentnb':>9} {'baseline':>9} {'ratio':>7}  target")
    for row in rows:
        row["value"] = round(max(row["value"], 0.1), 1)
        row["baseline"] = round(max(row["baseline"], 0.1), 1)
        row["ratio"] = round(row["value"] / row["baseline"], 3)
        row["target"] = "value < 1000 ms"
        print(
            f"{row['metric']:<34} {row['value']:>9.1f} {row['baseline']:>9.1f} "
            f"{row['ratio']:>7.2f}  {row['target']}"
        )
    for row in rows:
        print(json.dumps({"bench": "stops", **row}))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
