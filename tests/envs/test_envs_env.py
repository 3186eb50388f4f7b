"""The Unimal env: spaces, rewards, terminations, determinism, terrain resets, rendering."""

from pathlib import Path

import gymnasium as gym
import mujoco
import numpy as np
import pytest

from derl.checked_config import load_config, load_preset
from derl.envs import ENV_ID, UnimalEnv, make_env, make_genome_env
from derl.morphology import random_genome
from derl.ppo.episode_stats import EpisodeStats
from tests.conftest import check_env_strictly, sampled_xml

FIXTURE = Path(__file__).parents[1] / "assets" / "envs" / "quadruped.xml"
ENVS = ("ft", "vt", "mvt")


def env_cfg(name: str, **overrides):
    return load_preset(name, overrides)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("unimals")


def rollout(env: gym.Env, actions: np.ndarray, seed: int):
    obs, _ = env.reset(seed=seed)
    frames = [obs]
    rewards = []
    for action in actions:
        obs, reward, terminated, truncated, _ = env.step(action)
        frames.append(obs)
        rewards.append(reward)
        if terminated or truncated:
            break
    return frames, rewards


@pytest.mark.parametrize("name", ENVS)
def test_check_env_on_the_fixture_and_sampled_morphologies(name, folder):
    cfg = env_cfg(name)
    for xml in (FIXTURE, sampled_xml(folder, 0), sampled_xml(folder, 1)):
        env = UnimalEnv(xml, cfg)
        check_env_strictly(env)
        env.close()


@pytest.mark.slow
@pytest.mark.parametrize("name", ENVS)
def test_check_env_on_twenty_sampled_morphologies(name, folder):
    cfg = env_cfg(name)
    for seed in range(20):
        check_env_strictly(UnimalEnv(sampled_xml(folder, seed), cfg))


def test_observation_layout_matches_the_morphology():
    env = UnimalEnv(FIXTURE, env_cfg("mvt", **{"ENV.KEYS_TO_KEEP": ["proprioceptive", "hfield", "obj", "goal"]}))
    joints, limbs = 6, 4
    sizes = {k: space.shape[0] for k, space in env.observation_space.spaces.items()}
    assert sizes == {"proprioceptive": 2 * joints + 3 * limbs + 16, "hfield": 1410, "obj": 12, "goal": 3}
    assert list(env.reset(seed=0)[0]) == ["goal", "hfield", "obj", "proprioceptive"]
    assert env.action_space.shape == (joints,)


def test_hinge_angles_and_velocities_are_read_after_the_step_as_derl():
    # DERL reads qpos and qvel once the step's last substep is done; MuJoCo's sensors are evaluated
    # at that substep's start, 5 ms earlier.
    env = UnimalEnv(FIXTURE, env_cfg("ft"))
    env.reset(seed=0)
    obs, *_ = env.step(np.ones(env.action_space.shape, np.float32))
    joints, proprio = 6, obs["proprioceptive"]
    np.testing.assert_array_equal(proprio[:joints], env.qpos[7:7 + joints])  # the free joint skipped
    np.testing.assert_array_equal(proprio[joints:2 * joints + 6], env.qvel[:6 + joints])


def test_keys_to_keep_filters_and_flat_option_concatenates():
    cfg = env_cfg("mvt", **{"ENV.KEYS_TO_KEEP": ["obj", "proprioceptive"]})
    env = make_env(cfg, FIXTURE, seed=0)
    obs, _ = env.reset()
    assert list(obs) == ["obj", "proprioceptive"]
    flat = make_env(cfg, FIXTURE, seed=0, flat=True)
    flat_obs, _ = flat.reset()
    assert np.array_equal(flat_obs, np.concatenate([obs["obj"], obs["proprioceptive"]]))


def test_a_task_key_alone_is_observed():
    """Without the proprioceptive key the task's own keys are still computed (they were skipped)."""
    env = UnimalEnv(FIXTURE, env_cfg("vt", **{"ENV.KEYS_TO_KEEP": ["hfield"]}))
    obs, _ = env.reset(seed=0)
    assert list(obs) == ["hfield"] and obs["hfield"].shape == env.observation_space["hfield"].shape
    obs, *_ = env.step(np.zeros(env.action_space.shape, np.float32))
    assert list(obs) == ["hfield"]


