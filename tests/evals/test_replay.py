"""Replays of recorded turns: recorded tools never run the real tool, calls without a
recording are errors the model sees and are counted, recorded answers answer the same
requests, and a replay with ScriptedModel is deterministic."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic_evals.evaluators import EqualsExpected, Evaluator, EvaluatorContext

import agentnb as nb
from agentnb.errors import InvalidInput
from tests.evals.agents import Counter, agent, record


@pytest.fixture(scope="module")
def twenty(tmp_path_factory: pytest.TempPathFactory):
    """20 recorded sessions (one price question each) and the counter of the real tool."""
    url = f"sqlite:///{tmp_path_factory.mktemp('rec') / 'rec.sqlite'}"
    counter = Counter()
    with nb.Runtime(agent(counter), store=url) as rt:
        record(rt, 20)
    return nb.evals.dataset(url), counter


@pytest.fixture(scope="module")
def ordered(tmp_path_factory: pytest.TempPathFactory):
    """One recorded order a person approved."""
    url = f"sqlite:///{tmp_path_factory.mktemp('ord') / 'ord.sqlite'}"
    counter = Counter()
    with nb.Runtime(agent(counter), store=url) as rt:
        session = rt.session("order")
        receipt = session.submit("order plan gold")
        assert receipt.wait(30).status == "suspended"
        session.respond(next(iter(session.pending())), True).wait(30)
    return nb.evals.dataset(url), counter


def quiet(dataset, agent_, **kwargs):
    return nb.evals.replay(dataset, agent_, progress=False, **kwargs)


class TestRecordedTools:
    @pytest.mark.parametrize(
        "variant",
        [
            {"name": "same"},
            {"name": "reworded", "prefix": "The price"},
            {"name": "shouting", "upper": True},
        ],
    )
    def test_the_side_effect_counter_never_moves(self, twenty, variant) -> None:
        """20 recorded sessions replayed by three agent variants: the real tool never runs."""
        dataset, counter = twenty
        before = counter.n
        experiment = quiet(dataset, agent(counter, **variant))
        assert counter.n == before
        assert len(experiment) == 20
        assert all(r.status == "completed" for r in experiment.results)

    def test_live_runs_the_real_tools(self, twenty) -> None:
        """tools='live' runs the real tool once per case."""
        dataset, counter = twenty
        before = counter.n
        quiet(dataset, agent(counter), tools="live")
        assert counter.n == before + 20

    def test_a_mapping_chooses_per_tool(self, twenty) -> None:
        """{'lookup_price': 'live'} runs that tool; the others stay recorded."""
        dataset, counter = twenty
        before = counter.n
        quiet(dataset[:3], agent(counter), tools={"lookup_price": "live"})
        assert counter.n == before + 3

    def test_recorded_results_are_served(self, twenty) -> None:
        """An unchanged agent replays to the recorded answers, nothing unrecorded."""
        dataset, counter = twenty
        experiment = quiet(dataset, agent(counter))
        assert experiment.outputs() == {c.name: c.output for c in dataset}
        assert sum(r.unrecorded_calls for r in experiment.results) == 0

    def test_new_arguments_get_no_recorded_result(self, twenty) -> None:
        """A call with new arguments is a tool error the model sees, counted per case."""
        dataset, counter = twenty
        experiment = quiet(dataset[:4], agent(counter, upper=True))
        for r in experiment.results:
            assert r.unrecorded_calls == 1
            [call] = r.replayed.tool_calls
            assert call["status"] == "error"
            assert "no recorded result for lookup_price" in call["output"]
            assert "no recorded result" in r.output

    def test_a_renamed_tool_gets_no_recorded_result(self, twenty) -> None:
        """A renamed tool has no recording: an error for the model, counted, never run."""
        dataset, counter = twenty
        before = counter.n
        experiment = quiet(
            dataset[:4], agent(counter, name="renamed", renamed=True, tool="find_price")
        )
        assert counter.n == before
        assert [r.unrecorded_calls for r in experiment.results] == [1, 1, 1, 1]
        assert all("no recorded result for find_price" in r.output for r in experiment.results)


class TestRecordedAnswers:
    def test_the_recorded_approval_answers_the_same_request(self, ordered) -> None:
        """The replay's approval request gets the recorded answer; the order is not placed."""
        dataset, counter = ordered
        before = counter.n
        [result] = quiet(dataset, agent(counter)).results
        assert counter.n == before
        assert result.status == "completed"
        assert result.unanswered_requests == 0
        assert result.output == "Answer: ordered gold"

    def test_a_new_request_is_counted_and_rejected(self, ordered) -> None:
        """A request the recording never answered is rejected with the reason, counted."""
        dataset, counter = ordered
        changed = dataset.with_expected({})
        case = changed[0]
        import dataclasses

        other = nb.evals.Dataset([dataclasses.replace(case, input="order plan silver")])
        [result] = quiet(other, agent(counter)).results
        assert result.unanswered_requests == 1
        assert result.status == "completed"
        assert "no recorded answer for confirmation of place_order" in result.output


