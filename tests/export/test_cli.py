"""The command line: export, query, sessions, show, tail; JSON output, exit codes, nulls."""

from __future__ import annotations

import importlib.metadata
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentnb.cli import (
    EXIT_DATA,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_USAGE,
    NULL,
    main,
)
from agentnb.errors import DISTRIBUTION
from tests.export.conftest import ALICE, BOB, Known


class TestExportCommand:
    def test_export_to_parquet_then_again_exports_nothing_new(
        self, known_session: Known, tmp_path: Path, capsys: Any
    ) -> None:
        """export --all delivers every event; running it again delivers none."""
        dest = f"parquet:{tmp_path / 'pq'}"
        assert main(["export", "--to", dest, "--all", "--store", known_session.url]) == 0
        total = sum(known_session.head.values())
        assert f"exported {total} events" in capsys.readouterr().out
        assert main(["export", "--to", dest, "--store", known_session.url]) == 0
        assert "exported 0 events" in capsys.readouterr().out

    def test_export_one_session_to_duckdb(
        self, known_session: Known, tmp_path: Path, capsys: Any
    ) -> None:
        """export --session ID exports only that session."""
        dest = f"duckdb:{tmp_path / 'x.duckdb'}"
        argv = ["export", "--to", dest, "--session", ALICE.session_id]
        assert main([*argv, "--store", known_session.url]) == 0
        assert f"exported {known_session.head[ALICE]} events" in capsys.readouterr().out

    def test_unknown_destination_is_a_clear_error(self, known_session: Known, capsys: Any) -> None:
        """A destination that is not parquet: or duckdb: exits 2 with a message."""
        assert main(["export", "--to", "csv:x", "--store", known_session.url]) == 2
        assert "parquet:DIR or duckdb:FILE" in capsys.readouterr().err

    def test_help_has_an_example(self, capsys: Any) -> None:
        """export --help shows an example command line."""
        with pytest.raises(SystemExit):
            main(["export", "--help"])
        assert "Example: agentnb export --to parquet:" in capsys.readouterr().out


class TestQueryCommand:
    def test_query_prints_a_table(self, known_parquet: Path, capsys: Any) -> None:
        """query NAME --source DIR prints the rows as a table."""
        assert main(["query", "approvals", "--source", str(known_parquet)]) == 0
        out = capsys.readouterr().out
        assert "approved" in out
        assert "rejected" in out
        assert "over budget" in out

    def test_query_binds_params(self, known_session: Known, capsys: Any) -> None:
        """--param k=v is passed to the query (here on the live store)."""
        argv = ["query", "session_activity", "--source", known_session.url]
        assert main([*argv, "--param", "user_id=bob"]) == 0
        out = capsys.readouterr().out
        assert "bob" in out
        assert "alice" not in out

    def test_unknown_query_and_missing_param_are_clear_errors(
        self, known_parquet: Path, capsys: Any
    ) -> None:
        """Unknown names and missing required parameters exit 2 naming the problem."""
        assert main(["query", "nope", "--source", str(known_parquet)]) == 2
        assert "unknown query 'nope'" in capsys.readouterr().err
        assert main(["query", "turn_events", "--source", str(known_parquet)]) == 2
        assert "turn_id" in capsys.readouterr().err

    def test_list_names_every_query(self, capsys: Any) -> None:
        """query --list prints each query with its question."""
        assert main(["query", "--list"]) == 0
        assert "parked_sessions" in capsys.readouterr().out


def _run(argv: list[str], capsys: Any) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of one command, argparse's own exits included."""
    try:
        code = main(argv)
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


