"""Tasks that draw props, goals and obstacle boxes per episode on ``SIM.BACKEND warp`` (warp's CPU device)
against MuJoCo C: their episodes are drawn on the host from each env's generator on both backends, so
the first episodes of a seed and every restart at the same step draw the same props and goals (to
float32); obstacle boxes are held per world on the device and collide there. Slow: warp compiles its
kernels the first time (cached in ~/.cache/warp).
"""

import json
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("mujoco_warp", reason="the warp backend is an optional install (requirements-gpu.txt)")
torch = pytest.importorskip("torch")
wp = pytest.importorskip("warp")

from derl.checked_config import load_config  # noqa: E402
from derl.envs import UnimalVectorEnv  # noqa: E402
from tests.envs.test_envs_tasks import CONFIGS, FIXTURE, ROOT  # noqa: E402

pytestmark = pytest.mark.slow

NUM_ENVS, LENGTH, STEPS = 4, 6, 14
# The tasks whose episodes draw on the host and that run on warp. MVT's box and goal on its Floor
# variant: MVT's own terrain is redrawn per episode (a height field: the terrain bank's part).
TASKS = {
    "mvt_floor": ("mvt", {"ENV.MODULES": ["Agent", "Floor", "Objects"]}),
    "manipulation_ball": ("manipulation_ball", {}),
    "push_box_incline": ("push_box_incline", {}),
    "point_nav": ("point_nav", {}),
    "patrol": ("patrol", {}),
    "obstacle": ("obstacle", {}),
    "exploration": ("exploration", {}),
}
# float32 positions of up to 100 m: 1e-5 m; a restarted env's state is its draws, not physics.
DRAW_TOLERANCE = 2e-5


def task_envs(name: str, **overrides) -> tuple[UnimalVectorEnv, UnimalVectorEnv]:
    """The task ``name`` of ``TASKS`` on MuJoCo C and on MuJoCo Warp (CPU device), ``NUM_ENVS`` each."""
    config, extra = TASKS[name]
    settings = {**extra, "ENV.EPISODE_LENGTH": LENGTH, **overrides}
    c_env = UnimalVectorEnv(FIXTURE, load_config(CONFIGS[config], settings), NUM_ENVS)
    warp_env = UnimalVectorEnv(FIXTURE, load_config(CONFIGS[config], {**settings, "SIM.BACKEND": "warp"}), NUM_ENVS)
    return c_env, warp_env


def _draws(env: UnimalVectorEnv) -> dict[str, np.ndarray]:
    """What an episode's draws set: the state (props' free joints, the agent's noise), the goal, the boxes."""
    sim, task = env.sim, env.sim.task
    host = (lambda a: a.numpy()) if isinstance(sim.scene.qpos, torch.Tensor) else np.asarray
    draws = {"qpos": host(sim.scene.qpos).astype(np.float64), "qvel": host(sim.scene.qvel).astype(np.float64)}
    if hasattr(task, "goal"):
        draws["goal"] = host(task.goal.position).astype(np.float64)
    return draws


@pytest.mark.parametrize("name", sorted(TASKS))
def test_episodes_draw_as_on_mujoco_c_and_restart_on_warp(name):
    c_env, warp_env = task_envs(name)
    c_env.reset(seed=7)
    warp_env.reset(seed=7)
    expected, got = _draws(c_env), _draws(warp_env)
    for key in expected:
        np.testing.assert_allclose(got[key], expected[key], rtol=0, atol=DRAW_TOLERANCE, err_msg=f"first {key}")
    actions = np.zeros((NUM_ENVS, c_env.single_action_space.shape[0]), dtype=np.float32)
    restarted = 0
    for t in range(STEPS):
        _, _, c_term, c_trunc, _ = c_env.step(actions)
        _, reward, w_term, w_trunc, _ = warp_env.step(torch.as_tensor(actions))
        assert torch.isfinite(reward).all()
        ended = c_term | c_trunc
        np.testing.assert_array_equal((w_term | w_trunc).numpy(), ended, err_msg=f"episode ends at step {t}")
        expected, got = _draws(c_env), _draws(warp_env)
        if "goal" in expected and name != "patrol":  # patrol's goal flips when reached: physics decides
            np.testing.assert_allclose(got["goal"], expected["goal"], atol=DRAW_TOLERANCE, err_msg=f"goal at {t}")
        for key in ("qpos", "qvel"):  # the restarted envs start from their draws
            np.testing.assert_allclose(got[key][ended], expected[key][ended], rtol=0, atol=DRAW_TOLERANCE,
                                       err_msg=f"{key} of the restarted envs at step {t}")
        restarted += int(ended.sum())
    assert restarted >= 2 * NUM_ENVS


