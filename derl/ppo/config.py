"""The learner's config sections: PPO (``PPO``) and the policy's networks (``MODEL``). Values follow DERL."""

from __future__ import annotations

from dataclasses import dataclass

from derl.config import UNIT_INTERVAL, ConfigError, Range, Section, key

# PPO.LR_SCALING's values; derl.ppo.trainer.LR_SCALINGS implements them (a test keeps the two equal).
LR_SCALING_NAMES = ("none", "sqrt", "linear")
# Upper bounds, far above DERL's values (32 envs x 128 steps, 4 epochs of 512 rows, 5M env steps) and the GPU
# presets' (4096 envs x 24 steps, minibatches of 24,576, 20M env steps): a value past one is a typo
# (``PPO.TIMESTEPS 1e9``), refused at load, not a 462 GiB allocation. A rollout must also fit the node's
# memory (``derl.checked_config``, ``derl.ppo.rollout.Rollout.allocate``).
MAX_ENVS = 2**16
MAX_TIMESTEPS = 2**16
MAX_BATCH_SIZE = 2**24
MAX_ENV_STEPS = 10**12
# Bytes of a rollout per env step: its observation and action (float32 each), and its log-probability, value,
# reward and final value (float32) and terminated and truncated flags (bool) (``derl.ppo.rollout.Rollout``).
# Before a body is built its observation size is unknown: the load checks the least a rollout can take, one
# value of each (``ROLLOUT_LEAST_BYTES_PER_STEP``, 26 bytes); ``Rollout.allocate`` checks the exact figure.
ROLLOUT_BYTES_PER_VALUE = 4
ROLLOUT_FIXED_BYTES_PER_STEP = 4 * 4 + 2
ROLLOUT_LEAST_BYTES_PER_STEP = ROLLOUT_BYTES_PER_VALUE * 2 + ROLLOUT_FIXED_BYTES_PER_STEP
# Hidden layers: 4096 units wide, 16 deep at most (DERL: [64, 64]).
MAX_HIDDEN_WIDTH = 4096
MAX_HIDDEN_LAYERS = 16
# Loss weights and the gradient clip: DERL's are 0.5 and 0.01; a weight past a million is a typo.
COEFFICIENT = Range(0, 1e6)


def rollout_bytes(steps: int, num_envs: int, obs_size: int, action_dim: int) -> int:
    """Bytes of the arrays of a rollout of ``steps`` x ``num_envs`` env steps (``Rollout.allocate``)."""
    per_step = ROLLOUT_BYTES_PER_VALUE * (obs_size + action_dim) + ROLLOUT_FIXED_BYTES_PER_STEP
    return steps * num_envs * per_step + ROLLOUT_BYTES_PER_VALUE * num_envs


def gib(size: int) -> str:
    """``size`` bytes in words: ``462 GiB``, ``1.5 GiB``, ``24 MiB``."""
    value, unit = (size / 2**30, "GiB") if size >= 2**30 else (size / 2**20, "MiB")
    return f"{value:.0f} {unit}" if value >= 10 else f"{value:.1f} {unit}"


@dataclass(frozen=True)
class PpoCfg(Section):
    GAMMA: float = key(0.99, "discount factor", UNIT_INTERVAL)
    GAE_LAMBDA: float = key(0.95, "GAE lambda", UNIT_INTERVAL)
    CLIP_EPS: float = key(0.2, "clip range of the surrogate and value losses",
                           Range(0, 10, low_open=True))
    EPOCHS: int = key(4, "passes over a rollout per iteration", Range(1, 1000))
    BATCH_SIZE: int = key(512, "minibatch size (rows of a rollout per optimiser step)", Range(1, MAX_BATCH_SIZE))
    VALUE_COEF: float = key(0.5, "weight of the value loss", COEFFICIENT)
    KL_TARGET_COEF: float = key(20.0, "stop an epoch when the approximate KL exceeds this times 0.01",
                                Range(0, COEFFICIENT.high, low_open=True))
    USE_CLIP_VALUE_FUNC: bool = key(True, "clip the value loss as the surrogate")
    ENTROPY_COEF: float = key(0.01, "weight of the entropy bonus", COEFFICIENT)
    TIMESTEPS: int = key(128, "steps per env per PPO iteration", Range(1, MAX_TIMESTEPS))
    NUM_ENVS: int = key(32, "envs of one training (per rank), stepped in lockstep", Range(1, MAX_ENVS))
    BASE_LR: float = key(3e-4, "Adam learning rate at the start", Range(0, 10, low_open=True))
    EPS: float = key(1e-5, "Adam epsilon", Range(0, 1, low_open=True))
    LINEAR_LR_DECAY: bool = key(True, "decay the learning rate linearly to 0 over the budget")
    MAX_GRAD_NORM: float = key(0.5, "gradient clipping norm", Range(0, COEFFICIENT.high, low_open=True))
    MAX_STATE_ACTION_PAIRS: int = key(5_000_000, "env steps per morphology (all envs and ranks together)",
                                      Range(1, MAX_ENV_STEPS))
    MAX_ITERS: int = key(-1, "derived, cannot be set: `MAX_STATE_ACTION_PAIRS // (TIMESTEPS * NUM_ENVS)`; "
                             "N data-parallel ranks run `MAX_ITERS // N`", Range(1, MAX_ENV_STEPS),
                             derived=True)
    LR_SCALING: str = key("none", "data-parallel runs: learning rate times 1, sqrt(N) or N for N ranks "
                                  "(`none`, `sqrt`, `linear`)", choices=LR_SCALING_NAMES)
    AMP: bool = key(False, "bf16 autocast of the learner on CUDA (ignored on the CPU)")
    VIDEO_LENGTH: int = key(1000, "frames of an `EVO.VIDEOS_LAST_N` video (held in memory)", Range(1, 10_000))

    def __post_init__(self) -> None:
        per_iter = self.TIMESTEPS * self.NUM_ENVS  # checked positive by the loader; 0 only before its check
        iters = max(1, int(self.MAX_STATE_ACTION_PAIRS) // per_iter) if per_iter > 0 else 1
        object.__setattr__(self, "MAX_ITERS", iters)


@dataclass(frozen=True)
class ModelCfg(Section):
    PRO_HIDDEN_DIMS: tuple[int, ...] = key([64, 64], "hidden layers of the actor and critic MLPs (at most 16)",
                                           Range(1, MAX_HIDDEN_WIDTH, whole=True))
    OBS_FEAT_HIDDEN_DIMS: tuple[int, ...] = key([64], "hidden layers of the encoder of each other observation key "
                                                      "(at most 16)", Range(1, MAX_HIDDEN_WIDTH, whole=True))

    def check(self) -> None:
        for name in ("PRO_HIDDEN_DIMS", "OBS_FEAT_HIDDEN_DIMS"):
            if len(layers := getattr(self, name)) > MAX_HIDDEN_LAYERS:
                raise ConfigError(f"config key MODEL.{name} holds {len(layers)} layers; at most {MAX_HIDDEN_LAYERS}",
                                  f"MODEL.{name}")


@dataclass(frozen=True)
class TrainerCfg:
    """What a training reads: its two sections and where and how often it runs
    (``derl.checked_config.Config.trainer``)."""

    PPO: PpoCfg
    MODEL: ModelCfg
    DEVICE: str
    TORCH_THREADS: int
    CHECKPOINT_PERIOD: int
