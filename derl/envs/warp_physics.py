"""``WarpPhysics``: the ``N`` simulations of ``UnimalBatch`` on MuJoCo Warp (``SIM.BACKEND warp``).

One ``mujoco_warp`` model and data of ``nworld = N`` worlds on a warp device (``cuda:N``, or ``cpu``
for development and tests). The arrays are torch views of warp's (``wp.to_torch``: no copy), float32
on that device, so the tasks and the learner read the state where it lives.

On a GPU, as MuJoCo Warp's production users drive it (mjlab's ``sim.py``, mujoco_warp's
``testspeed``): a step of ``FRAME_SKIP`` substeps, the reset and the forward are each captured once
per model in a CUDA graph on a stream of warp's own (CUDA refuses to capture on torch's legacy
default stream) and replayed; torch's stream and warp's wait for each other through events
(``torch.cuda.ExternalStream`` on warp's stream), never through the host. The uncaptured call that
loads the kernels before a capture (the warm-up) runs between a save and a restore of the state, so
it leaves the simulation as it was. The reset and the forward read a persistent world mask (the
captured graph holds its address); the forward puts the other worlds' derived fields back from
persistent buffers, inside the graph.

What differs from MuJoCo C (docs/design/differences.md and docs/guides/gpus.md#simulating-on-a-gpu;
GPU"): float32, contacts and constraint rows preallocated per world (``SIM.NCONMAX``,
``SIM.NJMAX``; a buffer that runs out is counted by type in ``overflows`` and reported, it does not
end episodes), per-world model edits only in the fields named at construction (``per_world``: each
held ``[nworld, ...]`` from the start, so that captured graphs read them; ``set_model_rows``,
``set_models``), and no warning counters (``problems`` stays zero; bad states show as non-finite
values, which the env ends as unstable in their own world only).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

import mujoco
import mujoco_warp as mjw
import numpy as np
import torch
import warp as wp

from derl.envs.physics import ARRAYS
from derl.envs.warp_graphs import Graphs
from derl.envs.warp_log import quiet_warp
from derl.envs.warp_overflow import Buffers, OverflowTally, describe, grown

log = logging.getLogger(__name__)
quiet_warp()  # no banner, no per-module load line in a worker's log (derl.envs.warp_log)
# The largest buffers an overflow asked for in this process: the next model builds start from them.
_grown = Buffers(0, 0)

DERIVED = ("xpos", "xmat", "site_xpos", "sensordata", "qfrc_actuator")
# What a warm-up step changes that the captured graph reads or that the env reads before the next step:
# MuJoCo's integration state (mjSTATE_INTEGRATION's advanced part), the overflow bits and the derived fields.
RESTORED = ("time", "qpos", "qvel", "act", "qacc_warmstart", "overflow", *DERIVED)
# The Model fields MuJoCo Warp can hold per world: those typed array("*", ...) in mujoco_warp's types.
PER_WORLD_FIELDS = frozenset(field.name for field in dataclasses.fields(mjw.Model)
                             if tuple(getattr(field.type, "shape", ()) or ())[:1] == ("*",))


# Warp's kernel language types arguments by calls (wp.array(dtype=...)) and wp.tid() by the launch's
# dimensions, which Python's type system cannot state: mypy is told to skip those three lines.
@wp.kernel
def _keep_rows(envs: wp.array(dtype=wp.bool), saved: wp.array2d(dtype=wp.float32),  # type: ignore[valid-type]
               now: wp.array2d(dtype=wp.float32)):  # type: ignore[valid-type]
    """Puts row ``i`` of ``saved`` back into ``now`` where ``envs[i]`` is not set."""
    i, j = wp.tid()  # type: ignore[misc]
    if not envs[i]:
        now[i, j] = saved[i, j]


class WarpPhysics:
    """``num_envs`` worlds of ``model`` on ``device`` (a torch device name: ``cpu``, ``cuda``, ``cuda:N``).

    ``capture``: replay captured graphs (default: on CUDA; warp's CPU device captures too, for tests).
    ``per_world``: the model fields (``mujoco_warp`` Model fields typed ``array("*", ...)``) each world
    holds its own row of, for tasks that edit their model per episode (``set_model_rows``).
    """

    def __init__(self, model: mujoco.MjModel, num_envs: int, device: str = "cpu", *, nconmax: int = 64,
                 njmax: int = 256, capture: bool | None = None, per_world: tuple[str, ...] = ()):
        self.torch_device = torch.device(device)
        if self.torch_device.type == "cuda" and self.torch_device.index is None:
            self.torch_device = torch.device("cuda", torch.cuda.current_device())
        self.device = wp.get_device(str(self.torch_device))
        self.buffers = Buffers(max(nconmax, _grown.nconmax), max(njmax, _grown.njmax))
        nconmax, njmax = self.buffers
        self._reported = False
        with wp.ScopedDevice(self.device):
            # per-world fields expanded before any capture: the graphs hold the arrays' addresses
            self.model = mjw.put_model(model, batch_sizes=dict.fromkeys(per_world, num_envs))
            self.model.opt.warn_overflow = 0  # no printf per world and step: ``overflows`` counts by type
            self.data = mjw.put_data(model, mujoco.MjData(model), nworld=num_envs, nconmax=nconmax, njmax=njmax)
            self._mask = wp.zeros(num_envs, dtype=wp.bool)  # the worlds of a reset and a forward (persistent)
            stream = wp.Stream(self.device) if self.device.is_cuda else None  # warp's own stream
        arrays = {name: wp.to_torch(getattr(self.data, name)) for name in ARRAYS}
        arrays["xmat"] = arrays["xmat"].view(num_envs, -1, 9)
        self.arrays = arrays
        self._torch_mask = wp.to_torch(self._mask)
        # [N, floats] views of the derived fields and the persistent buffers a forward keeps them in
        rows = [arrays[name].reshape(num_envs, -1) for name in DERIVED]
        self._derived = [(wp.from_torch(row), wp.from_torch(torch.empty_like(row))) for row in rows]
        restored = [getattr(self.data, name) for name in RESTORED if getattr(self.data, name, None) is not None]
        capture = self.device.is_cuda if capture is None else capture
        self.graphs = Graphs(wp, self.device, stream, restored, capture=capture)
        self.overflows = OverflowTally(wp.to_torch(self.data.overflow))
        self._problems = torch.zeros(num_envs, dtype=torch.int32, device=self.torch_device)
        self._generator = torch.Generator(self.torch_device)
        self.per_world = tuple(per_world)
        # Geoms welded to the world: MuJoCo Warp places them once (put_data), never in a step; their
        # bodies' poses are constants (MuJoCo's kinematics of the model's defaults).
        bodies = model.geom_bodyid
        static = (model.body_weldid[bodies] == 0) & (model.body_mocapid[model.body_rootid[bodies]] == -1)
        defaults = mujoco.MjData(model)
        mujoco.mj_kinematics(model, defaults)
        on = self.torch_device
        self._static_geoms = torch.as_tensor(np.flatnonzero(static), device=on)
        self._static_frames = (torch.as_tensor(defaults.xpos[bodies[static]], device=on),
                               torch.as_tensor(defaults.xmat[bodies[static]].reshape(-1, 3, 3), device=on))

    def seed(self, seed: int) -> None:
        """Seeds the generator of ``uniform``."""
        self._generator.manual_seed(seed)

    def uniform(self, shape: tuple[int, ...], scale: float) -> torch.Tensor:
        """U(+-scale) draws on the device, float32 (the reset noise of episodes started on the device)."""
        draws = torch.rand(shape, generator=self._generator, device=self.torch_device)
        return draws.mul_(2 * scale).sub_(scale)

    def integers(self, high: int, shape: tuple[int, ...]) -> torch.Tensor:
        """Draws uniform in ``[0, high)`` on the device, int64, from the generator of ``uniform`` (a
        terrain bank's entries of episodes started on the device)."""
        return torch.randint(high, shape, generator=self._generator, device=self.torch_device)

    def _launch(self, key: str, body: Callable[[], None]) -> None:
        """``body`` on warp's device, after torch's writes and before torch's next reads."""
        if not self.device.is_cuda:
            self.graphs.run(key, body)
            return
        torch_stream = torch.cuda.current_stream(self.torch_device)
        warp_side = torch.cuda.ExternalStream(self.graphs.stream.cuda_stream, device=self.torch_device)
        warp_side.wait_stream(torch_stream)  # events: neither the host nor the other stream stalls
        self.graphs.run(key, body)
        torch_stream.wait_stream(warp_side)

    def step(self, nstep: int) -> None:
        def substeps() -> None:
            for _ in range(nstep):
                mjw.step(self.model, self.data)

        self._launch(f"step{nstep}", substeps)
        self.overflows.add()

    def reset(self, envs: torch.Tensor) -> None:
        self._torch_mask.copy_(envs)
        self._launch("reset", lambda: mjw.reset_data(self.model, self.data, reset=self._mask))

    def forward(self, envs: torch.Tensor) -> None:
        """MuJoCo Warp forwards every world: the other worlds' derived fields are put back after it."""
        self._torch_mask.copy_(envs)
        self._launch("forward", self._forward_masked)

    def _forward_masked(self) -> None:
        for live, saved in self._derived:
            wp.copy(saved, live)  # type: ignore[arg-type]  # warp types its arrays array | array_t, copy takes array
        mjw.forward(self.model, self.data)
        for live, saved in self._derived:
            wp.launch(_keep_rows, dim=live.shape, inputs=[self._mask, saved, live])

    def set_model_rows(self, name: str, envs: torch.Tensor | np.ndarray, values) -> None:
        """Writes the rows ``values`` (``[len(envs), ...]``, MuJoCo's layout of the field) of the model
        field ``name`` for the worlds ``envs`` (indices, host or device).

        A field not expanded per world at construction (``per_world``) is expanded here
        (``expand_model_rows``: the captured graphs are dropped): name it in ``per_world`` instead.
        A world-welded geom's ``geom_pos`` moves its ``geom_xpos`` too (MuJoCo Warp computes those once,
        in ``put_data``; MuJoCo C in every forward); its ``geom_quat`` does not turn its ``geom_xmat``
        (no task turns one).
        """
        self.expand_model_rows((name,))
        rows = wp.to_torch(getattr(self.model, name))
        envs = torch.as_tensor(envs, device=self.torch_device, dtype=torch.int64)
        values = torch.as_tensor(values, device=self.torch_device)
        rows[envs] = values.reshape(len(envs), *rows.shape[1:]).to(rows.dtype)
        if name == "geom_pos" and len(self._static_geoms):
            self._place_static_geoms(envs, rows)

    def set_model_column_where(self, name: str, column: int, envs: torch.Tensor, values: torch.Tensor) -> None:
        """Writes ``values[i]`` into column ``column`` of world i's row of the per-world model field ``name``
        where the mask ``envs`` (``[nworld]`` bool, on the device) is set: a masked write, the mask never
        read on the host (a restart on the device: ``derl.envs.terrain_bank``)."""
        self.expand_model_rows((name,))  # as set_model_rows: a no-op for a field named in per_world
        rows = wp.to_torch(getattr(self.model, name))
        rows[:, column] = torch.where(envs, values.to(rows.dtype), rows[:, column])

    def expand_model_rows(self, names: tuple[str, ...]) -> None:
        """Holds the model fields ``names`` per world from now on (``[nworld, ...]``, each world a copy of
        the shared row). Graphs captured before read the shared arrays: they are dropped and recaptured
        on their next call (``per_world`` at construction expands before any capture)."""
        for name in names:
            if name not in PER_WORLD_FIELDS:
                raise ValueError(f"MuJoCo Warp holds the model field {name!r} once for all worlds, not per world")
            field = getattr(self.model, name)
            if field.shape[0] == self.data.nworld:
                continue
            tiled = np.repeat(field.numpy()[:1], self.data.nworld, axis=0)
            setattr(self.model, name, wp.array(tiled, dtype=field.dtype, device=self.device))
            self.graphs.graphs.clear()

    def _place_static_geoms(self, envs: torch.Tensor, geom_pos: torch.Tensor) -> None:
        """``geom_xpos`` of the world-welded geoms of ``envs``: body position + body rotation x geom_pos."""
        geoms, (xpos, xmat) = self._static_geoms, self._static_frames
        local = geom_pos[envs][:, geoms].double()
        placed = xpos + (xmat @ local[..., None])[..., 0]
        geom_xpos = wp.to_torch(self.data.geom_xpos)
        geom_xpos[envs[:, None], geoms[None, :]] = placed.to(geom_xpos.dtype)

    def set_models(self, models: list[mujoco.MjModel], envs: np.ndarray | None = None) -> None:
        """World i steps ``models[i]``'s rows of the ``per_world`` fields from now on (the worlds ``envs``,
        host indices; all by default); the other fields are the model's of construction for every world."""
        envs = np.arange(self.data.nworld) if envs is None else np.asarray(envs)
        if not len(envs):
            return
        for name in self.per_world:
            self.set_model_rows(name, envs, np.stack([getattr(models[env], name) for env in envs.tolist()]))

    def close(self) -> None:
        """Logs the overflows counted (one line, once) and grows the buffers of the next model builds."""
        global _grown
        if self._reported:
            return
        self._reported = True
        counts = self.overflows.counts()
        line = describe(counts, self.overflows.steps, self.buffers)
        if line is not None:
            log.warning(line)
            bigger = grown(self.buffers, counts)
            _grown = Buffers(max(_grown.nconmax, bigger.nconmax), max(_grown.njmax, bigger.njmax))

    def problems(self) -> torch.Tensor:
        """Zeros: an overflow or a solver that did not converge ends no episode (``overflows`` counts them)."""
        return self._problems
