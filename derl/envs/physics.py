"""The simulators under ``UnimalBatch``: ``N`` copies of one compiled model, stepped in one call.

Two backends (``SIM.BACKEND``) with one interface, so that the env loop and the tasks above them are
one code:

- ``MujocoPhysics``: MuJoCo's C engine (``mujoco.batch.Batch``) on the CPU, float64 NumPy arrays,
  one model per simulation when a task edits its model per episode. DERL's physics. For ``N = 1``
  (the single Gymnasium env), ``MujocoDataPhysics``: the same C calls on one ``MjData``
  (``mj_step``, ``mj_resetData``, ``mj_forward``), without the batch's per-call handling of ids,
  keyframes and errors (about 1.5 us a step and 40 us a reset, where a step's physics costs 20-50 us).
- ``WarpPhysics`` (``derl.envs.warp_physics``): MuJoCo Warp on a warp device (an NVIDIA GPU, or
  warp's CPU device), float32 torch tensors on that device (docs/guides/gpus.md#simulating-on-a-gpu),
  one model for every world with per-world rows of the fields a task changes per episode; it also
  holds the generator a device's restarts draw their reset noise from (``seed``, ``uniform``).

``arrays`` holds live ``[N, ...]`` views of the state (``qpos``, ``qvel``, ``ctrl``, ``time``:
writable, a write is that simulation's state at its next call; ``MujocoDataPhysics``'s ``time`` is
a copy that each call refreshes, for reading) and of the derived fields
``xpos``, ``xmat`` (``[N, nbody, 9]``), ``site_xpos``, ``sensordata`` and ``qfrc_actuator``.
"""

from __future__ import annotations

from typing import Any, Protocol

import mujoco
import mujoco.batch
import numpy as np

from derl.arrays import Array

STATE = mujoco.mjtState.mjSTATE_INTEGRATION  # what ``state(env)`` holds: enough to continue exactly
ARRAYS = ("qpos", "qvel", "ctrl", "time", "xpos", "xmat", "site_xpos", "sensordata", "qfrc_actuator")


class Physics(Protocol):
    arrays: dict[str, Array]

    def step(self, nstep: int) -> None:
        """Advances every simulation ``nstep`` substeps with the controls in ``arrays["ctrl"]``."""

    def reset(self, envs: Any) -> None:
        """Puts the simulations of the mask ``envs`` (``[N]`` bool, the arrays' namespace) back to the
        model's defaults (``mj_resetData``)."""

    def forward(self, envs: Any) -> None:
        """Recomputes the derived fields of the simulations of the mask ``envs`` from their state; the
        others keep theirs."""

    def set_models(self, models: list[mujoco.MjModel], envs: np.ndarray | None = None) -> None:
        """Simulation i steps ``models[i]`` from now on (the models share one layout); ``envs``: the
        simulations whose models changed (host indices; None: any)."""

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
        self._models: list[mujoco.MjModel] | None = None  # the simulations' own models, once set
        self.arrays = {name: self.batch.bind(name) for name in ARRAYS}
        self._warning_counts = self.batch.warning[:, :, 1]  # a live view: (N, mjNWARNING) counters
        self._ones = np.ones(self._warning_counts.shape[1], self._warning_counts.dtype)  # problems' sums

    def step(self, nstep: int) -> None:
        self.batch.step(nstep=nstep)

    def reset(self, envs: np.ndarray) -> None:
        self.batch.reset(envs.nonzero()[0], stage=mujoco.mjtStage.mjSTAGE_NONE)

    def forward(self, envs: np.ndarray) -> None:
        self.batch.forward(envs.nonzero()[0])

    def set_models(self, models: list[mujoco.MjModel], envs: np.ndarray | None = None) -> None:
        self._models = models
        self.batch.set_models(models)  # pointers to the models: every one, at no cost

    def set_model_rows(self, name: str, envs: np.ndarray, values: np.ndarray) -> None:
        """Rows of the batch's one model, expanded per simulation; or, where each simulation steps a
        model of its own (``set_models``: MVT's props on a terrain bank), the rows of those models."""
        if self._models is None:
            self.batch.expand(name)[envs] = values
            return
        for env, row in zip(np.asarray(envs).tolist(), values, strict=True):
            getattr(self._models[env], name)[:] = row

    def problems(self) -> np.ndarray:
        # integer counts: the product with ones is their exact sum, at 0.7 us against sum's 1.7
        return self._warning_counts.dot(self._ones)

    def close(self) -> None:
        """Nothing to report: MuJoCo C's warnings end their episodes (``problems``)."""

    def data(self, env: int, data: mujoco.MjData | None = None) -> mujoco.MjData:
        return self.batch.get_data(env, data)

    def state(self, env: int) -> np.ndarray:
        """Simulation ``env``'s ``STATE`` (a copy)."""
        return self.batch.state[env].copy()


class MujocoDataPhysics:
    """One simulation on one ``MjData`` (module docstring): ``MujocoPhysics`` of one, persistent."""

    def __init__(self, model: mujoco.MjModel):
        self.model = model
        self._data = data = mujoco.MjData(model)
        self.arrays = {name: getattr(data, name)[None] for name in ARRAYS if name != "time"}  # live views
        self._time = self.arrays["time"] = np.array([data.time])
        self._warning_counts = data.warning.number[None]  # a live view: (1, mjNWARNING) counters
        self._ones = np.ones(self._warning_counts.shape[1], self._warning_counts.dtype)  # problems' sums

    def step(self, nstep: int) -> None:
        mujoco.mj_step(self.model, self._data, nstep)
        self._time[0] = self._data.time

    def reset(self, envs: np.ndarray) -> None:
        if envs[0]:
            mujoco.mj_resetData(self.model, self._data)
            self._time[0] = self._data.time

    def forward(self, envs: np.ndarray) -> None:
        if envs[0]:
            mujoco.mj_forward(self.model, self._data)

    def set_models(self, models: list[mujoco.MjModel], envs: np.ndarray | None = None) -> None:
        (self.model,) = models

    def set_model_rows(self, name: str, envs: np.ndarray, values: np.ndarray) -> None:
        """The one simulation's model (its own: ``UnimalBatch`` compiles it for this env) takes the row."""
        if len(envs):
            getattr(self.model, name)[:] = values[-1]

    def problems(self) -> np.ndarray:
        return self._warning_counts.dot(self._ones)  # as MujocoPhysics.problems

    def close(self) -> None:
        """Nothing to report (as ``MujocoPhysics``)."""

    def data(self, env: int, data: mujoco.MjData | None = None) -> mujoco.MjData:
        """The simulation's ``MjData``, copied into ``data`` (a new one if None)."""
        data = mujoco.MjData(self.model) if data is None else data
        mujoco.mj_copyData(data, self.model, self._data)
        return data

    def state(self, env: int) -> np.ndarray:
        """The simulation's ``STATE``."""
        state = np.empty(mujoco.mj_stateSize(self.model, STATE))
        mujoco.mj_getState(self.model, self._data, state, STATE)
        return state
