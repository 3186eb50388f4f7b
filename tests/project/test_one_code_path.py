"""The device's code path on the CPU: one env loop, reset, collector and statistics over NumPy and torch.

``TorchMujoco`` is a device's physics as the CPU can have it: MuJoCo C's state seen as float64 torch
tensors (views of the same memory, no copy) and a torch generator for restarts, as ``WarpPhysics``
has. A ``UnimalVectorEnv`` on it runs everything a GPU runs (``derl.arrays.any_set`` never reads a
tensor), with MuJoCo C's own numbers, so the same scenario through NumPy and through torch must give
the same rollout, episodes, returns and statistics; and, its tensors refusing to reach the host
(``NoHostRead``, what ``meta`` does to the collector in ``tests/ppo/test_ppo_device_path.py``), its steps
and restarts never read a value back.
"""

import warnings

import array_api_compat.torch._aliases
import numpy as np
import pytest
import torch

from derl.checked_config import load_config
from derl.envs import UnimalVectorEnv, batch
from derl.envs.physics import MujocoPhysics
from derl.ppo.acting import TorchActor, TorchNoise
from derl.ppo.networks import ActorCritic
from derl.ppo.normalize import ObsNormalizer, ReturnNormalizer
from derl.ppo.obs_layout import ObsLayout
from derl.ppo.rollout import Collector, Rollout
from tests.envs.test_envs_tasks import CONFIGS, FIXTURE

NUM_ENVS, STEPS, LENGTH = 4, 40, 12


class NoHostRead(torch.Tensor):
    """A tensor whose values may not reach the host while ``forbidden`` (on a GPU such a read waits for
    the device): ``bool()``, ``.item()``, ``.tolist()``, ``.numpy()``, ``.cpu()``, ``nonzero`` and
    boolean-mask indexing raise. Torch operations keep the subclass."""

    forbidden = False
    READS = {torch.Tensor.__bool__, torch.Tensor.__int__, torch.Tensor.__float__, torch.Tensor.__index__,
             torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.numpy, torch.Tensor.cpu, torch.Tensor.nonzero,
             torch.nonzero, torch.Tensor.__array__}

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if cls.forbidden:
            masks = [a for a in (args[1:] if func in (torch.Tensor.__getitem__, torch.Tensor.__setitem__) else ())
                     for a in (a if isinstance(a, tuple) else (a,))
                     if isinstance(a, torch.Tensor) and a.dtype == torch.bool]
            if func in cls.READS or masks:
                raise AssertionError(f"a value read back to the host: {func.__name__}")
        return super().__torch_function__(func, types, args, kwargs)


def _host(tensor: torch.Tensor) -> np.ndarray:
    return tensor.as_subclass(torch.Tensor).numpy()


class TorchMujoco:
    """MuJoCo C under torch tensors of ``tensor_type`` (module docstring). The masks it is given are
    read here, as a simulator on a device reads them there."""

    def __init__(self, model, num_envs: int, tensor_type: type = torch.Tensor):
        self.c, self.tensor_type = MujocoPhysics(model, num_envs), tensor_type
        with warnings.catch_warnings():  # the derived fields are read-only views: MuJoCo alone writes them
            warnings.simplefilter("ignore", UserWarning)
            self.arrays = {name: torch.from_numpy(array).as_subclass(tensor_type)
                           for name, array in self.c.arrays.items()}
        self.generator = torch.Generator()

    def step(self, nstep: int) -> None:
        self.c.step(nstep)

    def reset(self, envs: torch.Tensor) -> None:
        self.c.reset(_host(envs))

    def forward(self, envs: torch.Tensor) -> None:
        self.c.forward(_host(envs))

    def set_models(self, models, envs=None) -> None:
        self.c.set_models(models, envs)

    def set_model_rows(self, name: str, envs, values) -> None:
        self.c.set_model_rows(name, envs, values)

    def set_model_column_where(self, name: str, column: int, envs: torch.Tensor, values: torch.Tensor) -> None:
        mask = _host(envs)
        self.c.batch.expand(name)[mask, column] = _host(values)[mask]

    def problems(self) -> torch.Tensor:
        return torch.from_numpy(self.c.problems()).as_subclass(self.tensor_type)

    def close(self) -> None:
        self.c.close()

    def seed(self, seed: int) -> None:
        self.generator.manual_seed(seed)

    def uniform(self, shape: tuple[int, ...], scale: float) -> torch.Tensor:
        return torch.rand(shape, generator=self.generator, dtype=torch.float64).mul_(2 * scale).sub_(scale)

    def integers(self, high: int, shape: tuple[int, ...]) -> torch.Tensor:
        return torch.randint(high, shape, generator=self.generator)


