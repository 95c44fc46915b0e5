"""Dataframes and audit queries over the known scripted session, from every kind of source."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import agentnb as nb
from agentnb import analysis
from agentnb.export.sql import list_queries, load_query
from tests.export.conftest import ALICE, BOB, TOKENS, Known


def _by(frame: Any, column: str) -> dict[Any, Any]:
    return {row[column]: row for row in frame.to_dict("records")}


def _events_of_turn(known: Known, turn_id: str) -> list[nb.Event]:
    """The committed events of one turn, read from the store itself."""
    store = known.store()
    try:
        return [e for e in store.scan(ALICE) if e.turn_id == turn_id]
    finally:
        store.close()


class TestFrames:
    def test_events_hold_every_committed_event_once(
        self, known_source: Any, known_session: Known
    ) -> None:
        """events() has one row per committed event of every session, in seq order."""
        df = analysis.events(known_source)
        assert len(df) == sum(known_session.head.values())
        assert df["event_id"].is_unique
        alice = df[df["session_id"] == ALICE.session_id]
        assert list(alice["seq"]) == list(range(1, known_session.head[ALICE] + 1))

    def test_turns_have_the_expected_statuses_and_counts(
        self, known_source: Any, known_session: Known
    ) -> None:
        """turns() has one row per turn with its status, runs, steers, interactions, errors."""
        df = analysis.turns(known_source)
        rows = _by(df, "turn_id")
        t = known_session.turns
        assert set(rows) == set(t.values())
        expected = {
            "T1": ("completed", 1), "T2": ("completed", 1), "T3": ("completed", 1),
            "T5": ("completed", 2), "T6": ("completed", 2), "T7": ("completed", 2),
            "T8": ("interrupted", 1), "B1": ("completed", 1), "B2": ("failed", 1),
        }  # fmt: skip
        for name, (status, runs) in expected.items():
            assert (rows[t[name]]["status"], rows[t[name]]["runs"]) == (status, runs), name
        assert rows[t["T1"]]["steers"] == 1
        assert rows[t["T1"]]["tool_errors"] == 1
        assert rows[t["T1"]]["input"] == "compare the plans"
        assert rows[t["T5"]]["interactions"] == 1
        assert (rows[t["T7"]]["interrupts"], rows[t["T8"]]["interrupts"]) == (1, 1)
        assert rows[t["B2"]]["error"] == "bad request: context too long"
        assert rows[t["T8"]]["ended_at"] is None or str(rows[t["T8"]]["ended_at"]) == "NaT"

    def test_turn_tokens_sum_their_model_calls(
        self, known_source: Any, known_session: Known
    ) -> None:
        """Each turn's input/output tokens are the sums of its model calls' usage."""
        rows = _by(analysis.turns(known_source), "turn_id")
        for name, usage in TOKENS.items():
            row = rows[known_session.turns[name]]
            assert row["input_tokens"] == sum(u[0] for u in usage), name
            assert row["output_tokens"] == sum(u[1] for u in usage), name

    def test_runs_record_why_they_started_and_how_they_ended(
        self, known_source: Any, known_session: Known
    ) -> None:
        """runs() shows submit/respond/resume reasons and suspended/interrupted endings."""
        rows = _by(analysis.runs(known_source), "run_id")
        r = known_session.runs
        assert len(rows) == 12
        assert (rows[r["T5"][0]]["status"], rows[r["T5"][1]]["reason"]) == ("suspended", "respond")
        assert rows[r["T7"][0]]["status"] == "interrupted"
        assert bool(rows[r["T7"][0]]["stop_requested"]) is True
        assert (rows[r["T7"][1]]["reason"], rows[r["T7"][1]]["run_index"]) == ("resume", 2)
        # reconcile records outcomes without starting a run: T8 keeps its one interrupted run
        assert len(r["T8"]) == 1
        assert rows[r["T8"][0]]["status"] == "interrupted"
        assert bool(rows[r["T8"][0]]["stop_requested"]) is True

    def test_tool_calls_show_outcomes_approvals_and_reconciliation(
        self, known_source: Any, known_session: Known
    ) -> None:
        """tool_calls() has success, error, denied and reconciled calls with approvals."""
        df = analysis.tool_calls(known_source)
        assert len(df) == 6
        assert sorted(df["tool_name"]) == [
            "charge_card", "create_order", "create_order", "lookup_price", "slow_report",
            "vendor_quote",
        ]  # fmt: skip
        by_tool = _by(df, "tool_name")
        assert by_tool["lookup_price"]["status"] == "success"
        assert by_tool["vendor_quote"]["status"] == "error"
        assert "acme API is down" in by_tool["vendor_quote"]["output"]
        rows = _by(df, "call_id")
        c = known_session.calls
        approved, rejected = rows[c["T5"]], rows[c["T6"]]
        assert (approved["status"], bool(approved["approved"])) == ("success", True)
        assert approved["decision"] == "allowed"
        assert approved["approval_wait_ms"] == known_session.wait_ms["T5"]
        assert (rejected["status"], bool(rejected["approved"])) == ("denied", False)
        assert (rejected["decision"], rejected["decision_reason"]) == ("denied", "over budget")
        assert rejected["approval_wait_ms"] == known_session.wait_ms["T6"]
        charge = rows[c["T8"]]
        assert (charge["status"], charge["outcome"]) == ("reconciled", "success")
        assert charge["output"] == "charged $20 (verified)"
        assert bool(charge["uncertain"]) is True
        report = rows[c["T7"]]
        assert (report["status"], report["output"]) == ("success", "report drafted")
        assert bool(report["uncertain"]) is False

    def test_interactions_show_who_answered_and_the_wait(
        self, known_source: Any, known_session: Known
    ) -> None:
        """interactions() has the approved and the rejected confirmation with wait times."""
        rows = _by(analysis.interactions(known_source), "request_id")
        assert len(rows) == 2
        approved = rows[known_session.requests["T5"]]
        rejected = rows[known_session.requests["T6"]]
        assert (approved["status"], bool(approved["approved"])) == ("answered", True)
        assert (approved["kind"], approved["tool_name"]) == ("confirmation", "create_order")
        assert (approved["answered_by"], approved["wait_ms"]) == (
            "alice",
            known_session.wait_ms["T5"],
        )
        assert (bool(rejected["approved"]), rejected["reason"]) == (False, "over budget")
        assert (rejected["status"], rejected["answered_by"]) == ("answered", "alice")
        assert rejected["wait_ms"] == known_session.wait_ms["T6"]

    def test_inputs_show_the_steer_applied(self, known_source: Any, known_session: Known) -> None:
        """inputs() has every submit and the steer, all applied."""
        df = analysis.inputs(known_source)
        assert sorted(df["kind"].value_counts().items()) == [("steer", 1), ("submit", 9)]
        steer = df[df["kind"] == "steer"].iloc[0]
        assert (steer["turn_id"], steer["status"]) == (known_session.turns["T1"], "applied")
        assert steer["text"] == "also check the vendor quote"

    def test_model_calls_count_the_retry(self, known_source: Any, known_session: Known) -> None:
        """model_calls() has one row per call; the retried call has two attempts."""
        df = analysis.model_calls(known_source)
        assert len(df) == 14
        retried = df[df["retries"] > 0]
        assert len(retried) == 1
        assert (retried.iloc[0]["attempts"], retried.iloc[0]["status"]) == (2, "completed")
        failed = df[df["status"] == "failed"]
        assert list(failed["turn_id"]) == [known_session.turns["B2"]]

    def test_model_calls_say_their_purpose(self) -> None:
        """The model_calls frame says which calls were the summariser's (compaction) and
        which were the agent's steps (reasoning)."""
        agent = nb.Agent(
            name="C",
            agent_id="compact",
            model=nb.ScriptedModel(lambda m: "ok " * 30),
            compaction=nb.SummaryCompactor(
                trigger=0.5, keep_last=2, model=nb.ScriptedModel(lambda m: "a summary")
            ),
            context_window=300,
        )
        with nb.Runtime(agent, store="memory://") as rt:
            session = rt.session("s", user_id="u")
            for i in range(3):
                session.run(f"task {i} " + "word " * 20, timeout=30)
            purposes = {
                e.payload["model_call_id"]: e.payload["purpose"]
                for e in session.log.scan()
                if e.type == "request/prepared"
            }
            df = analysis.model_calls(session)
            assert dict(zip(df["model_call_id"], df["purpose"], strict=True)) == purposes
            assert set(purposes.values()) == {"reasoning", "compaction"}

    def test_steps_have_model_and_tool_counts(
        self, known_source: Any, known_session: Known
    ) -> None:
        """steps() attributes model calls and tool dispatches to their step."""
        df = analysis.steps(known_source)
        t1 = df[df["turn_id"] == known_session.turns["T1"]].sort_values("iteration")
        assert list(t1["iteration"]) == [1, 2, 3]
        assert list(t1["model_calls"]) == [1, 1, 1]
        assert list(t1["tool_calls"]) == [1, 1, 0]
        assert list(t1["status"]) == ["continued", "continued", "terminal"]

    def test_filters_narrow_to_one_session(self, known_source: Any) -> None:
        """A session_id filter keeps that session's rows only."""
        df = analysis.turns(known_source, session_id=BOB.session_id)
        assert list(df["user_id"]) == ["bob", "bob"]

    def test_turns_read_the_rollups_committed_with_the_data(
        self, known_session: Known, known_parquet_split: Path
    ) -> None:
        """Over a Parquet export the turns view reads the committed turn rollups: one row per
        turn although most turns span several batches (their rows were combined at commit),
        and exactly the turns rolled up from the events."""
        import json

        from agentnb.export import ParquetSink

        assert ParquetSink(known_parquet_split).turn_part_files()
        records = [json.loads(p.read_text()) for p in known_parquet_split.glob("_manifest/*")]
        assert sum(1 for r in records if any("turn_parts/" in x for x in r["removed"])) > 5
        store = known_session.store()
        try:
            expected = analysis.turns(store)
        finally:
            store.close()
        with analysis.connection(known_parquet_split) as con:
            rows = con.execute("SELECT count(*), count(DISTINCT turn_id) FROM turn_parts")
            assert rows.fetchone() == (len(expected), len(expected))
        assert analysis.turns(known_parquet_split).equals(expected)

    def test_a_session_object_is_a_source_of_its_own_events(self, known_session: Known) -> None:
        """A SessionLog source gives only that session's events."""
        store = known_session.store()
        try:
            df = analysis.events(nb.SessionLog(store, BOB))
        finally:
            store.close()
        assert len(df) == known_session.head[BOB]


