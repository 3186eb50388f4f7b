"""What every command-line tool shares, so that all behave alike (docs/reference/commands.md).

- ``ArgumentParser`` (``derl.arguments``, shared with the parsers below this floor): ``--help`` prints
  help and exits 0; an unknown flag or subcommand, a missing argument or a count out of its range
  (``bounded_int``) is one line on stderr and exit code 2, as every other input error; a negative
  number is a value (``KEY -1e1``);
- ``run``: a tool's ``main(argv)`` returns its exit code; Ctrl-C while it runs is one line and
  130 (128 + SIGINT), never a traceback. Tools that train stop at the end of an iteration with a
  checkpoint first (``derl.training.run.SignalStop``, the evolution's and evaluation's own handlers).
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from typing import NoReturn

from derl.arguments import EXIT_USAGE, ArgumentParser, any_seed, bounded_int

__all__ = ["EXIT_INTERRUPTED", "EXIT_USAGE", "ArgumentParser", "any_seed", "bounded_int", "run"]

EXIT_INTERRUPTED = 128 + signal.SIGINT


def run(main: Callable[[list[str]], int | None]) -> NoReturn:
    """Exits with ``main(sys.argv[1:])``'s code (None: 0); Ctrl-C: one line, ``EXIT_INTERRUPTED``."""
    try:
        code = main(sys.argv[1:])
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        code = EXIT_INTERRUPTED
    sys.exit(code or 0)
