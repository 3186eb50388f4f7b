"""FlatAdam does what torch.optim.Adam plus clip_grad_norm_ do, over one flat buffer."""

import copy
import math

import torch
from torch import nn

from derl.ppo.optim import FlatAdam


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3))


def test_flat_adam_matches_torch_adam_with_grad_clipping():
    ours, reference = _model(), _model()
    optimizer = FlatAdam(ours, lr=1e-2, eps=1e-5)
    torch_adam = torch.optim.Adam(reference.parameters(), lr=1e-2, eps=1e-5)
    data = torch.randn(32, 5, generator=torch.Generator().manual_seed(1))
    for _ in range(5):
        optimizer.zero_grad()
        (ours(data) ** 2).sum().backward()
        optimizer.clip_grad_norm(0.5)
        optimizer.step()
        torch_adam.zero_grad()
        (reference(data) ** 2).sum().backward()
        torch.nn.utils.clip_grad_norm_(reference.parameters(), 0.5)
        torch_adam.step()
    for mine, theirs in zip(ours.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-6)


def test_parameters_and_gradients_are_views_of_the_flat_buffers():
    model = _model()
    optimizer = FlatAdam(model, lr=1e-3, eps=1e-8)
    (model(torch.ones(2, 5)).sum()).backward()
    assert optimizer.grads.abs().sum() > 0  # backward wrote into the flat gradient
    for p in model.parameters():
        assert p.data_ptr() % 64 == 0
        assert p.untyped_storage().data_ptr() == optimizer.params.untyped_storage().data_ptr()


def test_state_round_trip_continues_identically():
    model = _model()
    optimizer = FlatAdam(model, lr=1e-2, eps=1e-5)
    data = torch.randn(8, 5)

    def step(m, opt):
        opt.zero_grad()
        m(data).sum().backward()
        opt.step()

    step(model, optimizer)
    clone = copy.deepcopy(model)
    clone_opt = FlatAdam(clone, lr=1e-2, eps=1e-5)
    clone_opt.load_state_dict(optimizer.state_dict())
    step(model, optimizer)
    step(clone, clone_opt)
    torch.testing.assert_close(optimizer.params, clone_opt.params, rtol=0, atol=0)


def test_a_step_over_zero_and_subnormal_second_moments_is_the_plain_formulas():
    """The step clamps the second moments to the smallest normal float before the square root (torch's
    CPU sqrt took five times as long on zeros: a wide key's flat ground leaves most of its weights'
    moments at zero). Below that, sqrt(v) / sqrt(bias2) is under half an ulp of ``eps``: the step is
    Adam's formula bit for bit."""
    model = nn.Linear(64, 4)
    optimizer = FlatAdam(model, lr=3e-4, eps=1e-5)
    grads = torch.randn(optimizer.grads.shape, generator=torch.Generator().manual_seed(3))
    grads[::3] = 0.0
    grads[1::3] *= 1e-21  # squares below float32's smallest normal number
    for _ in range(3):
        params, exp_avg, exp_avg_sq = optimizer.params.clone(), optimizer.exp_avg.clone(), optimizer.exp_avg_sq.clone()
        optimizer.grads.copy_(grads)
        optimizer.step()
        beta1, beta2 = optimizer.betas
        exp_avg.lerp_(grads, 1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grads, grads, value=1 - beta2)
        bias1, bias2 = 1 - beta1**optimizer.steps, 1 - beta2**optimizer.steps
        denom = (exp_avg_sq.sqrt() / math.sqrt(bias2)).add_(1e-5)
        assert torch.equal(optimizer.params, params.addcdiv_(exp_avg, denom, value=-3e-4 / bias1))
    assert (optimizer.exp_avg_sq == 0).any() and ((optimizer.exp_avg_sq > 0) & (optimizer.exp_avg_sq < 1e-38)).any()
