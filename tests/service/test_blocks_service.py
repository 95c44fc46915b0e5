"""Rich answers through ``agentnb serve`` (a real uvicorn subprocess on a free loopback port)
and the remote client: an answer with images, the blocks route that serves a session's
bytes to its own user only, bad blocks refused with typed problems and nothing written, and
a ``kill -9`` mid-run that loses no committed block."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import agentnb as nb
from agentnb.blocks import ImagePart
from agentnb.client import error_of
from tests.blocks_helpers import BIG, SMALL, png
from tests.service.helpers import WAIT, ServerProcess, issue

AGENT = "tests.blocks_helpers:agent"


class Served:
    def __init__(self, server: ServerProcess, url: str, alice: str, bob: str) -> None:
        self.server, self.store_url, self.alice, self.bob = server, url, alice, bob

    def http(self, token: str) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"}
        return httpx.Client(base_url=self.server.url, headers=headers, timeout=WAIT)

    def heads(self, session_id: str) -> tuple[int, int]:
        store = nb.open_store(self.store_url)
        try:
            return store.heads(nb.SessionKey("default", "alice", "charts", session_id))
        finally:
            store.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("blocks")
    url = f"sqlite:///{root / 'blocks.sqlite'}"
    alice, bob = issue(url, "alice", "tests"), issue(url, "bob", "tests")
    with ServerProcess(url, agent=AGENT) as server:
        yield Served(server, url, alice, bob)


@pytest.fixture
def remote(served: Served) -> Iterator[nb.RemoteRuntime]:
    with nb.connect(served.server.url, served.alice) as runtime:
        yield runtime


def _image(session: nb.RemoteSession, name: str) -> ImagePart:
    return next(
        p
        for m in session.transcript().messages
        for p in m.blocks
        if isinstance(p, ImagePart) and p.name == name
    )


class TestRemoteAnswers:
    def test_a_remote_answer_with_images_continues_the_turn(self, remote: nb.RemoteRuntime) -> None:
        """RemoteSession.respond with Answer.output(blocks=) sends the bytes; the result
        keeps them (the large one in the blobs) and the model is told the stand-in."""
        session = remote.session("answer-1")
        assert session.run("quote", timeout=WAIT).status == "suspended"
        rid = next(iter(session.pending()))
        answer = nb.Answer.output(
            "Quote:",
            blocks=[nb.blocks.Image(BIG, name="q.png"), nb.blocks.Image(SMALL, name="s.png")],
        )
        outcome = session.respond(rid, answer).wait(WAIT)
        assert outcome.output == (
            "done: Quote:\n[image: q.png, image/png, 28.3 KB]\n[image: s.png, image/png, 2.9 KB]"
        )
        big, small = _image(session, "q.png"), _image(session, "s.png")
        assert big.data is None
        assert big.blob == big.sha256
        assert session.block_bytes(big.sha256) == (BIG, big)
        assert session.block_bytes(small.sha256)[0] == SMALL

    def test_a_tools_blocks_reach_the_remote_snapshot(self, remote: nb.RemoteRuntime) -> None:
        """The tool card of the remote snapshot carries the result's blocks."""
        session = remote.session("tool-1")
        assert session.run("chart", timeout=WAIT).status == "completed"
        (card,) = [i for i in session.snapshot().items if i.kind == "tool"]
        assert card.result is not None
        assert [b["type"] for b in card.result["blocks"]] == ["text", "image", "image", "json"]

    def test_bad_blocks_are_typed_errors_and_write_nothing(
        self, served: Served, remote: nb.RemoteRuntime
    ) -> None:
        """An unknown block type and an image that is not its mime are 400 InvalidBlock
        problems (InvalidBlock in the client); the request stays pending."""
        session = remote.session("bad-1")
        assert session.run("quote", timeout=WAIT).status == "suspended"
        rid = next(iter(session.pending()))
        heads = served.heads("bad-1")
        with served.http(served.alice) as client:
            gif = base64.b64encode(b"GIF89a" + bytes(16)).decode()
            for block, words in (
                ({"type": "video", "data": ""}, "unknown block type"),
                ({"type": "image", "mime": "image/png", "data": gif}, "claims image/png"),
                ({"type": "image", "data": "not base64!"}, "not base64"),
                ({"type": "json", "data": float("inf")}, "must hold JSON"),
            ):
                answer = {"kind": "output", "blocks": [block]}
                response = client.post(
                    "/v1/sessions/bad-1/answers",
                    content=_json({"answers": {rid: answer}}),
                    headers={"Content-Type": "application/json"},
                )
                assert response.status_code == 400, response.text
                problem = response.json()
                assert problem["type"] == "InvalidBlock", problem
                assert words in problem["detail"]
                # The remote client raises the same class from the problem.
                assert type(error_of(problem, 400)) is nb.InvalidBlock
        assert served.heads("bad-1") == heads
        assert rid in session.pending()

    def test_an_answer_past_the_services_body_limit_is_refused_whole(
        self, served: Served, remote: nb.RemoteRuntime
    ) -> None:
        """Blocks whose base64 passes create_app(max_body=) (1 MiB) are a typed InvalidInput
        (PayloadTooLarge), and nothing is written."""
        session = remote.session("big-1")
        assert session.run("quote", timeout=WAIT).status == "suspended"
        rid = next(iter(session.pending()))
        heads = served.heads("big-1")
        answer = nb.Answer.output(blocks=[nb.blocks.File(bytes(900_000), name="zeros.bin")])
        with pytest.raises(nb.InvalidInput):
            session.respond(rid, answer)
        assert served.heads("big-1") == heads
        assert rid in session.pending()


