"""Events: ids, the envelope, payload freezing and validation, application types."""

from __future__ import annotations

import math
import pickle
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from agentnb import events
from agentnb.errors import InvalidInput, UnknownRequiredEvent
from agentnb.events import (
    BUILTIN_TYPES,
    INBOX_TYPES,
    PAYLOADS,
    Event,
    FrozenDict,
    Message,
    RunStart,
    StepStart,
    ToolCallData,
    canonical_json,
    check_readable,
    decode_json,
    decode_payload,
    event_digest,
    freeze_json,
    register_event_type,
    unregister_event_type,
)
from agentnb.ids import FakeClock, SequentialIds, SessionKey, UUID7Ids, check_id, new_id


@pytest.fixture
def registered() -> Iterator[list[str]]:
    """Names registered by a test; unregistered afterwards so tests stay independent."""
    names: list[str] = []
    yield names
    for name in names:
        unregister_event_type(name)


def _nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


class Note(BaseModel):
    text: str
    score: int = 0


class TestIds:
    def test_uuid7_ids_sort_in_creation_order(self) -> None:
        """Ids made one after another sort in the order they were made, within a millisecond too."""
        factory = UUID7Ids()
        ids = [factory.new("evt") for _ in range(5000)]
        assert ids == sorted(ids)
        assert len(set(ids)) == len(ids)

    def test_new_id_has_prefix_and_uuid7_shape(self) -> None:
        """new_id returns '<prefix>_<32 hex digits>' with the UUID version 7 nibble."""
        value = new_id("turn")
        prefix, hex_part = value.split("_")
        assert prefix == "turn"
        assert len(hex_part) == 32
        int(hex_part, 16)
        assert hex_part[12] == "7"

    def test_sequential_ids_are_deterministic_per_prefix(self) -> None:
        """SequentialIds counts from 1 separately for each prefix."""
        ids = SequentialIds()
        assert [ids.new("evt"), ids.new("evt"), ids.new("run"), ids.new("evt")] == [
            "evt_000001",
            "evt_000002",
            "run_000001",
            "evt_000003",
        ]

    def test_fake_clock_moves_only_when_told(self) -> None:
        """FakeClock.now() changes only through advance()."""
        clock = FakeClock(100.0)
        assert clock.now() == clock.now() == 100.0
        clock.advance(2.5)
        assert clock.now() == 102.5

    @pytest.mark.parametrize("value", ["", "x" * 257, "a\nb", "tab\there", 5, None])
    def test_check_id_refuses_unusable_ids(self, value: Any) -> None:
        """Empty, overlong, control-character and non-string ids raise InvalidInput."""
        with pytest.raises(InvalidInput):
            check_id(value, "id")

    def test_session_key_validates_and_prints(self) -> None:
        """SessionKey checks each part and prints as namespace/user/agent/session."""
        key = SessionKey("ns", "alice", "agent", "s1")
        assert str(key) == "ns/alice/agent/s1"
        with pytest.raises(InvalidInput):
            SessionKey("ns", "", "agent", "s1")


