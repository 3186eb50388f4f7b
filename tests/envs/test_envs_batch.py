"""The batched env against single envs: one rule check over every registered task's configs.

A ``UnimalVectorEnv`` of N simulations and N ``UnimalEnv``s seeded ``seed + i``, driven by the same
actions, give the same observations, rewards, reward terms, flags, metrics and energy over several
episodes, with resets at the same step (time limits) and at different steps (one env dropped), and
terrain, props and goals drawn anew at each reset.
"""

import numpy as np
import pytest

from derl.checked_config import load_config
from derl.envs import UnimalEnv, UnimalVectorEnv
from tests.envs.test_envs_tasks import CONFIGS, FIXTURE

NUM_ENVS, SEED, STEPS, LENGTH = 3, 4, 36, 12
DROP = (7, 1)  # (step, env): the env's head is dropped below the fall height before that step


def _step_info(infos: dict, env: int, ended: bool) -> dict[str, float]:
    source = infos["final_info"] if ended else infos
    skipped = ("out_of_map", "unstable", "final_obs", "final_info")
    return {k: float(v[env]) for k, v in source.items() if f"_{k}" in source and k not in skipped}


def _flags(infos: dict, env: int, ended: bool) -> dict[str, bool]:
    source = infos["final_info"] if ended else infos
    return {flag: True for flag in ("out_of_map", "unstable") if source[flag][env]}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_batched_envs_step_as_single_envs(name):
    cfg = load_config(CONFIGS[name], {"ENV.EPISODE_LENGTH": LENGTH})
    batched = UnimalVectorEnv(FIXTURE, cfg, NUM_ENVS)
    singles = [UnimalEnv(FIXTURE, cfg) for _ in range(NUM_ENVS)]
    actions = np.random.default_rng(0).uniform(-1.2, 1.2, (STEPS, *batched.action_space.shape)).astype(np.float32)
    obs, _ = batched.reset(seed=SEED)
    for i, env in enumerate(singles):
        single_obs, _ = env.reset(seed=SEED + i)
        for key, value in single_obs.items():
            np.testing.assert_array_equal(obs[key][i], value, err_msg=f"reset {key}")
    ends = 0
    for t, action in enumerate(actions):
        if t == DROP[0]:
            batched.sim.scene.qpos[DROP[1], 2] -= 5.0
            singles[DROP[1]].qpos[2] -= 5.0
        obs, rewards, terminated, truncated, infos = batched.step(action)
        for i, env in enumerate(singles):
            single_obs, reward, term, trunc, info = env.step(action[i])
            ended = term or trunc
            assert (terminated[i], truncated[i]) == (term, trunc), f"step {t} env {i}"
            assert rewards[i] == reward, f"step {t} env {i}"
            assert _step_info(infos, i, ended) == {k: v for k, v in info.items() if k not in ("out_of_map", "unstable")}
            assert _flags(infos, i, ended) == {k: v for k, v in info.items() if k in ("out_of_map", "unstable")}
            stepped = {k: v[i] for k, v in (infos["final_obs"] if ended else obs).items()}
            for key, value in single_obs.items():
                np.testing.assert_array_equal(stepped[key], value, err_msg=f"step {t} env {i} {key}")
            if ended:
                ends += 1
                single_obs, _ = env.reset()
                for key, value in single_obs.items():
                    np.testing.assert_array_equal(obs[key][i], value, err_msg=f"reset after step {t} env {i} {key}")
    assert ends >= 2 * NUM_ENVS + 1  # time limits in every env, and the dropped env's fall


def test_threads_give_the_same_steps():
    cfg = load_config(CONFIGS["vt"], {"ENV.EPISODE_LENGTH": LENGTH})
    runs = []
    for threads in (1, 2):
        env = UnimalVectorEnv(FIXTURE, load_config(CONFIGS["vt"], {"ENV.EPISODE_LENGTH": LENGTH,
                                                                      "VECENV.THREADS": threads}), 4)
        assert env.sim.physics.batch.nthread == threads
        env.reset(seed=1)
        actions = np.random.default_rng(2).uniform(-1, 1, (20, *env.action_space.shape))
        runs.append([env.step(a)[0]["proprioceptive"].copy() for a in actions])
    np.testing.assert_array_equal(runs[0], runs[1])
    assert cfg.VECENV.THREADS == 1


def test_vector_env_reports_its_autoreset_mode_and_spaces():
    cfg = load_config(CONFIGS["mvt"], {"ENV.KEYS_TO_KEEP": ["proprioceptive", "hfield", "obj", "goal"]})
    env = UnimalVectorEnv(FIXTURE, cfg, 2)
    obs, _ = env.reset(seed=0)
    assert env.metadata["autoreset_mode"].name == "SAME_STEP"
    assert obs in env.observation_space and env.action_space.shape == (2, env.single_action_space.shape[0])


