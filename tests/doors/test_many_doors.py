"""One session, many doors: a turn started over ``/v1`` is answered through the OpenAI door,
and every door reads the same log (no door keeps a copy)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.doors.conftest import AGENT, Doors

openai = pytest.importorskip("openai")


class TestOneSessionManyDoors:
    def test_v1_turn_answered_from_openai_and_seen_everywhere(self, doors: Doors) -> None:
        """An approval asked in a turn started over /v1 is answered with the openai client;
        /v1, the conversation's items and an AG-UI replay all show the same answer."""
        headers = {"Authorization": f"Bearer {doors.alice}"}
        with httpx.Client(base_url=doors.url, headers=headers, timeout=30) as v1:
            assert v1.post("/v1/sessions", json={"session_id": "shared"}).status_code == 201
            receipt = v1.post("/v1/sessions/shared/turns", json={"input": "order cup 3"}).json()
            waited = v1.post("/v1/sessions/shared/wait", json=receipt).json()
            assert waited["outcome"]["status"] == "suspended"
            [request_id] = v1.get("/v1/sessions/shared").json()["pending"]
            client: Any = openai.OpenAI(base_url=f"{doors.url}/openai/v1", api_key=doors.alice)
            with client:
                answered = client.responses.create(
                    model=AGENT,
                    conversation="shared",
                    input=[
                        {
                            "type": "mcp_approval_response",
                            "approval_request_id": request_id,
                            "approve": True,
                        }
                    ],
                )
                assert answered.output_text == "done: ordered 3 cup"
                items = list(client.conversations.items.list("shared", order="asc"))
            texts = [i.content[0].text for i in items if i.type == "message"]
            assert texts == ["order cup 3", "done: ordered 3 cup"]
            messages = v1.get("/v1/sessions/shared").json()["messages"]
            assert [m["text"] for m in messages if m["role"] != "tool" and m["text"]] == texts
            with v1.stream("GET", "/agui/shared/connect") as stream:
                seen = ""
                for line in stream.iter_lines():
                    if '"TEXT_MESSAGE_CONTENT"' in line:
                        seen += httpx.Response(200, content=line[6:]).json()["delta"]
                    if '"RUN_FINISHED"' in line and "done:" in seen:
                        break
            assert seen == "order cup 3done: ordered 3 cup"