class Failing(Evaluator):
    def evaluate(self, ctx: EvaluatorContext) -> bool:
        raise RuntimeError("the evaluator broke")


class TestExperimentStore:
    def test_deterministic_whatever_the_concurrency(self, twenty) -> None:
        """The same dataset replays to the same outputs, scores and counts at 1 and 4."""
        dataset, counter = twenty
        runs = [
            quiet(dataset, agent(counter, upper=True), concurrency=n, evaluators=[EqualsExpected()])
            for n in (1, 4)
        ]
        one, four = (
            e.frame()[["case", "output", "EqualsExpected", "unrecorded_calls"]] for e in runs
        )
        assert one.equals(four)

    def test_scores_are_recorded_in_the_replay_log(self, twenty, tmp_path: Path) -> None:
        """A store given keeps the replays under evals/<name>, each score as feedback."""
        dataset, counter = twenty
        url = f"sqlite:///{tmp_path / 'evals.sqlite'}"
        quiet(dataset[:2], agent(counter), store=url, name="v1", evaluators=[EqualsExpected()])
        again = nb.evals.dataset(url, feedback="positive")
        assert {c.session_id for c in again} == {c.name for c in dataset[:2]}
        assert {c.namespace for c in again} == {"evals/v1"}
        assert again[0].feedback[0]["by"] == "evaluator:EqualsExpected"
        with pytest.raises(InvalidInput, match="replayed in this store already"):
            quiet(dataset[:2], agent(counter), store=url, name="v1")

    def test_a_failing_evaluator_is_a_result(self, twenty) -> None:
        """An evaluator that raises gives an empty score with the reason; the replay goes on."""
        dataset, counter = twenty
        experiment = quiet(dataset[:2], agent(counter), evaluators=[Failing(), EqualsExpected()])
        for r in experiment.results:
            failed, passed = r.scores
            assert failed.value is None
            assert "the evaluator broke" in (failed.reason or "")
            assert passed.value is True

    def test_an_agent_per_case(self, twenty) -> None:
        """agent may be a function of the case (a fresh model each)."""
        dataset, counter = twenty
        experiment = quiet(dataset[:3], lambda case: agent(counter))
        assert experiment.outputs() == {c.name: c.output for c in dataset[:3]}


class TestBadInput:
    @pytest.mark.parametrize(
        "kwargs",
        [
            {"concurrency": 0},
            {"tools": "maybe"},
            {"tools": {"nope": "live"}},
            {"tools": {"lookup_price": "sometimes"}},
            {"answers": "invented"},
            {"evaluators": [object()]},
            {"name": ""},
        ],
    )
    def test_refused(self, twenty, kwargs) -> None:
        """Each bad option is InvalidInput before anything runs."""
        dataset, counter = twenty
        before = counter.n
        with pytest.raises(InvalidInput):
            quiet(dataset[:1], agent(counter), **kwargs)
        assert counter.n == before

    def test_empty_dataset(self) -> None:
        """Nothing to replay is InvalidInput."""
        with pytest.raises(InvalidInput, match="no cases"):
            quiet(nb.evals.Dataset([]), agent(Counter()))
