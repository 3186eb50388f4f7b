"""Rollout collection: one batched policy forward per step of a vector env, on the host or a device.

The collector steps a vector env that keeps the ``ArrayVectorEnv`` contract: Gymnasium's
``VectorEnv`` in autoreset mode *same step* (``AutoresetMode.SAME_STEP``): when env i ends an
episode at a step, the step's observation is row i of ``infos["final_obs"]`` (the trainer
bootstraps truncated episodes from it), its info is in ``infos["final_info"]``, and the returned
observation is already the first of the next episode. Observations (a Box, or a Dict of Boxes)
are flattened into ``[N, D]`` float32 rows (``derl.ppo.obs_layout``); per-episode statistics are
kept over arrays (``derl.ppo.episode_stats.EpisodeStatistics``).

One ``Collector`` for both kinds of env, written over an array namespace (``derl.arrays``): an env
whose ``device`` is None returns NumPy arrays (MuJoCo C, Gymnasium's envs); a device env's
``reset`` and ``step`` return torch tensors on its ``device`` (MuJoCo Warp), and buffers,
normalisers, statistics and the rollout then stay there, no step reading a value back to the host
(the finished episodes are read once, when the rollout is full). What differs is injected: the
policy (``derl.ppo.acting``: the NumPy forward pass on the host, the torch model on a device) and
the source of its action noise (a NumPy generator, or a torch one on the device), chosen by
``derl.ppo.fastpath.acting``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode, VectorEnv

from derl.arrays import Array, any_set, namespace_of
from derl.ppo.acting import Actor, Noise
from derl.ppo.config import gib, rollout_bytes
from derl.ppo.episode_stats import EpisodeStatistics, vector_step_values
from derl.ppo.normalize import ObsNormalizer, ReturnNormalizer
from derl.ppo.obs_layout import ObsLayout


class ArrayVectorEnv(Protocol):
    """What the collector steps: a Gymnasium ``VectorEnv`` in autoreset mode *same step* whose arrays
    live on ``device``.

    ``device`` None: NumPy arrays on the host (Gymnasium's own vector envs, which have no such
    attribute, are taken as that). A ``torch.device``: ``reset`` and ``step`` return torch tensors
    there: observations ``[N, *shape]`` float32, one tensor (Box) or a dict of them (Dict); rewards
    ``[N]`` float; terminated and truncated ``[N]`` bool; ``step`` takes actions ``[N, A]`` float32
    there, already clipped to the action space. Infos, on either: Gymnasium's *same step* layout of
    ``[N]`` arrays, each key with its ``_key`` bool mask; ``final_obs`` is the step's observations
    in the same form as the returned ones (rows valid where ``_final_obs``), ``final_info`` a dict
    of ``[N]`` arrays with ``_key`` masks. An env may leave ``final_obs`` and ``final_info`` out at
    a step where none ended (a device env need not ask: all-False masks are fine).
    """

    num_envs: int
    metadata: dict[str, Any]
    single_observation_space: gym.Space
    single_action_space: gym.Space
    device: Any  # torch.device | None

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict[str, Any]]: ...

    def step(self, actions: Array) -> tuple[Any, Array, Array, Array, dict[str, Any]]: ...

    def close(self) -> None: ...


# make_vec_env(num_envs, first_index, device): envs first_index .. first_index + num_envs - 1 of a
# run, for a learner on ``device`` (a torch.device; an env that simulates on a device simulates there).
MakeVecEnv = Callable[[int, int, Any], ArrayVectorEnv]


def env_device(envs: VectorEnv) -> Any:
    """The torch device of the env's arrays (``ArrayVectorEnv.device``); None for NumPy arrays."""
    return getattr(envs.unwrapped, "device", None)


def sync_vector_env(make_env: Callable[[int], gym.Env], num_envs: int, first_index: int = 0,
                    device: Any = None) -> VectorEnv:
    """Gymnasium's ``SyncVectorEnv`` of ``make_env(i)`` for envs ``first_index ..``, autoreset *same step*.

    ``functools.partial(sync_vector_env, make_env)`` is a ``MakeVecEnv`` (picklable when
    ``make_env`` is); its envs run on the host whatever the learner's ``device``.
    """
    fns = [partial(make_env, index) for index in range(first_index, first_index + num_envs)]
    # copy=False: the collector copies each step's observations into its own rows at once.
    return gym.vector.SyncVectorEnv(fns, copy=False, autoreset_mode=AutoresetMode.SAME_STEP)


