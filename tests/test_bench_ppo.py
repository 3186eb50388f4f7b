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
    env = _EpisodeReturns(_Countdown(4), returns)
    for _ in range(2):
        env.reset()
        done = False
        while not done:
            *_, terminated, truncated, _ = env.step(env.action_space.sample())
            done = terminated or truncated
    env.reset()
    env.step(env.action_space.sample())  # an episode in progress is not counted
    assert returns == [10.0, 10.0]  # 1 + 2 + 3 + 4
