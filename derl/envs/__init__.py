"""UNIMAL environments (DERL's FT, VT, MVT and its eight evaluation tasks) on the official MuJoCo bindings.

``make_env(world, xml_path, seed)`` builds the env of ``ENV.TASK`` for a unimal MJCF file
(``make_genome_env`` for a ``Genome``); it is also registered as
``gymnasium.make("Unimal-v0", xml_path=..., world=...)``. The three evolution environments are
the presets ``configs/evo/{ft,vt,mvt}.yml`` (``derl.checked_config.load_preset``), the evaluation tasks
``configs/eval/<task>.yml``. Tasks (``derl.envs.tasks``) own their world; ``check_task_config``
checks a config's observation keys and selection criteria against its task. A trainer's envs are one
``UnimalVectorEnv`` (``derl.envs.vector_env``: every simulation in one ``mujoco.batch.Batch``);
``UnimalEnv`` is its single-env view (``derl.envs.batch`` holds the loop both share).
"""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym

from derl.envs.config import WorldCfg
from derl.envs.tasks import TASKS, check_task_config
from derl.envs.unimal_env import UnimalEnv
from derl.envs.vector_env import UnimalVectorEnv
from derl.morphology import to_mjcf

ENV_ID = "Unimal-v0"

__all__ = ["ENV_ID", "TASKS", "UnimalEnv", "UnimalVectorEnv", "check_task_config", "make_env", "make_genome_env"]


def make_env(world: WorldCfg, xml_path: str | Path, seed: int | None = None, render_mode: str | None = None,
             *, flat: bool = False, width: int = 640, height: int = 480) -> gym.Env:
    """The Unimal env for a unimal MJCF file and a config.

    Args:
        world: the config tree (``derl.checked_config.load_config``).
        xml_path: the unimal's MJCF file.
        seed: seeds the env's generator (the first ``reset()`` needs no seed).
        render_mode: None or "rgb_array".
        flat: observations as one float vector (the keys' values concatenated in name order).
        width: width of rendered frames, in pixels.
        height: height of rendered frames, in pixels.
    """
    env: gym.Env = UnimalEnv(xml_path, world, seed=seed, render_mode=render_mode, width=width, height=height)
    return gym.wrappers.FlattenObservation(env) if flat else env


def make_genome_env(world: WorldCfg, genome, seed: int | None = None, render_mode: str | None = None,
                    *, flat: bool = False) -> gym.Env:
    """``make_env`` for a ``derl.morphology.Genome`` (its MJCF is built in memory)."""
    env: gym.Env = UnimalEnv(None, world, seed=seed, render_mode=render_mode, mjcf=to_mjcf(genome, world))
    return gym.wrappers.FlattenObservation(env) if flat else env


if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point="derl.envs.unimal_env:UnimalEnv")
