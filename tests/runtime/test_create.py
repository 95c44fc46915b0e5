"""``runtime.create``: sessions whose ids the runtime makes (Everruns' ``engine.create``)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import agentnb as nb
from tests.runtime.helpers import WAIT

MakeRuntime = Callable[..., nb.Runtime]


def _echo(messages: list[nb.Message]) -> str:
    return f"done: {messages[-1].text}"


class TestGeneratedIds:
    def test_ids_are_unique_and_sort_in_creation_order(self, make_runtime: MakeRuntime) -> None:
        """Ids made one after another are distinct and sort as they were made."""
        runtime = make_runtime(nb.ScriptedModel(_echo))
        ids = [runtime.create().key.session_id for _ in range(50)]
        assert len(set(ids)) == 50
        assert ids == sorted(ids)
        assert all(i.startswith("s_") for i in ids)

    def test_a_created_session_opens_again_by_its_id(self, make_runtime: MakeRuntime) -> None:
        """The session exists at once: ``open`` finds it by the generated id, and it runs."""
        runtime = make_runtime(nb.ScriptedModel(_echo))
        session = runtime.create(user_id="alice")
        assert session.key.user_id == "alice"
        again = runtime.open(session.key.session_id, user_id="alice")
        assert again.run("hi", timeout=WAIT).output == "done: hi"

    def test_the_user_defaults_as_for_session(self, make_runtime: MakeRuntime) -> None:
        """Without ``user_id`` the session belongs to ``"default"``, as ``session()``'s do."""
        runtime = make_runtime(nb.ScriptedModel(_echo))
        assert runtime.create().key.user_id == "default"

    def test_create_starts_nothing(self, make_runtime: MakeRuntime) -> None:
        """A created session has an empty log and no model call."""
        model = nb.ScriptedModel(_echo)
        session = make_runtime(model).create()
        assert session.log.head() == 0
        assert model.requests == []


class TestTitleAndLabels:
    def test_title_and_labels_are_listed(self, make_runtime: MakeRuntime) -> None:
        """``sessions()`` lists the created session with the title and labels given."""
        runtime = make_runtime(nb.ScriptedModel(_echo))
        session = runtime.create(user_id="alice", title="Plan costs", labels={"team": "ops"})
        (info,) = runtime.sessions("alice", labels={"team": "ops"})
        assert (info.key, info.title, dict(info.labels)) == (
            session.key,
            "Plan costs",
            {"team": "ops"},
        )

    @pytest.mark.parametrize(
        ("kwargs", "field"),
        [
            ({"title": "two\nlines"}, "title"),
            ({"title": ""}, "title"),
            ({"labels": {"team": 3}}, "label"),
            ({"labels": ["team"]}, "labels"),
            ({"user_id": ""}, "user_id"),
        ],
    )
    def test_bad_input_is_refused_before_anything_is_written(
        self, make_runtime: MakeRuntime, kwargs: dict[str, object], field: str
    ) -> None:
        """A bad title, label or user is ``InvalidInput`` naming it, and no session appears."""
        runtime = make_runtime(nb.ScriptedModel(_echo))
        with pytest.raises(nb.InvalidInput, match=field):
            runtime.create(**kwargs)  # type: ignore[arg-type]
        assert runtime.all_keys() == []
