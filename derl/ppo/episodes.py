"""DERL's learning curve and fitness, from the finished episodes.

Each iteration records a point: the mean of the last ``EPISODES_PER_POINT`` (10) finished episodes. A
morphology's fitness (the ``summary`` the evolution publishes) is the mean of the last ``POINTS`` (100)
points, as DERL's metadata (kept as floats; the original truncated to int).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable

from derl.metrics import is_summary_key

EPISODES_PER_POINT = 10
POINTS = 100


def mean_fields(episodes: Iterable[dict[str, float]]) -> dict[str, float]:
    """Per-key float mean over the episodes that report the key (finite values only)."""
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for episode in episodes:
        for key, value in episode.items():
            if is_summary_key(key) and math.isfinite(value):
                sums[key] = sums.get(key, 0.0) + float(value)
                counts[key] = counts.get(key, 0) + 1
    return {key: sums[key] / counts[key] for key in sorted(sums)}


class EpisodeLog:
    """The last ``EPISODES_PER_POINT`` finished episodes, the last ``POINTS`` points, and a count of all."""

    def __init__(self) -> None:
        self.recent: deque[dict[str, float]] = deque(maxlen=EPISODES_PER_POINT)
        self.points: deque[dict[str, float]] = deque(maxlen=POINTS)
        self.finished = 0

    def add_iteration(self, episodes: list[dict[str, float]]) -> None:
        """The episodes that ended in one iteration; records the iteration's point once any has ended."""
        self.recent.extend(episodes)
        self.finished += len(episodes)
        if self.recent:
            self.points.append(mean_fields(self.recent))

    def current(self) -> dict[str, float]:
        """The latest point of the learning curve (empty before the first finished episode)."""
        return dict(self.points[-1]) if self.points else {}

    def summary(self, in_progress: list[dict[str, float]] = ()) -> dict[str, float]:
        """The fitness: means over the recent points; with no episode finished, over those in progress.

        The fallback keeps a run too short to end an episode reporting every field as a finite
        float (docs/design/differences.md, fitness as floats), instead of NaN or a
        missing key.
        """
        return mean_fields(self.points if self.points else in_progress)

    def state_dict(self) -> dict:
        return {"recent": [dict(ep) for ep in self.recent], "points": [dict(p) for p in self.points],
                "finished": self.finished}

    def load_state_dict(self, state: dict) -> None:
        def floats(rows: list[dict]) -> list[dict[str, float]]:
            return [{k: float(v) for k, v in row.items()} for row in rows]

        self.recent = deque(floats(state["recent"]), maxlen=EPISODES_PER_POINT)
        self.points = deque(floats(state.get("points", [])), maxlen=POINTS)  # older checkpoints had none
        self.finished = int(state["finished"])
