"""The collector over Gymnasium vector envs: same-step autoreset, true final observations, episode
statistics kept over arrays, Dict observations flattened, the autoreset mode checked."""

from functools import partial

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

from derl.ppo.episode_stats import EpisodeStatistics, EpisodeStats, vector_step_values
from derl.ppo.fastpath import acting
from derl.ppo.networks import ActorCritic
from derl.ppo.normalize import ObsNormalizer, ReturnNormalizer
from derl.ppo.obs_layout import ObsLayout
from derl.ppo.rollout import Collector, Rollout, sync_vector_env


class CountingEnv(gym.Env):
    """Observation [index, step]; truncated after ``limit`` steps, terminated when action[0] > fall_above.

    Reports DERL-like info: ``__reward__forward`` = reward, ``x_pos`` = step.
    """

    def __init__(self, index: int = 0, limit: int = 3, dict_obs: bool = False, fall_above: float = 1.0):
        self.index, self.limit, self.dict_obs, self.fall_above = index, limit, dict_obs, fall_above
        box = gym.spaces.Box(-np.inf, np.inf, (2,), np.float64)
        self.observation_space = gym.spaces.Dict({"proprioceptive": box, "goal": box}) if dict_obs else box
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.steps = 0

    def _obs(self):
        obs = np.array([self.index, self.steps], np.float64)
        return {"proprioceptive": obs, "goal": -obs} if self.dict_obs else obs

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.steps = 0
        return self._obs(), {}

    def step(self, action):
        self.steps += 1
        reward = float(self.index + 1)
        info = {"__reward__forward": reward, "x_pos": float(self.steps)}
        return self._obs(), reward, bool(action[0] > self.fall_above), self.steps >= self.limit, info


def vec(make_env):
    """A trainer's env factory of ``make_env(i)`` envs (Gymnasium's SyncVectorEnv)."""
    return partial(sync_vector_env, make_env)


def _collector(make_env, num_envs: int = 2, first_index: int = 0, steps: int = 3) -> tuple[Collector, Rollout]:
    return _collector_of(sync_vector_env(make_env, num_envs, first_index), first_index, steps)


def _collector_of(envs, first_index: int = 0, steps: int = 3) -> tuple[Collector, Rollout]:
    num_envs = envs.num_envs
    layout = ObsLayout.from_space(envs.single_observation_space)
    torch.manual_seed(0)
    model = ActorCritic(layout, 1, [8], [8])
    collector = Collector(envs, first_index, ObsNormalizer(*layout.normalized_columns()),
                          ReturnNormalizer(num_envs, 0.99), *acting(model, None, seed=0))
    return collector, Rollout.allocate(steps, num_envs, layout.size, 1)


class _Constant(gym.Wrapper):
    """Always the same action: the tests choose when an env falls."""

    def __init__(self, env, action: float):
        super().__init__(env)
        self.action = np.array([action], np.float32)

    def step(self, action):
        return self.env.step(self.action)


def test_time_limits_bootstrap_from_the_true_final_observation():
    collector, rollout = _collector(CountingEnv, steps=3)
    collector.reset(seed=0)
    np.testing.assert_array_equal(collector._raw, [[0, 0], [1, 0]])
    finished = collector.collect(rollout)
    assert rollout.truncated[2].all() and not rollout.truncated[:2].any() and not rollout.terminated.any()
    # The value of the true final observation [i, 3], normalised as the step's observations are.
    final = collector.obs_norm.normalize(np.array([[0, 3], [1, 3]], np.float32))
    np.testing.assert_allclose(rollout.final_values[2], collector.policy.value(final), rtol=1e-6)
    np.testing.assert_array_equal(collector._raw, [[0, 0], [1, 0]])  # already reset
    assert finished == [(2, {"return": 3.0, "__reward__forward": 3.0, "length": 3, "x_pos": 3.0}),
                        (2, {"return": 6.0, "__reward__forward": 6.0, "length": 3, "x_pos": 3.0})]
    assert collector.episodes_so_far() == [{"return": 0.0, "length": 0}] * 2


