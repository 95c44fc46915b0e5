"""The service under attack and load: streams leak no descriptors, hostile request heads are
refused without stalling the loop, a revoked token's streams end at once, foreign Host
headers are refused without auth, crafted cursors are 400s, and small leaks stay shut."""

from __future__ import annotations

import base64
import contextlib
import os
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import agentnb as nb
from tests.service.helpers import WAIT, ServerProcess, issue, sse, wait_for
from tests.service.test_api import problem


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


def _busy_stream_until_end(
    client: httpx.Client, sid: str, revoke: Callable[[], None]
) -> tuple[list[str], list[Any]]:
    """Follow ``sid``'s stream while a long turn commits progress; call ``revoke`` after a
    few frames; return the frame types seen and the ``end`` events."""
    types: list[str] = []
    ends: list[Any] = []
    with client.stream("GET", f"/v1/sessions/{sid}/stream") as response:
        assert response.status_code == 200
        for kind, _, data in sse(response):
            if kind == "committed":
                types.append(data["type"])
                if len(types) == 8:
                    revoke()
            elif kind == "end":
                ends.append(data)
    return types, ends


class TestRevocation:
    def _session(self, client: httpx.Client, sid: str) -> None:
        assert client.post("/v1/sessions", json={"session_id": sid}).status_code == 201
        made = client.post(f"/v1/sessions/{sid}/turns", json={"input": "progress 400"})
        assert made.status_code in (200, 201, 202), made.text

    def test_revoking_a_token_ends_its_busy_stream(self, server: tuple[ServerProcess, str]) -> None:
        """A token revoked while its stream follows a busy turn ends that stream with an
        ``end`` event saying why, long before the turn finishes."""
        proc, _ = server
        token = issue(proc.store_url, "mallory", "revoked soon")
        token_id = token.split(".")[0]
        with httpx.Client(
            base_url=proc.url, headers={"Authorization": f"Bearer {token}"}, timeout=WAIT
        ) as client:
            self._session(client, "revoke1")

            def revoke() -> None:
                assert client.delete(f"/v1/tokens/{token_id}").status_code == 200

            types, ends = _busy_stream_until_end(client, "revoke1", revoke)
        assert ends, types
        assert "revoked" in ends[0]["reason"]
        assert "turn/completed" not in types

    def test_a_token_revoked_by_another_process_ends_its_stream(
        self, server: tuple[ServerProcess, str]
    ) -> None:
        """``agentnb token revoke`` in another process ends the token's busy stream too."""
        proc, _ = server
        token = issue(proc.store_url, "mallory", "revoked elsewhere")
        with httpx.Client(
            base_url=proc.url, headers={"Authorization": f"Bearer {token}"}, timeout=WAIT
        ) as client:
            self._session(client, "revoke2")

            def revoke() -> None:
                store = nb.open_store(proc.store_url)
                try:
                    store.revoke_token(token.split(".")[0])
                finally:
                    store.close()

            types, ends = _busy_stream_until_end(client, "revoke2", revoke)
        assert ends, types
        assert "revoked" in ends[0]["reason"]
        assert "turn/completed" not in types

    def test_signing_out_ends_the_pages_stream(self, server: tuple[ServerProcess, str]) -> None:
        """A page's stream (by its sign-in cookie) ends when the page signs out."""
        proc, token = server
        with httpx.Client(base_url=proc.url, timeout=WAIT) as page:
            signed = page.post("/v1/auth/sign-in", json={"token": token})
            assert signed.status_code == 200, signed.text
            csrf = {"X-CSRF-Token": signed.json()["csrf"]}
            assert page.post("/v1/sessions", json={"session_id": "revoke3"}, headers=csrf)
            made = page.post(
                "/v1/sessions/revoke3/turns", json={"input": "progress 400"}, headers=csrf
            )
            assert made.status_code in (200, 201, 202), made.text
            with httpx.Client(base_url=proc.url, timeout=WAIT, cookies=page.cookies) as other:

                def sign_out() -> None:
                    assert other.post("/v1/auth/sign-out", headers=csrf).status_code == 204

                types, ends = _busy_stream_until_end(page, "revoke3", sign_out)
        assert ends, types
        assert "revoked" in ends[0]["reason"]
        assert "turn/completed" not in types


