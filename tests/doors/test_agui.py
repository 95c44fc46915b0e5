"""The AG-UI door (``POST /agui``, ``GET /agui/{threadId}/connect``) driven by
``@ag-ui/client``'s ``HttpAgent`` from node against ``agentnb serve``, every stream checked
by ``ag-ui-validate`` as well: a streamed answer, approvals as interrupts resumed with
``resume[]``, a reconnect after the client was killed mid-run, a thread followed across
later runs started over ``/v1``, and the bad inputs."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.doors import js
from tests.doors.conftest import Doors
from tests.service.helpers import ServerProcess, issue, sse

validate = pytest.importorskip("ag_ui_validate.pytest_plugin")

_threads = itertools.count(1)


@pytest.fixture(autouse=True)
def _client_installed() -> None:
    js.need("@ag-ui/client")


@pytest.fixture
def thread() -> str:
    return f"agui{next(_threads)}"


def client(doors: Doors, thread: str, **args: Any) -> list[dict[str, Any]]:
    """Run ``HttpAgent`` once: the events it delivered, and its result last."""
    return js.run(
        "agui_client.cjs",
        {"url": doors.url, "token": doors.alice, "threadId": thread, "mode": "run", **args},
    )


def events_of(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [line["event"] for line in lines if "event" in line]


def text_of(events: list[dict[str, Any]]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")


def finished(events: list[dict[str, Any]]) -> dict[str, Any]:
    [end] = [e for e in events if e["type"] == "RUN_FINISHED"]
    return end


def check(events: list[dict[str, Any]]) -> None:
    """The stream conforms to AG-UI, as ag-ui-validate judges it."""
    validate.assert_valid_agui(events)


class TestRun:
    def test_streamed_answer(self, doors: Doors, thread: str) -> None:
        """A run streams the answer and finishes with success; the client's messages
        are the thread's."""
        lines = client(doors, thread, text="hello agui")
        events = events_of(lines)
        check(events)
        assert events[0]["type"] == "RUN_STARTED"
        assert events[-1]["type"] == "RUN_FINISHED"
        assert finished(events)["outcome"] == {"type": "success"}
        messages = lines[-1]["result"]["messages"]
        assert [(m["role"], m["content"]) for m in messages] == [
            ("user", "hello agui"),
            ("assistant", "You said: hello agui"),
        ]

    def test_history_comes_from_the_log(self, doors: Doors, thread: str) -> None:
        """The second run's snapshot holds the first run's messages, whatever the client
        sent."""
        client(doors, thread, text="first")
        events = events_of(client(doors, thread, text="second"))
        [snapshot] = [e for e in events if e["type"] == "MESSAGES_SNAPSHOT"]
        assert [m["content"] for m in snapshot["messages"]] == ["first", "You said: first"]
        assert text_of(events).endswith("You said: second")

    def test_disposition_is_a_custom_event(self, doors: Doors, thread: str) -> None:
        """The send's disposition comes as the agentnb.disposition custom event."""
        events = events_of(client(doors, thread, text="hi"))
        [custom] = [e for e in events if e["type"] == "CUSTOM"]
        assert custom["name"] == "agentnb.disposition"
        assert custom["value"]["disposition"] == "started"


class TestFailure:
    def test_failed_turn_is_run_error(self, doors: Doors, thread: str) -> None:
        """A turn whose model fails ends the stream with RUN_ERROR, saying why."""
        body = {"threadId": thread, "runId": "r1",
                "messages": [{"id": "u1", "role": "user", "content": "fail"}]}  # fmt: skip
        headers = {"Authorization": f"Bearer {doors.alice}"}
        with httpx.stream("POST", f"{doors.url}/agui", json=body, headers=headers,
                          timeout=30) as response:  # fmt: skip
            events = [data for _kind, _id, data in sse(response)]
        check(events)
        assert events[-1]["type"] == "RUN_ERROR"
        assert "told to fail" in events[-1]["message"]


