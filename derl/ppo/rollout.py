"""Rollout collection: one batched policy forward per lockstep step of the pool.

Buffers are preallocated NumPy arrays shaped ``[T, N, ...]`` (``T`` = ``PPO.TIMESTEPS``, ``N`` =
``PPO.NUM_ENVS``); the forward pass runs in NumPy on the CPU (``derl.ppo.acting``), so collection
creates no tensors at all.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from derl.ppo.acting import NumpyActorCritic
from derl.ppo.networks import ActorCritic
from derl.ppo.normalize import ObsNormalizer, ReturnNormalizer
from derl.ppo.pool import EnvPool, SubprocEnvPool


@dataclass
class Rollout:
    obs: np.ndarray  # float32 [T, N, D], normalised
    actions: np.ndarray  # float32 [T, N, A], as sampled (the envs receive them clipped)
    log_probs: np.ndarray  # float32 [T, N]
    values: np.ndarray  # float32 [T, N]
    rewards: np.ndarray  # float32 [T, N], normalised
    terminated: np.ndarray  # bool [T, N]
    truncated: np.ndarray  # bool [T, N]
    final_values: np.ndarray  # float32 [T, N], V(true final obs) where truncated
    bootstrap_value: np.ndarray  # float32 [N], V(obs after the last step)

    @classmethod
    def allocate(cls, steps: int, num_envs: int, obs_size: int, action_dim: int) -> Rollout:
        def zeros(*shape: int, dtype=np.float32) -> np.ndarray:
            return np.zeros(shape, dtype)

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
    """Steps the pool with the current policy and fills a ``Rollout``.

    Normalisation follows VecNormalize: observation statistics are updated with every batch the
    envs return (reset observations included) before that batch is normalised; final
    observations of truncated episodes are normalised with the same statistics.
    """

    def __init__(
        self,
        pool: EnvPool | SubprocEnvPool,
        model: ActorCritic,
        obs_norm: ObsNormalizer,
        ret_norm: ReturnNormalizer,
        seed: int,
    ):
        self.pool, self.policy = pool, NumpyActorCritic(model)
        self.obs_norm, self.ret_norm = obs_norm, ret_norm
        self.rng = np.random.default_rng(seed)  # action noise
        self._raw = np.zeros((pool.num_envs, pool.layout.size), np.float32)  # current, as the envs gave it
        self._obs = np.zeros_like(self._raw)  # current, normalised
        # Envs receive actions clipped to the action space (as SB3 and CleanRL); the rollout keeps the
        # sampled, unclipped action, whose log-probability the loss uses.
        space = pool.action_space
        self._low, self._high = np.asarray(space.low, np.float32), np.asarray(space.high, np.float32)
        self._env_actions = np.zeros((pool.num_envs, space.shape[0]), np.float32)

    def reset(self, seed: int | None) -> None:
        obs = self.pool.reset(seed)
        self.obs_norm.update(obs)
        self._raw[:] = obs
        self.obs_norm.normalize(obs, out=self._obs)

    def renormalize(self) -> None:
        """Normalises the current observations again, after the statistics changed (a merge)."""
        self.obs_norm.normalize(self._raw, out=self._obs)

    def collect(self, rollout: Rollout) -> list[dict[str, float]]:
        """Fills ``rollout`` with ``T`` steps of every env; returns the episodes that ended."""
        policy, finished = self.policy, []
        policy.sync()
        for t in range(rollout.obs.shape[0]):
            rollout.obs[t] = self._obs
            rollout.actions[t], rollout.log_probs[t], rollout.values[t] = policy.sample(self._obs, self.rng)
            np.clip(rollout.actions[t], self._low, self._high, out=self._env_actions)
            batch = self.pool.step(self._env_actions)
            rollout.terminated[t] = batch.terminated
            rollout.truncated[t] = batch.truncated
            self.obs_norm.update(batch.obs)
            self.obs_norm.normalize(batch.obs, out=self._obs)
            cut = batch.truncated & ~batch.terminated
            if cut.any():
                final = self.obs_norm.normalize(batch.final_obs[cut])
                rollout.final_values[t, cut] = policy.value(final)
            rollout.rewards[t] = self.ret_norm.normalize(batch.rewards, batch.terminated | batch.truncated)
            finished += batch.episodes
        self._raw[:] = batch.obs
        rollout.bootstrap_value[:] = policy.value(self._obs)
        return finished
