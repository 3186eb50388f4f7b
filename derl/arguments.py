"""What every command line of derl shares, below every floor that parses one (a tool, a bench, a worker).

- ``ArgumentParser``: its errors are one line and exit code 2 (argparse prints the usage first, a
  second line); a negative number is a value, never an option, in any notation YAML reads as a number
  (``TERRAIN.INCLINE_ANGLE -1e1``, ``-.5``, ``-inf``: argparse alone takes only ``-1`` and ``-1.5``).
- ``bounded_int``: an argparse type for a count (``--num``, ``--seeds``, ``--resamples``): an integer held
  to its declared range, so a count that would take memory or time without end is one line and exit 2
  before anything runs (docs/reference/commands.md#counts-and-override-values); ``bounded_ints`` for a
  comma-separated list, ``bounded_float`` for a number, ``any_seed`` for a seed (RNG_SEED's range).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from typing import NoReturn

EXIT_USAGE = 2
# A number with a minus sign as YAML 1.1 reads one (digits, a point, an exponent, .inf): a value, never a flag.
_NEGATIVE_NUMBER = re.compile(r"^-(\d[\d_]*(\.\d*)?|\.\d+)([eE][-+]?\d+)?$|^-\.?inf$", re.IGNORECASE)


class ArgumentParser(argparse.ArgumentParser):
    """``argparse`` with one-line errors and negative numbers taken as values (module docstring).

    The subparsers of ``add_subparsers`` are of this class too (argparse makes them of the parent's class).
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # argparse's own test of "a negative number, not an option" (Python 3.13 widened it the same way).
        self._negative_number_matcher = _NEGATIVE_NUMBER

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"error: {message} (see {self.prog} --help)\n")

    def parse_with_overrides(self, argv: list[str]) -> argparse.Namespace:
        """``parse_args`` where ``KEY VALUE`` pairs after an option join ``overrides`` too.

        argparse fills a ``nargs="*"`` positional once, with the words before the first option, and
        ``parse_intermixed_args`` takes no subcommands: ``image G.json --out b.png KEY VALUE`` would
        leave ``KEY VALUE`` over. Words left over that are not flags are appended to ``overrides``.
        """
        args, extra = self.parse_known_args(argv)
        flags = [word for word in extra if word.startswith("-") and not _NEGATIVE_NUMBER.match(word)]
        if flags or (extra and not isinstance(getattr(args, "overrides", None), list)):
            self.error(f"unrecognized arguments: {' '.join(extra)}")
        if extra:
            args.overrides = [*args.overrides, *extra]
        return args


def bounded_int(low: int, high: int) -> Callable[[str], int]:
    """An argparse ``type``: an integer in ``low .. high`` (both included), else a usage error naming the range.

    The upper bound is what the argument's meaning allows, far above any real use (a count of bodies,
    seeds, resamples, iterations): it keeps one typing slip from running out of memory or never ending.
    """

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text} is out of range: give {low:,} .. {high:,}")
        return value

    parse.__name__ = "bounded int"
    return parse


# RNG_SEED's upper bound (derl.checked_config: Range(0, INT32_MAX)), written again: derl.config shares this floor.
MAX_SEED = 2**31 - 1


def bounded_float(low: float, high: float) -> Callable[[str], float]:
    """An argparse ``type``: a finite number in ``low .. high`` (both included), else a usage error."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not low <= value <= high:  # NaN fails every comparison
            raise argparse.ArgumentTypeError(f"{text} is out of range: give {low:,} .. {high:,}")
        return value

    parse.__name__ = "bounded float"
    return parse


def bounded_ints(low: int, high: int, most: int = 64) -> Callable[[str], list[int]]:
    """An argparse ``type``: comma-separated integers, each in ``low .. high``, at most ``most`` of them."""
    one = bounded_int(low, high)

    def parse(text: str) -> list[int]:
        values = [one(part) for part in text.split(",") if part.strip()]
        if not values or len(values) > most:
            raise argparse.ArgumentTypeError(f"give 1 .. {most} comma-separated integers, got {text!r}")
        return values

    parse.__name__ = "bounded ints"
    return parse


# A seed names a stream of random numbers: any integer of RNG_SEED's range (``derl.checked_config``).
any_seed = bounded_int(0, MAX_SEED)
