"""Datasets from sessions: one case per turn with everything the turn recorded, the same
from SQLite, PostgreSQL and an export; filters; Parquet and pydantic-evals round trips."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import agentnb as nb
from agentnb.errors import InvalidInput
from agentnb.export import Exporter
from agentnb.export.parquet import ParquetSink
from agentnb.stores import open_store
from tests.evals.agents import Counter, agent, record


@pytest.fixture
def recorded(tmp_path: Path):
    """An SQLite store with 5 recorded price questions, an order approved and material given."""
    url = f"sqlite:///{tmp_path / 'rec.sqlite'}"
    counter = Counter()
    with nb.Runtime(agent(counter), store=url) as rt:
        turns = record(rt, 5)
        session = rt.session("order")
        session.inject("Our budget is 100 EUR.")
        receipt = session.submit("order plan gold")
        assert receipt.wait(30).status == "suspended"
        (request_id,) = session.pending()
        assert session.respond(request_id, True).wait(30).status == "completed"
        order_turn = receipt.turn_id
    return url, turns, order_turn


class TestCases:
    def test_one_case_per_completed_turn(self, recorded) -> None:
        """Each completed turn is a case named by its turn id, in session order."""
        url, turns, order_turn = recorded
        ds = nb.evals.dataset(url)
        assert {c.name for c in ds} == {*turns, order_turn}
        assert len(ds) == 6

    def test_case_holds_what_the_turn_recorded(self, recorded) -> None:
        """Input, output, tool calls with arguments and results, usage, latency, ids."""
        url, turns, _ = recorded
        case = nb.evals.dataset(url)[turns[1]]
        assert case.input == "price of planx1?"
        assert case.output == "Answer: planx1 costs 60 EUR"
        assert case.expected_output == case.output
        assert [(c["name"], c["arguments"], c["status"], c["output"]) for c in case.tool_calls] == [
            ("lookup_price", {"plan": "planx1"}, "success", "planx1 costs 60 EUR")
        ]
        assert case.input_tokens > 0
        assert case.output_tokens > 0
        assert case.model_calls == 2
        assert case.latency_ms is not None
        assert case.latency_ms >= 0
        assert case.session_id == "s01"
        assert case.agent_id == "pricing"
        assert case.model == "scripted"
        assert case.agent_fingerprint

    def test_answers_and_material(self, recorded) -> None:
        """The approval a person gave and the material the turn got are in its case."""
        url, _, order_turn = recorded
        case = nb.evals.dataset(url)[order_turn]
        assert case.inputs == ({"kind": "inject", "text": "Our budget is 100 EUR."},)
        [answer] = case.answers
        assert (answer["kind"], answer["tool_name"], answer["arguments"]) == (
            "confirmation",
            "place_order",
            {"plan": "gold"},
        )
        assert answer["answer"]["approved"] is True

    def test_expected_output_given(self, recorded) -> None:
        """expected= replaces a case's expected output; the recorded one stays."""
        url, turns, _ = recorded
        case = nb.evals.dataset(url, expected={turns[0]: "better"})[turns[0]]
        assert (case.expected_output, case.output) == ("better", "Answer: plan0 costs 50 EUR")


