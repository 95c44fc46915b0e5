"""The agentnb command line: the demo, reading sessions, exports, audit queries, workers.

One module per command group, each with its commands' handlers and arguments:
``running`` (demo, worker), ``exports`` (export, query), ``reading`` (sessions, show,
tail), ``lifecycle`` (archive, unarchive, delete, prune), ``turns`` (resume, cancel) and
``service`` (serve, token; the operations come from ``agentnb.ops.cli``); ``parser`` puts
them together, ``format`` is how they print and ``args`` what they share. Here: ``main``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from agentnb.cli.format import (
    EXIT_DATA,
    EXIT_FAILED,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_USAGE,
    NULL,
    exit_code,
    jsonable,
    visible,
)
from agentnb.cli.parser import build_parser
from agentnb.errors import AgentnbError

# NULL, _jsonable and _parser are not the command line's contract, but tests and the docs'
# checks import them from here, where they were defined (under these names) before the package.
_jsonable = jsonable
_parser = build_parser
__all__ = [
    "EXIT_DATA",
    "EXIT_FAILED",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_USAGE",
    "NULL",
    "_jsonable",
    "_parser",
    "exit_code",
    "main",
]


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns its exit code (argparse exits 2 itself on usage errors)."""
    args, unknown = build_parser().parse_known_args(argv)
    if unknown:  # a misspelt option of a command: that command's usage, not the top one's
        args.command_parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        result: int = args.func(args)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader stopped early (`agentnb show ID | head`): what it read is what it
        # wanted. Point stdout at nothing, so the interpreter's last flush is quiet too.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_OK
    except AgentnbError as exc:
        print(f"error: {visible(str(exc))}", file=sys.stderr)
        return exit_code(exc)
    except OSError as exc:  # a file the command needed could not be read or written
        print(f"error: {visible(str(exc))}", file=sys.stderr)
        return EXIT_FAILED
    except ImportError as exc:  # an extra the command needs is not installed; exc says which
        print(f"error: {visible(str(exc))}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return 130
    return result
