"""Every stop and every time limit ends a run that waits, with the reason committed at once.

A model call that stops sending (a server that never answers, or trickles a byte now and
then so no read timeout fires) is cancelled by ``interrupt``, ``cancel``, ``delete(force=
True)``, ``close``, ``submit(timeout=)`` and ``max_turn_seconds``; the OpenAI adapter has a
deadline per attempt and per request. ``run/stop_requested`` is committed when the stop is
asked for, not with the run's end. The servers are real sockets on 127.0.0.1.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import pytest

import agentnb as nb
from agentnb.errors import InvalidInput
from agentnb.models import Backoff, ModelError, ModelRequest
from agentnb.models.openai import OpenAIChatModel
from tests.runtime.helpers import WAIT, Gate, events_of
from tests.runtime.test_openai_http import (
    LoopbackServer,
    Reply,
    _chunk,
    _head,
    delta,
    event,
    model_for,
    request,
    run,
    status,
)


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    srv = LoopbackServer()
    try:
        yield srv
    finally:
        srv.close()


class Stall:
    """Replies that stall: ``arrived`` is set when one has the request, ``done`` (set at the
    end of the test) lets their connections go."""

    def __init__(self) -> None:
        self.arrived = threading.Event()
        self.done = threading.Event()

    def wait_arrived(self) -> None:
        assert self.arrived.wait(WAIT), "the request never reached the server"

    def silent(self) -> Reply:
        """Reads the request and answers nothing at all."""

        def reply(out: BinaryIO) -> bool:
            self.arrived.set()
            self.done.wait(60)
            return False

        return reply

    def trickle(self, *first: bytes) -> Reply:
        """An event stream that sends ``first``, then one byte of an endless comment line
        every 50 ms: the client's read timeout never fires and the reply never ends."""

        def reply(out: BinaryIO) -> bool:
            self.arrived.set()
            _head(
                out, "200 OK", {"Content-Type": "text/event-stream", "Transfer-Encoding": "chunked"}
            )
            try:
                for piece in first:
                    _chunk(out, piece)
                _chunk(out, b":")
                while not self.done.wait(0.05):
                    _chunk(out, b"x")
            except OSError:  # the client closed the connection
                pass
            return False

        return reply


@pytest.fixture
def stall() -> Iterator[Stall]:
    stalls = Stall()
    yield stalls
    stalls.done.set()


def patient(server: LoopbackServer) -> OpenAIChatModel:
    """A model whose read timeout (60 s) is longer than any wait of these tests."""
    return OpenAIChatModel("gpt-test", base_url=server.base_url, api_key="sk-loopback", timeout=60)


def agent_for(model: nb.Model, **kwargs: Any) -> nb.Agent:
    return nb.Agent(name="Stall", agent_id="stall", model=model, instructions="Be brief.", **kwargs)


def runtime_for(agent: nb.Agent, tmp_path: Path) -> nb.Runtime:
    return nb.Runtime(agent, store=f"sqlite:///{tmp_path / 's.sqlite'}")


def wait_for(session: nb.Session, type_: str, after: int = 0) -> nb.Event:
    """The first committed event of ``type_`` after ``after`` (fails after ``WAIT`` idle s)."""
    for committed in session.log.follow(after=after, idle_timeout=WAIT):
        if committed.type == type_:
            return committed
    raise AssertionError(f"no {type_} was committed within {WAIT}s")


