"""PPO for one morphology per process: DERL's actor-critic, losses and schedule, and a collector
that steps any Gymnasium vector env, or a device env's tensors where they lie (``derl.ppo.rollout``).

The names below load on first use: importing ``derl.ppo.config`` (the ``PPO`` and ``MODEL`` sections
every config loader reads, the coordinator's included) must not import torch, which takes seconds.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what checkers and the API docs see; at run time ``__getattr__`` imports them
    from derl.ppo.callbacks import Callback, OnIteration, SaveWhile, StopWhen
    from derl.ppo.policy import Policy, load_policy
    from derl.ppo.trainer import TrainResult, train

_HOMES = {"Callback": "callbacks", "OnIteration": "callbacks", "SaveWhile": "callbacks", "StopWhen": "callbacks",
          "Policy": "policy", "load_policy": "policy", "TrainResult": "trainer", "train": "trainer"}

__all__ = ["Callback", "OnIteration", "Policy", "SaveWhile", "StopWhen", "TrainResult", "load_policy", "train"]


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'derl.ppo' has no attribute {name!r}")
    return getattr(importlib.import_module(f"derl.ppo.{_HOMES[name]}"), name)
