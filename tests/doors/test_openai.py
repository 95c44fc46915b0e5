"""The OpenAI door (``/openai/v1``) driven by the real ``openai`` Python SDK against
``agentnb serve``: background responses, streams, cancel, a stream resumed with
``starting_after`` across a kill -9 of the server, conversations, approvals, external
tools, and the bad inputs (each an error in the Responses shape, nothing written)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.doors.conftest import AGENT, Doors
from tests.service.helpers import WAIT, ServerProcess, issue

openai = pytest.importorskip("openai")

TERMINAL = {"completed", "failed", "cancelled", "incomplete"}


@pytest.fixture
def client(doors: Doors) -> Iterator[Any]:
    with openai.OpenAI(base_url=f"{doors.url}/openai/v1", api_key=doors.alice) as c:
        yield c


@pytest.fixture
def bob_client(doors: Doors) -> Iterator[Any]:
    with openai.OpenAI(base_url=f"{doors.url}/openai/v1", api_key=doors.bob) as c:
        yield c


def settle(client: Any, response: Any) -> Any:
    """Retrieve until the response ends (a guard, never a speed check)."""
    deadline = time.monotonic() + WAIT
    while response.status not in TERMINAL:
        assert time.monotonic() < deadline, f"{response.id} did not end: {response.status}"
        time.sleep(0.05)
        response = client.responses.retrieve(response.id)
    return response


def items_of(response: Any, kind: str) -> list[Any]:
    return [item for item in response.output if item.type == kind]


class TestModels:
    def test_the_agent_is_the_model(self, client: Any) -> None:
        """GET /models lists the served agent by its id."""
        assert [m.id for m in client.models.list()] == [AGENT]


class TestBackground:
    def test_background_then_retrieve(self, client: Any) -> None:
        """A background response comes back queued or in progress and completes on retrieve."""
        response = client.responses.create(model=AGENT, input="hello door", background=True)
        assert response.status in {"queued", "in_progress", "completed"}
        assert response.background is True
        done = settle(client, response)
        assert done.status == "completed"
        assert done.output_text == "You said: hello door"
        assert done.usage is not None
        assert done.usage.output_tokens > 0

    def test_foreground_waits_for_the_answer(self, client: Any) -> None:
        """Without background, create returns the completed response."""
        response = client.responses.create(model=AGENT, input="plain")
        assert response.status == "completed"
        assert response.output_text == "You said: plain"


class TestStream:
    def test_stream_events_in_order(self, client: Any) -> None:
        """stream=True gives created, in_progress, the text deltas and completed, numbered
        without gaps; the deltas join to the answer."""
        events = list(client.responses.create(model=AGENT, input="long 5", stream=True))
        types = [e.type for e in events]
        assert types[0] == "response.created"
        assert types[1] == "response.in_progress"
        assert types[-1] == "response.completed"
        assert [e.sequence_number for e in events] == list(range(len(events)))
        text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        assert text == events[-1].response.output_text
        assert "5. line **5** of the answer" in text
        done = [e for e in events if e.type == "response.output_text.done"]
        assert [e.text for e in done] == [text]


class TestFailure:
    def test_failed_turn_is_a_failed_response(self, client: Any) -> None:
        """A turn whose model fails is a failed response with the reason as its error."""
        events = list(client.responses.create(model=AGENT, input="fail", stream=True))
        assert events[-1].type == "response.failed"
        failed = client.responses.retrieve(events[0].response.id)
        assert failed.status == "failed"
        assert "told to fail" in failed.error.message


class TestCancel:
    def test_cancel_a_running_response(self, client: Any, doors: Doors) -> None:
        """cancel stops the running turn: the response and its task are cancelled."""
        response = client.responses.create(model=AGENT, input="snooze 30", background=True)
        deadline = time.monotonic() + WAIT
        while client.responses.retrieve(response.id).status != "in_progress":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        cancelled = client.responses.cancel(response.id)
        assert cancelled.status == "cancelled"
        events = doors.events(cancelled.conversation.id)
        assert events[-1].type == "turn/cancelled"

    def test_cancel_an_ended_response_changes_nothing(self, client: Any, doors: Doors) -> None:
        """Cancelling a completed response answers it as it is and writes nothing."""
        response = client.responses.create(model=AGENT, input="finished")
        heads = doors.heads(response.conversation.id)
        assert client.responses.cancel(response.id).status == "completed"
        assert doors.heads(response.conversation.id) == heads


class TestResumeAfterKill:
    def test_stream_resumes_after_kill_9(self, tmp_path: Path) -> None:
        """A stream cut by a kill -9 of the server resumes with starting_after after a
        restart: every event once, numbered as before, ending the response."""
        url = f"sqlite:///{tmp_path / 'agentnb.sqlite'}"
        token = issue(url, "alice")
        with ServerProcess(url, agent="tests.doors._agent:slow") as server:
            c = openai.OpenAI(base_url=f"{server.url}/openai/v1", api_key=token, max_retries=0)
            stream = c.responses.create(model=AGENT, input="long 40", stream=True, background=True)
            first = []
            for event in stream:
                first.append(event)
                if sum(e.type == "response.output_text.delta" for e in first) >= 5:
                    break
            response_id = first[0].response.id
            server.kill()
            server.start()
            rest = list(
                c.responses.retrieve(
                    response_id, stream=True, starting_after=first[-1].sequence_number
                )
            )
            whole = list(c.responses.retrieve(response_id, stream=True))
            c.close()
        numbers = [e.sequence_number for e in first + rest]
        assert numbers == list(range(len(numbers)))
        assert [e.model_dump() for e in whole] == [e.model_dump() for e in first + rest]
        assert rest[-1].type in {"response.incomplete", "response.completed"}
        text = "".join(e.delta for e in whole if e.type == "response.output_text.delta")
        assert text.startswith("1. line **1** of the answer")


class TestConversations:
    def test_conversation_and_its_items(self, client: Any) -> None:
        """A conversation holds its responses: its items are the messages, oldest first."""
        conversation = client.conversations.create(metadata={"topic": "doors"})
        assert client.conversations.retrieve(conversation.id).metadata == {"topic": "doors"}
        client.responses.create(model=AGENT, input="one", conversation=conversation.id)
        client.responses.create(model=AGENT, input="two", conversation={"id": conversation.id})
        items = list(client.conversations.items.list(conversation.id, order="asc"))
        texts = [(i.role, i.content[0].text) for i in items if i.type == "message"]
        assert texts == [
            ("user", "one"),
            ("assistant", "You said: one"),
            ("user", "two"),
            ("assistant", "You said: two"),
        ]

    def test_previous_response_id_continues_the_session(self, client: Any) -> None:
        """previous_response_id puts the new response in the same conversation."""
        first = client.responses.create(model=AGENT, input="first")
        second = client.responses.create(model=AGENT, input="second", previous_response_id=first.id)
        assert second.conversation.id == first.conversation.id

    def test_items_pages_follow_after(self, client: Any) -> None:
        """Pages of items chain by `after` and together list every item once."""
        conversation = client.conversations.create()
        for text in ("a", "b", "c"):
            client.responses.create(model=AGENT, input=text, conversation=conversation.id)
        page = client.conversations.items.list(conversation.id, limit=2)
        ids = [i.id for i in page.data]
        while page.has_more:
            page = client.conversations.items.list(conversation.id, limit=2, after=page.last_id)
            ids += [i.id for i in page.data]
        assert len(ids) == len(set(ids)) == 6


class TestApproval:
    def test_approve_through_mcp_approval_response(self, client: Any) -> None:
        """An approval is an mcp_approval_request item; approving it runs the tool."""
        asked = client.responses.create(model=AGENT, input="order pen 2")
        [request] = items_of(asked, "mcp_approval_request")
        assert request.name == "create_order"
        assert '"qty": 2' in request.arguments
        answered = client.responses.create(
            model=AGENT,
            previous_response_id=asked.id,
            input=[
                {
                    "type": "mcp_approval_response",
                    "approval_request_id": request.id,
                    "approve": True,
                }
            ],
        )
        [call] = items_of(answered, "mcp_call")
        assert call.output == "ordered 2 pen"
        assert answered.output_text == "done: ordered 2 pen"

    def test_reject_with_a_reason(self, client: Any) -> None:
        """A rejection with a reason does not run the tool; the model is told why."""
        asked = client.responses.create(model=AGENT, input="order ink 9")
        [request] = items_of(asked, "mcp_approval_request")
        answered = client.responses.create(
            model=AGENT,
            conversation=asked.conversation.id,
            input=[
                {
                    "type": "mcp_approval_response",
                    "approval_request_id": request.id,
                    "approve": False,
                    "reason": "too many",
                }
            ],
        )
        [call] = items_of(answered, "mcp_call")
        assert call.error is not None
        assert "too many" in call.error
        assert "ordered" not in answered.output_text


class TestExternalTool:
    def test_function_call_output_answers_an_external_call(self, client: Any) -> None:
        """An external tool's call is a function_call item; function_call_output answers it."""
        asked = client.responses.create(model=AGENT, input="quote acme")
        [call] = items_of(asked, "function_call")
        assert call.name == "annual_quote"
        assert call.arguments == '{"vendor": "acme"}'
        answered = client.responses.create(
            model=AGENT,
            previous_response_id=asked.id,
            input=[{"type": "function_call_output", "call_id": call.call_id, "output": "42 EUR"}],
        )
        assert answered.output_text == "done: 42 EUR"


