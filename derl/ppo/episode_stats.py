"""Per-episode statistics that the learner and the evolution read.

When an episode ends (terminated or truncated), ``info["episode"]`` holds:

- ``return``: sum of the rewards; ``length``: number of steps;
- every ``__reward__*`` key and ``energy`` (``SUM_KEYS``) the env reports in ``info``: its sum
  over the episode;
- ``x_pos`` and ``metric``, when the env reports them: their value at the last step.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

REWARD_PREFIX = "__reward__"
SUM_KEYS = ("energy",)  # logged per step, summed per episode, not reward terms
FINAL_KEYS = ("x_pos", "metric")


def _is_summed(key: str) -> bool:
    return key.startswith(REWARD_PREFIX) or key in SUM_KEYS


class EpisodeStats(gym.Wrapper):
    """Adds ``info["episode"]`` (see the module docstring) at the end of each episode.

    Called once per env step: which keys of an ``info`` are summed is decided once per set of key
    names (one tuple lookup afterwards, then a loop over the summed keys only), and the final
    values are read from the last step's ``info`` only when the episode's statistics are asked for.
    """

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self._sums: dict[str, float] = {}
        self._length = 0
        self._last_info: dict[str, Any] = {}
        self._summed: dict[tuple[str, ...], tuple[str, ...]] = {}  # info's keys -> those summed

    def reset(self, **kwargs) -> tuple[Any, dict]:
        self._sums = {"return": 0.0}
        self._length = 0
        self._last_info = {}
        return self.env.reset(**kwargs)

    def step(self, action) -> tuple[Any, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        sums = self._sums
        sums["return"] += float(reward)
        keys = tuple(info)
        summed = self._summed.get(keys)
        if summed is None:
            summed = self._summed[keys] = tuple(key for key in keys if _is_summed(key))
        for key in summed:
            sums[key] = sums.get(key, 0.0) + float(info[key])
        self._length += 1
        self._last_info = info
        if terminated or truncated:
            info["episode"] = self.episode_so_far()
        return obs, reward, terminated, truncated, info

    def episode_so_far(self) -> dict[str, float]:
        """The statistics of the current episode up to its last step (as ``info["episode"]``)."""
        info = self._last_info
        return dict(self._sums, length=self._length, **{key: float(info[key]) for key in FINAL_KEYS if key in info})
