"""The service under attack and load: streams leak no descriptors, hostile request heads are
refused without stalling the loop, a revoked token's streams end at once, foreign Host
headers are refused without auth, crafted cursors are 400s, and small leaks stay shut."""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.service.helpers import WAIT, ServerProcess, issue, wait_for


def _descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, str]]:
    """``agentnb serve`` on SQLite of this module's own (its descriptors are counted)."""
    root = tmp_path_factory.mktemp("hostile")
    url = f"sqlite:///{root / 'agentnb.sqlite'}"
    token = issue(url, "mallory", "tests")
    with ServerProcess(url) as proc:
        yield proc, token


def _client(server: tuple[ServerProcess, str]) -> httpx.Client:
    proc, token = server
    return httpx.Client(
        base_url=proc.url, headers={"Authorization": f"Bearer {token}"}, timeout=WAIT
    )


def _open_streams(url: str, token: str, sessions: list[str], mode: str) -> None:
    """Open a stream of each session, read its first event, and reset the connection."""
    for sid in sessions:
        with socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), WAIT) as sock:
            sock.sendall(
                f"GET /v1/sessions/{sid}/stream?mode={mode} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                f"Authorization: Bearer {token}\r\n\r\n".encode()
            )
            got = b""
            while b"connected" not in got:
                chunk = sock.recv(4096)
                assert chunk, got
                got += chunk
            assert got.startswith(b"HTTP/1.1 200"), got[:200]
            # An abortive close (RST), as a browser tab that is killed.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


class TestStreamsLeakNothing:
    def test_descriptors_and_memory_return_after_200_streams_twice(
        self, server: tuple[ServerProcess, str]
    ) -> None:
        """200 page streams opened and reset, twice: the server's descriptors and RSS come
        back to within a bound of where they started once the feeds are gone."""
        proc, token = server
        assert proc.proc is not None
        pid = proc.proc.pid
        with _client(server) as client:
            sessions = []
            for i in range(200):
                sid = f"leak{i}"
                assert client.post("/v1/sessions", json={"session_id": sid}).status_code == 201
                sessions.append(sid)
            _open_streams(proc.url, token, sessions[:5], "page")  # warm: the pools, the code
            wait_for(lambda: client.get("/healthz").status_code == 200, "the server")
            time.sleep(1)
            start_fds, start_rss = _descriptors(pid), _rss_mib(pid)
            rounds = []
            for _ in range(2):
                threads = [
                    threading.Thread(
                        target=_open_streams, args=(proc.url, token, sessions[i::4], "page")
                    )
                    for i in range(4)
                ]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join(WAIT * 4)
                rounds.append((_descriptors(pid), _rss_mib(pid)))
        # Each feed stops when its stream is gone and its linger is over (the feeds of
        # streams that ended are dropped within LINGER seconds).
        from agentnb.server.stream import LINGER

        def settled() -> bool:
            return _descriptors(pid) <= start_fds + 60

        wait_for(settled, f"descriptors back near {start_fds} (rounds: {rounds})", LINGER + WAIT)
        assert rounds[1][0] <= rounds[0][0] + 40, rounds  # the second round adds nothing
        assert _rss_mib(pid) <= start_rss + 64, (start_rss, rounds)


def _send_head(port: int, head: bytes, *, chunk: int = 1 << 16, total: int = 0) -> bytes:
    """Send a request line and header fields (``total`` more bytes of one header value),
    then read what the server answers (until it closes)."""
    with socket.create_connection(("127.0.0.1", port), WAIT) as sock:
        sock.settimeout(WAIT)
        answer = b""
        with contextlib.suppress(OSError):
            sock.sendall(head)
            sent = 0
            filler = b"a" * chunk
            while sent < total:
                sock.sendall(filler)
                sent += chunk
            sock.sendall(b"\r\n\r\n")
        with contextlib.suppress(OSError):
            while True:
                data = sock.recv(65536)
                if not data:
                    break
                answer += data
                if b"\r\n\r\n" in answer and b"connection: close" not in answer.lower():
                    break
        return answer


class TestRequestHeads:
    def test_an_oversized_header_is_a_431(self, server: tuple[ServerProcess, str]) -> None:
        """A header of 8 MiB is answered 431 with a problem body, not 200."""
        proc, _ = server
        answer = _send_head(
            proc.port, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ", total=8 << 20
        )
        assert answer.startswith(b"HTTP/1.1 431"), answer[:200]
        assert b"RequestHeaderFieldsTooLarge" in answer

    def test_too_many_header_fields_are_a_431(self, server: tuple[ServerProcess, str]) -> None:
        """500 small header fields are answered 431."""
        proc, _ = server
        fields = b"".join(b"X-F%d: 1\r\n" % i for i in range(500))
        answer = _send_head(proc.port, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n" + fields)
        assert answer.startswith(b"HTTP/1.1 431"), answer[:200]

    def test_an_oversized_request_line_is_a_414(self, server: tuple[ServerProcess, str]) -> None:
        """A request target of 1 MiB is answered 414."""
        proc, _ = server
        answer = _send_head(proc.port, b"GET /healthz?q=" + b"a" * (1 << 20) + b" HTTP/1.1\r\n")
        assert answer.startswith(b"HTTP/1.1 414"), answer[:200]

    def test_ordinary_heads_pass(self, server: tuple[ServerProcess, str]) -> None:
        """A request with 60 headers of 500 bytes each is served as before."""
        proc, _ = server
        headers = {f"X-F{i}": "v" * 500 for i in range(60)}
        assert httpx.get(f"{proc.url}/healthz", headers=headers).status_code == 200

    def test_healthz_answers_while_four_clients_send_64_mib_headers(
        self, server: tuple[ServerProcess, str]
    ) -> None:
        """While four clients send 64 MiB headers, /healthz keeps answering 200 and each
        attacker is answered 431."""
        proc, _ = server
        answers: list[bytes] = []
        head = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: "

        def attack() -> None:
            answers.append(_send_head(proc.port, head, total=64 << 20))

        attackers = [threading.Thread(target=attack) for _ in range(4)]
        for thread in attackers:
            thread.start()
        statuses = []
        with httpx.Client(base_url=proc.url, timeout=WAIT) as client:
            while any(t.is_alive() for t in attackers) or len(statuses) < 20:
                statuses.append(client.get("/healthz").status_code)
        for thread in attackers:
            thread.join(WAIT)
        assert set(statuses) == {200}
        assert [a[:12] for a in answers] == [b"HTTP/1.1 431"] * 4
