"""Two runtimes in two processes on one SQLite file: one executor per session at a time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import agentnb as nb

REPO = Path(__file__).resolve().parents[2]


def test_two_processes_never_execute_one_session_at_the_same_time(tmp_path: Path) -> None:
    """Runs of one session never overlap and each turn runs once, across two processes."""
    db = tmp_path / "shared.sqlite"
    nb.open_store(f"sqlite:///{db}").close()
    children = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.runtime._two_runtimes_child", str(db), name, "4"],
            cwd=REPO,
            stdout=subprocess.PIPE,
            text=True,
        )
        for name in ("p1", "p2")
    ]
    try:
        outputs = [child.communicate(timeout=120)[0] for child in children]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    assert all(child.returncode == 0 for child in children), outputs
    calls = sum(int(line.split("model-calls=")[1]) for line in outputs if line.strip())
    store = nb.open_store(f"sqlite:///{db}")
    try:
        key = nb.SessionKey("default", "u", "shared-agent", "shared")
        events = list(nb.SessionLog(store, key).scan())
    finally:
        store.close()
    open_run: str | None = None
    runs_per_turn: dict[str, int] = {}
    for event in events:
        if event.type == "run/start":
            assert open_run is None, f"run {event.run_id} started inside run {open_run}"
            open_run = event.run_id
            runs_per_turn[event.turn_id or ""] = runs_per_turn.get(event.turn_id or "", 0) + 1
        elif event.type == "run/end":
            assert event.run_id == open_run
            open_run = None
    assert open_run is None
    assert len(runs_per_turn) == 8
    assert set(runs_per_turn.values()) == {1}
    assert calls == 8  # every model call was made once, by one of the two processes
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