def test_unimal_contact_excludes_survive():
    unimal = mujoco.MjModel.from_xml_path(str(FIXTURE))
    env = UnimalEnv(FIXTURE, env_cfg("ft"))
    assert unimal.nexclude == 1 and env.model.nexclude == 1
    signature = int(env.model.exclude_signature[0])  # body1 << 16 | body2
    pair = {env.model.body(signature >> 16).name, env.model.body(signature & 0xFFFF).name}
    assert pair == {"limb/0", "limb/1"}


def test_reset_noise_keeps_a_unit_quaternion():
    env = UnimalEnv(FIXTURE, env_cfg("ft", **{"ENV.RESET_NOISE_SCALE": 0.05}))
    for seed in range(3):
        env.reset(seed=seed)
        assert np.linalg.norm(env.qpos[3:7]) == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("name", ENVS)
def test_same_seed_same_actions_same_run(name, folder):
    cfg = env_cfg(name)
    xml = sampled_xml(folder, 2)
    actions = np.random.default_rng(0).uniform(-1, 1, (60, UnimalEnv(xml, cfg).action_space.shape[0]))
    first = rollout(UnimalEnv(xml, cfg), actions, seed=7)
    second = rollout(UnimalEnv(xml, cfg), actions, seed=7)
    assert first[1] == second[1]
    for a, b in zip(first[0], second[0], strict=True):
        assert all(np.array_equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("name", ["vt", "mvt"])
def test_each_reset_draws_new_terrain_in_place(name):
    env = UnimalEnv(FIXTURE, env_cfg(name, **{"TERRAIN.BANK_SIZE": 0}))  # a terrain per episode, as DERL
    env.arena.draw_whole()  # all of it, not only where the agent reaches (VT starts on flat ground)
    model = env.model
    env.reset(seed=1)
    first = model.hfield_data.copy()
    env.reset()
    assert not np.array_equal(first, model.hfield_data) and env.model is model
    env.reset(seed=1)
    assert np.array_equal(first, model.hfield_data)
    other = UnimalEnv(FIXTURE, env_cfg(name, **{"TERRAIN.BANK_SIZE": 0}))
    other.arena.draw_whole()
    other.reset(seed=2)
    assert not np.array_equal(first, other.model.hfield_data)


def test_hfield_observation_reads_the_terrain_under_the_agent():
    env = UnimalEnv(FIXTURE, env_cfg("vt"))
    env.reset(seed=0)
    env.arena.heights.interior[:] = np.arange(env.arena.extent.shape[0])[:, None] * 0.01  # rises towards +y
    obs = env._observe()["hfield"].reshape(47, 30)
    assert obs[0, 6] == pytest.approx(-0.4, abs=1e-5) and obs[-1, 6] == pytest.approx(0.4, abs=1e-5)


def test_pushing_forward_earns_forward_reward_and_the_reward_is_its_terms():
    env = UnimalEnv(FIXTURE, env_cfg("ft"))
    env.reset(seed=0)
    env.qvel[0] = 2.0
    action = np.full(env.action_space.shape, 0.5, dtype=np.float32)
    _, reward, terminated, truncated, info = env.step(action)
    assert info["__reward__forward"] > 0.5 and info["x_pos"] > 0
    assert info["__reward__ctrl"] == pytest.approx(-1e-3 * 0.25 * 6)
    assert reward == pytest.approx(sum(v for k, v in info.items() if k.startswith("__reward__")))
    assert not terminated and not truncated


def test_energy_is_the_actuator_force_in_joint_space():
    # A motor's force is gear x ctrl on its hinge: with ctrl 0.5 on every motor of the fixture
    # (gears 200 and 250, one motor per hinge), sum |qfrc_actuator| = 0.5 x sum of the gears per step.
    env = EpisodeStats(UnimalEnv(FIXTURE, env_cfg("ft", **{"ENV.EPISODE_LENGTH": 3})))
    env.reset(seed=0)
    gears = env.unwrapped.model.actuator_gear[:, 0]
    assert set(gears) == {200.0, 250.0}
    action = np.full(env.action_space.shape, 0.5, dtype=np.float32)
    for _ in range(3):
        _, _, _, truncated, info = env.step(action)
        assert info["energy"] == pytest.approx(0.5 * gears.sum())
        assert not any(k.startswith("__reward__") and "energy" in k for k in info)
    assert truncated and info["episode"]["energy"] == pytest.approx(3 * 0.5 * gears.sum())


def test_dropping_below_the_fall_height_terminates():
    env = UnimalEnv(FIXTURE, env_cfg("vt"))
    env.reset(seed=0)
    env.qpos[2] = env.arena.extent.ground_z + 0.5 * env.fall_height
    _, _, terminated, truncated, info = env.step(np.zeros(env.action_space.shape))
    assert terminated and not truncated and "unstable" not in info


def test_side_edge_terminates_locomotion_only():
    for name, expected in (("ft", True), ("mvt", False)):
        env = UnimalEnv(FIXTURE, env_cfg(name))
        env.reset(seed=0)
        env.qpos[1] = env.arena.extent.half_width - 0.5
        assert env.step(np.zeros(env.action_space.shape))[2] is expected


def test_leaving_the_map_ends_cleanly():
    env = UnimalEnv(FIXTURE, env_cfg("vt"))
    env.reset(seed=0)
    env.qpos[0] = env.arena.extent.x_max + 5
    obs, _, terminated, _, info = env.step(np.zeros(env.action_space.shape))
    assert terminated and info["out_of_map"]
    assert env.observation_space.contains(obs)


def test_unstable_physics_ends_the_episode_with_a_flag():
    env = UnimalEnv(FIXTURE, env_cfg("vt"))
    env.reset(seed=0)
    env.qvel[6:] = np.nan
    obs, reward, terminated, _, info = env.step(np.zeros(env.action_space.shape))
    assert terminated and info["unstable"]
    assert all(np.isfinite(v).all() for v in obs.values())
    assert np.isfinite(reward) and all(np.isfinite(v) for v in info.values())


def test_time_limit_truncates():
    env = UnimalEnv(FIXTURE, env_cfg("ft", **{"ENV.EPISODE_LENGTH": 3}))
    env.reset(seed=0)
    results = [env.step(np.zeros(env.action_space.shape))[2:4] for _ in range(3)]
    assert results == [(False, False), (False, False), (False, True)]


def test_episode_stats_sum_the_terms():
    env = EpisodeStats(UnimalEnv(FIXTURE, env_cfg("ft", **{"ENV.EPISODE_LENGTH": 5})))
    env.reset(seed=0)
    forward = 0.0
    for _ in range(5):
        _, _, _, truncated, info = env.step(np.zeros(env.action_space.shape))
        forward += info["__reward__forward"]
    assert truncated and info["episode"]["__reward__forward"] == pytest.approx(forward)
    assert info["episode"]["x_pos"] == info["x_pos"] and info["episode"]["length"] == 5


class _BoxDistances:
    """MVT's distances computed independently of the task: agent sites to box faces, box to goal."""

    def __init__(self, env: UnimalEnv):
        model = env.model
        names = [model.site(i).name for i in range(model.nsite)]
        self.agent = [i for i, n in enumerate(names) if n.startswith(("torso/", "limb/btm/", "limb/mid/"))]
        self.faces = [i for i, n in enumerate(names) if n.startswith("box/face/")]
        self.env = env

    def agent_box(self) -> float:
        xpos = self.env.data.site_xpos
        return float(np.min(np.linalg.norm(xpos[self.agent][:, None] - xpos[self.faces][None], axis=2)))

    def box_goal(self) -> float:
        goal = self.env.model.site_pos[self.env.model.site("goal").id]
        return float(np.linalg.norm(self.env.data.body("box").xpos[:2] - goal[:2]))


def test_manipulation_reach_then_push_as_derl():
    flat = {"TERRAIN.FLAT_LENGTH_RANGE": [30, 30, 1]}  # no obstacle to land the teleported agent in
    env = UnimalEnv(FIXTURE, env_cfg("mvt", **{"ENV.KEYS_TO_KEEP": ["proprioceptive", "obj", "goal"], **flat}))
    obs, _ = env.reset(seed=0)
    dist = _BoxDistances(env)
    qpos, box_qpos = env.qpos, env.model.joint("box").qposadr[0]
    box = qpos[box_qpos:box_qpos + 3].copy()
    goal = env.model.site_pos[env.model.site("goal").id].copy()
    assert goal[0] - box[0] >= env.world.OBJECT.CLOSE_PLACEMENT_DIST and obs["obj"][0] > 10  # the box lies ahead
    assert obs["goal"] == pytest.approx(obs["obj"][9:12])
    margin = env.world.OBJECT.SUCCESS_MARGIN
    d, g = dist.agent_box(), dist.box_goal()
    zero = np.zeros(env.action_space.shape)

    def step():
        nonlocal d, g
        _, reward, terminated, _, info = env.step(zero)
        assert not terminated
        d_before, g_before, d, g = d, g, dist.agent_box(), dist.box_goal()
        assert info["__reward__manipulation"] == pytest.approx(info["__reward__reach"] + info["__reward__push"])
        assert reward == pytest.approx(info["__reward__reach"] + info["__reward__push"] + info["__reward__ctrl"])
        return info, 100 * (d_before - d), 100 * (g_before - g)

    qpos[0:2] = box[0] - 3, box[1]  # approach: reach is 100 x the distance gained, no push yet
    info, gained, _ = step()
    assert d > margin and gained > 100 and info["__reward__push"] == 0
    assert info["__reward__reach"] == pytest.approx(gained)
    qpos[0:2] = box[0] - 0.55, box[1]  # reach: + 10 once, and push counts from this step
    info, gained, pushed = step()
    assert d <= margin and info["__reward__reach"] == pytest.approx(gained + 10)
    assert info["__reward__push"] == pytest.approx(pushed, abs=1e-9)
    info, gained, _ = step()  # still within the margin: no second bonus
    assert d <= margin and info["__reward__reach"] == pytest.approx(gained, abs=1e-9)
    qpos[0:2] = box[0] - 3, box[1]  # walk away: costs reward
    info, gained, pushed = step()
    assert gained < -100 and info["__reward__reach"] == pytest.approx(gained)
    assert info["__reward__push"] == pytest.approx(pushed, abs=1e-9)
    qpos[box_qpos:box_qpos + 2] = goal[0] - 1, goal[1]  # push the box towards the goal
    info, _, pushed = step()
    assert pushed > 1000 and info["__reward__push"] == pytest.approx(pushed)
    qpos[box_qpos:box_qpos + 2] = goal[0] - 0.3, goal[1]  # into the goal: + 10 on each step there
    for _ in range(2):
        info, _, pushed = step()
        assert g <= margin and info["__reward__push"] == pytest.approx(pushed + 10)
    assert "__reward__forward" not in info


def test_mvt_puts_the_box_and_its_goal_whole_metres_ahead_as_derl():
    env = UnimalEnv(FIXTURE, env_cfg("mvt"))
    for seed in range(8):
        env.reset(seed=seed)
        box_x = float(env.qpos[env.task.object.qpos])
        goal_x = float(env.task.goal.position[0, 0])
        assert box_x.is_integer() and 15 <= box_x <= 24  # FORWARD_PLACEMENT_DIST [15, 25)
        far = env.task._x_span[1]
        assert goal_x == far or ((goal_x - box_x).is_integer() and 15 <= goal_x - box_x <= 24)


def test_env_from_a_genome_equals_env_from_its_file(folder):
    cfg = env_cfg("vt")
    genome = random_genome(load_config().unimal, np.random.default_rng(2), "test-2")
    from_genome = make_genome_env(cfg, genome, seed=5)
    from_file = make_env(cfg, sampled_xml(folder, 2), seed=5)
    first, second = from_genome.reset()[0], from_file.reset()[0]
    assert all(np.array_equal(first[k], second[k]) for k in first)


def test_gymnasium_registration():
    env = gym.make(ENV_ID, xml_path=str(FIXTURE), world=env_cfg("ft"))
    obs, _ = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    env.close()


def test_bad_inputs_give_one_line_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="unimal MJCF not found"):
        UnimalEnv(tmp_path / "missing.xml", env_cfg("ft"))
    with pytest.raises(ValueError, match="unknown ENV.TASK"):
        UnimalEnv(FIXTURE, env_cfg("ft", **{"ENV.TASK": "dance"}))
    with pytest.raises(ValueError, match="unknown ENV.MODULES"):
        UnimalEnv(FIXTURE, env_cfg("ft", **{"ENV.MODULES": ["Agent", "Lava"]}))
    with pytest.raises(ValueError, match="unknown ENV.KEYS_TO_KEEP"):
        UnimalEnv(FIXTURE, env_cfg("ft", **{"ENV.KEYS_TO_KEEP": ["pixels"]}))


