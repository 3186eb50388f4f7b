"""The MuJoCo Warp backend on warp's CPU device against MuJoCo C (slow: warp compiles its kernels).

Physics: sampled FT and VT bodies (their terrain drawn by a reset), started from the same states and
driven by the same actions in both simulators, stay together: float32 (Warp) against float64 (C)
round-off grows through contacts, and the bounds below are what 25 env steps (100 substeps) leave
(docs/guides/gpus.md#simulating-on-a-gpu).
"""

import numpy as np
import pytest

pytest.importorskip("mujoco_warp", reason="the warp backend is an optional install (requirements-gpu.txt)")
torch = pytest.importorskip("torch")
wp = pytest.importorskip("warp")
mjw = pytest.importorskip("mujoco_warp")

from derl.checked_config import load_config  # noqa: E402
from derl.envs.batch import FRAME_SKIP, UnimalBatch  # noqa: E402
from derl.envs.physics import MujocoPhysics  # noqa: E402
from derl.envs.warp_physics import WarpPhysics  # noqa: E402
from derl.morphology import random_genome, to_mjcf  # noqa: E402
from tests.envs.test_envs_tasks import ROOT  # noqa: E402

pytestmark = pytest.mark.slow

NUM_ENVS, STEPS = 4, 25
QPOS_TOLERANCE, QVEL_TOLERANCE = 1e-4, 1e-2