@pytest.fixture(scope="module")
def open_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """``agentnb serve --auth none --allowed-host box.lan`` on SQLite."""
    root = tmp_path_factory.mktemp("noauth")
    url = f"sqlite:///{root / 'agentnb.sqlite'}"
    with ServerProcess(url, args=("--auth", "none", "--allowed-host", "box.lan")) as proc:
        yield proc


class TestRebinding:
    @pytest.mark.parametrize("host", ["attacker.example", "attacker.example:80", "10.0.0.1"])
    def test_a_foreign_host_is_refused_without_auth(
        self, open_server: ServerProcess, host: str
    ) -> None:
        """Without auth, a request naming a foreign host (DNS rebinding) is a 421, and a
        session it tries to create is not created."""
        with httpx.Client(base_url=open_server.url, timeout=WAIT) as client:
            problem(client.get("/v1/sessions", headers={"Host": host}), 421, "MisdirectedRequest")
            made = client.post(
                "/v1/sessions", json={"session_id": "rebound"}, headers={"Host": host}
            )
            problem(made, 421, "MisdirectedRequest")
            assert client.get("/v1/sessions/rebound").status_code == 404

    @pytest.mark.parametrize("host", ["localhost", "127.0.0.1", "[::1]", "box.lan"])
    def test_loopback_and_allowed_names_are_served(
        self, open_server: ServerProcess, host: str
    ) -> None:
        """localhost, 127.0.0.1, [::1] and an --allowed-host name, with the port, are served."""
        port = open_server.port
        with httpx.Client(base_url=open_server.url, timeout=WAIT) as client:
            got = client.get("/v1/sessions", headers={"Host": f"{host}:{port}"})
        assert got.status_code == 200, got.text

    def test_a_cross_site_change_is_refused(self, open_server: ServerProcess) -> None:
        """A JSON change with another site's Origin, or a form post, is a 403."""
        with httpx.Client(base_url=open_server.url, timeout=WAIT) as client:
            cross = client.post("/v1/sessions", json={}, headers={"Origin": "https://evil.example"})
            problem(cross, 403, "Forbidden")
            form = client.post(
                "/v1/sessions",
                content=b"session_id=x",
                headers={"Content-Type": "application/x-www-form-urlencoded"},
            )
            problem(form, 403, "Forbidden")
            plain = client.post(
                "/v1/sessions", content=b"{}", headers={"Content-Type": "text/plain"}
            )
            problem(plain, 403, "Forbidden")

    def test_the_page_and_programs_may_change(self, open_server: ServerProcess) -> None:
        """JSON from the page's own origin, JSON without an Origin (a program), and a
        change with the page's CSRF header are served."""
        with httpx.Client(base_url=open_server.url, timeout=WAIT) as client:
            own = client.post(
                "/v1/sessions", json={"session_id": "own"}, headers={"Origin": open_server.url}
            )
            assert own.status_code == 201, own.text
            assert client.post("/v1/sessions", json={"session_id": "prog"}).status_code == 201
            csrf = client.get("/v1/auth/me").json()["csrf"]
            assert csrf
            archived = client.post("/v1/sessions/prog/archive", headers={"X-CSRF-Token": csrf})
            assert archived.status_code == 200, archived.text


class TestSmallLeaks:
    def test_readyz_says_only_ready(self, server: tuple[ServerProcess, str]) -> None:
        """/readyz without a token says ready, and nothing of the store (no path)."""
        proc, _ = server
        got = httpx.get(f"{proc.url}/readyz")
        assert got.json() == {"status": "ready"}
        assert "sqlite" not in got.text

    def test_the_trailing_slash_redirect_is_relative(
        self, server: tuple[ServerProcess, str]
    ) -> None:
        """A path's trailing-slash redirect names the path only, never the Host it was sent."""
        with _client(server) as client:
            got = client.get("/v1/sessions/", headers={"Host": "evil.example"})
        assert got.status_code in (307, 308)
        assert got.headers["location"] == "/v1/sessions"


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


