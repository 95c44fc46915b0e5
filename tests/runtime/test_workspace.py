"""A workspace bound to its session: ``nb.Workspace``, ``ctx.workspace``, the built-in file
tools confined to it, the manifest at each run's end, fork, delete, backup and a crash."""

from __future__ import annotations

import hashlib
import json
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import agentnb as nb
from agentnb.workspace import confine
from tests.runtime import _workspace_child as child
from tests.runtime.helpers import REPO, WAIT, events_of

MakeRuntime = Callable[..., nb.Runtime]


def _agent(
    model: nb.Model, workspace: nb.Workspace | None, tools: list[Any] | None = None
) -> nb.Agent:
    return nb.Agent(
        name="Files",
        agent_id="files-agent",
        model=model,
        tools=[*nb.workspace_tools(), *(tools or [])],
        workspace=workspace,
    )


def _writes(path: str, content: str) -> nb.ScriptedModel:
    return nb.ScriptedModel([nb.ToolCall("write_file", {"path": path, "content": content}), "ok"])


@pytest.fixture
def store(store_url: str) -> Any:
    """The test's store (one object for memory://, shared by its runtimes)."""
    return nb.MemoryStore() if store_url == "memory://" else store_url


class TestBinding:
    def test_the_first_run_binds_a_directory_of_the_session_s_own(
        self, store: Any, tmp_path: Path
    ) -> None:
        """The first run commits workspace/bound {root, path, fingerprint}; each session has
        its own directory, and tools reach it as ctx.workspace."""
        seen: list[Path] = []

        @nb.tool
        def where(ctx: nb.ToolContext) -> str:
            """Say where the workspace is."""
            assert ctx.workspace is not None
            seen.append(ctx.workspace)
            return str(ctx.workspace)

        workspace = nb.Workspace(tmp_path / "ws")
        model = nb.ScriptedModel(
            lambda m: "ok" if m[-1].role == "tool" else nb.ToolCall("where", {})
        )
        with nb.Runtime(_agent(model, workspace, [where]), store=store) as runtime:
            one, two = runtime.session("one"), runtime.session("two")
            one.run("where?", timeout=WAIT)
            two.run("where?", timeout=WAIT)
            bound = [e.payload for e in events_of(one, "workspace/bound")]
        assert len(bound) == 1
        assert bound[0]["root"] == str((tmp_path / "ws").resolve())
        assert bound[0]["path"] == str(workspace.path_for(one.key))
        assert len(bound[0]["fingerprint"]) == 32
        assert seen[0] == Path(bound[0]["path"])
        assert seen[0] != seen[1]
        assert all(p.is_dir() and p.parent.parent.parent.parent == workspace.root for p in seen)

    def test_a_later_run_does_not_bind_again(self, store: Any, tmp_path: Path) -> None:
        """A session is bound once: later runs of the same workspace add no binding."""
        workspace = nb.Workspace(tmp_path)
        with nb.Runtime(_agent(nb.ScriptedModel(["a", "b"]), workspace), store=store) as rt:
            session = rt.session("s1")
            session.run("one", timeout=WAIT)
            session.run("two", timeout=WAIT)
            assert len(events_of(session, "workspace/bound")) == 1

    def test_runtime_workspace_is_the_agent_s(self, store: Any, tmp_path: Path) -> None:
        """Runtime(workspace=...) binds like Agent(workspace=...)."""
        with nb.Runtime(
            _agent(nb.ScriptedModel(["a"]), None), store=store, workspace=nb.Workspace(tmp_path)
        ) as runtime:
            session = runtime.session("s1")
            session.run("one", timeout=WAIT)
            assert session.inspect().workspace is not None
            assert session.inspect().workspace.root == str(tmp_path.resolve())

    def test_another_workspace_is_refused_naming_the_way_out(
        self, store: Any, tmp_path: Path
    ) -> None:
        """New work with another workspace raises WorkspaceChanged naming
        accept_workspace_change; nothing is written."""
        with nb.Runtime(
            _agent(nb.ScriptedModel(["a"]), nb.Workspace(tmp_path / "a")), store=store
        ) as rt:
            rt.session("s1").run("one", timeout=WAIT)
        other = nb.Workspace(tmp_path / "b")
        with nb.Runtime(_agent(nb.ScriptedModel(["b"]), other), store=store) as runtime:
            session = runtime.open("s1")
            heads = (session.log.head(), session.inbox.head())
            with pytest.raises(nb.WorkspaceChanged) as caught:
                session.submit("two")
            assert "accept_workspace_change" in str(caught.value)
            assert caught.value.bound["path"].startswith(str((tmp_path / "a").resolve()))
            assert caught.value.current["path"].startswith(str((tmp_path / "b").resolve()))
            assert (session.log.head(), session.inbox.head()) == heads

    def test_a_worker_with_another_workspace_rejects_the_task(
        self, store: Any, tmp_path: Path
    ) -> None:
        """A task accepted elsewhere is refused by the executor bound to another workspace:
        the receipt reads rejected with the reason, and nothing ran."""
        with nb.Runtime(
            _agent(nb.ScriptedModel(["a"]), nb.Workspace(tmp_path / "a")), store=store
        ) as rt:
            rt.session("s1").run("one", timeout=WAIT)
        with nb.Runtime(_agent(nb.ScriptedModel([]), None), store=store, execute=False) as front:
            receipt = front.open("s1").submit("two")
            model = nb.ScriptedModel(["never"])
            with nb.Runtime(_agent(model, nb.Workspace(tmp_path / "b")), store=store) as worker:
                worker.open("s1").start()
                outcome = receipt.wait(timeout=WAIT)
        assert outcome.status == "rejected"
        assert "accept_workspace_change" in (outcome.error or "")
        assert model.calls == 0

    def test_accept_workspace_change_rebinds(self, store: Any, tmp_path: Path) -> None:
        """With accept_workspace_change=True the session is bound again, recording the
        previous path."""
        with nb.Runtime(
            _agent(nb.ScriptedModel(["a"]), nb.Workspace(tmp_path / "a")), store=store
        ) as rt:
            rt.session("s1").run("one", timeout=WAIT)
        with nb.Runtime(
            _agent(nb.ScriptedModel(["b"]), nb.Workspace(tmp_path / "b")),
            store=store,
            accept_workspace_change=True,
        ) as runtime:
            session = runtime.open("s1")
            assert session.run("two", timeout=WAIT).status == "completed"
            bound = [e.payload for e in events_of(session, "workspace/bound")]
        assert len(bound) == 2
        assert bound[1]["previous"] == bound[0]["path"]
        assert bound[1]["path"].startswith(str((tmp_path / "b").resolve()))

    @pytest.mark.parametrize(
        "make",
        [
            lambda p: nb.Workspace(123),  # type: ignore[arg-type]
            lambda p: nb.Workspace(""),
            lambda p: nb.Workspace(p, per_session="yes"),  # type: ignore[arg-type]
            lambda p: nb.Workspace(p / "file.txt"),
            lambda p: nb.Agent(
                name="a", agent_id="a", model=nb.ScriptedModel([]), workspace=str(p)
            ),  # type: ignore[arg-type]
            lambda p: nb.Runtime(
                _agent(nb.ScriptedModel([]), None), store="memory://", workspace=str(p)
            ),  # type: ignore[arg-type]
            lambda p: nb.Runtime(
                _agent(nb.ScriptedModel([]), None),
                store="memory://",
                accept_workspace_change="y",  # type: ignore[arg-type]
            ),
        ],
    )
    def test_bad_settings_are_invalid_input(self, tmp_path: Path, make: Any) -> None:
        """A root that is not a directory path, or a workspace that is not nb.Workspace, is
        InvalidInput."""
        (tmp_path / "file.txt").write_text("x")
        with pytest.raises(nb.InvalidInput):
            make(tmp_path)