class TestStopsEndAWaitingModelCall:
    def test_interrupt_ends_a_call_the_server_never_answers(
        self, server: LoopbackServer, stall: Stall, tmp_path: Path
    ) -> None:
        """interrupt() cancels a model call that waits for a silent server and records it."""
        server.script(stall.silent())
        with runtime_for(agent_for(patient(server)), tmp_path) as runtime:
            session = runtime.session("s")
            receipt = session.submit("hello")
            stall.wait_arrived()
            assert session.interrupt() is True
            outcome = receipt.wait(timeout=WAIT)
            assert outcome.status == "interrupted"
            assert outcome.stop_reason == "interrupted"
            ends = [e.payload for e in events_of(session, "model/end")]
            assert [e["status"] for e in ends] == ["cancelled"]
        assert len(server.requests) == 1

    def test_cancel_ends_a_call_the_server_never_answers(
        self, server: LoopbackServer, stall: Stall, tmp_path: Path
    ) -> None:
        """cancel() of a turn whose model call waits returns once the turn is cancelled."""
        server.script(stall.silent())
        with runtime_for(agent_for(patient(server)), tmp_path) as runtime:
            session = runtime.session("s")
            receipt = session.submit("hello")
            stall.wait_arrived()
            session.cancel(receipt.turn_id, timeout=WAIT)
            assert session.tasks()[-1].status == "cancelled"

    def test_delete_with_force_ends_a_waiting_call(
        self, server: LoopbackServer, stall: Stall, tmp_path: Path
    ) -> None:
        """delete(force=True) stops a run whose model call waits, then deletes the session."""
        server.script(stall.silent())
        with runtime_for(agent_for(patient(server)), tmp_path) as runtime:
            session = runtime.session("s")
            session.submit("hello")
            stall.wait_arrived()
            tombstone = session.delete(force=True)
            assert tombstone.key == session.key

    def test_submit_timeout_ends_a_trickling_stream(
        self, server: LoopbackServer, stall: Stall, tmp_path: Path
    ) -> None:
        """submit(timeout=) ends a call whose server trickles bytes, with the time limit
        recorded as the reason."""
        server.script(stall.trickle())
        with runtime_for(agent_for(patient(server)), tmp_path) as runtime:
            session = runtime.session("s")
            outcome = session.submit("hello", timeout=0.5).wait(timeout=WAIT)
            assert outcome.status == "interrupted"
            assert outcome.stop_reason == "time_limit"
            assert "time limit" in str(outcome.error)
            stop = events_of(session, "run/stop_requested")[-1].payload
            assert "time limit" in stop["reason"]
        assert len(server.requests) == 1

    def test_max_turn_seconds_stops_a_silent_server_after_one_attempt(
        self, server: LoopbackServer, stall: Stall, tmp_path: Path
    ) -> None:
        """Agent(max_turn_seconds=) ends the turn at its limit instead of running every
        retry of a silent server to its read timeout."""
        server.script(*(stall.silent() for _ in range(4)))
        model = OpenAIChatModel(
            "gpt-test", base_url=server.base_url, api_key="sk-loopback", timeout=3
        )
        agent = agent_for(model, max_turn_seconds=0.5)
        with runtime_for(agent, tmp_path) as runtime:
            outcome = runtime.session("s").submit("hello").wait(timeout=WAIT)
        assert outcome.status == "interrupted"
        assert outcome.stop_reason == "time_limit"
        assert len(server.requests) == 1

    def test_close_ends_a_waiting_call(
        self, server: LoopbackServer, stall: Stall, tmp_path: Path
    ) -> None:
        """Closing the runtime ends a run whose model call waits, with the reason recorded."""
        server.script(stall.silent())
        runtime = runtime_for(agent_for(patient(server)), tmp_path)
        session = runtime.session("s")
        session.submit("hello")
        stall.wait_arrived()
        runtime.close(timeout=WAIT)
        with runtime_for(agent_for(patient(server)), tmp_path) as again:
            task = again.session("s").tasks()[-1]
            ends = [e.payload for e in events_of(again.session("s"), "run/end")]
        assert task.status == "interrupted"
        assert ends[-1]["stop_reason"] == "runtime_closed"

    def test_interrupt_ends_the_wait_between_retries(
        self, server: LoopbackServer, tmp_path: Path
    ) -> None:
        """A stop during the backoff before a retry ends the run without the retry."""
        server.script(status(503, "busy"))
        model = model_for(server, backoff=Backoff(base=600, cap=600, jitter=0))
        with runtime_for(agent_for(model), tmp_path) as runtime:
            session = runtime.session("s")
            receipt = session.submit("hello")
            wait_for(session, "model/retry")
            session.interrupt()
            outcome = receipt.wait(timeout=WAIT)
            ends = [e.payload["status"] for e in events_of(session, "model/end")]
        assert outcome.status == "interrupted"
        assert ends == ["cancelled"]
        assert len(server.requests) == 1


