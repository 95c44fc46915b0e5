"""Rich answers (``agentnb.blocks``): blocks made checked, answers and tool results that carry
them, their bytes in the store's blobs past a size, the text stand-in models see, and the
views and exports that show them."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import agentnb as nb
from agentnb import analysis
from agentnb.blocks import (
    INLINE_BYTES,
    MAX_BLOCK_BYTES,
    MAX_BLOCKS,
    ImagePart,
    TextPart,
    block_of,
    stand_in,
    stored,
)
from agentnb.errors import BlockTooLarge, Corrupt, InvalidBlock, StorageError
from agentnb.widgets.view import tool_html
from tests.blocks_helpers import BIG, SMALL, annual_quote, chart, make_agent, png
from tests.runtime.helpers import WAIT, events_of

MakeRuntime = Callable[..., nb.Runtime]
GIF = b"GIF89a" + bytes(32)


def _quote_session(runtime: nb.Runtime, sid: str = "s1") -> tuple[nb.Session, str]:
    session = runtime.session(sid)
    assert session.run("quote", timeout=WAIT).status == "suspended"
    return session, next(iter(session.pending()))


class TestMakingBlocks:
    def test_an_image_takes_its_type_from_its_bytes(self) -> None:
        """Image(bytes) reads PNG/JPEG/GIF/WebP from the bytes; a matching claim is kept."""
        assert nb.blocks.Image(SMALL).mime == "image/png"
        assert nb.blocks.Image(GIF, "image/gif").mime == "image/gif"

    def test_an_image_from_a_path_reads_the_file_and_keeps_its_name(self, tmp_path: Path) -> None:
        """Image(path) holds the file's bytes and name."""
        path = tmp_path / "chart.png"
        path.write_bytes(SMALL)
        image = nb.blocks.Image(path)
        assert (image.data, image.name) == (SMALL, "chart.png")

    def test_an_image_whose_bytes_are_not_the_claimed_type_is_refused(self) -> None:
        """A claimed mime the bytes do not match is InvalidBlock, naming what they are."""
        with pytest.raises(InvalidBlock, match=r"claims image/png.*image/gif"):
            nb.blocks.Image(GIF, "image/png")

    def test_bytes_that_are_no_known_image_are_refused(self) -> None:
        """Bytes of no image type (or SVG) are InvalidBlock pointing at File."""
        with pytest.raises(InvalidBlock, match=r"nb.blocks.File"):
            nb.blocks.Image(b"<svg xmlns='http://www.w3.org/2000/svg'/>")
        with pytest.raises(InvalidBlock, match="not 'image/svg\\+xml'"):
            nb.blocks.Image(SMALL, "image/svg+xml")

    def test_a_path_that_does_not_exist_is_refused(self, tmp_path: Path) -> None:
        """A missing path is InvalidBlock naming it."""
        with pytest.raises(InvalidBlock, match=r"nope.png"):
            nb.blocks.Image(tmp_path / "nope.png")
        with pytest.raises(InvalidBlock, match="not a file"):
            nb.blocks.File(str(tmp_path))

    def test_a_block_past_the_size_limit_is_refused(self, tmp_path: Path) -> None:
        """More than MAX_BLOCK_BYTES, from bytes or from a path, is BlockTooLarge."""
        big = SMALL + bytes(MAX_BLOCK_BYTES)
        with pytest.raises(BlockTooLarge, match="MAX_BLOCK_BYTES"):
            nb.blocks.Image(big)
        path = tmp_path / "big.bin"
        path.write_bytes(big)
        with pytest.raises(BlockTooLarge):
            nb.blocks.File(path)

    def test_json_that_does_not_serialise_is_refused(self) -> None:
        """A Json block of a set, an object or NaN is InvalidBlock saying how to convert."""
        for value in ({1, 2}, object(), float("nan")):
            with pytest.raises(InvalidBlock, match="must hold JSON"):
                nb.blocks.Json(value)

    def test_a_json_block_is_a_copy_of_the_value(self) -> None:
        """Changing the value after making the block changes nothing in it."""
        value = {"a": [1]}
        block = nb.blocks.Json(value)
        value["a"].append(2)
        assert block.data == {"a": [1]}

    def test_a_file_guesses_its_type_from_its_name(self) -> None:
        """File(bytes, name=) takes the type its name suggests, else octet-stream."""
        assert nb.blocks.File(b"a,b\n", name="t.csv").mime == "text/csv"
        assert nb.blocks.File(b"\x00\x01").mime == "application/octet-stream"

    def test_an_unknown_block_type_is_refused(self) -> None:
        """A part of a type that is not text/json/image/file is InvalidBlock listing them."""
        with pytest.raises(InvalidBlock, match=r"unknown block type 'video'.*text, json"):
            block_of({"type": "video", "data": ""})
        with pytest.raises(InvalidBlock, match="not int"):
            block_of(3)

    def test_blocks_are_immutable(self) -> None:
        """A made block cannot be changed (its checks would no longer hold)."""
        block = nb.blocks.Image(SMALL)
        with pytest.raises(AttributeError):
            block.mime = "image/gif"  # type: ignore[misc]

    def test_a_part_round_trips_to_an_equal_block(self) -> None:
        """block_of(block.part()) is the same block (how HTTP carries them)."""
        for block in (
            nb.blocks.Text("hi"),
            nb.blocks.Json({"x": 1}),
            nb.blocks.Image(SMALL, name="a.png"),
            nb.blocks.File(b"pdf", "application/pdf", name="q.pdf"),
        ):
            assert block_of(block.part()) == block