EXPECTED_ROWS: dict[str, int | None] = {
    "approvals": 2,
    "cases_got_worse": 0,  # no nb.evals experiments here: tests/evals/test_experiment.py
    "context_growth": None,  # one row per model call: counted from the store
    "cost_per_agent": None,  # one row per session (each its own tree's root): counted
    "failed_turns": 1,
    "interrupted_runs": 2,
    "model_retries": 1,
    "parked_sessions": 2,
    "score_by_fingerprint": 0,  # likewise
    "session_activity": 2,
    "slowest_tools": 4,
    "steering_per_turn": 1,
    "subagent_work": 0,  # no sub-agents here: tests/test_subagents.py has the tree
    "tokens_per_user_day": None,  # one row per (user, UTC day): counted from the store
    "tool_usage": 6,
    "turn_events": None,  # T5's committed events: counted from the store
    "turn_latency_by_agent": 3,
    "uncertain_tool_calls": 1,
}


class TestQueries:
    def test_at_least_ten_documented_queries_ship(self) -> None:
        """The catalogue has at least 10 queries, each with a question header."""
        names = list_queries()
        assert len(names) >= 10
        assert set(names) == set(EXPECTED_ROWS)
        for name in names:
            assert load_query(name).question

    @pytest.mark.parametrize("name", sorted(EXPECTED_ROWS))
    def test_every_query_returns_the_expected_rows(
        self, name: str, known_session: Known, known_parquet: Path, known_duckdb: Path
    ) -> None:
        """Each query returns the same, expected number of rows from Parquet and DuckDB."""
        with_turn = name in {"turn_events", "subagent_work"}
        params: dict[str, str] = {"turn_id": known_session.turns["T5"]} if with_turn else {}
        if name == "cases_got_worse":
            params = {"baseline": "v1", "candidate": "v2"}
        expected = EXPECTED_ROWS[name]
        if name == "cost_per_agent":
            expected = len(known_session.head)
        elif name == "turn_events":
            expected = len(_events_of_turn(known_session, known_session.turns["T5"]))
        elif name == "tokens_per_user_day":
            expected = len(known_session.token_days)
        elif name == "context_growth":
            store = known_session.store()
            try:
                expected = sum(
                    e.type == "context/build" for key in known_session.head for e in store.scan(key)
                )
            finally:
                store.close()
        for source in (str(known_parquet), f"duckdb:{known_duckdb}"):
            assert len(analysis.query(name, source, **params)) == expected, source

    def test_turn_events_lists_the_turn_in_seq_order(
        self, known_parquet: Path, known_session: Known
    ) -> None:
        """turn_events gives exactly the turn's committed events, both runs, in seq order."""
        turn = known_session.turns["T5"]
        df = analysis.query("turn_events", str(known_parquet), turn_id=turn)
        events = _events_of_turn(known_session, turn)
        assert list(df["seq"]) == [e.seq for e in events]
        assert list(df["type"]) == [e.type for e in events]
        assert set(df["run_id"].dropna()) == set(known_session.runs["T5"])

    def test_approvals_show_decision_who_and_wait(
        self, known_parquet: Path, known_session: Known
    ) -> None:
        """approvals lists the approved and rejected requests with answerer and wait."""
        df = analysis.query("approvals", str(known_parquet))
        got = [
            (r["decision"], r["tool_name"], r["answered_by"], r["wait_ms"])
            for r in df.to_dict("records")
        ]
        waits = known_session.wait_ms
        assert got == [
            ("approved", "create_order", "alice", waits["T5"]),
            ("rejected", "create_order", "alice", waits["T6"]),
        ]
        assert list(df["reason"].isna()) == [True, False]
        assert df["reason"].iloc[1] == "over budget"

    def test_interrupted_runs_measure_time_to_resume(
        self, known_parquet: Path, known_session: Known
    ) -> None:
        """interrupted_runs gives T7's time to resume by its next run, and none yet for T8."""
        df = analysis.query("interrupted_runs", str(known_parquet))
        rows = _by(df, "turn_id")
        t7, t8 = rows[known_session.turns["T7"]], rows[known_session.turns["T8"]]
        runs = known_session.runs
        assert (t7["run_id"], t7["resumed_by_run"]) == tuple(runs["T7"])
        assert (t7["resume_reason"], t7["time_to_resume_ms"]) == ("resume", known_session.resume_ms)
        assert bool(t7["stop_requested"]) is True
        assert t8["run_id"] == runs["T8"][0]
        assert str(t8["resumed_at"]) == "NaT"

    def test_interrupted_runs_say_why_they_ended(
        self, known_source: Any, known_session: Known
    ) -> None:
        """An interrupt command's run ends with end_reason 'interrupt requested', not NULL."""
        df = analysis.query("interrupted_runs", known_source)
        rows = _by(df, "turn_id")
        for turn in ("T7", "T8"):
            assert rows[known_session.turns[turn]]["end_reason"] == "interrupt requested"

    def test_every_ended_run_has_an_end_reason(self, known_source: Any) -> None:
        """runs.end_reason is the recorded reason or the run's stop code for every ended run."""
        runs = analysis.runs(known_source)
        ended = runs[runs["ended_at"].notna()]
        assert not ended["end_reason"].isna().any(), ended[["status", "end_reason"]]
        completed = ended[ended["status"] == "completed"]
        assert set(completed["end_reason"]) == {"final_answer"}

    def test_parked_sessions_lists_alice_and_bob(
        self, known_parquet: Path, known_session: Known
    ) -> None:
        """parked_sessions shows alice's session interrupted and bob's failed, nothing owed."""
        df = analysis.query("parked_sessions", str(known_parquet))
        got = [
            (
                r["user_id"],
                r["turn_id"],
                r["status"],
                r["pending_requests"],
                r["unknown_tool_calls"],
            )
            for r in df.to_dict("records")
        ]
        t = known_session.turns
        assert got == [
            ("alice", t["T8"], "interrupted", 0, 0),
            ("bob", t["B2"], "failed", 0, 0),
        ]

    def test_uncertain_tool_calls_show_the_reconciled_charge(
        self, known_parquet: Path, known_session: Known
    ) -> None:
        """uncertain_tool_calls lists the interrupted charge, reconciled as a success."""
        df = analysis.query("uncertain_tool_calls", str(known_parquet))
        (row,) = df.to_dict("records")
        assert (row["call_id"], row["tool_name"]) == (known_session.calls["T8"], "charge_card")
        assert (row["status"], row["outcome"], bool(row["reconciled"])) == (
            "reconciled",
            "success",
            True,
        )
        assert row["attempts"] == 1

    def test_tokens_per_user_sum_model_usage(self, known_duckdb: Path) -> None:
        """tokens_per_user_day totals every model call's usage per user."""
        df = analysis.query("tokens_per_user_day", f"duckdb:{known_duckdb}")
        totals = df.groupby("user_id")["input_tokens"].sum().to_dict()
        alice = sum(u[0] for name, v in TOKENS.items() if name.startswith("T") for u in v)
        assert totals == {"alice": alice, "bob": 7}

    def test_parameters_are_bound(self, known_parquet: Path) -> None:
        """A parameter narrows the result (user_id=bob) and a value with quotes is harmless."""
        assert len(analysis.query("session_activity", str(known_parquet), user_id="bob")) == 1
        assert len(analysis.query("session_activity", str(known_parquet), user_id="x' OR 1=1")) == 0

    def test_queries_run_unchanged_as_files_in_duckdb(self, known_duckdb: Path) -> None:
        """Each query file's text runs as is in DuckDB on the export after SET VARIABLE."""
        from agentnb.export.duckdb import open_duckdb

        con = open_duckdb(str(known_duckdb), read_only=True)
        try:
            con.execute("SET VARIABLE top = 2")
            for name in list_queries():
                con.execute(load_query(name).sql).fetchall()
            assert len(con.execute(load_query("slowest_tools").sql).fetchall()) == 2
        finally:
            con.close()

    def test_parquet_sql_opens_an_export_for_the_cli(self, known_parquet: Path) -> None:
        """exporters/parquet.sql + schema.sql make the views over a Parquet folder."""
        from agentnb.export.columns import connect
        from agentnb.export.sql import exporters_dir, schema_sql

        con = connect()
        try:
            con.execute("SET VARIABLE parquet_root = ?", [str(known_parquet)])
            con.execute((exporters_dir() / "parquet.sql").read_text())
            con.execute(schema_sql())
            rows = con.execute(load_query("failed_turns").sql).fetchall()
        finally:
            con.close()
        assert len(rows) == 1


