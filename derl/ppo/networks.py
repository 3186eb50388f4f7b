"""DERL's actor-critic: separate actor and critic encoders, Gaussian policy (docs/guides/training.md).

Encoder: one key → MLP ``[d, *hidden]``; several keys → an MLP per key, concatenated, then
``[64k, *feat_hidden]``; tanh after every layer. Actor head: linear → mean, state-independent
``log_std`` initialised to 0, no squashing. Critic head: linear → 1. Orthogonal init, gain 1,
zero biases.

This module is the network's one definition: autograd differentiates it and it can act, whatever
is changed here. The learner's faster versions of it (``derl.ppo.fastpath``) are written for
exactly this network and turn themselves off, with a logged note, for any other.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from derl.ppo.obs_layout import ObsLayout


def _mlp(in_dim: int, hidden: Sequence[int]) -> nn.ModuleList:
    return nn.ModuleList(nn.Linear(a, b) for a, b in zip((in_dim, *hidden[:-1]), hidden, strict=True))


def tanh_(x: torch.Tensor) -> torch.Tensor:
    """tanh(x) as 2·sigmoid(2x) − 1 (within 2e-7), overwriting ``x``.

    The same function, computed the fast way: torch's CPU tanh kernel takes about ten times as
    long as sigmoid on a [512, 64] batch, and the update runs hundreds of them per iteration.
    """
    return torch.sigmoid(x.mul_(2)).mul(2).sub_(1)


def tanh_mlp(layers: nn.ModuleList, x: torch.Tensor) -> torch.Tensor:
    """``layers`` with tanh after each (functional calls: no module-call overhead)."""
    for layer in layers:
        x = tanh_(F.linear(x, layer.weight, layer.bias))
    return x


class Encoder(nn.Module):
    """Maps flat observations ``[n, layout.size]`` to features ``[n, out_dim]``."""

    def __init__(self, layout: ObsLayout, hidden: Sequence[int], feat_hidden: Sequence[int]):
        super().__init__()
        self.slices = layout.slices
        self.per_key = nn.ModuleList(_mlp(dim, hidden) for dim in layout.dims)
        self.out_dim = hidden[-1]
        self.combine: nn.ModuleList | None = None
        if len(layout.keys) > 1:
            self.combine = _mlp(hidden[-1] * len(layout.keys), feat_hidden)
            self.out_dim = feat_hidden[-1]

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        parts = [tanh_mlp(mlp, obs[:, part]) for mlp, part in zip(self.per_key, self.slices, strict=True)]
        if self.combine is None:
            return parts[0]
        return tanh_mlp(self.combine, torch.cat(parts, dim=-1))


class ActorCritic(nn.Module):
    """``forward(obs)`` → action mean ``[n, A]`` and value ``[n]``; ``log_std`` ``[A]``.

    That pair and ``log_std`` are what the learner and the collector use of any model.
    """

    def __init__(
        self,
        layout: ObsLayout,
        action_dim: int,
        hidden: Sequence[int] = (64, 64),
        feat_hidden: Sequence[int] = (64,),
    ):
        super().__init__()
        self.layout = layout
        self.actor_encoder = Encoder(layout, hidden, feat_hidden)
        self.critic_encoder = Encoder(layout, hidden, feat_hidden)
        self.mean_head = nn.Linear(self.actor_encoder.out_dim, action_dim)
        self.value_head = nn.Linear(self.critic_encoder.out_dim, 1)
        self.log_std = nn.Parameter(torch.zeros(action_dim))
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.orthogonal_(module.weight, gain=1.0)
                nn.init.zeros_(module.bias)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns the action mean ``[n, A]`` and the value ``[n]``."""
        return self.action_mean(obs), self.value(obs)

    def action_mean(self, obs: torch.Tensor) -> torch.Tensor:
        return self.mean_head(self.actor_encoder(obs))

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.value_head(self.critic_encoder(obs)).squeeze(-1)