class TestAnswerOutput:
    def test_text_comes_first_as_a_text_block(self) -> None:
        """Answer.output(text, blocks=[...]) holds Text(text) then the blocks."""
        answer = nb.Answer.output("see", blocks=[nb.blocks.Image(SMALL)])
        assert answer.blocks is not None
        assert [type(b).__name__ for b in answer.blocks] == ["Text", "Image"]

    def test_too_many_blocks_are_refused(self) -> None:
        """More than MAX_BLOCKS blocks is BlockTooLarge."""
        with pytest.raises(BlockTooLarge, match="MAX_BLOCKS"):
            nb.Answer.output(blocks=["x"] * (MAX_BLOCKS + 1))

    def test_blocks_must_be_a_list(self) -> None:
        """blocks= given a str or a dict is InvalidBlock; an empty answer InvalidInput."""
        with pytest.raises(InvalidBlock, match=r"list of nb.blocks"):
            nb.Answer.output(blocks="text")  # type: ignore[arg-type]
        with pytest.raises(nb.InvalidInput, match="nothing to give"):
            nb.Answer.output(blocks=[])

    def test_the_plain_text_answer_is_unchanged(self) -> None:
        """Answer.output(text) without blocks is the answer it always was."""
        assert nb.Answer.output("12k") == nb.Answer("output", text="12k")


class TestStoredForm:
    def test_small_bytes_stay_inline_and_large_ones_go_to_the_blobs(self) -> None:
        """Up to INLINE_BYTES the part keeps base64 data; past it only the blob digest."""
        blobs: dict[str, bytes] = {}

        def put(data: bytes) -> str:
            digest = f"d{len(blobs)}"
            blobs[digest] = data
            return digest

        assert len(SMALL) <= INLINE_BYTES < len(BIG)
        parts = [nb.blocks.Image(SMALL).part(), nb.blocks.Image(BIG).part()]
        small, big = stored(parts, put)
        assert base64.b64decode(small["data"]) == SMALL
        assert "blob" not in small
        assert "data" not in big
        assert blobs[big["blob"]] == BIG
        assert stored([small, big], put) == [small, big]  # already stored: unchanged

    def test_the_stand_in_names_each_image_and_file(self) -> None:
        """The text stand-in holds texts, compact JSON and a bracketed line per image."""
        parts = [
            nb.blocks.Text("Chart:").part(),
            nb.blocks.Image(SMALL, name="c.png").part(),
            nb.blocks.Json({"a": 1}).part(),
        ]
        assert stand_in(parts) == 'Chart:\n[image: c.png, image/png, 2.9 KB]\n{"a":1}'