@pytest.mark.parametrize("preset", ["ft", "vt"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_warp_steps_as_mujoco_c(preset, seed):
    cfg = load_config(ROOT / "configs" / "evo" / f"{preset}.yml")
    mjcf = to_mjcf(random_genome(cfg.unimal, np.random.default_rng(seed), f"warp-{seed}"), cfg.unimal)
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


# Touch sensors are left out of the observation compared: they read contact forces, which differ
# in float32 by a few 1e-4 relative and by whole forces at a contact's first substep (one engine
# already touches, the other not yet). The accelerometer, which feels contact forces too, agrees
# to 1% (the rtol below); positions and velocities to about 1e-4, except in the steps where a body
# lands on the incline's tilted box (up to 0.02 in velocity: the two engines' box contacts differ).
STATE = ("qpos", "qvel", "qacc_warmstart")  # MuJoCo's physics state (the solver starts from the warmstart)
NO_TOUCH = {"ENV.OBS_TYPES": ["position", "velocity", "imu_vel", "extremities"], "ENV.EPISODE_LENGTH": 8}


def _stepped_obs(step, key: str) -> np.ndarray:
    """The observation each env reached at a step (its final one where an episode ended), ``[N, size]``."""
    obs, _, terminated, truncated, infos = step
    ended = torch.as_tensor(terminated | truncated)
    if not ended.any():
        return torch.as_tensor(obs[key]).numpy()
    return torch.where(ended[:, None], torch.as_tensor(infos["final_obs"][key]), torch.as_tensor(obs[key])).numpy()


@pytest.mark.parametrize("name", ["ft", "incline"])
def test_warp_envs_observe_reward_and_end_as_mujoco_c(name):
    """Each step starts both envs from MuJoCo C's state: what the env reports after one step of each
    engine agrees to float32 (episodes end at the same steps; Warp restarts them with its own noise)."""
    from derl.envs import UnimalVectorEnv
    from tests.envs.test_envs_tasks import CONFIGS, FIXTURE

    c_env = UnimalVectorEnv(FIXTURE, load_config(CONFIGS[name], NO_TOUCH), NUM_ENVS)
    warp_env = UnimalVectorEnv(FIXTURE, load_config(CONFIGS[name], {**NO_TOUCH, "SIM.BACKEND": "warp"}), NUM_ENVS)
    c_obs, _ = c_env.reset(seed=4)
    warp_obs, _ = warp_env.reset(seed=4)  # the first episodes draw their noise on the host, per env, as C's
    np.testing.assert_allclose(warp_obs["proprioceptive"].numpy(), c_obs["proprioceptive"], rtol=1e-2, atol=5e-3)
    actions = np.random.default_rng(0).uniform(-1.2, 1.2, (20, NUM_ENVS, c_env.single_action_space.shape[0]))
    ends = 0
    c_state = {name: c_env.sim.physics.batch.bind(name) for name in STATE}
    warp_state = {name: wp.to_torch(getattr(warp_env.sim.physics.data, name)) for name in STATE}
    for t, action in enumerate(actions.astype(np.float32)):
        for name_ in STATE:
            warp_state[name_][:] = torch.as_tensor(c_state[name_])
        c_step, warp_step = c_env.step(action), warp_env.step(torch.as_tensor(action))
        for k, flag in ((2, "terminated"), (3, "truncated")):
            np.testing.assert_array_equal(warp_step[k].numpy(), c_step[k], err_msg=f"{flag} at step {t}")
        np.testing.assert_allclose(warp_step[1].numpy(), c_step[1], atol=5e-3, err_msg=f"reward at step {t}")
        for key in (*c_env.sim.task.reward_terms, "__reward__ctrl", "energy", "x_pos", "metric"):
            np.testing.assert_allclose(warp_step[4][key].numpy(), c_step[4][key], rtol=1e-4, atol=5e-3,
                                       err_msg=f"{key} at step {t}")
        np.testing.assert_allclose(_stepped_obs(warp_step, "proprioceptive"), _stepped_obs(c_step, "proprioceptive"),
                                   rtol=1e-2, atol=5e-2, err_msg=f"observation at step {t}")
        ends += int(c_step[3].sum())
    assert ends >= NUM_ENVS, "no episode ended: the restart on the device went untested"


def _run(*args: str, timeout: int = 600) -> str:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done.stdout


def test_a_short_ft_training_on_warp(tmp_path):
    from tests.envs.test_envs_tasks import FIXTURE

    _run("tools/train_ppo.py", "--cfg", "configs/evo/ft.yml", "--xml", str(FIXTURE), "--out", str(tmp_path / "ft"),
         "SIM.BACKEND", "warp", "PPO.NUM_ENVS", "16", "PPO.TIMESTEPS", "32", "PPO.MAX_STATE_ACTION_PAIRS", "2048",
         "ENV.EPISODE_LENGTH", "50")
    import json

    summary = json.loads((tmp_path / "ft" / "metrics.json").read_text())
    assert summary["env_steps"] == 2048 and summary["completed"] and np.isfinite(summary["summary"]["return"])


def test_a_tiny_evolution_on_warp_is_read_by_the_report_replay_and_evaluation(tmp_path):
    out = tmp_path / "run"
    _run("evo_single_proc.py", "--cfg", "configs/evo/quick.yml", "OUT_DIR", str(out), "SIM.BACKEND", "warp",
         "EVO.NUM_PROCESSES", "2", "EVO.INIT_POPULATION_SIZE", "4", "EVO.SEARCH_SPACE_SIZE", "6",
         "EVO.AGING_WINDOW_SIZE", "4", "PPO.NUM_ENVS", "4", "PPO.TIMESTEPS", "32", "PPO.MAX_STATE_ACTION_PAIRS", "640",
         "ENV.EPISODE_LENGTH", "50")
    assert len(list((out / "published").glob("*.json"))) == 6
    _run("tools/report.py", str(out), "--no-media")
    assert "000001" in _run("tools/replay.py", str(out), "000001", "--steps", "20", "--episodes", "1")
    _run("tools/evaluate.py", "--tasks", "incline", "--ids", "000001", "--seeds", "1", str(out),
         "PPO.MAX_STATE_ACTION_PAIRS", "256", "PPO.NUM_ENVS", "4", "PPO.TIMESTEPS", "32", "ENV.EPISODE_LENGTH", "50")


def test_bench_ppo_trains_ft_on_warp_next_to_mujoco_c():
    import json

    report = json.loads(_run("tools/bench.py", "ppo", "--envs", "ft", "--sim", "warp", "--device", "cpu",
                             "--num-envs", "4", "--iters", "1", "--repeats", "1"))["cases"]["ft"]
    assert report["warp"]["env_steps"] == 4 * 128 and report["warp"]["device"] == "cpu"
    assert report["mujoco"]["env_steps"] == 32 * 128 and report["wall_speedup_warp_over_mujoco"] > 0


def test_overflow_bits_are_mujoco_warps():
    from derl.envs.warp_overflow import BITS

    assert BITS == {flag.name: int(flag) for flag in mjw.OverflowType if flag.name not in ("NONE", "ALL")}


def test_a_captured_step_after_its_warm_up_is_one_step_and_forward_keeps_the_other_worlds():
    """On warp's CPU device, which captures too: the first captured step (warm-up, restore, capture,
    launch) leaves the state one step on, as an uncaptured step does; a masked forward leaves the other
    worlds' derived fields as they were."""
    cfg = load_config(ROOT / "configs" / "evo" / "ft.yml")
    mjcf = to_mjcf(random_genome(cfg.unimal, np.random.default_rng(0), "warp-0"), cfg.unimal)
    model = UnimalBatch(mjcf, cfg.world, NUM_ENVS).models[0]
    plain, captured = WarpPhysics(model, NUM_ENVS, "cpu"), WarpPhysics(model, NUM_ENVS, "cpu", capture=True)
    for physics in (plain, captured):
        physics.arrays["ctrl"][:] = 0.7
    for step in range(2):
        plain.step(FRAME_SKIP)
        captured.step(FRAME_SKIP)
        for name in ("time", "qpos", "qvel", "xpos", "sensordata"):
            torch.testing.assert_close(captured.arrays[name], plain.arrays[name], rtol=0, atol=0, msg=name)
        assert captured.arrays["time"][0].item() == pytest.approx((step + 1) * FRAME_SKIP * model.opt.timestep)
    before = {name: captured.arrays[name].clone() for name in ("xpos", "sensordata", "qpos")}
    captured.arrays["qpos"][:, 2] += 0.1
    mask = torch.tensor([True, False, True, False])
    captured.forward(mask)
    for name in ("xpos", "sensordata"):
        torch.testing.assert_close(captured.arrays[name][~mask], before[name][~mask], rtol=0, atol=0, msg=name)
    assert not torch.equal(captured.arrays["xpos"][mask], before["xpos"][mask])


def test_planted_overflow_bits_end_no_episode_and_a_non_finite_world_ends_its_own(caplog, monkeypatch):
    from derl.envs import UnimalVectorEnv, warp_physics
    from derl.envs.warp_overflow import BITS, Buffers
    from tests.envs.test_envs_tasks import CONFIGS, FIXTURE

    monkeypatch.setattr(warp_physics, "_grown", Buffers(0, 0))  # the buffers this test grows stay its own

    env = UnimalVectorEnv(FIXTURE, load_config(CONFIGS["ft"], {"SIM.BACKEND": "warp"}), NUM_ENVS)
    env.reset(seed=0)
    actions = torch.zeros(NUM_ENVS, env.single_action_space.shape[0])
    physics = env.sim.physics
    overflow = wp.to_torch(physics.data.overflow)
    for bits in (BITS["NARROWPHASE"] | BITS["BROADPHASE"], BITS["ITERATIONS"] | BITS["LS_ITERATIONS"]):
        env.step(actions)
        overflow[:] = bits  # as if the step had set them in every world
        _, _, terminated, truncated, infos = env.step(actions)
        assert not (terminated | truncated).any() and not infos["unstable"].any()
    env.sim.scene.qvel[2, :] = float("nan")  # world 2 blows up in its next step
    _, _, terminated, _, infos = env.step(actions)
    assert infos["unstable"].tolist() == [False, False, True, False] and terminated[2]
    with caplog.at_level("WARNING", logger="derl.envs.warp_physics"):
        env.close()
        env.sim.physics.close()  # once per morphology
    [line] = [record.getMessage() for record in caplog.records]
    assert "NARROWPHASE 4" in line and "ITERATIONS 4" in line and f"SIM.NCONMAX {2 * physics.buffers.nconmax}" in line


def test_a_process_on_the_warp_backend_prints_no_banner_and_no_module_loads():
    """A worker's log is not flooded: warp's init banner and its ~100 "Module ... load on device" lines
    per morphology are info messages, quietened where the backend is imported (derl.envs.warp_log)."""
    import subprocess
    import sys

    script = ("import numpy as np, torch\n"
              "from derl.checked_config import load_config\n"
              "from derl.paths import EVO_PRESETS\n"
              "from derl.envs import UnimalVectorEnv\n"
              "from derl.morphology import random_genome, to_mjcf\n"
              "cfg = load_config(EVO_PRESETS / 'ft.yml', {'SIM.BACKEND': 'warp'})\n"
              "mjcf = to_mjcf(random_genome(cfg.unimal, np.random.default_rng(0), 'quiet'), cfg.unimal)\n"
              "env = UnimalVectorEnv(None, cfg, 2, mjcf=mjcf)\n"
              "env.reset(seed=0)\n"
              "env.step(torch.zeros((2, env.single_action_space.shape[0])))\n"
              "print('stepped')\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "stepped" in done.stdout, done.stderr[-2000:]
    output = done.stdout + done.stderr
    assert "load on device" not in output and "initialized:" not in output, output[:2000]
