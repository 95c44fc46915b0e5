"""A DuckDB export opens in the DuckDB versions users install, not only the one that wrote it.

DuckDB 2.0 writes a storage format no 1.x reads; ``DuckDBSink`` creates its files with
``storage_compatibility_version`` set to ``STORAGE_VERSION``. The oldest DuckDB we claim
(``OLDEST``, the Python module) is installed into a fresh virtual environment by pip (from
its cache after the first run) and reads the ``turns`` view of a file agentnb wrote; the
``duckdb`` command-line tool of the export extra (``duckdb-cli``, a 1.x) reads it too.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from agentnb.errors import InvalidInput
from agentnb.export import DuckDBSink, Exporter
from agentnb.export.duckdb import STORAGE_VERSION
from tests.export.conftest import Known

OLDEST = "1.1.0"
"""The oldest DuckDB documented in exporters/README.md as able to open an export file."""


def _storage_version(path: Path) -> str:
    con = duckdb.connect()
    try:
        con.execute(f"ATTACH '{path}' AS export (READ_ONLY)")
        row = con.execute(
            "SELECT tags['storage_version'] FROM duckdb_databases() WHERE database_name = 'export'"
        ).fetchone()
    finally:
        con.close()
    assert row is not None
    return str(row[0])


def _duckdb_cli() -> str | None:
    """The ``duckdb`` executable of this environment (the export extra's duckdb-cli)."""
    beside = Path(sys.executable).parent / "duckdb"
    return str(beside) if beside.is_file() else shutil.which("duckdb")


class TestStorageVersion:
    def test_a_new_export_file_is_written_in_the_compatible_format(
        self, known_duckdb: Path
    ) -> None:
        """The file is in a 1.x storage format (DuckDB tags it with the oldest release that
        reads it), not the writer's newest."""
        assert f"v{OLDEST}" == STORAGE_VERSION
        assert _storage_version(known_duckdb).startswith("v1.")

    def test_latest_is_available_on_request(
        self, known_session: Known, known_duckdb: Path, tmp_path: Path
    ) -> None:
        """storage_version='latest' writes the running DuckDB's own format."""
        path = tmp_path / "latest.duckdb"
        store = known_session.store()
        try:
            Exporter(store, DuckDBSink(path, storage_version="latest"), progress=False).drain()
        finally:
            store.close()
        assert _storage_version(path) != _storage_version(known_duckdb)

    @pytest.mark.parametrize("bad", ["1.1.0", "v1", "newest", "", 110])
    def test_a_malformed_storage_version_is_refused(self, tmp_path: Path, bad: object) -> None:
        """A storage_version that is not vX.Y.Z or 'latest' raises InvalidInput at once."""
        with pytest.raises(InvalidInput, match="storage_version"):
            DuckDBSink(tmp_path / "x.duckdb", storage_version=bad)  # type: ignore[arg-type]
        assert not (tmp_path / "x.duckdb").exists()

    def test_a_version_duckdb_does_not_know_is_refused(
        self, known_session: Known, tmp_path: Path
    ) -> None:
        """A well-formed but unknown version raises InvalidInput and leaves no file."""
        path = tmp_path / "future.duckdb"
        store = known_session.store()
        try:
            sink = DuckDBSink(path, storage_version="v99.0.0")
            with pytest.raises(InvalidInput, match=r"v99\.0\.0"):
                Exporter(store, sink, progress=False).drain()
        finally:
            store.close()
        assert not path.exists()


class TestOlderReaders:
    @pytest.mark.timeout(300)
    def test_the_oldest_supported_duckdb_reads_turns(
        self, known_duckdb: Path, tmp_path: Path
    ) -> None:
        """DuckDB OLDEST, installed into a fresh venv, opens the file and reads every view."""
        venv = tmp_path / "venv"
        env = {k: v for k, v in os.environ.items() if k not in {"VIRTUAL_ENV", "PYTHONPATH"}}
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=env)
        python = venv / "bin" / "python"
        install = subprocess.run(
            [str(python), "-m", "pip", "install", "-q", f"duckdb=={OLDEST}"],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        assert install.returncode == 0, install.stderr
        code = (
            "import duckdb, json, sys\n"
            "con = duckdb.connect(sys.argv[1], read_only=True)\n"
            "views = ['events', 'turns', 'runs', 'steps', 'model_calls', 'tool_calls',\n"
            "         'interactions', 'inputs']\n"
            "counts = {v: con.sql(f'SELECT count(*) FROM {v}').fetchone()[0] for v in views}\n"
            "rows = con.sql('SELECT status, count(*) FROM turns GROUP BY ALL ORDER BY 1')\n"
            "print(json.dumps([duckdb.__version__, counts, rows.fetchall()]))\n"
        )
        done = subprocess.run(
            [str(python), "-c", code, str(known_duckdb)],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        version, counts, statuses = json.loads(done.stdout)
        assert version == OLDEST
        assert counts["turns"] == 9
        assert all(n > 0 for n in counts.values()), counts
        assert dict(statuses) == {"completed": 7, "failed": 1, "interrupted": 1}

    def test_the_duckdb_command_line_tool_reads_turns(self, known_duckdb: Path) -> None:
        """The export extra's duckdb CLI (a 1.x) opens the file and runs SQL on its views."""
        cli = _duckdb_cli()
        if cli is None:
            pytest.skip('no duckdb CLI here: pip install -e ".[export]" brings duckdb-cli')
        done = subprocess.run(
            [cli, "-readonly", "-json", str(known_duckdb), "-c", "SELECT count(*) AS n FROM turns"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == [{"n": 9}]
