"""Webhooks (issue 36, item 4): committed events POSTed to a real receiver on loopback, at
least once and in order per session, retried with backoff, signed with HMAC-SHA256, with a
delivery id that dedupes; a ``kill -9`` in the middle of a delivery loses nothing."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

import agentnb as nb
from agentnb.errors import InvalidInput
from agentnb.ops.webhooks import delivery_id, verify_signature

ROOT = Path(nb.__file__).parent.parent
WAIT = 60.0
SECRET = "webhook-test-secret"

AGENT = nb.Agent(
    name="Hooked",
    agent_id="hooked",
    model=nb.ScriptedModel(lambda messages: f"answer to {messages[-1].text}"),
)


@dataclass
class Receiver:
    """A loopback HTTP receiver: fails the first ``fail_first`` deliveries with 503, can hang
    on one, and records every request it answered."""

    url: str = ""
    fail_first: int = 0
    hang_on: int | None = None
    """Hang on this request (0-based) until ``release`` is set."""
    got: list[tuple[int, dict[str, str], bytes]] = field(default_factory=list)
    entered: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    count: int = 0

    def accepted(self) -> list[dict[str, Any]]:
        """The bodies answered 200, in the order they arrived."""
        with self.lock:
            return [json.loads(body) for status, _, body in self.got if status == 200]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    state = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            with state.lock:
                index = state.count
                state.count += 1
            if index == state.hang_on:
                state.entered.set()
                state.release.wait(WAIT)
            status = 503 if index < state.fail_first else 200
            with state.lock:
                state.got.append((status, dict(self.headers), body))
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}/hooks/agentnb"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state
    state.release.set()
    server.shutdown()
    server.server_close()


def completed_ids(store: nb.SessionStore, key: nb.SessionKey) -> list[str]:
    return [e.event_id for e in store.read_after(key, 0, 1000) if e.type == "turn/completed"]


def wait_for(predicate: Any, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


class TestDelivery:
    def test_every_event_once_in_order_signed_after_three_failures(
        self, tmp_path: Path, receiver: Receiver
    ) -> None:
        """The receiver fails the first 3 deliveries; after the backoff every turn/completed
        of 3 sessions x 2 turns is taken exactly once by delivery id, in seq order per
        session, each signature valid."""
        receiver.fail_first = 3
        hook = nb.Webhook(receiver.url, secret=SECRET)
        url = f"sqlite:///{tmp_path / 'hooks.db'}"
        with nb.Runtime(AGENT, store=url, webhooks=[hook]) as runtime:
            sessions = [runtime.session(f"h{i}") for i in range(3)]
            for session in sessions:
                for turn in range(2):
                    assert session.run(f"turn {turn}", timeout=WAIT).status == "completed"
            expected = {
                delivery_id(hook.name, event_id): session.key
                for session in sessions
                for event_id in completed_ids(runtime.store, session.key)
            }
            wait_for(lambda: len(receiver.accepted()) >= len(expected), "6 deliveries")
            accepted = receiver.accepted()
        assert sum(status == 503 for status, _, _ in receiver.got) == 3
        ids = [body["delivery_id"] for body in accepted]
        assert sorted(ids) == sorted(expected)  # each once
        for status, headers, body in receiver.got:
            assert verify_signature(SECRET, headers, body), "bad signature"
            assert headers["X-Agentnb-Delivery"] == json.loads(body)["delivery_id"]
            assert status in (200, 503)
        for session in sessions:
            seqs = [
                b["seq"] for b in accepted if b["session"]["session_id"] == session.key.session_id
            ]
            assert seqs == sorted(seqs)
            assert len(seqs) == 2
        assert {b["type"] for b in accepted} == {"turn/completed"}

    def test_a_signature_from_another_secret_or_body_fails(self) -> None:
        """verify_signature refuses another secret, a changed body and a stale timestamp."""
        from agentnb.ops.webhooks import sign

        now = f"{time.time():.3f}"
        headers = {"X-Agentnb-Timestamp": now, "X-Agentnb-Signature": sign(SECRET, now, b"{}")}
        assert verify_signature(SECRET, headers, b"{}")
        assert not verify_signature("other", headers, b"{}")
        assert not verify_signature(SECRET, headers, b'{"a":1}')
        old = str(time.time() - 3600)
        stale = {"X-Agentnb-Timestamp": old, "X-Agentnb-Signature": sign(SECRET, old, b"{}")}
        assert not verify_signature(SECRET, stale, b"{}")

    @pytest.mark.parametrize(
        ("args", "kwargs", "message"),
        [
            (("ftp://example.com/x",), {}, "http"),
            (("http://example.com/x",), {"events": "turn/completed"}, "list of event types"),
            (("http://example.com/x",), {"events": ["nope"]}, "event types"),
            (("http://example.com/x",), {"secret": ""}, "secret"),
            (("http://example.com/x",), {"timeout": 0}, "timeout"),
        ],
    )
    def test_bad_webhooks_are_invalid_input(
        self, args: tuple[str], kwargs: dict[str, Any], message: str
    ) -> None:
        """A URL that is not http(s), events that are not types, an empty secret or a
        timeout that is not positive raise InvalidInput naming the field."""
        with pytest.raises(InvalidInput, match=message):
            nb.Webhook(*args, **kwargs)


_CHILD = """
import sys, time
import agentnb as nb
from tests.ops.test_webhooks import AGENT, SECRET
hook = nb.Webhook(sys.argv[2], secret=SECRET)
runtime = nb.Runtime(AGENT, store=sys.argv[1], webhooks=[hook])
session = runtime.session("k")
print(session.run("one", timeout=60).status, flush=True)
print(session.run("two", timeout=60).status, flush=True)
time.sleep(600)
"""


class TestKilledMidDelivery:
    def test_kill_minus_nine_during_a_delivery_loses_nothing(
        self, tmp_path: Path, receiver: Receiver
    ) -> None:
        """The runtime is killed -9 while the receiver holds its first delivery open; the
        turns went on meanwhile (a delivery never blocks a turn). A runtime opened again on
        the store delivers the unacknowledged events again with the same delivery ids, so
        the receiver, keeping the ids, has each event once, in order."""
        receiver.hang_on = 0
        url = f"sqlite:///{tmp_path / 'kill.db'}"
        child = subprocess.Popen(
            [sys.executable, "-c", _CHILD, url, receiver.url],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert receiver.entered.wait(WAIT)
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "completed"
            assert child.stdout.readline().strip() == "completed"  # not blocked by the hook
            child.send_signal(signal.SIGKILL)
            child.wait(WAIT)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
            if child.stdout is not None:
                child.stdout.close()
        receiver.release.set()  # the first delivery's answer reaches nobody
        hook = nb.Webhook(receiver.url, secret=SECRET)
        with nb.Runtime(AGENT, store=url, webhooks=[hook]) as runtime:
            session = runtime.session("k")
            expected = [
                delivery_id(hook.name, e) for e in completed_ids(runtime.store, session.key)
            ]
            assert len(expected) == 2

            def seen() -> list[str]:
                return list(dict.fromkeys(b["delivery_id"] for b in receiver.accepted()))

            wait_for(lambda: seen() == expected, "both deliveries")
        ids = [b["delivery_id"] for b in receiver.accepted()]
        assert ids[0] == expected[0]
        assert ids.count(expected[0]) == 2  # the one in flight at the kill, sent again
        assert list(dict.fromkeys(ids)) == expected  # in order, nothing missing


class TestServeOption:
    def test_serve_takes_webhooks_and_their_secret_from_the_environment(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """agentnb serve --webhook URL (repeatable) --webhook-events TYPES makes one webhook
        per URL, signed with $AGENTNB_WEBHOOK_SECRET."""
        from agentnb.cli import _parser
        from agentnb.ops.cli import webhooks_of

        monkeypatch.setenv("AGENTNB_WEBHOOK_SECRET", SECRET)
        args = _parser().parse_args(
            [
                "serve",
                "--agent",
                "tests.ops.test_webhooks:AGENT",
                "--webhook",
                "http://127.0.0.1:9/a",
                "--webhook",
                "http://127.0.0.1:9/b",
                "--webhook-events",
                "turn/completed,turn/failed",
            ]
        )
        hooks = webhooks_of(args)
        assert [h.url for h in hooks] == ["http://127.0.0.1:9/a", "http://127.0.0.1:9/b"]
        assert all(h.secret == SECRET for h in hooks)
        assert all(h.events == {"turn/completed", "turn/failed"} for h in hooks)
        assert webhooks_of(_parser().parse_args(["serve", "--agent", "m:a"])) == []
