"""A trained policy loaded from a checkpoint, for replay and evaluation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from derl.ppo.checkpoint import load_checkpoint
from derl.ppo.device import resolve_device
from derl.ppo.networks import ActorCritic
from derl.ppo.normalize import ObsNormalizer
from derl.ppo.obs_layout import ObsLayout


class Policy:
    """Normalises observations with the training statistics (frozen) and runs the actor."""

    def __init__(self, model: ActorCritic, layout: ObsLayout, obs_norm: ObsNormalizer, device: torch.device):
        self.model, self.layout, self.obs_norm, self.device = model.eval(), layout, obs_norm, device

    def _flatten(self, obs: Any) -> tuple[np.ndarray, bool]:
        """Returns ``[n, D]`` float32 observations and whether the input was a single one."""
        first = obs[self.layout.keys[0]] if self.layout.is_dict else obs
        return self.layout.flatten(obs), np.ndim(first) == 1

    @torch.no_grad()
    def act(self, obs: Any, deterministic: bool = True, action_space: Any = None) -> np.ndarray:
        """Action(s) for one observation or a batch; the mean action when ``deterministic``.

        With a Box ``action_space``, clipped to its bounds, as in training: the actor's mean is
        unbounded, and an env must never receive an action outside its space.
        """
        flat, single = self._flatten(obs)
        tensor = torch.from_numpy(self.obs_norm.normalize(flat)).to(self.device)
        action = self.model.action_mean(tensor)
        if not deterministic:
            action = action + self.model.log_std.exp() * torch.randn_like(action)
        action = action.cpu().numpy()
        if action_space is not None:
            action = np.clip(action, action_space.low, action_space.high).astype(np.float32)
        return action[0] if single else action


def load_policy(checkpoint_path: str | Path, device: str = "cpu") -> Policy:
    """Loads the actor and observation statistics of a ``derl.ppo.train`` checkpoint."""
    torch_device = resolve_device(device)
    state = load_checkpoint(checkpoint_path)  # on the CPU: the normaliser's statistics are NumPy arrays
    spec = state["model_spec"]
    layout = ObsLayout.from_dict(spec["layout"])
    model = ActorCritic(layout, spec["action_dim"], spec["hidden"], spec["feat_hidden"]).to(torch_device)
    model.load_state_dict(state["model"])
    obs_norm = ObsNormalizer(*layout.normalized_columns())
    obs_norm.load_state_dict(state["obs_norm"])
    return Policy(model, layout, obs_norm, torch_device)
