"""The simulators under ``UnimalBatch``: ``N`` copies of one compiled model, stepped in one call.

Two backends (``SIM.BACKEND``) with one interface, so that the env loop and the tasks above them are
one code:

- ``MujocoPhysics``: MuJoCo's C engine (``mujoco.batch.Batch``) on the CPU, float64 NumPy arrays,
  one model per simulation when a task edits its model per episode. DERL's physics.
- ``WarpPhysics`` (``derl.envs.warp_physics``): MuJoCo Warp on a warp device (an NVIDIA GPU, or
  warp's CPU device), float32 torch tensors on that device (docs/guides/gpus.md#simulating-on-a-gpu); it also
  holds the generator a device's restarts draw their reset noise from (``seed``, ``uniform``).

``arrays`` holds live ``[N, ...]`` views of the state (``qpos``, ``qvel``, ``ctrl``, ``time``:
writable, a write is that simulation's state at its next call) and of the derived fields
``xpos``, ``xmat`` (``[N, nbody, 9]``), ``site_xpos``, ``sensordata`` and ``qfrc_actuator``.
"""

from __future__ import annotations

from typing import Any, Protocol

import mujoco
import mujoco.batch
import numpy as np

ARRAYS = ("qpos", "qvel", "ctrl", "time", "xpos", "xmat", "site_xpos", "sensordata", "qfrc_actuator")


class Physics(Protocol):
    arrays: dict[str, Any]

    def step(self, nstep: int) -> None:
        """Advances every simulation ``nstep`` substeps with the controls in ``arrays["ctrl"]``."""

    def reset(self, envs: Any) -> None:
        """Puts the simulations of the mask ``envs`` (``[N]`` bool, the arrays' namespace) back to the
        model's defaults (``mj_resetData``)."""

    def forward(self, envs: Any) -> None:
        """Recomputes the derived fields of the simulations of the mask ``envs`` from their state; the
        others keep theirs."""

    def set_models(self, models: list[mujoco.MjModel]) -> None:
        """Simulation i steps ``models[i]`` from now on (the models share one layout)."""

    def set_model_rows(self, name: str, envs: Any, values: Any) -> None:
        """Simulations ``envs`` step with their rows ``values`` of the model field ``name`` (made
        per-simulation by the first call): a terrain bank's ``geom_dataid``."""

    def problems(self) -> Any:
        """``[N]`` counts of the simulator's warnings so far; a rise means the physics went wrong."""

    def close(self) -> None:
        """Reports what the simulator counted over its life (MuJoCo Warp: its overflows), once."""


class MujocoPhysics:
    """``mujoco.batch.Batch``: ``threads`` threads step the simulations; ``persistent`` keeps a whole
    ``MjData`` per simulation (``data(i)``: contacts and every field of its last step)."""

    def __init__(self, model: mujoco.MjModel, num_envs: int, threads: int = 1, persistent: bool = False):
        self.batch = mujoco.batch.Batch(model, num_envs, nthread=threads, persistent=persistent)
        self.arrays = {name: self.batch.bind(name) for name in ARRAYS}
        self._warning_counts = self.batch.warning[:, :, 1]  # a live view: (N, mjNWARNING) counters

    def step(self, nstep: int) -> None:
        self.batch.step(nstep=nstep)

    def reset(self, envs: np.ndarray) -> None:
        self.batch.reset(np.flatnonzero(envs), stage=mujoco.mjtStage.mjSTAGE_NONE)

    def forward(self, envs: np.ndarray) -> None:
        self.batch.forward(np.flatnonzero(envs))

    def set_models(self, models: list[mujoco.MjModel]) -> None:
        self.batch.set_models(models)

    def set_model_rows(self, name: str, envs: np.ndarray, values: np.ndarray) -> None:
        self.batch.expand(name)[envs] = values

    def problems(self) -> np.ndarray:
        return self._warning_counts.sum(axis=1)

    def close(self) -> None:
        """Nothing to report: MuJoCo C's warnings end their episodes (``problems``)."""

    def data(self, env: int, data: mujoco.MjData | None = None) -> mujoco.MjData:
        return self.batch.get_data(env, data)
