"""A door's stream lives only as long as its token: revoked (over ``/v1`` here, or by
another process with ``agentnb token revoke``), each door's open stream ends in its own
protocol's words — AG-UI ``RUN_ERROR``, an AI SDK ``error`` part, a Responses ``error``
event — and its real client sees that end and returns; the run itself goes on.

Every stream here is opened mid-run on ``snooze 30`` (a tool that sleeps), so nothing but
the revocation can end it before the test's guard."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

import agentnb as nb
from tests.doors import js
from tests.doors.conftest import AGENT, Doors
from tests.service.helpers import WAIT, issue, sse, wait_for

validate = pytest.importorskip("ag_ui_validate.pytest_plugin")

_threads = itertools.count(1)


@pytest.fixture
def thread() -> str:
    return f"revoked{next(_threads)}"


@pytest.fixture
def token(doors: Doors) -> str:
    """A token of alice's own for the stream under test (revoked by the test)."""
    return issue(doors.store_url, "alice", "to revoke")


@pytest.fixture
def alice(doors: Doors, thread: str) -> Iterator[httpx.Client]:
    """Alice's other token over ``/v1``: it revokes, then cancels what still runs."""
    headers = {"Authorization": f"Bearer {doors.alice}"}
    with httpx.Client(base_url=doors.url, headers=headers, timeout=WAIT) as client:
        yield client
        for task in client.get(f"/v1/sessions/{thread}").json().get("tasks", []):
            if task["status"] in ("running", "queued"):
                client.post(f"/v1/sessions/{thread}/turns/{task['turn_id']}/cancel")


def revoke(alice: httpx.Client, token: str) -> None:
    """Revoke ``token`` through the service (its streams are checked at once)."""
    answer = alice.delete(f"/v1/tokens/{token.split('.', maxsplit=1)[0]}")
    assert answer.is_success, answer.text


def revoke_elsewhere(doors: Doors, token: str) -> None:
    """Revoke ``token`` in the store, as ``agentnb token revoke`` in another process does."""
    store = nb.open_store(doors.store_url)
    try:
        store.revoke_token(token.split(".", maxsplit=1)[0])
    finally:
        store.close()


def snooze(alice: httpx.Client, thread: str) -> None:
    """Start ``snooze 30`` on the thread over ``/v1`` and wait until it sleeps."""
    alice.post("/v1/sessions", json={"session_id": thread})
    started = alice.post(f"/v1/sessions/{thread}/turns", json={"input": "snooze 30"})
    assert started.is_success, started.text
    running(alice, thread)


def running(alice: httpx.Client, thread: str) -> None:
    """Wait until the thread's turn is inside its snooze."""

    def snoozing() -> bool:
        events = alice.get(f"/v1/sessions/{thread}/events", params={"after": 0}).json()
        return any(e["type"] == "tool/dispatch" for e in events["events"])

    wait_for(snoozing, "the snooze to start")


class TestAgui:
    @pytest.fixture(autouse=True)
    def _client_installed(self) -> None:
        js.need("@ag-ui/client")

    def test_run_stream_ends_with_run_error(
        self, doors: Doors, thread: str, token: str, alice: httpx.Client
    ) -> None:
        """HttpAgent's run stream ends with RUN_ERROR saying the token was revoked."""
        args = {"url": doors.url, "token": token, "threadId": thread}
        proc = js.start("agui_client.cjs", {**args, "mode": "run", "text": "snooze 30"})
        events = [js.read_line(proc)["event"]]
        while events[-1]["type"] != "TOOL_CALL_START":
            events.append(js.read_line(proc)["event"])
        revoke(alice, token)
        events += [line["event"] for line in js.finish(proc) if "event" in line]
        validate.assert_valid_agui(events)
        assert events[-1]["type"] == "RUN_ERROR"
        assert events[-1]["code"] == "revoked"
        assert "revoked" in events[-1]["message"]

    def test_connect_stream_ends_with_run_error(
        self, doors: Doors, thread: str, token: str, alice: httpx.Client
    ) -> None:
        """A connect stream following the thread ends with RUN_ERROR once another process
        revokes its token."""
        snooze(alice, thread)
        args = {"url": doors.url, "token": token, "threadId": thread, "mode": "connect"}
        proc = js.start("agui_client.cjs", args)
        events = [js.read_line(proc)["event"]]
        while events[-1]["type"] != "TOOL_CALL_END":
            events.append(js.read_line(proc)["event"])
        revoke_elsewhere(doors, token)
        events += [line["event"] for line in js.finish(proc) if "event" in line]
        validate.assert_valid_agui(events)
        assert events[-1]["type"] == "RUN_ERROR"
        assert [e["type"] for e in events].count("RUN_STARTED") == 1
        assert events[-1]["code"] == "revoked"


