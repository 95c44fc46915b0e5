"""The service: SSE frame latency under many followers, idle stream memory, turns over HTTP,
reconnect cost.

1. ``frame_latency_p95_<n>``: commit -> frame latency with 1, 100 and 1,000 concurrent SSE
   followers spread over 100 sessions (the 1-follower run uses one session). A server
   process (uvicorn + ``create_app`` on SQLite) commits a tick to each session about once a
   second, in its own process (so the store's in-process wake-up is what wakes the
   stream, as when its runtime executes); a follower process holds the streams open on raw
   sockets and stamps each frame as it arrives. Both sides read ``CLOCK_MONOTONIC``. Value:
   p95 in ms; baseline: the 1-follower p95 of the same run; target p95 <= 50 ms at 1,000.
2. ``idle_stream_memory_kib``: the server's resident memory after the 1,000 followers
   connected (and before any tick) minus before, per stream; baseline: the 64 KiB target.
3. ``http_turns_per_s_vs_inprocess``: scripted turns, each a submit over HTTP and the
   stream read until its run ends, against the same turns run in-process
   (``session.run``); target >= 0.7.
4. ``reconnect_10k_vs_100``: a reconnect with ``Last-Event-ID`` ten events behind the head,
   until the head's frame arrives, on a session of 10,000 events vs one of 100 (both
   built by the runtime); target <= 1.5 (a cursor read, not a replay).

5. ``stream_fds_last_vs_first`` and ``stream_rss_last_vs_first``: the server's open
   descriptors and resident memory after each of 10 rounds of 200 page streams opened and
   reset (an abortive close, as a killed tab), after one round that warms the thread pools;
   the last round against the first; target
   <= 1.1 (flat: a stream's feed leaves nothing behind).
6. ``healthz_p95_under_header_attack``: ``/healthz`` latency p95 while 4 clients send
   64 MiB request headers (each refused with a 431 after ``guard.MAX_HEAD`` bytes, then
   sent again); baseline: the p95 without the attack; target p95 <= 50 ms.

    python benchmarks/bench_server.py [--quick] [--only latency|turns|reconnect|leak|heads]

Prints one JSON line per metric (``metric``, ``value``, ``baseline``, ``ratio`` and
details), then a table. On a small machine the follower process and the server share the
same cores; the JSON says how many there are and each process's CPU time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import resource
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import agentnb as nb
from agentnb import tokens
from agentnb.events import Event
from agentnb.ids import new_id

HERE = Path(__file__).resolve()
TARGET_P95_MS = 50.0
TARGET_STREAM_KIB = 64.0


def _agent() -> nb.Agent:
    return nb.Agent(name="Bench", agent_id="bench-agent", model=nb.ScriptedModel(lambda _: "ok"))


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _raise_fd_limit() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- the server process -----------------------------------------------------------------------


def serve(store: str) -> None:
    """Serve the bench agent's sessions, plus ``POST /bench/ticks`` (commit ticks to
    sessions in this process) and ``GET /bench/commits`` (when each tick committed)."""
    import uvicorn

    from agentnb.log import SessionLog
    from agentnb.server import bind, create_app, guard

    _raise_fd_limit()
    runtime = nb.Runtime(_agent(), store=store)
    app = create_app(runtime)
    commits: dict[str, float] = {}
    done = threading.Event()

    def ticks(user: str, prefix: str, sessions: int, rounds: int, period: float) -> None:
        logs = [
            SessionLog(runtime.store, runtime.session(f"{prefix}{i}", user_id=user).key)
            for i in range(sessions)
        ]
        heads = [log.head() for log in logs]
        step = period / sessions
        start = time.monotonic()
        for r in range(rounds):
            for i, log in enumerate(logs):
                due = start + r * period + i * step
                pause = due - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
                event = Event.create("bench/tick", {"round": r}, required=False)
                committed = log.append([event], expected_seq=heads[i], batch_id=new_id("b"))
                at = time.monotonic()
                heads[i] = committed[-1].seq
                commits[f"{prefix}{i}:{heads[i]}"] = at
        done.set()

    @app.post("/bench/ticks", include_in_schema=False)
    def start_ticks(
        user: str, prefix: str, sessions: int, rounds: int, period: float
    ) -> dict[str, str]:
        commits.clear()
        done.clear()
        args = (user, prefix, sessions, rounds, period)
        threading.Thread(target=ticks, args=args, daemon=True).start()
        return {"status": "started"}

    @app.get("/bench/commits", include_in_schema=False)
    def get_commits() -> dict[str, Any]:
        done.wait(600)
        return {"commits": commits}

    http, http_options = guard.protocol()  # as ``agentnb serve`` runs it
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=0,
        log_level="error",
        backlog=4096,
        http=http,
        **http_options,
    )
    sock = bind(config)
    print(json.dumps({"port": sock.getsockname()[1], "pid": os.getpid()}), flush=True)
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        runtime.close()


class Server:
    """``serve`` in a subprocess."""

    def __init__(self, store: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE), "--role", "server", "--store", store],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        info = json.loads(self.proc.stdout.readline())
        self.port, self.pid = info["port"], info["pid"]
        self.url = f"http://127.0.0.1:{self.port}"
        import httpx

        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the bench server did not come up")
            time.sleep(0.05)

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


# -- the follower process ---------------------------------------------------------------------


async def _follow(
    port: int, token: str, sid: str, seen: list[tuple[str, float]], connected: asyncio.Event
) -> None:
    """One stream on a raw socket: each frame's cursor and when its chunk arrived."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
    request = (
        f"GET /v1/sessions/{sid}/stream HTTP/1.1\r\nHost: bench\r\n"
        f"Authorization: Bearer {token}\r\nAccept: text/event-stream\r\n\r\n"
    )
    writer.write(request.encode())
    await reader.readuntil(b"\r\n\r\n")
    pattern = re.compile(rb"^id: (\S+)$", re.M)
    first = True
    try:
        while True:  # chunked transfer encoding: size line, data, CRLF
            size = int((await reader.readline()).strip() or b"0", 16)
            if size == 0:
                return
            data = await reader.readexactly(size + 2)
            at = time.monotonic()
            if first:
                connected.set()
                first = False
            seen.extend((m.group(1).decode(), at) for m in pattern.finditer(data))
    finally:
        writer.close()