class TestAnswersWithBlocks:
    def test_an_answer_with_an_image_becomes_the_calls_rich_result(
        self, make_runtime: MakeRuntime
    ) -> None:
        """The image's bytes go to the blobs, the result keeps its digest, the model sees the
        stand-in and the turn goes on."""
        model = nb.ScriptedModel([nb.ToolCall("annual_quote", {"vendor": "acme"}), "thanks"])
        session, rid = _quote_session(make_runtime(model, [annual_quote]))
        answer = nb.Answer.output("Quote:", blocks=[nb.blocks.Image(BIG, name="q.png")])
        assert session.respond(rid, answer).wait(WAIT).output == "thanks"
        (result,) = events_of(session, "tool/result")
        image = result.payload["blocks"][1]
        assert image["blob"] == image["sha256"]
        assert "data" not in image
        assert session.log.store.get_blob(image["blob"]) == BIG
        assert base64.b64encode(BIG).decode() not in json.dumps(result.payload)
        (resolved,) = events_of(session, "interaction/resolved")
        assert resolved.payload["answer"]["blocks"][1]["blob"] == image["blob"]
        seen = model.requests[-1][-1]
        assert seen.text == "Quote:\n[image: q.png, image/png, 28.3 KB]"

    def test_resending_the_same_rich_answer_returns_the_same_receipt(
        self, make_runtime: MakeRuntime
    ) -> None:
        """A retried respond with the same blocks is recognised (the digests are stable)."""
        model = nb.ScriptedModel([nb.ToolCall("annual_quote", {"vendor": "acme"}), "ok"])
        runtime = make_runtime(model, [annual_quote])
        _, rid = _quote_session(runtime)
        runtime.close()
        observer = make_runtime(model, [annual_quote], execute=False).open("s1")
        first = observer.respond(rid, nb.Answer.output(blocks=[nb.blocks.Image(BIG)]))
        again = observer.respond(rid, nb.Answer.output(blocks=[nb.blocks.Image(BIG)]))
        assert again.command_id == first.command_id
        other = nb.Answer.output(blocks=[nb.blocks.Image(SMALL)])
        with pytest.raises(nb.InvalidAnswer, match="already answered"):
            observer.respond(rid, other)
        executor = make_runtime(model, [annual_quote]).open("s1")
        executor.start()  # work accepted elsewhere is dispatched on start()
        assert executor.wait(first, WAIT).output == "ok"

    def test_a_bad_block_is_refused_before_anything_is_written(
        self, make_runtime: MakeRuntime
    ) -> None:
        """An answer with an unknown block type writes nothing; the request stays open."""
        model = nb.ScriptedModel([nb.ToolCall("annual_quote", {"vendor": "acme"}), "ok"])
        session, rid = _quote_session(make_runtime(model, [annual_quote]))
        heads = session.log.store.heads(session.key)
        with pytest.raises(InvalidBlock, match="unknown block type"):
            session.respond(rid, nb.Answer.output(blocks=[{"type": "video"}]))
        assert session.log.store.heads(session.key) == heads
        assert rid in session.pending()


class TestToolsReturningBlocks:
    def test_a_tool_may_return_blocks(self, make_runtime: MakeRuntime) -> None:
        """A tool's list of str and blocks is its rich result; the view's transcript has it."""
        agent = make_agent()
        runtime = make_runtime(agent.model, [chart])
        session = runtime.session("s1")
        outcome = session.run("chart", timeout=WAIT)
        assert outcome.status == "completed", outcome.error
        (tool,) = [m for m in session.transcript().messages if m.role == "tool"]
        kinds = [type(p).__name__ for p in tool.blocks]
        assert kinds == ["TextPart", "ImagePart", "ImagePart", "JsonPart"]
        big, small = tool.blocks[1], tool.blocks[2]
        assert isinstance(big, ImagePart)
        assert isinstance(small, ImagePart)
        assert big.blob is not None
        assert small.data is not None
        assert session.block_bytes(big.sha256) == (BIG, big)
        assert session.block_bytes(small.sha256)[0] == SMALL
        assert outcome.output is not None
        assert "[image: costs.png, image/png" in outcome.output

    def test_a_json_null_block_is_kept_as_null(self, make_runtime: MakeRuntime) -> None:
        """Json(None) is a block of its own (null), not a missing value."""

        @nb.tool
        def nothing() -> nb.blocks.Block:
            """A null."""
            return nb.blocks.Json(None)

        model = nb.ScriptedModel([nb.ToolCall("nothing", {}), "ok"])
        session = make_runtime(model, [nothing]).session("s1")
        assert session.run("go", timeout=WAIT).status == "completed"
        (result,) = events_of(session, "tool/result")
        assert result.payload["blocks"] == ({"type": "json", "data": None},)
        assert model.requests[-1][-1].text == "null"

    def test_a_tool_returning_a_bad_block_fails_that_call_and_the_turn_goes_on(
        self, make_runtime: MakeRuntime
    ) -> None:
        """A block the tool could not make is the call's error result; the model is told."""
        agent = make_agent()
        session = make_runtime(agent.model, agent.tools).session("s1")
        outcome = session.run("bad-image", timeout=WAIT)
        assert outcome.status == "completed"
        (result,) = events_of(session, "tool/result")
        assert result.payload["status"] == "error"
        assert "InvalidBlock" in result.payload["output"]
        assert "blocks" not in result.payload

    def test_a_tool_returning_too_many_blocks_gets_an_error_result(
        self, make_runtime: MakeRuntime
    ) -> None:
        """Past MAX_BLOCKS the call's result is an error saying so, and the turn ends."""

        @nb.tool
        def many() -> list[object]:
            """Too many blocks."""
            return [nb.blocks.Text(str(i)) for i in range(MAX_BLOCKS + 1)]

        model = nb.ScriptedModel([nb.ToolCall("many", {}), "ok"])
        session = make_runtime(model, [many]).session("s1")
        assert session.run("go", timeout=WAIT).status == "completed"
        (result,) = events_of(session, "tool/result")
        assert result.payload["status"] == "error"
        assert "MAX_BLOCKS" in result.payload["output"]

    def test_a_store_that_cannot_keep_the_bytes_ends_the_call_with_a_committed_reason(
        self,
    ) -> None:
        """A put_blob that fails is recorded as the call's error; no turn is left open."""

        class NoBlobs(nb.MemoryStore):
            def put_blob(self, data: bytes) -> str:
                raise StorageError("the blob store is full")

        agent = make_agent()
        with nb.Runtime(agent, store=NoBlobs()) as runtime:
            session = runtime.session("s1")
            outcome = session.run("chart", timeout=WAIT)
            assert outcome.status == "completed"
            (result,) = events_of(session, "tool/result")
            assert result.payload["status"] == "error"
            assert "the blob store is full" in result.payload["output"]
            assert [t.status for t in session.tasks()] == ["completed"]

    def test_a_blob_gone_before_the_model_call_fails_the_turn_with_the_reason(self) -> None:
        """A blob that cannot be read for the model call fails the run, reason committed."""

        class LosesBlobs(nb.MemoryStore):
            def get_blob(self, digest: str) -> bytes:
                raise Corrupt(f"blob {digest} is missing")

        with nb.Runtime(make_agent(), store=LosesBlobs()) as runtime:
            session = runtime.session("s1")
            outcome = session.run("chart", timeout=WAIT)
            assert outcome.status == "failed"
            assert outcome.error is not None
            assert "is missing" in outcome.error
            (end,) = list(events_of(session, "run/end"))
            assert end.payload["status"] == "failed"
            assert [t.status for t in session.tasks()] == ["failed"]