class TestInterrupts:
    def ask(self, doors: Doors, thread: str, text: str) -> dict[str, Any]:
        events = events_of(client(doors, thread, text=text))
        check(events)
        outcome = finished(events)["outcome"]
        assert outcome["type"] == "interrupt"
        [interrupt] = outcome["interrupts"]
        return dict(interrupt)

    def test_approval_is_an_interrupt(self, doors: Doors, thread: str) -> None:
        """An approval ends the run with one interrupt naming the request and its call."""
        interrupt = self.ask(doors, thread, "order pen 2")
        assert interrupt["reason"] == "tool_approval"
        assert interrupt["toolCallId"]
        assert interrupt["responseSchema"]["required"] == ["approved"]

    def test_resume_approves(self, doors: Doors, thread: str) -> None:
        """resume[] with approved runs the tool and the run finishes with success."""
        interrupt = self.ask(doors, thread, "order pen 2")
        resume = [
            {"interruptId": interrupt["id"], "status": "resolved", "payload": {"approved": True}}
        ]
        events = events_of(client(doors, thread, resume=resume))
        check(events)
        [result] = [e for e in events if e["type"] == "TOOL_CALL_RESULT"]
        assert result["content"] == "ordered 2 pen"
        assert finished(events)["outcome"] == {"type": "success"}

    def test_resume_approves_edited_arguments(self, doors: Doors, thread: str) -> None:
        """An approval with edited arguments runs the tool with them."""
        interrupt = self.ask(doors, thread, "order pen 2")
        payload = {"approved": True, "arguments": {"item": "ink", "qty": 5}}
        resume = [{"interruptId": interrupt["id"], "status": "resolved", "payload": payload}]
        events = events_of(client(doors, thread, resume=resume))
        [result] = [e for e in events if e["type"] == "TOOL_CALL_RESULT"]
        assert result["content"] == "ordered 5 ink"

    def test_resume_rejects_with_a_reason(self, doors: Doors, thread: str) -> None:
        """A rejection with a reason does not run the tool."""
        interrupt = self.ask(doors, thread, "order pen 2")
        payload = {"approved": False, "reason": "over budget"}
        resume = [{"interruptId": interrupt["id"], "status": "resolved", "payload": payload}]
        events = events_of(client(doors, thread, resume=resume))
        check(events)
        [result] = [e for e in events if e["type"] == "TOOL_CALL_RESULT"]
        assert "over budget" in result["content"]
        assert "ordered" not in text_of(events)

    def test_external_call_answered_with_an_output(self, doors: Doors, thread: str) -> None:
        """An external tool's call is an interrupt; its output comes in resume[]."""
        interrupt = self.ask(doors, thread, "quote acme")
        assert interrupt["reason"] == "external_tool"
        resume = [
            {"interruptId": interrupt["id"], "status": "resolved", "payload": {"output": "42 EUR"}}
        ]
        events = events_of(client(doors, thread, resume=resume))
        assert text_of(events).endswith("done: 42 EUR")


class TestConnect:
    def test_reconnect_after_the_client_was_killed(self, tmp_path: Path) -> None:
        """A client killed mid-run; connect replays the thread and follows the run to its
        end: every event once, the whole answer."""
        url = f"sqlite:///{tmp_path / 'agentnb.sqlite'}"
        token = issue(url, "alice")
        with ServerProcess(url, agent="tests.doors._agent:slow") as server:
            args = {"url": server.url, "token": token, "threadId": "killed"}
            proc = js.start("agui_client.cjs", {**args, "mode": "run", "text": "long 30"})
            seen = 0
            while seen < 5:
                event = js.read_line(proc).get("event", {})
                seen += event.get("type") == "TEXT_MESSAGE_CONTENT"
            js.kill(proc)
            lines = js.run("agui_client.cjs", {**args, "mode": "connect", "runs": 1})
        events = events_of(lines)
        check(events)
        assert [e["type"] for e in events].count("RUN_STARTED") == 1
        answer = "\n".join(f"{i}. line **{i}** of the answer" for i in range(1, 31))
        assert text_of(events) == "long 30" + answer
        messages = lines[-1]["result"]["messages"]
        assert messages[-1]["content"] == answer

    def test_connect_from_a_cursor_mid_run(self, tmp_path: Path) -> None:
        """connect after a cursor taken mid-run sends exactly the rest of that run."""
        url = f"sqlite:///{tmp_path / 'agentnb.sqlite'}"
        token = issue(url, "alice")
        headers = {"Authorization": f"Bearer {token}"}
        with ServerProcess(url, agent="tests.doors._agent:slow") as server:
            body = {
                "threadId": "cut",
                "runId": "r1",
                "messages": [{"id": "u1", "role": "user", "content": "long 20"}],
            }
            first: list[dict[str, Any]] = []
            with httpx.stream(
                "POST", f"{server.url}/agui", json=body, headers=headers, timeout=30
            ) as response:
                for _kind, id_, data in sse(response):
                    first.append(data)
                    cursor = id_
                    if sum(e["type"] == "TEXT_MESSAGE_CONTENT" for e in first) >= 4:
                        break
            args = {"url": server.url, "token": token, "threadId": "cut", "after": cursor}
            rest = events_of(js.run("agui_client.cjs", {**args, "mode": "connect", "runs": 1}))
        check(rest)
        answer = "\n".join(f"{i}. line **{i}** of the answer" for i in range(1, 21))
        assistant = [e for e in first if e.get("messageId", "").startswith("msg_mc_")]
        assert text_of(assistant) + text_of(rest) == answer

    def test_follows_later_runs_started_over_v1(self, doors: Doors, thread: str) -> None:
        """A connect stream keeps following the thread across two later runs started by
        another client."""
        client(doors, thread, text="opening")
        args = {"url": doors.url, "token": doors.alice, "threadId": thread}
        proc = js.start("agui_client.cjs", {**args, "mode": "connect", "runs": 3})
        events = [js.read_line(proc)["event"]]
        while events[-1]["type"] != "RUN_FINISHED":
            events.append(js.read_line(proc)["event"])
        with httpx.Client(
            base_url=doors.url, headers={"Authorization": f"Bearer {doors.alice}"}, timeout=30
        ) as v1:
            for text in ("later one", "later two"):
                receipt = v1.post(f"/v1/sessions/{thread}/turns", json={"input": text})
                assert receipt.is_success, receipt.text
                waited = v1.post(f"/v1/sessions/{thread}/wait", json=receipt.json())
                assert waited.json()["outcome"]["status"] == "completed"
        events += events_of(js.finish(proc))
        check(events)
        assert [e["type"] for e in events].count("RUN_FINISHED") == 3
        assert "You said: later two" in text_of(events)


