"""``UnimalVectorEnv``: the ``PPO.NUM_ENVS`` envs of a pool as one Gymnasium vector env over ``UnimalBatch``.

Autoreset mode ``SAME_STEP`` (Gymnasium's convention): when env i ends an episode at a step, its
true final observation is ``infos["final_obs"][i]`` and that step's infos are in
``infos["final_info"]`` (masks ``_final_obs``, ``_final_info`` and, inside, ``_<key>``); the env is
reset at once and the returned observation's row i is the first of its next episode (the top-level
infos of row i then belong to the reset, which reports none: their masks ``_<key>`` are False).
Env i's generator is seeded with ``seed + i`` by ``reset(seed=seed)``.

With ``SIM.BACKEND warp`` the envs live on a device (``metadata["torch_device"]``): observations,
rewards, flags and infos are torch tensors there, and ``infos["final_obs"]`` is the step's
observation batch (a dict of ``[N, size]`` tensors, rows valid where ``_final_obs``) rather than
an object array; episodes restart on the device (``UnimalBatch.restart``), so a step never waits
for the host.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import array_api_compat
import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from derl.envs.batch import UnimalBatch, unimal_mjcf


def observation_space(sizes: dict[str, int]) -> gym.spaces.Dict:
    """One env's observation space: a float64 Box per key."""
    return gym.spaces.Dict({k: gym.spaces.Box(-np.inf, np.inf, (n,), np.float64) for k, n in sizes.items()})


class UnimalVectorEnv(VectorEnv):
    """``num_envs`` Unimal envs of one body, stepped in one call (see the module docstring).

    Args:
        xml_path: the unimal's MJCF file, or None with ``mjcf``.
        cfg: the config (ENV, TERRAIN, OBJECT, HFIELD, XML keys; ``VECENV.THREADS``).
        num_envs: the envs.
        mjcf: the unimal's MJCF text instead of a file.
        device: where ``SIM.BACKEND warp`` simulates (a torch device name; resolved from ``DEVICE``).
    """

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(self, xml_path: str | Path | None, cfg, num_envs: int, *, mjcf: str | None = None,
                 device: str = "cpu"):
        mjcf = unimal_mjcf(xml_path, mjcf)
        self.num_envs = num_envs
        backend = str(cfg.SIM.BACKEND)
        self.sim = UnimalBatch(mjcf, cfg, num_envs, threads=int(cfg.VECENV.THREADS), backend=backend, device=device)
        self._host = array_api_compat.is_numpy_namespace(self.sim.scene.xp)
        if not self._host:
            self.metadata = {**type(self).metadata, "torch_device": str(self.sim.scene.device)}
        self.single_observation_space = observation_space(self.sim.obs_sizes)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.single_action_space = gym.spaces.Box(-1.0, 1.0, (self.sim.model.nu,), np.float32)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self._all = np.arange(num_envs)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict[str, np.ndarray], dict]:
        """Resets every env; ``seed`` seeds env i's generator with ``seed + i``."""
        if seed is not None:
            self.sim.seed(seed)
        self.sim.reset(self._all)
        return self.sim.observe(), {}

    def step(self, actions: np.ndarray) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, np.ndarray,
                                                  dict[str, Any]]:
        obs, rewards, terminated, truncated, step_infos = self.sim.step(actions)
        ended = terminated | truncated
        infos: dict[str, Any] = dict(step_infos)
        present = ~ended
        infos.update({f"_{key}": present for key in step_infos})
        # On a device nothing is asked of the host: the final batch is always there, its masks say where.
        if not self._host or ended.any():
            if self._host:
                final_obs = np.full(self.num_envs, None, dtype=object)
                for env in np.flatnonzero(ended).tolist():
                    final_obs[env] = {key: values[env].copy() for key, values in obs.items()}
            else:
                final_obs = obs  # observe() builds new arrays: the next episodes' observations are others
            final_info: dict[str, Any] = dict(step_infos)
            final_info.update({f"_{key}": ended for key in step_infos})
            infos.update(final_obs=final_obs, _final_obs=ended, final_info=final_info, _final_info=ended)
            self.sim.restart(ended)
            obs = self.sim.observe()
        return obs, rewards, terminated, truncated, infos