class TestBadInput:
    def test_unsupported_parameter(self, client: Any) -> None:
        """A parameter the door does not support is a 400 naming it."""
        with pytest.raises(openai.BadRequestError) as caught:
            client.responses.create(model=AGENT, input="x", temperature=0.2)
        assert caught.value.body["param"] == "temperature"
        assert caught.value.body["type"] == "invalid_request_error"

    def test_hosted_tool(self, client: Any) -> None:
        """A hosted tool is a 400 naming the tools entry."""
        with pytest.raises(openai.BadRequestError) as caught:
            client.responses.create(model=AGENT, input="x", tools=[{"type": "web_search"}])
        assert caught.value.body["param"] == "tools[0]"

    def test_tool_the_agent_lacks(self, client: Any) -> None:
        """A function tool the agent does not have is a 400."""
        tool = {"type": "function", "name": "launch", "parameters": {"type": "object"}}
        with pytest.raises(openai.BadRequestError) as caught:
            client.responses.create(model=AGENT, input="x", tools=[tool])
        assert "launch" in caught.value.body["message"]

    def test_unknown_model(self, client: Any) -> None:
        """A model that is not the agent is a 400 naming the parameter."""
        with pytest.raises(openai.BadRequestError) as caught:
            client.responses.create(model="gpt-4o", input="x")
        assert caught.value.body["param"] == "model"

    def test_malformed_body(self, doors: Doors) -> None:
        """A body that is not JSON is a 400 in the Responses shape."""
        answer = httpx.post(
            f"{doors.url}/openai/v1/responses",
            content=b"{not json",
            headers={"Authorization": f"Bearer {doors.alice}", "Content-Type": "application/json"},
        )
        assert answer.status_code == 400
        assert answer.json()["error"]["param"] == "body"

    def test_oversized_body(self, doors: Doors) -> None:
        """A body over the service's limit is a 413 in the Responses shape."""
        answer = httpx.post(
            f"{doors.url}/openai/v1/responses",
            json={"model": AGENT, "input": "x" * (2 << 20)},
            headers={"Authorization": f"Bearer {doors.alice}"},
        )
        assert answer.status_code == 413
        assert answer.json()["error"]["code"] == "PayloadTooLarge"

    def test_answer_to_no_request_writes_nothing(self, client: Any, doors: Doors) -> None:
        """An approval of a request that does not exist is refused; nothing is written."""
        first = client.responses.create(model=AGENT, input="calm")
        heads = doors.heads(first.conversation.id)
        with pytest.raises(openai.APIStatusError) as caught:
            client.responses.create(
                model=AGENT,
                previous_response_id=first.id,
                input=[
                    {
                        "type": "mcp_approval_response",
                        "approval_request_id": "req_nope",
                        "approve": True,
                    }
                ],
            )
        assert caught.value.status_code == 409
        assert caught.value.body["code"] == "InvalidAnswer"
        with pytest.raises(openai.BadRequestError):
            client.responses.create(
                model=AGENT,
                previous_response_id=first.id,
                input=[{"type": "function_call_output", "call_id": "call_nope", "output": "1"}],
            )
        assert doors.heads(first.conversation.id) == heads

    def test_another_users_response_and_conversation(self, client: Any, bob_client: Any) -> None:
        """Another user's response and conversation are a 404, as missing ones are."""
        mine = client.responses.create(model=AGENT, input="private")
        with pytest.raises(openai.NotFoundError):
            bob_client.responses.retrieve(mine.id)
        with pytest.raises(openai.NotFoundError):
            bob_client.conversations.retrieve(mine.conversation.id)
        with pytest.raises(openai.NotFoundError) as caught:
            bob_client.responses.create(model=AGENT, input="x", previous_response_id=mine.id)
        assert caught.value.body["code"] == "SessionNotFound"

    def test_unknown_response_id(self, client: Any) -> None:
        """A response id this door did not make is a 404."""
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve("resp_bogus")

    def test_no_token(self, doors: Doors) -> None:
        """Without a token the door answers 401 in the Responses shape."""
        answer = httpx.get(f"{doors.url}/openai/v1/models")
        assert answer.status_code == 401
        assert answer.json()["error"]["type"] == "authentication_error"

    def test_message_mixed_with_answers(self, client: Any, doors: Doors) -> None:
        """A new message together with answers is refused before anything is written."""
        first = client.responses.create(model=AGENT, input="steady")
        heads = doors.heads(first.conversation.id)
        with pytest.raises(openai.BadRequestError):
            client.responses.create(
                model=AGENT,
                previous_response_id=first.id,
                input=[
                    {"role": "user", "content": "more"},
                    {"type": "function_call_output", "call_id": "c", "output": "1"},
                ],
            )
        assert doors.heads(first.conversation.id) == heads


