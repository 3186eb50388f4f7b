"""Running statistics for observation and reward normalisation."""

import numpy as np

from derl.ppo.normalize import CLIP, ObsNormalizer, ReturnNormalizer, RunningMeanStd


def test_running_mean_std_matches_whole_data():
    rng = np.random.default_rng(0)
    batches = [rng.normal(3.0, 2.0, size=(n, 4)) for n in (1, 7, 50, 13)]
    rms = RunningMeanStd((4,))
    for batch in batches:
        rms.update(batch)
    data = np.concatenate(batches)
    np.testing.assert_allclose(rms.mean, data.mean(0), rtol=1e-5)
    np.testing.assert_allclose(rms.var, data.var(0), rtol=1e-4)
    assert rms.count == len(data) + 1e-4


def test_obs_normalizer_touches_only_its_columns_and_clips():
    norm = ObsNormalizer(1, 3)
    norm.update(np.array([[5.0, 0.0, 10.0, 7.0], [5.0, 2.0, 30.0, 7.0]]))
    out = norm.normalize(np.array([[5.0, 1.0, 20.0, 7.0], [-1.0, 1e6, 20.0, 3.0]]))
    assert out.dtype == np.float32
    np.testing.assert_allclose(out[:, [0, 3]], [[5.0, 7.0], [-1.0, 3.0]])  # raw columns
    np.testing.assert_allclose(out[0, 1:3], 0.0, atol=1e-3)  # the mean maps to 0
    assert out[1, 1] == CLIP


def test_obs_normalizer_state_round_trip():
    norm, copy = ObsNormalizer(0, 2), ObsNormalizer(0, 2)
    norm.update(np.random.default_rng(1).normal(size=(10, 2)))
    copy.load_state_dict(norm.state_dict())
    x = np.ones((1, 2))
    np.testing.assert_array_equal(norm.normalize(x), copy.normalize(x))


def test_return_normalizer_divides_by_discounted_return_std_and_resets():
    norm = ReturnNormalizer(num_envs=2, gamma=0.5)
    scaled = norm.normalize(np.array([2.0, 4.0]), dones=np.array([False, True]))
    # The running discounted returns were [2, 4]; env 1 ended so its return restarts at 0.
    np.testing.assert_allclose(norm.returns, [2.0, 0.0])
    np.testing.assert_allclose(scaled, np.array([2.0, 4.0]) / np.sqrt(norm.rms.var + 1e-8), rtol=1e-6)
    norm.normalize(np.array([1.0, 1.0]), dones=np.array([False, False]))
    np.testing.assert_allclose(norm.returns, [2.0, 1.0])  # 0.5 * 2 + 1, 0.5 * 0 + 1
