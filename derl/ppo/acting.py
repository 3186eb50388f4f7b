"""What the collector injects to act: a policy (the torch model itself, any network, or its forward
pass in NumPy) and the source of its action noise (a NumPy generator, or a torch one on a device).

``TorchActor`` runs the model (``forward(obs) -> (mean, value)``, ``log_std``): the reference,
whatever the network, on NumPy observations (moved to the model's device and back) or on tensors
where the model lies (a device env's; nothing moves). ``NumpyActorCritic`` is the host's fast path
for exactly ``networks.ActorCritic``; ``derl.ppo.fastpath`` chooses. Both take their
standard-normal noise from the injected source (``NumpyNoise``, ``TorchNoise``), so a rollout does
not depend on which one acted (to float rounding).

Why NumPy: at a batch of 32 observations a torch op costs several microseconds of dispatch, more than its
arithmetic; NumPy's small matrix products and ``tanh`` cost a fraction of that. The learner keeps
the torch model (``derl.ppo.networks``); ``NumpyActorCritic`` reads a copy of its weights,
refreshed by ``sync()`` before each rollout, so acting happens on the CPU, next to the envs, and
never moves a tensor per step (``TorchActor`` moves each step's batch to the model's device).

Actor and critic have the same shape (same keys, same hidden sizes), so they run as one network
of twice the width: a first layer reading an observation key computes both encoders' units at
once (weights side by side), deeper layers are block-diagonal (actor block, critic block) and the
two heads are one ``[features, A + 1]`` product whose last column is the value. Three matrix
products per step instead of six (one key), each on C-contiguous weights: transposed views of
the torch weights take NumPy's slow strided path, about twice as slow for these shapes. The zeros
of the block-diagonal weights add exact zeros, so the outputs are the separate networks' to float
rounding.

A wide key that is mostly zeros (VT's 1,410-value height map on flat ground: a call's 32 rows had
nonzeros in about a quarter of its rows and 6% of its columns) is read as the update reads it
(``derl.ppo.gradients``): its first layer multiplies only the rows and columns that hold a nonzero,
and rows left out get the bias (``_first_layer``). The same sums without their zero terms; on VT's
rollouts the layer went from 146 to 40 us per call of 32 rows (docs/benchmarks.md).
"""

from __future__ import annotations

import json
import logging
from typing import Any, Protocol, TypeAlias

import numpy as np
import torch
from torch import nn

from derl.fileio.reads import parse_json
from derl.ppo.gradients import MOSTLY_ZERO, WIDE_KEY
from derl.ppo.losses import LOG_SQRT_2PI, gaussian_log_prob
from derl.ppo.networks import ActorCritic

Layer = tuple[np.ndarray, np.ndarray]  # (weight transposed [in, out], C-contiguous; bias [out])
Array: TypeAlias = np.ndarray | torch.Tensor
log = logging.getLogger(__name__)


class Noise(Protocol):
    """The action noise's source: standard-normal float32 draws where the observations lie."""

    def standard_normal(self, shape: tuple[int, ...]) -> Array: ...

    def state(self) -> str:
        """The generator's state as JSON (what a checkpoint keeps per rank)."""

    def load_state(self, text: str) -> None:
        """Restores ``state``'s JSON; another source's state is logged and left: the noise stays fresh."""


class NumpyNoise:
    """Action noise from a NumPy generator (the host's)."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)

    def standard_normal(self, shape: tuple[int, ...]) -> np.ndarray:
        return self.rng.standard_normal(shape, dtype=np.float32)

    def state(self) -> str:
        return json.dumps(self.rng.bit_generator.state)

    def load_state(self, text: str) -> None:
        state = parse_json(text, "the checkpoint's action noise state")
        if not isinstance(state, dict) or "bit_generator" not in state:
            log.info("the checkpoint's action noise came from a device env's generator; drawing fresh noise")
            return
        self.rng.bit_generator.state = state


class TorchNoise:
    """Action noise from a ``torch.Generator``, drawn on ``device`` (so that drawing never leaves it).

    ``generator`` defaults to one on ``device``; a CPU generator draws for a device without one (``meta``).
    """

    def __init__(self, seed: int, device: torch.device, generator: torch.Generator | None = None):
        self.device = device
        self.generator = (torch.Generator(device=device) if generator is None else generator).manual_seed(seed)

    def standard_normal(self, shape: tuple[int, ...]) -> torch.Tensor:
        return torch.randn(shape, generator=self.generator, device=self.device)

    def state(self) -> str:
        return json.dumps({"torch_generator": self.generator.get_state().tolist()})

    def load_state(self, text: str) -> None:
        state = parse_json(text, "the checkpoint's action noise state")
        if not isinstance(state, dict) or "torch_generator" not in state:
            log.info("the checkpoint's action noise came from a NumPy generator; drawing fresh noise")
            return
        self.generator.set_state(torch.tensor(state["torch_generator"], dtype=torch.uint8))


class Actor(Protocol):
    """The collector's policy: Gaussian actions, their log-probabilities and values, in the
    observations' namespace."""

    def sync(self) -> None:
        """Reads the model's weights again (before each rollout)."""

    def sample(self, obs: Any, noise: Noise) -> tuple[Any, Any, Any]: ...

    def value(self, obs: Any) -> Any: ...