def test_a_fall_ends_one_env_and_the_other_goes_on():
    collector, rollout = _collector(lambda i: _Constant(CountingEnv(i, limit=10), 2.0 if i == 0 else 0.0), steps=2)
    collector.reset(seed=0)
    finished = collector.collect(rollout)
    np.testing.assert_array_equal(rollout.terminated, [[True, False], [True, False]])
    assert not rollout.final_values.any()  # a fall is not bootstrapped
    # env 0 fell at both steps: each episode with the step it ended at
    assert finished == [(t, {"return": 1.0, "__reward__forward": 1.0, "length": 1, "x_pos": 1.0}) for t in (0, 1)]
    assert collector.episodes_so_far() == [{"return": 0.0, "length": 0},
                                           {"return": 4.0, "__reward__forward": 4.0, "length": 2, "x_pos": 2.0}]


def test_env_seeds_follow_the_first_index():
    collector, _ = _collector(CountingEnv, num_envs=2, first_index=4)
    collector.reset(seed=10)
    assert collector.envs.np_random_seed == (14, 15)
    np.testing.assert_array_equal(collector._raw[:, 0], [4, 5])


def test_dict_observations_are_flattened_in_the_space_key_order():
    collector, rollout = _collector(lambda i: CountingEnv(i, dict_obs=True), steps=3)
    assert collector.layout.keys == ("goal", "proprioceptive")  # gymnasium's Dict sorts its keys
    assert collector.layout.normalized_columns() == (2, 4)
    collector.reset(seed=0)
    np.testing.assert_array_equal(collector._raw, [[0, 0, 0, 0], [-1, 0, 1, 0]])
    collector.collect(rollout)
    final = collector.obs_norm.normalize(np.array([[0, -3, 0, 3], [-1, -3, 1, 3]], np.float32))
    np.testing.assert_allclose(rollout.final_values[2], collector.policy.value(final), rtol=1e-6)


def test_layout_flattens_a_batch_and_a_single_observation_alike():
    layout = ObsLayout(("goal", "proprioceptive"), (2, 3), True)
    batch = {"goal": np.arange(4.0).reshape(2, 2), "proprioceptive": np.arange(6.0).reshape(2, 3) + 10}
    flat = layout.flatten(batch)
    assert flat.dtype == np.float32
    np.testing.assert_array_equal(flat, [[0, 1, 10, 11, 12], [2, 3, 13, 14, 15]])
    np.testing.assert_array_equal(layout.flatten({k: v[1] for k, v in batch.items()}), flat[1:])
    box = ObsLayout(("proprioceptive",), (4,), False)
    np.testing.assert_array_equal(box.flatten(np.arange(8.0).reshape(2, 2, 2)), [[0, 1, 2, 3], [4, 5, 6, 7]])


def test_gymnasiums_async_vector_env_gives_the_same_rollout():
    results = []
    for envs in (sync_vector_env(CountingEnv, 2),
                 AsyncVectorEnv([partial(CountingEnv, i) for i in range(2)], autoreset_mode=AutoresetMode.SAME_STEP,
                                context="fork")):
        collector, rollout = _collector_of(envs, steps=4)
        try:
            collector.reset(seed=0)
            results.append((collector.collect(rollout), rollout))
        finally:
            collector.close()
    (sync_episodes, sync_rollout), (async_episodes, async_rollout) = results
    assert sync_episodes == async_episodes and len(sync_episodes) == 2
    assert sync_rollout.truncated.any()
    for name in ("obs", "actions", "rewards", "truncated", "final_values", "bootstrap_value"):
        np.testing.assert_array_equal(getattr(sync_rollout, name), getattr(async_rollout, name), err_msg=name)


def test_the_collector_refuses_other_autoreset_modes():
    envs = SyncVectorEnv([CountingEnv], autoreset_mode=AutoresetMode.NEXT_STEP)
    layout = ObsLayout.from_space(envs.single_observation_space)
    with pytest.raises(ValueError, match="autoreset mode must be SAME_STEP"):
        Collector(envs, 0, ObsNormalizer(0, 2), ReturnNormalizer(1, 0.99), *acting(ActorCritic(layout, 1, [8], [8]),
                                                                                  None, seed=0))