class TestBlocksRoute:
    def test_the_route_serves_an_image_with_its_type_to_its_user_only(
        self, served: Served, remote: nb.RemoteRuntime
    ) -> None:
        """GET .../blocks/{sha256}: the bytes as image/png, nosniff; bob's 404; a digest the
        session does not hold is refused."""
        session = remote.session("route-1")
        assert session.run("chart", timeout=WAIT).status == "completed"
        big = _image(session, "costs.png")
        path = f"/v1/sessions/route-1/blocks/{big.sha256}"
        with served.http(served.alice) as alice:
            response = alice.get(path)
            assert response.status_code == 200
            assert response.content == BIG
            assert response.headers["content-type"] == "image/png"
            assert response.headers["x-content-type-options"] == "nosniff"
            other = alice.get("/v1/sessions/route-1/blocks/" + "0" * 64)
            assert other.status_code == 400
            assert other.json()["type"] == "InvalidBlock"
        with served.http(served.bob) as bob:
            assert bob.get(path).status_code == 404

    def test_a_file_downloads_and_never_shows_inline(
        self, served: Served, remote: nb.RemoteRuntime
    ) -> None:
        """A File block (here HTML a browser would run) is served as an octet-stream
        attachment, sandboxed, whatever mime it claims."""
        session = remote.session("route-2")
        assert session.run("quote", timeout=WAIT).status == "suspended"
        rid = next(iter(session.pending()))
        page = nb.blocks.File(b"<script>alert(1)</script>", "text/html", name="x.html")
        session.respond(rid, nb.Answer.output(blocks=[page])).wait(WAIT)
        (part,) = [p for m in session.transcript().messages for p in m.blocks]
        with served.http(served.alice) as alice:
            response = alice.get(f"/v1/sessions/route-2/blocks/{part.sha256}")
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/octet-stream"
        assert response.headers["content-disposition"] == 'attachment; filename="x.html"'
        assert "sandbox" in response.headers["content-security-policy"]


class TestKilledMidRun:
    def test_kill_9_after_a_rich_result_loses_no_committed_block(self, tmp_path: Path) -> None:
        """SIGKILL while the next tool runs: after a restart the chart's blocks and their
        blob are intact, the turn is interrupted with its reason, and nothing is doubled."""
        url = f"sqlite:///{tmp_path / 'kill.sqlite'}"
        token = issue(url, "alice")
        with ServerProcess(url, agent=AGENT) as server, nb.connect(server.url, token) as remote:
            session = remote.session("k9")
            receipt = session.submit("chart-then-sleep 60")
            for event in session.log.follow(after=0):
                if event.type == "tool/dispatch" and event.payload.get("name") == "pause":
                    break
            server.kill()
            server.start()
            assert session.wait(receipt, timeout=WAIT).status == "interrupted"
            results = [e for e in session.log.scan() if e.type == "tool/result"]
            assert [e.payload["name"] for e in results] == ["chart"]
            big = _image(session, "costs.png")
            assert session.block_bytes(big.sha256)[0] == BIG
            reasons = [e.payload for e in session.log.scan() if e.type == "turn/interrupted"]
            assert reasons
            assert reasons[-1]["reason"]
        store = nb.open_store(url)
        try:
            assert store.get_blob(big.sha256) == BIG
        finally:
            store.close()


def _json(value: object) -> bytes:
    import json

    # allow_nan: the test sends the non-JSON number a careless client would
    return json.dumps(value, allow_nan=True).encode()


def test_the_png_helper_makes_distinct_images() -> None:
    """Two seeds give two images (the tests tell their blocks apart by digest)."""
    assert png(8, 8, noise=True, seed=1) != png(8, 8, noise=True, seed=2)
