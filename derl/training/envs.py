"""Picklable vector-env factories: ``factory(num_envs, first_index, device)`` builds a rank's envs.

The trainer (``derl.ppo.trainer.train``) takes such a factory, calls it with its learner's device
and steps what it builds, a vector env of ``derl.ppo.rollout.ArrayVectorEnv``'s contract. A
factory is a small frozen dataclass, not a closure, so that it travels by pickle to the process
that trains.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import gymnasium as gym
from gymnasium.vector import VectorEnv

from derl.envs import UnimalVectorEnv
from derl.envs.config import WorldCfg
from derl.ppo.rollout import sync_vector_env


@dataclass(frozen=True)
class UnimalEnvFactory:
    """The Unimal envs of ``world`` for the MJCF at ``xml_path``: one ``UnimalVectorEnv`` (all of them
    in one ``mujoco.batch.Batch`` stepped on ``VECENV.THREADS`` threads, or, with ``SIM.BACKEND warp``,
    in one MuJoCo Warp data on the ``device`` the trainer hands over, its learner's).

    Env ``i`` seeds its generator with ``seed + i`` when built (the trainer seeds it again at its
    first reset).

    Attributes:
        world: what the envs read (``ENV``, ``TERRAIN``, ``SIM``, ``VECENV``, ...; ``Config.world``).
        xml_path: the unimal's MJCF file (``OUT_DIR/xml/<id>.xml`` for a morphology of a run).
        seed: seeds env ``i``'s generator with ``seed + i``; None: unseeded until the first reset.
    """

    world: WorldCfg
    xml_path: str
    seed: int | None = None

    def __call__(self, num_envs: int, first_index: int = 0, device: Any = "cpu") -> VectorEnv:
        """``num_envs`` envs, ``first_index`` the index of the first (``r * NUM_ENVS`` on rank ``r``), on the
        learner's ``device`` (used by ``SIM.BACKEND warp`` only: MuJoCo C steps on the host)."""
        env = UnimalVectorEnv(self.xml_path, self.world, num_envs, device=device)
        if self.seed is not None:
            env.sim.seed(self.seed + first_index)
        return env


@dataclass(frozen=True)
class GymEnvFactory:
    """Gymnasium's ``SyncVectorEnv`` of ``gymnasium.make(env_id)`` (any registered env with a Box
    action space), autoreset *same step*."""

    env_id: str

    def __call__(self, num_envs: int, first_index: int = 0, device: Any = None) -> VectorEnv:
        """Envs on the host whatever the learner's ``device``."""
        return sync_vector_env(partial(_make_gym_env, self.env_id), num_envs, first_index)


def _make_gym_env(env_id: str, index: int) -> gym.Env:
    return gym.make(env_id)


def env_factory(world: WorldCfg, source: dict[str, str]) -> UnimalEnvFactory | GymEnvFactory:
    """The factory for ``{"xml": path}`` (a Unimal env in ``world``) or ``{"env_id": id}`` (a Gymnasium env).

    Raises:
        FileNotFoundError: the MJCF file is missing. ValueError: the env id is unknown.
    """
    if "xml" in source:
        if not Path(source["xml"]).is_file():
            raise FileNotFoundError(f"unimal MJCF not found: {source['xml']}")
        return UnimalEnvFactory(world, str(source["xml"]))
    env_id = source["env_id"]
    if env_id not in gym.registry:
        raise ValueError(f"unknown Gymnasium env id {env_id!r}")
    return GymEnvFactory(env_id)
