"""The event catalogue complete: ``verification/result`` from ``Agent(verify=)``,
``message/system`` when the instructions change, ``state/checkpoint`` saying what it covers,
``state/restored`` after a restore from a snapshot."""

from __future__ import annotations

from typing import Any

import pytest

import agentnb as nb
from tests.runtime.helpers import WAIT, events_of


def _agent(replies: list[Any], verify: Any, instructions: str = "Be brief.") -> nb.Agent:
    return nb.Agent(
        name="Test",
        agent_id="test-agent",
        model=nb.ScriptedModel(replies),
        instructions=instructions,
        verify=verify,
    )


class TestVerification:
    def test_a_passing_check_is_recorded_and_the_turn_completes(self, store_url: str) -> None:
        """``verify`` returning True records a passed ``verification/result`` and completes."""
        seen: list[str] = []

        def verify(text: str) -> bool:
            seen.append(text)
            return True

        with nb.Runtime(_agent(["42"], verify), store=store_url) as runtime:
            session = runtime.session("s1")
            outcome = session.run("answer", timeout=WAIT)
            assert (outcome.status, outcome.output) == ("completed", "42")
            (result,) = events_of(session, "verification/result")
            assert (result.payload["passed"], result.payload["attempt"]) == (True, 1)
            assert seen == ["42"]

    def test_a_failed_check_sends_the_turn_back_once_with_the_reason(self, store_url: str) -> None:
        """A reason returned by ``verify`` reaches the model as a user message, and the
        revised answer completes the turn in the same run."""
        model = nb.ScriptedModel(["41", "42"])
        agent = nb.Agent(
            name="Test",
            agent_id="test-agent",
            model=model,
            verify=lambda text: True if text == "42" else "the answer must be 42",
        )
        with nb.Runtime(agent, store=store_url) as runtime:
            session = runtime.session("s1")
            outcome = session.run("answer", timeout=WAIT)
            assert (outcome.status, outcome.output) == ("completed", "42")
            assert "the answer must be 42" in model.requests[-1][-1].text
            results = [e.payload for e in events_of(session, "verification/result")]
            assert [(r["passed"], r["retry"], r["attempt"]) for r in results] == [
                (False, True, 1),
                (True, False, 2),
            ]
            assert len(events_of(session, "run/start")) == 1

    def test_a_second_failure_fails_the_turn_with_the_reason(self, store_url: str) -> None:
        """Two failed checks in one turn fail it, ``stop_reason`` ``verification_failed``."""

        async def verify(text: str) -> bool:
            return False

        with nb.Runtime(_agent(["a", "b", "c"], verify), store=store_url) as runtime:
            session = runtime.session("s1")
            outcome = session.run("answer", timeout=WAIT)
            assert outcome.status == "failed"
            assert outcome.stop_reason == "verification_failed"
            assert "failed verification twice" in (outcome.error or "")

    @pytest.mark.parametrize("bad", ["raise", "wrong type"])
    def test_a_hook_that_raises_ends_the_run_with_a_committed_reason(
        self, store_url: str, bad: str
    ) -> None:
        """A verify hook that raises (or returns nonsense) fails the run with the error
        committed, and the session takes the next task."""

        def verify(text: str) -> object:
            if bad == "raise":
                raise RuntimeError("checker is down")
            return 42

        with nb.Runtime(_agent(["a", "b"], verify), store=store_url) as runtime:
            session = runtime.session("s1")
            outcome = session.run("answer", timeout=WAIT)
            assert outcome.status == "failed"
            assert outcome.stop_reason == "verification_error"
            expected = "checker is down" if bad == "raise" else "verify returned 42"
            assert expected in (outcome.error or "")
            (failed,) = events_of(session, "turn/failed")
            assert failed.turn_id == outcome.turn_id
            assert session.inspect().active_runs == ()
            with pytest.raises(nb.Parked):
                session.run("next", timeout=WAIT)

    def test_verify_must_be_callable(self) -> None:
        """A verify that is not a function is ``InvalidInput`` at the agent's construction."""
        with pytest.raises(nb.InvalidInput, match="verify"):
            _agent([], verify="yes")
