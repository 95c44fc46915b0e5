"""`agentnb worker` executes queued work of sessions written by another process."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import agentnb as nb

REPO = Path(__file__).resolve().parents[2]


def test_worker_process_runs_queued_tasks_and_stops_on_sigint(tmp_path: Path) -> None:
    """A submit accepted by one process is executed by a worker process, in order."""
    url = f"sqlite:///{tmp_path / 'shared.sqlite'}"
    store = nb.open_store(url)
    key = nb.SessionKey("default", "alice", "worker-agent", "s1")
    store.create_session(key)
    inbox = nb.Inbox(store, key)
    for i in range(3):
        inbox.accept("submit", turn_id=f"turn_{i}", input=f"task {i}")
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agentnb.cli",
            "worker",
            "--store",
            url,
            "--agent",
            "tests.runtime._worker_agent:agent",
            "--poll",
            "0.2",
            "--lease",
            "2",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        completed: list[str] = []
        for event in nb.SessionLog(store, key).follow(after=0, idle_timeout=30):
            if event.type == "turn/output":
                completed.append(event.payload["message"]["text"])
            if len(completed) == 3:
                break
        assert completed == ["done: task 0", "done: task 1", "done: task 2"]
        worker.send_signal(signal.SIGINT)
        out, err = worker.communicate(timeout=30)
        assert worker.returncode == 0, err
        assert "worker for 'worker-agent'" in out
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate()
        store.close()
