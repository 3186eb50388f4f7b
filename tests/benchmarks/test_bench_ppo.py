"""The PPO benchmark: the return comparison judges both trainers on their last finished episodes; cases
name any unimal task or a Gymnasium env."""

import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np

from benchmarks.cases import env_configs, task_config, unimal_case
from benchmarks.ppo_replay import EpisodeReturns
from benchmarks.ppo_runs import case_config, env_factory


class _Countdown(gym.Env):
    """Reward k at step k of an episode of ``length`` steps (return = length (length + 1) / 2)."""

    observation_space = gym.spaces.Box(-1, 1, (1,))
    action_space = gym.spaces.Box(-1, 1, (1,))

    def __init__(self, length: int):
        self.length, self.steps = length, 0

    def reset(self, *, seed=None, options=None):
        self.steps = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.steps += 1
        return np.zeros(1, np.float32), float(self.steps), False, self.steps == self.length, {}


def test_episode_returns_are_the_raw_sums_of_finished_episodes_only():
    returns: list[float] = []
    env = EpisodeReturns(gym.vector.SyncVectorEnv([lambda: _Countdown(4), lambda: _Countdown(3)],
                                                   autoreset_mode=gym.vector.AutoresetMode.SAME_STEP), returns)
    env.reset()
    for _ in range(9):  # env 0: episodes end at steps 4 and 8; env 1 at 3, 6 and 9
        env.step(env.action_space.sample())
    env.step(env.action_space.sample())  # episodes in progress are not counted
    assert returns == [6.0, 10.0, 6.0, 10.0, 6.0]  # 1 + 2 + 3 (+ 4), in the order they ended


def test_paired_medians_take_ratios_within_each_repeat():
    from benchmarks.ppo import paired_medians

    # Repeat 2 ran on a host twice as slow: within-repeat ratios stay 1.5, 0.6, 0.75 and 0.4.
    derl, sb3 = [9000.0, 4500.0, 9300.0], [6000.0, 3000.0, 6000.0]
    physics, lockstep = [15000.0, 7500.0, 15000.0], [12000.0, 6000.0, 12000.0]
    medians = paired_medians(derl, sb3, physics, lockstep)
    assert medians == {"speedup_derl_over_sb3": 1.5, "derl_vs_physics_alone": 0.6,
                       "derl_vs_lockstep_physics": 0.75, "sb3_vs_physics_alone": 0.4}


def test_unimal_cases_by_name_or_config_file_on_a_seeded_genome(tmp_path):
    from derl.paths import REPO_ROOT as ROOT

    assert task_config("vt") == env_configs()["vt"] and task_config("obstacle") == env_configs()["obstacle"]
    assert task_config(str(ROOT / "configs" / "evo" / "mvt.yml")) == (ROOT / "configs" / "evo" / "mvt.yml").resolve()
    assert task_config("Ant-v5") is None  # a Gymnasium env id
    case = unimal_case(task_config("vt"), None, 5, tmp_path)
    again = unimal_case(task_config("vt"), None, 5, tmp_path / "..")
    assert case["genome"] == "random_genome seed 5" and Path(case["xml"]).read_text() == Path(again["xml"]).read_text()
    cfg = case_config(case, 2)
    assert "hfield" in cfg.ENV.KEYS_TO_KEEP and cfg.PPO.MAX_STATE_ACTION_PAIRS == 2 * 32 * 128
    assert unimal_case(task_config("ft"), Path(case["xml"]), 0, tmp_path)["genome"] is None


def test_bench_ppo_names_a_missing_task_config():
    from derl.paths import REPO_ROOT as ROOT

    done = subprocess.run([sys.executable, str(ROOT / "tools" / "bench.py"), "ppo", "--envs", "ft,nowhere/vt.yml"],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 2
    assert done.stderr.strip().endswith("error: bench ppo: task config nowhere/vt.yml not found")


def test_sb3_steps_the_single_env_on_one_mjdata(tmp_path):
    from derl.envs.physics import MujocoDataPhysics

    case = unimal_case(task_config("vt"), None, 5, tmp_path)
    env = env_factory(case, case_config(case, 1).world, flat=True)(0)
    assert isinstance(env.unwrapped.sim.physics, MujocoDataPhysics)
    assert env.observation_space.shape == (sum(env.unwrapped.sim.obs_sizes.values()),)
