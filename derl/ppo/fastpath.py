"""The learner's fast paths, chosen here and nowhere else (docs/guides/training.md).

The torch model is the reference: autograd differentiates it (``losses.minibatch_loss``) and the
collector can act with it (``acting.TorchActor``), whatever the network; on a device env's tensors
it always does (``acting``). Two faster versions are
written for DERL's network exactly as ``networks.ActorCritic`` builds it: the NumPy forward pass
the collector acts with (``acting.NumpyActorCritic``) and the hand-written backward pass of the
float32 update (``gradients.loss_and_gradient``). ``actor`` and ``loss_and_gradient`` hand one
out only for a model it reproduces, checked twice:

- by structure: an ``ActorCritic`` itself (not a subclass), float32, and no parameter the fast
  path does not read (a layer added in ``networks.py`` would be ignored);
- by behaviour: once, on a probe batch, against the reference (actions, log-probabilities and
  values; loss terms and gradients; each on a dense batch and on a mostly-zero one), so a changed
  activation or loss that the fast path does not follow is caught too, and so is a fast path that
  fails on the model. Each path is judged on its own. The probe draws from its own generators and
  differentiates a copy of the model: the training's random streams and gradients are untouched.

Otherwise the reference runs, with a logged warning saying why. A network change is therefore
one file (``networks.py``): it trains at once, through autograd, and the fast paths follow only
when rewritten for it.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from derl.ppo.acting import Actor, Noise, NumpyActorCritic, NumpyNoise, TorchActor, TorchNoise
from derl.ppo.gradients import loss_and_gradient as hand_written
from derl.ppo.losses import LossCoefs, LossTerms, Minibatch, gaussian_log_prob, minibatch_loss
from derl.ppo.networks import ActorCritic

PROBE_ROWS = 16
TOLERANCE = {"rtol": 1e-3, "atol": 1e-5}  # float rounding is ~1e-6; a different network is ~1e-1 off
LossAndGradient = Callable[[ActorCritic, Minibatch, LossCoefs], LossTerms]
log = logging.getLogger(__name__)


def _unsupported(model: nn.Module) -> str | None:
    """Why the fast paths cannot stand for ``model`` by its structure; None if they can."""
    if type(model) is not ActorCritic:
        return f"the model is a {type(model).__name__}, not a derl.ppo.networks.ActorCritic"
    dtypes = sorted({str(p.dtype) for p in model.parameters()})
    if dtypes != ["torch.float32"]:
        return f"its parameters are {', '.join(dtypes)}, not float32"
    layers = [model.mean_head, model.value_head]
    for encoder in (model.actor_encoder, model.critic_encoder):
        for mlp in (*encoder.per_key, *([encoder.combine] if encoder.combine is not None else [])):
            layers.extend(mlp)
    for layer in layers:
        if type(layer) is not nn.Linear:
            return f"it holds a {type(layer).__name__} where the fast paths read an nn.Linear"
    read = {model.log_std, *(p for layer in layers for p in (layer.weight, layer.bias))}
    unread = [name for name, p in model.named_parameters() if p not in read]
    return f"the fast paths would ignore its parameters {', '.join(unread)}" if unread else None


def _probe(model: nn.Module, agrees: Callable[[], bool], what: str) -> str | None:
    """Why the fast path cannot stand for ``model`` (structure, then ``agrees()`` on a probe batch)."""
    try:
        reason = _unsupported(model)
        if reason is None and not agrees():
            reason = "it does not match the reference on a probe batch (networks.py or losses.py changed?)"
    except Exception as err:  # noqa: BLE001 - whatever stops the fast path on this model turns it off
        reason = f"it fails on this model ({type(err).__name__}: {err})"
    if reason is not None:
        log.warning("%s is off, the reference (the torch model, autograd) runs instead: %s", what, reason)
    return reason


def _same(got: list[torch.Tensor | np.ndarray], expected: list[torch.Tensor | np.ndarray]) -> bool:
    return all(torch.allclose(torch.as_tensor(a), torch.as_tensor(b), **TOLERANCE)
               for a, b in zip(got, expected, strict=True))


def _replica(model: nn.Module) -> nn.Module:
    """A copy of ``model`` to probe, its biases moved off zero (their value at initialisation, where a
    fast path that drops one agrees), with zero gradients (the hand-written gradient writes there)."""
    replica = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(1)
    for name, p in replica.named_parameters():
        p.grad = torch.zeros_like(p)
        if name.endswith("bias"):
            p.data += 0.1 * torch.randn(p.shape, generator=generator).to(p.device)
    return replica


def actor(model: nn.Module) -> NumpyActorCritic | TorchActor:
    """The collector's policy for ``model``: the NumPy forward pass where it reproduces the model."""

    def agrees() -> bool:
        dense = torch.randn(PROBE_ROWS, model.layout.size, generator=torch.Generator().manual_seed(0))
        replica = _replica(model)
        fast, reference = NumpyActorCritic(replica), TorchActor(replica)
        return all(_same(list(fast.sample(obs, NumpyNoise(1))), list(reference.sample(obs, NumpyNoise(1))))
                   for obs in (dense.numpy(), _flat_ground(dense.clone()).numpy()))

    if _probe(model, agrees, "the NumPy forward pass (derl.ppo.acting)") is None:
        return NumpyActorCritic(model)
    return TorchActor(model)


