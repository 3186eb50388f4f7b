"""The NumPy forward pass used for collection agrees with the torch model the learner trains."""

import numpy as np
import pytest
import torch

from derl.ppo.acting import NumpyActorCritic, NumpyNoise
from derl.ppo.losses import gaussian_log_prob
from derl.ppo.networks import ActorCritic
from derl.ppo.obs_layout import ObsLayout
from derl.ppo.optim import FlatAdam


@pytest.mark.parametrize("layout", [
    ObsLayout(("proprioceptive",), (7,), False),
    ObsLayout(("goal", "hfield", "proprioceptive"), (3, 5, 7), True),
])
def test_numpy_forward_matches_torch(layout):
    torch.manual_seed(0)
    model = ActorCritic(layout, action_dim=4)
    with torch.no_grad():
        model.log_std.fill_(-0.3)
    fast = NumpyActorCritic(model)
    obs = np.random.default_rng(0).normal(size=(6, layout.size)).astype(np.float32)
    with torch.no_grad():
        mean, value = model(torch.from_numpy(obs))
    np.testing.assert_allclose(fast.action_mean(obs), mean.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(fast.value(obs), value.numpy(), rtol=1e-5, atol=1e-6)

    actions, log_probs, values = fast.sample(obs, NumpyNoise(1))
    expected = gaussian_log_prob(torch.from_numpy(actions), mean, model.log_std.detach())
    np.testing.assert_allclose(log_probs, expected.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(values, value.numpy(), rtol=1e-5, atol=1e-6)


def test_numpy_weights_follow_optimizer_steps_after_sync():
    layout = ObsLayout(("proprioceptive",), (3,), False)
    model = ActorCritic(layout, action_dim=2)
    optimizer = FlatAdam(model, lr=0.1, eps=1e-8)
    fast = NumpyActorCritic(model)
    obs = np.ones((1, 3), np.float32)
    before = fast.value(obs).copy()
    model.value(torch.from_numpy(obs)).sum().backward()
    optimizer.step()
    np.testing.assert_array_equal(fast.value(obs), before)  # a copy, until the next rollout
    fast.sync()
    with torch.no_grad():
        np.testing.assert_allclose(fast.value(obs), model.value(torch.from_numpy(obs)).numpy(), rtol=1e-5)
    assert not np.allclose(fast.value(obs), before)