def test_render_returns_frames_from_a_tracking_camera():
    try:
        env = UnimalEnv(FIXTURE, env_cfg("vt"), render_mode="rgb_array", width=96, height=64)
        env.reset(seed=0)
        frame = env.render()
    except Exception as err:  # no usable GL on this machine
        pytest.skip(f"no headless GL: {err}")
    assert frame.shape == (64, 96, 3) and frame.dtype == np.uint8 and frame.std() > 0
    for _ in range(5):
        env.step(env.action_space.sample())
    env.reset()
    assert env.render().shape == (64, 96, 3)
    env.close()


def test_hfield_surface_is_the_height_map_and_flat_ground_is_the_floor_box():
    env = UnimalEnv(FIXTURE, env_cfg("vt", **{"TERRAIN.BANK_SIZE": 0}))  # one height field: a terrain per episode
    env.arena.draw_whole()  # all of it: the start is flat
    env.reset(seed=3)
    model, hfield = env.model, env.model.hfield("terrain")
    rows, cols = env.arena.extent.shape
    surface = model.geom("terrain").pos[2] + hfield.size[2] * model.hfield_data.reshape(rows, cols)
    interior = env.arena.heights.interior[0]
    raised = interior > 0
    assert raised.any()
    assert np.allclose(surface[raised], env.arena.extent.ground_z + interior[raised], atol=1e-5)
    assert np.all(surface[~raised] < env.arena.extent.ground_z)  # sunk under the floor box
    for _ in range(10):
        env.step(np.zeros(env.action_space.shape))
    touched = {model.geom(g).name for g in env.data.contact.geom[: env.data.ncon].ravel()}
    assert "floor" in touched and "terrain" not in touched


