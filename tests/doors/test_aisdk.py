"""The AI SDK door (``/aisdk/chat``) driven by the ``ai`` npm package's
``DefaultChatTransport`` and ``readUIMessageStream`` from node against ``agentnb serve``:
send and stream, an approval round trip, ``reconnectToStream`` after a disconnect
mid-answer, stop, and the bad inputs."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

import agentnb as nb
from tests.doors import js
from tests.doors.conftest import Doors
from tests.service.helpers import ServerProcess, issue

_chats = itertools.count(1)


@pytest.fixture(autouse=True)
def _client_installed() -> None:
    js.need("ai")


@pytest.fixture
def chat() -> str:
    return f"chat{next(_chats)}"


def user(text: str) -> list[dict[str, Any]]:
    return [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": text}]}]


def steps(url: str, token: str, chat: str, *steps: dict[str, Any]) -> list[dict[str, Any]]:
    return js.run("ai_client.mjs", {"url": url, "token": token, "chatId": chat, "steps": steps})


def messages(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [line["message"] for line in lines if "message" in line]


def text_of(message: dict[str, Any]) -> str:
    return "".join(p["text"] for p in message["parts"] if p["type"] == "text")


def chunks(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [line["chunk"] for line in lines if "chunk" in line]


class TestSend:
    def test_send_and_stream(self, doors: Doors, chat: str) -> None:
        """A message streams its answer as UI message chunks, ending with finish."""
        lines = steps(doors.url, doors.alice, chat, {"send": user("hello ai")})
        types = [c["type"] for c in chunks(lines)]
        assert types[0] == "start"
        assert types[-1] == "finish"
        assert {"start-step", "text-start", "text-delta", "text-end", "finish-step"} <= set(types)
        [message] = messages(lines)
        assert text_of(message) == "You said: hello ai"

    def test_headers_and_done(self, doors: Doors, chat: str) -> None:
        """The stream carries the v1 header and ends with [DONE]."""
        body = {"id": chat, "messages": user("raw"), "trigger": "submit-message"}
        with httpx.stream(
            "POST",
            f"{doors.url}/aisdk/chat",
            json=body,
            timeout=30,
            headers={"Authorization": f"Bearer {doors.alice}"},
        ) as response:
            assert response.headers["x-vercel-ai-ui-message-stream"] == "v1"
            text = response.read().decode()
        assert text.rstrip().endswith("data: [DONE]")

    def test_plan_is_a_data_part(self, doors: Doors, chat: str) -> None:
        """A plan the agent writes comes as a data-agentnb-plan part."""
        lines = steps(doors.url, doors.alice, chat, {"send": user("plan look buy")})
        [plan] = [c for c in chunks(lines) if c["type"] == "data-agentnb-plan"]
        assert [item["content"] for item in plan["data"]] == ["look", "buy"]


class TestFailure:
    def test_failed_turn_is_an_error_part(self, doors: Doors, chat: str) -> None:
        """A turn whose model fails streams an error part and finishes with error."""
        body = {"id": chat, "messages": user("fail")}
        headers = {"Authorization": f"Bearer {doors.alice}"}
        with httpx.stream("POST", f"{doors.url}/aisdk/chat", json=body, headers=headers,
                          timeout=30) as response:  # fmt: skip
            parts = [json.loads(line[6:]) for line in response.iter_lines()
                     if line.startswith("data: {")]  # fmt: skip
        [error] = [p for p in parts if p["type"] == "error"]
        assert "told to fail" in error["errorText"]
        assert parts[-1] == {"type": "finish", "finishReason": "error"}


class TestApproval:
    def test_approval_round_trip(self, doors: Doors, chat: str) -> None:
        """An approval request answered through the SDK's approval response runs the tool."""
        lines = steps(doors.url, doors.alice, chat, {"send": user("order pen 2")})
        [message] = messages(lines)
        [part] = [p for p in message["parts"] if p.get("state") == "approval-requested"]
        assert part["type"] == "tool-create_order"
        part["state"] = "approval-responded"  # what addToolApprovalResponse does
        part["approval"] = {"id": part["approval"]["id"], "approved": True}
        lines = steps(doors.url, doors.alice, chat, {"send": [*user("order pen 2"), message]})
        [answer] = messages(lines)
        outputs = [c for c in chunks(lines) if c["type"] == "tool-output-available"]
        assert [o["output"] for o in outputs] == ["ordered 2 pen"]
        assert text_of(answer) == "done: ordered 2 pen"

    def test_rejection_with_a_reason(self, doors: Doors, chat: str) -> None:
        """A rejected approval does not run the tool."""
        [message] = messages(steps(doors.url, doors.alice, chat, {"send": user("order ink 3")}))
        [part] = [p for p in message["parts"] if p.get("state") == "approval-requested"]
        part["state"] = "approval-responded"
        part["approval"] = {"id": part["approval"]["id"], "approved": False, "reason": "no"}
        lines = steps(doors.url, doors.alice, chat, {"send": [*user("order ink 3"), message]})
        assert "ordered" not in text_of(messages(lines)[0])


