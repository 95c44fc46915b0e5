"""Experiments as dataframes: frame, summary, paired compare with a bootstrap interval, an
escaped side-by-side diff, a plot, Parquet files, the export views and queries, and the
regression gate."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
from pydantic_evals.evaluators import Contains, EqualsExpected

import agentnb as nb
from agentnb import analysis
from agentnb.errors import EvalRegression, InvalidInput
from agentnb.export import Exporter
from agentnb.export.parquet import ParquetSink
from agentnb.permissions import agent_digest
from agentnb.stores import open_store
from tests.evals.agents import Counter, agent, record, script


def worse_on_first(n: int):
    """v1's script, but answering wrong for the cases whose plan number is below ``n``."""
    good = script()

    def reply(messages: list[nb.Message]) -> object:
        answer = good(messages)
        if isinstance(answer, str):
            task = next(m.text for m in reversed(messages) if m.role == "user")
            if int(re.sub(r"\D", "", task)) < n:
                return "I do not know."
        return answer

    return reply


EVALUATORS = [EqualsExpected(), Contains("EUR"), nb.evals.ToolTrajectory()]


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory):
    """20 recorded cases, replayed by v1 (right on all) and by v0 (wrong on 15), in one store."""
    root = tmp_path_factory.mktemp("exp")
    counter = Counter()
    with nb.Runtime(agent(counter), store=f"sqlite:///{root / 'rec.sqlite'}") as rt:
        record(rt, 20)
        dataset = nb.evals.dataset(rt)
    url = f"sqlite:///{root / 'evals.sqlite'}"
    v0 = nb.Agent(
        name="v0",
        agent_id="pricing",
        model=nb.ScriptedModel(worse_on_first(15)),
        tools=agent(counter).tools,
        instructions="You are v0.",
    )
    good = nb.evals.replay(
        dataset, agent(counter), name="good", store=url, evaluators=EVALUATORS, progress=False
    )
    bad = nb.evals.replay(dataset, v0, name="bad", store=url, evaluators=EVALUATORS, progress=False)
    return dataset, good, bad, url, root


class TestFrames:
    def test_frame_has_one_row_per_case(self, pair) -> None:
        """frame(): input, recorded and new output, each score, tokens, latency, unrecorded."""
        dataset, good, _, _, _ = pair
        frame = good.frame()
        assert len(frame) == 20
        assert list(frame["case"]) == [c.name for c in dataset]
        for column in (
            "input",
            "recorded_output",
            "output",
            "EqualsExpected",
            "Contains",
            "ToolTrajectory",
            "input_tokens",
            "output_tokens",
            "latency_ms",
            "unrecorded_calls",
        ):
            assert column in frame.columns
        assert frame["EqualsExpected"].all()
        assert (frame["output"] == frame["recorded_output"]).all()

    def test_summary_has_a_row_per_score(self, pair) -> None:
        """summary(): the pass rate of each score."""
        _, good, bad, _, _ = pair
        assert good.summary().set_index("score")["mean"].to_dict() == {
            "EqualsExpected": 1.0,
            "Contains": 1.0,
            "ToolTrajectory": 1.0,
        }
        assert bad.summary().set_index("score").loc["EqualsExpected", "mean"] == 0.25


class TestCompare:
    def test_better_on_15_of_20(self, pair) -> None:
        """compare reports 15 wins, 0 losses, 5 ties and a mean difference of 0.75."""
        _, good, bad, _, _ = pair
        row = good.compare(bad).set_index("score").loc["EqualsExpected"]
        assert (row["cases"], row["wins"], row["losses"], row["ties"]) == (20, 15, 0, 5)
        assert row["mean_diff"] == pytest.approx(0.75)
        assert row["ci_low"] <= 0.75 <= row["ci_high"]
        assert 0.4 < row["ci_low"] < 0.75 < row["ci_high"] <= 1.0

    def test_the_other_way_round(self, pair) -> None:
        """bad.compare(good) is the mirror: 15 losses."""
        _, good, bad, _, _ = pair
        row = bad.compare(good, score="EqualsExpected").iloc[0]
        assert (row["wins"], row["losses"]) == (0, 15)
        assert row["mean_diff"] == pytest.approx(-0.75)

    def test_the_interval_is_seeded(self, pair) -> None:
        """The same call gives the same interval."""
        _, good, bad, _, _ = pair
        assert good.compare(bad).equals(good.compare(bad))

    def test_compare_refuses_what_is_not_an_experiment(self, pair) -> None:
        """A score neither has, or another kind of object, is InvalidInput."""
        _, good, bad, _, _ = pair
        with pytest.raises(InvalidInput):
            good.compare(bad, score="Nope")
        with pytest.raises(InvalidInput):
            good.compare("bad")  # type: ignore[arg-type]


