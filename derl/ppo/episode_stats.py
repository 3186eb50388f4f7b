"""Per-episode statistics that the learner and the evolution read, kept over arrays of envs.

When an episode ends (terminated or truncated), its statistics are a dict:

- ``return``: sum of the rewards; ``length``: number of steps;
- every ``__reward__*`` key and ``energy`` (``derl.metrics.SUM_KEYS``) the env reports in its step ``info``:
  its sum over the episode (the episodes that reported it);
- ``x_pos`` and ``metric`` (``derl.metrics.FINAL_KEYS``), when the episode's last step reports them: their
  value at that step.

``EpisodeStatistics`` keeps them for the ``N`` envs of a Gymnasium vector env in autoreset mode
*same step* (the collector, ``derl.ppo.rollout``); ``EpisodeStats`` is the same bookkeeping on
one env (``info["episode"]``), for replays and evaluations that step a single env.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from derl.metrics import FINAL_KEYS, SUM_KEYS, is_reward_term

# One step's tracked info values: key -> (value [N] float64, reported [N] bool).
StepValues = dict[str, tuple[np.ndarray, np.ndarray]]


def _is_summed(key: str) -> bool:
    return is_reward_term(key) or key in SUM_KEYS


def _is_tracked(key: str) -> bool:
    return _is_summed(key) or key in FINAL_KEYS


def vector_step_values(infos: dict[str, Any], ended: np.ndarray) -> StepValues:
    """The tracked values of one step of a vector env in autoreset mode *same step*.

    Gymnasium's convention (``VectorEnv._add_info``): each key holds an ``[N]`` array and ``_key``
    the mask of the envs that reported it. An env that ended at this step reports its step's info
    in ``infos["final_info"]`` (same form) and the top-level keys hold its reset's info, which is
    not a step's and is ignored.
    """
    any_ended = bool(ended.any())
    final = infos.get("final_info", {}) if any_ended else {}
    values: StepValues = {}
    for key in (*infos, *final):
        if key in values or not _is_tracked(key):
            continue
        value, reported = np.zeros(ended.shape), np.zeros(ended.shape, bool)
        if key in infos:
            reported = infos[f"_{key}"] & ~ended if any_ended else infos[f"_{key}"]
            value = infos[key] if reported.all() else np.where(reported, infos[key], 0.0)
        if key in final:
            from_final = final[f"_{key}"] & ended
            value = np.where(from_final, final[key], value)
            reported = reported | from_final
        values[key] = (np.asarray(value, np.float64), reported)
    return values


class EpisodeStatistics:
    """The statistics (module docstring) of the current episode of each of ``num_envs`` envs.

    Arrays ``[N]`` per key, updated once per step without a loop over the envs; a dict per
    episode is built only for the episodes that end.
    """

    def __init__(self, num_envs: int):
        self.returns = np.zeros(num_envs)
        self.lengths = np.zeros(num_envs, np.int64)
        self._sums: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # key -> (sum, reported in this episode)
        self._finals: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # key -> (value, reported at the last step)

    def restart(self) -> None:
        """Every env starts a new episode (after the vector env's ``reset``)."""
        self._clear(np.ones(self.returns.shape, bool))

    def _clear(self, rows: np.ndarray) -> None:
        self.returns[rows] = 0.0
        self.lengths[rows] = 0
        for _, reported in (*self._sums.values(), *self._finals.values()):
            reported[rows] = False
        for total, _ in self._sums.values():
            total[rows] = 0.0

    def add(self, rewards: np.ndarray, ended: np.ndarray, values: StepValues) -> list[dict[str, float]]:
        """Adds one step of every env; returns the statistics of the episodes that ended at it.

        Args:
            rewards: ``[N]``; ended: ``[N]`` bool, terminated or truncated;
            values: the step's tracked info values (``vector_step_values``).
        """
        self.returns += rewards
        self.lengths += 1
        for key, (value, reported) in values.items():
            if _is_summed(key):
                if key not in self._sums:
                    self._sums[key] = (np.zeros(self.returns.shape), np.zeros(self.returns.shape, bool))
                total, seen = self._sums[key]
                total += value  # zero where not reported
                seen |= reported
            elif key in self._finals:
                last_value, last = self._finals[key]
                last_value[:] = value
                last[:] = reported
            else:
                self._finals[key] = (value.copy(), reported.copy())
        for key, (_, last) in self._finals.items():
            if key not in values:
                last[:] = False
        if not ended.any():
            return []
        rows = np.flatnonzero(ended)
        episodes = [self._episode(row) for row in rows]
        self._clear(rows)
        return episodes

    def _episode(self, row: int) -> dict[str, float]:
        sums = {key: float(total[row]) for key, (total, seen) in self._sums.items() if seen[row]}
        finals = {key: float(value[row]) for key, (value, last) in self._finals.items() if last[row]}
        return {"return": float(self.returns[row]), **sums, "length": int(self.lengths[row]), **finals}

    def so_far(self) -> list[dict[str, float]]:
        """Every env's current episode up to its last step (an episode's dict, as if it ended)."""
        return [self._episode(row) for row in range(len(self.returns))]


class EpisodeStats(gym.Wrapper):
    """One env's ``EpisodeStatistics``: ``info["episode"]`` at the end of each episode.

    For code that steps a single env (replays, evaluation); training keeps the statistics in its
    collector instead.
    """

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self._stats = EpisodeStatistics(1)
        self._reported = np.ones(1, bool)

    def reset(self, **kwargs) -> tuple[Any, dict]:
        self._stats.restart()
        return self.env.reset(**kwargs)

    def step(self, action) -> tuple[Any, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        values = {key: (np.array([float(value)]), self._reported) for key, value in info.items() if _is_tracked(key)}
        ended = np.array([terminated or truncated])
        episodes = self._stats.add(np.array([float(reward)]), ended, values)
        if episodes:
            info["episode"] = episodes[0]
        return obs, reward, terminated, truncated, info

    def episode_so_far(self) -> dict[str, float]:
        """The statistics of the current episode up to its last step (as ``info["episode"]``)."""
        return self._stats.so_far()[0]