def test_mujoco_warnings_are_counted_with_the_first_of_each_kind_printed(capfd, tmp_path, monkeypatch):
    """Unstable simulations on two threads: one line for the first warning, one with the count at the
    end, nothing from MuJoCo's own printer (it printed one line per unstable episode: 145 in a search)."""
    import mujoco
    import mujoco.batch

    from derl.envs.sim_warnings import counted_warnings

    monkeypatch.chdir(tmp_path)  # where MuJoCo's printer appends MUJOCO_LOG.TXT
    model = mujoco.MjModel.from_xml_string(
        '<mujoco><worldbody><body><freejoint/><geom size=".1"/></body></worldbody></mujoco>')
    batch = mujoco.batch.Batch(model, 4, nthread=2)
    with counted_warnings("testing") as counts:
        for _ in range(3):
            batch.reset(np.arange(4), stage=mujoco.mjtStage.mjSTAGE_NONE)
            batch.bind("qvel")[:] = 1e200  # "Nan, Inf or huge value in QVEL": once per env and reset
            batch.step(nstep=2)
    assert sum(counts.values()) == 12 and mujoco.get_mju_user_warning() is None  # MuJoCo's printer is back
    out, err = capfd.readouterr()
    assert "QVEL" not in out and "WARNING" not in err and not (tmp_path / "MUJOCO_LOG.TXT").exists()
    lines = err.splitlines()
    assert len(lines) == 2 and lines[0].startswith("warning: MuJoCo: Nan, Inf or huge value in QVEL"), lines
    assert lines[1] == "warning: MuJoCo warnings while testing: 12 x 'Nan, Inf or huge value in QVEL at DOF N. " \
                       "The simulation is unstable. Time = N.'", lines


@pytest.mark.parametrize(("name", "keys"), [("vt", ["proprioceptive", "hfield"]),
                                            ("mvt", ["proprioceptive", "hfield", "obj", "goal"]),
                                            ("point_nav", ["proprioceptive", "hfield", "goal"])])
def test_an_autoreset_observes_again_only_the_envs_it_restarted(name, keys, monkeypatch):
    """One env of three falls: the height map is gathered for the step's three envs and then for the
    restarted one only, and the returned observations are every env's as ``observe`` gives them (the
    step's stay in ``final_obs``)."""
    env = UnimalVectorEnv(FIXTURE, load_config(CONFIGS[name], {"ENV.KEYS_TO_KEEP": keys}), 3)
    env.reset(seed=0)
    patch = type(env.sim.task._patch)
    gather = patch.__call__
    gathered = []

    def counted(self, heights, rows, *args):
        gathered.append(len(rows))
        return gather(self, heights, rows, *args)

    monkeypatch.setattr(patch, "__call__", counted)
    env.sim.scene.qpos[1, 2] -= 5.0
    obs, _, terminated, truncated, infos = env.step(np.zeros(env.action_space.shape, np.float32))
    assert (terminated | truncated).tolist() == [False, True, False]
    assert gathered == [3, 1]
    for key, values in env.sim.observe().items():
        np.testing.assert_array_equal(obs[key], values, err_msg=key)
        np.testing.assert_array_equal(infos["final_obs"][key][[0, 2]], values[[0, 2]], err_msg=key)
    assert not np.array_equal(infos["final_obs"]["proprioceptive"][1], obs["proprioceptive"][1])


def test_a_restart_computes_the_start_values_of_its_rows_as_the_whole_batch_does():
    """The head's clearance and MVT's start distance of a restarted env are computed for its row alone: the
    same values as over the whole batch, the other rows left as they were."""
    env = UnimalVectorEnv(FIXTURE, load_config(CONFIGS["mvt"]), 3)
    env.reset(seed=0)
    sim, task = env.sim, env.sim.task
    env.step(np.zeros(env.action_space.shape, np.float32))
    heights, distances = sim.scene.torso_height.copy(), task._agent_dist.copy()
    rows, clearance, distance = [], sim.arena.clearance, task._object_distance
    sim.arena.clearance = lambda x, *args: (rows.append(len(x)), clearance(x, *args))[1]
    task._object_distance = lambda scene, *envs: (rows.append(len(distance(scene, *envs))), distance(scene, *envs))[1]
    sim.restart(np.array([False, True, False]))
    del sim.arena.clearance, task._object_distance
    assert rows == [1, 1]
    qpos = sim.scene.qpos
    whole, _ = sim.arena.clearance(qpos[:, 0], qpos[:, 1], qpos[:, 2])
    assert sim.scene.torso_height[1] == whole[1] and task._agent_dist[1] == task._object_distance(sim.scene)[1]
    assert sim.scene.torso_height[1] != heights[1] and task._agent_dist[1] != distances[1]
    np.testing.assert_array_equal(sim.scene.torso_height[[0, 2]], heights[[0, 2]])
    np.testing.assert_array_equal(task._agent_dist[[0, 2]], distances[[0, 2]])