def test_world_needs_exactly_one_ground_module():
    with pytest.raises(ValueError, match="exactly one of Floor and Terrain"):
        UnimalEnv(FIXTURE, env_cfg("ft", **{"ENV.MODULES": ["Agent", "Floor", "Terrain"]}))
    env = UnimalEnv(FIXTURE, env_cfg("ft", **{"ENV.MODULES": ["Floor", "Agent"]}))
    obs, _ = env.reset(seed=0)
    assert env.observation_space.contains(obs) and env.arena.extent.x_min == -75


def test_agent_indices_become_a_slice_only_when_consecutive():
    from derl.envs.observations import as_slice

    assert as_slice(np.array([3, 4, 5])) == slice(3, 6)
    scattered = as_slice(np.array([0, 1, 5]))
    np.testing.assert_array_equal(scattered, [0, 1, 5])
    np.testing.assert_array_equal(as_slice(np.array([], int)), [])


@pytest.mark.parametrize("name", ["ft", "vt"])
def test_single_env_steps_as_a_batch_of_mujoco_batch_physics(name):
    """The single env (one ``MjData``, ``derl.envs.physics.MujocoDataPhysics``) gives env 0's transitions
    of a ``UnimalBatch`` of two (``mujoco.batch.Batch``) bitwise: same seed, same actions, through
    episode ends and, on VT, terrain re-drawn at each reset."""
    from derl.envs.batch import UnimalBatch

    cfg = env_cfg(name, **{"ENV.EPISODE_LENGTH": 25})
    single = UnimalEnv(FIXTURE, cfg)
    batch = UnimalBatch(FIXTURE.read_text(), cfg, 2)
    assert type(single.sim.physics).__name__ == "MujocoDataPhysics" and hasattr(batch.physics, "batch")
    batch.rngs = [gym.utils.seeding.np_random(3)[0], gym.utils.seeding.np_random(4)[0]]
    obs, _ = single.reset(seed=3)
    batch.reset(np.arange(2))
    actions = np.random.default_rng(0).uniform(-1, 1, (80, 2, single.model.nu)).astype(np.float32)
    ends = 0
    for t, pair in enumerate(actions):
        for key, value in batch.observe().items():
            np.testing.assert_array_equal(value[0], obs[key], err_msg=f"step {t} {key}")
        np.testing.assert_array_equal(batch.scene.qpos[0], single.qpos, err_msg=f"step {t}")
        obs, reward, terminated, truncated, info = single.step(pair[0])
        _, rewards, terminateds, truncateds, infos = batch.step(pair)
        assert (reward, terminated, truncated) == (rewards[0], terminateds[0], truncateds[0]), f"step {t}"
        assert info == {k: float(v[0]) for k, v in infos.items() if k not in ("out_of_map", "unstable")}
        if terminated or truncated:
            ends += 1
            obs, _ = single.reset()
            batch.reset(np.zeros(1, np.intp))
    assert ends >= 3
