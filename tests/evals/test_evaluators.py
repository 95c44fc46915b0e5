"""agentnb's evaluators on replayed cases, and pydantic-evals' LLMJudge grading with an
agentnb model through judge_model."""

from __future__ import annotations

import pytest
from pydantic_evals.evaluators import LLMJudge

import agentnb as nb
from agentnb.errors import InvalidInput
from tests.evals.agents import Counter, agent, record


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory):
    url = f"sqlite:///{tmp_path_factory.mktemp('ev') / 'rec.sqlite'}"
    with nb.Runtime(agent(Counter()), store=url) as rt:
        record(rt, 3)
    return nb.evals.dataset(url)


def scores(experiment, name: str) -> list[object]:
    return [next(s.value for s in r.scores if s.name == name) for r in experiment.results]


def run(dataset, agent_, *evaluators):
    return nb.evals.replay(dataset, agent_, evaluators=list(evaluators), progress=False)


class TestAgentnbEvaluators:
    def test_tool_trajectory_modes(self, dataset) -> None:
        """exact / in_order / set compare the replay's tool names with the recording's."""
        exp = run(
            dataset,
            agent(Counter()),
            nb.evals.ToolTrajectory(),
            nb.evals.ToolTrajectory(match="set", expected=["lookup_price", "place_order"]),
        )
        assert [s.value for s in exp.results[0].scores] == [True, False]
        with pytest.raises(InvalidInput):
            nb.evals.ToolTrajectory(match="fuzzy")  # type: ignore[arg-type]

    def test_in_order_allows_calls_between(self, dataset) -> None:
        """in_order passes when the recorded calls come in order among others."""
        exp = run(
            dataset,
            agent(Counter()),
            nb.evals.ToolTrajectory(match="in_order", expected=[]),
        )
        assert scores(exp, "ToolTrajectory") == [True, True, True]

    def test_no_unrecorded_calls(self, dataset) -> None:
        """Fails exactly when a call had no recording."""
        counter = Counter()
        same = run(dataset, agent(counter), nb.evals.NoUnrecordedCalls())
        moved = run(dataset, agent(counter, upper=True), nb.evals.NoUnrecordedCalls())
        assert scores(same, "NoUnrecordedCalls") == [True] * 3
        assert scores(moved, "NoUnrecordedCalls") == [False] * 3

    def test_tokens_and_latency_below(self, dataset) -> None:
        """TokensBelow and LatencyBelow read the replay's usage and duration."""
        exp = run(
            dataset,
            agent(Counter()),
            nb.evals.TokensBelow(1),
            nb.evals.TokensBelow(10**9),
            nb.evals.LatencyBelow(10**9),
        )
        assert [s.value for s in exp.results[0].scores] == [False, True, True]

    def test_same_answer_as_a_baseline(self, dataset) -> None:
        """SameAnswerAs compares with another experiment's answers (or a dataset's)."""
        counter = Counter()
        base = run(dataset, agent(counter))
        same = run(dataset, agent(counter), nb.evals.SameAnswerAs(base))
        other = run(dataset, agent(counter, prefix="Price"), nb.evals.SameAnswerAs(dataset))
        assert scores(same, "SameAnswerAs") == [True] * 3
        assert scores(other, "SameAnswerAs") == [False] * 3
        with pytest.raises(InvalidInput):
            nb.evals.SameAnswerAs(42)


class TestJudge:
    def test_llm_judge_grades_with_an_agentnb_model(self, dataset) -> None:
        """LLMJudge(model=judge_model(m)) asks the agentnb model; its JSON verdict counts."""
        seen: list[str] = []

        def judge(messages: list[nb.Message]) -> str:
            seen.append(messages[-1].text)
            ok = "EUR" in messages[-1].text
            return f'{{"reason": "mentions a price", "pass": {str(ok).lower()}, "score": 1.0}}'

        model = nb.evals.judge_model(nb.ScriptedModel(judge))
        exp = run(dataset, agent(Counter()), LLMJudge(rubric="names a price", model=model))
        assert scores(exp, "LLMJudge") == [True] * 3
        assert len(seen) == 3
        assert "names a price" in seen[0]

    def test_judge_model_needs_an_agentnb_model(self) -> None:
        """Anything else is InvalidInput."""
        with pytest.raises(InvalidInput):
            nb.evals.judge_model("openai:gpt")  # type: ignore[arg-type]