class TestEnvelope:
    def test_create_fills_the_envelope(self) -> None:
        """Event.create assigns an evt_ id, seq 0, a UTC time and the built-in required flag."""
        event = Event.create(
            "step/start", {"step_id": "s", "iteration": 1}, turn_id="t", run_id="r"
        )
        assert event.event_id.startswith("evt_")
        assert event.seq == 0
        assert event.occurred_at.utcoffset() is not None
        assert (event.type, event.turn_id, event.run_id, event.required) == (
            "step/start",
            "t",
            "r",
            True,
        )
        assert (
            Event.create("model/chunk", {"model_call_id": "m", "index": 0, "text": "x"}).required
            is False
        )

    def test_envelope_is_frozen(self) -> None:
        """Envelope fields cannot be reassigned."""
        event = Event.create("step/start", {"step_id": "s", "iteration": 1})
        with pytest.raises(ValidationError):
            event.seq = 5  # type: ignore[misc]

    def test_with_seq_copies(self) -> None:
        """with_seq returns a committed copy and leaves the original at seq 0."""
        event = Event.create("step/start", {"step_id": "s", "iteration": 1})
        committed = event.with_seq(4)
        assert (committed.seq, event.seq) == (4, 0)
        assert committed.event_id == event.event_id
        assert committed.payload == event.payload

    def test_data_decodes_typed_payloads(self) -> None:
        """Event.data returns the payload model for built-in types and the mapping otherwise."""
        event = Event.create("step/start", {"step_id": "s", "iteration": 3})
        data = event.data
        assert isinstance(data, StepStart)
        assert data.iteration == 3
        app = Event.create("acme/thing", {"k": [1]})
        assert app.data == {"k": (1,)}

    def test_payload_model_instances_are_accepted(self) -> None:
        """A payload given as its model is stored as the model's JSON."""
        event = Event.create("step/start", StepStart(step_id="s", iteration=2))
        assert event.payload == {"step_id": "s", "iteration": 2}

    def test_every_builtin_type_has_a_payload_model(self) -> None:
        """PAYLOADS covers every built-in type, including the inbox types."""
        assert frozenset(PAYLOADS) == BUILTIN_TYPES
        assert INBOX_TYPES <= BUILTIN_TYPES

    @pytest.mark.parametrize(
        ("type_", "payload"),
        [
            ("step/start", {"step_id": "s"}),  # missing field
            ("step/start", {"step_id": "s", "iteration": 1, "extra": True}),  # unknown field
            ("step/start", {"step_id": "s", "iteration": "one"}),  # wrong type
            ("step/start", ["not", "an", "object"]),
            ("step/bogus", {}),  # built-in prefix, unknown name
            ("NotAType", {}),
            ("acme/", {}),
        ],
    )
    def test_invalid_payloads_and_types_are_invalid_input(self, type_: str, payload: Any) -> None:
        """Payloads that do not fit their type, and unknown types, raise InvalidInput."""
        with pytest.raises(InvalidInput):
            Event.create(type_, payload)

    @pytest.mark.parametrize("kwargs", [{"turn_id": ""}, {"run_id": 5}, {"event_id": "a\x00b"}])
    def test_bad_envelope_ids_are_invalid_input(self, kwargs: dict[str, Any]) -> None:
        """Envelope ids that are not usable identifiers raise InvalidInput."""
        with pytest.raises(InvalidInput):
            Event.create("acme/x", {}, **kwargs)

    def test_non_string_type_is_invalid_input(self) -> None:
        """An event type that is not a string raises InvalidInput."""
        with pytest.raises(InvalidInput):
            Event.create(42, {})  # type: ignore[arg-type]


class TestDigest:
    def test_content_digest_is_stable(self) -> None:
        """The same events always give the same digest, whatever their seq or key order."""
        event = Event.create("acme/x", {"b": 1, "a": [1, {"d": 2, "c": 3}]})
        rebuilt = Event.create(
            "acme/x",
            {"a": [1, {"c": 3, "d": 2}], "b": 1},
            event_id=event.event_id,
            occurred_at=event.occurred_at,
        )
        assert event_digest([event]) == event_digest([rebuilt]) == event_digest([event.with_seq(9)])
        assert event.content_key() == rebuilt.content_key()
        assert len(event_digest([event])) == 64

    def test_content_digest_changes_with_content(self) -> None:
        """Any change of payload, type, ids, order or flags changes the digest."""
        a = Event.create("acme/x", {"n": 1})
        b = Event.create("acme/x", {"n": 1})
        variants = [
            [a],
            [b],  # another event id
            [a, b],
            [b, a],
            [Event.create("acme/x", {"n": 2}, event_id=a.event_id, occurred_at=a.occurred_at)],
            [Event.create("acme/y", {"n": 1}, event_id=a.event_id, occurred_at=a.occurred_at)],
            [
                Event.create(
                    "acme/x", {"n": 1}, event_id=a.event_id, occurred_at=a.occurred_at, turn_id="t"
                )
            ],
        ]
        digests = [event_digest(v) for v in variants]
        assert len(set(digests)) == len(digests)

    def test_canonical_json_is_compact_and_sorted(self) -> None:
        """canonical_json sorts keys, has no spaces and keeps non-ASCII text."""
        assert canonical_json({"b": 1, "a": "é"}) == '{"a":"é","b":1}'
        assert canonical_json(freeze_json({"b": [1, 2], "a": None})) == '{"a":null,"b":[1,2]}'