class TestConfinement:
    def test_relative_paths_stay_inside(self, tmp_path: Path) -> None:
        """A plain relative path resolves inside the workspace (it need not exist)."""
        assert confine(tmp_path, "a/b.txt") == tmp_path.resolve() / "a" / "b.txt"

    @pytest.mark.parametrize("bad", ["../x", "a/../../x", "/etc/passwd", "", "a\x00b"])
    def test_escapes_are_refused(self, tmp_path: Path, bad: str) -> None:
        """'..', absolute paths and malformed ones are WorkspaceEscape (an InvalidInput)."""
        with pytest.raises(nb.WorkspaceEscape):
            confine(tmp_path, bad)

    def test_a_symlink_pointing_out_is_refused(self, tmp_path: Path) -> None:
        """A symlink inside that leads out is refused, for the link and below it."""
        inside, outside = tmp_path / "ws", tmp_path / "secret"
        inside.mkdir()
        outside.mkdir()
        (outside / "key.txt").write_text("secret")
        (inside / "out").symlink_to(outside)
        for bad in ("out", "out/key.txt"):
            with pytest.raises(nb.WorkspaceEscape, match="symlink"):
                confine(inside, bad)

    def test_the_model_gets_escapes_as_tool_errors(self, store: Any, tmp_path: Path) -> None:
        """Each escape through the built-in tools is the call's error result (typed), and
        nothing outside is read or written."""
        secret = tmp_path / "secret.txt"
        secret.write_text("top secret")
        workspace = nb.Workspace(tmp_path / "ws")
        calls = [
            nb.ToolCall("read_file", {"path": "../secret.txt"}),
            nb.ToolCall("read_file", {"path": str(secret)}),
            nb.ToolCall("write_file", {"path": "../../evil.txt", "content": "x"}),
            nb.ToolCall("read_file", {"path": "link/secret.txt"}),
        ]
        with nb.Runtime(_agent(nb.ScriptedModel([calls, "ok"]), workspace), store=store) as rt:
            session = rt.session("s1")
            Path(workspace.path_for(session.key)).mkdir(parents=True)
            (workspace.path_for(session.key) / "link").symlink_to(tmp_path)
            assert session.run("try to escape", timeout=WAIT).status == "completed"
            results = [e.payload for e in events_of(session, "tool/result")]
        assert [r["status"] for r in results] == ["error"] * 4
        assert all("WorkspaceEscape" in r["output"] for r in results)
        assert all("top secret" not in r["output"] for r in results)
        assert not (tmp_path.parent / "evil.txt").exists()

    def test_read_write_list_and_search_inside(self, store: Any, tmp_path: Path) -> None:
        """The four tools work inside the workspace: write, read back, list, search."""
        workspace = nb.Workspace(tmp_path)
        script = nb.ScriptedModel(
            [
                nb.ToolCall(
                    "write_file", {"path": "docs/plan.md", "content": "step one\nstep two"}
                ),
                nb.ToolCall("read_file", {"path": "docs/plan.md"}),
                nb.ToolCall("list_files", {}),
                nb.ToolCall("search_files", {"pattern": "two", "glob": "*.md"}),
                "ok",
            ]
        )
        with nb.Runtime(_agent(script, workspace), store=store) as runtime:
            session = runtime.session("s1")
            session.run("work", timeout=WAIT)
            outputs = [e.payload["output"] for e in events_of(session, "tool/result")]
        assert outputs[1] == "step one\nstep two"
        assert outputs[2] == "docs/plan.md"
        assert outputs[3] == "docs/plan.md:2: step two"