class TestAdapterDeadlines:
    def test_attempt_timeout_ends_a_trickling_stream(
        self, server: LoopbackServer, stall: Stall
    ) -> None:
        """A server that trickles bytes fails the attempt at ``attempt_timeout``, retryably."""
        server.script(stall.trickle())
        model = model_for(server, attempt_timeout=0.3)
        with pytest.raises(ModelError) as caught:
            run(model, lambda: model.complete(request()))
        assert "attempt_timeout=0.3s" in str(caught.value)
        assert caught.value.retryable

    def test_attempt_timeout_after_streamed_text_is_not_retryable(
        self, server: LoopbackServer, stall: Stall
    ) -> None:
        """Past the attempt's deadline after part of the reply streamed, no retry is offered."""
        server.script(stall.trickle(event(delta(content="Part"))))
        model = model_for(server, attempt_timeout=0.3)
        with pytest.raises(ModelError) as caught:
            run(model, lambda: model.complete(request()))
        assert not caught.value.retryable

    def test_request_deadline_ends_a_silent_call(
        self, server: LoopbackServer, stall: Stall
    ) -> None:
        """``ModelRequest.deadline`` ends a call the server never answers, not retryably."""
        server.script(stall.silent())
        model = model_for(server)
        late = ModelRequest(messages=request().messages, deadline=time.monotonic() + 0.3)
        with pytest.raises(ModelError) as caught:
            run(model, lambda: model.complete(late))
        assert "time limit" in str(caught.value)
        assert not caught.value.retryable

    @pytest.mark.parametrize("bad", [0, -1.0, float("inf"), "5", True])
    def test_bad_attempt_timeout_is_refused(self, bad: Any) -> None:
        """attempt_timeout takes seconds > 0 or None; anything else is InvalidInput."""
        with pytest.raises(InvalidInput, match="attempt_timeout"):
            OpenAIChatModel("gpt-test", base_url="http://127.0.0.1:9/v1", attempt_timeout=bad)


class TestStopIsCommittedWhenAsked:
    @staticmethod
    def agent(gate: Gate, **kwargs: Any) -> nb.Agent:
        @nb.tool
        def slow(x: str) -> str:
            """Wait at the gate."""
            gate.pass_sync()
            return x

        model = nb.ScriptedModel([nb.ToolCall("slow", {"x": "a"}), "done"])
        return nb.Agent(name="Slow", agent_id="slow", model=model, tools=[slow], **kwargs)

    def test_interrupt_is_committed_while_a_sync_tool_still_runs(self, tmp_path: Path) -> None:
        """The interrupt's run/stop_requested commits at once, before the sync tool returns
        and the run ends."""
        gate = Gate()
        with runtime_for(self.agent(gate), tmp_path) as runtime:
            session = runtime.session("s")
            receipt = session.submit("go")
            gate.wait_arrived()
            session.interrupt()
            stop = wait_for(session, "run/stop_requested")
            assert "run/end" not in [e.type for e in session.log.scan(stop.seq)]
            gate.release()
            assert receipt.wait(timeout=WAIT).status == "interrupted"
            assert len(events_of(session, "run/stop_requested")) == 1
            started = [e.payload for e in events_of(session, "inbox/started")]
            assert [s["kind"] for s in started].count("interrupt") == 1

    def test_time_limit_is_committed_when_it_fires(self, tmp_path: Path) -> None:
        """A time limit's run/stop_requested commits when it fires, before the run's end."""
        gate = Gate()
        with runtime_for(self.agent(gate), tmp_path) as runtime:
            session = runtime.session("s")
            receipt = session.submit("go", timeout=0.2)
            stop = wait_for(session, "run/stop_requested")
            assert "time limit" in stop.payload["reason"]
            assert "run/end" not in [e.type for e in session.log.scan(stop.seq)]
            gate.release()
            outcome = receipt.wait(timeout=WAIT)
        assert outcome.stop_reason == "time_limit"
