"""The hand-written PPO gradient (derl.ppo.gradients) against autograd on ``minibatch_loss``."""

import gymnasium as gym
import pytest
import torch

from derl.checked_config import load_config
from derl.ppo.distributed import Comm
from derl.ppo.gradients import loss_and_gradient
from derl.ppo.learner import Learner
from derl.ppo.losses import LossCoefs, Minibatch, gaussian_log_prob, minibatch_loss
from derl.ppo.networks import ActorCritic
from derl.ppo.obs_layout import ObsLayout
from derl.ppo.optim import FlatAdam

ROWS, ACTIONS = 256, 5
LAYOUTS = {
    "one key": {"proprioceptive": 11},
    "two keys, combined": {"hfield": 7, "proprioceptive": 11},
}


def _model(dims: dict[str, int]) -> tuple[ActorCritic, FlatAdam]:
    torch.manual_seed(0)
    space = gym.spaces.Dict({key: gym.spaces.Box(-1.0, 1.0, (dim,)) for key, dim in dims.items()})
    model = ActorCritic(ObsLayout.from_space(space), ACTIONS)
    with torch.no_grad():
        model.log_std.uniform_(-0.5, 0.5)
    return model, FlatAdam(model, lr=3e-4, eps=1e-5)


def _minibatch(model: ActorCritic, obs_size: int, kinds: str) -> Minibatch:
    """Collection-like rows: actions drawn from the policy, old log-probabilities and values near the
    current ones (ratios inside and outside the clip range); ``kinds="ties"`` makes them equal, so
    every ratio is 1 and every value change 0 (the min/max ties of the clipped terms)."""
    generator = torch.Generator().manual_seed(1)
    obs = torch.randn(ROWS, obs_size, generator=generator)
    with torch.no_grad():
        mean, value = model(obs)
        actions = mean + model.log_std.exp() * torch.randn(ROWS, ACTIONS, generator=generator)
        current = gaussian_log_prob(actions, mean, model.log_std)
    noise = 0.0 if kinds == "ties" else 0.4
    old_log_probs = current + noise * torch.randn(ROWS, generator=generator)
    old_values = value + noise * torch.randn(ROWS, generator=generator)
    returns = value + torch.randn(ROWS, generator=generator)
    advantages = torch.randn(ROWS, generator=generator)
    return Minibatch(obs, actions, old_log_probs, old_values, returns, advantages)


def _autograd(model: ActorCritic, optimizer: FlatAdam, batch: Minibatch, coefs: LossCoefs):
    optimizer.zero_grad()
    terms = minibatch_loss(model, batch, coefs)
    terms.total.backward()
    return [t.detach() for t in terms], [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("clip_value", [True, False])
@pytest.mark.parametrize("kinds", ["spread", "ties"])
def test_hand_written_gradient_equals_autograd(layout, clip_value, kinds):
    model, optimizer = _model(LAYOUTS[layout])
    batch = _minibatch(model, sum(LAYOUTS[layout].values()), kinds)
    coefs = LossCoefs(clip_eps=0.2, value_coef=0.5, entropy_coef=0.01, clip_value=clip_value)
    expected_terms, expected_grads = _autograd(model, optimizer, batch, coefs)
    if kinds == "spread":  # the batch exercises both sides of both clips
        assert 0.1 < expected_terms[5].item() < 0.9
    optimizer.grads.fill_(123.0)  # stale values are replaced, not added to
    terms = loss_and_gradient(model, batch, coefs)
    for got, expected in zip(terms, expected_terms, strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    for (name, p), expected in zip(model.named_parameters(), expected_grads, strict=True):
        torch.testing.assert_close(p.grad, expected, rtol=1e-4, atol=1e-6, msg=name)


def test_amp_update_differentiates_with_autograd():
    """Under AMP the learner takes autograd's gradient of the bf16 forward pass (CPU autocast here):
    close to the float32 gradient, not equal to it."""
    model, _ = _model(LAYOUTS["one key"])
    cfg = load_config(None, {"PPO.BATCH_SIZE": ROWS, "PPO.EPOCHS": 1})
    batch = _minibatch(model, 11, "spread")
    grads = {}
    for amp in (False, True):
        learner = Learner(model, cfg.PPO, Comm(), amp=amp)
        learner._loss_and_gradient(batch)
        grads[amp] = learner.optimizer.grads.clone()
    assert not torch.equal(grads[True], grads[False])
    torch.testing.assert_close(grads[True], grads[False], rtol=0.1, atol=0.05)
