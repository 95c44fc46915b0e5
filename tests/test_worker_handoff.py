"""Work handed between clients and workers: the agent a task was submitted for, a turn a
worker's SIGTERM stopped, the CLI's resume and cancel, and a client waiting with no worker.

Workers are real ``agentnb worker`` processes (SIGTERM, SIGINT) or a runtime's ``serve``
in a thread where no signal is involved; the store is one SQLite file.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import agentnb as nb
from agentnb.cli import main
from tests.runtime._handoff_agent import agent, other
from tests.runtime.helpers import WAIT

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'shared.sqlite'}"


class Worker:
    """An ``agentnb worker`` process for ``tests.runtime._handoff_agent:agent``."""

    def __init__(self, url: str) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "agentnb.cli",
                "worker",
                "--store",
                url,
                "--agent",
                "tests.runtime._handoff_agent:agent",
                "--poll",
                "0.2",
                "--lease",
                "2",
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )

    def stop(self, signum: int) -> str:
        """Send ``signum``; the worker's stderr once it exited (0, or the test fails)."""
        self.proc.send_signal(signum)
        try:
            _, err = self.proc.communicate(timeout=WAIT * 2)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
            pytest.fail(f"the worker did not stop: {err}")
        assert self.proc.returncode == 0, err
        return err

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate()


@pytest.fixture
def workers(url: str) -> Iterator[Any]:
    started: list[Worker] = []

    def start() -> Worker:
        worker = Worker(url)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.close()


@pytest.fixture
def serving(url: str) -> Iterator[Any]:
    """Start ``Runtime(agent).serve`` in a thread (stopped after the test)."""
    stops: list[tuple[threading.Event, threading.Thread, nb.Runtime]] = []

    def start(executing: nb.Agent = agent) -> nb.Runtime:
        runtime = nb.Runtime(executing, store=url, lease_ttl=2.0)
        stop = threading.Event()
        thread = threading.Thread(target=runtime.serve, kwargs={"poll": 0.1, "stop": stop})
        thread.start()
        stops.append((stop, thread, runtime))
        return runtime

    yield start
    for stop, thread, runtime in stops:
        stop.set()
        thread.join(WAIT)
        runtime.close()


def wait_for(session: nb.Session, type_: str, after: int = 0) -> nb.Event:
    for event in session.log.follow(after=after, idle_timeout=WAIT):
        if event.type == type_:
            return event
    raise AssertionError(f"no {type_} committed within {WAIT}s")


class TestTheAgentTravelsWithTheTask:
    def test_a_worker_with_another_agent_refuses_the_first_task(
        self, url: str, serving: Any
    ) -> None:
        """A client-only runtime's first task, submitted for another version of the
        worker's agent, is refused by the worker with what differs; nothing runs."""
        serving(agent)
        with nb.Runtime(other, store=url, execute=False) as client:
            session = client.session("fresh")
            outcome = session.submit("hello").wait(timeout=WAIT)
            types = [e.type for e in session.log.scan()]
            inbox = [e.type for e in session.inbox.read_after(0, 100)]
        assert outcome.status in {"cancelled", "rejected"}
        assert "instructions changed" in str(outcome.error)
        assert "turn/start" not in types
        assert "model/dispatch" not in types
        assert inbox == ["inbox/accepted", "inbox/rejected"]

    def test_the_same_agent_runs_it(self, url: str, serving: Any) -> None:
        """A task submitted for the worker's own agent runs as before."""
        serving(agent)
        with nb.Runtime(agent, store=url, execute=False) as client:
            outcome = client.session("same").submit("hello").wait(timeout=WAIT)
        assert outcome.output == "done: hello"

    def test_a_worker_that_accepts_changes_runs_it(self, url: str) -> None:
        """A runtime made with accept_agent_change=True runs the task with its own agent."""
        with nb.Runtime(other, store=url, execute=False) as client:
            receipt = client.session("taken").submit("hello")
        with nb.Runtime(agent, store=url, accept_agent_change=True) as worker:
            worker.open("taken").start()
            assert worker.open("taken").wait(receipt, timeout=WAIT).output == "done: hello"


