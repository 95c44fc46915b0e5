"""The scale-out recipe over HTTP: two API servers (``agentnb serve --no-execute``) and two
``agentnb worker`` processes on one throwaway PostgreSQL store. The servers only accept and
read; the workers execute; a stream on either server is woken by LISTEN/NOTIFY when a
worker commits, and carries on across a ``kill -9`` of its server."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import agentnb as nb
from tests.service.helpers import REPO, WAIT, ServerProcess, issue


@pytest.fixture(scope="module")
def cluster(pg_cluster: Any, pg_store_template: str) -> Iterator[tuple[list[ServerProcess], str]]:
    """Two API servers (--no-execute) and two workers on one store; alice's token."""
    url = pg_cluster.database(template=pg_store_template)
    token = issue(url, "alice")
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "agentnb.cli",
                "worker",
                "--store",
                url,
                "--agent",
                "tests.service._agent:agent",
                "--poll",
                "0.5",
                "--concurrency",
                "4",
            ],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(2)
    ]
    servers = [ServerProcess(url, args=("--no-execute",)) for _ in range(2)]
    try:
        for server in servers:
            server.start()
        yield servers, token
    finally:
        for server in servers:
            server.stop()
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.wait(WAIT)
        pg_cluster.drop(url)


def test_two_api_servers_and_two_workers(cluster: tuple[list[ServerProcess], str]) -> None:
    """A task submitted through one server is executed by a worker; the other server's
    stream sees every commit once, in order; an approval given through it continues the
    turn."""
    (a, b), token = cluster
    with nb.connect(a.url, token) as at_a, nb.connect(b.url, token) as at_b:
        session_a = at_a.session("pg1")
        session_b = at_b.open("pg1")
        follow = session_b.log.follow(after=0)
        seen: list[nb.Event] = []
        done = threading.Event()

        def read() -> None:
            for event in follow:
                seen.append(event)
                if event.type == "turn/completed":
                    done.set()
                    return

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        suspended = session_a.run("order pen 3", timeout=WAIT)
        assert suspended.status == "suspended"
        (request_id,) = session_b.pending()
        receipt = session_b.respond(request_id, True)
        outcome = session_a.wait(receipt, timeout=WAIT)
        assert outcome.output == "done: ordered 3 pen"
        assert done.wait(WAIT)
        follow.close()
        reader.join(WAIT)
        assert [e.seq for e in seen] == list(range(1, seen[-1].seq + 1))


def test_stream_rides_through_kill_9_of_its_api_server(
    cluster: tuple[list[ServerProcess], str],
) -> None:
    """A follow on a server that is killed and started again while a worker executes the
    turn yields every committed event exactly once, in order; the turn never stops."""
    (a, b), token = cluster
    with nb.connect(a.url, token) as at_a, nb.connect(b.url, token) as at_b:
        session = at_b.session("pg2")
        follow = session.log.follow(after=0)
        seen: list[nb.Event] = []
        started = threading.Event()

        def read() -> None:
            for event in follow:
                seen.append(event)
                if event.type == "tool/dispatch":
                    started.set()
                if event.type == "turn/completed":
                    return

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        receipt = at_a.open("pg2").submit("nap 1")
        assert started.wait(WAIT)
        b.kill()
        b.start()
        outcome = at_a.open("pg2").wait(receipt, timeout=WAIT)
        assert outcome.status == "completed"
        reader.join(WAIT)
        follow.close()
        assert not reader.is_alive()
        assert [e.seq for e in seen] == list(range(1, seen[-1].seq + 1))
        assert follow.reconnects >= 1
