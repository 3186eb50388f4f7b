"""The NumPy forward pass used for collection agrees with the torch model the learner trains."""

import numpy as np
import pytest
import torch

from derl.ppo.acting import NumpyActorCritic, NumpyNoise, _first_layer
from derl.ppo.gradients import WIDE_KEY
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


def _flat_ground(obs: np.ndarray, width: int) -> np.ndarray:
    """``obs`` with its first ``width`` columns (a height map) zero but for every third row and every
    fourth column (a twelfth left), and a few zeros inside that block too."""
    hfield = obs[:, :width]
    hfield[np.arange(len(obs)) % 3 != 0] = 0.0
    hfield[:, np.arange(width) % 4 != 0] = 0.0
    hfield[::6, ::8] = 0.0
    return obs


def test_numpy_forward_matches_torch_on_a_wide_mostly_zero_key():
    """VT's shape, narrower: the height map's first layer multiplies only its nonzero block, and
    the actions, log-probabilities and values are the torch model's (biases off zero, so a zero
    row that missed its bias would show)."""
    torch.manual_seed(0)
    layout = ObsLayout(("hfield", "proprioceptive"), (WIDE_KEY + 44, 11), True)
    model = ActorCritic(layout, action_dim=4)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.uniform_(-0.1, 0.1)
    obs = _flat_ground(np.random.default_rng(0).normal(size=(32, layout.size)).astype(np.float32), WIDE_KEY + 44)
    with torch.no_grad():
        mean, value = model(torch.from_numpy(obs))
    actions, log_probs, values = NumpyActorCritic(model).sample(obs, NumpyNoise(1))
    expected = gaussian_log_prob(torch.from_numpy(actions), mean, model.log_std.detach())
    np.testing.assert_allclose(NumpyActorCritic(model).action_mean(obs), mean.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(log_probs, expected.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(values, value.numpy(), rtol=1e-5, atol=1e-6)


def test_first_layer_of_a_wide_key_reads_only_its_nonzero_block():
    """A weight row of an all-zero column is never read (NaN there would spoil every dense output),
    zero rows get the bias alone, and a NaN in the input counts as nonzero; a narrow or dense key
    takes the dense product (the NaN weight reaches every row)."""
    rng = np.random.default_rng(0)
    x = _flat_ground(rng.normal(size=(32, WIDE_KEY)).astype(np.float32), WIDE_KEY)
    weight = rng.normal(size=(WIDE_KEY, 8)).astype(np.float32)
    bias = rng.normal(size=8).astype(np.float32)
    weight[1] = np.nan  # column 1 of x is zero throughout
    out = _first_layer((weight, bias), x)
    finite = weight.copy()
    finite[1] = 0.0
    np.testing.assert_allclose(out, x @ finite + bias, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(out[1], bias)
    x[1, 2] = np.nan
    assert np.isnan(_first_layer((weight, bias), x)[1]).all()
    assert np.isnan(_first_layer((weight[:-1], bias), x[:, :-1])).all()  # narrower than WIDE_KEY
    assert np.isnan(_first_layer((weight, bias), np.ones_like(x))).all()  # nonzero everywhere


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