class TestFilters:
    def test_sessions_and_agent(self, recorded) -> None:
        """sessions= and agent_id= narrow the cases."""
        url, turns, _ = recorded
        assert [c.name for c in nb.evals.dataset(url, sessions=["s00", "s02"])] == [
            turns[0],
            turns[2],
        ]
        assert len(nb.evals.dataset(url, agent_id="nobody")) == 0

    def test_negative_feedback_builds_a_regression_set(self, recorded) -> None:
        """feedback='negative' keeps the turns marked bad (score <= 0 or label negative)."""
        url, turns, _ = recorded
        with nb.Runtime(agent(Counter()), store=url) as rt:
            rt.open("s01").feedback(turns[1], score=0)
            rt.open("s02").feedback(turns[2], label="negative", comment="wrong plan")
            rt.open("s03").feedback(turns[3], score=1)
            gone = rt.open("s04").feedback(turns[4], score=-1)
            rt.open("s04").retract_feedback(gone)
        bad = nb.evals.dataset(url, feedback="negative")
        assert [c.name for c in bad] == [turns[1], turns[2]]
        assert [c.name for c in nb.evals.dataset(url, feedback="positive")] == [turns[3]]
        assert bad[turns[2]].feedback[0]["comment"] == "wrong plan"

    def test_labels_and_time(self, recorded) -> None:
        """labels= reads the catalogue; since/until bound the turn's start."""
        url, turns, _ = recorded
        with nb.Runtime(agent(Counter()), store=url) as rt:
            rt.open("s03").update(labels={"team": "a"})
        assert [c.name for c in nb.evals.dataset(url, labels={"team": "a"})] == [turns[3]]
        later = datetime.now(UTC) + timedelta(hours=1)
        assert len(nb.evals.dataset(url, since=later)) == 0
        assert len(nb.evals.dataset(url, until=later)) == 6

    @pytest.mark.parametrize(
        "kwargs",
        [
            {"turns": "nonsense"},
            {"feedback": "bad"},
            {"since": datetime(2026, 1, 1)},
            {"sessions": "s00"},
        ],
    )
    def test_bad_filters(self, recorded, kwargs) -> None:
        """A filter of the wrong kind is InvalidInput."""
        with pytest.raises(InvalidInput):
            nb.evals.dataset(recorded[0], **kwargs)

    def test_labels_need_a_live_store(self, recorded, tmp_path: Path) -> None:
        """labels= over an export is refused: exports hold no labels."""
        (tmp_path / "empty").mkdir()
        with pytest.raises(InvalidInput, match="labels"):
            nb.evals.dataset(tmp_path / "empty", labels={"a": "b"})


def copy_store(source_url: str, target_url: str) -> None:
    """Every session's committed events, appended as they are into another store."""
    source, target = open_store(source_url), open_store(target_url)
    try:
        for record_ in source.list_sessions():
            key = record_.key
            events = list(nb.SessionLog(source, key).scan())
            target.create_session(key)
            target.append(key, events, expected_seq=0, batch_id=f"copy-{key.session_id}")
    finally:
        source.close()
        target.close()


class TestSources:
    def test_sqlite_postgres_and_export_give_equal_datasets(
        self, recorded, pg_store_url: str, tmp_path: Path
    ) -> None:
        """The same log in SQLite, in PostgreSQL and in a Parquet export: equal datasets."""
        url, _, _ = recorded
        copy_store(url, pg_store_url)
        sink = ParquetSink(tmp_path / "export")
        store = open_store(url)
        try:
            for r in store.list_sessions():
                Exporter(nb.SessionLog(store, r.key), sink).drain()
        finally:
            store.close()
        from_sqlite = nb.evals.dataset(url)
        assert len(from_sqlite) == 6
        assert nb.evals.dataset(pg_store_url) == from_sqlite
        assert nb.evals.dataset(tmp_path / "export") == from_sqlite

    def test_runtime_as_source(self, recorded) -> None:
        """A Runtime reads its own store."""
        url = recorded[0]
        with nb.Runtime(agent(Counter()), store=url) as rt:
            assert nb.evals.dataset(rt) == nb.evals.dataset(url)


class TestFiles:
    def test_parquet_round_trip(self, recorded, tmp_path: Path) -> None:
        """to_parquet then load_dataset gives an equal dataset."""
        ds = nb.evals.dataset(recorded[0])
        path = ds.to_parquet(tmp_path / "cases.parquet")
        assert nb.evals.load_dataset(path) == ds

    def test_not_a_dataset_file(self, tmp_path: Path) -> None:
        """A missing file is InvalidInput."""
        with pytest.raises(InvalidInput):
            nb.evals.load_dataset(tmp_path / "nope.parquet")

    def test_to_pydantic_evals(self, recorded) -> None:
        """Each case becomes a pydantic_evals Case: input, expected output, metadata."""
        ds = nb.evals.dataset(recorded[0])
        pe = ds.to_pydantic_evals()
        first = pe.cases[0]
        assert (first.name, first.inputs, first.expected_output) == (
            ds[0].name,
            ds[0].input,
            ds[0].expected_output,
        )
        assert first.metadata["tool_calls"] == [dict(c) for c in ds[0].tool_calls]
