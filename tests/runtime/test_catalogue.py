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


@nb.tool
def lookup(plan: str) -> str:
    """Look a plan up.

    Args:
        plan: its name
    """
    return f"{plan}: $10"


def _interrupted(store: nb.SessionStore) -> tuple[nb.SessionKey, str]:
    """A turn that checkpointed a tool step, then was interrupted mid-answer: (key, turn)."""
    model = nb.ScriptedModel(
        [nb.ToolCall("lookup", {"plan": "pro"}), "a" * 400, "resumed"],
        chunk_size=1,
        chunk_delay=0.002,
    )
    agent = nb.Agent(name="Test", agent_id="test-agent", model=model, tools=[lookup])
    with nb.Runtime(agent, store=store) as runtime:
        session = runtime.session("s1")
        task = session.submit("price pro")
        while not events_of(session, "model/chunk") or not events_of(session, "state/checkpoint"):
            store.wait_for_head(session.key, session.log.head(), 0.1)
        session.interrupt()
        assert task.wait(WAIT).status == "interrupted"
        return session.key, task.turn_id


class TestCheckpointDigest:
    def test_every_checkpoint_names_the_digest_of_the_context_at_its_seq(
        self, store_url: str
    ) -> None:
        """Each ``state/checkpoint`` carries ``context_digest``, equal to the digest of the
        context the log folds to at that seq."""
        from agentnb.folds import load_context
        from agentnb.projections.digest import extend_digest

        model = nb.ScriptedModel(
            [nb.ToolCall("lookup", {"plan": "a"}), nb.ToolCall("lookup", {"plan": "b"}), "done"]
        )
        agent = nb.Agent(name="Test", agent_id="test-agent", model=model, tools=[lookup])
        with nb.Runtime(agent, store=store_url) as runtime:
            session = runtime.session("s1")
            session.run("compare", timeout=WAIT)
            checkpoints = events_of(session, "state/checkpoint")
            assert len(checkpoints) == 3
            for event in checkpoints:
                context = load_context(runtime.store, session.key, event.seq)
                assert event.payload["state"]["context_digest"] == extend_digest("", context)
                assert event.payload["state"]["context_messages"] == len(context)

    def test_a_resume_checks_the_checkpoint_and_continues(self) -> None:
        """A resume after an interrupt finds the checkpoint matching the log and goes on."""
        store = nb.MemoryStore()
        key, turn_id = _interrupted(store)
        agent = nb.Agent(
            name="Test", agent_id="test-agent", model=nb.ScriptedModel(["resumed"]), tools=[lookup]
        )
        with nb.Runtime(agent, store=store) as runtime:
            session = runtime.open(key.session_id)
            assert session.resume(turn_id).wait(WAIT).output == "resumed"

    def test_a_checkpoint_that_does_not_match_the_log_refuses_the_resume(self) -> None:
        """A checkpoint whose digest is not the log's (a changed log) fails the resume closed
        with ``Corrupt``'s reason committed, and nothing runs."""
        store = nb.MemoryStore()
        key, turn_id = _interrupted(store)
        head = store.heads(key)[0]
        (run_end,) = [e for e in store.read_after(key, 0, 1000) if e.type == "run/end"]
        forged = nb.Event.create(
            "state/checkpoint",
            {"reason": "step", "state": {"context_digest": "0" * 64, "context_messages": 1}},
            turn_id=turn_id,
            run_id=run_end.run_id,
        )
        store.append(key, [forged], expected_seq=head, batch_id="forged")
        model = nb.ScriptedModel(["resumed"])
        agent = nb.Agent(name="Test", agent_id="test-agent", model=model, tools=[lookup])
        with nb.Runtime(agent, store=store) as runtime:
            session = runtime.open(key.session_id)
            outcome = session.resume(turn_id).wait(WAIT)
            assert outcome.status == "rejected"
            assert "digest" in (outcome.error or "")
            assert model.requests == []