class TestCodec:
    @pytest.mark.parametrize(
        "payload",
        [
            {"big": 2**70, "small": -(2**70), "list": [2**64, 1]},
            {"tiny": 1e-7, "less": 3.3e-5, "huge": 1.5e300, "half": 0.5, "zero": -0.0},
            {"text": 'é\u2028\x00\x1f"\\', "nested": {"b": [{"a": None}], "a": True}},
            {"digits": "12345678901234567890", "n": 9223372036854775807},
        ],
    )
    def test_payloads_round_trip_through_the_log_codec(self, payload: dict[str, Any]) -> None:
        """What canonical_json writes, decode_payload reads back as the same frozen value:
        integers past 64 bits stay integers, floats keep their value, text its characters."""
        frozen = freeze_json(payload)
        text = canonical_json(frozen)
        back = decode_payload(text)
        assert back == frozen
        assert isinstance(back, FrozenDict)
        assert canonical_json(back) == text
        assert {k: type(v) for k, v in back.items()} == {k: type(v) for k, v in frozen.items()}
        assert decode_json(text) == payload

    def test_the_codec_writes_what_the_standard_encoder_writes(self) -> None:
        """Sorted keys, no spaces, text as it is, the shortest float digits (only the
        exponent of a float below 1e-4 is written unpadded)."""
        value = freeze_json({"b": [1, 2.5, 1e16], "a": "é", "c": {"z": None, "y": 1e-7}})
        assert canonical_json(value) == '{"a":"é","b":[1,2.5,1e+16],"c":{"y":1e-7,"z":null}}'

    @pytest.mark.parametrize(
        "text", ["NaN", '{"n": NaN}', '{"n": 1e400}', "[1, 2]", '"text"', "{", '{"s":"\\ud800"}']
    )
    def test_decoding_refuses_what_is_not_a_json_object(self, text: str) -> None:
        """Text that is not a JSON object the codec wrote raises ValueError."""
        with pytest.raises(ValueError):
            decode_payload(text)


class TestBuiltPayloads:
    @pytest.mark.parametrize(
        ("type_", "payload"),
        [
            ("run/start", {}),
            ("step/start", {"step_id": "step_1", "iteration": 2}),
            (
                "model/end",
                {"model_call_id": "mc_1", "status": "completed", "model": "m", "latency_ms": 5},
            ),
            (
                "message/assistant",
                {
                    "message": Message(
                        id="msg_1",
                        role="assistant",
                        text="x\ud83d",
                        tool_calls=(ToolCallData(call_id="c1", name="t", arguments={"n": 1}),),
                    )
                },
            ),
            ("tool/result", {"call_id": "c1", "name": "t", "status": "success", "output": "ok"}),
            ("model/chunk", {"model_call_id": "mc_1", "index": 0, "text": "hi", "pieces": 3}),
        ],
    )
    def test_a_built_event_is_stored_as_a_created_one(
        self, type_: str, payload: dict[str, Any]
    ) -> None:
        """A payload the runtime builds (Event.built, no validation) is what Event.create
        stores: defaults filled in, ints of float fields as floats, messages dumped, text
        cleaned, the same required flag."""
        built = Event.built(type_, payload, turn_id="turn_1", run_id="run_1")
        created = Event.create(type_, payload, turn_id="turn_1", run_id="run_1")
        assert built.payload == created.payload
        assert canonical_json(built.payload) == canonical_json(created.payload)
        assert (built.type, built.required, built.turn_id) == (
            created.type,
            created.required,
            created.turn_id,
        )

    def test_the_check_mode_refuses_a_payload_its_model_would_not_store(self) -> None:
        """With CHECK_BUILT (on in this suite) a built payload that its model would refuse
        or store differently fails loudly instead of reaching a log."""
        assert events.CHECK_BUILT
        with pytest.raises(InvalidInput):
            Event.built("step/start", {"step_id": "step_1"})  # iteration is required
        with pytest.raises(InvalidInput):
            Event.built("step/start", {"step_id": "step_1", "iteration": 1, "extra": 1})

    def test_other_types_and_payloads_go_through_the_validating_door(self) -> None:
        """Application types and payloads that are not dicts are validated as by create."""
        with pytest.raises(InvalidInput):
            Event.built("acme/x", {"n": math.nan})
        with pytest.raises(InvalidInput):
            Event.built("run/start", RunStart(reason="resume"), turn_id=5)  # type: ignore[arg-type]
        assert Event.built("run/start", None).payload == Event.create("run/start").payload


