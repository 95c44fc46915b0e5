"""The doors of standard protocols against ``/v1``, in one run on one server.

1. ``turns_per_s_<door>``: sequential scripted turns through each door (AG-UI ``POST
   /agui``, AI SDK ``POST /aisdk/chat``, OpenAI ``POST /responses`` with ``stream``), each
   read until its terminal event; baseline: ``POST /v1/.../turns`` and the ``/v1`` stream
   read until the run's ``run/end`` frame. Target: ratio >= 0.8.
2. ``commit_to_client_p95_ms_<door>``: for each turn, the arrival of the door's terminal
   event (``RUN_FINISHED``, ``finish``, ``response.completed``) minus the ``occurred_at`` of
   the ``run/end`` it translates (read from the store afterwards; both wall clocks of this
   machine); baseline: the same for the ``/v1`` frame. Target: ratio <= 2.
3. ``reconnect_10k_vs_100_<door>``: the median of reconnects ten events behind, on a
   session of 10,000 events vs one of 100 (built in-process first), until the door's
   terminal event: ``/v1`` stream with ``Last-Event-ID``, AG-UI ``connect?after=``, OpenAI
   ``GET /responses/{id}?stream=true&starting_after=`` of the session's last response, AI
   SDK ``GET /aisdk/chat/{id}/stream`` on a running turn (until its ``start`` part). Target <= 1.5.
   The median of ``ROUNDS`` rounds; each round waits for its held turn to end, so no
   reconnect waits on a run still going.
4. ``revoked_to_end_ms_<door>``: from ``DELETE /v1/tokens/{id}`` to the end a door's stream
   of that token gives (``RUN_ERROR``, an ``error`` part, an ``error`` event), mid-run;
   baseline: the ``/v1`` stream's ``end`` event. Target: within a second.

    python benchmarks/bench_doors.py [--quick] [--turns N]

One JSON line per metric (``metric``, ``value``, ``baseline``, ``ratio``), then a table.
The client and the server share this machine's cores; timings are noisy under load.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx

import agentnb as nb
from agentnb import tokens

ROOT = Path(__file__).resolve().parents[1]
AGENT = "bench-doors"
ROUNDS = 5
"""Reconnect rounds (each: the big session, then the small one) whose median counts."""
_LISTENING = re.compile(r"http://[^:/]+:(\d+)/")


@nb.tool
def hold(seconds: float) -> str:
    """Wait ``seconds`` (a turn that is still running when a client reconnects)."""
    time.sleep(seconds)
    return "held"


def _reply(messages: list[nb.Message]) -> str | nb.ToolCall:
    last = messages[-1]
    if last.role == "user" and last.text.startswith("hold"):
        return nb.ToolCall("hold", {"seconds": float(last.text.split()[1])})
    return "a short answer of a few words, streamed in pieces"


agent = nb.Agent(
    name="Bench doors", agent_id=AGENT, model=nb.ScriptedModel(_reply, chunk_size=8), tools=[hold]
)


class Server:
    """``agentnb serve`` of this module's agent on a free loopback port."""

    def __init__(self, store: str) -> None:
        command = [sys.executable, "-m", "agentnb.cli", "serve", "--agent",
                   "benchmarks.bench_doors:agent", "--store", store, "--host", "127.0.0.1",
                   "--port", "0", "--log-level", "warning"]  # fmt: skip
        self.proc = subprocess.Popen(
            command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            found = _LISTENING.search(line)
            if found:
                self.url = f"http://127.0.0.1:{found.group(1)}"
                break
        else:
            raise RuntimeError("the server did not start")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/healthz").status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.05)
        raise RuntimeError("the server did not answer")

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def _lines(response: httpx.Response) -> Iterator[str]:
    for line in response.iter_lines():
        if line.startswith("data: "):
            yield line[6:]


def _until(response: httpx.Response, done: Callable[[str], bool]) -> float:
    for data in _lines(response):
        if done(data):
            return time.time()
    raise RuntimeError("the stream ended before its terminal event")


_V1_HEADS: dict[str, int] = {}
"""The seq of the last run/end a /v1 turn read, by session (where its next stream starts)."""


def _v1_turn(client: httpx.Client, sid: str) -> float:
    head = _V1_HEADS.get(sid, 0)
    with client.stream("GET", f"/v1/sessions/{sid}/stream", params={"after": f"{sid}:{head}"}) as s:
        assert client.post(f"/v1/sessions/{sid}/turns", json={"input": "hi"}).is_success
        for data in _lines(s):
            if '"type":"run/end"' in data:
                arrived = time.time()
                _V1_HEADS[sid] = json.loads(data)["seq"]
                return arrived
    raise RuntimeError("the stream ended before its run/end")


def _agui_turn(client: httpx.Client, sid: str) -> float:
    body = {
        "threadId": sid,
        "runId": "r",
        "messages": [{"id": "u", "role": "user", "content": "hi"}],
    }
    with client.stream("POST", "/agui", json=body) as s:
        return _until(s, lambda d: '"RUN_FINISHED"' in d)


def _aisdk_turn(client: httpx.Client, sid: str) -> float:
    body = {
        "id": sid,
        "messages": [{"id": "u", "role": "user", "parts": [{"type": "text", "text": "hi"}]}],
    }
    with client.stream("POST", "/aisdk/chat", json=body) as s:
        return _until(s, lambda d: '"type":"finish"' in d)


def _openai_turn(client: httpx.Client, sid: str) -> float:
    body = {"model": AGENT, "input": "hi", "conversation": sid, "stream": True}
    with client.stream("POST", "/openai/v1/responses", json=body) as s:
        return _until(s, lambda d: '"response.completed"' in d)


DOORS: dict[str, Callable[[httpx.Client, str], float]] = {
    "v1": _v1_turn,
    "agui": _agui_turn,
    "aisdk": _aisdk_turn,
    "openai": _openai_turn,
}


def _run_ends(store_url: str, user: str, sid: str) -> list[float]:
    store = nb.open_store(store_url)
    try:
        key = nb.SessionKey("default", user, AGENT, sid)
        return [e.occurred_at.timestamp() for e in store.scan(key, 0, None) if e.type == "run/end"]
    finally:
        store.close()


def turns(server: Server, client: httpx.Client, store_url: str, count: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for door, turn in DOORS.items():
        sid = f"turns-{door}"
        client.post("/v1/sessions", json={"session_id": sid})
        turn(client, sid)  # warm: the feed, the session, the imports
        arrivals = []
        began = time.perf_counter()
        for _ in range(count):
            arrivals.append(turn(client, sid))
        elapsed = time.perf_counter() - began
        ends = _run_ends(store_url, "bench", sid)[1:]
        lags = [(a - e) * 1000 for a, e in zip(arrivals, ends, strict=True)]
        p95 = sorted(lags)[min(len(lags) - 1, round(0.95 * (len(lags) - 1)))]
        out[door] = {
            "turns_per_s": count / elapsed,
            "p95_ms": p95,
            "median_ms": statistics.median(lags),
        }
    return out


def build(store_url: str, sid: str, events: int) -> int:
    """A session of at least ``events`` events, made in-process."""
    with nb.Runtime(agent, store=store_url) as runtime:
        session = runtime.session(sid, user_id="bench")
        while session.log.head() < events:
            session.run("hi", timeout=60)
        return session.log.head()


def reconnects(client: httpx.Client, sid: str) -> dict[str, float]:
    out: dict[str, float] = {}
    head = client.get(f"/v1/sessions/{sid}").json()["seq"]
    began = time.perf_counter()
    with client.stream("GET", f"/v1/sessions/{sid}/stream",
                       headers={"Last-Event-ID": f"{sid}:{head - 10}"}) as s:  # fmt: skip
        _until(s, lambda d: f'"seq":{head},' in d)
    out["v1"] = time.perf_counter() - began
    began = time.perf_counter()
    with client.stream("GET", f"/agui/{sid}/connect", params={"after": f"{sid}:{head - 10}"}) as s:
        _until(s, lambda d: '"RUN_FINISHED"' in d)
    out["agui"] = time.perf_counter() - began
    response = client.post(
        "/openai/v1/responses", json={"model": AGENT, "input": "hi", "conversation": sid}
    )
    rid = response.json()["id"]
    began = time.perf_counter()
    with client.stream("GET", f"/openai/v1/responses/{rid}",
                       params={"stream": "true", "starting_after": 3}) as s:  # fmt: skip
        _until(s, lambda d: '"response.completed"' in d)
    out["openai"] = time.perf_counter() - began
    receipt = client.post(f"/v1/sessions/{sid}/turns", json={"input": "hold 1.5"}).json()
    time.sleep(0.5)
    began = time.perf_counter()
    with client.stream("GET", f"/aisdk/chat/{sid}/stream") as s:
        _until(s, lambda d: '"type":"start"' in d)
    out["aisdk"] = time.perf_counter() - began
    # The next round starts with nothing running: a reconnect that waits for the end of a
    # run still going would measure that run, not the reconnect.
    assert client.post(f"/v1/sessions/{sid}/wait", json=receipt).is_success
    return out


def _ends(response: httpx.Response, door: str) -> None:
    """Read a stream until the end a revoked token gives it in its door's words."""
    words = {
        "v1": "event: end",
        "agui": '"RUN_ERROR"',
        "aisdk": '"type":"error"',
        "openai": '"token_revoked"',
    }[door]
    for line in response.iter_lines():
        if words in line:
            return
    raise RuntimeError(f"the {door} stream ended without its revocation end")


def revocations(client: httpx.Client, store_url: str) -> dict[str, float]:
    """Per door: seconds from ``DELETE /v1/tokens/{id}`` to the end of a stream of that
    token (open mid-run on a held turn, or idle on a followed thread)."""
    out: dict[str, float] = {}
    for door in ("v1", "agui", "aisdk", "openai"):
        sid = f"revoke-{door}"
        client.post("/v1/sessions", json={"session_id": sid})
        store = nb.open_store(store_url)
        token, record = tokens.issue(store, "bench")
        store.close()
        own = {"Authorization": f"Bearer {token}"}
        held = {"input": "hold 3"}
        if door == "v1":
            request = client.build_request("GET", f"/v1/sessions/{sid}/stream", headers=own)
        elif door == "agui":
            request = client.build_request("GET", f"/agui/{sid}/connect", headers=own)
        elif door == "aisdk":
            text = [{"type": "text", "text": "hold 3"}]
            body = {"id": sid, "messages": [{"id": "u", "role": "user", "parts": text}]}
            request = client.build_request("POST", "/aisdk/chat", json=body, headers=own)
        else:
            body = {"model": AGENT, "input": "hold 3", "conversation": sid, "stream": True}
            request = client.build_request("POST", "/openai/v1/responses", json=body, headers=own)
        response = client.send(request, stream=True)
        try:
            if door in ("v1", "agui"):
                client.post(f"/v1/sessions/{sid}/turns", json=held)
            time.sleep(0.5)  # mid-run: the turn holds
            began = time.perf_counter()
            assert client.delete(f"/v1/tokens/{record.token_id}").is_success
            _ends(response, door)
            out[door] = time.perf_counter() - began
        finally:
            response.close()
    return out


def _record(records: list[dict[str, Any]], metric: str, value: float, baseline: float) -> None:
    record = {"metric": metric, "value": round(value, 3), "baseline": round(baseline, 3),
              "ratio": round(value / baseline, 3) if baseline else None}  # fmt: skip
    records.append(record)
    print(json.dumps(record), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer turns (CI smoke)")
    parser.add_argument("--turns", type=int, default=None, help="turns per door")
    args = parser.parse_args()
    count = args.turns or (5 if args.quick else 40)
    records: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as root:
        store_url = f"sqlite:///{root}/doors.sqlite"
        big, small = build(store_url, "big", 10_000), build(store_url, "small", 100)
        store = nb.open_store(store_url)
        token, _ = tokens.issue(store, "bench")
        store.close()
        server = Server(store_url)
        try:
            headers = {"Authorization": f"Bearer {token}"}
            with httpx.Client(base_url=server.url, headers=headers, timeout=60) as client:
                measured = turns(server, client, store_url, count)
                revoked = revocations(client, store_url)
                reconnects(client, "small")  # warm: each session's feed, once
                reconnects(client, "big")
                rounds = [
                    (reconnects(client, "big"), reconnects(client, "small")) for _ in range(ROUNDS)
                ]
                slow = {d: statistics.median(r[0][d] for r in rounds) for d in rounds[0][0]}
                fast = {d: statistics.median(r[1][d] for r in rounds) for d in rounds[0][1]}
        finally:
            server.close()
    v1 = measured["v1"]
    for door in ("agui", "aisdk", "openai"):
        _record(records, f"turns_per_s_{door}", measured[door]["turns_per_s"], v1["turns_per_s"])
    for door in ("agui", "aisdk", "openai"):
        _record(records, f"commit_to_client_p95_ms_{door}", measured[door]["p95_ms"], v1["p95_ms"])
    for door in ("v1", "agui", "openai", "aisdk"):
        _record(records, f"reconnect_10k_vs_100_{door}", slow[door] * 1000, fast[door] * 1000)
    for door in ("agui", "aisdk", "openai"):
        _record(records, f"revoked_to_end_ms_{door}", revoked[door] * 1000, revoked["v1"] * 1000)
    print(
        f"\n(sessions of {big} and {small} events; {count} turns per door; {os.cpu_count()} cores)"
    )
    print(f"{'metric':36} {'value':>10} {'baseline':>10} {'ratio':>8}")
    for r in records:
        print(f"{r['metric']:36} {r['value']:>10} {r['baseline']:>10} {r['ratio']!s:>8}")


if __name__ == "__main__":
    main()