class TestSystemMessage:
    def test_the_first_run_records_the_instructions_it_uses(self, store_url: str) -> None:
        """The session's first run writes ``message/system`` with the agent's instructions;
        later runs with the same agent write none, and the context holds no system message."""
        with nb.Runtime(_agent(["a", "b"], None, "Answer in French."), store=store_url) as rt:
            session = rt.session("s1")
            session.run("one", timeout=WAIT)
            session.run("two", timeout=WAIT)
            (system,) = events_of(session, "message/system")
            assert system.payload["message"]["role"] == "system"
            assert system.payload["message"]["text"] == "Answer in French."
            assert all(m.role != "system" for m in session.transcript().messages)

    def test_an_accepted_agent_change_records_the_new_instructions(self, store_url: str) -> None:
        """A runtime taking the session over with other instructions records them."""
        store: Any = nb.MemoryStore() if store_url == "memory://" else store_url
        with nb.Runtime(_agent(["a"], None, "Be brief."), store=store) as rt:
            rt.session("s1").run("one", timeout=WAIT)
        changed = _agent(["b"], None, "Be thorough.")
        with nb.Runtime(changed, store=store, accept_agent_change=True) as rt:
            session = rt.session("s1")
            session.run("two", timeout=WAIT)
            texts = [e.payload["message"]["text"] for e in events_of(session, "message/system")]
            assert texts == ["Be brief.", "Be thorough."]

    def test_no_instructions_no_system_message(self, store_url: str) -> None:
        """An agent without instructions records no ``message/system``."""
        with nb.Runtime(_agent(["a"], None, ""), store=store_url) as rt:
            session = rt.session("s1")
            session.run("one", timeout=WAIT)
            assert events_of(session, "message/system") == []


class TestStateRestored:
    def test_a_run_from_a_snapshot_records_what_it_restored(self, tmp_path: Any) -> None:
        """A runtime whose state came from a snapshot plus the log records ``state/restored``
        (the snapshot's seq, the seq restored to) in its first commit; one that folded the
        log from the start records none."""
        from agentnb.folds import Folds

        url = f"sqlite:///{tmp_path / 'db.sqlite'}"
        with nb.Runtime(_agent(["a", "b", "c"], None), store=url) as runtime:
            session = runtime.session("s1")
            session.run("one", timeout=WAIT)
            assert events_of(session, "state/restored") == []
            key = session.key
        store = nb.open_store(url)
        try:
            folds = Folds(store, key)
            folds.refresh()
            snapshot_seq = folds.state.seq
            folds.save_if_due(every=1)
            store.append(
                key,
                [nb.Event.create("acme/note", {"n": 1})],
                expected_seq=snapshot_seq,
                batch_id="after-snapshot",
            )
        finally:
            store.close()
        with nb.Runtime(_agent(["b"], None), store=url) as runtime:
            session = runtime.open("s1")
            session.run("two", timeout=WAIT)
            (restored,) = events_of(session, "state/restored")
            assert restored.payload == {
                "snapshot_seq": snapshot_seq,
                "restored_seq": snapshot_seq + 1,
            }
            assert restored.seq == snapshot_seq + 2  # in the new turn's first commit


class TestVerificationExport:
    def test_the_verifications_frame_lists_each_check(self, tmp_path: Any) -> None:
        """``analysis.verifications`` gives one row per ``verification/result``, in order."""
        pytest.importorskip("duckdb")
        from agentnb import analysis

        url = f"sqlite:///{tmp_path / 'db.sqlite'}"
        agent = _agent(["41", "42"], lambda text: text == "42" or "must be 42")
        with nb.Runtime(agent, store=url) as runtime:
            runtime.session("s1").run("answer", timeout=WAIT)
            frame = analysis.verifications(runtime.store)
        assert list(frame["passed"]) == [False, True]
        assert list(frame["attempt"]) == [1, 2]
        assert list(frame["retry"]) == [True, False]
        assert frame["reason"].iloc[0] == "must be 42"