class TestManifest:
    def test_each_run_end_commits_the_file_hashes_not_the_contents(
        self, store: Any, tmp_path: Path
    ) -> None:
        """workspace/checkpoint holds each file's SHA-256; the contents never enter the log."""
        workspace = nb.Workspace(tmp_path)
        with nb.Runtime(_agent(_writes("a.txt", "CONTENT-XYZ"), workspace), store=store) as rt:
            session = rt.session("s1")
            session.run("write", timeout=WAIT)
            checkpoints = [e.payload for e in events_of(session, "workspace/checkpoint")]
        assert len(checkpoints) == 1
        assert checkpoints[0]["files"] == {
            "a.txt": "sha256:" + hashlib.sha256(b"CONTENT-XYZ").hexdigest()
        }
        assert checkpoints[0]["count"] == 1
        assert checkpoints[0]["bytes"] == len("CONTENT-XYZ")
        assert "CONTENT-XYZ" not in json.dumps(checkpoints)

    def test_inspect_says_whether_the_files_still_match(self, store: Any, tmp_path: Path) -> None:
        """inspect().workspace matches after the run; a file changed since makes it not match
        and names the file."""
        workspace = nb.Workspace(tmp_path)
        with nb.Runtime(_agent(_writes("a.txt", "one"), workspace), store=store) as rt:
            session = rt.session("s1")
            session.run("write", timeout=WAIT)
            status = session.inspect().workspace
            assert status is not None
            assert status.matches is True
            assert status.changed == ()
            (Path(status.path) / "a.txt").write_text("changed by hand")
            (Path(status.path) / "new.txt").write_text("new")
            again = session.inspect().workspace
        assert again is not None
        assert again.matches is False
        assert again.changed == ("a.txt", "new.txt")

    def test_before_any_run_ended_there_is_nothing_to_match(
        self, store: Any, tmp_path: Path
    ) -> None:
        """A session without a workspace has none in inspect(); one never run has none bound."""
        with nb.Runtime(_agent(nb.ScriptedModel(["a"]), None), store=store) as runtime:
            session = runtime.session("s1")
            session.run("x", timeout=WAIT)
            assert session.inspect().workspace is None