class TestReasoning:
    THOUGHT = "Weigh <b>both</b> first."

    def test_reasoning_streams_as_a_reasoning_item_before_the_text(self, client: Any) -> None:
        """A model's streamed reasoning is a reasoning item whose summary streams with
        response.reasoning_summary_text.delta, done before the message item starts."""
        events = list(client.responses.create(model=AGENT, input="think", stream=True))
        types = [e.type for e in events]
        deltas = [e for e in events if e.type == "response.reasoning_summary_text.delta"]
        assert "".join(e.delta for e in deltas) == self.THOUGHT
        assert all(isinstance(e, openai.types.responses.ResponseReasoningSummaryTextDeltaEvent)
                   for e in deltas)  # fmt: skip
        added = [e.item.type for e in events if e.type == "response.output_item.added"]
        assert added == ["reasoning", "message"]
        assert types.index("response.reasoning_summary_text.done") < types.index(
            "response.output_text.delta"
        )
        assert [e.sequence_number for e in events] == list(range(len(events)))
        done = events[-1].response
        [reasoning] = items_of(done, "reasoning")
        assert [s.text for s in reasoning.summary] == [self.THOUGHT]
        assert done.output_text == "Thought it **through**."

    def test_stream_helper_accumulates_the_reasoning(self, client: Any) -> None:
        """The SDK's responses.stream() helper folds the events into a final response that
        holds the reasoning item and the answer."""
        with client.responses.stream(model=AGENT, input="think") as stream:
            final = stream.get_final_response()
        [reasoning] = items_of(final, "reasoning")
        assert reasoning.summary[0].text == self.THOUGHT
        assert final.output_text == "Thought it **through**."

    def test_conversation_items_hold_the_reasoning(self, client: Any) -> None:
        """The conversation's items have the reply's reasoning item before its message."""
        conversation = client.conversations.create()
        client.responses.create(model=AGENT, input="think", conversation=conversation.id)
        items = list(client.conversations.items.list(conversation.id, order="asc"))
        assert [i.type for i in items] == ["message", "reasoning", "message"]
        assert items[1].summary[0].text == self.THOUGHT
