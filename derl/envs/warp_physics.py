"""``WarpPhysics``: the ``N`` simulations of ``UnimalBatch`` on MuJoCo Warp (``SIM.BACKEND warp``).

One ``mujoco_warp`` model and data of ``nworld = N`` worlds on a warp device (``cuda:N``, or ``cpu``
for development and tests). The arrays are torch views of warp's (``wp.to_torch``: no copy), float32
on that device, so the tasks and the learner read the state where it lives. Warp's kernels run on
torch's current stream, so torch's writes (``ctrl``, a reset's noise) and warp's steps stay in order
without synchronising; on a GPU a step of ``FRAME_SKIP`` substeps is captured once in a CUDA graph
and replayed.

What differs from MuJoCo C (README, "Differences from the original DERL" and "Simulating on a
GPU"): float32, contacts and constraint rows preallocated per world (``SIM.NCONMAX``,
``SIM.NJMAX``; an overflow is reported in ``problems`` and ends the episode as unstable), no
per-world model edits (only tasks whose model is static run here), and no warning counters (bad
states show as non-finite values, which the env ends as unstable).
"""

from __future__ import annotations

import mujoco
import mujoco_warp as mjw
import torch
import warp as wp

from derl.envs.physics import ARRAYS

DERIVED = ("xpos", "xmat", "site_xpos", "sensordata", "qfrc_actuator")


class WarpPhysics:
    """``num_envs`` worlds of ``model`` on ``device`` (a torch device name: ``cpu``, ``cuda``, ``cuda:N``)."""

    def __init__(self, model: mujoco.MjModel, num_envs: int, device: str = "cpu", *, nconmax: int = 64,
                 njmax: int = 256):
        self.torch_device = torch.device(device)
        if self.torch_device.type == "cuda" and self.torch_device.index is None:
            self.torch_device = torch.device("cuda", torch.cuda.current_device())
        self.device = wp.get_device(str(self.torch_device))
        with wp.ScopedDevice(self.device):
            self.model = mjw.put_model(model)
            self.data = mjw.put_data(model, mujoco.MjData(model), nworld=num_envs, nconmax=nconmax, njmax=njmax)
        arrays = {name: wp.to_torch(getattr(self.data, name)) for name in ARRAYS}
        arrays["xmat"] = arrays["xmat"].view(num_envs, -1, 9)
        self.arrays = arrays
        self._overflow = wp.to_torch(self.data.overflow)
        self._graphs: dict[int, wp.Graph] = {}
        self._generator = torch.Generator(self.torch_device)

    def seed(self, seed: int) -> None:
        """Seeds the generator of ``uniform``."""
        self._generator.manual_seed(seed)

    def uniform(self, shape: tuple[int, ...], scale: float) -> torch.Tensor:
        """U(+-scale) draws on the device, float32 (the reset noise of episodes started on the device)."""
        draws = torch.rand(shape, generator=self._generator, device=self.torch_device)
        return draws.mul_(2 * scale).sub_(scale)

    def _stream(self) -> wp.ScopedStream | wp.ScopedDevice:
        """Warp launches on torch's current stream (on a GPU), so that both see each other's writes in order."""
        if self.device.is_cuda:
            return wp.ScopedStream(wp.stream_from_torch(torch.cuda.current_stream(self.torch_device)))
        return wp.ScopedDevice(self.device)

    def step(self, nstep: int) -> None:
        with self._stream():
            if not self.device.is_cuda:
                for _ in range(nstep):
                    mjw.step(self.model, self.data)
                return
            graph = self._graphs.get(nstep)
            if graph is None:
                mjw.step(self.model, self.data)  # compiles and loads the kernels outside the capture
                with wp.ScopedCapture() as capture:
                    for _ in range(nstep):
                        mjw.step(self.model, self.data)
                graph = self._graphs[nstep] = capture.graph
            wp.capture_launch(graph)

    def reset(self, envs: torch.Tensor) -> None:
        with self._stream():
            mjw.reset_data(self.model, self.data, reset=wp.from_torch(envs))
        self._overflow.masked_fill_(envs, 0)

    def forward(self, envs: torch.Tensor) -> None:
        """MuJoCo Warp forwards every world: the other worlds' derived fields are put back after it."""
        saved = [self.arrays[name].clone() for name in DERIVED]
        with self._stream():
            mjw.forward(self.model, self.data)
        for name, before in zip(DERIVED, saved, strict=True):
            now = self.arrays[name]
            now.copy_(torch.where(envs.view(-1, *[1] * (now.dim() - 1)), now, before))

    def set_models(self, models: list[mujoco.MjModel]) -> None:
        raise ValueError("SIM.BACKEND warp steps one model for every world: tasks that edit their model per "
                         "episode (terrain, props, goals) need SIM.BACKEND mujoco")

    def problems(self) -> torch.Tensor:
        """Each world's overflow bitmask (``mujoco_warp.OverflowType``): non-zero when a buffer ran out."""
        return self._overflow
