"""Env pools: same-step autoreset, true final observations, in-process and subprocess agree."""

import gymnasium as gym
import numpy as np
import pytest

from derl.ppo.pool import EnvPool, SubprocEnvPool, make_pool


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


def test_same_step_autoreset_keeps_true_final_observation():
    pool = EnvPool(lambda i: CountingEnv(i), range(2))
    obs = pool.reset(seed=0)
    np.testing.assert_array_equal(obs, [[0, 0], [1, 0]])
    actions = np.zeros((2, 1), np.float32)
    pool.step(actions)
    pool.step(actions)
    batch = pool.step(actions)  # step 3: both envs hit the time limit
    assert batch.truncated.all() and not batch.terminated.any()
    np.testing.assert_array_equal(batch.final_obs, [[0, 3], [1, 3]])
    np.testing.assert_array_equal(batch.obs, [[0, 0], [1, 0]])  # already reset
    assert [ep["return"] for ep in batch.episodes] == [3.0, 6.0]
    assert batch.episodes[1]["__reward__forward"] == 6.0 and batch.episodes[1]["x_pos"] == 3.0


def test_termination_and_episode_in_progress():
    pool = EnvPool(lambda i: CountingEnv(i, limit=10), range(2))
    pool.reset(seed=0)
    batch = pool.step(np.array([[2.0], [0.0]], np.float32))
    np.testing.assert_array_equal(batch.terminated, [True, False])
    assert len(batch.episodes) == 1
    in_progress = pool.episodes_so_far()
    assert in_progress[0]["length"] == 0  # env 0 restarted
    assert in_progress[1] == {"return": 2.0, "__reward__forward": 2.0, "length": 1, "x_pos": 1.0}


def test_dict_observations_are_flattened_in_the_space_key_order():
    pool = EnvPool(lambda i: CountingEnv(i, dict_obs=True), range(2))
    assert pool.layout.keys == ("goal", "proprioceptive")  # gymnasium's Dict sorts its keys
    assert pool.layout.normalized_columns() == (2, 4)
    np.testing.assert_array_equal(pool.reset(seed=0)[1], [-1, 0, 1, 0])


def test_subprocess_pool_matches_in_process_pool():
    actions = np.random.default_rng(0).uniform(-1, 1.5, size=(7, 4, 1)).astype(np.float32)
    pools = [EnvPool(CountingEnv, range(4)), SubprocEnvPool(CountingEnv, num_envs=4, in_series=2)]
    try:
        results = []
        for pool in pools:
            trace = [pool.reset(seed=3).copy()]
            for step_actions in actions:
                batch = pool.step(step_actions)
                trace += [batch.obs.copy(), batch.final_obs.copy(), batch.rewards.copy()]
                trace += [batch.terminated.copy(), batch.truncated.copy()]
                trace.append(np.array([ep["return"] for ep in batch.episodes]))
            trace.append(np.array([ep["return"] for ep in pool.episodes_so_far()]))
            results.append(trace)
        for ours, theirs in zip(*results, strict=True):
            np.testing.assert_array_equal(ours, theirs)
    finally:
        for pool in pools:
            pool.close()


def test_bad_pool_settings_are_one_line_errors():
    with pytest.raises(ValueError, match="VECENV.TYPE"):
        make_pool(CountingEnv, 2, "ThreadVecEnv", 1)
    with pytest.raises(ValueError, match="IN_SERIES 3 must divide"):
        SubprocEnvPool(CountingEnv, num_envs=4, in_series=3)


class FailingEnv(CountingEnv):
    """Raises ``OSError`` (the node's fault) or ``ValueError`` (the body's) at its first step."""

    def step(self, action):
        if self.index == 0:
            raise OSError(28, "No space left on device")
        raise ValueError("mj_step: simulation unstable")


def test_a_subprocess_env_error_arrives_with_its_class_and_traceback():
    from derl.evolution.failures import classify

    for in_series, kind, cause in ((1, OSError, "environment"), (2, ValueError, "morphology")):
        # in_series 1: env 0 (OSError) fails first; in_series 2: env 2 of the second group too.
        pool = SubprocEnvPool(FailingEnv, num_envs=2, in_series=in_series, first_index=0 if in_series == 1 else 2)
        try:
            pool.reset(seed=0)
            with pytest.raises(kind) as raised:
                pool.step(np.zeros((2, 1), np.float32))
        finally:
            pool.close()
        assert classify(raised.value) == cause
        assert any("raised in an env subprocess" in note and "Traceback" in note
                   for note in raised.value.__notes__)


class TwoPhaseEnv(CountingEnv):
    """Splits a step like UnimalEnv: ``advance(action)`` then ``step(action)``; logs the calls."""

    def __init__(self, index: int, log: list):
        super().__init__(index)
        self.log = log

    def advance(self, action):
        self.log.append(("advance", self.index, float(action[0])))

    def step(self, action):
        self.log.append(("step", self.index, float(action[0])))
        return super().step(action)


def test_every_env_advances_before_any_steps():
    log: list = []
    pool = EnvPool(lambda i: TwoPhaseEnv(i, log), range(3))
    pool.reset(seed=0)
    pool.step(np.array([[0.1], [0.2], [0.3]], np.float32))
    assert [entry[0] for entry in log] == ["advance"] * 3 + ["step"] * 3
    assert [entry[1:] for entry in log[:3]] == [entry[1:] for entry in log[3:]]  # each env its own action


def test_a_wrapper_in_between_keeps_the_plain_step():
    """A wrapper could change the action between the pool and ``advance``: no split then."""
    log: list = []
    pool = EnvPool(lambda i: gym.wrappers.ClipAction(TwoPhaseEnv(i, log)), range(2))
    pool.reset(seed=0)
    pool.step(np.zeros((2, 1), np.float32))
    assert [entry[0] for entry in log] == ["step", "step"]
