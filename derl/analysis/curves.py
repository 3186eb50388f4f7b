"""Learning curves (``metrics/<id>.jsonl``) and the learning-speed statistic of the Baldwin-effect plot.

DERL's morphological Baldwin effect: descendants learn faster. Learning speed is measured per
morphology as the PPO iterations it needed to first reach a fixed fraction of its final fitness,
the final fitness being the mean of its per-iteration values over the stretch the published fitness
averages (``fitness_window``: the last 409,600 env steps, DERL's last 100 iterations).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from derl.fileio.reads import NotRegularFile, parse_json, read_bytes
from derl.ppo.episodes import FITNESS_STEPS, POINTS


@dataclass(frozen=True)
class Curve:
    """Per-iteration series of one training: ``iterations [T]`` and every numeric field ``[T]``.

    A field missing from some records is NaN there. An empty curve has ``T = 0``.

    Attributes:
        iterations: the PPO iteration of each point, ``[T]`` ints.
        values: each numeric field of the records (``return``, ``__reward__*``, ``env_steps``,
            losses, ...) as a ``[T]`` float array; ``get(key)`` is None for a field it lacks.
    """

    iterations: np.ndarray
    values: dict[str, np.ndarray] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.iterations)

    def get(self, key: str) -> np.ndarray | None:
        return self.values.get(key)


EMPTY = Curve(np.zeros(0, dtype=int))


def parse_curve(text: str, keys: tuple[str, ...] | None = None) -> Curve:
    """A curve from JSON lines (one record per PPO iteration, ``iteration`` in each).

    ``keys`` limits the columns kept (default: every numeric field). The lines are parsed as one
    JSON array: one call into the C parser instead of one per line.
    """
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return EMPTY
    records = parse_json("[" + ",".join(lines) + "]", "a curve's JSON lines", MAX_CURVE_BYTES + len(lines),
                         MAX_CURVE_ITEMS)
    if keys is None:
        keys = tuple(sorted({key for record in records for key, value in record.items()
                             if isinstance(value, int | float) and not isinstance(value, bool)} - {"iteration"}))
    columns = {key: np.array([_number(record.get(key)) for record in records]) for key in keys}
    iterations = np.array([int(record.get("iteration", k + 1)) for k, record in enumerate(records)])
    return Curve(iterations, columns)


# The largest curve read: 1,220 iterations (DERL's budget) of ~700 bytes are under 1 MB; 61,000
# iterations of 30 values (1e9 env steps of a data-parallel training) under 2 million values.
MAX_CURVE_BYTES = 256 * 2**20
MAX_CURVE_ITEMS = 16 * 2**20


def read_curve(path: Path, keys: tuple[str, ...] | None = None, dir_fd: int | None = None) -> Curve:
    """The curve in ``path``; an absent file (nothing checkpointed yet) is an empty curve (``dir_fd``:
    a descriptor of its folder, as ``derl.fileio.reads.read_bytes``).

    With a few ``keys`` the values are picked out of the text by a pattern (a tenth of the cost
    of parsing every record, which matters for thousands of 1,220-line curves); the pattern's
    result is used only when every line yields one value per key, else the lines are parsed.
    A file that is not a regular file (a FIFO or link planted there: never opened through) or
    that does not parse as records counts as empty too: a damaged curve has no points.
    """
    try:
        text = read_bytes(path, MAX_CURVE_BYTES, dir_fd).decode(errors="replace")
    except (FileNotFoundError, NotRegularFile):
        return EMPTY
    if keys is not None:
        fast = _scan(text, keys)
        if fast is not None:
            return fast
    try:
        return parse_curve(text, keys)
    except (ValueError, TypeError, AttributeError):  # not JSON lines of records (JsonFileError: too large, deep)
        return EMPTY


_NUMBER = r"(-?(?:[0-9][0-9.eE+-]*|Infinity)|NaN)"


def _scan(text: str, keys: tuple[str, ...]) -> Curve | None:
    """Values of ``keys`` found by pattern in JSON lines as ``json.dumps`` writes them (None: no match)."""
    lines = text.count("\n") + (0 if text.endswith("\n") else 1) if text else 0
    if not lines or "\n\n" in text:
        return None if lines else EMPTY
    columns = {}
    for key in ("iteration", *keys):
        found = re.findall(f'"{re.escape(key)}": {_NUMBER}[,}}]', text)
        if len(found) != lines:
            return None
        columns[key] = np.array(found, dtype=float)
    return Curve(columns.pop("iteration").astype(int), columns)


def _number(value: object) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else math.nan


def fitness_window(curve: Curve) -> np.ndarray:
    """``[T]`` bool: the records of the stretch the published fitness averages, the last ``FITNESS_STEPS``
    env steps (``derl.ppo.episodes``); the last ``POINTS`` records of a curve without ``env_steps``."""
    steps = curve.get("env_steps")
    if steps is None or not np.isfinite(steps).any():
        return np.arange(len(curve)) >= len(curve) - POINTS
    return steps > np.nanmax(steps) - FITNESS_STEPS


def final_value(values: np.ndarray, window: np.ndarray) -> float:
    """Mean of the finite values inside ``window`` (NaN when there are none)."""
    finite = values[np.isfinite(values) & window]
    return float(finite.mean()) if len(finite) else math.nan


def iterations_to_fraction(curve: Curve, key: str, fraction: float) -> int | None:
    """The first iteration whose ``key`` reaches ``fraction`` of the final value.

    None when the curve lacks ``key`` or the final value is not positive (a fraction of a
    non-positive fitness is no target to reach).

    Example: values 1, 2, 4, 4, the last two in the fitness window: final = 4; fraction 0.5 -> target
    2, first reached at the 2nd iteration.
    """
    values = curve.get(key)
    if values is None or not len(values):
        return None
    final = final_value(values, fitness_window(curve))
    if not math.isfinite(final) or final <= 0:
        return None
    reached = np.flatnonzero(values >= fraction * final)
    return int(curve.iterations[reached[0]]) if len(reached) else None
