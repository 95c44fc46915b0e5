"""``python -m agentnb.cli``: the same command line as the ``agentnb`` script."""

from __future__ import annotations

import sys

from agentnb.cli import main

if __name__ == "__main__":
    sys.exit(main())
