"""Config faults that show only while training: a number that stops being finite, memory that runs out.

A training whose rewards or losses stop being finite, or whose arrays do not fit, fails because of what its
config asked for (reward weights that overflow float32, sizes the node cannot hold), not because of its
body: each ends as a ``derl.config.ConfigError`` whose ``keys`` name the keys to change, so a tool prints
one line and exits 2, and a search stops on it as a config fault instead of blaming and retrying
morphologies. ``derl.training.run.train_to_folder`` (``tools/train_ppo.py``) and a search's trainings
(``derl.evolution.backend``) take both guards: ``FiniteTraining`` and ``config_faults``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

from derl.config import ConfigError
from derl.envs.array_sizes import world_arrays
from derl.envs.config import WorldCfg
from derl.ppo.callbacks import Callback
from derl.ppo.config import PpoCfg

# The keys that scale a training's rewards (derl.envs.tasks).
REWARD_KEYS = ("ENV.FORWARD_REWARD_WEIGHT", "ENV.CTRL_COST_WEIGHT", "ENV.STAND_REWARD_WEIGHT",
               "ENV.REACH_REWARD_PARAMS")


class FiniteTraining(Callback):
    """Raises ``ConfigError`` naming the reward weights at the first iteration whose metrics hold a number
    that is not finite (a loss, a mean reward): before that iteration's checkpoint, so the last one saved
    holds finite weights, and before any later callback (TensorBoard, a progress bar) records it."""

    def __init__(self, world: WorldCfg):
        self.weights = {key: world.ENV.get_path(key.split(".", 1)[1]) for key in REWARD_KEYS}

    def on_iteration(self, record: dict) -> None:
        bad = [name for name, value in record.items() if isinstance(value, float) and not math.isfinite(value)]
        if not bad:
            return
        shown = ", ".join(f"{key} {_show(value)}" for key, value in self.weights.items())
        raise ConfigError(f"training stopped at iteration {record.get('iteration')}: {', '.join(bad[:4])} not finite; "
                          f"the rewards the config asks for overflow (config keys {shown}): lower them, then train "
                          "anew or resume from a checkpoint before it with the new values", *REWARD_KEYS)


@contextmanager
def config_faults(world: WorldCfg, ppo: PpoCfg) -> Iterator[None]:
    """Turns a ``MemoryError`` (an allocation the config asked for) into a ``ConfigError`` naming the keys that
    size the training's arrays: the rollout's, then the world's largest first (``derl.envs.array_sizes``)."""
    try:
        yield
    except MemoryError as err:
        keys = ("PPO.NUM_ENVS", "PPO.TIMESTEPS", *(key for array in world_arrays(world, ppo.NUM_ENVS)
                                                   for key in array.keys))
        keys = tuple(dict.fromkeys(keys))
        reason = str(err).splitlines()[0][:200] if str(err) else "MemoryError"
        raise ConfigError(f"training ran out of memory ({reason}): the arrays that config keys {', '.join(keys)} "
                          "size do not fit this node; lower them", *keys) from None


def _show(value: object) -> str:
    return str(list(value)) if isinstance(value, tuple) else f"{value:g}" if isinstance(value, float) else str(value)
