import gymnasium as gym
import numpy as np

from derl.ppo.episode_stats import EpisodeStats


class _Counter(gym.Env):
    """Reward 1 per step, forward term 2, ctrl term -0.5, energy 4; ends after 3 steps."""

    observation_space = gym.spaces.Box(-1, 1, (1,))
    action_space = gym.spaces.Box(-1, 1, (1,))

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        info = {"__reward__forward": 2.0, "__reward__ctrl": -0.5, "energy": 4.0, "x_pos": 0.1 * self.t}
        return np.zeros(1, np.float32), 1.0, False, self.t == 3, info


def test_sums_each_term_and_keeps_final_values():
    env = EpisodeStats(_Counter())
    env.reset()
    infos = [env.step(env.action_space.sample())[-1] for _ in range(3)]
    assert "episode" not in infos[0] and "episode" not in infos[1]
    ep = infos[2]["episode"]
    assert ep == {"return": 3.0, "__reward__forward": 6.0, "__reward__ctrl": -1.5, "energy": 12.0,
                  "length": 3, "x_pos": ep["x_pos"]}
    assert abs(ep["x_pos"] - 0.3) < 1e-12
    env.reset()
    env.step(env.action_space.sample())
    assert env.step(env.action_space.sample())[-1].get("episode") is None


class _Changing(_Counter):
    """Step 2 adds a reward term and a flag that no other step reports, and numpy values."""

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        if self.t == 2:
            info = {"out_of_map": True, **info, "__reward__bonus": np.float32(5.0), "metric": 7.0}
        return obs, reward, terminated, truncated, info


def test_info_keys_that_change_between_steps():
    env = EpisodeStats(_Changing())
    env.reset()
    ep = [env.step(env.action_space.sample())[-1] for _ in range(3)][-1]["episode"]
    assert ep["__reward__bonus"] == 5.0 and type(ep["__reward__bonus"]) is float
    assert ep["__reward__forward"] == 6.0 and ep["energy"] == 12.0 and ep["length"] == 3
    assert "out_of_map" not in ep and "metric" not in ep  # a final value is the last step's only