class TestVersion:
    def test_version_is_the_installed_packages(self, capsys: Any) -> None:
        """agentnb --version prints the version pip installed and exits 0."""
        code, out, _ = _run(["--version"], capsys)
        assert code == EXIT_OK
        assert out.strip() == f"agentnb {importlib.metadata.version(DISTRIBUTION)}"

    def test_python_m_agentnb_is_the_cli(self) -> None:
        """python -m agentnb runs the same command line as the agentnb script."""
        done = subprocess.run(
            [sys.executable, "-m", "agentnb", "--version"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == EXIT_OK, done.stderr
        assert done.stdout.startswith("agentnb ")


class TestJsonOutput:
    def test_sessions_json_lists_every_session(self, known_session: Known, capsys: Any) -> None:
        """sessions --json prints an array with each session's key, size and latest status."""
        code, out, _ = _run(["sessions", "--json", "--store", known_session.url], capsys)
        assert code == EXIT_OK
        rows = {r["session_id"]: r for r in json.loads(out)}
        assert rows[ALICE.session_id]["events"] == known_session.head[ALICE]
        assert rows[ALICE.session_id]["user_id"] == "alice"
        assert rows[BOB.session_id]["latest_status"] == "failed"
        assert rows[BOB.session_id]["queued"] == 0

    def test_show_json_has_tasks_pending_and_messages(
        self, known_session: Known, capsys: Any
    ) -> None:
        """show --json prints one object: the key, tasks (with runs), pending and messages."""
        argv = ["show", ALICE.session_id, "--json", "--store", known_session.url]
        code, out, _ = _run(argv, capsys)
        assert code == EXIT_OK
        shown = json.loads(out)
        assert shown["session"]["session_id"] == ALICE.session_id
        assert shown["events"] == known_session.head[ALICE]
        turns = {t["turn_id"]: t for t in shown["tasks"]}
        assert turns[known_session.turns["T7"]]["run_ids"] == known_session.runs["T7"]
        assert turns[known_session.turns["T1"]]["input"] == "compare the plans"
        assert shown["pending"] == []
        assert shown["messages"][0] == {**shown["messages"][0], "role": "user"}

    def test_tail_json_prints_one_event_per_line(self, known_session: Known, capsys: Any) -> None:
        """tail --json -n 5 prints the last five events, one JSON object per line."""
        argv = ["tail", ALICE.session_id, "--json", "-n", "5", "--store", known_session.url]
        code, out, _ = _run(argv, capsys)
        assert code == EXIT_OK
        events = [json.loads(line) for line in out.splitlines()]
        head = known_session.head[ALICE]
        assert [e["seq"] for e in events] == list(range(head - 4, head + 1))
        assert all({"type", "occurred_at", "payload", "turn_id"} <= e.keys() for e in events)

    def test_query_json_prints_rows_with_nulls(self, known_parquet: Path, capsys: Any) -> None:
        """query --json prints the rows as an array of objects; a missing value is null."""
        code, out, _ = _run(
            ["query", "approvals", "--source", str(known_parquet), "--json"], capsys
        )
        assert code == EXIT_OK
        rows = json.loads(out)
        decisions = {r["decision"]: r for r in rows}
        assert decisions["rejected"]["reason"] == "over budget"
        assert decisions["approved"]["reason"] is None
        assert isinstance(decisions["approved"]["requested_at"], str)


class TestExitCodes:
    def test_help_documents_the_exit_codes(self, capsys: Any) -> None:
        """agentnb --help lists each exit code with its meaning."""
        _, out, _ = _run(["--help"], capsys)
        for code, meaning in [(2, "usage error"), (3, "not found"), (4, "data error")]:
            assert re.search(rf"^\s+{code}\s+{meaning}", out, flags=re.M), meaning

    def test_usage_error_exits_2(self, known_session: Known, capsys: Any) -> None:
        """A bad option value exits 2 with argparse's one-line message."""
        code, _, err = _run(["sessions", "--bogus"], capsys)
        assert code == EXIT_USAGE
        assert "unrecognized arguments: --bogus" in err

    def test_unknown_session_exits_3(self, known_session: Known, capsys: Any) -> None:
        """show and tail of a session that does not exist exit 3 naming it."""
        for command in ("show", "tail"):
            code, _, err = _run([command, "nope", "--store", known_session.url], capsys)
            assert code == EXIT_NOT_FOUND
            assert "no session 'nope'" in err

    def test_missing_store_exits_3_and_creates_nothing(self, tmp_path: Path, capsys: Any) -> None:
        """sessions on a store file that does not exist exits 3 and does not create it."""
        url = f"sqlite:///{tmp_path / 'nothere.sqlite'}"
        code, _, err = _run(["sessions", "--store", url], capsys)
        assert code == EXIT_NOT_FOUND
        assert "no store at" in err
        assert list(tmp_path.iterdir()) == []

    def test_missing_query_source_exits_3(self, tmp_path: Path, capsys: Any) -> None:
        """query over an export folder that does not exist exits 3 saying how to make one."""
        code, _, err = _run(["query", "approvals", "--source", str(tmp_path / "none")], capsys)
        assert code == EXIT_NOT_FOUND
        assert "agentnb export --to parquet:" in err

    def test_unreadable_export_exits_4(self, tmp_path: Path, capsys: Any) -> None:
        """query over a file that is not a DuckDB export exits 4, one line, no traceback."""
        bad = tmp_path / "bad.duckdb"
        bad.write_bytes(b"this is not a database" * 100)
        code, out, err = _run(["query", "approvals", "--source", f"duckdb:{bad}"], capsys)
        assert code == EXIT_DATA
        assert err.startswith("error: ")
        assert err.count("\n") == 1
        assert out == ""


class TestQueryParameters:
    def test_bad_timestamp_is_a_one_line_usage_error(
        self, known_parquet: Path, capsys: Any
    ) -> None:
        """--param since=garbage exits 2 with one line naming the parameter and its type."""
        argv = ["query", "approvals", "--source", str(known_parquet), "--param", "since=garbage"]
        code, _, err = _run(argv, capsys)
        assert code == EXIT_USAGE
        assert err.count("\n") == 1
        assert "since='garbage'" in err
        assert "TIMESTAMPTZ" in err
        assert "Traceback" not in err

    def test_bad_integer_is_a_usage_error(self, known_parquet: Path, capsys: Any) -> None:
        """--param top=many on an INTEGER parameter exits 2 naming it."""
        argv = ["query", "slowest_tools", "--source", str(known_parquet), "--param", "top=many"]
        code, _, err = _run(argv, capsys)
        assert code == EXIT_USAGE
        assert "top='many'" in err

    def test_good_timestamp_filters(self, known_parquet: Path, capsys: Any) -> None:
        """--param since=<a date after every event> leaves no rows."""
        argv = ["query", "approvals", "--source", str(known_parquet)]
        code, out, _ = _run([*argv, "--param", "since=2999-01-01", "--json"], capsys)
        assert code == EXIT_OK
        assert json.loads(out) == []
        code, out, _ = _run([*argv, "--param", "since=2000-01-01T00:00+00:00", "--json"], capsys)
        assert len(json.loads(out)) == 2


class TestTextOutput:
    def test_tail_refuses_a_negative_count(self, known_session: Known, capsys: Any) -> None:
        """tail -n -1 is a usage error (exit 2) saying what is expected."""
        argv = ["tail", ALICE.session_id, "-n", "-1", "--store", known_session.url]
        code, _, err = _run(argv, capsys)
        assert code == EXIT_USAGE
        assert "expected 0 or more" in err

    def test_show_says_when_it_cuts_lines(self, known_session: Known, capsys: Any) -> None:
        """show --width 30 ends cut lines with … and says how many it cut and how to see them."""
        argv = ["show", ALICE.session_id, "--width", "30", "--store", known_session.url]
        _, out, _ = _run(argv, capsys)
        header, *lines, note = out.splitlines()
        assert header.startswith(f"session {ALICE}")
        assert all(len(line) <= 30 for line in lines)
        assert any(line.endswith("…") for line in lines)
        assert re.fullmatch(r"\(\d+ lines were cut at 30 characters.*--width 0.*\)", note)

    def test_show_width_0_cuts_nothing(self, known_session: Known, capsys: Any) -> None:
        """show --width 0 prints every line whole and no note."""
        argv = ["show", ALICE.session_id, "--width", "0", "--store", known_session.url]
        _, out, _ = _run(argv, capsys)
        assert "…" not in out
        assert "cut at" not in out

    def test_nulls_print_one_way(
        self, known_session: Known, known_parquet: Path, capsys: Any
    ) -> None:
        """Text output of sessions, show, tail and query never spells a null None/NaN/NaT."""
        url = known_session.url
        outputs = [
            _run(["sessions", "--store", url], capsys)[1],
            _run(["show", ALICE.session_id, "--store", url], capsys)[1],
            _run(["tail", ALICE.session_id, "-n", "200", "--store", url], capsys)[1],
            _run(["query", "approvals", "--source", str(known_parquet)], capsys)[1],
        ]
        for out in outputs:
            assert not re.search(r"\b(None|NaN|NaT|nan|null)\b|<NA>", out), out
        approved = next(line for line in outputs[3].splitlines() if " approved " in line)
        assert f" {NULL} " in approved


class TestParkedQueue:
    def test_show_and_sessions_say_what_the_queue_waits_behind(
        self, tmp_path: Path, capsys: Any
    ) -> None:
        """A task queued behind a failed turn: show and sessions name that turn and the way out."""
        import agentnb as nb

        url = f"sqlite:///{tmp_path / 'db.sqlite'}"
        agent = nb.Agent(
            name="P", agent_id="parked", model=nb.ScriptedModel([nb.ModelError("boom")])
        )
        with nb.Runtime(agent, store=url) as runtime:
            session = runtime.session("p1")
            failed = session.submit("one")
            session.submit("two")
            assert failed.wait(timeout=20).status == "failed"
        code, out, _ = _run(["show", "p1", "--store", url, "--width", "0"], capsys)
        assert code == EXIT_OK
        assert f"1 queued task parked behind turn {failed.turn_id}, which is failed" in out
        assert f"session.resume({failed.turn_id!r})" in out
        code, out, _ = _run(["sessions", "--json", "--store", url], capsys)
        (row,) = json.loads(out)
        assert row["parked_behind"]["turn_id"] == failed.turn_id
        assert row["parked_behind"]["status"] == "failed"
        code, out, _ = _run(["sessions", "--store", url], capsys)
        assert f"parked behind {failed.turn_id}" in out
