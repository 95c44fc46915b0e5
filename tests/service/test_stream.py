"""The SSE stream: every committed event once, in order, from any cursor; the headers real
proxies need; bad cursors refused before the stream starts; live chunks without ids; users
kept apart; and streams that carry on across a dropped connection, a ``kill -9`` of the
server and a restart."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import agentnb as nb
from agentnb.server import stream as stream_module
from tests.service.conftest import Service
from tests.service.helpers import WAIT, ServerProcess, ServerThread, issue, sse
from tests.service.test_api import problem, submit, wait

PRIVATE = {"request/prepared", "state/checkpoint"}


def frames_until(
    events: Iterator[tuple[str, str | None, Any]], last_type: str = "run/end"
) -> Iterator[tuple[str, str | None, Any]]:
    """The events of a stream up to and including the first committed ``last_type``."""
    for kind, id_, data in events:
        yield kind, id_, data
        if kind == "committed" and data["type"] == last_type:
            return


def stream(client: httpx.Client, sid: str, **kwargs: Any) -> Any:
    return client.stream("GET", f"/v1/sessions/{sid}/stream", timeout=WAIT, **kwargs)


class TestFrames:
    def test_every_committed_event_once_in_order(self, alice: httpx.Client, sid: str) -> None:
        """From cursor 0 the stream holds each committed event once, in seq order, with
        ``id: <session>:<seq>``, and the same events ``/events`` reads."""
        receipt = submit(alice, sid, "progress 3")
        wait(alice, sid, receipt)
        head = alice.get(f"/v1/sessions/{sid}/status").json()["seq"]
        seen = []
        with stream(alice, sid, params={"after": f"{sid}:0"}) as response:
            for kind, id_, data in sse(response):
                if kind == "committed":
                    assert id_ == f"{sid}:{data['seq']}"
                    seen.append(data)
                    if data["seq"] == head:
                        break
        assert [f["seq"] for f in seen] == list(range(1, head + 1))
        raw = alice.get(f"/v1/sessions/{sid}/events", params={"after": 0}).json()["events"]
        assert [f["event_id"] for f in seen] == [e["event_id"] for e in raw]

    def test_headers_for_proxies_and_retry_first(self, alice: httpx.Client, sid: str) -> None:
        """text/event-stream, no-cache, X-Accel-Buffering: no, never compressed, and the
        stream opens with ``retry:``."""
        headers = {"Accept-Encoding": "gzip, br"}
        with stream(alice, sid, headers=headers) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            assert response.headers["cache-control"] == "no-cache"
            assert response.headers["x-accel-buffering"] == "no"
            assert response.headers.get("content-encoding", "identity") == "identity"
            first = next(sse(response))
            assert first[0] == "retry"
            assert first[2].isdigit()

    def test_private_payloads_are_left_out_for_browsers(
        self, alice: httpx.Client, sid: str
    ) -> None:
        """Browser frames omit raw requests and checkpoints; raw frames carry them."""
        wait(alice, sid, submit(alice, sid, "hello"))
        head = alice.get(f"/v1/sessions/{sid}/status").json()["seq"]
        for mode, omitted in (("frames", True), ("raw", False)):
            with stream(alice, sid, params={"mode": mode}) as response:
                for kind, _, data in sse(response):
                    if kind == "committed" and data["type"] in PRIVATE:
                        assert (data["data"] is None) is omitted
                        assert data.get("omitted", False) is omitted
                    if kind == "committed" and data["seq"] == head:
                        break

    def test_start_is_the_later_of_after_and_last_event_id(
        self, alice: httpx.Client, sid: str
    ) -> None:
        """With both ``after`` and ``Last-Event-ID`` the stream starts after the later one."""
        wait(alice, sid, submit(alice, sid, "hello"))
        head = alice.get(f"/v1/sessions/{sid}/status").json()["seq"]
        for after, last in ((2, 5), (5, 2)):
            params = {"after": f"{sid}:{after}"}
            headers = {"Last-Event-ID": f"{sid}:{last}"}
            with stream(alice, sid, params=params, headers=headers) as response:
                first = next(d for k, _, d in sse(response) if k == "committed")
            assert first["seq"] == 6
        assert head > 6

    def test_bad_cursors_are_400_before_the_stream(
        self, service: Service, alice: httpx.Client, sid: str
    ) -> None:
        """A malformed cursor, one of another session and one ahead of the head are 400
        InvalidCursor problems saying to reload the snapshot (no stream starts)."""
        wait(alice, sid, submit(alice, sid, "hello"))
        head = alice.get(f"/v1/sessions/{sid}/status").json()["seq"]
        for params, headers in (
            ({"after": "garbage"}, {}),
            ({"after": f"{sid}:x"}, {}),
            ({"after": f"other:{head}"}, {}),
            ({"after": f"{sid}:{head + 1}"}, {}),
            ({}, {"Last-Event-ID": f"{sid}:{head + 5}"}),
        ):
            response = alice.get(f"/v1/sessions/{sid}/stream", params=params, headers=headers)
            body = problem(response, 400, "InvalidCursor")
            assert "reload the snapshot" in body["detail"]

    def test_page_frames_carry_the_items_they_changed(self, alice: httpx.Client, sid: str) -> None:
        """For the page, the stream opens with the panel state, and the last frame of each
        batch carries the chat items it changed (assistant text as escaped HTML)."""
        snap = alice.get(f"/v1/sessions/{sid}").json()
        with stream(alice, sid, params={"mode": "page", "after": snap["cursor"]}) as response:
            events = sse(response)
            assert next(events)[0] == "retry"
            kind, id_, state = next(e for e in events if e[0] != "comment")
            assert (kind, id_) == ("state", None)
            assert state["status"] == "idle"
            receipt = submit(alice, sid, "long 3")
            items: dict[str, Any] = {}
            for kind, _, data in frames_until(events):
                if kind == "committed":
                    for item in data.get("items", ()):
                        items[item["id"]] = item
        replies = [i for i in items.values() if i["role"] == "assistant"]
        assert replies[-1]["status"] == "completed"
        assert "<strong>1</strong>" in replies[-1]["html"]
        assert wait(alice, sid, receipt)["status"] == "completed"

    def test_a_page_behind_the_feed_gets_every_item_once(
        self, alice: httpx.Client, sid: str
    ) -> None:
        """A page stream from cursor 0 of a finished session gets the frames read from the
        store and, on its last one, every item at once (``reset``)."""
        wait(alice, sid, submit(alice, sid, "hello"))
        snap = alice.get(f"/v1/sessions/{sid}", params={"html": "true"}).json()
        with stream(alice, sid, params={"mode": "page", "after": f"{sid}:0"}) as response:
            for kind, _, data in sse(response):
                if kind == "committed" and data["seq"] == snap["seq"]:
                    last = data
                    break
        assert last["reset"] is True
        assert [i["id"] for i in last["items"]] == [i["id"] for i in snap["items"]]

    def test_live_chunks_have_no_id(self, service: Service, alice: httpx.Client, sid: str) -> None:
        """Text pieces are streamed live as ``chunk`` events without an id, each numbered."""
        with stream(alice, sid) as response:
            events = sse(response)
            next(events)
            with service.client(service.alice) as other:
                submit(other, sid, "long 30")
            chunks = [d for k, i, d in frames_until(events) if k == "chunk" and i is None]
        assert chunks
        assert all(c["kind"] == "model/chunk" for c in chunks)
        pieces = [c["piece"] for c in chunks if "text" in c]
        assert pieces == sorted(pieces)


class TestReconnect:
    def test_reconnect_with_last_event_id_gets_each_event_once(
        self, alice: httpx.Client, sid: str
    ) -> None:
        """A client that drops mid-turn and reconnects with Last-Event-ID gets every
        committed event of the turn exactly once, in order."""
        got: list[int] = []
        with stream(alice, sid) as response:
            events = sse(response)
            next(events)
            receipt = submit(alice, sid, "progress 12")
            for kind, id_, data in events:
                if kind == "committed":
                    got.append(data["seq"])
                    if data["type"] == "tool/chunk":
                        last_id = id_
                        break
        with stream(alice, sid, headers={"Last-Event-ID": last_id}) as response:
            for kind, _, data in frames_until(sse(response)):
                if kind == "committed":
                    got.append(data["seq"])
        wait(alice, sid, receipt)
        assert got == list(range(1, got[-1] + 1))

    def test_two_users_never_see_each_others_frames(
        self, service: Service, alice: httpx.Client, bob: httpx.Client
    ) -> None:
        """Alice and Bob stream sessions of the same id; each sees only their own events."""
        sid = "shared-name"
        for client in (alice, bob):
            assert client.post("/v1/sessions", json={"session_id": sid}).status_code in (200, 201)
        wait(alice, sid, submit(alice, sid, "alice speaks"))
        wait(bob, sid, submit(bob, sid, "bob speaks"))
        for client in (alice, bob):
            own = {e["event_id"] for e in client.get(f"/v1/sessions/{sid}/events").json()["events"]}
            head = client.get(f"/v1/sessions/{sid}/status").json()["seq"]
            seen = set()
            with stream(client, sid, params={"mode": "raw"}) as response:
                for kind, _, data in sse(response):
                    if kind == "committed":
                        seen.add(data["event_id"])
                        if data["seq"] == head:
                            break
            assert seen == own

    def test_deleted_session_ends_its_streams(self, alice: httpx.Client, sid: str) -> None:
        """Deleting the session sends ``end`` on its open streams, which then close."""
        with stream(alice, sid) as response:
            events = sse(response)
            next(events)
            with httpx.Client(base_url=str(alice.base_url), headers=alice.headers) as other:
                assert other.delete(f"/v1/sessions/{sid}").status_code == 200
            ends = [d for k, _, d in events if k == "end"]
        assert ends
        assert "gone" in ends[0]["reason"]


class TestKeepalive:
    @pytest.fixture
    def quick(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
        """An app on a thread whose streams keep alive every 0.2 s."""
        monkeypatch.setattr(stream_module, "KEEPALIVE", 0.2)
        url = f"sqlite:///{tmp_path / 'k.sqlite'}"
        from tests.service._agent import agent

        runtime = nb.Runtime(agent, store=url)
        try:
            with ServerThread(runtime) as server:
                yield server, url
        finally:
            runtime.close()

    def test_idle_stream_sends_keepalive_comments(self, quick: Any) -> None:
        """An idle stream sends ``: keepalive`` comments (every KEEPALIVE seconds)."""
        server, url = quick
        token = issue(url, "alice")
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=server.url, headers=headers, timeout=WAIT) as client:
            client.post("/v1/sessions", json={"session_id": "k"})
            with client.stream("GET", "/v1/sessions/k/stream") as response:
                comments = []
                for kind, _, data in sse(response):
                    if kind == "comment":
                        comments.append(data)
                    if comments.count("keepalive") == 2:
                        break
        assert comments[0] == "connected"

    def test_revoked_token_ends_an_open_stream(self, quick: Any) -> None:
        """A stream whose token is revoked by another process ends, saying so."""
        server, url = quick
        token = issue(url, "alice")
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=server.url, headers=headers, timeout=WAIT) as client:
            client.post("/v1/sessions", json={"session_id": "r"})
            with client.stream("GET", "/v1/sessions/r/stream") as response:
                events = sse(response)
                next(events)
                store = nb.open_store(url)
                store.revoke_token(token.split(".")[0])
                store.close()
                ends = [d for k, _, d in events if k == "end"]
        assert "revoked" in ends[0]["reason"]


class TestServerRestart:
    @pytest.fixture
    def own(self, tmp_path: Path) -> Iterator[tuple[ServerProcess, str]]:
        url = f"sqlite:///{tmp_path / 'restart.sqlite'}"
        token = issue(url, "alice")
        with ServerProcess(url) as server:
            yield server, token

    def test_follow_rides_through_kill_9_and_restart(self, own: tuple[ServerProcess, str]) -> None:
        """The remote client's follow, open while the server is killed with SIGKILL mid-turn
        and started again, yields every committed event exactly once, in order."""
        server, token = own
        remote = nb.connect(server.url, token)
        session = remote.session("k9")
        receipt = session.submit("nap 1.5")
        follow = session.log.follow(after=0)
        seen: list[nb.Event] = []
        dispatched = threading.Event()

        def read() -> None:
            completed = 0
            for event in follow:
                seen.append(event)
                if event.type == "tool/dispatch":
                    dispatched.set()
                completed += event.type == "turn/completed"
                if completed:
                    return

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        assert dispatched.wait(WAIT)
        server.kill()
        server.start()
        # The crash cut the turn off: it is interrupted; a person resumes it.
        assert session.wait(receipt, timeout=WAIT).status == "interrupted"
        again = session.resume(receipt.turn_id)
        assert session.wait(again, timeout=WAIT).status == "completed"
        reader.join(WAIT)
        follow.close()
        assert not reader.is_alive()
        assert [e.seq for e in seen] == list(range(1, seen[-1].seq + 1))
        logged = [e.event_id for e in session.log.scan(0, seen[-1].seq)]
        assert [e.event_id for e in seen] == logged
        assert follow.reconnects >= 1
        remote.close()

    def test_uncertain_call_after_kill_9_is_reconciled_remotely(
        self, own: tuple[ServerProcess, str]
    ) -> None:
        """A tool call cut off by SIGKILL is uncertain after the restart: resume refuses
        with UncertainToolCalls (its calls listed), reconcile records the outcome, and
        resume then completes the turn, all through the remote client."""
        server, token = own
        with nb.connect(server.url, token) as remote:
            session = remote.session("unsure")
            receipt = session.submit("sleep 30")
            for event in session.log.follow(after=0):
                if event.type == "tool/dispatch":
                    break
            server.kill()
            server.start()
            assert session.wait(receipt, timeout=WAIT).status == "interrupted"
            with pytest.raises(nb.UncertainToolCalls) as caught:
                session.resume(receipt.turn_id)
            (call,) = caught.value.calls
            assert call.tool_name == "pause"
            assert [c.call_id for c in session.inspect().uncertain_tool_calls] == [call.call_id]
            session.reconcile({call.call_id: nb.ToolOutcome.success("paused 30")}, "checked")
            outcome = session.resume(receipt.turn_id).wait(timeout=WAIT)
            assert outcome.output == "done: paused 30"
            with pytest.raises(nb.InvalidInput, match="no compactor"):
                session.compact()

    def test_sigterm_stops_runs_and_ends_streams(self, own: tuple[ServerProcess, str]) -> None:
        """SIGTERM mid-turn: the open stream ends cleanly, the run is stopped and recorded
        (interrupted), and the server exits 0."""
        server, token = own
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=server.url, headers=headers, timeout=WAIT) as client:
            client.post("/v1/sessions", json={"session_id": "term"})
            with stream(client, "term") as response:
                events = sse(response)
                next(events)
                submit(client, "term", "snooze 60")
                for kind, _, data in events:
                    if kind == "committed" and data["type"] == "tool/dispatch":
                        break
                assert server.stop() == 0
                rest = list(events)  # the stream ends (no error)
        assert not [e for e in rest if e[0] == "end"]
        store = nb.open_store(server.store_url)
        try:
            key = nb.SessionKey("default", "alice", "service-agent", "term")
            types = [e.type for e in store.scan(key)]
        finally:
            store.close()
        assert "run/end" in types
        assert types[-1] in {"turn/interrupted", "run/end"}


class TestSubagentPanel:
    def test_a_childs_request_reaches_the_parents_page_while_a_sibling_works(self) -> None:
        """A page stream's panel carries a child's approval (with its path) and its
        sibling's live status as they commit, while the parent still waits for both."""
        release = threading.Event()

        @nb.tool(confirm=True)
        def buy(x: str) -> str:
            """Buy (a person approves)."""
            return "bought"

        @nb.tool
        async def hold(x: str) -> str:
            """Work until released."""
            await asyncio.to_thread(release.wait, WAIT)
            return "held"

        def child(agent_id: str, tool: nb.Tool) -> nb.Agent:
            def script(messages: list[nb.Message]) -> Any:
                if any(m.role == "tool" for m in messages):
                    return f"{agent_id} done"
                return nb.ToolCall(tool.name, {"x": agent_id})

            return nb.Agent(
                name=agent_id, agent_id=agent_id, model=nb.ScriptedModel(script), tools=[tool]
            )

        boss = nb.Agent(
            name="Boss",
            agent_id="boss",
            model=nb.ScriptedModel(
                [
                    [nb.ToolCall("buyer", {"task": "buy"}), nb.ToolCall("holder", {"task": "x"})],
                    "all done",
                ]
            ),
            tools=[child("buyer", buy).as_tool(), child("holder", hold).as_tool()],
        )
        with (
            nb.Runtime(boss, store="memory://") as runtime,
            ServerThread(runtime, auth=False) as server,
            httpx.Client(base_url=server.url, timeout=WAIT) as client,
        ):
            session = runtime.session("s")
            receipt = session.submit("go")
            seen = None
            with client.stream("GET", "/v1/sessions/s/stream", params={"mode": "page"}) as r:
                for kind, _, data in sse(r):
                    if kind == "state" and any(
                        p["path"] == ["buyer"] for p in data["pending"].values()
                    ):
                        seen = data
                        break
            assert seen is not None
            by_agent = {c["agent_id"]: c for c in seen["children"].values()}
            assert by_agent["holder"]["status"] == "running"
            assert by_agent["buyer"]["status"] == "suspended"
            assert by_agent["buyer"]["usage"]["steps"] >= 1
            assert session.tasks()[-1].status == "running"  # the parent waits on its sibling
            release.set()
            (rid,) = seen["pending"]
            client.post("/v1/sessions/s/answers", json={"answers": {rid: True}})
            # The first run suspends once only the buyer's person can move it; the task
            # observes the turn through the answer's continuation.
            assert session.task(receipt.turn_id).wait(WAIT).output == "all done"


class TestRawFramesReuseTheText:
    def test_a_raw_frame_carries_the_events_text_to_the_client(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The server splices the event's payload text into its raw frame, and the remote
        client keeps that text as its event's: neither side encodes the payload."""
        from agentnb import client as client_module
        from agentnb.events import Event, codec

        event = Event.create(
            "acme/x", {"text": 'é "quoted" ,"data":', "n": [1, 2.5]}, turn_id="t"
        ).with_seq(3)

        def no_encoding(value: Any) -> str:
            # The client checks the envelope as foreign data, with an empty stand-in payload.
            assert not value, "a committed payload was encoded again"
            return "{}"

        monkeypatch.setattr(codec, "_encode", no_encoding)
        frame = stream_module._committed("s1", event, raw=True, more=None)
        (data,) = [line[len("data: ") :] for line in frame.splitlines() if line.startswith("data:")]
        received = client_module._event_of_frame(data)
        assert received == event
        assert received.payload_json == event.payload_json