class TestForkAndDelete:
    def test_fork_copies_the_workspace_as_it_stands(self, store: Any, tmp_path: Path) -> None:
        """A fork's first run finds the files of its source as they stood at the fork,
        in a directory of its own."""
        workspace = nb.Workspace(tmp_path)
        model = nb.ScriptedModel(
            [
                nb.ToolCall("write_file", {"path": "a.txt", "content": "from the source"}),
                "ok",
                nb.ToolCall("read_file", {"path": "a.txt"}),
                "read it",
            ]
        )
        with nb.Runtime(_agent(model, workspace), store=store) as runtime:
            source = runtime.session("s1")
            source.run("write", timeout=WAIT)
            (workspace.path_for(source.key) / "later.txt").write_text("after the run")
            fork = source.fork("s2")
            fork.run("read", timeout=WAIT)
            read = events_of(fork, "tool/result")[-1].payload["output"]
            fork_path = Path(events_of(fork, "workspace/bound")[0].payload["path"])
        assert read == "from the source"
        assert fork_path == workspace.path_for(fork.key) != workspace.path_for(source.key)
        assert (fork_path / "later.txt").read_text() == "after the run"

    def test_delete_removes_the_workspace(self, store: Any, tmp_path: Path) -> None:
        """delete() removes the session's directory; another session's stays."""
        workspace = nb.Workspace(tmp_path)
        model = nb.ScriptedModel(
            [nb.ToolCall("write_file", {"path": "a.txt", "content": "x"}), "ok"] * 2
        )
        with nb.Runtime(_agent(model, workspace), store=store) as runtime:
            one, two = runtime.session("one"), runtime.session("two")
            one.run("w", timeout=WAIT)
            two.run("w", timeout=WAIT)
            one.delete()
        assert not workspace.path_for(one.key).exists()
        assert (workspace.path_for(two.key) / "a.txt").exists()

    def test_delete_never_removes_a_shared_root(self, store: Any, tmp_path: Path) -> None:
        """With per_session=False the sessions share the root, which delete() leaves."""
        workspace = nb.Workspace(tmp_path, per_session=False)
        with nb.Runtime(_agent(_writes("a.txt", "x"), workspace), store=store) as runtime:
            session = runtime.session("one")
            session.run("w", timeout=WAIT)
            session.delete()
        assert (tmp_path / "a.txt").exists()

    def test_the_command_line_delete_removes_it_too(self, tmp_path: Path, capsys: Any) -> None:
        """agentnb delete removes the deleted session's directory as session.delete() does."""
        from agentnb.cli import main

        url = f"sqlite:///{tmp_path / 'agentnb.sqlite'}"
        workspace = nb.Workspace(tmp_path / "ws")
        with nb.Runtime(_agent(_writes("a.txt", "x"), workspace), store=url) as runtime:
            session = runtime.session("one")
            session.run("w", timeout=WAIT)
        assert workspace.path_for(session.key).is_dir()
        assert main(["delete", "one", "--store", url, "--agent", "files-agent"]) == 0
        capsys.readouterr()
        assert not workspace.path_for(session.key).exists()