class TestBadInput:
    def test_unknown_query_name_lists_the_known_ones(self, known_parquet: Path) -> None:
        """An unknown query name raises InvalidInput naming the known queries."""
        with pytest.raises(nb.InvalidInput, match="known queries: approvals"):
            analysis.query("nope", str(known_parquet))

    def test_missing_required_parameter(self, known_parquet: Path) -> None:
        """A missing required parameter raises InvalidInput naming it."""
        with pytest.raises(nb.InvalidInput, match="turn_id"):
            analysis.query("turn_events", str(known_parquet))

    def test_unknown_parameter(self, known_parquet: Path) -> None:
        """A parameter the query does not declare raises InvalidInput."""
        with pytest.raises(nb.InvalidInput, match="no parameter"):
            analysis.query("approvals", str(known_parquet), colour="red")

    def test_source_that_does_not_exist(self, tmp_path: Path) -> None:
        """A path with nothing there raises InvalidInput."""
        with pytest.raises(nb.InvalidInput, match="no export or store"):
            analysis.turns(str(tmp_path / "missing"))

    def test_parquet_source_that_is_a_file(self, tmp_path: Path) -> None:
        """parquet:FILE raises InvalidInput saying it is not a folder."""
        path = tmp_path / "x.txt"
        path.write_text("hi")
        with pytest.raises(nb.InvalidInput, match="not a folder"):
            analysis.turns(f"parquet:{path}")