class TestResume:
    def test_reconnect_gives_the_rest_of_the_answer(self, tmp_path: Path) -> None:
        """After a disconnect mid-answer, reconnectToStream gives the whole answer from the
        log; once it ended there is nothing to resume (204)."""
        url = f"sqlite:///{tmp_path / 'agentnb.sqlite'}"
        token = issue(url, "alice")
        with ServerProcess(url, agent="tests.doors._agent:slow") as server:
            lines = steps(
                server.url,
                token,
                "cut",
                {"send": user("long 12"), "abortAfter": 3},
                {"resume": True},
                {"resume": True},
            )
        assert {"aborted": True} in lines
        [message] = messages(lines)
        answer = "\n".join(f"{i}. line **{i}** of the answer" for i in range(1, 13))
        assert text_of(message) == answer
        assert lines[-1] == {"none": True}

    def test_reconnect_late_in_a_long_answer(self, tmp_path: Path) -> None:
        """A reconnect after the run has written many events (its start pages back from the
        head) still replays the answer from its first word."""
        url = f"sqlite:///{tmp_path / 'agentnb.sqlite'}"
        token = issue(url, "alice")
        with ServerProcess(url, agent="tests.doors._agent:slow") as server:
            lines = steps(
                server.url,
                token,
                "late",
                {"send": user("long 60"), "abortAfter": 24},
                {"resume": True},
            )
            store = nb.open_store(url)
            key = nb.SessionKey("default", "alice", "door-agent", "late")
            written = [e for e in store.scan(key, 0, None) if e.type == "model/chunk"]
            store.close()
        assert {"aborted": True} in lines
        # 24 deltas read before the cut: 24 chunks after the start, beyond the first look back.
        assert len(written) > 24
        [message] = messages(lines)
        answer = "\n".join(f"{i}. line **{i}** of the answer" for i in range(1, 61))
        assert text_of(message) == answer

    def test_nothing_to_resume(self, doors: Doors, chat: str) -> None:
        """A chat with nothing running answers the reconnect with 204."""
        steps(doors.url, doors.alice, chat, {"send": user("done already")})
        lines = steps(doors.url, doors.alice, chat, {"resume": True})
        assert lines == [{"none": True}]


class TestStop:
    def test_stop_cancels_the_running_turn(self, doors: Doors, chat: str) -> None:
        """stop cancels the running answer: its stream finishes and nothing runs after."""
        args = {
            "url": doors.url,
            "token": doors.alice,
            "chatId": chat,
            "steps": [{"send": user("snooze 30")}],
        }
        proc = js.start("ai_client.mjs", args)
        while js.read_line(proc).get("chunk", {}).get("type") != "tool-input-available":
            pass
        headers = {"Authorization": f"Bearer {doors.alice}"}
        stopped = httpx.post(f"{doors.url}/aisdk/chat/{chat}/stop", headers=headers)
        assert stopped.json() == {"stopped": True}
        rest = js.finish(proc)
        finish = [c for c in chunks(rest) if c["type"] == "finish"]
        assert finish == [{"type": "finish", "finishReason": "other"}]
        assert doors.events(chat)[-1].type == "turn/cancelled"
        again = httpx.post(f"{doors.url}/aisdk/chat/{chat}/stop", headers=headers)
        assert again.json() == {"stopped": False}