class TestFreezing:
    def test_payload_mutation_raises_type_error(self) -> None:
        """Every mutating operation on a payload, at any depth, raises TypeError."""
        event = Event.create("acme/x", {"a": {"b": 1}, "list": [1]})
        payload = event.payload
        with pytest.raises(TypeError):
            payload["a"] = 2
        with pytest.raises(TypeError):
            del payload["a"]
        with pytest.raises(TypeError):
            payload.update({"c": 1})
        with pytest.raises(TypeError):
            payload.pop("a")
        with pytest.raises(TypeError):
            payload.setdefault("z", 1)
        with pytest.raises(TypeError):
            payload.clear()
        with pytest.raises(TypeError):
            payload["a"]["b"] = 2
        assert isinstance(payload["list"], tuple)

    def test_caller_dict_is_copied(self) -> None:
        """Changing the dict passed to Event.create does not change the event."""
        raw: dict[str, Any] = {"items": [1, 2]}
        event = Event.create("acme/x", raw)
        raw["items"].append(3)
        raw["new"] = True
        assert event.payload == {"items": (1, 2)}

    @pytest.mark.parametrize(
        "payload",
        [
            {"s": {1, 2}},
            {"n": math.nan},
            {"n": math.inf},
            {"o": object()},
            {1: "non-string key"},
            {"b": b"bytes"},
            {"deep": _nested(70)},
        ],
    )
    def test_non_json_payloads_are_invalid_input(self, payload: Any) -> None:
        """Payloads JSON cannot carry exactly raise InvalidInput from Event.create."""
        with pytest.raises(InvalidInput):
            Event.create("acme/x", payload)

    def test_messages_inside_a_builtin_payload_are_checked_once_dumped(self) -> None:
        """A message model in a built-in payload is taken as a model and dumped once: its
        text is cleaned, too deep tool arguments are refused naming where, and a float JSON
        cannot carry is written as null (as the model's JSON dump writes it)."""
        split = "\ud83d"  # half of a surrogate pair, as a split stream leaves it
        message = Message(id="msg_1", role="assistant", text=f"a{split}b")
        event = Event.create("message/assistant", {"message": message})
        assert event.payload["message"]["text"] == "a\ufffdb"
        assert isinstance(event.payload["message"], FrozenDict)

        def assistant(arguments: dict[str, Any]) -> Message:
            call = ToolCallData(call_id="call_1", name="look", arguments=arguments)
            return Message(id="msg_2", role="assistant", tool_calls=(call,))

        deep = r"tool_calls\[0\]\.arguments\.deep.* is nested deeper"
        with pytest.raises(InvalidInput, match=deep):
            Event.create("message/assistant", {"message": assistant({"deep": _nested(70)})})
        for number in (math.nan, math.inf):
            event = Event.create("message/assistant", {"message": assistant({"n": number})})
            assert event.payload["message"]["tool_calls"][0]["arguments"] == {"n": None}
        event = Event.create(
            "message/assistant", {"message": assistant({"k": [f"v{split}", {"x": 1.5}]})}
        )
        (dumped,) = event.payload["message"]["tool_calls"]
        assert dumped["arguments"] == {"k": ("v\ufffd", FrozenDict({"x": 1.5}))}

    def test_frozen_dict_hashes_and_pickles(self) -> None:
        """Frozen payloads hash by content and survive pickling still frozen."""
        a = freeze_json({"x": [1, {"y": 2}]})
        b = freeze_json({"x": [1, {"y": 2}]})
        assert hash(a) == hash(b)
        copy = pickle.loads(pickle.dumps(a))
        assert copy == a
        assert isinstance(copy, FrozenDict)
        with pytest.raises(TypeError):
            copy["x"] = 1


