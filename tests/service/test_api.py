"""The /v1 API over HTTP against ``agentnb serve`` (a subprocess on SQLite): each route does
what its ``Session`` verb does, and each bad input gets its documented status and problem
type with nothing written (the store's heads unchanged)."""

from __future__ import annotations

from typing import Any

import httpx

from tests.service.conftest import Service
from tests.service.helpers import issue, sse

PROBLEM = "application/problem+json"


def problem(response: httpx.Response, status: int, type_: str) -> dict[str, Any]:
    """The problem body of ``response``, checked to be the documented one."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM), response.headers
    body: dict[str, Any] = response.json()
    assert body["type"] == type_, body
    assert body["status"] == status
    assert body["detail"]
    assert "Traceback" not in response.text
    return body


def submit(client: httpx.Client, sid: str, text: str, **headers: str) -> dict[str, Any]:
    response = client.post(f"/v1/sessions/{sid}/turns", json={"input": text}, headers=headers)
    assert response.status_code == 202, response.text
    data: dict[str, Any] = response.json()
    return data


def until(client: httpx.Client, sid: str, type_: str) -> dict[str, Any]:
    """The first committed frame of ``type_``, waiting on the session's stream for it."""
    with client.stream("GET", f"/v1/sessions/{sid}/stream", timeout=30) as response:
        for kind, _, data in sse(response):
            if kind == "committed" and data["type"] == type_:
                frame: dict[str, Any] = data
                return frame
    raise AssertionError(f"the stream ended before a {type_} event")


def wait(client: httpx.Client, sid: str, receipt: dict[str, Any]) -> dict[str, Any]:
    response = client.post(f"/v1/sessions/{sid}/wait", json={**receipt, "timeout": 30})
    assert response.status_code == 200, response.text
    outcome: dict[str, Any] = response.json()["outcome"]
    assert outcome is not None, "the turn did not settle"
    return outcome


class TestAccess:
    def test_no_token_is_401(self, service: Service, sid: str) -> None:
        """A request without credentials is a 401 Unauthorized problem with a challenge."""
        with service.client(None) as anonymous:
            response = anonymous.get(f"/v1/sessions/{sid}")
        problem(response, 401, "Unauthorized")
        assert response.headers["www-authenticate"].startswith("Bearer")

    def test_wrong_or_malformed_token_is_401_and_never_echoed(
        self, service: Service, sid: str
    ) -> None:
        """An unknown, tampered or malformed token is a 401 whose body does not echo it."""
        forged = service.alice[:-4] + "AAAA"
        for token in (forged, "tok_0000000000000000." + "A" * 43, "not-a-token"):
            with service.client(token) as client:
                response = client.get("/v1/sessions")
            problem(response, 401, "Unauthorized")
            assert token not in response.text

    def test_revoked_token_is_refused_at_once(self, service: Service) -> None:
        """A token revoked in the store is refused by the next request."""
        token = issue(service.store_url, "carol")
        with service.client(token) as carol:
            assert carol.get("/v1/sessions").status_code == 200
            store_token_id = token.split(".")[0]
            assert carol.delete(f"/v1/tokens/{store_token_id}").status_code == 200
            problem(carol.get("/v1/sessions"), 401, "Unauthorized")

    def test_another_users_session_is_404(
        self, service: Service, alice: httpx.Client, bob: httpx.Client, sid: str
    ) -> None:
        """Bob cannot read, change, list or stream alice's session: 404 as if none existed."""
        before = service.heads(sid)
        problem(bob.get(f"/v1/sessions/{sid}"), 404, "SessionNotFound")
        problem(bob.post(f"/v1/sessions/{sid}/turns", json={"input": "x"}), 404, "SessionNotFound")
        problem(bob.get(f"/v1/sessions/{sid}/stream"), 404, "SessionNotFound")
        problem(bob.delete(f"/v1/sessions/{sid}"), 404, "SessionNotFound")
        listed = bob.get("/v1/sessions", params={"archived": "all", "limit": 1000}).json()
        assert sid not in [s["key"]["session_id"] for s in listed["sessions"]]
        assert service.heads(sid) == before

    def test_same_session_id_is_a_separate_session_per_user(
        self, alice: httpx.Client, bob: httpx.Client, sid: str
    ) -> None:
        """Bob creating a session of alice's id gets his own, empty one."""
        submit(alice, sid, "hello")
        assert bob.post("/v1/sessions", json={"session_id": sid}).status_code == 201
        assert bob.get(f"/v1/sessions/{sid}").json()["tasks"] == []