class TestAisdk:
    @pytest.fixture(autouse=True)
    def _client_installed(self) -> None:
        js.need("ai")

    @staticmethod
    def user(text: str) -> list[dict[str, Any]]:
        return [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": text}]}]

    def test_chat_stream_ends_with_an_error_part(
        self, doors: Doors, thread: str, token: str, alice: httpx.Client
    ) -> None:
        """The chat's stream ends with an error part, which the SDK's reader takes as the
        stream's end; the answer so far stays in the message it built."""
        steps = [{"send": self.user("snooze 30")}]
        args = {"url": doors.url, "token": token, "chatId": thread, "steps": steps}
        proc = js.start("ai_client.mjs", args)
        while js.read_line(proc).get("chunk", {}).get("type") != "tool-input-available":
            pass
        revoke(alice, token)
        rest = js.finish(proc)
        parts = [line["chunk"] for line in rest if "chunk" in line]
        assert parts[-1]["type"] == "error"
        assert "revoked" in parts[-1]["errorText"]
        [ended] = [line for line in rest if "streamError" in line]
        assert "revoked" in ended["streamError"]

    def test_resumed_stream_ends_with_an_error_part(
        self, doors: Doors, thread: str, token: str, alice: httpx.Client
    ) -> None:
        """reconnectToStream's stream ends with an error part too."""
        snooze(alice, thread)
        args = {"url": doors.url, "token": token, "chatId": thread, "steps": [{"resume": True}]}
        proc = js.start("ai_client.mjs", args)
        while js.read_line(proc).get("chunk", {}).get("type") != "tool-input-available":
            pass
        revoke(alice, token)
        rest = js.finish(proc)
        parts = [line["chunk"] for line in rest if "chunk" in line]
        assert parts[-1]["type"] == "error"
        assert any("streamError" in line for line in rest)


class TestOpenai:
    openai = pytest.importorskip("openai")

    def client(self, doors: Doors, token: str) -> Any:
        return self.openai.OpenAI(base_url=f"{doors.url}/openai/v1", api_key=token)

    def test_response_stream_ends_with_an_error_event(
        self, doors: Doors, thread: str, token: str, alice: httpx.Client
    ) -> None:
        """The SDK's stream of a response ends with an error event (token_revoked) that
        keeps the last number seen; the response itself still runs."""
        alice.post("/v1/sessions", json={"session_id": thread})
        with self.client(doors, token) as client:
            stream = client.responses.create(
                model=AGENT, input="snooze 30", conversation=thread, stream=True
            )
            seen = []
            for event in stream:
                seen.append(event)
                if event.type == "response.output_item.added":
                    revoke(alice, token)
        last = seen[-1]
        assert last.type == "error"
        assert last.code == "token_revoked"
        assert last.sequence_number == seen[-2].sequence_number
        rid = seen[0].response.id
        with self.client(doors, doors.alice) as client:
            assert client.responses.retrieve(rid).status == "in_progress"

    def test_resumed_stream_ends_with_an_error_event(
        self, doors: Doors, thread: str, token: str, alice: httpx.Client
    ) -> None:
        """GET /responses/{id}?stream=true ends the same way."""
        with self.client(doors, doors.alice) as client:
            response = client.responses.create(model=AGENT, input="snooze 30", background=True)
        running(alice, response.conversation.id)
        headers = {"Authorization": f"Bearer {token}"}
        url = f"{doors.url}/openai/v1/responses/{response.id}"
        with httpx.stream(
            "GET", url, params={"stream": "true"}, headers=headers, timeout=WAIT
        ) as answer:
            events = []
            for _kind, _id, data in sse(answer):
                events.append(data)
                if data["type"] == "response.output_item.added":
                    revoke(alice, token)
        assert events[-1]["type"] == "error"
        assert events[-1]["code"] == "token_revoked"
        cancel = alice.post(f"/openai/v1/responses/{response.id}/cancel")
        assert cancel.is_success, cancel.text

    def test_foreground_response_is_a_401(
        self, doors: Doors, thread: str, token: str, alice: httpx.Client
    ) -> None:
        """A foreground create waiting for its answer gets a 401 in the Responses shape
        (the SDK's AuthenticationError) once its token is revoked."""
        alice.post("/v1/sessions", json={"session_id": thread})

        def revoke_when_running() -> None:
            running(alice, thread)
            revoke(alice, token)

        revoker = threading.Thread(target=revoke_when_running)
        revoker.start()
        with (
            self.client(doors, token) as client,
            pytest.raises(self.openai.AuthenticationError) as refused,
        ):
            client.responses.create(model=AGENT, input="snooze 30", conversation=thread)
        revoker.join(WAIT)
        assert refused.value.code == "Unauthorized"
        assert "revoked" in refused.value.message