class TestApplicationTypes:
    def test_unknown_required_application_type_is_refused(self) -> None:
        """A required application type without a registered codec raises InvalidInput."""
        with pytest.raises(InvalidInput, match="register_event_type"):
            Event.create("acme/x", {"a": 1}, required=True)

    def test_optional_unknown_application_type_passes(self) -> None:
        """An unregistered application type is accepted as optional raw JSON."""
        event = Event.create("acme/x", {"a": 1})
        assert event.required is False
        assert event.payload == {"a": 1}

    def test_registered_model_validates_payloads(self, registered: list[str]) -> None:
        """A type registered with a model validates (and normalises) its payloads."""
        register_event_type("acme/note", model=Note, required=True)
        registered.append("acme/note")
        event = Event.create("acme/note", {"text": "hi"})
        assert event.payload == {"text": "hi", "score": 0}
        assert event.required is True
        assert Event.create("acme/note", {"text": "hi"}, required=False).required is False
        with pytest.raises(InvalidInput):
            Event.create("acme/note", {"text": 5})
        with pytest.raises(InvalidInput):
            Event.create("acme/note", {})

    def test_registered_validate_function_checks_payloads(self, registered: list[str]) -> None:
        """A type registered with validate= runs it and keeps what it returns."""

        def validate(data: Any) -> Any:
            if "id" not in data:
                raise ValueError("id is required")
            return {"id": str(data["id"]).upper()}

        register_event_type("acme/ref", validate=validate)
        registered.append("acme/ref")
        assert Event.create("acme/ref", {"id": "ab"}).payload == {"id": "AB"}
        with pytest.raises(InvalidInput, match="id is required"):
            Event.create("acme/ref", {})

    @pytest.mark.parametrize("name", ["tool/custom", "message/extra", "inbox/mine", "run/x"])
    def test_register_refuses_builtin_prefixes(self, name: str) -> None:
        """Names under a built-in prefix raise InvalidInput."""
        with pytest.raises(InvalidInput):
            register_event_type(name)

    @pytest.mark.parametrize(
        "name", ["noslash", "Acme/Note", "acme/", "/note", "acme/note/extra", "acme note/x", 5]
    )
    def test_register_refuses_malformed_names(self, name: Any) -> None:
        """Names that are not 'vendor/name' in lowercase raise InvalidInput."""
        with pytest.raises(InvalidInput):
            register_event_type(name)

    def test_register_refuses_duplicates(self, registered: list[str]) -> None:
        """Registering the same name twice raises InvalidInput."""
        register_event_type("acme/once")
        registered.append("acme/once")
        with pytest.raises(InvalidInput):
            register_event_type("acme/once")

    def test_register_refuses_model_and_validate_together(self) -> None:
        """Passing both model= and validate= raises InvalidInput."""
        with pytest.raises(InvalidInput):
            register_event_type("acme/both", model=Note, validate=lambda d: d)

    def test_check_readable_fails_closed_on_unknown_required(self, registered: list[str]) -> None:
        """An unknown required type raises UnknownRequiredEvent for a reader; optional passes."""
        check_readable("acme/later", False, session="s", seq=1)
        check_readable("step/start", True, session="s", seq=1)
        with pytest.raises(UnknownRequiredEvent, match="seq 7"):
            check_readable("acme/later", True, session="s", seq=7)
        register_event_type("acme/later", required=True)
        registered.append("acme/later")
        check_readable("acme/later", True, session="s", seq=7)


def _no_encoding(*_: Any) -> str:
    raise AssertionError("a committed payload was encoded again")