def check_vector_env(env: VectorEnv) -> None:
    """Raises ``ValueError`` unless ``env`` is what the collector steps."""
    if not isinstance(env, VectorEnv):
        raise ValueError(f"the env factory must build a gymnasium.vector.VectorEnv, got {type(env).__name__}")
    mode = env.metadata.get("autoreset_mode")
    if mode != AutoresetMode.SAME_STEP:
        raise ValueError(f"the vector env's autoreset mode must be SAME_STEP, got {mode}")
    space = env.single_action_space
    if not isinstance(space, gym.spaces.Box):
        raise ValueError(f"action space {type(space).__name__} is not supported (continuous Box only)")


class RolloutTooLarge(MemoryError):
    """A rollout larger than the free memory where it would lie: the config's size (``PPO.TIMESTEPS`` x
    ``PPO.NUM_ENVS``) or the node's memory, never a body's fault (``derl.evolution.failures``)."""


def free_memory(device: torch.device | None) -> int | None:
    """Bytes free where arrays on ``device`` lie (the host's available memory for None or the CPU, a CUDA
    device's free memory); None where it is not known."""
    if device is None or device.type == "cpu":
        import psutil  # lazy: a device training does not need it

        return int(psutil.virtual_memory().available)
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    return None


@dataclass
class Rollout:
    """NumPy arrays, or torch tensors on a device env's device."""

    obs: Array  # float32 [T, N, D], normalised
    actions: Array  # float32 [T, N, A], as sampled (the envs receive them clipped)
    log_probs: Array  # float32 [T, N]
    values: Array  # float32 [T, N]
    rewards: Array  # float32 [T, N], normalised
    terminated: Array  # bool [T, N]
    truncated: Array  # bool [T, N]
    final_values: Array  # float32 [T, N], V(true final obs) where truncated
    bootstrap_value: Array  # float32 [N], V(obs after the last step)

    @classmethod
    def allocate(cls, steps: int, num_envs: int, obs_size: int, action_dim: int,
                 device: torch.device | None = None) -> Rollout:
        """NumPy arrays (``device`` None), else tensors on ``device``.

        Raises:
            RolloutTooLarge: the arrays need more than the memory free there (one line with both figures).
        """
        need, free = rollout_bytes(steps, num_envs, obs_size, action_dim), free_memory(device)
        if free is not None and need > free:
            where = "the host" if device is None or device.type == "cpu" else str(device)
            raise RolloutTooLarge(f"PPO.TIMESTEPS x PPO.NUM_ENVS ({steps} x {num_envs} env steps of {obs_size} "
                                  f"observation and {action_dim} action values) needs {gib(need)} of rollout "
                                  f"buffers; {where} has {gib(free)} free")
        xp = namespace_of(device)

        def zeros(*shape: int, dtype=xp.float32) -> Array:
            return xp.zeros(shape, dtype=dtype, device=device)

        return cls(
            obs=zeros(steps, num_envs, obs_size),
            actions=zeros(steps, num_envs, action_dim),
            log_probs=zeros(steps, num_envs),
            values=zeros(steps, num_envs),
            rewards=zeros(steps, num_envs),
            terminated=zeros(steps, num_envs, dtype=xp.bool),
            truncated=zeros(steps, num_envs, dtype=xp.bool),
            final_values=zeros(steps, num_envs),
            bootstrap_value=zeros(num_envs),
        )


