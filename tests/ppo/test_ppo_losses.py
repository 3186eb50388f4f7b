"""GAE and the PPO loss against hand-worked numbers."""

import math

import numpy as np
import pytest
import torch

from derl.ppo.losses import compute_gae, gaussian_entropy, gaussian_log_prob, ppo_loss


def _gae(rewards, values, bootstrap, terminated=None, truncated=None, final_values=None, gamma=0.5, lam=0.5):
    shape = np.shape(rewards)
    as_array = lambda x, dtype: np.zeros(shape, dtype) if x is None else np.asarray(x, dtype)  # noqa: E731
    return compute_gae(
        as_array(rewards, np.float32), as_array(values, np.float32), np.asarray(bootstrap, np.float32),
        as_array(terminated, bool), as_array(truncated, bool), as_array(final_values, np.float32),
        gamma, lam,
    )


def test_gae_without_episode_end():
    # Constant critic V = 1, reward 1, gamma = lambda = 0.5: every delta = 1 + 0.5*1 - 1 = 0.5.
    # gae2 = 0.5; gae1 = 0.5 + 0.25*0.5 = 0.625; gae0 = 0.5 + 0.25*0.625 = 0.65625.
    adv, ret = _gae([[1.0], [1.0], [1.0]], [[1.0], [1.0], [1.0]], [1.0])
    np.testing.assert_allclose(adv[:, 0], [0.65625, 0.625, 0.5])
    np.testing.assert_allclose(ret[:, 0], [1.65625, 1.625, 1.5])


def test_gae_termination_bootstraps_zero():
    # Terminated at t=1: delta1 = 1 + 0 - 1 = 0 and gae1 = 0 (no carry across the end);
    # t=2 starts a new episode: gae2 = 0.5; gae0 = 0.5 + 0.25*0 = 0.5.
    adv, _ = _gae([[1.0]] * 3, [[1.0]] * 3, [1.0], terminated=[[False], [True], [False]])
    np.testing.assert_allclose(adv[:, 0], [0.5, 0.0, 0.5])


def test_gae_truncation_bootstraps_from_final_observation():
    # Truncated at t=1 with V(final obs) = 3: delta1 = 1 + 0.5*3 - 1 = 1.5 = gae1 (no carry);
    # gae0 = 0.5 + 0.25*1.5 = 0.875; gae2 = 0.5 (next episode, bootstrap V = 1).
    adv, _ = _gae(
        [[1.0]] * 3, [[1.0]] * 3, [1.0],
        truncated=[[False], [True], [False]], final_values=[[0.0], [3.0], [0.0]],
    )
    np.testing.assert_allclose(adv[:, 0], [0.875, 1.5, 0.5])


def test_gae_termination_wins_over_truncation():
    # A fall on the time-limit step is a terminal (docs/guides/training.md): the final value is ignored.
    both = [[False], [True], [False]]
    adv, _ = _gae([[1.0]] * 3, [[1.0]] * 3, [1.0], terminated=both, truncated=both, final_values=[[9.0]] * 3)
    np.testing.assert_allclose(adv[:, 0], [0.5, 0.0, 0.5])


def test_gae_infinite_horizon_is_consistent_with_truncation():
    # Reward 1 forever, cut by a time limit every 4 steps: the true value is 1/(1-gamma) everywhere.
    # With that critic and bootstrapping from the final observation, every advantage is exactly 0.
    gamma = 0.9
    v_star = 1.0 / (1.0 - gamma)
    truncated = np.zeros((12, 3), bool)
    truncated[3::4] = True
    adv, ret = _gae(
        np.ones((12, 3)), np.full((12, 3), v_star), np.full(3, v_star),
        truncated=truncated, final_values=np.full((12, 3), v_star), gamma=gamma, lam=0.95,
    )
    np.testing.assert_allclose(adv, 0.0, atol=1e-5)
    np.testing.assert_allclose(ret, v_star, rtol=1e-6)


def test_gaussian_log_prob_and_entropy_match_torch():
    mean, log_std = torch.randn(5, 3), torch.randn(3)
    actions = torch.randn(5, 3)
    reference = torch.distributions.Normal(mean, log_std.exp())
    torch.testing.assert_close(gaussian_log_prob(actions, mean, log_std), reference.log_prob(actions).sum(-1))
    torch.testing.assert_close(gaussian_entropy(log_std), reference.entropy()[0].mean())


def test_entropy_is_the_mean_over_action_dimensions():
    # Each dimension of N(mu, sigma^2) has entropy 0.5*ln(2*pi*e) + ln(sigma):
    # log_std (0, 0, ln 2) -> 1.41894, 1.41894, 1.41894 + 0.69315 = 2.11209; mean 1.65000.
    per_dim = 0.5 * math.log(2 * math.pi * math.e)
    log_std = torch.tensor([0.0, 0.0, math.log(2.0)])
    assert gaussian_entropy(log_std).item() == pytest.approx(per_dim + math.log(2.0) / 3, rel=1e-6)
    assert gaussian_entropy(torch.zeros(7)).item() == pytest.approx(1.418939, rel=1e-6)  # any A: a fresh policy


def test_ppo_loss_clips_policy_and_value():
    # ratio = e^1 > 1.2 with advantage 1: the clipped surrogate is 1.2, policy loss -1.2.
    # value: V = 3, V_old = 1, R = 2 -> (V-R)^2 = 1; V_clip = 1.2 -> (1.2-2)^2 = 0.64; max = 1, half = 0.5.
    one = torch.ones(1)
    terms = ppo_loss(
        log_prob=one, old_log_prob=0 * one, advantages=one, values=3 * one, old_values=one,
        returns=2 * one, entropy=torch.tensor(2.0), clip_eps=0.2, value_coef=0.5, entropy_coef=0.01,
        clip_value=True,
    )
    assert terms.policy.item() == pytest.approx(-1.2)
    assert terms.value.item() == pytest.approx(0.5)
    assert terms.total.item() == pytest.approx(-1.2 + 0.5 * 0.5 - 0.01 * 2.0)
    assert terms.approx_kl.item() == pytest.approx(-1.0)
    assert terms.clip_fraction.item() == 1.0
