"""The ``agentnb`` parser: one subcommand per command, in the order ``--help`` lists them;
each command group adds its own (``agentnb.cli.<group>``)."""

from __future__ import annotations

import argparse
from collections.abc import Callable

import agentnb as nb
from agentnb.cli.exports import export_commands
from agentnb.cli.format import EXIT_CODES
from agentnb.cli.lifecycle import lifecycle_commands
from agentnb.cli.reading import reading_commands, sessions_command
from agentnb.cli.running import demo_command, worker_command
from agentnb.cli.service import service_commands
from agentnb.cli.turns import turn_commands


class _Formatter(argparse.HelpFormatter):
    """Wraps descriptions as usual, and keeps the exit-code table's lines as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith("exit codes:"):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def build_parser() -> argparse.ArgumentParser:
    """The ``agentnb`` parser; each subcommand carries its handler (``args.func``)."""
    parser = argparse.ArgumentParser(
        prog="agentnb",
        description=(
            "Durable, steerable AI-agent sessions: run the demo, read sessions, export them "
            "and query the exports. Example: agentnb demo, then agentnb sessions"
        ),
        epilog=EXIT_CODES,
        formatter_class=_Formatter,
    )
    parser.add_argument("--version", action="version", version=f"agentnb {nb.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(
        name: str, func: Callable[[argparse.Namespace], int], help: str, description: str
    ) -> argparse.ArgumentParser:
        p = sub.add_parser(
            name,
            help=help,
            description=description,
            epilog=EXIT_CODES,
            formatter_class=_Formatter,
        )
        p.set_defaults(func=func, command_parser=p)
        return p

    demo_command(command)
    export_commands(command)
    sessions = sessions_command(command)
    lifecycle_commands(sessions, command)
    reading_commands(command)
    turn_commands(command)
    worker_command(command)
    service_commands(command)
    return parser