class Collector:
    """Steps the vector env with the current policy and fills a ``Rollout`` where the env's arrays lie.

    Normalisation follows VecNormalize: observation statistics are updated with every batch the
    envs return (reset observations included) before that batch is normalised; final
    observations of truncated episodes are normalised with the same statistics.

    Args:
        envs: envs ``first_index ..`` of the run (``ArrayVectorEnv``); the collector owns them.
        obs_norm, ret_norm: normalisers on the env's device (None: NumPy).
        policy: acts on the env's arrays (``derl.ppo.acting``); ``noise``: its action noise there.
    """

    def __init__(self, envs: ArrayVectorEnv, first_index: int, obs_norm: ObsNormalizer,
                 ret_norm: ReturnNormalizer, policy: Actor, noise: Noise):
        check_vector_env(envs)
        self.envs, self.first_index, self.policy, self.noise = envs, first_index, policy, noise
        self.device = device = env_device(envs)
        self.xp = xp = namespace_of(device)
        self.layout = ObsLayout.from_space(envs.single_observation_space)
        self.obs_norm, self.ret_norm = obs_norm, ret_norm
        self.stats = EpisodeStatistics(envs.num_envs, device)
        self._raw = xp.zeros((envs.num_envs, self.layout.size), dtype=xp.float32, device=device)  # as given
        self._obs = xp.zeros_like(self._raw)  # current, normalised
        self._final = xp.zeros_like(self._raw)  # true final observations, raw
        # Envs receive actions clipped to the action space (as SB3 and CleanRL); the rollout keeps the
        # sampled, unclipped action, whose log-probability the loss uses.
        space = envs.single_action_space
        assert isinstance(space, gym.spaces.Box)  # check_vector_env
        self._low = xp.asarray(np.asarray(space.low, np.float32), device=device)
        self._high = xp.asarray(np.asarray(space.high, np.float32), device=device)

    def reset(self, seed: int) -> None:
        """Starts new episodes; env ``first_index + i`` is seeded with ``seed + first_index + i``."""
        obs, _ = self.envs.reset(seed=seed + self.first_index)
        self.stats.restart()
        self.layout.flatten(obs, out=self._raw)
        self.obs_norm.update(self._raw)
        self.obs_norm.normalize(self._raw, out=self._obs)

    def renormalize(self) -> None:
        """Normalises the current observations again, after the statistics changed (a merge)."""
        self.obs_norm.normalize(self._raw, out=self._obs)

    def rng_state(self) -> str:
        """The action noise's generator state, as JSON (what a checkpoint keeps per rank)."""
        return self.noise.state()

    def load_rng_state(self, text: str) -> None:
        """Restores ``rng_state``'s JSON (another kind of generator's is left: the noise stays fresh)."""
        self.noise.load_state(text)

    def collect(self, rollout: Rollout) -> list[tuple[int, dict[str, float]]]:
        """Fills ``rollout`` with ``T`` steps of every env; returns the episodes that ended, each with the
        step ``t`` of the rollout at which it ended, by step then env (read back to the host once, at
        the end)."""
        policy, noise, xp, raw, obs_norm = self.policy, self.noise, self.xp, self._raw, self.obs_norm
        policy.sync()
        for t in range(rollout.obs.shape[0]):
            rollout.obs[t] = self._obs
            rollout.actions[t], rollout.log_probs[t], rollout.values[t] = policy.sample(self._obs, noise)
            obs, rewards, terminated, truncated, infos = self.envs.step(
                xp.clip(rollout.actions[t], self._low, self._high))
            rollout.terminated[t] = terminated
            rollout.truncated[t] = truncated
            self.layout.flatten(obs, out=raw)
            obs_norm.update(raw)
            obs_norm.normalize(raw, out=self._obs)
            cut = truncated & ~terminated
            if "final_obs" in infos and any_set(cut):  # V of the true final observations, kept where cut
                final = obs_norm.normalize(self.layout.flatten(infos["final_obs"], out=self._final))
                rollout.final_values[t] = xp.where(cut, policy.value(final), rollout.final_values[t])
            ended = terminated | truncated
            rollout.rewards[t] = self.ret_norm.normalize(rewards, ended)
            self.stats.add(rewards, ended, vector_step_values(infos, ended))
        rollout.bootstrap_value[:] = policy.value(self._obs)
        return self.stats.finished_by_step()

    def episodes_so_far(self) -> list[dict[str, float]]:
        """Every env's episode in progress, as far as it went (``EpisodeStatistics.so_far``)."""
        return self.stats.so_far()

    def close(self) -> None:
        self.envs.close()
