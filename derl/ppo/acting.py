"""The actor-critic's forward pass in NumPy, for collecting rollouts.

At a batch of 32 observations a torch op costs several microseconds of dispatch, more than its
arithmetic; NumPy's small matrix products and ``tanh`` cost a fraction of that. The learner keeps
the torch model (``derl.ppo.networks``); collection reads its weights through NumPy arrays. On the
CPU these are views of the parameters, so every optimiser step is seen at once; on a GPU they are
copies, refreshed by ``sync()`` before each rollout. Acting therefore always happens on the CPU,
next to the envs, and never moves a tensor per step.
"""

from __future__ import annotations

import numpy as np
import torch

from derl.ppo.losses import LOG_SQRT_2PI
from derl.ppo.networks import ActorCritic, Encoder

Layer = tuple[np.ndarray, np.ndarray]  # (weight transposed [in, out], bias [out])


def _layers(modules) -> list[Layer]:
    return [(_array(m.weight).T, _array(m.bias)) for m in modules]


def _array(param: torch.Tensor) -> np.ndarray:
    return param.detach().cpu().numpy()  # a view on the CPU, a copy elsewhere


def _tanh_mlp(layers: list[Layer], x: np.ndarray) -> np.ndarray:
    for weight_t, bias in layers:
        x = x @ weight_t
        x += bias
        np.tanh(x, out=x)
    return x


class _NumpyEncoder:
    def __init__(self, encoder: Encoder):
        self.slices = encoder.slices
        self.per_key = [_layers(mlp) for mlp in encoder.per_key]
        self.combine = _layers(encoder.combine) if encoder.combine is not None else None

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        if self.combine is None:
            return _tanh_mlp(self.per_key[0], obs)
        parts = [_tanh_mlp(mlp, obs[:, part]) for mlp, part in zip(self.per_key, self.slices, strict=True)]
        return _tanh_mlp(self.combine, np.concatenate(parts, axis=1))


class NumpyActorCritic:
    """Reads an ``ActorCritic``'s weights; ``sync()`` after the model's parameters change off-CPU."""

    def __init__(self, model: ActorCritic):
        self.model = model
        self.sync()

    def sync(self) -> None:
        model = self.model
        self.actor = _NumpyEncoder(model.actor_encoder)
        self.critic = _NumpyEncoder(model.critic_encoder)
        (self.mean_head,) = _layers([model.mean_head])
        (self.value_head,) = _layers([model.value_head])
        self.log_std = _array(model.log_std)

    def action_mean(self, obs: np.ndarray) -> np.ndarray:
        weight_t, bias = self.mean_head
        return self.actor(obs) @ weight_t + bias

    def value(self, obs: np.ndarray) -> np.ndarray:
        weight_t, bias = self.value_head
        return (self.critic(obs) @ weight_t + bias)[:, 0]

    def sample(self, obs: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Gaussian actions, their log-probabilities and the values: ``[n, A]``, ``[n]``, ``[n]``.

        The log-probability is computed from the standard-normal noise ``z``:
        ``log N(mean + std z; mean, std) = -z²/2 - log std - log sqrt(2 pi)``, summed over actions.
        """
        noise = rng.standard_normal((obs.shape[0], self.log_std.shape[0]), dtype=np.float32)
        actions = self.action_mean(obs) + np.exp(self.log_std) * noise
        normaliser = self.log_std.sum() + LOG_SQRT_2PI * noise.shape[1]
        log_probs = -0.5 * np.einsum("ij,ij->i", noise, noise) - normaliser
        return actions, log_probs, self.value(obs)