class TestReadsCreateNothing:
    def test_missing_sqlite_store_is_refused_and_nothing_created(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """turns("sqlite:///newdir/x.sqlite") raises InvalidInput; no folder or store
        appears."""
        monkeypatch.chdir(tmp_path)
        with pytest.raises(nb.InvalidInput, match="no agentnb store"):
            analysis.turns("sqlite:///newdir/x.sqlite")
        with pytest.raises(nb.InvalidInput, match="no agentnb store"):
            analysis.turns(f"sqlite:///{tmp_path / 'x.sqlite'}")
        assert list(tmp_path.iterdir()) == []

    def test_duckdb_prefix_on_an_sqlite_store_is_refused(self, known_session: Known) -> None:
        """duckdb: naming an SQLite store raises InvalidInput before DuckDB opens it (which
        would try to download an extension); the store is left as it was."""
        before = known_session.path.read_bytes()
        with pytest.raises(nb.InvalidInput, match="SQLite database"):
            analysis.turns(f"duckdb:{known_session.path}")
        assert known_session.path.read_bytes() == before

    def test_file_that_is_no_export_is_refused(self, tmp_path: Path) -> None:
        """A file that is neither an SQLite store nor a DuckDB export raises Corrupt."""
        path = tmp_path / "notes.txt"
        path.write_text("hello")
        with pytest.raises(nb.Corrupt, match="not a DuckDB database"):
            analysis.turns(str(path))

    def test_folder_that_is_no_export_is_refused_untouched(self, tmp_path: Path) -> None:
        """A folder of other files raises InvalidInput and gets no marker or manifest."""
        (tmp_path / "data.csv").write_text("a,b")
        with pytest.raises(nb.InvalidInput, match="no agentnb manifest"):
            analysis.turns(str(tmp_path))
        assert [p.name for p in tmp_path.iterdir()] == ["data.csv"]

    def test_missing_parquet_uri_is_refused(self) -> None:
        """parquet: naming a pyarrow URI where nothing exists raises InvalidInput."""
        with pytest.raises(nb.InvalidInput, match="no Parquet export"):
            analysis.turns("parquet:mock:///nothing/here")


class TestTimeline:
    def test_timeline_draws_a_row_per_turn(self, known_parquet: Path, tmp_path: Path) -> None:
        """timeline() returns a figure with one y tick per turn and saves to PNG."""
        fig = analysis.timeline(str(known_parquet), session_id=ALICE.session_id)
        ax = fig.axes[0]
        assert len(ax.get_yticks()) == 7
        fig.savefig(tmp_path / "timeline.png")
        assert (tmp_path / "timeline.png").stat().st_size > 1000

    def test_row_labels_wrap_to_two_lines_instead_of_being_cut(self, known_parquet: Path) -> None:
        """A turn's input longer than max_label shows whole on two lines, no ellipsis."""
        fig = analysis.timeline(str(known_parquet), session_id=ALICE.session_id, max_label=12)
        labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
        assert "write the\ncost report" in labels
        assert not any("\u2026" in label for label in labels)
        assert all(len(line) <= 12 for label in labels for line in label.splitlines())

    def test_time_is_measured_from_the_session_or_the_turn_start(self, known_parquet: Path) -> None:
        """Each session starts at 0 s; with relative_to="turn" every turn does."""
        data = analysis.timeline_data(str(known_parquet))
        assert data.groupby("session")["start_s"].min().tolist() == [0.0, 0.0]
        per_turn = analysis.timeline_data(str(known_parquet), relative_to="turn")
        assert (per_turn[per_turn["kind"] == "turn"]["start_s"] == 0).all()

    def test_every_tool_call_is_labelled_and_overlapping_calls_are_apart(
        self, known_parquet: Path
    ) -> None:
        """Each dispatched call is a segment named after its tool; calls of one turn that
        overlap in time never share a lane."""
        data = analysis.timeline_data(str(known_parquet))
        tools = data[data["kind"] == "tool"]
        calls = analysis.tool_calls(str(known_parquet))
        dispatched = calls[calls["dispatched_at"].notna()]
        assert sorted(tools["call_id"]) == sorted(dispatched["call_id"])
        assert dict(zip(tools["call_id"], tools["label"], strict=True)) == dict(
            zip(dispatched["call_id"], dispatched["tool_name"], strict=True)
        )
        for _, turn in tools.groupby("turn_id"):
            rows = list(turn.itertuples(index=False))
            for a in rows:
                for b in rows:
                    if a.call_id != b.call_id and a.lane == b.lane:
                        assert a.end_s <= b.start_s or b.end_s <= a.start_s

    def test_calls_running_at_once_get_their_own_lanes(self) -> None:
        """Two calls that overlap in time are drawn on two lanes of their turn's row."""
        import pandas as pd

        frame = pd.DataFrame(
            {
                "turn_id": ["t", "t", "t"],
                "kind": ["tool"] * 3,
                "call_id": ["a", "b", "c"],
                "label": ["x", "y", "z"],
                "start_s": [0.0, 0.5, 5.0],
                "shown_end_s": [1.0, 1.5, 6.0],
                "lane": [0, 0, 0],
            }
        )
        analysis._assign_lanes(frame, span=6.0)
        assert frame["lane"].tolist() == [0, 1, 0]

    def test_short_waits_are_drawn_with_a_minimum_width(self, known_parquet: Path) -> None:
        """A wait for a person shorter than the minimum is drawn at the minimum width."""
        data = analysis.timeline_data(str(known_parquet))
        span = data["end_s"].max() - data["start_s"].min()
        waits = data[data["kind"] == "wait"]
        assert len(waits) == 2
        assert ((waits["shown_end_s"] - waits["start_s"]) >= span * 0.006 - 1e-9).all()
        assert (waits["shown_end_s"] >= waits["end_s"]).all()

    def test_sessions_are_grouped(self, known_parquet: Path, tmp_path: Path) -> None:
        """Rows of one session are contiguous, each group labelled user/session."""
        data = analysis.timeline_data(str(known_parquet))
        turns = data[data["kind"] == "turn"].sort_values("row")
        order = list(dict.fromkeys(turns["session"]))
        assert order == ["alice/audit-001", "bob/audit-002"]
        assert turns["session"].tolist() == ["alice/audit-001"] * 7 + ["bob/audit-002"] * 2
        fig = analysis.timeline(str(known_parquet))
        texts = [t.get_text().strip() for t in fig.axes[0].texts]
        assert {"alice/audit-001", "bob/audit-002"} <= set(texts)

    def test_the_legend_lists_only_what_is_drawn(self, known_parquet: Path) -> None:
        """Bob's session has no suspended or interrupted run: neither is in its legend."""
        fig = analysis.timeline(str(known_parquet), session_id=BOB.session_id)
        legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
        assert "failed" in legend
        assert "completed" in legend
        assert "suspended" not in legend
        assert "interrupted" not in legend
        assert "waiting for a person" not in legend

    def test_a_rejected_order_is_drawn_as_rejected_not_completed(
        self, known_parquet: Path, known_session: Known
    ) -> None:
        """T6's order was rejected: its turn and the run that answered are "rejected"."""
        data = analysis.timeline_data(str(known_parquet), session_id=ALICE.session_id)
        t6 = data[data["turn_id"] == known_session.turns["T6"]]
        assert t6.loc[t6["kind"] == "turn", "status"].tolist() == ["rejected"]
        assert t6.loc[t6["kind"] == "run", "status"].tolist() == ["suspended", "rejected"]
        assert "over budget" in t6.loc[t6["kind"] == "turn", "detail"].item()
        t5 = data[data["turn_id"] == known_session.turns["T5"]]
        assert t5.loc[t5["kind"] == "turn", "status"].tolist() == ["completed"]

    def test_rejected_has_its_own_colour_and_legend_entry_in_both_charts(
        self, known_parquet: Path
    ) -> None:
        """The static and the interactive timeline colour rejected apart from completed."""
        colors = analysis.STATUS_COLORS
        assert colors["rejected"] not in {colors["completed"], colors["failed"]}
        fig = analysis.timeline(str(known_parquet), session_id=ALICE.session_id)
        legend = fig.axes[0].get_legend()
        entries = dict(
            zip([t.get_text() for t in legend.get_texts()], legend.legend_handles, strict=True)
        )
        assert {"rejected", "completed"} <= set(entries)
        assert entries["rejected"].get_facecolor() != entries["completed"].get_facecolor()
        spec = analysis.timeline_chart(str(known_parquet), session_id=ALICE.session_id).to_dict()
        scale = spec["encoding"]["color"]["scale"]
        shown = dict(zip(scale["domain"], scale["range"], strict=True))
        assert shown["rejected"] == colors["rejected"]
        assert shown["completed"] == colors["completed"]

    def test_height_scales_and_pages(self, known_parquet: Path) -> None:
        """More turns make a taller figure; past page_size turns the chart pages."""
        small = analysis.timeline(str(known_parquet), session_id=BOB.session_id)
        large = analysis.timeline(str(known_parquet))
        assert large.get_figheight() > small.get_figheight()
        paged = analysis.timeline(str(known_parquet), page=3, page_size=4)
        assert len(paged.axes[0].get_yticks()) == 1
        assert "page 3 of 3" in paged.axes[0].get_title()

    @pytest.mark.parametrize(
        ("kwargs", "match"),
        [
            ({"relative_to": "run"}, "relative_to"),
            ({"page": 0}, "page"),
            ({"page": 9, "page_size": 4}, "past the last page"),
            ({"page_size": 0}, "page_size"),
        ],
    )
    def test_bad_arguments_are_refused(
        self, known_parquet: Path, kwargs: dict[str, Any], match: str
    ) -> None:
        """Unknown axis origins and impossible pages raise InvalidInput."""
        with pytest.raises(nb.InvalidInput, match=match):
            analysis.timeline(str(known_parquet), **kwargs)

    def test_the_interactive_chart_has_tooltips_and_a_panel_per_session(
        self, known_parquet: Path
    ) -> None:
        """timeline_chart is an Altair chart with tooltips; several sessions are facets."""
        one = analysis.timeline_chart(str(known_parquet), session_id=ALICE.session_id)
        spec = one.to_dict()
        fields = {t["field"] for t in spec["encoding"]["tooltip"]}
        assert {"turn", "label", "status", "detail", "duration_s"} <= fields
        assert spec["encoding"]["yOffset"]["field"] == "band"
        both = analysis.timeline_chart(str(known_parquet)).to_dict()
        assert both["facet"]["row"]["field"] == "session"

    def test_the_interactive_chart_displays_as_vega_lite_5_without_scripts(
        self, known_parquet: Path
    ) -> None:
        """Its display is a Vega-Lite 5 spec (JupyterLab 4's own renderer), no CDN script."""
        chart = analysis.timeline_chart(str(known_parquet))
        bundle = chart._repr_mimebundle_()
        assert set(bundle) == {"application/vnd.vegalite.v5+json", "text/plain"}
        spec = bundle["application/vnd.vegalite.v5+json"]
        assert spec["$schema"] == "https://vega.github.io/schema/vega-lite/v5.json"
        assert "cdn" not in json.dumps(bundle).lower()
        assert chart.chart.to_dict()["facet"] == spec["facet"]


# The dtypes of every frame, whatever the source (pinned: analysts' code depends on them).
DTYPES = {
    "events": {
        **dict.fromkeys(
            [
                "event_id",
                "namespace",
                "user_id",
                "agent_id",
                "session_id",
                "type",
                "turn_id",
                "run_id",
                "command_id",
                "reason",
                "status",
                "error",
                "step_id",
                "model_call_id",
                "model",
                "finish_reason",
                "call_id",
                "tool_name",
                "arguments",
                "output",
                "decision",
                "request_id",
                "kind",
                "prompt",
                "answer",
                "input_id",
                "text",
                "message_id",
                "role",
                "payload",
            ],
            "string",
        ),
        **dict.fromkeys(
            ["seq", "iteration", "attempt", "input_tokens", "output_tokens", "inbox_seq"], "Int64"
        ),
        **dict.fromkeys(["occurred_at", "event_date"], "datetime64[us, UTC]"),
        **dict.fromkeys(["required", "synthetic", "reconciled", "idempotent"], "boolean"),
        **dict.fromkeys(["schema_version"], "Int32"),
        **dict.fromkeys(["latency_ms", "delay_s", "duration_ms"], "Float64"),
        **dict.fromkeys(["input_ids"], "list<l: string>[pyarrow]"),
    },
    "turns": {
        **dict.fromkeys(
            [
                "namespace",
                "user_id",
                "agent_id",
                "session_id",
                "turn_id",
                "input",
                "status",
                "error",
                "output",
            ],
            "string",
        ),
        **dict.fromkeys(["started_at", "ended_at", "last_event_at"], "datetime64[us, UTC]"),
        **dict.fromkeys(
            [
                "duration_ms",
                "runs",
                "steps",
                "model_calls",
                "tool_calls",
                "tool_errors",
                "steers",
                "interactions",
                "interrupts",
                "input_tokens",
                "output_tokens",
            ],
            "Int64",
        ),
    },
    "runs": {
        **dict.fromkeys(
            [
                "namespace",
                "user_id",
                "agent_id",
                "session_id",
                "turn_id",
                "run_id",
                "reason",
                "command_id",
                "status",
                "end_reason",
                "error",
            ],
            "string",
        ),
        **dict.fromkeys(
            [
                "run_index",
                "duration_ms",
                "steps",
                "model_calls",
                "tool_calls",
                "input_tokens",
                "output_tokens",
            ],
            "Int64",
        ),
        **dict.fromkeys(["started_at", "ended_at"], "datetime64[us, UTC]"),
        **dict.fromkeys(["stop_requested"], "boolean"),
    },
    "steps": {
        **dict.fromkeys(
            [
                "namespace",
                "user_id",
                "agent_id",
                "session_id",
                "turn_id",
                "run_id",
                "step_id",
                "status",
            ],
            "string",
        ),
        **dict.fromkeys(
            ["iteration", "duration_ms", "model_calls", "tool_calls", "inputs"], "Int64"
        ),
        **dict.fromkeys(["started_at", "ended_at"], "datetime64[us, UTC]"),
    },
    "model_calls": {
        **dict.fromkeys(
            [
                "namespace",
                "user_id",
                "agent_id",
                "session_id",
                "turn_id",
                "run_id",
                "step_id",
                "model_call_id",
                "request_model",
                "status",
                "finish_reason",
                "error",
                "purpose",
            ],
            "string",
        ),
        **dict.fromkeys(["started_at", "ended_at"], "datetime64[us, UTC]"),
        **dict.fromkeys(
            [
                "attempts",
                "retries",
                "input_tokens",
                "output_tokens",
                "cached_tokens",
                "cache_write_tokens",
                "reasoning_tokens",
                "reasoning_chars",
            ],
            "Int64",
        ),
        **dict.fromkeys(["latency_ms"], "Float64"),
        "usage_estimated": "boolean",
    },
    "tool_calls": {
        **dict.fromkeys(
            [
                "namespace",
                "user_id",
                "agent_id",
                "session_id",
                "turn_id",
                "run_id",
                "call_id",
                "tool_name",
                "arguments",
                "decision",
                "decision_reason",
                "status",
                "outcome",
                "output",
                "request_id",
            ],
            "string",
        ),
        **dict.fromkeys(["requested_at", "dispatched_at", "ended_at"], "datetime64[us, UTC]"),
        **dict.fromkeys(["attempts", "approval_wait_ms"], "Int64"),
        **dict.fromkeys(
            ["idempotent", "synthetic", "reconciled", "uncertain", "approved"], "boolean"
        ),
        **dict.fromkeys(["duration_ms"], "Float64"),
    },
    "interactions": {
        **dict.fromkeys(
            [
                "namespace",
                "user_id",
                "agent_id",
                "session_id",
                "turn_id",
                "run_id",
                "request_id",
                "kind",
                "call_id",
                "tool_name",
                "arguments",
                "prompt",
                "status",
                "answer",
                "approved_arguments",
                "reason",
                "answer_output",
                "answered_by",
                "command_id",
            ],
            "string",
        ),
        **dict.fromkeys(["requested_at", "resolved_at"], "datetime64[us, UTC]"),
        **dict.fromkeys(["approved", "edited"], "boolean"),
        **dict.fromkeys(["wait_ms"], "Int64"),
    },
    "compactions": {
        **dict.fromkeys(
            [
                "namespace",
                "user_id",
                "agent_id",
                "session_id",
                "turn_id",
                "run_id",
                "compaction_id",
                "status",
                "summary",
                "error",
            ],
            "string",
        ),
        **dict.fromkeys(
            ["seq", "messages_before", "messages_after", "tokens_before", "tokens_after"],
            "Int64",
        ),
        "tokens_saved": "Int64",
        "ended_at": "datetime64[us, UTC]",
    },
    "inputs": {
        **dict.fromkeys(
            [
                "namespace",
                "user_id",
                "agent_id",
                "session_id",
                "turn_id",
                "run_id",
                "input_id",
                "kind",
                "text",
                "command_id",
                "applied_run_id",
                "discard_reason",
                "status",
            ],
            "string",
        ),
        **dict.fromkeys(["received_at", "applied_at", "discarded_at"], "datetime64[us, UTC]"),
    },
    "sessions": {
        **dict.fromkeys(
            [
                "namespace",
                "user_id",
                "agent_id",
                "session_id",
                "session_key",
                "parent_key",
                "root_key",
                "parent_turn_id",
                "parent_call_id",
            ],
            "string",
        ),
        "depth": "Int64",
        **dict.fromkeys(["first_event_at", "last_event_at"], "datetime64[us, UTC]"),
        **dict.fromkeys(["events", "turns", "input_tokens", "output_tokens"], "Int64"),
    },
    "subagent_calls": {
        **dict.fromkeys(
            [
                "namespace",
                "user_id",
                "agent_id",
                "session_id",
                "session_key",
                "turn_id",
                "run_id",
                "call_id",
                "tool_name",
                "child_agent_id",
                "child_session_id",
                "child_key",
                "task",
                "on_parent_stop",
            ],
            "string",
        ),
        **dict.fromkeys(["spawned_at", "completed_at"], "datetime64[us, UTC]"),
        **dict.fromkeys(["status", "output", "error"], "string"),
        **dict.fromkeys(["duration_ms", "input_tokens", "output_tokens", "model_calls"], "Int64"),
    },
    "plan_changes": {
        **dict.fromkeys(
            ["namespace", "user_id", "agent_id", "session_id", "turn_id", "run_id"], "string"
        ),
        "seq": "Int64",
        "occurred_at": "datetime64[us, UTC]",
        **dict.fromkeys(["call_id", "step_id", "content", "status", "previous"], "string"),
    },
    "verifications": {
        **dict.fromkeys(
            ["namespace", "user_id", "agent_id", "session_id", "turn_id", "run_id"], "string"
        ),
        "seq": "Int64",
        "occurred_at": "datetime64[us, UTC]",
        "passed": "boolean",
        "reason": "string",
        "attempt": "Int64",
        "retry": "boolean",
        "message_id": "string",
    },
}


class TestDtypes:
    @pytest.mark.parametrize("view", analysis.VIEWS)
    def test_every_frame_has_the_pinned_dtypes(self, known_source: Any, view: str) -> None:
        """Nullable pandas dtypes and tz-aware UTC times, the same from every kind of source."""
        df = getattr(analysis, view)(known_source)
        assert dict(df.dtypes.astype(str)) == DTYPES[view]

    def test_an_empty_frame_keeps_the_dtypes(self, known_parquet: Path) -> None:
        """A filter that matches nothing still gives the pinned dtypes (never object)."""
        df = analysis.tool_calls(str(known_parquet), session_id="nobody")
        assert df.empty
        assert dict(df.dtypes.astype(str)) == DTYPES["tool_calls"]

    def test_event_date_is_midnight_utc_of_the_event(self, known_parquet: Path) -> None:
        """event_date is a tz-aware UTC timestamp: the UTC day of occurred_at."""
        df = analysis.events(str(known_parquet))
        assert (df["event_date"] == df["occurred_at"].dt.floor("D")).all()

    @pytest.mark.parametrize("name", list_queries())
    def test_query_results_use_nullable_dtypes(
        self, known_session: Known, known_duckdb: Path, name: str
    ) -> None:
        """Audit query columns are never numpy object, int64 or bool: sums are Int64 too."""
        with_turn = name in {"turn_events", "subagent_work"}
        params: dict[str, str] = {"turn_id": known_session.turns["T5"]} if with_turn else {}
        if name == "cases_got_worse":
            params = {"baseline": "v1", "candidate": "v2"}
        df = analysis.query(name, f"duckdb:{known_duckdb}", **params)
        # no sub-agents nor experiments in this store
        assert len(df) or name in {"subagent_work", "cases_got_worse", "score_by_fingerprint"}
        loose = {c: str(t) for c, t in df.dtypes.items() if str(t) in {"object", "int64", "bool"}}
        assert not loose, loose
