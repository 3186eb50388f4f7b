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

import array_api_compat
import gymnasium as gym
import numpy as np
import torch

from derl.metrics import FINAL_KEYS, SUM_KEYS, is_reward_term

Array = np.ndarray | torch.Tensor
# One step's tracked info values: key -> (value [N] float64, reported [N] bool).
StepValues = dict[str, tuple[Array, Array]]


def _is_summed(key: str) -> bool:
    return is_reward_term(key) or key in SUM_KEYS


def _is_tracked(key: str) -> bool:
    return _is_summed(key) or key in FINAL_KEYS


def vector_step_values(infos: dict[str, Any], ended: Array) -> StepValues:
    """The tracked values of one step of a vector env in autoreset mode *same step*.

    Gymnasium's convention (``VectorEnv._add_info``): each key holds an ``[N]`` array and ``_key``
    the mask of the envs that reported it. An env that ended at this step reports its step's info
    in ``infos["final_info"]`` (same form) and the top-level keys hold its reset's info, which is
    not a step's and is ignored.

    NumPy arrays, or the tensors of a device env (``derl.ppo.device_rollout``), one code: for
    tensors every mask is applied, without the NumPy shortcuts for a step where no env ended or
    every env reported (testing that would wait for the device).
    """
    on_host = isinstance(ended, np.ndarray)
    xp = np if on_host else array_api_compat.array_namespace(ended)  # NumPy's own: called every step
    device = array_api_compat.device(ended)
    any_ended = bool(ended.any()) if on_host else True
    final = infos.get("final_info", {}) if any_ended else {}
    values: StepValues = {}
    for key in (*infos, *final):
        if key in values or not _is_tracked(key):
            continue
        value = xp.zeros(ended.shape, dtype=xp.float64, device=device)
        reported = xp.zeros(ended.shape, dtype=xp.bool, device=device)
        if key in infos:
            reported = infos[f"_{key}"] & ~ended if any_ended else infos[f"_{key}"]
            value = infos[key] if on_host and reported.all() else xp.where(reported, infos[key], 0.0)
        if key in final:
            from_final = final[f"_{key}"] & ended
            value = xp.where(from_final, final[key], value)
            reported = reported | from_final
        values[key] = (xp.asarray(value, dtype=xp.float64), reported)
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


def _records(returns: np.ndarray, lengths: np.ndarray, keys: dict[str, tuple[np.ndarray, np.ndarray]]
             ) -> list[dict[str, float]]:
    """Episode dicts (the order of ``EpisodeStatistics._episode``) from host columns ``[M]``."""
    sums = [(key, value, seen) for key, (value, seen) in keys.items() if _is_summed(key)]
    finals = [(key, value, seen) for key, (value, seen) in keys.items() if not _is_summed(key)]
    return [{"return": float(returns[m]), **{key: float(value[m]) for key, value, seen in sums if seen[m]},
             "length": int(lengths[m]), **{key: float(value[m]) for key, value, seen in finals if seen[m]}}
            for m in range(len(returns))]


class DeviceEpisodeStatistics:
    """``EpisodeStatistics`` for a device env's tensors, kept where they lie (``derl.ppo.device_rollout``).

    Each step updates every env's running sums in place and writes them, as they stand after the
    step, into one row of ``[steps, N]`` logs; ``finished`` reads the rows of the episodes that
    ended out of those logs in one copy to the host, once per rollout. So no step waits for the
    device; the episode dicts are ``EpisodeStatistics``'s, in its order (by step, then env).
    """

    def __init__(self, num_envs: int, device: torch.device):
        self.device = device
        self.returns = torch.zeros(num_envs, dtype=torch.float64, device=device)
        self.lengths = torch.zeros(num_envs, dtype=torch.int64, device=device)
        self._keys: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}  # key -> (sum or last value, reported)
        self._allocate_log(0)

    def _zeros(self, like: torch.Tensor, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        return torch.zeros(like.shape, dtype=dtype, device=self.device)

    def _allocate_log(self, steps: int) -> None:
        self._ended = torch.zeros((steps, len(self.returns)), dtype=torch.bool, device=self.device)
        self._log_returns = self._zeros(self._ended)
        self._log_lengths = self._zeros(self._ended, torch.int64)
        self._log_keys: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}  # key -> [steps, N] logs of _keys
        self._step = 0

    def begin(self, steps: int) -> None:
        """Starts the log of a rollout of ``steps`` steps (``finished`` then reads it)."""
        if self._ended.shape[0] != steps:
            self._allocate_log(steps)
        self._step = 0

    def restart(self) -> None:
        """Every env starts a new episode (after the vector env's ``reset``)."""
        self._clear(torch.ones_like(self.returns, dtype=torch.bool))

    def _clear(self, rows: torch.Tensor) -> None:
        self.returns.masked_fill_(rows, 0.0)
        self.lengths.masked_fill_(rows, 0)
        for key, (value, reported) in self._keys.items():
            reported.masked_fill_(rows, False)
            if _is_summed(key):
                value.masked_fill_(rows, 0.0)

    def add(self, rewards: torch.Tensor, ended: torch.Tensor, values: StepValues) -> None:
        """Adds one step of every env (as ``EpisodeStatistics.add``); ``finished`` returns the episodes."""
        self.returns += rewards
        self.lengths += 1
        for key, (value, reported) in values.items():
            if key not in self._keys:
                self._keys[key] = (self._zeros(self.returns), self._zeros(self.returns, torch.bool))
            current, seen = self._keys[key]
            if _is_summed(key):
                current += value  # zero where not reported
                seen |= reported
            else:
                current.copy_(value)
                seen.copy_(reported)
        for key, (_, seen) in self._keys.items():
            if key not in values and not _is_summed(key):
                seen.fill_(False)
        step = self._step
        self._ended[step] = ended
        self._log_returns[step] = self.returns
        self._log_lengths[step] = self.lengths
        for key, (current, seen) in self._keys.items():
            if key not in self._log_keys:
                self._log_keys[key] = (self._zeros(self._ended), self._zeros(self._ended, torch.bool))
            log_value, log_seen = self._log_keys[key]
            log_value[step] = current
            log_seen[step] = seen
        self._step += 1
        self._clear(ended)

    def finished(self) -> list[dict[str, float]]:
        """The episodes that ended in the rollout ``begin`` started, by step then env."""
        steps = self._step
        where = self._ended[:steps].nonzero(as_tuple=True)  # waits for the device: once per rollout
        if where[0].numel() == 0:
            return []
        keys = list(self._log_keys)
        columns = [self._log_returns[where], self._log_lengths[where].double()]
        for key in keys:
            log_value, log_seen = self._log_keys[key]
            columns += [log_value[where], log_seen[where].double()]
        host = torch.stack(columns).cpu().numpy()
        parts = {key: (host[2 + 2 * i], host[3 + 2 * i] > 0) for i, key in enumerate(keys)}
        return _records(host[0], host[1].astype(np.int64), parts)

    def so_far(self) -> list[dict[str, float]]:
        """Every env's current episode up to its last step (``EpisodeStatistics.so_far``)."""
        keys = {key: (value.cpu().numpy(), seen.cpu().numpy()) for key, (value, seen) in self._keys.items()}
        return _records(self.returns.cpu().numpy(), self.lengths.cpu().numpy(), keys)


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
