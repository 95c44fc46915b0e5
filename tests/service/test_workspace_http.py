"""A session bound to a workspace, through the service (uvicorn on a loopback port): new
work with another workspace is a 409 ``WorkspaceChanged`` problem naming the way out, the
remote client raises the same class, and ``inspect`` carries the workspace."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

import agentnb as nb
from agentnb import tokens
from tests.runtime.helpers import WAIT
from tests.service.helpers import ServerThread
from tests.service.test_api import problem


def _agent(workspace: nb.Workspace) -> nb.Agent:
    return nb.Agent(
        name="Files",
        agent_id="files-agent",
        model=nb.ScriptedModel(lambda m: "ok"),
        tools=nb.workspace_tools(),
        workspace=workspace,
    )


class TestWorkspaceOverHttp:
    def test_another_workspace_is_a_409_and_the_client_raises_it(self, tmp_path: Path) -> None:
        """POST /turns for a session bound elsewhere answers 409 WorkspaceChanged with both
        bindings; RemoteSession.submit raises nb.WorkspaceChanged; nothing is written."""
        url = f"sqlite:///{tmp_path / 'agentnb.sqlite'}"
        with nb.Runtime(_agent(nb.Workspace(tmp_path / "a")), store=url) as first:
            first.session("s1", user_id="alice").run("one", timeout=WAIT)
        with nb.Runtime(_agent(nb.Workspace(tmp_path / "b")), store=url) as runtime:
            token, _ = tokens.issue(runtime.store, "alice")
            with ServerThread(runtime) as server:
                heads = runtime.store.heads(nb.SessionKey("default", "alice", "files-agent", "s1"))
                with httpx.Client(
                    base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=30
                ) as client:
                    response = client.post("/v1/sessions/s1/turns", json={"input": "two"})
                    body = problem(response, 409, "WorkspaceChanged")
                    assert "accept_workspace_change" in body["detail"]
                    assert body["bound"]["path"].startswith(str((tmp_path / "a").resolve()))
                    assert body["current"]["path"].startswith(str((tmp_path / "b").resolve()))
                    seen = client.get("/v1/sessions/s1/inspect").json()["workspace"]
                    assert seen["path"] == body["bound"]["path"]
                    assert seen["matches"] is True
                remote = nb.connect(server.url, token)
                try:
                    session = remote.open("s1")
                    with pytest.raises(nb.WorkspaceChanged) as caught:
                        session.submit("two")
                    assert caught.value.bound["path"] == body["bound"]["path"]
                    assert session.inspect().workspace.path == body["bound"]["path"]
                finally:
                    remote.close()
                key = nb.SessionKey("default", "alice", "files-agent", "s1")
                assert runtime.store.heads(key) == heads
