"""Rollout collection: one batched policy forward per step of a Gymnasium vector env.

The collector steps any ``gymnasium.vector.VectorEnv`` whose autoreset mode is *same step*
(``AutoresetMode.SAME_STEP``): when env i ends an episode at a step, the step's observation is
``infos["final_obs"][i]`` (the trainer bootstraps truncated episodes from it), its info is in
``infos["final_info"]``, and the returned observation is already the first of the next episode.
Observations (a Box, or a Dict of Boxes) are flattened into ``[N, D]`` float32 rows
(``derl.ppo.obs_layout``); per-episode statistics are kept over arrays
(``derl.ppo.episode_stats.EpisodeStatistics``).

Buffers are preallocated NumPy arrays shaped ``[T, N, ...]`` (``T`` = ``PPO.TIMESTEPS``, ``N`` =
``PPO.NUM_ENVS``); for DERL's network the forward pass runs in NumPy on the CPU
(``derl.ppo.acting``, chosen by ``derl.ppo.fastpath``), so collection creates no tensors at all.
A device env, whose steps return torch tensors on a device, has its own collector
(``derl.ppo.device_rollout``), which fills the same ``Rollout`` with tensors there.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode, VectorEnv
from torch import nn

from derl.ppo.episode_stats import Array, EpisodeStatistics, vector_step_values
from derl.ppo.fastpath import actor
from derl.ppo.normalize import ObsNormalizer, ReturnNormalizer
from derl.ppo.obs_layout import ObsLayout

# make_vec_env(num_envs, first_index): envs first_index .. first_index + num_envs - 1 of a run.
MakeVecEnv = Callable[[int, int], VectorEnv]
log = logging.getLogger(__name__)


def sync_vector_env(make_env: Callable[[int], gym.Env], num_envs: int, first_index: int = 0) -> VectorEnv:
    """Gymnasium's ``SyncVectorEnv`` of ``make_env(i)`` for envs ``first_index ..``, autoreset *same step*.

    ``functools.partial(sync_vector_env, make_env)`` is a ``MakeVecEnv`` (picklable when
    ``make_env`` is).
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


@dataclass
class Rollout:
    """NumPy arrays, or torch tensors on a device env's device (``derl.ppo.device_rollout``)."""

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
        """NumPy arrays (``device`` None), else tensors on ``device``."""

        def zeros(*shape: int, dtype=np.float32) -> Array:
            if device is None:
                return np.zeros(shape, dtype)
            return torch.zeros(shape, dtype=torch.bool if dtype is bool else torch.float32, device=device)

        return cls(
            obs=zeros(steps, num_envs, obs_size),
            actions=zeros(steps, num_envs, action_dim),
            log_probs=zeros(steps, num_envs),
            values=zeros(steps, num_envs),
            rewards=zeros(steps, num_envs),
            terminated=zeros(steps, num_envs, dtype=bool),
            truncated=zeros(steps, num_envs, dtype=bool),
            final_values=zeros(steps, num_envs),
            bootstrap_value=zeros(num_envs),
        )


class Collector:
    """Steps the vector env with the current policy and fills a ``Rollout``.

    Normalisation follows VecNormalize: observation statistics are updated with every batch the
    envs return (reset observations included) before that batch is normalised; final
    observations of truncated episodes are normalised with the same statistics.

    Args:
        envs: envs ``first_index ..`` of the run (``check_vector_env``); the collector owns them.
        model: the policy (``forward(obs) -> (mean, value)``, ``log_std``; ``networks.ActorCritic``).
        seed: seeds the action noise.
    """

    def __init__(
        self,
        envs: VectorEnv,
        first_index: int,
        model: nn.Module,
        obs_norm: ObsNormalizer,
        ret_norm: ReturnNormalizer,
        seed: int,
    ):
        check_vector_env(envs)
        self.envs, self.first_index, self.policy = envs, first_index, actor(model)
        self.layout = ObsLayout.from_space(envs.single_observation_space)
        self.obs_norm, self.ret_norm = obs_norm, ret_norm
        self.rng = np.random.default_rng(seed)  # action noise
        self.stats = EpisodeStatistics(envs.num_envs)
        self._raw = np.zeros((envs.num_envs, self.layout.size), np.float32)  # current, as the envs gave it
        self._obs = np.zeros_like(self._raw)  # current, normalised
        # Envs receive actions clipped to the action space (as SB3 and CleanRL); the rollout keeps the
        # sampled, unclipped action, whose log-probability the loss uses.
        space = envs.single_action_space
        self._low, self._high = np.asarray(space.low, np.float32), np.asarray(space.high, np.float32)
        self._env_actions = np.zeros((envs.num_envs, space.shape[0]), np.float32)

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
        return json.dumps(self.rng.bit_generator.state)

    def load_rng_state(self, text: str) -> None:
        """Restores ``rng_state``'s JSON; a device collector's state (``derl.ppo.device_rollout``) is
        another generator's, and the noise stays fresh."""
        state = json.loads(text)
        if "bit_generator" not in state:
            log.info("the checkpoint's action noise came from a device env's generator; drawing fresh noise")
            return
        self.rng.bit_generator.state = state

    def _final_obs(self, infos: dict[str, Any], rows: np.ndarray) -> np.ndarray:
        """The true last observations of the envs ``rows`` (flat, raw).

        Gymnasium's ``infos["final_obs"]`` is an object array of single observations; a batch in
        the observations' own form (an ``[N, ...]`` array or a dict of them) is taken as well.
        """
        final = infos["final_obs"]
        if isinstance(final, np.ndarray) and final.dtype == object:
            return np.concatenate([self.layout.flatten(final[row]) for row in rows])
        return self.layout.flatten(final)[rows]

    def collect(self, rollout: Rollout) -> list[dict[str, float]]:
        """Fills ``rollout`` with ``T`` steps of every env; returns the episodes that ended."""
        policy, finished, raw = self.policy, [], self._raw
        policy.sync()
        for t in range(rollout.obs.shape[0]):
            rollout.obs[t] = self._obs
            rollout.actions[t], rollout.log_probs[t], rollout.values[t] = policy.sample(self._obs, self.rng)
            np.clip(rollout.actions[t], self._low, self._high, out=self._env_actions)
            obs, rewards, terminated, truncated, infos = self.envs.step(self._env_actions)
            rollout.terminated[t] = terminated
            rollout.truncated[t] = truncated
            self.layout.flatten(obs, out=raw)
            self.obs_norm.update(raw)
            self.obs_norm.normalize(raw, out=self._obs)
            cut = truncated & ~terminated
            if cut.any():
                final = self.obs_norm.normalize(self._final_obs(infos, np.flatnonzero(cut)))
                rollout.final_values[t, cut] = policy.value(final)
            ended = terminated | truncated
            rollout.rewards[t] = self.ret_norm.normalize(rewards, ended)
            finished += self.stats.add(rewards, ended, vector_step_values(infos, ended))
        rollout.bootstrap_value[:] = policy.value(self._obs)
        return finished

    def episodes_so_far(self) -> list[dict[str, float]]:
        """Every env's episode in progress, as far as it went (``EpisodeStatistics.so_far``)."""
        return self.stats.so_far()

    def close(self) -> None:
        self.envs.close()