class TestAStoppedWorkersTurnIsResumed:
    def test_sigterm_then_the_next_worker_resumes_the_turn(self, url: str, workers: Any) -> None:
        """A worker's SIGTERM ends the running turn interrupted ("worker_stopping") and
        queues its resume; the next worker that claims the session resumes and completes
        it."""
        with nb.Runtime(agent, store=url, execute=False) as client:
            session = client.session("handoff")
            receipt = session.submit("slow task")
            first = workers()
            wait_for(session, "model/chunk")
            first.stop(signal.SIGTERM)
            ends = [e.payload for e in session.log.scan() if e.type == "run/end"]
            assert [e["stop_reason"] for e in ends] == ["worker_stopping"]
            resumes = [c for c in session.inbox.read_after(0, 100) if c.type == "inbox/accepted"]
            assert [c.payload["kind"] for c in resumes] == ["submit", "resume"]
            second = workers()
            wait_for(session, "turn/completed")
            second.stop(signal.SIGINT)
            task = session.tasks()[-1]
        assert task.turn_id == receipt.turn_id
        assert task.status == "completed"
        assert len(task.run_ids) == 2

    def test_a_user_interrupt_is_not_resumed(self, url: str, serving: Any) -> None:
        """A turn the user interrupted stays interrupted: only a worker's own stop queues
        a resume."""
        serving(agent)
        with nb.Runtime(agent, store=url, execute=False) as client:
            session = client.session("mine")
            receipt = session.submit("slow task")
            wait_for(session, "model/chunk")
            assert session.interrupt()
            assert receipt.wait(timeout=WAIT).status == "interrupted"
            kinds = [
                c.payload["kind"]
                for c in session.inbox.read_after(0, 100)
                if c.type == "inbox/accepted"
            ]
        assert "resume" not in kinds


def interrupted(url: str, session_id: str) -> str:
    """A session whose one turn was cut off by closing its runtime: the turn id."""
    runtime = nb.Runtime(agent, store=url)
    session = runtime.session(session_id)
    receipt = session.submit("slow task")
    wait_for(session, "model/chunk")
    runtime.close()
    return receipt.turn_id


class TestResumeAndCancelCommands:
    def test_resume_is_carried_out_by_a_worker(self, url: str, serving: Any, capsys: Any) -> None:
        """agentnb resume SESSION accepts a resume of the latest unfinished turn, and says
        when a worker carried it out."""
        turn_id = interrupted(url, "r")
        serving(agent)
        assert main(["resume", "r", "--store", url]) == 0
        assert f"resume: turn {turn_id}" in capsys.readouterr().out
        with nb.Runtime(agent, store=url, execute=False) as client:
            wait_for(client.open("r"), "turn/completed")

    def test_resume_without_a_worker_says_how_to_start_one(self, url: str, capsys: Any) -> None:
        """With nobody to carry it out, resume says it was accepted and names the command
        that starts a worker."""
        turn_id = interrupted(url, "r")
        assert main(["resume", "r", turn_id, "--store", url, "--wait", "0"]) == 0
        out = capsys.readouterr().out
        assert "accepted" in out
        assert f"agentnb worker --store {url}" in out

    def test_resume_refusals_are_one_error_line(self, url: str, capsys: Any) -> None:
        """A turn that cannot be resumed (completed, not there) exits non-zero with why."""
        with nb.Runtime(agent, store=url) as runtime:
            done = runtime.session("c").run("hello", timeout=WAIT)
        assert main(["resume", "c", done.turn_id, "--store", url]) == 1
        assert "is completed" in capsys.readouterr().err
        assert main(["resume", "c", "--store", url]) == 1
        assert "no unfinished turn" in capsys.readouterr().err

    def test_cancel_a_queued_task_at_once(self, url: str, capsys: Any) -> None:
        """agentnb cancel of a task nobody started drops it at once, no worker needed."""
        with nb.Runtime(agent, store=url, execute=False) as client:
            turn_id = client.session("q").submit("hello").turn_id
        assert main(["cancel", "q", turn_id, "--store", url]) == 0
        assert "done" in capsys.readouterr().out
        with nb.Runtime(agent, store=url, execute=False) as client:
            assert client.open("q").tasks()[-1].status == "cancelled"

    def test_cancel_an_interrupted_turn_through_a_worker(
        self, url: str, serving: Any, capsys: Any
    ) -> None:
        """agentnb cancel of an interrupted turn is carried out by a worker."""
        turn_id = interrupted(url, "p")
        serving(agent)
        assert main(["cancel", "p", turn_id, "--store", url]) == 0
        with nb.Runtime(agent, store=url, execute=False) as client:
            assert client.open("p").tasks()[-1].status == "cancelled"

    def test_cancel_an_unknown_turn(self, url: str, capsys: Any) -> None:
        """A turn the session does not have is not found (exit 3), naming it."""
        with nb.Runtime(agent, store=url, execute=False) as client:
            client.session("u").submit("hello")
        assert main(["cancel", "u", "turn_nope", "--store", url]) == 3
        assert "turn_nope" in capsys.readouterr().err


class TestWaitingWithoutAWorker:
    def test_the_timeout_says_no_worker_claimed_the_session(self, url: str) -> None:
        """A client's wait() on a task no worker took up says so and how to start one."""
        with nb.Runtime(agent, store=url, execute=False) as client:
            receipt = client.session("alone").submit("hello")
            with pytest.raises(TimeoutError) as caught:
                receipt.wait(timeout=0.3)
        message = str(caught.value)
        assert "no worker has claimed session" in message
        assert f"agentnb worker --store {url}" in message
        assert "the task waits" in message
