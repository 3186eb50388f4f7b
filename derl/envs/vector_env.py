"""``UnimalVectorEnv``: the ``PPO.NUM_ENVS`` envs of a pool as one Gymnasium vector env over ``UnimalBatch``.

Autoreset mode ``SAME_STEP`` (Gymnasium's convention; the collector's contract,
``derl.ppo.rollout.ArrayVectorEnv``): when env i ends an episode at a step, its true final
observation is row i of ``infos["final_obs"]`` (the step's observations, a dict of ``[N, size]``
arrays, rows valid where ``_final_obs``) and that step's infos are in ``infos["final_info"]``
(masks ``_final_obs``, ``_final_info`` and, inside, ``_<key>``); the env is reset at once and the
returned observation's row i is the first of its next episode (the top-level infos of row i then
belong to the reset, which reports none: their masks ``_<key>`` are False). Env i's generator is
seeded with ``seed + i`` by ``reset(seed=seed)``.

``device`` says where the arrays live: None for MuJoCo C's NumPy arrays; with ``SIM.BACKEND warp``
the torch device the envs simulate on, whose tensors every array then is. One code for both
(``derl.arrays``): on a device the final observations and infos come at every step (their masks
say where) and episodes restart there (``UnimalBatch.restart``), so a step never waits for the host.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import array_api_compat
import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from derl.arrays import Array, any_set
from derl.envs.batch import UnimalBatch, unimal_mjcf
from derl.envs.config import WorldCfg


def observation_space(sizes: dict[str, int]) -> gym.spaces.Dict:
    """One env's observation space: a float64 Box per key."""
    return gym.spaces.Dict({k: gym.spaces.Box(-np.inf, np.inf, (n,), np.float64) for k, n in sizes.items()})


class UnimalVectorEnv(VectorEnv):
    """``num_envs`` Unimal envs of one body, stepped in one call (see the module docstring).

    Args:
        xml_path: the unimal's MJCF file, or None with ``mjcf``.
        world: the config (ENV, TERRAIN, OBJECT, HFIELD, XML keys; ``VECENV.THREADS``).
        num_envs: the envs.
        mjcf: the unimal's MJCF text instead of a file.
        device: where ``SIM.BACKEND warp`` simulates (a torch device, or its name; the learner's,
            which the trainer hands to the env factory); MuJoCo C simulates on the host whatever it is.
    """

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(self, xml_path: str | Path | None, world: WorldCfg, num_envs: int, *, mjcf: str | None = None,
                 device: Any = "cpu"):
        mjcf = unimal_mjcf(xml_path, mjcf)
        self.num_envs = num_envs
        backend = str(world.SIM.BACKEND)
        self.sim = UnimalBatch(mjcf, world, num_envs, threads=int(world.VECENV.THREADS), backend=backend,
                               device=str(device))
        # where the arrays live: None on the host (NumPy), else the torch device of the tensors
        self.device = None if array_api_compat.is_numpy_namespace(self.sim.scene.xp) else self.sim.scene.device
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
        if any_set(ended):  # on a device, always: the final batch is there, its masks say where
            final_info: dict[str, Any] = dict(step_infos)
            final_info.update({f"_{key}": ended for key in step_infos})
            # observe() builds new arrays: the next episodes' observations are others
            infos.update(final_obs=obs, _final_obs=ended, final_info=final_info, _final_info=ended)
            self.sim.restart(ended)
            obs = self._observe_restarted(obs, ended)
        return obs, rewards, terminated, truncated, infos

    def _observe_restarted(self, obs: dict[str, Array], ended: Array) -> dict[str, Array]:
        """The observations after the restart of the envs ``ended`` (a mask): on the host, a copy of the
        step's ``obs`` (which stay the final observations) with only the restarted rows observed again (the
        height-map gather of 32 envs costs 0.13-0.5 ms, copying them about 20 µs); on a device, every
        row again (picking rows would wait for the host)."""
        if self.device is not None:
            return self.sim.observe()
        envs = ended.nonzero()[0]  # the ended envs, host mask
        fresh = self.sim.observe(envs)
        restarted = {}
        for key, values in obs.items():
            restarted[key] = values.copy()
            restarted[key][envs] = fresh[key]
        return restarted

    def close_extras(self) -> None:
        """The simulator's report (MuJoCo Warp's overflows, once per morphology: ``derl.envs.warp_overflow``)."""
        self.sim.physics.close()
