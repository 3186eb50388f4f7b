"""Picklable env descriptions: ``factory(i)`` builds env ``i`` in any process.

The trainer's env subprocesses start from the ``forkserver`` (``fork`` is unsafe once CUDA or
NCCL run), so what builds an env travels by pickle: a small frozen dataclass, not a closure.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym

from derl.config import CfgNode
from derl.envs import make_env


@dataclass(frozen=True)
class UnimalEnvFactory:
    """The Unimal env of ``cfg`` for the MJCF at ``xml_path``; env ``i`` seeds its generator with ``seed + i``."""

    cfg: CfgNode
    xml_path: str
    seed: int | None = None

    def __call__(self, index: int) -> gym.Env:
        return make_env(self.cfg, self.xml_path, seed=None if self.seed is None else self.seed + index)


@dataclass(frozen=True)
class GymEnvFactory:
    """``gymnasium.make(env_id)`` (any registered env with a Box action space)."""

    env_id: str

    def __call__(self, index: int) -> gym.Env:
        return gym.make(self.env_id)


def env_factory(cfg: CfgNode, source: dict[str, str]) -> UnimalEnvFactory | GymEnvFactory:
    """The factory for ``{"xml": path}`` (a Unimal env) or ``{"env_id": id}`` (a Gymnasium env).

    Raises:
        FileNotFoundError: the MJCF file is missing. ValueError: the env id is unknown.
    """
    if "xml" in source:
        if not Path(source["xml"]).is_file():
            raise FileNotFoundError(f"unimal MJCF not found: {source['xml']}")
        return UnimalEnvFactory(cfg, str(source["xml"]))
    env_id = source["env_id"]
    if env_id not in gym.registry:
        raise ValueError(f"unknown Gymnasium env id {env_id!r}")
    return GymEnvFactory(env_id)
