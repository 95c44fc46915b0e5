"""Agents by their import path: ``"package.module:attribute"``.

A worker process started with ``spawn`` (macOS, Windows, a process whose threads make
``fork`` unsafe) shares no memory with its parent: it imports the agent again, by the path
of the module attribute that holds it. ``agent_path`` finds that path for an agent object;
``load_agent`` imports one.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

from agentnb.agent import Agent
from agentnb.errors import InvalidInput

__all__ = ["agent_path", "load_agent"]

_MAINS = ("__main__", "__mp_main__")


def load_agent(spec: str, *, what: str = "agent") -> Agent:
    """Import the ``nb.Agent`` at ``module:attribute``; ``InvalidInput`` saying what failed."""
    if not isinstance(spec, str):
        raise InvalidInput(f"{what} must be an nb.Agent or 'module:attribute', got {spec!r}")
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise InvalidInput(
            f"{what} {spec!r} is not a path: write it as 'package.module:attribute', e.g. "
            "'agents:support_agent'"
        )
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - importing runs its code: any error is a "cannot"
        raise InvalidInput(
            f"{what} {spec!r}: module {module_name!r} cannot be imported ({type(exc).__name__}: "
            f"{exc}); put the folder that holds it on sys.path (or PYTHONPATH)"
        ) from None
    value: object = module
    for part in attr.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise InvalidInput(
                f"{what} {spec!r}: {module_name} has no attribute {attr!r}; define the agent "
                "at the top level of the module"
            ) from None
    if not isinstance(value, Agent):
        raise InvalidInput(f"{what} {spec!r} is a {type(value).__name__}, not an nb.Agent")
    return value


def agent_path(agent: Agent) -> str | None:
    """The ``module:attribute`` a fresh process imports ``agent`` by, or None.

    A module other than the main one is preferred; the main module counts only when it is a
    file (a script: ``multiprocessing`` runs it again, as ``__mp_main__``, in a spawned
    worker), never in a notebook or ``python -c``, whose code no other process can import.
    """
    found_main: str | None = None
    for name, module in list(sys.modules.items()):
        if not isinstance(module, ModuleType):
            continue
        try:
            members = list(vars(module).items())
        except TypeError:
            continue
        for attr, value in members:
            if value is not agent or attr.startswith("__"):
                continue
            if name in _MAINS:
                if getattr(module, "__file__", None) and found_main is None:
                    found_main = f"__main__:{attr}"
                continue
            return f"{name}:{attr}"
    return found_main
