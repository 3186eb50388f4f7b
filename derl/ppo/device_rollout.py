"""Rollout collection on a device env: observations, actions, rollout, normalisers and episode
statistics stay on the env's torch device (README: "Simulating on a GPU").

A *device env* is a ``gymnasium.vector.VectorEnv`` (autoreset mode *same step*, as
``derl.ppo.rollout``) whose ``metadata["torch_device"]`` names a torch device (``"cuda:0"``,
``"cpu"``). Its ``reset()`` and ``step()`` return torch tensors on that device:

- observations: ``[N, *shape]`` float32, one tensor (a Box space) or a dict of them (a Dict);
- rewards ``[N]`` float32; terminated and truncated ``[N]`` bool; ``step`` takes actions
  ``[N, A]`` float32 on the device, already clipped to the action space;
- infos: Gymnasium's *same step* layout with ``[N]`` tensors: each key with its ``_key`` bool mask;
  ``final_obs`` (observations in the same form, valid where ``_final_obs``) and ``final_info`` (a
  dict of ``[N]`` tensors with ``_key`` masks) for the envs that ended at the step. An env may
  leave ``final_obs`` and ``final_info`` out at a step where none ended, but need not: all-False
  masks are fine, and cheaper for the env than testing whether any ended.

``DeviceCollector`` is ``rollout.Collector`` for such an env, step for step (the same
normalisation order, bootstrapping and episode statistics), with the policy run by the torch
model itself on the device and action noise drawn from a ``torch.Generator`` there. No step waits
for the device: no value is read back to the host until the rollout is full, when the finished
episodes are (``DeviceEpisodeStatistics.finished``). The learner reads the rollout where it lies
(``derl.ppo.learner``).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import torch
from gymnasium.vector import VectorEnv
from torch import nn

from derl.ppo.acting import gaussian_sample
from derl.ppo.episode_stats import DeviceEpisodeStatistics, vector_step_values
from derl.ppo.normalize import ObsNormalizer, ReturnNormalizer
from derl.ppo.obs_layout import ObsLayout
from derl.ppo.rollout import Rollout, check_vector_env

log = logging.getLogger(__name__)


def env_device(envs: VectorEnv) -> torch.device | None:
    """The torch device of a device env's tensors; None for an env of NumPy arrays.

    ``cuda`` without an index is the current CUDA device (the learner's, once the trainer set it).
    """
    name = envs.metadata.get("torch_device")
    if name is None:
        return None
    device = torch.device(name)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def noise_generator(device: torch.device, seed: int) -> torch.Generator:
    """The action noise's generator: on ``device``, so that drawing never leaves it."""
    return torch.Generator(device=device).manual_seed(seed)


def flatten_into(layout: ObsLayout, obs: Any, out: torch.Tensor) -> torch.Tensor:
    """``ObsLayout.flatten`` of a device env's tensors (one, or a dict of them) into ``out`` ``[N, D]``."""
    parts = [obs[key] for key in layout.keys] if layout.is_dict else [obs]
    for part, columns in zip(parts, layout.slices, strict=True):
        out[:, columns] = part.reshape(out.shape[0], -1)
    return out


class DeviceCollector:
    """Steps a device env with the current policy and fills a ``Rollout`` of tensors on its device.

    The interface of ``rollout.Collector`` (the trainer picks one of the two, ``trainer.PPO``).

    Args:
        envs: a device env (module docstring), envs ``first_index ..`` of the run; the collector owns them.
        model: the policy (``forward(obs) -> (mean, value)``, ``log_std``), on the env's device.
        obs_norm, ret_norm: normalisers on the env's device.
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
        self.device = device = env_device(envs)
        if device is None:
            raise ValueError("not a device env: its metadata has no 'torch_device'")
        self.envs, self.first_index, self.model = envs, first_index, model
        self.layout = ObsLayout.from_space(envs.single_observation_space)
        self.obs_norm, self.ret_norm = obs_norm, ret_norm
        self.rng = noise_generator(device, seed)
        self.stats = DeviceEpisodeStatistics(envs.num_envs, device)
        num_envs, size = envs.num_envs, self.layout.size
        self._raw = torch.zeros((num_envs, size), device=device)  # current, as the envs gave it
        self._obs = torch.zeros_like(self._raw)  # current, normalised
        self._final = torch.zeros_like(self._raw)  # true final observations, raw
        space = envs.single_action_space
        self._low = torch.as_tensor(space.low, dtype=torch.float32).to(device)
        self._high = torch.as_tensor(space.high, dtype=torch.float32).to(device)

    def reset(self, seed: int) -> None:
        """Starts new episodes; env ``first_index + i`` is seeded with ``seed + first_index + i``."""
        obs, _ = self.envs.reset(seed=seed + self.first_index)
        self.stats.restart()
        flatten_into(self.layout, obs, self._raw)
        self.obs_norm.update(self._raw)
        self.obs_norm.normalize(self._raw, out=self._obs)

    def renormalize(self) -> None:
        """Normalises the current observations again, after the statistics changed (a merge)."""
        self.obs_norm.normalize(self._raw, out=self._obs)

    def rng_state(self) -> str:
        """The action noise's generator state, as JSON (what a checkpoint keeps per rank)."""
        return json.dumps({"torch_generator": self.rng.get_state().tolist()})

    def load_rng_state(self, text: str) -> None:
        """Restores ``rng_state``'s JSON; a NumPy collector's state is another generator's, and
        the noise stays fresh."""
        state = json.loads(text)
        if "torch_generator" not in state:
            log.info("the checkpoint's action noise came from a NumPy generator; drawing fresh noise")
            return
        self.rng.set_state(torch.tensor(state["torch_generator"], dtype=torch.uint8))

    @torch.no_grad()
    def collect(self, rollout: Rollout) -> list[dict[str, float]]:
        """Fills ``rollout`` (tensors on the env's device) with ``T`` steps of every env; returns the
        episodes that ended (read back to the host once, at the end)."""
        model, raw, obs_norm, stats = self.model, self._raw, self.obs_norm, self.stats
        stats.begin(rollout.obs.shape[0])
        for t in range(rollout.obs.shape[0]):
            rollout.obs[t] = self._obs
            mean, rollout.values[t] = model(self._obs)
            noise = torch.randn(mean.shape, generator=self.rng, device=self.device)
            rollout.actions[t], rollout.log_probs[t] = gaussian_sample(mean, model.log_std, noise)
            actions = torch.clamp(rollout.actions[t], self._low, self._high)
            obs, rewards, terminated, truncated, infos = self.envs.step(actions)
            rollout.terminated[t] = terminated
            rollout.truncated[t] = truncated
            flatten_into(self.layout, obs, raw)
            obs_norm.update(raw)
            obs_norm.normalize(raw, out=self._obs)
            if "final_obs" in infos:  # V of every env's final observation, kept where it was cut
                final = obs_norm.normalize(flatten_into(self.layout, infos["final_obs"], self._final))
                rollout.final_values[t] = torch.where(truncated & ~terminated, model(final)[1], 0.0)
            ended = terminated | truncated
            rollout.rewards[t] = self.ret_norm.normalize(rewards, ended)
            stats.add(rewards, ended, vector_step_values(infos, ended))
        rollout.bootstrap_value[:] = model(self._obs)[1]
        return stats.finished()

    def episodes_so_far(self) -> list[dict[str, float]]:
        """Every env's episode in progress, as far as it went (``EpisodeStatistics.so_far``)."""
        return self.stats.so_far()

    def close(self) -> None:
        self.envs.close()
