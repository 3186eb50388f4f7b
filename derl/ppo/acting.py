"""The collector's policy: the torch model itself (any network), or its forward pass in NumPy.

``TorchActor`` runs the model (``forward(obs) -> (mean, value)``, ``log_std``): the reference,
whatever the network. ``NumpyActorCritic`` is the fast path for exactly ``networks.ActorCritic``;
``derl.ppo.fastpath`` chooses it. Both draw the same standard-normal noise from the collector's
generator, so a rollout does not depend on which one acted (to float rounding).

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
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from derl.ppo.losses import LOG_SQRT_2PI, gaussian_log_prob
from derl.ppo.networks import ActorCritic

Layer = tuple[np.ndarray, np.ndarray]  # (weight transposed [in, out], C-contiguous; bias [out])


@torch.no_grad()
def gaussian_sample(mean: torch.Tensor, log_std: torch.Tensor,
                    noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Actions ``mean + std * noise`` (standard-normal ``noise``) and their log-probabilities."""
    actions = mean + log_std.exp() * noise
    return actions, gaussian_log_prob(actions, mean, log_std)


class TorchActor:
    """The collector's policy through the model itself (on its device, one batch per step)."""

    def __init__(self, model: nn.Module):
        self.model = model
        self.device = model.log_std.device

    def sync(self) -> None:
        """Nothing to copy: the model is read as it is."""

    @torch.no_grad()
    def _forward(self, obs: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        return self.model(torch.from_numpy(obs).to(self.device))

    def value(self, obs: np.ndarray) -> np.ndarray:
        return self._forward(obs)[1].cpu().numpy()

    def sample(self, obs: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Gaussian actions, their log-probabilities and the values: ``[n, A]``, ``[n]``, ``[n]``."""
        mean, value = self._forward(obs)
        noise = rng.standard_normal(tuple(mean.shape), dtype=np.float32)
        actions, log_probs = gaussian_sample(mean, self.model.log_std, torch.from_numpy(noise).to(self.device))
        return actions.cpu().numpy(), log_probs.cpu().numpy(), value.cpu().numpy()


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


def _tanh_mlp(layers: list[Layer], x: np.ndarray) -> np.ndarray:
    for weight, bias in layers:
        x = x @ weight
        x += bias
        np.tanh(x, out=x)
    return x


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
            features = _tanh_mlp(self.per_key[0], obs)
        else:
            parts = [_tanh_mlp(mlp, obs[:, part]) for mlp, part in zip(self.per_key, self.slices, strict=True)]
            features = _tanh_mlp(self.combine, np.concatenate(parts, axis=1))
        weight, bias = self.heads
        out = features @ weight
        out += bias
        return out

    def action_mean(self, obs: np.ndarray) -> np.ndarray:
        return self._heads(obs)[:, :-1]

    def value(self, obs: np.ndarray) -> np.ndarray:
        return self._heads(obs)[:, -1]

    def sample(self, obs: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Gaussian actions, their log-probabilities and the values: ``[n, A]``, ``[n]``, ``[n]``.

        The log-probability is computed from the standard-normal noise ``z``:
        ``log N(mean + std z; mean, std) = -z²/2 - log std - log sqrt(2 pi)``, summed over actions.
        """
        out = self._heads(obs)
        noise = rng.standard_normal((obs.shape[0], self.std.shape[0]), dtype=np.float32)
        actions = out[:, :-1]
        actions += self.std * noise
        log_probs = np.einsum("ij,ij->i", noise, noise)
        log_probs *= -0.5
        log_probs -= self.log_prob_offset
        return actions, log_probs, out[:, -1]
