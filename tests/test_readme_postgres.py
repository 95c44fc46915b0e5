"""The PostgreSQL recipe of docs/scaling.md, run as written: a server on a port of its own, a
role and a database for the store, and the URL it prints opens that store."""

from __future__ import annotations

import os
import re
import socket
import subprocess
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import agentnb as nb
from tests.pg import find_bindir, require_server

README = Path(__file__).resolve().parents[1] / "docs" / "scaling.md"
STOP_LINE = re.compile(r"^pg_ctl .* stop\b.*$", re.MULTILINE)


def _recipe() -> str:
    """The bash block of docs/scaling.md's "Moving to PostgreSQL" that starts a server."""
    text = README.read_text(encoding="utf-8")
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.DOTALL)
    (recipe,) = [b for b in blocks if "initdb" in b]
    return recipe


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _bash(script: str) -> subprocess.CompletedProcess[str]:
    """Run ``script`` in bash with the server binaries on PATH; as root, as the postgres
    user (what docs/scaling.md says to do)."""
    path = f"{find_bindir()}{os.pathsep}{os.environ.get('PATH', '')}"
    argv = ["bash", "-euo", "pipefail", "-c", script]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        argv = ["runuser", "-u", "postgres", "--", "env", f"PATH={path}", *argv]
    return subprocess.run(
        argv,
        env={**os.environ, "PATH": path},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd="/",
    )


def test_the_readme_recipe_gives_a_working_store_url() -> None:
    """The recipe names the port in the URL and creates the role and database it uses."""
    require_server()
    recipe = _recipe()
    assert "&port=" in recipe
    assert "CREATE ROLE" in recipe
    assert "CREATE DATABASE" in recipe
    stop = STOP_LINE.search(recipe)
    assert stop is not None, "the recipe says how to stop the server"
    # A free port instead of the page's, so the test never meets another server.
    start = recipe[: stop.start()].replace("PORT=5433", f"PORT={_free_port()}")
    started = _bash(start)
    assert started.returncode == 0, started.stderr
    url = started.stdout.strip().splitlines()[-1]
    folder = parse_qs(urlsplit(url).query)["host"][0]
    try:
        assert urlsplit(url).username == "app"
        store = nb.open_store(url)
        try:
            key = nb.SessionKey("default", "alice", "agent", "s1")
            store.create_session(key)
            assert [r.key for r in store.list_sessions()] == [key]
        finally:
            store.close()
    finally:
        stopped = _bash(f'DIR="{folder}"\n{stop.group(0)}')
        assert stopped.returncode == 0, stopped.stderr
        _bash(f'rm -rf "{folder}"')
