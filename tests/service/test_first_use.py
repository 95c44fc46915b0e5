"""What a new user meets first with the service: `make serve` starts the page with the demo's
agent and prints a sign-in token, `agentnb serve` says what to do when the agent does not
load or the port is taken, and the remote client's errors name `token=` and the root URL."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

import agentnb as nb
from agentnb.cli import EXIT_FAILED, EXIT_USAGE, main
from tests.service.helpers import WAIT, ServerThread, wait_for

REPO = Path(nb.__file__).resolve().parent.parent
_TOKEN = re.compile(r"with this token \(.*\): (tok_\S+)")
_URL = re.compile(r"(http://localhost:\d+)/")


def _read_until(proc: subprocess.Popen[str], pattern: re.Pattern[str], seen: list[str]) -> str:
    """The first match of ``pattern`` in the process's output (a guard, not a speed check)."""
    assert proc.stdout is not None
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
        found = pattern.search(line)
        if found:
            return found.group(1)
    raise AssertionError("not in the output: " + pattern.pattern + "\n" + "".join(seen))


class TestMakeServe:
    def test_make_serve_serves_the_demo_agent_with_a_printed_token(self, tmp_path: Path) -> None:
        """`make serve` serves agentnb.demo:agent, prints a token that signs in, and the
        demo's task is answered; the token is revoked once the server stops."""
        url = f"sqlite:///{tmp_path / 'served.sqlite'}"
        bin_dir = Path(sys.executable).parent
        # SERVE_STAMP= : the test's environment already has the server extra.
        command = ["make", "-s", "serve", "SERVE_STAMP=", f"BIN={bin_dir}", "PORT=0"]
        proc = subprocess.Popen(
            [*command, f"STORE={url}"],
            cwd=REPO,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        seen: list[str] = []
        try:
            base = _read_until(proc, _URL, seen)
            token = _read_until(proc, _TOKEN, seen)
            with httpx.Client(base_url=base, timeout=WAIT) as page:
                signed = page.post("/v1/auth/sign-in", json={"token": token})
                assert signed.status_code == 200, signed.text
                assert signed.json()["user_id"] == "demo"
            remote = nb.connect(base, token)
            try:
                session = remote.session("first-look")
                answer = session.run("Compare the basic and pro plans.", timeout=WAIT)
                assert "pro costs $10 per seat per month" in (answer.output or "")
                other = session.run("hello", timeout=WAIT)
                assert "Compare the basic and pro plans." in (other.output or "")
            finally:
                remote.close()
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(WAIT)
            assert proc.stdout is not None
            proc.stdout.close()
        store = nb.open_store(url)
        try:
            (record,) = [t for t in store.list_tokens("demo") if t.parent is None]
            assert record.revoked_at is not None
        finally:
            store.close()

    def test_the_make_serve_recipe_installs_the_server_extra(self) -> None:
        """`make -n serve` installs the server extra and serves the demo's agent."""
        done = subprocess.run(
            ["make", "-n", "-B", "serve"], cwd=REPO, capture_output=True, text=True, check=True
        )
        assert '".[export,server]"' in done.stdout
        assert "agentnb serve --agent agentnb.demo:agent" in done.stdout
        assert "--token-for demo" in done.stdout


class TestServeLoadErrors:
    def test_a_missing_module_gets_serve_advice(self, capsys: pytest.CaptureFixture[str]) -> None:
        """A module that does not import: advice about `agentnb serve`, not the worker."""
        assert main(["serve", "--agent", "myproject.agents:agent"]) == EXIT_USAGE
        err = capsys.readouterr().err
        assert err.startswith("error: ")
        assert err.count("\n") == 1
        assert "run agentnb serve from the folder" in err
        assert "worker" not in err
        assert "agentnb.demo:agent" in err

    def test_a_missing_attribute_names_the_agents_found(
        self, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The module loaded, the attribute is missing: no PYTHONPATH advice, the agents
        the module does define."""
        assert main(["serve", "--agent", "agentnb.demo:cost_agent"]) == EXIT_USAGE
        err = capsys.readouterr().err
        assert "agentnb.demo has no attribute 'cost_agent'" in err
        assert "its agents: agent" in err
        assert "PYTHONPATH" not in err


class TestPortInUse:
    def test_a_port_in_use_is_one_error_line_and_exit_1(self, tmp_path: Path) -> None:
        """`agentnb serve --port P` with P taken: one `error:` line naming P and --port,
        exit code 1 (refused), no uvicorn errno line."""
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "agentnb",
                    "serve",
                    "--agent",
                    "agentnb.demo:agent",
                    "--store",
                    f"sqlite:///{tmp_path / 'x.sqlite'}",
                    "--port",
                    str(port),
                ],
                cwd=tmp_path,
                capture_output=True,
                text=True,
                timeout=WAIT,
                check=False,
            )
        assert done.returncode == EXIT_FAILED, done.stderr
        errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
        expected = (
            f"error: port {port} on 127.0.0.1 is in use (another agentnb serve?): stop what "
            "listens there, or pick another port with --port (--port 0 takes a free one)"
        )
        assert errors == [expected]
        assert "Errno" not in done.stderr
        assert "Traceback" not in done.stderr


class TestRemoteClientAdvice:
    @pytest.fixture
    def served(self) -> ServerThread:
        agent = nb.Agent(name="Echo", agent_id="echo", model=nb.ScriptedModel(["hi"]))
        runtime = nb.Runtime(agent, store="memory://")
        server = ServerThread(runtime).start()
        yield server  # type: ignore[misc]
        server.stop()
        runtime.close()

    def test_a_url_ending_in_v1_is_told_to_drop_it(self) -> None:
        """nb.connect(url + '/v1') says to pass the root URL, before any request."""
        with pytest.raises(nb.InvalidInput, match=r"without /v1: nb\.connect\('http://h:1'"):
            nb.connect("http://h:1/v1/")

    def test_no_token_is_told_to_pass_token(self, served: ServerThread) -> None:
        """nb.connect(url) without a token: the error names token=, not an HTTP header."""
        remote = nb.connect(served.url)
        try:
            with pytest.raises(nb.Unauthorized) as caught:
                wait_for(lambda: remote.sessions() or True, "a refusal")
        finally:
            remote.close()
        assert "token=" in str(caught.value)
        assert "Authorization" not in str(caught.value)


class TestAgentChangeBeforeTyping:
    def test_a_session_says_what_new_work_would_be_refused_for(self, tmp_path: Path) -> None:
        """agent_change() names the differences from the bound agent, locally and over the
        service, and is None for the agent it is bound to; nothing is written."""
        url = f"sqlite:///{tmp_path / 'bound.sqlite'}"
        old = nb.Agent(name="A", agent_id="a", model=nb.ScriptedModel(["one"]), instructions="x")
        with nb.Runtime(old, store=url) as runtime:
            session = runtime.session("s", user_id="default")
            session.run("first", timeout=WAIT)
            assert session.agent_change() is None
        new = nb.Agent(name="A", agent_id="a", model=nb.ScriptedModel(["two"]), instructions="y")
        with nb.Runtime(new, store=url) as runtime:
            session = runtime.session("s", user_id="default")
            head = session.log.head()
            assert session.agent_change() == ["instructions changed"]
            assert session.log.head() == head
            with ServerThread(runtime, auth=False) as server:
                remote = nb.connect(server.url)
                try:
                    assert remote.open("s").agent_change() == ["instructions changed"]
                finally:
                    remote.close()
        with nb.Runtime(new, store=url, accept_agent_change=True) as runtime:
            assert runtime.session("s", user_id="default").agent_change() is None