class TestDiff:
    def test_marks_what_changed(self, pair) -> None:
        """diff(case, other): both answers side by side, the changed line marked."""
        dataset, good, bad, _, _ = pair
        view = good.diff(dataset[0].name, bad)
        assert view.changed
        assert 'class="changed"' in view.html
        assert "I do not know." in view.html
        assert "lookup_price" in view.html

    def test_escapes_every_text(self, tmp_path: Path) -> None:
        """A case whose texts hold markup shows them as text, never as HTML."""
        counter = Counter()
        with nb.Runtime(agent(counter), store=f"sqlite:///{tmp_path / 'x.sqlite'}") as rt:
            rt.session("x").run("price of <script>alert(1)</script>plan7?")
            dataset = nb.evals.dataset(rt)
        experiment = nb.evals.replay(dataset, agent(counter, upper=True), progress=False)
        html = experiment.diff(dataset[0]).html
        assert "<script>" not in html
        assert "&lt;script&gt;" in html


class TestFiles:
    def test_plot_returns_axes(self, pair) -> None:
        """plot() draws a bar per score and experiment."""
        import matplotlib

        matplotlib.use("Agg")
        _, good, bad, _, _ = pair
        ax = good.plot(bad)
        assert len(ax.patches) == 6
        assert [t.get_text() for t in ax.get_legend().get_texts()] == ["good", "bad"]

    def test_to_parquet(self, pair, tmp_path: Path) -> None:
        """to_parquet writes the experiment, its cases and its scores."""
        _, good, _, _, _ = pair
        good.to_parquet(tmp_path)
        meta = pd.read_parquet(tmp_path / "experiments-good.parquet")
        cases = pd.read_parquet(tmp_path / "experiment_cases-good.parquet")
        scores = pd.read_parquet(tmp_path / "scores-good.parquet")
        assert (meta["cases"].iloc[0], len(cases), len(scores)) == (20, 20, 60)
        assert set(scores["score"]) == {"EqualsExpected", "Contains", "ToolTrajectory"}


class TestExportViews:
    def test_views_over_an_export(self, pair, tmp_path: Path) -> None:
        """experiments, experiment_cases and scores read the replays' log."""
        _, good, _bad, url, _ = pair
        sink = ParquetSink(tmp_path / "export")
        store = open_store(url)
        try:
            for r in store.list_sessions():
                Exporter(nb.SessionLog(store, r.key), sink).drain()
        finally:
            store.close()
        with analysis.connection(tmp_path / "export") as con:
            experiments = con.sql(
                "SELECT experiment, cases, unrecorded_calls FROM experiments ORDER BY 1"
            ).fetchall()
            means = dict(
                con.sql(
                    "SELECT experiment, avg(value) FROM scores WHERE score = 'EqualsExpected' "
                    "GROUP BY 1"
                ).fetchall()
            )
            fingerprint = con.sql(
                "SELECT DISTINCT agent_fingerprint FROM experiment_cases WHERE experiment='good'"
            ).fetchall()
        assert experiments == [("bad", 20, 0), ("good", 20, 0)]
        assert means == {"good": 1.0, "bad": 0.25}
        assert fingerprint == [(good.results[0].replayed.agent_fingerprint,)]
        worse = analysis.query(
            "cases_got_worse", tmp_path / "export", baseline="good", candidate="bad"
        )
        assert len(worse[worse["score"] == "EqualsExpected"]) == 15
        by_fingerprint = analysis.query(
            "score_by_fingerprint", tmp_path / "export", score="EqualsExpected"
        )
        assert sorted(by_fingerprint["mean_value"]) == [0.25, 1.0]

    def test_the_fingerprint_is_the_agent_digest(self, pair) -> None:
        """The views' sha256 of agent/bound equals agentnb.permissions.agent_digest."""
        _, good, _, _, _ = pair
        assert good.results[0].replayed.agent_fingerprint == agent_digest(
            agent(Counter()).fingerprint
        )


class TestGate:
    def test_raises_with_a_table(self, pair) -> None:
        """A candidate worse on 15 cases raises EvalRegression listing them."""
        _, good, bad, _, _ = pair
        with pytest.raises(EvalRegression) as caught:
            nb.evals.assert_no_regression(bad, good, evaluator="EqualsExpected")
        assert len(caught.value.cases) == 15
        assert "15 case(s)" in str(caught.value)
        assert "price of plan0?" in str(caught.value)

    def test_passes_when_nothing_got_worse(self, pair) -> None:
        """No case lower than the baseline: nothing raised."""
        _, good, bad, _, _ = pair
        nb.evals.assert_no_regression(good, bad)
        nb.evals.assert_no_regression(bad, good, evaluator="ToolTrajectory")

    def test_tolerance(self, pair) -> None:
        """A drop within the tolerance passes."""
        _, good, bad, _, _ = pair
        nb.evals.assert_no_regression(bad, good, evaluator="EqualsExpected", tolerance=1.0)

    def test_bad_gate_input(self, pair) -> None:
        """A negative tolerance or an unknown score is InvalidInput."""
        _, good, bad, _, _ = pair
        with pytest.raises(InvalidInput):
            nb.evals.assert_no_regression(bad, good, tolerance=-1)
        with pytest.raises(InvalidInput):
            nb.evals.assert_no_regression(bad, good, evaluator="Nope")