def test_obstacle_boxes_are_held_per_world_and_collide_in_their_own_world_only():
    c_env, warp_env = task_envs("obstacle")
    c_env.reset(seed=3)
    warp_env.reset(seed=3)
    sim, physics = warp_env.sim, warp_env.sim.physics
    geoms = sim.task._boxes.geoms
    for field in ("geom_pos", "geom_size", "geom_rbound", "geom_aabb"):
        rows = wp.to_torch(getattr(physics.model, field)).numpy()
        assert rows.shape[0] == NUM_ENVS, f"{field} is not held per world"
        expected = np.stack([getattr(model, field)[geoms] for model in c_env.sim.models])
        np.testing.assert_allclose(rows[:, geoms].reshape(expected.shape), expected, rtol=1e-6, atol=1e-5,
                                   err_msg=field)
    assert len({tuple(model.geom_pos[geoms[0]]) for model in c_env.sim.models}) == NUM_ENVS  # drawn per env
    # World-welded geoms are placed once by MuJoCo Warp: the boxes' geom_xpos followed their rows.
    geom_xpos = wp.to_torch(physics.data.geom_xpos).numpy()[:, geoms]
    np.testing.assert_allclose(geom_xpos, np.stack([m.geom_pos[geoms] for m in c_env.sim.models]), atol=1e-5)
    # Box 0 of world 1 moved onto the agent: world 1, and only it, touches that box.
    head = sim.scene.qpos[1, :2].tolist()
    sim.task._boxes.set(1, 0, (*head, sim.arena.extent.ground_z), (0.3, 0.3, 2.0))
    physics.set_models(sim.models, np.array([1]))
    warp_env.step(torch.zeros(NUM_ENVS, warp_env.single_action_space.shape[0]))
    contact = physics.data.contact
    count = int(physics.data.nacon.numpy()[0])
    pairs, worlds = contact.geom.numpy()[:count], contact.worldid.numpy()[:count]
    touching = worlds[(pairs == geoms[0]).any(axis=1)]
    assert len(touching) and set(touching.tolist()) == {1}


