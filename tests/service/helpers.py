"""Servers for the service tests: ``agentnb serve`` in a subprocess, or the app on a thread.

``ServerProcess`` runs the real command (uvicorn, a free loopback port, a real store) and
can be stopped, killed with SIGKILL and started again on the same port, as a browser's
``EventSource`` needs to reconnect. ``ServerThread`` serves an app of this process (for
tests whose model or tools are gated by the test itself).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import uvicorn

import agentnb as nb
from agentnb import tokens
from agentnb.server import bind, create_app

REPO = Path(__file__).resolve().parents[2]
WAIT = 30.0
"""Seconds any one wait may take before the test fails (a guard, never a speed check)."""
_LISTENING = re.compile(r"http://[^:/]+:(\d+)/")


def issue(store_url: str, user: str, label: str = "") -> str:
    """A new token for ``user`` in the store at ``store_url``."""
    store = nb.open_store(store_url)
    try:
        token, _ = tokens.issue(store, user, label=label)
    finally:
        store.close()
    return token


class ServerProcess:
    """``agentnb serve`` in a subprocess (stopped or killed by the test)."""

    def __init__(
        self,
        store_url: str,
        *,
        agent: str = "tests.service._agent:agent",
        args: tuple[str, ...] = (),
        log: Path | None = None,
    ) -> None:
        self.store_url = store_url
        self.agent = agent
        self.args = args
        self.port = 0
        self.proc: subprocess.Popen[str] | None = None
        self.log = log
        self.output: list[str] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> str:
        """Start it (on the port it had, after a first start) and wait until it is up."""
        command = [
            sys.executable,
            "-m",
            "agentnb.cli",
            "serve",
            "--agent",
            self.agent,
            "--store",
            self.store_url,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--log-level",
            "warning",
            *self.args,
        ]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            command,
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        port = self._read_port()
        self.port = port
        self._drainer = threading.Thread(target=self._drain, daemon=True)
        self._drainer.start()
        deadline = time.monotonic() + WAIT
        while True:
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return self.url
            assert time.monotonic() < deadline, "the server did not come up"
            assert self.proc.poll() is None, "the server exited: " + "".join(self.output)
            time.sleep(0.05)

    def _read_port(self) -> int:
        assert self.proc is not None
        assert self.proc.stdout is not None
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.output.append(line)
            found = _LISTENING.search(line)
            if found:
                return int(found.group(1))
        raise AssertionError("the server did not say where it listens: " + "".join(self.output))

    def _drain(self) -> None:
        proc = self.proc
        if proc is None or proc.stdout is None:
            return
        for line in proc.stdout:
            self.output.append(line)

    def kill(self) -> None:
        """SIGKILL: no shutdown at all (what a crash looks like)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(WAIT)
        self._closed()

    def stop(self) -> int:
        """SIGTERM, and wait for it to exit; returns its exit code."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(WAIT)
        self._closed()
        return code

    def _closed(self) -> None:
        if self.proc is not None and self.proc.stdout is not None:
            self._drainer.join(WAIT)
            self.proc.stdout.close()

    def __enter__(self) -> ServerProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(Exception):
            self.stop()
        self.kill()


class ServerThread:
    """``create_app(runtime)`` served by uvicorn on a thread of this process."""

    def __init__(self, runtime: nb.Runtime, **app_options: Any) -> None:
        self.app = create_app(runtime, **app_options)
        config = uvicorn.Config(self.app, host="127.0.0.1", port=0, log_level="warning")
        self.server = uvicorn.Server(config)
        self._sock = bind(config)
        self.port = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self._sock]}, daemon=True
        )

    def start(self) -> ServerThread:
        self._thread.start()
        deadline = time.monotonic() + WAIT
        while not self.server.started:
            assert self._thread.is_alive(), "the server thread died"
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.app.state.feeds.close()
        self.server.should_exit = True
        self._thread.join(WAIT)

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def sse(response: httpx.Response) -> Iterator[tuple[str, str | None, Any]]:
    """(event, id, data) of each event of a stream; comments come as ("comment", None, text)."""
    kind, id_, data = "message", None, []
    for line in response.iter_lines():
        if line == "":
            if data:
                yield kind, id_, json.loads("\n".join(data))
            kind, id_, data = "message", None, []
        elif line.startswith(":"):
            yield "comment", None, line[1:].strip()
        else:
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "event":
                kind = value
            elif name == "id":
                id_ = value
            elif name == "data":
                data.append(value)
            elif name == "retry":
                yield "retry", None, value


def wait_for(predicate: Any, what: str, timeout: float = WAIT) -> Any:
    """Call ``predicate`` until it returns something truthy (a guard, not a speed check)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)