class TestCraftedCursors:
    @pytest.mark.parametrize("seq", ["\u00b2", "\u0663", "\uff11", "1\u00b2"])
    def test_a_stream_cursor_takes_ascii_digits_only(
        self, server: tuple[ServerProcess, str], seq: str
    ) -> None:
        """A stream cursor whose seq is a superscript, an Arabic-Indic or a full-width
        digit is a 400 InvalidCursor, never a 500 or another number."""
        with _client(server) as client:
            client.post("/v1/sessions", json={"session_id": "ans1"})
            got = client.get("/v1/sessions/ans1/stream", params={"after": f"ans1:{seq}"})
        problem(got, 400, "InvalidCursor")

    @pytest.mark.parametrize(
        "raw",
        [
            b"[1.5, 12345678901234567890123456789]",
            b"[" * 5000 + b"]" * 5000,
            b"[1e999, 3]",
            b"[NaN, 3]",
            b'{"a": 1}',
        ],
        ids=["29-digit row", "5000 brackets", "infinite", "nan", "object"],
    )
    def test_a_crafted_listing_cursor_is_a_400(
        self, server: tuple[ServerProcess, str], raw: bytes
    ) -> None:
        """A listing cursor holding a huge integer, deep nesting, or no finite number is a
        400 InvalidCursor."""
        with _client(server) as client:
            got = client.get("/v1/sessions", params={"before": _b64(raw)})
        problem(got, 400, "InvalidCursor")

    def test_a_real_listing_cursor_still_pages(self, server: tuple[ServerProcess, str]) -> None:
        """The cursor the listing hands out still pages."""
        with _client(server) as client:
            for sid in ("page1", "page2", "page3"):
                client.post("/v1/sessions", json={"session_id": sid})
            first = client.get("/v1/sessions", params={"limit": 2}).json()
            assert first["next_cursor"]
            more = client.get("/v1/sessions", params={"limit": 2, "before": first["next_cursor"]})
        assert more.status_code == 200, more.text


RLO = "\u202e"
"""RIGHT-TO-LEFT OVERRIDE: shows the text after it reversed ('gpj.exe' as 'exe.jpg')."""


class TestBidiControls:
    def test_html_reprs_show_bidi_controls_by_their_code(self, tmp_path: Path) -> None:
        """A session titled with U+202E shows it as [U+202E] in its HTML repr, never raw."""
        runtime = nb.Runtime(
            nb.Agent(name="bidi", agent_id="bidi", model=nb.ScriptedModel([])),
            store=f"sqlite:///{tmp_path / 'b.sqlite'}",
            execute=False,
        )
        try:
            session = runtime.session("s1")
            session.update(title=f"invoice{RLO}gpj.exe")
            shown = runtime.sessions()[0]._repr_html_()
        finally:
            runtime.close()
        assert RLO not in shown
        assert "invoice[U+202E]gpj.exe" in shown

    def test_json_output_escapes_bidi_controls(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """``agentnb sessions --json`` writes U+202E as a \\u escape: the same JSON value."""
        import json

        from agentnb.cli import main

        url = f"sqlite:///{tmp_path / 'j.sqlite'}"
        store = nb.open_store(url)
        key = nb.SessionKey("default", "u", "a", "s1")
        store.create_session(key)
        store.update_session(key, title=f"x{RLO}y")
        store.close()
        assert main(["sessions", "--json", "--store", url]) == 0
        out = capsys.readouterr().out
        assert RLO not in out
        assert "\\u202e" in out
        assert json.loads(out)[0]["title"] == f"x{RLO}y"


@contextlib.contextmanager
def _unwritable(path: Path) -> Iterator[None]:
    """``path`` made immutable (``chattr +i``: not even root may write it), or a skip."""
    import shutil
    import subprocess

    chattr = shutil.which("chattr")
    if chattr is None or subprocess.run([chattr, "+i", str(path)], check=False).returncode:
        pytest.skip("needs chattr +i (root on a file system with immutable files)")
    try:
        yield
    finally:
        subprocess.run([chattr, "-i", str(path)], check=True)


class TestReadOnlyFile:
    def test_reading_commands_read_a_file_they_may_not_write(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """``agentnb sessions`` and ``show`` list and show a store file that may not be
        written; a change is refused with an error, and the file is unchanged."""
        from agentnb.cli import main

        path = tmp_path / "ro.sqlite"
        store = nb.open_store(f"sqlite:///{path}")
        key = nb.SessionKey("default", "u", "a", "kept")
        store.create_session(key)
        store.close()
        before = path.read_bytes()
        url = f"sqlite:///{path}"
        with _unwritable(path):
            assert main(["sessions", "--store", url]) == 0
            assert "kept" in capsys.readouterr().out
            assert main(["show", "kept", "--user", "u", "--store", url]) == 0
            assert main(["archive", "kept", "--user", "u", "--store", url]) != 0
            assert "readonly" in capsys.readouterr().err.replace("-", "").replace(" ", "")
        assert path.read_bytes() == before
