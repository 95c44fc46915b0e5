"""The export and query commands."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentnb.cli import main
from tests.export.conftest import ALICE, Known


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