class TestViewsAndExports:
    @pytest.fixture
    def charted(self) -> Any:
        with nb.Runtime(make_agent(), store="memory://") as runtime:
            session = runtime.session("s1")
            assert session.run("chart", timeout=WAIT).status == "completed"
            yield session

    def test_the_snapshot_card_carries_the_blocks(self, charted: nb.Session) -> None:
        """The chat snapshot's tool card result holds the blocks (what the page draws)."""
        (card,) = [i for i in charted.snapshot().items if i.kind == "tool"]
        assert card.result is not None
        assert [b["type"] for b in card.result["blocks"]] == ["text", "image", "image", "json"]

    def test_the_session_view_shows_images_as_thumbnails(self, charted: nb.Session) -> None:
        """The view's tool card has an <img> per image, the blob one read through the session."""
        pytest.importorskip("ipywidgets")
        from agentnb.widgets import SessionView

        view = SessionView(charted)
        try:
            (card,) = [i for i in charted.snapshot().items if i.kind == "tool"]
            body = tool_html(card, view._block_src)
            assert body.count("<img ") == 2
            assert base64.b64encode(BIG).decode() in body
            assert base64.b64encode(SMALL).decode() in body
            # Without a session (a saved drawing), the blob image shows its stand-in.
            assert tool_html(card).count("<img ") == 1
            assert "[image: costs.png" in tool_html(card)
        finally:
            view.close()

    def test_another_sessions_digest_reads_nothing(self, charted: nb.Session) -> None:
        """block_bytes of a digest that is not this session's is InvalidBlock."""
        other = charted.runtime.session("s2")
        big = next(
            p for m in charted.transcript().messages for p in m.blocks if isinstance(p, ImagePart)
        )
        with pytest.raises(InvalidBlock, match="no image or file block"):
            other.block_bytes(big.sha256)

    def test_the_exports_show_the_stand_in_and_keep_the_parts(self, charted: nb.Session) -> None:
        """tool_calls.output is the stand-in; the event's payload keeps the parts, no bytes."""
        pytest.importorskip("duckdb")
        calls = analysis.tool_calls(charted.log.store)
        (output,) = calls["output"].tolist()
        assert "[image: costs.png, image/png" in output
        events = analysis.events(charted.log.store)
        (payload,) = events[events["type"] == "tool/result"]["payload"].tolist()
        parts = json.loads(payload)["blocks"]
        assert [p["type"] for p in parts] == ["text", "image", "image", "json"]
        assert base64.b64encode(BIG).decode() not in payload


class TestMessages:
    def test_a_message_without_blocks_keeps_its_bytes(self) -> None:
        """A tool message without blocks dumps as before (the field is left out)."""
        message = nb.Message(id="m", role="tool", text="x")
        assert "blocks" not in message.model_dump(mode="json")
        assert "blocks" not in repr(message)

    def test_a_message_holds_typed_parts(self) -> None:
        """Blocks decode into their part models."""
        message = nb.Message(
            id="m", role="tool", text="x", blocks=({"type": "text", "text": "hi"},)
        )
        assert message.blocks == (TextPart(text="hi"),)

    def test_png_helper_makes_an_image_the_sniffer_accepts(self) -> None:
        """The tests' PNGs are PNGs (so the image tests test images)."""
        assert nb.blocks.Image(png(4, 4)).mime == "image/png"
