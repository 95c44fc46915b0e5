"""The API fuzzed from its own OpenAPI schema (schemathesis): whatever a client sends, the
service answers without a server error, with a status, content type and body its schema
declares. The stream (endless by design) and ``/wait`` (which holds a request up to 30 s)
are left out; the other tests cover them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

import agentnb as nb
from agentnb import tokens
from agentnb.server import create_app
from tests.service._agent import agent

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


def _spec() -> dict[str, Any]:
    """The service's OpenAPI schema (read from an app on a throwaway memory runtime)."""
    runtime = nb.Runtime(agent, store="memory://")
    try:
        spec: dict[str, Any] = create_app(runtime).openapi()
        return spec
    finally:
        runtime.close()


schema = (
    schemathesis.openapi.from_dict(_spec())
    .exclude(path_regex=r".*/stream$")
    .exclude(path_regex=r".*/wait$")
)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, str]]:
    """The app on SQLite, with a session that has work in it; a token for its user."""
    root: Path = tmp_path_factory.mktemp("fuzz")
    runtime = nb.Runtime(agent, store=f"sqlite:///{root / 'fuzz.sqlite'}")
    token, _ = tokens.issue(runtime.store, "fuzzer")
    runtime.session("s1", user_id="fuzzer").run("hello", timeout=30)
    try:
        yield create_app(runtime), token
    finally:
        runtime.close()


@schema.parametrize()
@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_api_answers_as_its_schema_says(case: Any, served: tuple[Any, str]) -> None:
    """No 5xx; every response's status, content type and body match the schema."""
    app, token = served
    case.call_and_validate(app=app, headers={"Authorization": f"Bearer {token}"}, checks=CHECKS)
