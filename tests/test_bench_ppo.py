"""The PPO benchmark's return comparison: both trainers are judged on their last finished episodes."""

import gymnasium as gym
import numpy as np

from derl.bench.ppo import _EpisodeReturns


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
    env = _EpisodeReturns(gym.vector.SyncVectorEnv([lambda: _Countdown(4), lambda: _Countdown(3)],
                                                   autoreset_mode=gym.vector.AutoresetMode.SAME_STEP), returns)
    env.reset()
    for _ in range(9):  # env 0: episodes end at steps 4 and 8; env 1 at 3, 6 and 9
        env.step(env.action_space.sample())
    env.step(env.action_space.sample())  # episodes in progress are not counted
    assert returns == [6.0, 10.0, 6.0, 10.0, 6.0]  # 1 + 2 + 3 (+ 4), in the order they ended


def test_paired_medians_take_ratios_within_each_repeat():
    from derl.bench.ppo import paired_medians

    # Repeat 2 ran on a host twice as slow: within-repeat ratios stay 1.5, 0.6, 0.75 and 0.4.
    derl, sb3 = [9000.0, 4500.0, 9300.0], [6000.0, 3000.0, 6000.0]
    physics, lockstep = [15000.0, 7500.0, 15000.0], [12000.0, 6000.0, 12000.0]
    medians = paired_medians(derl, sb3, physics, lockstep)
    assert medians == {"speedup_derl_over_sb3": 1.5, "derl_vs_physics_alone": 0.6,
                       "derl_vs_lockstep_physics": 0.75, "sb3_vs_physics_alone": 0.4}