class TestCarried:
    def test_backup_and_migrate_carry_the_binding(self, tmp_path: Path) -> None:
        """A restored backup and a migrated store hold the same binding and manifest."""
        workspace = nb.Workspace(tmp_path / "ws")
        src = f"sqlite:///{tmp_path / 'src.sqlite'}"
        with nb.Runtime(_agent(_writes("a.txt", "x"), workspace), store=src) as runtime:
            runtime.session("s1").run("w", timeout=WAIT)
        nb.backup(src, tmp_path / "backup.agentnb")
        restored = f"sqlite:///{tmp_path / 'restored.sqlite'}"
        nb.restore(tmp_path / "backup.agentnb", restored)
        migrated = f"sqlite:///{tmp_path / 'migrated.sqlite'}"
        nb.migrate(src, migrated)
        for url in (restored, migrated):
            with nb.Runtime(_agent(nb.ScriptedModel(["b"]), workspace), store=url) as runtime:
                session = runtime.open("s1")
                status = session.inspect().workspace
                assert status is not None
                assert status.path == str(workspace.path_for(session.key))
                assert status.matches is True
                assert session.run("again", timeout=WAIT).status == "completed"
                assert len(events_of(session, "workspace/bound")) == 1


class TestCrash:
    def test_a_kill_mid_turn_keeps_the_binding_and_the_last_manifest(self, tmp_path: Path) -> None:
        """kill -9 of a real process mid-turn: the binding survives, and the manifest is the
        one of the last run that ended (the half-done turn's file is not in it)."""
        url = f"sqlite:///{tmp_path / 'agentnb.sqlite'}"
        root = tmp_path / "ws"
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.runtime._workspace_child", url, str(root)],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stdout is not None
            lines: queue.Queue[str] = queue.Queue()
            threading.Thread(
                target=lambda: [lines.put(x) for x in proc.stdout], daemon=True
            ).start()
            deadline = time.monotonic() + WAIT
            while lines.get(timeout=max(0.0, deadline - time.monotonic())).strip() != "BLOCKED":
                pass
            proc.send_signal(signal.SIGKILL)
            proc.wait(WAIT)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(WAIT)
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
        with nb.Runtime(child.make_agent(str(root)), store=url) as runtime:
            session = runtime.open(child.SESSION_ID)
            bound = events_of(session, "workspace/bound")
            checkpoints = [e.payload for e in events_of(session, "workspace/checkpoint")]
            status = session.inspect().workspace
        assert len(bound) == 1
        assert status is not None
        assert status.path == bound[0].payload["path"]
        assert len(checkpoints) == 1
        assert set(checkpoints[0]["files"]) == {"first.txt"}
        assert status.matches is False
        assert status.changed == ("second.txt",)
        assert (Path(status.path) / "second.txt").read_text() == "written by two"
