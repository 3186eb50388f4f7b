"""Per-episode statistics that the learner and the evolution read, kept over arrays of envs.

When an episode ends (terminated or truncated), its statistics are a dict:

- ``return``: sum of the rewards; ``length``: number of steps;
- every ``__reward__*`` key and ``energy`` (``derl.metrics.SUM_KEYS``) the env reports in its step ``info``:
  its sum over the episode (the episodes that reported it);
- ``x_pos`` and ``metric`` (``derl.metrics.FINAL_KEYS``), when the episode's last step reports them: their
  value at that step.

``EpisodeStatistics`` keeps them for the ``N`` envs of a Gymnasium vector env in autoreset mode
*same step* (the collector, ``derl.ppo.rollout``), over NumPy arrays or a device's tensors, one code;
``EpisodeStats`` is the same bookkeeping on one env (``info["episode"]``), for replays and
evaluations that step a single env.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from derl.arrays import Array, all_set, any_set, namespace, namespace_of, to_host
from derl.metrics import FINAL_KEYS, SUM_KEYS, is_reward_term

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

    NumPy arrays or tensors, one code; on the host a step where no env ended, or a key every env
    reported, skips its masking (``derl.arrays.any_set``: a tensor is never asked).
    """
    xp = namespace(ended)
    device = None if xp is np else ended.device
    any_ended = any_set(ended)
    final = infos.get("final_info", {}) if any_ended else {}
    values: StepValues = {}
    for key in (*infos, *final):
        if key in values or not _is_tracked(key):
            continue
        value = xp.zeros(ended.shape, dtype=xp.float64, device=device)
        reported = xp.zeros(ended.shape, dtype=xp.bool, device=device)
        if key in infos:
            reported = infos[f"_{key}"] & ~ended if any_ended else infos[f"_{key}"]
            value = infos[key] if all_set(reported) else xp.where(reported, infos[key], 0.0)
        if key in final:
            from_final = final[f"_{key}"] & ended
            value = xp.where(from_final, final[key], value)
            reported = reported | from_final
        values[key] = (xp.asarray(value, dtype=xp.float64), reported)
    return values


@dataclass
class _Ends:
    """The running statistics at a step where episodes may have ended, and where (``ended``)."""

    step: int  # the number of steps added before it since the last ``finished_by_step``
    ended: Array  # [N] bool
    returns: Array
    lengths: Array
    keys: dict[str, tuple[Array, Array]]


