"""The hand-written PPO gradient (derl.ppo.gradients) against autograd on ``minibatch_loss``."""

import gymnasium as gym
import pytest
import torch

from derl.checked_config import load_config
from derl.ppo.distributed import Comm
from derl.ppo.gradients import WIDE_KEY, _Nonzero, loss_and_gradient
from derl.ppo.learner import Learner
from derl.ppo.losses import LossCoefs, Minibatch, gaussian_log_prob, minibatch_loss
from derl.ppo.networks import ActorCritic
from derl.ppo.obs_layout import ObsLayout
from derl.ppo.optim import FlatAdam

ROWS, ACTIONS = 256, 5
LAYOUTS = {
    "one key": {"proprioceptive": 11},
    "two keys, combined": {"hfield": 7, "proprioceptive": 11},
    # VT's shape, narrower: a height map of flat ground (mostly zeros) beside dense proprioception
    "wide key, mostly zero": {"hfield": WIDE_KEY + 44, "proprioceptive": 11},
}
FT = {"proprioceptive": 46}  # FT's observation on bench ppo's default body


def _flat_ground(obs: torch.Tensor, dims: dict[str, int]) -> torch.Tensor:
    """``obs`` with the wide key's rows 1, 2 of 3 and columns 1, 2, 3 of 4 zero (a twelfth left),
    a few zeros inside the kept block too: the compacted product's case."""
    if "hfield" in dims and dims["hfield"] >= WIDE_KEY:
        hfield = obs[:, : dims["hfield"]]
        hfield[torch.arange(obs.shape[0]) % 3 != 0] = 0.0
        hfield[:, torch.arange(dims["hfield"]) % 4 != 0] = 0.0
        hfield[::6, ::8] = 0.0
    return obs


def _model(dims: dict[str, int]) -> tuple[ActorCritic, FlatAdam]:
    torch.manual_seed(0)
    space = gym.spaces.Dict({key: gym.spaces.Box(-1.0, 1.0, (dim,)) for key, dim in dims.items()})
    model = ActorCritic(ObsLayout.from_space(space), ACTIONS)
    with torch.no_grad():
        model.log_std.uniform_(-0.5, 0.5)
        for name, p in model.named_parameters():
            if name.endswith("bias"):  # zero at initialisation: a dropped bias would go unseen
                p.uniform_(-0.1, 0.1)
    return model, FlatAdam(model, lr=3e-4, eps=1e-5)


def _minibatch(model: ActorCritic, dims: dict[str, int], kinds: str, rows: int = ROWS) -> Minibatch:
    """Collection-like rows: actions drawn from the policy, old log-probabilities and values near the
    current ones (ratios inside and outside the clip range); ``kinds="ties"`` makes them equal, so
    every ratio is 1 and every value change 0 (the min/max ties of the clipped terms). A wide
    ``hfield`` is mostly zero (``_flat_ground``)."""
    generator = torch.Generator().manual_seed(1)
    obs = _flat_ground(torch.randn(rows, sum(dims.values()), generator=generator), dims)
    with torch.no_grad():
        mean, value = model(obs)
        actions = mean + model.log_std.exp() * torch.randn(rows, ACTIONS, generator=generator)
        current = gaussian_log_prob(actions, mean, model.log_std)
    noise = 0.0 if kinds == "ties" else 0.4
    old_log_probs = current + noise * torch.randn(rows, generator=generator)
    old_values = value + noise * torch.randn(rows, generator=generator)
    returns = value + torch.randn(rows, generator=generator)
    advantages = torch.randn(rows, generator=generator)
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
    batch = _minibatch(model, LAYOUTS[layout], kinds)
    if layout == "wide key, mostly zero":  # the compacted first layers run
        assert _Nonzero.of(batch.obs[:, model.layout.slices[0]]) is not None
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
    batch = _minibatch(model, LAYOUTS["one key"], "spread")
    grads = {}
    for amp in (False, True):
        learner = Learner(model, cfg.PPO, Comm(), amp=amp)
        learner._loss_and_gradient(batch)
        grads[amp] = learner.optimizer.grads.clone()
    assert not torch.equal(grads[True], grads[False])
    torch.testing.assert_close(grads[True], grads[False], rtol=0.1, atol=0.05)


@pytest.mark.parametrize("dims", [LAYOUTS["wide key, mostly zero"], FT], ids=["wide key, mostly zero", "FT"])
def test_an_update_with_the_hand_written_gradient_equals_autograds(dims):
    """A whole iteration (2 epochs of 4 minibatches, Adam steps, gradient clipping): the parameters
    end where autograd's update takes them, within float32 rounding carried through 8 Adam steps."""
    cfg = load_config(None, {"PPO.BATCH_SIZE": 128, "PPO.EPOCHS": 2, "PPO.KL_TARGET_COEF": 1e6})
    params = {}
    for fast in (True, False):
        model, _ = _model(dims)
        learner = Learner(model, cfg.PPO, Comm())
        assert learner._fast_gradient is not None
        if not fast:
            learner._fast_gradient = None
        batch = _minibatch(model, dims, "spread", rows=4 * 128)
        torch.manual_seed(2)  # the minibatches' order
        stats = learner.update(batch)
        assert stats["kl_early_stop"] == 0.0
        params[fast] = learner.optimizer.params.clone()
    moved = (params[True] - _model(dims)[1].params).abs().max()
    assert moved > 1e-3  # the update did move the parameters
    torch.testing.assert_close(params[True], params[False], rtol=0.0, atol=1e-6)