class TestEncodeOnce:
    def test_a_new_event_carries_its_canonical_text(self) -> None:
        """create and built encode the payload once, when the event is built: payload_json is
        its canonical JSON, and canonical_json of the payload hands back that same text."""
        created = Event.create("acme/x", {"b": 1, "a": [1, {"d": 2, "c": 3}]})
        built = Event.built("step/start", {"step_id": "s", "iteration": 1})
        for event in (created, built):
            assert event.payload_json == canonical_json(dict(event.payload))
            assert canonical_json(event.payload) is event.payload_json
            assert event.with_seq(3).payload_json is event.payload_json

    def test_a_stored_event_is_never_encoded_again(
        self, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A store row holds the event's text; an event read back carries the row's text, and
        its row, its raw form, its digest and its stream frame are made without encoding."""
        from agentnb.server.stream import _committed
        from agentnb.stores._rows import RawEvent, encode
        from agentnb.stores.sqlite import SQLiteStore

        store = SQLiteStore(tmp_path / "agentnb.sqlite")
        key = SessionKey("ns", "u", "a", "s")
        store.create_session(key)
        event = Event.create("acme/x", {"text": "é", "n": [1, 2.5]})
        store.append(key, [event], expected_seq=0, batch_id="b")
        monkeypatch.setattr(events.codec, "_encode", _no_encoding)
        (read,) = store.read_after(key, 0, 1)
        assert read.payload_json == event.payload_json
        assert encode(read, 1, _no_encoding).payload == read.payload_json
        assert RawEvent.of(read).payload_json == read.payload_json
        assert canonical_json(read.payload) == read.payload_json
        assert event_digest([read]) == event_digest([event])
        assert f',"data":{read.payload_json}}}' in _committed("s", read, raw=True, more=None)
        (raw,) = store.read_raw(key, 0, 1)
        assert raw.to_event().payload_json == raw.payload_json
        store.close()


class TestSlottedEnvelope:
    def test_events_are_slotted_values(self) -> None:
        """An event has no instance dict; it is weakly referenceable, hashes and compares
        by its fields, and pickles with its text."""
        import weakref

        event = Event.create("step/start", {"step_id": "s", "iteration": 1}, turn_id="t")
        assert not hasattr(type(event), "__dictoffset__") or type(event).__dictoffset__ == 0
        assert weakref.ref(event)() is event
        twin = Event.model_construct(**event.__dict__)
        assert twin == event
        assert hash(twin) == hash(event)
        assert twin != event.with_seq(1)
        back = pickle.loads(pickle.dumps(event.with_seq(4)))
        assert back == event.with_seq(4)
        assert back.payload_json == event.payload_json
        assert type(back.payload) is FrozenDict

    def test_pydantic_names_keep_working(self) -> None:
        """model_validate checks foreign data, model_dump dumps as pydantic did, model_copy
        replaces fields and keeps an unchanged payload's text."""
        event = Event.create("step/start", {"step_id": "s", "iteration": 1}, turn_id="t")
        dumped = event.model_dump(mode="json")
        assert dumped["payload"] == {"step_id": "s", "iteration": 1}
        assert dumped["occurred_at"].endswith("Z")
        assert Event.model_validate(dumped) == event
        with pytest.raises(ValidationError):
            Event.model_validate({**dumped, "seq": -1})
        with pytest.raises(ValidationError):
            Event.model_validate({**dumped, "extra": 1})
        copy = event.model_copy(update={"event_id": "evt_other"})
        assert (copy.event_id, copy.payload_json) == ("evt_other", event.payload_json)
        changed = event.model_copy(update={"payload": {"step_id": "t", "iteration": 2}})
        assert changed.payload_json == '{"iteration":2,"step_id":"t"}'
        assert type(changed.payload) is FrozenDict

    def test_no_constructor_bypasses(self) -> None:
        """The package builds events through their constructors only: no object.__new__."""
        from pathlib import Path

        package = Path(events.__file__).parent
        for path in package.glob("*.py"):
            assert "object.__new__" not in path.read_text(), path.name