class TestBadInput:
    def post(self, doors: Doors, body: Any, token: str | None = None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token or doors.alice}"}
        return httpx.post(f"{doors.url}/aisdk/chat", json=body, headers=headers)

    def test_another_users_chat_is_404(self, doors: Doors, chat: str) -> None:
        """Another user's chat is a 404 problem for its stream and its stop."""
        steps(doors.url, doors.alice, chat, {"send": user("mine")})
        headers = {"Authorization": f"Bearer {doors.bob}"}
        for method, path in (("GET", "stream"), ("POST", "stop")):
            answer = httpx.request(method, f"{doors.url}/aisdk/chat/{chat}/{path}", headers=headers)
            assert answer.status_code == 404
            assert answer.json()["type"] == "SessionNotFound"

    def test_malformed_body(self, doors: Doors) -> None:
        """A body that is not a chat request is a 400 problem."""
        answer = self.post(doors, {"messages": "no"})
        assert answer.status_code == 400
        assert "chat request" in answer.json()["detail"]

    def test_oversized_body(self, doors: Doors, chat: str) -> None:
        """A body over the service's limit is a 413 problem."""
        answer = self.post(doors, {"id": chat, "messages": user("x" * (2 << 20))})
        assert answer.status_code == 413

    def test_regenerate_is_refused(self, doors: Doors, chat: str) -> None:
        """trigger regenerate-message is a 400: the log keeps every answer."""
        answer = self.post(
            doors, {"id": chat, "messages": user("x"), "trigger": "regenerate-message"}
        )
        assert answer.status_code == 400

    def test_approval_of_nothing_writes_nothing(self, doors: Doors, chat: str) -> None:
        """An approval response for a request that does not exist is refused; nothing is
        written."""
        steps(doors.url, doors.alice, chat, {"send": user("calm")})
        heads = doors.heads(chat)
        forged = {
            "id": "a1",
            "role": "assistant",
            "parts": [
                {
                    "type": "tool-create_order",
                    "toolCallId": "call_x",
                    "state": "approval-responded",
                    "input": {},
                    "approval": {"id": "req_nope", "approved": True},
                }
            ],
        }
        answer = self.post(doors, {"id": chat, "messages": [*user("calm"), forged]})
        assert answer.status_code == 409
        assert answer.json()["type"] == "InvalidAnswer"
        assert doors.heads(chat) == heads


class TestReasoning:
    THOUGHT = "Weigh <b>both</b> first."

    def test_reasoning_parts_before_the_text(self, doors: Doors, chat: str) -> None:
        """A model's streamed reasoning arrives as reasoning-start/-delta/-end parts, ended
        before the answer's text starts; the SDK builds a reasoning part of the message
        from them, before its text part."""
        lines = steps(doors.url, doors.alice, chat, {"send": user("think")})
        parts = chunks(lines)
        types = [c["type"] for c in parts]
        assert types.index("reasoning-start") < types.index("reasoning-end")
        assert types.index("reasoning-end") < types.index("text-start")
        deltas = [c["delta"] for c in parts if c["type"] == "reasoning-delta"]
        assert "".join(deltas) == self.THOUGHT
        [message] = messages(lines)
        shown = [(p["type"], p["text"]) for p in message["parts"] if "text" in p]
        assert shown == [("reasoning", self.THOUGHT), ("text", "Thought it **through**.")]

    def test_resumed_stream_carries_the_reasoning(self, tmp_path: Path) -> None:
        """reconnectToStream mid-answer replays the reasoning as reasoning too."""
        url = f"sqlite:///{tmp_path / 'agentnb.sqlite'}"
        token = issue(url, "alice")
        with ServerProcess(url, agent="tests.doors._agent:slow") as server:
            lines = steps(
                server.url,
                token,
                "thinking",
                {"send": user("ponder"), "abortAfter": 2},
                {"resume": True},
            )
        assert {"aborted": True} in lines
        [message] = messages(lines)
        answer = "\n".join(f"{i}. line **{i}** of the answer" for i in range(1, 31))
        shown = [(p["type"], p["text"]) for p in message["parts"] if "text" in p]
        assert shown == [("reasoning", self.THOUGHT), ("text", answer)]