class EpisodeStatistics:
    """The statistics (module docstring) of the current episode of each of ``num_envs`` envs.

    Arrays ``[N]`` per key, NumPy (``device`` None) or tensors on ``device``, updated once per step
    without a loop over the envs and without reading a value back: at a step where episodes may
    have ended (every step, for tensors; ``derl.arrays.any_set``) the running values are kept as
    they stand and the ended envs' are cleared. ``finished`` reads the episodes that ended out of
    those in one copy to the host, by step then env (``finished_by_step``: with the step of each).
    """

    def __init__(self, num_envs: int, device: Any = None):
        self.xp = xp = namespace_of(device)
        self.device = device
        self.returns = xp.zeros(num_envs, dtype=xp.float64, device=device)
        self.lengths = xp.zeros(num_envs, dtype=xp.int64, device=device)
        self._keys: dict[str, tuple[Array, Array]] = {}  # key -> (sum or last value, reported)
        self._ends: list[_Ends] = []
        self._steps = 0  # steps added since the last read of the finished episodes

    def restart(self) -> None:
        """Every env starts a new episode (after the vector env's ``reset``)."""
        self._clear(self.xp.ones(self.returns.shape, dtype=self.xp.bool, device=self.device))

    def _clear(self, rows: Array) -> None:
        xp = self.xp
        self.returns = xp.where(rows, 0.0, self.returns)
        self.lengths = xp.where(rows, 0, self.lengths)
        for key, (value, reported) in self._keys.items():
            self._keys[key] = (xp.where(rows, 0.0, value) if _is_summed(key) else value,
                               reported & ~rows)

    def add(self, rewards: Array, ended: Array, values: StepValues) -> None:
        """Adds one step of every env; ``finished`` then returns the episodes that ended at it.

        Args:
            rewards: ``[N]``; ended: ``[N]`` bool, terminated or truncated;
            values: the step's tracked info values (``vector_step_values``).
        """
        xp = self.xp
        self.returns += rewards
        self.lengths += 1
        for key, (value, reported) in values.items():
            if key not in self._keys:
                self._keys[key] = (xp.zeros(self.returns.shape, dtype=xp.float64, device=self.device),
                                   xp.zeros(self.returns.shape, dtype=xp.bool, device=self.device))
            current, seen = self._keys[key]
            if _is_summed(key):
                current += value  # zero where not reported
                seen |= reported
            else:
                current[...] = value
                seen[...] = reported
        for key, (_, seen) in self._keys.items():
            if key not in values and not _is_summed(key):
                seen[...] = False
        if any_set(ended):
            copy = self._copy
            self._ends.append(_Ends(self._steps, copy(ended), copy(self.returns), copy(self.lengths),
                                    {key: (copy(value), copy(seen)) for key, (value, seen) in self._keys.items()}))
            self._clear(ended)
        self._steps += 1

    def _copy(self, values: Array) -> Array:
        return self.xp.asarray(values, copy=True)

    def finished(self) -> list[dict[str, float]]:
        """The episodes that ended since the last call, by step then env (one copy to the host)."""
        return [episode for _, episode in self.finished_by_step()]

    def finished_by_step(self) -> list[tuple[int, dict[str, float]]]:
        """``finished``, each episode with the step at which it ended: 0 for the first step added since
        the last read of the finished episodes."""
        ends, self._ends, self._steps = self._ends, [], 0
        if not ends:
            return []
        xp = self.xp
        ended = xp.stack([end.ended for end in ends])  # [S, N]
        keys = list(self._keys)
        zeros = xp.zeros(self.returns.shape, dtype=xp.float64, device=self.device)
        columns = [xp.stack([xp.full(ended.shape[1:], float(end.step), dtype=xp.float64, device=self.device)
                             for end in ends]),
                   xp.stack([end.returns for end in ends]),
                   xp.astype(xp.stack([end.lengths for end in ends]), xp.float64)]
        for key in keys:
            pairs = [end.keys.get(key, (zeros, zeros)) for end in ends]
            columns += [xp.stack([value for value, _ in pairs]),
                        xp.stack([xp.astype(seen, xp.float64) for _, seen in pairs])]
        steps, envs = xp.nonzero(ended)  # waits for a device: once per call
        host = to_host(xp.stack(columns)[:, steps, envs])  # [columns, episodes]
        parts = {key: (host[3 + 2 * i], host[4 + 2 * i] > 0) for i, key in enumerate(keys)}
        episodes = _records(host[1], host[2].astype(np.int64), parts)
        return list(zip(host[0].astype(np.int64).tolist(), episodes, strict=True))

    def so_far(self) -> list[dict[str, float]]:
        """Every env's current episode up to its last step (an episode's dict, as if it ended)."""
        keys = {key: (to_host(value), to_host(seen)) for key, (value, seen) in self._keys.items()}
        return _records(to_host(self.returns), to_host(self.lengths), keys)


def _records(returns: np.ndarray, lengths: np.ndarray, keys: dict[str, tuple[np.ndarray, np.ndarray]]
             ) -> list[dict[str, float]]:
    """Episode dicts from host columns ``[M]``: the return, the sums (in the order the keys came), the
    length, the final values."""
    sums = [(key, value, seen) for key, (value, seen) in keys.items() if _is_summed(key)]
    finals = [(key, value, seen) for key, (value, seen) in keys.items() if not _is_summed(key)]
    return [{"return": float(returns[m]), **{key: float(value[m]) for key, value, seen in sums if seen[m]},
             "length": int(lengths[m]), **{key: float(value[m]) for key, value, seen in finals if seen[m]}}
            for m in range(len(returns))]


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
        self._stats.add(np.array([float(reward)]), ended, values)
        episodes = self._stats.finished()
        if episodes:
            info["episode"] = episodes[0]
        return obs, reward, terminated, truncated, info

    def episode_so_far(self) -> dict[str, float]:
        """The statistics of the current episode up to its last step (as ``info["episode"]``)."""
        return self._stats.so_far()[0]
