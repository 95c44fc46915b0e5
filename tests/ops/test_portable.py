"""agentnb imports without POSIX-only modules (issue 36, item 5): with ``fcntl`` made
unimportable and ``os.fork`` / ``os.register_at_fork`` taken away, as on Windows, the
package imports and the SQLite store opens, commits a turn and reads it back."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import agentnb

ROOT = Path(agentnb.__file__).parent.parent

_NO_POSIX = """
import os, sys
sys.modules["fcntl"] = None  # import fcntl raises ImportError
for name in ("fork", "register_at_fork", "O_NOFOLLOW"):
    if hasattr(os, name):
        delattr(os, name)
import agentnb as nb
import agentnb.stores.sqlite
assert "fcntl" not in {m for m, v in sys.modules.items() if v is not None}
agent = nb.Agent(name="A", agent_id="a", model=nb.ScriptedModel(["hello"]))
with nb.Runtime(agent, store="sqlite:///" + sys.argv[1]) as runtime:
    outcome = runtime.session("s").run("hi", timeout=60)
print(outcome.status, outcome.output)
"""


class TestNoPosixModules:
    def test_agentnb_imports_and_runs_a_turn_without_fcntl_or_fork(self, tmp_path: Path) -> None:
        """No module on the import path of agentnb or of the SQLite store needs fcntl or
        fork at import time; the store works without the file lock (SQLite's own locks)."""
        done = subprocess.run(
            [sys.executable, "-c", _NO_POSIX, str(tmp_path / "w.db")],
            check=False,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["completed", "hello"]