class TestBadInput:
    def test_unknown_session_is_404(self, alice: httpx.Client) -> None:
        """A session id nobody has is a SessionNotFound problem."""
        problem(alice.get("/v1/sessions/never-made"), 404, "SessionNotFound")

    def test_oversized_body_is_413_and_writes_nothing(
        self, service: Service, alice: httpx.Client, sid: str
    ) -> None:
        """A body over --max-body (1 MiB) is a 413 PayloadTooLarge; nothing is written."""
        before = service.heads(sid)
        big = {"input": "x" * (1 << 20)}
        problem(alice.post(f"/v1/sessions/{sid}/turns", json=big), 413, "PayloadTooLarge")
        assert service.heads(sid) == before

    def test_streamed_oversized_body_is_413(
        self, service: Service, alice: httpx.Client, sid: str
    ) -> None:
        """A chunked body (no Content-Length) that passes the cap is refused too."""
        before = service.heads(sid)

        def chunks() -> Any:
            yield b'{"input": "'
            for _ in range(40):
                yield b"y" * 32768
            yield b'"}'

        response = alice.post(
            f"/v1/sessions/{sid}/turns",
            content=chunks(),
            headers={"Content-Type": "application/json"},
        )
        problem(response, 413, "PayloadTooLarge")
        assert service.heads(sid) == before

    def test_bad_json_is_400(self, service: Service, alice: httpx.Client, sid: str) -> None:
        """A body that is not JSON, or misses a field, is a 400 InvalidInput problem."""
        before = service.heads(sid)
        bad = alice.post(
            f"/v1/sessions/{sid}/turns",
            content=b"{not json",
            headers={"Content-Type": "application/json"},
        )
        problem(bad, 400, "InvalidInput")
        problem(alice.post(f"/v1/sessions/{sid}/turns", json={"text": "x"}), 400, "InvalidInput")
        problem(alice.post(f"/v1/sessions/{sid}/turns", json={"input": 5}), 400, "InvalidInput")
        assert service.heads(sid) == before

    def test_empty_input_is_400(self, service: Service, alice: httpx.Client, sid: str) -> None:
        """An empty task is refused by the verb (InvalidInput), nothing written."""
        before = service.heads(sid)
        problem(alice.post(f"/v1/sessions/{sid}/turns", json={"input": ""}), 400, "InvalidInput")
        assert service.heads(sid) == before

    def test_bad_ids_are_400_before_the_store(self, alice: httpx.Client, sid: str) -> None:
        """A session or turn id with control characters is refused before any store call."""
        problem(alice.get("/v1/sessions/bad%01id"), 400, "InvalidInput")
        problem(alice.post("/v1/sessions", json={"session_id": "a/b"}), 400, "InvalidInput")
        problem(alice.get(f"/v1/sessions/{sid}/turns/bad%02turn"), 400, "InvalidInput")

    def test_idempotency_key_reuse(self, service: Service, alice: httpx.Client, sid: str) -> None:
        """Same Idempotency-Key and input: the same receipt; other input: 409, unwritten."""
        first = submit(alice, sid, "hello", **{"Idempotency-Key": "k-1"})
        again = submit(alice, sid, "hello", **{"Idempotency-Key": "k-1"})
        assert again["command_id"] == first["command_id"]
        assert again["turn_id"] == first["turn_id"]
        before = service.heads(sid)
        other = alice.post(
            f"/v1/sessions/{sid}/turns", json={"input": "other"}, headers={"Idempotency-Key": "k-1"}
        )
        problem(other, 409, "IdempotencyConflict")
        assert service.heads(sid)[1] == before[1]

    def test_archived_session_is_423(self, service: Service, alice: httpx.Client, sid: str) -> None:
        """New work for an archived session is a 423 SessionArchived; unarchive lets it in."""
        assert alice.post(f"/v1/sessions/{sid}/archive").json()["archived_at"] is not None
        before = service.heads(sid)
        problem(
            alice.post(f"/v1/sessions/{sid}/turns", json={"input": "x"}), 423, "SessionArchived"
        )
        assert service.heads(sid) == before
        assert alice.post(f"/v1/sessions/{sid}/unarchive").json()["archived_at"] is None
        submit(alice, sid, "back again")

    def test_deleted_session_is_410(self, alice: httpx.Client, sid: str) -> None:
        """A deleted session answers 410 SessionDeleted, for reads and for work."""
        tombstone = alice.delete(f"/v1/sessions/{sid}", params={"reason": "test"}).json()
        assert tombstone["reason"] == "test"
        problem(alice.get(f"/v1/sessions/{sid}"), 410, "SessionDeleted")
        problem(alice.post(f"/v1/sessions/{sid}/turns", json={"input": "x"}), 410, "SessionDeleted")
        problem(alice.post("/v1/sessions", json={"session_id": sid}), 410, "SessionDeleted")

    def test_queue_full_is_429_with_retry_after(
        self, service: Service, alice: httpx.Client, sid: str
    ) -> None:
        """Past the queue's capacity a submit is a 429 QueueFull (queue, limit, Retry-After)."""
        receipt = submit(alice, sid, "order pen 1")
        assert wait(alice, sid, receipt)["status"] == "suspended"  # the queue parks behind it
        for i in range(64):
            submit(alice, sid, f"queued {i}")
        before = service.heads(sid)
        response = alice.post(f"/v1/sessions/{sid}/turns", json={"input": "one too many"})
        body = problem(response, 429, "QueueFull")
        assert (body["queue"], body["limit"]) == ("commands", 64)
        assert response.headers["retry-after"].isdigit()
        assert service.heads(sid) == before

    def test_history_and_events_limits(self, alice: httpx.Client, sid: str) -> None:
        """Page limits past 256 and cursors that are not the service's are 400 problems."""
        problem(
            alice.get(f"/v1/sessions/{sid}/history", params={"limit": 300}), 400, "InvalidLimit"
        )
        bad = alice.get(f"/v1/sessions/{sid}/history", params={"after": "garbage"})
        problem(bad, 400, "InvalidCursor")
        problem(alice.get(f"/v1/sessions/{sid}/events", params={"limit": 300}), 400, "InvalidInput")
        problem(alice.get(f"/v1/sessions/{sid}/events", params={"after": -1}), 400, "InvalidInput")

    def test_state_conflicts_are_409(self, service: Service, alice: httpx.Client, sid: str) -> None:
        """Verbs that do not fit the session's state answer their typed 409 problems."""
        receipt = submit(alice, sid, "hello")
        wait(alice, sid, receipt)
        before = service.heads(sid)
        problem(alice.post(f"/v1/sessions/{sid}/steer", json={"input": "x"}), 409, "NotRunning")
        stale = alice.post(f"/v1/sessions/{sid}/interrupt", json={"run_id": "run_old"})
        problem(stale, 409, "NotRunning")
        resume = alice.post(f"/v1/sessions/{sid}/turns/{receipt['turn_id']}/resume")
        problem(resume, 409, "CannotResume")
        answers = alice.post(f"/v1/sessions/{sid}/answers", json={"answers": {"req_x": True}})
        problem(answers, 409, "InvalidAnswer")
        assert service.heads(sid) == before

    def test_empty_answers_and_outcomes_get_the_verbs_words(
        self, alice: httpx.Client, sid: str, service: Service
    ) -> None:
        """An empty answers or outcomes body is refused by the verb itself (the door decides
        nothing), with what to send instead; nothing is written."""
        wait(alice, sid, submit(alice, sid, "hello"))
        before = service.heads(sid)
        empty = alice.post(f"/v1/sessions/{sid}/answers", json={"answers": {}})
        said = problem(empty, 409, "InvalidAnswer")["detail"]
        assert "respond(request_id, answer)" in said
        nothing = alice.post(f"/v1/sessions/{sid}/reconcile", json={"outcomes": {}, "reason": "r"})
        assert "no uncertain tool calls" in problem(nothing, 400, "InvalidInput")["detail"]
        assert service.heads(sid) == before

    def test_delete_while_running_is_409_unless_forced(self, alice: httpx.Client, sid: str) -> None:
        """Deleting a session with a turn running is a 409 SessionBusy; force deletes it."""
        submit(alice, sid, "snooze 60")
        until(alice, sid, "tool/dispatch")
        problem(alice.delete(f"/v1/sessions/{sid}"), 409, "SessionBusy")
        forced = alice.delete(f"/v1/sessions/{sid}", params={"force": "true"}, timeout=60)
        assert forced.status_code == 200, forced.text

    def test_unknown_route_is_a_problem(self, alice: httpx.Client) -> None:
        """An unknown route or method answers a problem too, never HTML or a trace."""
        problem(alice.get("/v1/nothing"), 404, "NotFound")
        problem(alice.put("/v1/sessions"), 405, "MethodNotAllowed")