class TestBadInput:
    def headers(self, doors: Doors, token: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {token or doors.alice}"}

    def test_another_users_thread_is_404(self, doors: Doors, thread: str) -> None:
        """connect to another user's thread is a 404 problem, as to a missing one."""
        client(doors, thread, text="mine")
        answer = httpx.get(
            f"{doors.url}/agui/{thread}/connect", headers=self.headers(doors, doors.bob)
        )
        assert answer.status_code == 404
        assert answer.json()["type"] == "SessionNotFound"

    def test_malformed_input(self, doors: Doors) -> None:
        """A body that is not a RunAgentInput is a 400 problem."""
        answer = httpx.post(
            f"{doors.url}/agui", json={"threadId": "x"}, headers=self.headers(doors)
        )
        assert answer.status_code == 400
        assert "RunAgentInput" in answer.json()["detail"]

    def test_oversized_input(self, doors: Doors) -> None:
        """A body over the service's limit is a 413 problem."""
        body = {
            "threadId": "big",
            "runId": "r",
            "messages": [{"id": "u", "role": "user", "content": "x" * (2 << 20)}],
        }
        answer = httpx.post(f"{doors.url}/agui", json=body, headers=self.headers(doors))
        assert answer.status_code == 413

    def test_resume_of_no_interrupt_writes_nothing(self, doors: Doors, thread: str) -> None:
        """A resume entry for an interrupt that does not exist is refused; nothing is written."""
        client(doors, thread, text="calm")
        heads = doors.heads(thread)
        body = {
            "threadId": thread,
            "runId": "r",
            "messages": [],
            "resume": [
                {"interruptId": "req_nope", "status": "resolved", "payload": {"approved": True}}
            ],
        }
        answer = httpx.post(f"{doors.url}/agui", json=body, headers=self.headers(doors))
        assert answer.status_code == 409
        assert answer.json()["type"] == "InvalidAnswer"
        assert doors.heads(thread) == heads

    def test_nothing_to_do(self, doors: Doors, thread: str) -> None:
        """A run with neither a user message nor resume entries is a 400."""
        body = {"threadId": thread, "runId": "r", "messages": []}
        answer = httpx.post(f"{doors.url}/agui", json=body, headers=self.headers(doors))
        assert answer.status_code == 400

    def test_bad_cursor(self, doors: Doors, thread: str) -> None:
        """A cursor of another thread is a 400 problem."""
        client(doors, thread, text="here")
        answer = httpx.get(
            f"{doors.url}/agui/{thread}/connect",
            params={"after": "other:1"},
            headers=self.headers(doors),
        )
        assert answer.status_code == 400
        assert answer.json()["type"] == "InvalidCursor"


class TestReasoning:
    THOUGHT = "Weigh <b>both</b> first."

    def test_reasoning_streams_as_reasoning_before_the_text(
        self, doors: Doors, thread: str
    ) -> None:
        """A model's streamed reasoning arrives as REASONING_* events, all before the
        answer's text, never as text; the client keeps it as a reasoning message."""
        lines = client(doors, thread, text="think")
        events = events_of(lines)
        check(events)
        types = [e["type"] for e in events]
        thought = "".join(e["delta"] for e in events if e["type"] == "REASONING_MESSAGE_CONTENT")
        assert thought == self.THOUGHT
        answer_starts = [
            i
            for i, e in enumerate(events)
            if e["type"] == "TEXT_MESSAGE_START" and e.get("role") == "assistant"
        ]
        assert types.index("REASONING_START") < types.index("REASONING_END") < answer_starts[0]
        assert self.THOUGHT not in text_of(events)
        messages = lines[-1]["result"]["messages"]
        assert [m["content"] for m in messages if m["role"] == "reasoning"] == [self.THOUGHT]
        assert messages[-1]["content"] == "Thought it **through**."

    def test_snapshot_holds_the_reasoning(self, doors: Doors, thread: str) -> None:
        """The next run's MESSAGES_SNAPSHOT has the reply's reasoning as a reasoning message
        just before the reply."""
        client(doors, thread, text="think")
        events = events_of(client(doors, thread, text="again"))
        [snapshot] = [e for e in events if e["type"] == "MESSAGES_SNAPSHOT"]
        roles = [(m["role"], m["content"]) for m in snapshot["messages"]]
        assert roles == [
            ("user", "think"),
            ("reasoning", self.THOUGHT),
            ("assistant", "Thought it **through**."),
        ]