@pytest.fixture
def on_torch(monkeypatch):
    """``make_env(cfg, True)`` builds a vector env on ``TorchMujoco`` (of ``tensor_type``)."""

    def make_env(cfg, torch_arrays: bool, tensor_type: type = torch.Tensor) -> UnimalVectorEnv:
        if torch_arrays:
            monkeypatch.setattr(batch, "make_physics", lambda _backend, model, num_envs, **_: TorchMujoco(
                model, num_envs, tensor_type))
        else:
            monkeypatch.undo()
        return UnimalVectorEnv(FIXTURE, cfg, NUM_ENVS)

    return make_env


def _collect(envs: UnimalVectorEnv) -> tuple[Rollout, list[dict], list[dict]]:
    """A rollout of ``STEPS`` steps with the same model and noise whatever the env's arrays."""
    layout = ObsLayout.from_space(envs.single_observation_space)
    torch.manual_seed(0)
    model = ActorCritic(layout, envs.single_action_space.shape[0], [16], [16])
    device = envs.device
    collector = Collector(envs, 0, ObsNormalizer(*layout.normalized_columns(), device=device),
                          ReturnNormalizer(NUM_ENVS, 0.99, device=device), TorchActor(model),
                          TorchNoise(3, torch.device("cpu")))
    rollout = Rollout.allocate(STEPS, NUM_ENVS, layout.size, model.log_std.shape[0], device=device)
    collector.reset(seed=5)
    ended = [{"step": step, **episode} for step, episode in collector.collect(rollout)]  # compared as one record
    return rollout, ended, collector.episodes_so_far()


def test_numpy_and_torch_collect_the_same_episodes(on_torch):
    # No reset noise: a device's restarts draw it from another generator than the host's per-env ones.
    # A high stand ratio: the body falls too.
    cfg = load_config(CONFIGS["ft"], {"ENV.EPISODE_LENGTH": LENGTH, "ENV.RESET_NOISE_SCALE": 0.0,
                                      "ENV.STAND_HEIGHT_RATIO": 0.97})
    host_env, torch_env = on_torch(cfg, False), on_torch(cfg, True)
    assert host_env.device is None and torch_env.device == torch.device("cpu")
    host, host_episodes, host_so_far = _collect(host_env)
    device, device_episodes, device_so_far = _collect(torch_env)
    assert isinstance(device.obs, torch.Tensor) and device.rewards.dtype == torch.float32
    assert host.truncated.any() and host.terminated.any()  # time limits (bootstrapped) and falls
    for name in ("terminated", "truncated"):
        np.testing.assert_array_equal(getattr(device, name).numpy(), getattr(host, name), err_msg=name)
    for name in ("obs", "actions", "log_probs", "values", "rewards", "final_values", "bootstrap_value"):
        np.testing.assert_allclose(getattr(device, name).numpy(), getattr(host, name), rtol=1e-5, atol=1e-5,
                                   err_msg=name)
    assert len(host_episodes) >= 2 * NUM_ENVS
    for got, expected in ((device_episodes, host_episodes), (device_so_far, host_so_far)):
        assert [list(episode) for episode in got] == [list(episode) for episode in expected]
        for g, e in zip(got, expected, strict=True):
            assert g == pytest.approx(e, rel=1e-6, abs=1e-9)  # float32 actions: their sums of squares round apart


def test_a_task_that_draws_its_episodes_restarts_on_the_host_and_collects_as_numpy(on_torch):
    """point_nav draws a goal per episode: on tensors its restarts come to the host and draw each env's goal
    and reset noise from its own generator, as on NumPy, so the two collect the same episodes, noise and all."""
    cfg = load_config(CONFIGS["point_nav"], {"ENV.EPISODE_LENGTH": LENGTH, "ENV.STAND_HEIGHT_RATIO": 0.97})
    host, host_episodes, _ = _collect(on_torch(cfg, False))
    device, device_episodes, _ = _collect(on_torch(cfg, True))
    assert host.truncated.any() and host.terminated.any()
    np.testing.assert_array_equal(device.terminated.numpy(), host.terminated)
    np.testing.assert_allclose(device.obs.numpy(), host.obs, rtol=1e-5, atol=1e-5)
    assert [list(episode) for episode in device_episodes] == [list(episode) for episode in host_episodes]
    for got, expected in zip(device_episodes, host_episodes, strict=True):
        assert got == pytest.approx(expected, rel=1e-6, abs=1e-9)