@pytest.mark.parametrize("name", sorted(TASKS))
def test_train_ppo_trains_the_task_on_warp(name, tmp_path):
    """The issue's command: ``tools/train_ppo.py ... SIM.BACKEND warp PPO.NUM_ENVS 8
    PPO.MAX_STATE_ACTION_PAIRS 2048``."""
    config, extra = TASKS[name]
    overrides = [item for key, value in extra.items() for item in (key, json.dumps(value))]
    done = subprocess.run([sys.executable, "tools/train_ppo.py", "--cfg", str(CONFIGS[config]), "--xml", str(FIXTURE),
                           "--out", str(tmp_path / name), *overrides, "SIM.BACKEND", "warp", "PPO.NUM_ENVS", "8",
                           "PPO.MAX_STATE_ACTION_PAIRS", "2048", "ENV.EPISODE_LENGTH", "64"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    summary = json.loads((tmp_path / name / "metrics.json").read_text())
    assert summary["env_steps"] == 2048 and summary["completed"] and np.isfinite(summary["summary"]["return"])


def fidelity(name: str, steps: int = 25, num_envs: int = 8) -> tuple[int, float, float, float]:
    """The docs' fidelity row of a task (docs/guides/gpus.md#fidelity-per-task): both backends from
    ``reset(seed=11)``, the same uniform(-1, 1) actions, no time limit; over the envs that did not end:
    (their count, max |qpos diff| after ``steps``, max |return diff|, mean |return|)."""
    config, extra = {**TASKS, "ft": ("ft", {}), "incline": ("incline", {})}[name]
    settings = {**extra, "ENV.EPISODE_LENGTH": 1000}
    c_env = UnimalVectorEnv(FIXTURE, load_config(CONFIGS[config], settings), num_envs)
    warp_env = UnimalVectorEnv(FIXTURE, load_config(CONFIGS[config], {**settings, "SIM.BACKEND": "warp"}), num_envs)
    c_env.reset(seed=11)
    warp_env.reset(seed=11)
    shape = (steps, num_envs, c_env.single_action_space.shape[0])
    actions = np.random.default_rng(0).uniform(-1, 1, shape).astype(np.float32)
    c_return, warp_return, alive = np.zeros(num_envs), np.zeros(num_envs), np.ones(num_envs, dtype=bool)
    for action in actions:
        _, c_reward, c_term, c_trunc, _ = c_env.step(action)
        _, warp_reward, w_term, w_trunc, _ = warp_env.step(torch.as_tensor(action))
        c_ended, warp_ended = c_term | c_trunc, (w_term | w_trunc).numpy()
        assert (c_ended[alive] == warp_ended[alive]).all(), "an episode ended on one backend only"
        c_return += np.where(alive, c_reward, 0.0)
        warp_return += np.where(alive, warp_reward.numpy(), 0.0)
        alive &= ~c_ended
    qpos_diff = np.abs(warp_env.sim.scene.qpos.numpy() - c_env.sim.scene.qpos)[alive]
    return (int(alive.sum()), float(qpos_diff.max()), float(np.abs(warp_return - c_return)[alive].max()),
            float(np.abs(c_return[alive]).mean()))


@pytest.mark.parametrize("name", ["obstacle", "point_nav"])
def test_fidelity_rows_stay_near_the_documented_ones(name):
    """docs/guides/gpus.md's table: obstacle 5e-6 / 0.000, point_nav 1.3e-2 / 0.39 (a contact diverged)."""
    envs, qpos_diff, return_diff, _ = fidelity(name)
    assert envs >= 6 and qpos_diff < 0.05 and return_diff < 2.0


def test_captured_graphs_read_the_model_rows_written_after_their_capture():
    """On warp's CPU device, which captures as CUDA does: rows of a per-world field are written in place,
    so a step captured before the write sees the moved box; a field expanded later drops the graphs."""
    from derl.envs.batch import FRAME_SKIP
    from derl.envs.props import StaticBoxes
    from derl.envs.warp_physics import WarpPhysics

    _, warp_env = task_envs("obstacle")
    sim = warp_env.sim
    physics = WarpPhysics(sim.model, NUM_ENVS, "cpu", capture=True, per_world=StaticBoxes.MODEL_ROWS)
    physics.step(FRAME_SKIP)  # captured
    graph = physics.graphs.graphs[f"step{FRAME_SKIP}"]
    head = physics.arrays["qpos"][2, :2].tolist()
    sim.task._boxes.set(2, 0, (*head, sim.arena.extent.ground_z), (0.3, 0.3, 2.0))
    physics.set_models(sim.models, np.array([2]))
    physics.step(FRAME_SKIP)
    assert physics.graphs.graphs[f"step{FRAME_SKIP}"] is graph  # replayed, not captured again
    count = int(physics.data.nacon.numpy()[0])
    contact = physics.data.contact
    geoms, worlds = contact.geom.numpy()[:count], contact.worldid.numpy()[:count]
    assert set(worlds[(geoms == sim.task._boxes.geoms[0]).any(axis=1)].tolist()) == {2}
    physics.set_model_rows("geom_friction", np.array([0]), np.array([[[2.0, 0.005, 1e-4]] * sim.model.ngeom]))
    assert wp.to_torch(physics.model.geom_friction).shape[0] == NUM_ENVS and not physics.graphs.graphs
    physics.step(FRAME_SKIP)  # captured again, reading the expanded field
    assert torch.isfinite(physics.arrays["qpos"]).all()
    with pytest.raises(ValueError, match="'hfield_data' once for all worlds"):
        physics.set_model_rows("hfield_data", np.array([0]), np.zeros((1, sim.model.nhfielddata)))
