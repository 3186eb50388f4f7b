"""What every command-line tool shares, so that all behave alike (docs/reference/commands.md).

- ``ArgumentParser``: ``--help`` prints help and exits 0; an unknown flag or subcommand, or a
  missing argument, is one line on stderr and exit code 2, as every other input error;
- ``run``: a tool's ``main(argv)`` returns its exit code; Ctrl-C while it runs is one line and
  130 (128 + SIGINT), never a traceback. Tools that train stop at the end of an iteration with a
  checkpoint first (``derl.training.run.SignalStop``, the evolution's and evaluation's own handlers).
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Callable
from typing import NoReturn

EXIT_USAGE = 2
EXIT_INTERRUPTED = 128 + signal.SIGINT


class ArgumentParser(argparse.ArgumentParser):
    """``argparse`` with its errors in one line (argparse prints the usage first, a second line)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"error: {message} (see {self.prog} --help)\n")


def run(main: Callable[[list[str]], int | None]) -> NoReturn:
    """Exits with ``main(sys.argv[1:])``'s code (None: 0); Ctrl-C: one line, ``EXIT_INTERRUPTED``."""
    try:
        code = main(sys.argv[1:])
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        code = EXIT_INTERRUPTED
    sys.exit(code or 0)
