"""docs/doors.md's Python snippet runs as written against ``agentnb serve``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import agentnb
from tests.doors.conftest import Doors

pytest.importorskip("openai")

DOC = Path(agentnb.__file__).resolve().parent.parent / "docs" / "doors.md"


def test_the_openai_snippet_runs(doors: Doors, monkeypatch: pytest.MonkeyPatch) -> None:
    """The OpenAI section's snippet answers its approval and resumes its stream."""
    [block] = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    monkeypatch.setenv("AGENTNB_URL", doors.url)
    monkeypatch.setenv("AGENTNB_TOKEN", doors.alice)
    namespace: dict[str, object] = {}
    exec(compile(block, str(DOC), "exec"), namespace)
    assert getattr(namespace["answered"], "output_text", None) == "done: ordered 2 pen"
