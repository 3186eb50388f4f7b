"""The MuJoCo Warp backend on warp's CPU device against MuJoCo C (slow: warp compiles its kernels).

Physics: sampled FT and VT bodies (their terrain drawn by a reset), started from the same states and
driven by the same actions in both simulators, stay together: float32 (Warp) against float64 (C)
round-off grows through contacts, and the bounds below are what 25 env steps (100 substeps) leave
(README, "Simulating on a GPU").
"""

import numpy as np
import pytest

pytest.importorskip("mujoco_warp", reason="the warp backend is an optional install (requirements-gpu.txt)")
torch = pytest.importorskip("torch")

from derl.checked_config import load_config  # noqa: E402
from derl.envs.batch import FRAME_SKIP, UnimalBatch  # noqa: E402
from derl.envs.physics import MujocoPhysics  # noqa: E402
from derl.envs.warp_physics import WarpPhysics  # noqa: E402
from derl.morphology import random_genome, to_mjcf  # noqa: E402
from tests.test_envs_tasks import ROOT  # noqa: E402

pytestmark = pytest.mark.slow

NUM_ENVS, STEPS = 4, 25
QPOS_TOLERANCE, QVEL_TOLERANCE = 1e-4, 1e-2


@pytest.mark.parametrize("preset", ["ft", "vt"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_warp_steps_as_mujoco_c(preset, seed):
    cfg = load_config(ROOT / "configs" / "evo" / f"{preset}.yml")
    mjcf = to_mjcf(random_genome(cfg, np.random.default_rng(seed), f"warp-{seed}"), cfg)
    sim = UnimalBatch(mjcf, cfg, NUM_ENVS)
    sim.seed(seed)
    sim.reset(np.arange(NUM_ENVS))  # draws the terrain into the models (VT) and the start states
    model = sim.models[0]
    c_physics = MujocoPhysics(model, NUM_ENVS, persistent=True)
    warp_physics = WarpPhysics(model, NUM_ENVS, "cpu")
    for name in ("qpos", "qvel"):
        c_physics.arrays[name][:] = sim.scene.qpos[0] if name == "qpos" else sim.scene.qvel[0]
        warp_physics.arrays[name][:] = torch.as_tensor(c_physics.arrays[name])
    actions = np.random.default_rng(seed).uniform(-1, 1, (STEPS, NUM_ENVS, model.nu))
    contacts = 0
    for t in range(STEPS):
        c_physics.arrays["ctrl"][:] = actions[t]
        warp_physics.arrays["ctrl"][:] = torch.as_tensor(actions[t])
        c_physics.step(FRAME_SKIP)
        warp_physics.step(FRAME_SKIP)
        contacts += sum(c_physics.data(i).ncon for i in range(NUM_ENVS))
        for name, tolerance in (("qpos", QPOS_TOLERANCE), ("qvel", QVEL_TOLERANCE)):
            np.testing.assert_allclose(warp_physics.arrays[name].numpy(), c_physics.arrays[name], rtol=0,
                                       atol=tolerance, err_msg=f"{name} after step {t + 1}")
    assert contacts > 0, "the bodies never touched the ground: the comparison left contacts out"
    assert not warp_physics.problems().any(), "a world ran out of preallocated contacts or constraints"