def followers(
    port: int, token: str, prefix: str, sessions: int, per: int, expect: int, timeout: float
) -> None:
    """Hold ``sessions * per`` streams; print "ready" once all are open, then the receive
    times once ``expect`` frames arrived (or ``timeout`` passed)."""
    _raise_fd_limit()

    async def main() -> None:
        seen: list[tuple[str, float]] = []
        flags = []
        tasks = []
        for i in range(sessions):
            for _ in range(per):
                flag = asyncio.Event()
                flags.append(flag)
                sid = f"{prefix}{i}"
                tasks.append(asyncio.create_task(_follow(port, token, sid, seen, flag)))
                await asyncio.sleep(0)
        await asyncio.wait_for(asyncio.gather(*(f.wait() for f in flags)), 120)
        print("ready", flush=True)
        deadline = time.monotonic() + timeout
        while len(seen) < expect and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        print(json.dumps(seen), flush=True)
        for task in tasks:
            task.cancel()

    asyncio.run(main())


def frame_latency(server: Server, token: str, count: int, rounds: int) -> dict[str, Any]:
    """p50/p95 commit -> frame latency with ``count`` followers (see the module)."""
    import httpx

    sessions = 1 if count == 1 else 100
    per = max(1, count // sessions)
    prefix = f"n{count}-"
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {token}"}) as c:
        for i in range(sessions):
            c.post("/v1/sessions", json={"session_id": f"{prefix}{i}"})
    rss_before = _rss_kib(server.pid)
    proc = subprocess.Popen(
        [
            sys.executable,
            str(HERE),
            "--role",
            "followers",
            "--port",
            str(server.port),
            "--token",
            token,
            "--prefix",
            prefix,
            "--sessions",
            str(sessions),
            "--per",
            str(per),
            "--expect",
            str(sessions * per * rounds),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(1.0)  # idle: what the open streams hold
    rss_idle = _rss_kib(server.pid)
    cpu_server, cpu_followers = _cpu_s(server.pid), _cpu_s(proc.pid)
    with httpx.Client(base_url=server.url, timeout=600) as c:
        params = {
            "user": "bench",
            "prefix": prefix,
            "sessions": sessions,
            "rounds": rounds,
            "period": 1.0,
        }
        c.post("/bench/ticks", params=params).raise_for_status()
        commits = c.get("/bench/commits").json()["commits"]
    seen = json.loads(proc.stdout.readline())
    cpu_server = _cpu_s(server.pid) - cpu_server
    cpu_followers = _cpu_s(proc.pid) - cpu_followers
    proc.wait(60)
    proc.stdout.close()
    latencies = [(at - commits[cursor]) * 1000 for cursor, at in seen if cursor in commits]
    missing = sessions * per * rounds - len(latencies)
    if not latencies:
        raise RuntimeError(f"no frame matched a commit: {seen[:5]} {list(commits)[:5]}")
    return {
        "followers": sessions * per,
        "sessions": sessions,
        "frames": len(latencies),
        "missing": missing,
        "p50_ms": round(statistics.median(latencies), 2),
        "p95_ms": round(_percentile(latencies, 0.95), 2),
        "max_ms": round(max(latencies), 2),
        "stream_kib": round((rss_idle - rss_before) / (sessions * per), 1),
        "server_cpu_s": round(cpu_server, 2),
        "followers_cpu_s": round(cpu_followers, 2),
        "seconds": rounds,
    }


# -- turns over HTTP vs in-process ------------------------------------------------------------


def _client(server: Server, **headers: str) -> Any:
    """An httpx client with Nagle's algorithm off (as ``nb.connect`` makes)."""
    import socket

    import httpx

    transport = httpx.HTTPTransport(socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)])
    return httpx.Client(base_url=server.url, headers=headers, timeout=60, transport=transport)


def turns_compared(
    workdir: Path, server: Server, token: str, turns: int
) -> tuple[float, float, dict[str, float]]:
    """(HTTP turns/s, in-process turns/s), measured in alternating blocks of ten turns so a
    busy machine weighs on both sides alike."""
    runtime = nb.Runtime(_agent(), store=f"sqlite:///{workdir / 'inproc.sqlite'}")
    local = runtime.session("t")
    spent = {"http": 0.0, "local": 0.0}
    cpu = {"http_server": 0.0, "http_client": 0.0, "local": 0.0}
    try:
        with _client(server, Authorization=f"Bearer {token}") as client:
            client.post("/v1/sessions", json={"session_id": "t"})
            params = {"mode": "raw"}
            with client.stream("GET", "/v1/sessions/t/stream", params=params) as response:
                lines = response.iter_lines()

                def over_http(text: str) -> None:
                    receipt = client.post("/v1/sessions/t/turns", json={"input": text}).json()
                    turn = receipt["turn_id"]
                    for line in lines:
                        if line.startswith("data:") and '"run/end"' in line and turn in line:
                            return
                    raise RuntimeError("the stream ended")

                over_http("warm up")
                local.run("warm up", timeout=60)
                for block in range(turns // 10):
                    for side in ("http", "local"):
                        start = time.perf_counter()
                        server_cpu, own_cpu = _cpu_s(server.pid), time.process_time()
                        for i in range(10):
                            text = f"turn {block}.{i}"
                            if side == "http":
                                over_http(text)
                            else:
                                local.run(text, timeout=60)
                        spent[side] += time.perf_counter() - start
                        if side == "http":
                            cpu["http_server"] += _cpu_s(server.pid) - server_cpu
                            cpu["http_client"] += time.process_time() - own_cpu
                        else:
                            cpu["local"] += time.process_time() - own_cpu
                server_cpu = _cpu_s(server.pid)
                for _ in range(200):
                    client.get("/healthz")
                floor = (_cpu_s(server.pid) - server_cpu) / 200
    finally:
        runtime.close()
    done = 10 * (turns // 10)
    details = {k: round(v / done * 1000, 2) for k, v in cpu.items()}
    details = {f"cpu_ms_per_turn_{k}": v for k, v in details.items()}
    details["server_cpu_ms_per_bare_request"] = round(floor * 1000, 2)
    return done / spent["http"], done / spent["local"], details


# -- reconnect after a long history -----------------------------------------------------------


def build_history(store: str, session_id: str, events: int) -> int:
    """A session of at least ``events`` events, built by the runtime; returns its head."""
    runtime = nb.Runtime(_agent(), store=store)
    try:
        session = runtime.session(session_id, user_id="bench")
        while session.log.head() < events:
            session.run("again", timeout=60)
        return session.log.head()
    finally:
        runtime.close()


def reconnects(
    server: Server, token: str, sessions: dict[str, int], rounds: int
) -> dict[str, float]:
    """Median ms from connecting with Last-Event-ID ten events behind the head to the
    head's frame, per session (a new connection each time, the sessions taken in turn)."""
    times: dict[str, list[float]] = {sid: [] for sid in sessions}
    with _client(server, Authorization=f"Bearer {token}") as client:
        for _ in range(rounds):
            for sid, head in sessions.items():
                headers = {"Last-Event-ID": f"{sid}:{head - 10}"}
                last = f"id: {sid}:{head}"
                start = time.perf_counter()
                with client.stream("GET", f"/v1/sessions/{sid}/stream", headers=headers) as r:
                    for line in r.iter_lines():
                        if line == last:
                            break
                times[sid].append((time.perf_counter() - start) * 1000)
    return {sid: statistics.median(t) for sid, t in times.items()}


# -- leaks and hostile heads ---------------------------------------------------------------------


def _descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


async def _open_and_reset(port: int, token: str, sid: str) -> None:
    """Open a page stream, read its first bytes, and reset the connection (RST)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        f"GET /v1/sessions/{sid}/stream?mode=page HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Bearer {token}\r\n\r\n".encode()
    )
    await reader.readuntil(b"connected")
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


def stream_leak(server: Server, token: str, streams: int, rounds: int) -> dict[str, Any]:
    """Descriptors and RSS of the server after each round of ``streams`` page streams."""
    import httpx

    sids = [f"leak{i}" for i in range(streams)]
    with _client(server, Authorization=f"Bearer {token}") as client:
        for sid in sids:
            client.post("/v1/sessions", json={"session_id": sid})

    async def one_round() -> None:
        for start in range(0, streams, 50):
            await asyncio.gather(
                *(_open_and_reset(server.port, token, s) for s in sids[start : start + 50])
            )

    # One round first, not counted: the thread pools (anyio's, up to 40 threads, each with
    # its connection while it lives) and the store's idle connections fill once.
    asyncio.run(one_round())
    fds, rss = [], []
    for _ in range(rounds):
        asyncio.run(one_round())
        httpx.get(f"{server.url}/healthz", timeout=30)
        time.sleep(0.5)
        fds.append(_descriptors(server.pid))
        rss.append(round(_rss_kib(server.pid) / 1024, 1))
    return {"fds": fds, "rss_mib": rss}


def _attack(port: int, stop: threading.Event, refused: list[int]) -> None:
    """Send 64 MiB headers again and again until ``stop``; count the 431s."""
    filler = b"a" * (1 << 16)
    while not stop.is_set():
        with socket.create_connection(("127.0.0.1", port), 30) as sock:
            try:
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ")
                for _ in range((64 << 20) // len(filler)):
                    sock.sendall(filler)
                    if stop.is_set():
                        break
            except OSError:
                pass
            with contextlib.suppress(OSError):
                if sock.recv(64).startswith(b"HTTP/1.1 431"):
                    refused.append(1)


def attack_process(port: int) -> None:
    """The attack process: 4 threads sending 64 MiB headers until stdin closes; prints the
    431s they were answered."""
    stop = threading.Event()
    refused: list[int] = []
    threads = [threading.Thread(target=_attack, args=(port, stop, refused)) for _ in range(4)]
    for thread in threads:
        thread.start()
    print("started", flush=True)
    sys.stdin.read()
    stop.set()
    for thread in threads:
        thread.join(60)
    print(json.dumps(refused), flush=True)


def header_attack(server: Server, seconds: float) -> dict[str, Any]:
    """``/healthz`` latencies without and then during the attack of 4 clients."""
    import httpx

    def probe(duration: float) -> list[float]:
        times = []
        with httpx.Client(base_url=server.url, timeout=30) as client:
            end = time.monotonic() + duration
            while time.monotonic() < end:
                t0 = time.perf_counter()
                client.get("/healthz")
                times.append((time.perf_counter() - t0) * 1000)
                time.sleep(0.01)
        return times

    quiet = probe(seconds / 2)
    # The attackers in a process of their own: their sending does not slow the probe.
    attackers = subprocess.Popen(
        [sys.executable, str(HERE), "--role", "attack", "--port", str(server.port)],
        stdout=subprocess.PIPE,
        stdin=subprocess.PIPE,
        text=True,
    )
    assert attackers.stdout is not None
    assert attackers.stdin is not None
    attackers.stdout.readline()  # started
    try:
        loud = probe(seconds)
    finally:
        attackers.stdin.close()  # stop
        refused = json.loads(attackers.stdout.readline() or "[]")
        attackers.wait(60)
        attackers.stdout.close()
    return {
        "quiet_p95_ms": round(_percentile(quiet, 95), 2),
        "p95_ms": round(_percentile(loud, 95), 2),
        "probes": len(loud),
        "refused_431": len(refused),
        "rss_mib": round(_rss_kib(server.pid) / 1024, 1),
    }


# -- main -------------------------------------------------------------------------------------


def _record(metric: str, value: float, baseline: float, **details: Any) -> dict[str, Any]:
    record = {
        "metric": metric,
        "value": round(value, 3),
        "baseline": round(baseline, 3),
        "ratio": round(value / baseline, 3),
        **details,
    }
    print(json.dumps(record), flush=True)
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer followers, turns, events")
    parser.add_argument(
        "--only",
        choices=["latency", "turns", "reconnect", "leak", "heads"],
        help="measure one part (1-2, 3, 4, 5 or 6)",
    )
    parser.add_argument("--role", choices=["main", "server", "followers", "attack"], default="main")
    parser.add_argument("--store")
    parser.add_argument("--port", type=int)
    parser.add_argument("--token")
    parser.add_argument("--prefix")
    parser.add_argument("--sessions", type=int)
    parser.add_argument("--per", type=int)
    parser.add_argument("--expect", type=int)
    args = parser.parse_args()
    if args.role == "server":
        serve(args.store)
        return
    if args.role == "attack":
        attack_process(args.port)
        return
    if args.role == "followers":
        followers(args.port, args.token, args.prefix, args.sessions, args.per, args.expect, 120)
        return

    counts = [1, 20] if args.quick else [1, 100, 1000]
    rounds = 2 if args.quick else 10
    turns = 20 if args.quick else 300
    long_events = 1_000 if args.quick else 10_000
    records = []
    with tempfile.TemporaryDirectory(prefix="bench-server-") as tmp:
        workdir = Path(tmp)
        store = f"sqlite:///{workdir / 'served.sqlite'}"
        short_head = long_head = 0
        if args.only in (None, "reconnect"):
            short_head = build_history(store, "h100", 100)
            long_head = build_history(store, "hlong", long_events)
        store_obj = nb.open_store(store)
        token, _ = tokens.issue(store_obj, "bench")
        store_obj.close()
        server = Server(store)
        part = args.only
        try:
            if part in (None, "latency"):
                latency = {n: frame_latency(server, token, n, rounds) for n in counts}
            if part in (None, "turns"):
                http, local, turn_cpu = turns_compared(workdir, server, token, turns)
            if part in (None, "reconnect"):
                rounds_ = 10 if args.quick else 40
                heads = {"h100": short_head, "hlong": long_head}
                reconnect = reconnects(server, token, heads, rounds_)
                short, long = reconnect["h100"], reconnect["hlong"]
            if part in (None, "leak"):
                leak = stream_leak(server, token, 200, 10)
            if part in (None, "heads"):
                attack = header_attack(server, 4.0 if args.quick else 10.0)
        finally:
            server.close()
    if part in (None, "latency"):
        records += _latency_records(latency, counts)
    if part in (None, "turns"):
        records.append(
            _record(
                "http_turns_per_s_vs_inprocess",
                http,
                local,
                turns=turns,
                target=0.7,
                cpus=os.cpu_count(),
                **turn_cpu,
            )
        )
    if part in (None, "reconnect"):
        records.append(
            _record(
                f"reconnect_{long_events // 1000}k_vs_100",
                long,
                short,
                events=[short_head, long_head],
                target=1.5,
                unit="ms",
            )
        )
    if part in (None, "leak"):
        records.append(
            _record("stream_fds_last_vs_first", leak["fds"][-1], leak["fds"][0], target=1.1, **leak)
        )
        records.append(
            _record("stream_rss_last_vs_first", leak["rss_mib"][-1], leak["rss_mib"][0], target=1.1)
        )
    if part in (None, "heads"):
        records.append(
            _record(
                "healthz_p95_under_header_attack",
                attack["p95_ms"],
                attack["quiet_p95_ms"],
                target_ms=50,
                **attack,
            )
        )
    print()
    print(f"{'metric':36} {'value':>10} {'baseline':>10} {'ratio':>8}")
    for r in records:
        print(f"{r['metric']:36} {r['value']:>10} {r['baseline']:>10} {r['ratio']:>8}")


def _latency_records(latency: dict[int, dict[str, Any]], counts: list[int]) -> list[Any]:
    records = []
    base = latency[1]["p95_ms"]
    for n in counts:
        records.append(
            _record(
                f"frame_latency_p95_{n}",
                max(latency[n]["p95_ms"], 0.001),
                max(base, 0.001),
                target_ms=TARGET_P95_MS,
                cpus=os.cpu_count(),
                **latency[n],
            )
        )
    most = latency[counts[-1]]
    records.append(
        _record(
            "idle_stream_memory_kib",
            max(most["stream_kib"], 0.1),
            TARGET_STREAM_KIB,
            streams=most["followers"],
            baseline_is="the target",
        )
    )
    return records


if __name__ == "__main__":
    main()