class TestVerbs:
    def test_session_lifecycle(self, alice: httpx.Client) -> None:
        """Create (201, then 200), patch, list with a filter, archive and unarchive."""
        made = alice.post(
            "/v1/sessions", json={"session_id": "life", "title": "Plan", "labels": {"team": "fin"}}
        )
        assert made.status_code == 201
        assert made.json()["title"] == "Plan"
        assert alice.post("/v1/sessions", json={"session_id": "life"}).status_code == 200
        patched = alice.patch("/v1/sessions/life", json={"labels": {"team": None, "k": "v"}})
        assert patched.json()["labels"] == {"k": "v"}
        listed = alice.get("/v1/sessions", params={"label": "k=v"}).json()["sessions"]
        assert [s["key"]["session_id"] for s in listed] == ["life"]
        assert alice.post("/v1/sessions/life/archive").json()["archived_at"]
        assert alice.get("/v1/sessions", params={"label": "k=v"}).json()["sessions"] == []
        assert alice.post("/v1/sessions/life/unarchive").json()["archived_at"] is None

    def test_new_session_gets_an_id(self, alice: httpx.Client) -> None:
        """A create without an id makes one."""
        made = alice.post("/v1/sessions", json={})
        assert made.status_code == 201
        assert made.json()["key"]["session_id"]

    def test_submit_and_wait_and_read(self, alice: httpx.Client, sid: str) -> None:
        """A submitted task runs; its task, snapshot, history, events and status agree."""
        receipt = submit(alice, sid, "hello there")
        assert receipt["status"] == "queued"
        assert receipt["run_id"] is None
        outcome = wait(alice, sid, receipt)
        assert (outcome["status"], outcome["output"]) == ("completed", "You said: hello there")
        task = alice.get(f"/v1/sessions/{sid}/turns/{receipt['turn_id']}").json()
        assert task["status"] == "completed"
        snap = alice.get(f"/v1/sessions/{sid}").json()
        assert snap["status"] == "idle"
        assert snap["cursor"] == f"{sid}:{snap['seq']}"
        assert [m["role"] for m in snap["messages"]][-2:] == ["user", "assistant"]
        page = alice.get(f"/v1/sessions/{sid}/history", params={"limit": 1}).json()
        assert len(page["messages"]) == 1
        assert page["next_cursor"]
        more = alice.get(
            f"/v1/sessions/{sid}/history", params={"limit": 10, "after": page["next_cursor"]}
        ).json()
        assert more["next_cursor"] is None
        events = alice.get(f"/v1/sessions/{sid}/events", params={"after": 0}).json()
        assert [e["seq"] for e in events["events"]] == list(range(1, snap["seq"] + 1))
        assert events["head"] == snap["seq"]
        status = alice.get(f"/v1/sessions/{sid}/status").json()
        assert status["seq"] == snap["seq"]
        inspect = alice.get(f"/v1/sessions/{sid}/inspect").json()
        assert inspect["as_of_seq"] == snap["seq"]
        assert inspect["context_tokens"] > 0

    def test_approval_with_edited_arguments(self, alice: httpx.Client, sid: str) -> None:
        """An approval with edited arguments runs the tool with them."""
        receipt = submit(alice, sid, "order pen 2")
        assert wait(alice, sid, receipt)["status"] == "suspended"
        pending = alice.get(f"/v1/sessions/{sid}/pending").json()
        ((rid, request),) = pending.items()
        assert request["kind"] == "confirmation"
        answer = {"kind": "approve", "edited_args": {"item": "pencil", "qty": 5}}
        continued = alice.post(f"/v1/sessions/{sid}/answers", json={"answers": {rid: answer}})
        assert continued.status_code == 202
        outcome = wait(alice, sid, continued.json())
        assert outcome["output"] == "done: ordered 5 pencil"

    def test_rejection_with_a_reason(self, alice: httpx.Client, sid: str) -> None:
        """A rejection's reason reaches the model as the tool's result."""
        wait(alice, sid, submit(alice, sid, "order pen 2"))
        (rid,) = alice.get(f"/v1/sessions/{sid}/pending").json()
        body = {"answers": {rid: {"kind": "reject", "reason": "too expensive"}}}
        outcome = wait(alice, sid, alice.post(f"/v1/sessions/{sid}/answers", json=body).json())
        assert "too expensive" in outcome["output"]

    def test_ask_user_answer(self, alice: httpx.Client, sid: str) -> None:
        """A question is answered with text."""
        wait(alice, sid, submit(alice, sid, "ask which colour?"))
        (rid,) = alice.get(f"/v1/sessions/{sid}/pending").json()
        body = {"answers": {rid: "blue"}}
        outcome = wait(alice, sid, alice.post(f"/v1/sessions/{sid}/answers", json=body).json())
        assert outcome["output"] == "done: blue"

    def test_send_starts_then_inject_feeds(self, alice: httpx.Client, sid: str) -> None:
        """send starts a task when idle; inject is accepted with no turn."""
        sent = alice.post(f"/v1/sessions/{sid}/send", json={"input": "hi"}).json()
        assert sent["disposition"] == "started"
        wait(alice, sid, sent)
        injected = alice.post(f"/v1/sessions/{sid}/inject", json={"material": "notes"})
        assert injected.status_code == 202
        assert injected.json()["turn_id"] is None

    def test_cancel_queued_task(self, alice: httpx.Client, sid: str) -> None:
        """A task queued behind a suspended turn is cancelled (204) and ends cancelled."""
        wait(alice, sid, submit(alice, sid, "order pen 1"))
        queued = submit(alice, sid, "later")
        cancel = alice.post(f"/v1/sessions/{sid}/turns/{queued['turn_id']}/cancel")
        assert cancel.status_code == 204
        assert wait(alice, sid, queued)["status"] == "cancelled"

    def test_interrupt_and_resume(self, alice: httpx.Client, sid: str) -> None:
        """Interrupt with the running run's id stops it; resume continues the turn."""
        receipt = submit(alice, sid, "nap 0.5")
        run_id = until(alice, sid, "tool/dispatch")["run_id"]
        stopped = alice.post(f"/v1/sessions/{sid}/interrupt", json={"run_id": run_id}).json()
        assert stopped == {"interrupted": True}
        assert wait(alice, sid, receipt)["status"] == "interrupted"
        resumed = alice.post(f"/v1/sessions/{sid}/turns/{receipt['turn_id']}/resume")
        assert resumed.status_code == 202
        assert wait(alice, sid, resumed.json())["output"] == "done: napped 0.5"

    def test_plan_is_the_todo_tools_steps(self, alice: httpx.Client, sid: str) -> None:
        """GET /plan is session.plan(): the steps the model wrote with nb.todo."""
        wait(alice, sid, submit(alice, sid, "plan find write"))
        steps = alice.get(f"/v1/sessions/{sid}/plan").json()
        assert [(p["id"], p["content"], p["status"]) for p in steps] == [
            ("step-1", "find", "pending"),
            ("step-2", "write", "pending"),
        ]

    def test_health_schema_and_docs(self, service: Service) -> None:
        """/healthz, /readyz, /openapi.json and /docs answer without a token (the docs with
        their assets served here, none from a CDN); CORS is off."""
        with service.client(None) as client:
            assert client.get("/healthz").json() == {"status": "ok"}
            assert client.get("/readyz").json()["status"] == "ready"
            schema = client.get("/openapi.json").json()
            assert "/v1/sessions/{session_id}/stream" in schema["paths"]
            docs = client.get("/docs")
            assert docs.status_code == 200
            assert "/docs/assets/swagger-ui-bundle.js" in docs.text
            assert "https://" not in docs.text  # nothing from a CDN: it works offline
            assert "https://" not in client.get("/redoc").text
            script = client.get("/docs/assets/swagger-ui-bundle.js")
            assert script.headers["content-type"].startswith("text/javascript")
            assert client.get("/docs/assets/other.js").status_code == 404
            page = client.get("/", headers={"Origin": "https://evil.example"})
            assert "access-control-allow-origin" not in page.headers
            assert "script-src 'self'" in page.headers["content-security-policy"]