def test_a_restart_on_tensors_starts_the_masked_envs_only(on_torch):
    env = on_torch(load_config(CONFIGS["ft"]), True)
    env.reset(seed=1)
    sim, scale = env.sim, float(load_config(CONFIGS["ft"]).ENV.RESET_NOISE_SCALE)
    for _ in range(3):
        env.step(torch.full((NUM_ENVS, env.single_action_space.shape[0]), 0.5))
    before = {name: sim.scene.qpos.clone() if name == "qpos" else sim.scene.qvel.clone() for name in ("qpos", "qvel")}
    steps = sim._steps.clone()
    generator = sim.physics.generator.get_state()
    ended = torch.tensor([False, True, False, True])
    sim.restart(ended)
    sim.physics.generator.set_state(generator)  # the draws the restart made, again
    noise = sim.physics.uniform((NUM_ENVS, sim.model.nq + sim.model.nv), scale)
    qpos0 = torch.from_numpy(sim.model.qpos0)
    kept = ~ended
    torch.testing.assert_close(sim.scene.qpos[kept], before["qpos"][kept], rtol=0, atol=0)
    torch.testing.assert_close(sim.scene.qvel[kept], before["qvel"][kept], rtol=0, atol=0)
    torch.testing.assert_close(sim._steps, torch.where(ended, 0, steps))
    started = sim.scene.qpos[ended]
    expected = qpos0 + noise[ended, : sim.model.nq]
    torch.testing.assert_close(started[:, 7:], expected[:, 7:])  # the hinges: defaults + noise
    quat = expected[:, 3:7]
    torch.testing.assert_close(started[:, 3:7], quat / quat.norm(dim=1, keepdim=True))  # renormalised
    torch.testing.assert_close(sim.scene.qvel[ended], noise[ended, sim.model.nq:])


def _no_scalar_copy(x, other):
    """array_api_compat's ``_scalar_to_tensor``, refusing the copy it makes of a Python number."""
    if isinstance(x, bool | int | float | complex):
        raise AssertionError("a Python scalar copied to the device (a host sync on CUDA)")
    return x


# VT on a terrain bank (a short corridor: a quick build) restarts on the device too, its entries drawn there.
VT_BANK = {"TERRAIN.BANK_SIZE": 4, "TERRAIN.SIZE": [10, 2, 1], "TERRAIN.FLAT_LENGTH_RANGE": [1, 3, 1]}


@pytest.mark.parametrize(("name", "overrides"), [("ft", {}), ("vt", VT_BANK)], ids=["ft", "vt_bank"])
def test_steps_and_restarts_on_tensors_never_read_a_value_back(on_torch, monkeypatch, name, overrides):
    """Nor copy a Python number to the device: array_api_compat's functions of a tensor and a Python
    scalar (``maximum(rows, 0.0)``) make a tensor of the scalar first, a host-to-device copy that CUDA
    counts as a sync (an H200's ``set_sync_debug_mode("error")`` caught VT's clearance doing it)."""
    env = on_torch(load_config(CONFIGS[name], {"ENV.EPISODE_LENGTH": LENGTH, **overrides}), True, NoHostRead)
    env.reset(seed=2)
    shape = (STEPS, NUM_ENVS, env.single_action_space.shape[0])
    actions = torch.rand(shape, generator=torch.Generator().manual_seed(0))
    steps = []
    NoHostRead.forbidden = True
    monkeypatch.setattr(array_api_compat.torch._aliases, "_scalar_to_tensor", _no_scalar_copy)
    try:
        for action in actions * 2 - 1:
            steps.append(env.step(action))
        with pytest.raises(AssertionError, match="read back to the host"):
            bool(steps[-1][2].any())  # what asking would do
    finally:
        NoHostRead.forbidden = False
    ended = torch.stack([step[2] | step[3] for step in steps]).as_subclass(torch.Tensor)
    assert ended.sum() >= 2 * NUM_ENVS  # restarts at time limits (and falls)
    assert all("final_obs" in step[4] for step in steps)  # a device never asks whether an env ended
