"""PPO for one morphology per process: DERL's actor-critic, losses and schedule, and a collector
that steps any Gymnasium vector env, or a device env's tensors where they lie (``derl.ppo.rollout``)."""

from derl.ppo.callbacks import Callback, OnIteration, SaveWhile, StopWhen
from derl.ppo.policy import Policy, load_policy
from derl.ppo.trainer import TrainResult, train

__all__ = ["Callback", "OnIteration", "Policy", "SaveWhile", "StopWhen", "TrainResult", "load_policy", "train"]
