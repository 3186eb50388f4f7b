"""MuJoCo's warnings counted, not printed one line each.

MuJoCo C prints a warning to stderr (``WARNING: Nan, Inf or huge value in QACC at DOF 5. The simulation is
unstable. Time = 1.2345.``) every time a simulation goes unstable after a reset, and appends it to
``MUJOCO_LOG.TXT`` in the working folder. The envs already notice each one (``derl.envs.batch``:
the episode ends as ``unstable`` and its non-finite values are zeroed), so in a long training the
lines are noise: hundreds in a search's log. ``counted_warnings`` prints the first of each kind with
what it means, and the count of all of them at the end.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import mujoco

_NUMBERS = re.compile(r"\d+(\.\d+)?")


def warning_kind(message: str) -> str:
    """A warning without its numbers (DOF, time): what the counts are kept by."""
    return _NUMBERS.sub("N", message)


@contextmanager
def counted_warnings(what: str) -> Iterator[Counter]:
    """Counts MuJoCo's warnings while the block runs (on every thread); yields the counts by kind.

    Args:
        what: what runs, for the summary line, e.g. ``training 000042``.
    """
    counts: Counter = Counter()

    def handle(message: str) -> None:  # called with the GIL held, from any thread of mujoco.batch
        kind = warning_kind(message)
        counts[kind] += 1
        if counts[kind] == 1:
            print(f"warning: MuJoCo: {message} (that episode ends as unstable; further ones are counted)",
                  file=sys.stderr, flush=True)

    previous = mujoco.get_mju_user_warning()
    mujoco.set_mju_user_warning(handle)
    try:
        yield counts
    finally:
        mujoco.set_mju_user_warning(previous)
        if sum(counts.values()) > len(counts):
            summary = ", ".join(f"{count} x '{kind}'" for kind, count in counts.most_common())
            print(f"warning: MuJoCo warnings while {what}: {summary}", file=sys.stderr, flush=True)
