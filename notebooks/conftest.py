"""nbval runs every notebook here; 06 needs the real model that .ci/run builds.

Outside CI, ``06-a-real-model.ipynb`` is skipped (saying what to install) when llama.cpp or
the SmolLM2 weights are absent; with ``CI=true`` it runs, and fails if they are.
"""

from __future__ import annotations

import os

import pytest

from agentnb.testing.llama_server import missing

REAL_MODEL = "06-a-real-model.ipynb"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    why = missing()
    if why is None or os.environ.get("CI") == "true":
        return
    for item in items:
        if item.path.name == REAL_MODEL:
            item.add_marker(pytest.mark.skip(reason=why))
