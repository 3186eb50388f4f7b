"""The learner's config sections: PPO (``PPO``) and the policy's networks (``MODEL``). Values follow DERL."""

from __future__ import annotations

from dataclasses import dataclass

from derl.config import COUNT, NON_NEGATIVE, POSITIVE, UNIT_INTERVAL, Range, Section, key

# PPO.LR_SCALING's values; derl.ppo.trainer.LR_SCALINGS implements them (a test keeps the two equal).
LR_SCALING_NAMES = ("none", "sqrt", "linear")


@dataclass(frozen=True)
class PpoCfg(Section):
    GAMMA: float = key(0.99, "discount factor", UNIT_INTERVAL)
    GAE_LAMBDA: float = key(0.95, "GAE lambda", UNIT_INTERVAL)
    CLIP_EPS: float = key(0.2, "clip range of the surrogate and value losses", POSITIVE)
    EPOCHS: int = key(4, "passes over a rollout per iteration", COUNT)
    BATCH_SIZE: int = key(512, "minibatch size (rows of a rollout per optimiser step)", COUNT)
    VALUE_COEF: float = key(0.5, "weight of the value loss", NON_NEGATIVE)
    KL_TARGET_COEF: float = key(20.0, "stop an epoch when the approximate KL exceeds this times 0.01", POSITIVE)
    USE_CLIP_VALUE_FUNC: bool = key(True, "clip the value loss as the surrogate")
    ENTROPY_COEF: float = key(0.01, "weight of the entropy bonus", NON_NEGATIVE)
    TIMESTEPS: int = key(128, "steps per env per PPO iteration", COUNT)
    NUM_ENVS: int = key(32, "envs of one training (per rank), stepped in lockstep", COUNT)
    BASE_LR: float = key(3e-4, "Adam learning rate at the start", POSITIVE)
    EPS: float = key(1e-5, "Adam epsilon", POSITIVE)
    LINEAR_LR_DECAY: bool = key(True, "decay the learning rate linearly to 0 over the budget")
    MAX_GRAD_NORM: float = key(0.5, "gradient clipping norm", POSITIVE)
    MAX_STATE_ACTION_PAIRS: int = key(5_000_000, "env steps per morphology (all envs and ranks together)",
                                      Range(1, 2**63 - 1))
    MAX_ITERS: int = key(-1, "derived, cannot be set: `MAX_STATE_ACTION_PAIRS // (TIMESTEPS * NUM_ENVS)`; "
                             "N data-parallel ranks run `MAX_ITERS // N`", derived=True)
    LR_SCALING: str = key("none", "data-parallel runs: learning rate times 1, sqrt(N) or N for N ranks "
                                  "(`none`, `sqrt`, `linear`)", choices=LR_SCALING_NAMES)
    AMP: bool = key(False, "bf16 autocast of the learner on CUDA (ignored on the CPU)")
    VIDEO_LENGTH: int = key(1000, "frames of an `EVO.VIDEOS_LAST_N` video", COUNT)

    def __post_init__(self) -> None:
        per_iter = self.TIMESTEPS * self.NUM_ENVS  # checked positive by the loader; 0 only before its check
        iters = max(1, int(self.MAX_STATE_ACTION_PAIRS) // per_iter) if per_iter > 0 else 1
        object.__setattr__(self, "MAX_ITERS", iters)


@dataclass(frozen=True)
class ModelCfg(Section):
    PRO_HIDDEN_DIMS: tuple[int, ...] = key([64, 64], "hidden layers of the actor and critic MLPs", COUNT)
    OBS_FEAT_HIDDEN_DIMS: tuple[int, ...] = key([64], "hidden layers of the encoder of each other observation key",
                                                COUNT)


@dataclass(frozen=True)
class TrainerCfg:
    """What a training reads: its two sections and where and how often it runs
    (``derl.checked_config.Config.trainer``)."""

    PPO: PpoCfg
    MODEL: ModelCfg
    DEVICE: str
    TORCH_THREADS: int
    CHECKPOINT_PERIOD: int
