"""The last 100 finished episodes, and their means: what the evolution's metadata records."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable

from derl.ppo.episode_stats import FINAL_KEYS, REWARD_PREFIX

WINDOW = 100


def is_summary_key(key: str) -> bool:
    """``return``, every ``__reward__*`` term, and the final ``x_pos`` and ``metric``."""
    return key == "return" or key.startswith(REWARD_PREFIX) or key in FINAL_KEYS


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
    """Keeps the last ``WINDOW`` finished episodes and counts all of them."""

    def __init__(self) -> None:
        self.recent: deque[dict[str, float]] = deque(maxlen=WINDOW)
        self.finished = 0

    def extend(self, episodes: list[dict[str, float]]) -> None:
        self.recent.extend(episodes)
        self.finished += len(episodes)

    def summary(self, in_progress: list[dict[str, float]] = ()) -> dict[str, float]:
        """Means over the recent episodes; with none finished, over the episodes in progress.

        The fallback keeps a run too short to end an episode reporting every field as a finite
        float (spec defect 20), instead of NaN or a missing key.
        """
        return mean_fields(self.recent if self.recent else in_progress)

    def state_dict(self) -> dict:
        return {"recent": [dict(ep) for ep in self.recent], "finished": self.finished}

    def load_state_dict(self, state: dict) -> None:
        self.recent = deque(
            ({k: float(v) for k, v in ep.items()} for ep in state["recent"]), maxlen=WINDOW
        )
        self.finished = int(state["finished"])