def _infos(**columns) -> dict:
    """Vector infos from ``key=(values, mask)``; ``final_info`` from a nested dict of the same."""
    out = {}
    for key, value in columns.items():
        if key == "final_info":
            out[key], out["_final_info"] = _infos(**value), np.array([True, False, True])
        else:
            out[key], out[f"_{key}"] = np.array(value[0], float), np.array(value[1], bool)
    return out


def test_vector_infos_of_a_step_where_some_envs_ended():
    # Envs 0 and 2 ended: their step's info is in final_info, the top level holds their reset's.
    ended = np.array([True, False, True])
    infos = _infos(__reward__forward=([9.0, 2.0, 9.0], [True, True, False]),
                   x_pos=([0.0, 5.0, 0.0], [False, True, False]), flag=([1, 1, 1], [True, True, True]),
                   final_info={"__reward__forward": ([1.0, 0.0, 3.0], [True, False, True]),
                               "metric": ([7.0, 0.0, 0.0], [True, False, False])})
    values = vector_step_values(infos, ended)
    assert sorted(values) == ["__reward__forward", "metric", "x_pos"]
    np.testing.assert_array_equal(values["__reward__forward"][0], [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(values["__reward__forward"][1], [True, True, True])
    np.testing.assert_array_equal(values["x_pos"][1], [False, True, False])
    np.testing.assert_array_equal(values["metric"][1], [True, False, False])


def test_statistics_over_arrays_match_those_of_single_envs():
    """Three envs of episodes of different lengths, terms that come and go: the vector bookkeeping
    gives each episode the dict ``EpisodeStats`` gives on the same env alone."""
    rng = np.random.default_rng(0)
    steps, n = 40, 3
    rewards = rng.normal(size=(steps, n))
    ended = rng.random((steps, n)) < 0.2
    has_bonus = rng.random((steps, n)) < 0.3
    has_metric = rng.random((steps, n)) < 0.5
    stats, vector_episodes = EpisodeStatistics(n), []
    stats.restart()
    for t in range(steps):
        every = np.ones(n, bool)
        values = {"__reward__forward": (rewards[t] * 2, every), "energy": (np.abs(rewards[t]), every),
                  "__reward__bonus": (np.where(has_bonus[t], 1.5, 0.0), has_bonus[t]),
                  "metric": (np.where(has_metric[t], rewards[t], 0.0), has_metric[t])}
        stats.add(rewards[t], ended[t], values)
        episodes = stats.finished()
        vector_episodes += list(zip(np.flatnonzero(ended[t]).tolist(), episodes, strict=True))

    class Replay(gym.Env):
        observation_space = action_space = gym.spaces.Box(-1, 1, (1,))

        def __init__(self, column):
            self.column, self.t = column, 0

        def reset(self, *, seed=None, options=None):
            return np.zeros(1, np.float32), {}

        def step(self, action):
            t, i = self.t, self.column
            self.t += 1
            info = {"__reward__forward": rewards[t, i] * 2, "energy": abs(rewards[t, i])}
            info.update({"__reward__bonus": 1.5} if has_bonus[t, i] else {})
            info.update({"metric": rewards[t, i]} if has_metric[t, i] else {})
            return np.zeros(1, np.float32), rewards[t, i], bool(ended[t, i]), False, info

    single = []
    for column in range(n):
        env = EpisodeStats(Replay(column))
        env.reset()
        for t in range(steps):
            info = env.step(None)[-1]
            if "episode" in info:
                single.append((t, column, info["episode"]))
                env.reset()
        assert env.episode_so_far() == stats.so_far()[column]
    single.sort(key=lambda entry: entry[:2])
    assert [(column, ep) for _, column, ep in single] == vector_episodes
    assert any("__reward__bonus" not in ep for _, ep in vector_episodes)  # the terms came and went
    assert any("metric" not in ep for _, ep in vector_episodes) and any("metric" in ep for _, ep in vector_episodes)
