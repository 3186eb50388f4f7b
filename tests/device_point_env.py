"""A device env for the tests (``derl.ppo.rollout.ArrayVectorEnv``): point masses in torch.

Each of N point masses on a line has a position ``x`` and a velocity ``v``; the action (in
[-1, 1]) pushes it: ``v <- 0.8 v + 0.2 a``, ``x <- x + v``. The reward is the distance moved
right (``v``), so a policy that always pushes right earns about ``limit - 5`` per episode and a
random one about 0. An episode ends terminated when the mass falls off the left edge
(``x < -1``), truncated after ``limit`` steps. Every tensor lives on ``device`` (``meta`` too:
no value is ever read back), and the infos follow Gymnasium's *same step* layout, with
``final_obs`` and ``final_info`` at every step (all-False masks where no env ended).
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space


class PointMassVectorEnv(VectorEnv):
    def __init__(self, num_envs: int, first_index: int = 0, device: str = "cpu", limit: int = 20,
                 fall_below: float = -1.0):
        self.num_envs, self.first_index, self.limit, self.fall_below = num_envs, first_index, limit, fall_below
        self.device = torch.device(device)
        self.metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}
        box = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
        self.single_observation_space = gym.spaces.Dict({"proprioceptive": box,
                                                         "goal": gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)})
        self.single_action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.start = self.x = self.v = torch.zeros(num_envs, device=self.device)
        self.t = torch.zeros(num_envs, dtype=torch.int64, device=self.device)
        self.actions_seen: list[torch.Tensor] = []

    def _obs(self) -> dict[str, torch.Tensor]:
        time_left = 1.0 - self.t.float() / self.limit
        return {"proprioceptive": torch.stack([self.x, self.v, time_left], 1), "goal": (1.0 - self.x)[:, None]}

    def reset(self, *, seed: int | None = None, options=None):
        index = torch.arange(self.first_index, self.first_index + self.num_envs, device=self.device)
        self.start = 0.1 * torch.sin(index.float() + float(seed or 0))
        self.x, self.v, self.t = self.start.clone(), torch.zeros_like(self.start), torch.zeros_like(self.t)
        return self._obs(), {}

    def step(self, actions: torch.Tensor):
        self.actions_seen.append(actions)
        self.v = 0.8 * self.v + 0.2 * actions[:, 0]
        self.x = self.x + self.v
        self.t = self.t + 1
        rewards = self.v.clone()
        terminated = self.x < self.fall_below
        truncated = self.t >= self.limit
        ended = terminated | truncated
        final_obs = self._obs()
        final_info = {"__reward__forward": rewards, "___reward__forward": ended, "x_pos": self.x, "_x_pos": ended}
        self.x = torch.where(ended, self.start, self.x)
        self.v = torch.where(ended, 0.0, self.v)
        self.t = torch.where(ended, 0, self.t)
        infos = {"__reward__forward": rewards, "___reward__forward": ~ended, "x_pos": self.x, "_x_pos": ~ended,
                 "final_obs": final_obs, "_final_obs": ended, "final_info": final_info, "_final_info": ended}
        return self._obs(), rewards, terminated, truncated, infos


@dataclass(frozen=True)
class PointMassFactory:
    """The trainer's ``make_vec_env`` for point masses on ``device`` (None: the learner's)."""

    device: str | None = None
    limit: int = 20

    def __call__(self, num_envs: int, first_index: int = 0, device: torch.device | str = "cpu") -> PointMassVectorEnv:
        return PointMassVectorEnv(num_envs, first_index, self.device or device, self.limit)