class TestChildren:
    """A sub-agent's child session: listed by its parent, addressed through it, scoped as
    its root, and its requests answered through the parent."""

    def delegated(self, client: httpx.Client, sid: str) -> dict[str, Any]:
        """The child of a suspended ``delegate order pen 2`` turn, as GET /children lists it."""
        assert wait(client, sid, submit(client, sid, "delegate order pen 2"))["status"] == (
            "suspended"
        )
        (child,) = client.get(f"/v1/sessions/{sid}/children").json()
        return dict(child)

    def test_children_list_and_the_childs_own_routes(self, alice: httpx.Client, sid: str) -> None:
        """GET /children lists the call with its child's key and status; the child's own
        snapshot, tasks and pending are at /children/{call_id}/..."""
        child = self.delegated(alice, sid)
        call = child["call_id"]
        assert child["key"]["session_id"] == f"{sid}/{call}"
        assert (child["agent_id"], child["task"], child["status"]) == (
            "service-helper",
            "order pen 2",
            "suspended",
        )
        base = f"/v1/sessions/{sid}/children/{call}"
        snap = alice.get(base).json()
        assert snap["session_id"] == f"{sid}/{call}"
        assert snap["cursor"] == f"{sid}/{call}:{snap['seq']}"
        assert [t["input"] for t in snap["tasks"]] == ["order pen 2"]
        assert list(alice.get(f"{base}/pending").json()) == list(snap["pending"])
        turn = alice.get(f"/v1/sessions/{sid}/children", params={"turn_id": child["turn_id"]})
        assert [c["call_id"] for c in turn.json()] == [call]

    def test_a_childs_request_is_answered_through_the_parent(
        self, alice: httpx.Client, sid: str
    ) -> None:
        """The parent's /pending holds the child's approval with its path; answering it
        there continues both turns."""
        child = self.delegated(alice, sid)
        ((rid, request),) = alice.get(f"/v1/sessions/{sid}/pending").json().items()
        assert (request["tool_name"], request["path"]) == ("create_order", ["service-helper"])
        assert request["session"] == child["key"]
        receipt = alice.post(f"/v1/sessions/{sid}/answers", json={"answers": {rid: True}})
        assert receipt.status_code == 202, receipt.text
        assert wait(alice, sid, receipt.json())["output"] == "done: done: ordered 2 pen"
        (done,) = alice.get(f"/v1/sessions/{sid}/children").json()
        assert (done["status"], done["output"]) == ("completed", "done: ordered 2 pen")

    def test_the_childs_stream_starts_after_its_snapshots_cursor(
        self, alice: httpx.Client, sid: str
    ) -> None:
        """The child's stream takes its own cursor and refuses its parent's."""
        call = self.delegated(alice, sid)["call_id"]
        base = f"/v1/sessions/{sid}/children/{call}"
        snap = alice.get(base).json()
        parent = alice.get(f"/v1/sessions/{sid}").json()
        problem(
            alice.get(f"{base}/stream", params={"after": parent["cursor"]}), 400, "InvalidCursor"
        )
        rid = next(iter(snap["pending"]))
        alice.post(f"/v1/sessions/{sid}/answers", json={"answers": {rid: True}})
        with alice.stream("GET", f"{base}/stream", params={"after": snap["cursor"]}) as response:
            assert response.status_code == 200
            for kind, id_, data in sse(response):
                if kind == "committed":
                    assert id_ == f"{sid}/{call}:{snap['seq'] + 1}"
                    assert data["seq"] == snap["seq"] + 1
                    break

    def test_another_users_child_is_404(
        self, service: Service, alice: httpx.Client, bob: httpx.Client, sid: str
    ) -> None:
        """Bob reaches neither alice's children nor a child of hers by its address."""
        call = self.delegated(alice, sid)["call_id"]
        base = f"/v1/sessions/{sid}/children/{call}"
        problem(bob.get(f"/v1/sessions/{sid}/children"), 404, "SessionNotFound")
        problem(bob.get(base), 404, "SessionNotFound")
        problem(bob.get(f"{base}/stream"), 404, "SessionNotFound")
        problem(bob.post(f"{base}/answers", json={"answers": {"x": True}}), 404, "SessionNotFound")

    def test_unknown_or_bad_call_ids(self, alice: httpx.Client, sid: str) -> None:
        """A call the session never made is a 404; a malformed call id a 400."""
        problem(alice.get(f"/v1/sessions/{sid}/children/call_nope"), 404, "SessionNotFound")
        problem(alice.get(f"/v1/sessions/{sid}/children/bad%01call"), 400, "InvalidInput")
        problem(
            alice.get(f"/v1/sessions/{sid}/children", params={"turn_id": "x\x01"}),
            400,
            "InvalidInput",
        )