@torch.no_grad()
def gaussian_sample(mean: torch.Tensor, log_std: torch.Tensor,
                    noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Actions ``mean + std * noise`` (standard-normal ``noise``) and their log-probabilities."""
    actions = mean + log_std.exp() * noise
    return actions, gaussian_log_prob(actions, mean, log_std)


def _like(values: torch.Tensor, obs: Array) -> Array:
    """``values`` in the namespace of ``obs``: NumPy for NumPy observations, else the tensor as it is."""
    return values.cpu().numpy() if isinstance(obs, np.ndarray) else values


class TorchActor:
    """The collector's policy through the model itself (on its device, one batch per step)."""

    def __init__(self, model: nn.Module):
        self.model = model
        self.device = model.log_std.device

    def sync(self) -> None:
        """Nothing to copy: the model is read as it is."""

    @torch.no_grad()
    def _forward(self, obs: Array) -> tuple[torch.Tensor, torch.Tensor]:
        return self.model(torch.as_tensor(obs, device=self.device))

    def value(self, obs: Array) -> Array:
        return _like(self._forward(obs)[1], obs)

    def sample(self, obs: Array, noise: Noise) -> tuple[Array, Array, Array]:
        """Gaussian actions, their log-probabilities and the values: ``[n, A]``, ``[n]``, ``[n]``."""
        mean, value = self._forward(obs)
        z = torch.as_tensor(noise.standard_normal(tuple(mean.shape)), device=self.device)
        actions, log_probs = gaussian_sample(mean, self.model.log_std, z)
        return _like(actions, obs), _like(log_probs, obs), _like(value, obs)


def _array(param: torch.Tensor) -> np.ndarray:
    return param.detach().cpu().numpy().astype(np.float32, copy=True)


def _side_by_side(actor: nn.Linear, critic: nn.Linear) -> Layer:
    """Both layers on the same input: ``[in, out_a + out_c]``."""
    weight = np.concatenate([_array(actor.weight).T, _array(critic.weight).T], axis=1)
    return np.ascontiguousarray(weight), np.concatenate([_array(actor.bias), _array(critic.bias)])


def _block_diagonal(actor: nn.Linear, critic: nn.Linear) -> Layer:
    """Actor on the first ``in_a`` inputs, critic on the rest: ``[in_a + in_c, out_a + out_c]``."""
    (out_a, in_a), (out_c, in_c) = actor.weight.shape, critic.weight.shape
    weight = np.zeros((in_a + in_c, out_a + out_c), np.float32)
    weight[:in_a, :out_a] = _array(actor.weight).T
    weight[in_a:, out_a:] = _array(critic.weight).T
    return weight, np.concatenate([_array(actor.bias), _array(critic.bias)])


def _combine(actor: nn.Linear, critic: nn.Linear, widths: list[tuple[int, int]]) -> Layer:
    """The combining layer's input is ``[actor_k, critic_k]`` per key k (widths ``(a_k, c_k)``);
    the actor reads the actor parts in key order, the critic the critic parts."""
    out_a, out_c = actor.weight.shape[0], critic.weight.shape[0]
    weight = np.zeros((sum(a + c for a, c in widths), out_a + out_c), np.float32)
    actor_t, critic_t = _array(actor.weight).T, _array(critic.weight).T
    row = row_a = row_c = 0
    for a, c in widths:
        weight[row:row + a, :out_a] = actor_t[row_a:row_a + a]
        weight[row + a:row + a + c, out_a:] = critic_t[row_c:row_c + c]
        row, row_a, row_c = row + a + c, row_a + a, row_c + c
    return weight, np.concatenate([_array(actor.bias), _array(critic.bias)])


def _first_layer(layer: Layer, x: np.ndarray) -> np.ndarray:
    """``x @ weight + bias``; on a ``WIDE_KEY``-wide ``x`` whose nonzero rows and columns span at most
    ``MOSTLY_ZERO`` of it, the product of that block only (a NaN counts as nonzero and propagates)."""
    weight, bias = layer
    if x.shape[1] >= WIDE_KEY:
        nonzero = x != 0
        rows, cols = np.flatnonzero(nonzero.any(1)), np.flatnonzero(nonzero.any(0))
        if rows.size * cols.size <= MOSTLY_ZERO * x.size:
            out = np.empty((x.shape[0], bias.shape[0]), np.float32)
            out[:] = bias
            out[rows] += x[np.ix_(rows, cols)] @ weight[cols]
            return out
    out = x @ weight
    out += bias
    return out


def _tanh_mlp(layers: list[Layer], x: np.ndarray) -> np.ndarray:
    for weight, bias in layers:
        x = x @ weight
        x += bias
        np.tanh(x, out=x)
    return x


def _encode_key(layers: list[Layer], x: np.ndarray) -> np.ndarray:
    """``_tanh_mlp`` on an observation key, its first layer through ``_first_layer``."""
    hidden = _first_layer(layers[0], x)
    np.tanh(hidden, out=hidden)
    return _tanh_mlp(layers[1:], hidden)


class NumpyActorCritic:
    """A copy of an ``ActorCritic``'s weights as one joint network; ``sync()`` after they change.

    Reads the model's layers, not its ``forward``: ``derl.ppo.fastpath`` checks that the two agree.
    """

    def __init__(self, model: ActorCritic):
        self.model = model
        self.sync()

    def sync(self) -> None:
        model = self.model
        actor, critic = model.actor_encoder, model.critic_encoder
        self.slices = actor.slices
        self.per_key = []
        for mlp_a, mlp_c in zip(actor.per_key, critic.per_key, strict=True):
            first = _side_by_side(mlp_a[0], mlp_c[0])
            rest = [_block_diagonal(a, c) for a, c in zip(mlp_a[1:], mlp_c[1:], strict=True)]
            self.per_key.append([first, *rest])
        self.combine: list[Layer] | None = None
        if actor.combine is not None:
            widths = [(mlp_a[-1].out_features, mlp_c[-1].out_features)
                      for mlp_a, mlp_c in zip(actor.per_key, critic.per_key, strict=True)]
            first = _combine(actor.combine[0], critic.combine[0], widths)
            rest = [_block_diagonal(a, c) for a, c in zip(actor.combine[1:], critic.combine[1:], strict=True)]
            self.combine = [first, *rest]
        self.heads = _block_diagonal(model.mean_head, model.value_head)
        self.log_std = _array(model.log_std)
        self.std = np.exp(self.log_std)
        self.log_prob_offset = np.float32(self.log_std.sum() + LOG_SQRT_2PI * len(self.log_std))

    def _heads(self, obs: np.ndarray) -> np.ndarray:
        """``[n, A + 1]``: the action means, then the value."""
        if self.combine is None:
            features = _encode_key(self.per_key[0], obs)
        else:
            parts = [_encode_key(mlp, obs[:, part]) for mlp, part in zip(self.per_key, self.slices, strict=True)]
            features = _tanh_mlp(self.combine, np.concatenate(parts, axis=1))
        weight, bias = self.heads
        out = features @ weight
        out += bias
        return out

    def action_mean(self, obs: np.ndarray) -> np.ndarray:
        return self._heads(obs)[:, :-1]

    def value(self, obs: np.ndarray) -> np.ndarray:
        return self._heads(obs)[:, -1]

    def sample(self, obs: np.ndarray, noise: Noise) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Gaussian actions, their log-probabilities and the values: ``[n, A]``, ``[n]``, ``[n]``.

        The log-probability is computed from the standard-normal noise ``z``:
        ``log N(mean + std z; mean, std) = -z²/2 - log std - log sqrt(2 pi)``, summed over actions.
        """
        out = self._heads(obs)
        z = noise.standard_normal((obs.shape[0], self.std.shape[0]))
        actions = out[:, :-1]
        actions += self.std * z
        log_probs = np.einsum("ij,ij->i", z, z)
        log_probs *= -0.5
        log_probs -= self.log_prob_offset
        return actions, log_probs, out[:, -1]