def acting(model: nn.Module, device: torch.device | None, seed: int) -> tuple[Actor, Noise]:
    """What the collector injects for envs on ``device`` (None: NumPy arrays on the host): the policy
    and the action noise seeded with ``seed``. On the host ``actor(model)`` and a NumPy generator; on a
    device the model itself and a generator there, so that acting never leaves it."""
    if device is None:
        return actor(model), NumpyNoise(seed)
    return TorchActor(model), TorchNoise(seed, device)


def _flat_ground(obs: torch.Tensor) -> torch.Tensor:
    """``obs`` with every other row and three columns in four zero, as flat ground in a height map,
    so that a wide key takes the fast paths' compacted first layers (``gradients._Nonzero``,
    ``acting._first_layer``)."""
    obs[::2] = 0.0
    obs[:, torch.arange(obs.shape[1]) % 4 != 0] = 0.0
    return obs


def _probe_batch(model: nn.Module, mostly_zero: bool) -> Minibatch:
    """Rows like a collection's: actions from the policy, old log-probabilities and values near the
    current ones (ratios inside and outside the clip range); ``mostly_zero``: ``_flat_ground``."""
    generator = torch.Generator().manual_seed(0)
    device = model.log_std.device

    def normal(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator).to(device)

    obs = normal(PROBE_ROWS, model.layout.size)
    if mostly_zero:
        obs = _flat_ground(obs)
    with torch.no_grad():
        mean, value = model(obs)
        actions = mean + model.log_std.exp() * normal(*mean.shape)
        log_probs = gaussian_log_prob(actions, mean, model.log_std)
    return Minibatch(obs, actions, log_probs + 0.4 * normal(PROBE_ROWS), value + 0.4 * normal(PROBE_ROWS),
                     value + normal(PROBE_ROWS), normal(PROBE_ROWS))


def loss_and_gradient(model: nn.Module, coefs: LossCoefs, amp: bool = False) -> LossAndGradient | None:
    """The hand-written gradient where it equals autograd's for ``model`` and ``coefs``, else None
    (autograd). Under ``amp`` autograd differentiates the bf16 forward pass: None, without a note."""
    if amp:
        return None

    def agrees_on(batch: Minibatch, replica: nn.Module) -> bool:
        terms = hand_written(replica, batch, coefs)
        got = [terms.total, *(p.grad.clone() for p in replica.parameters())]
        reference = minibatch_loss(replica, batch, coefs)
        return _same(got, [reference.total.detach(),
                           *torch.autograd.grad(reference.total, list(replica.parameters()))])

    def agrees() -> bool:
        replica = _replica(model)
        return all(agrees_on(_probe_batch(replica, mostly_zero), replica) for mostly_zero in (False, True))

    return hand_written if _probe(model, agrees, "the hand-written gradient (derl.ppo.gradients)") is None else None
