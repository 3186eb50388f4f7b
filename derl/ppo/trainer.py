"""DERL's PPO trainer (docs/guides/training.md): one morphology, ``PPO.NUM_ENVS`` envs per rank.

The pieces: ``Collector`` (``derl.ppo.rollout``; on a device env, whose tensors then stay on the
learner's device, too) steps the envs and fills a rollout, ``Learner``
(``derl.ppo.learner``) turns it into PPO epochs, ``PPO`` holds the state of a run and ``train``
is the loop, with ``derl.ppo.callbacks`` for progress, checkpoints and stop requests.

One process is one rank; under ``torchrun`` each of N ranks steps its own envs (env indices
``rank * NUM_ENVS ...``, so different seeds) and the ranks share one model: identical weights
from the same seed (and rank 0's broadcast), gradients averaged per minibatch, observation and
return normaliser statistics merged and finished episodes shared every iteration, a joint KL
early stop and a joint stop request (``derl.ppo.distributed``). ``PPO.MAX_STATE_ACTION_PAIRS``
counts the env steps of all ranks, and so do the metrics. Rank 0 alone writes files.

Per-iteration metrics are kept in memory and the whole JSON-lines file is rewritten atomically
(``derl.fileio``) at every checkpoint and at the end, not appended line by line: another process
(the evolution, a dashboard) never reads half a line. The checkpoint carries the records too and is
written (and made durable) first: the metrics file never describes iterations that no checkpoint
holds, and a resume takes the checkpoint's records, so the file then matches the checkpoint's
iteration exactly, without a gap where a kill fell between the two writes.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from derl.fileio.writes import atomic_write_text
from derl.ppo.callbacks import Callback
from derl.ppo.checkpoint import Checkpoint, CheckpointError, ModelSpec, load_checkpoint, save_checkpoint
from derl.ppo.config import PpoCfg, TrainerCfg
from derl.ppo.device import learner_device
from derl.ppo.distributed import Comm, merge_statistics
from derl.ppo.episodes import EpisodeLog, merge_ranks
from derl.ppo.fastpath import acting
from derl.ppo.learner import Learner
from derl.ppo.metrics_file import checkpoint_records, read_metrics
from derl.ppo.networks import ActorCritic
from derl.ppo.normalize import ObsNormalizer, ReturnNormalizer
from derl.ppo.obs_layout import ObsLayout
from derl.ppo.rollout import Collector, MakeVecEnv, Rollout, env_device
from derl.threads import limit_threads

CHECKPOINT_VERSION = 2  # 2: one action-noise generator state per rank
LR_SCALINGS = {"none": lambda n: 1.0, "sqrt": math.sqrt, "linear": float}  # names: derl.ppo.config.LR_SCALING_NAMES
log = logging.getLogger(__name__)


@dataclass
class TrainResult:
    summary: dict[str, float]  # fitness (derl.ppo.episodes): the last 409,600 env steps' points
    env_steps: int  # total over all ranks, including steps before a resume
    iterations: int  # total, including iterations before a resume
    wall_time: float  # seconds spent in this call
    steps_per_sec: float  # env steps per second in this call (all ranks)
    completed: bool  # False when a stop request ended the run early
    device: str = "cpu"  # this rank's learner device
    world_size: int = 1  # data-parallel ranks


def max_iterations(ppo: PpoCfg, world_size: int) -> int:
    """Iterations of a run of ``world_size`` ranks: ``MAX_STATE_ACTION_PAIRS`` is their total.

    ``MAX_SAP // (T * N * W) == (MAX_SAP // (T * N)) // W``, so this is ``PPO.MAX_ITERS // W``.
    """
    return max(1, ppo.MAX_ITERS // world_size)


def learning_rate(ppo: PpoCfg, iteration: int, world_size: int = 1) -> float:
    """``BASE_LR`` scaled for the ranks (``PPO.LR_SCALING``), decayed linearly to 0 if asked.

    Evaluated at the start of ``iteration``.
    """
    lr = ppo.BASE_LR * LR_SCALINGS[ppo.LR_SCALING](world_size)
    if not ppo.LINEAR_LR_DECAY:
        return lr
    return lr * (1.0 - iteration / max_iterations(ppo, world_size))


class PPO:
    """Model, learner, collector, normalisers and counters of one training run (one rank of it).

    ``device`` is this rank's learner device, decided here once and handed to the env factory;
    ``pool`` is the rank's vector env (``make_vec_env(NUM_ENVS, rank * NUM_ENVS, device)``), ``layout``
    the flat layout of its observations.
    """

    def __init__(self, settings: TrainerCfg, make_vec_env: MakeVecEnv, seed: int, comm: Comm | None = None):
        self.settings = settings
        self.comm = comm = comm or Comm()
        world, rank = comm.world_size, comm.rank
        self.device = learner_device(settings.DEVICE, comm.info.local_rank, world)
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)  # no stray context on cuda:0
        learning_rate(settings.PPO, 0, world)  # a bad PPO.LR_SCALING fails before the envs start
        amp = settings.PPO.AMP and self.device.type == "cuda"
        if settings.PPO.AMP and not amp:
            log.warning("PPO.AMP is ignored on %s: bf16 autocast runs on CUDA only", self.device)
        limit_threads(settings.TORCH_THREADS)
        torch.manual_seed(seed)  # the same weights on every rank
        num_envs = settings.PPO.NUM_ENVS
        self.pool = make_vec_env(num_envs, rank * num_envs, self.device)
        try:
            if self.pool.num_envs != num_envs:
                raise ValueError(f"the env factory built {self.pool.num_envs} envs, PPO.NUM_ENVS is {num_envs}")
            self._build(settings, seed, num_envs, amp)
        except BaseException:
            self.pool.close()
            raise

    def _build(self, settings: TrainerCfg, seed: int, num_envs: int, amp: bool) -> None:
        """The rest of ``__init__``, once the envs exist (which it closes if this fails)."""
        comm, world, rank = self.comm, self.comm.world_size, self.comm.rank
        self.layout = layout = ObsLayout.from_space(self.pool.single_observation_space)
        action_dim = int(np.prod(self.pool.single_action_space.shape))
        self.model_spec: ModelSpec = {
            "layout": layout.to_dict(),
            "action_dim": action_dim,
            "hidden": list(settings.MODEL.PRO_HIDDEN_DIMS),
            "feat_hidden": list(settings.MODEL.OBS_FEAT_HIDDEN_DIMS),
        }
        self.model = ActorCritic(
            layout, action_dim, settings.MODEL.PRO_HIDDEN_DIMS, settings.MODEL.OBS_FEAT_HIDDEN_DIMS
        ).to(self.device)
        self.learner = Learner(self.model, settings.PPO, comm, amp)
        # A device env's tensors stay on its device, which must be the learner's (derl.ppo.rollout).
        env_on = env_device(self.pool)
        if env_on is not None and env_on != self.device:
            raise ValueError(f"the vector env's tensors are on {env_on} but the learner is on {self.device} "
                             f"(DEVICE {settings.DEVICE}): they must be the same device")
        self.obs_norm = ObsNormalizer(*layout.normalized_columns(), device=env_on)
        self.ret_norm = ReturnNormalizer(num_envs, settings.PPO.GAMMA, device=env_on)
        self.episode_log = EpisodeLog()
        self.collector = Collector(self.pool, rank * num_envs, self.obs_norm, self.ret_norm,
                                   *acting(self.model, env_on, seed + rank))
        self.rollout = Rollout.allocate(settings.PPO.TIMESTEPS, num_envs, layout.size, action_dim, device=env_on)
        self.steps_per_iteration = settings.PPO.TIMESTEPS * num_envs * world
        self.max_iters = max_iterations(settings.PPO, world)
        self.iteration = 0
        self.env_steps = 0
        self.metrics: list[dict] = []
        self._mark_shared_statistics()

    @property
    def optimizer(self):
        return self.learner.optimizer

    def _mark_shared_statistics(self) -> None:
        """Remembers the normaliser statistics all ranks share now (the base of the next merge)."""
        self._shared = (self.obs_norm.state_dict(), self.ret_norm.state_dict())

    def share_across_ranks(self, episodes: list[tuple[int, dict[str, float]]]) -> list[tuple[int, dict[str, float]]]:
        """Merges the ranks' normaliser statistics; returns every rank's finished episodes with the step
        at which each ended, by step, then rank and env (as one process with every rank's envs)."""
        comm = self.comm
        if comm.world_size == 1:
            return episodes
        obs_base, ret_base = self._shared
        self.obs_norm.load_state_dict(merge_statistics(self.obs_norm.state_dict(), obs_base, comm))
        self.ret_norm.load_state_dict(merge_statistics(self.ret_norm.state_dict(), ret_base, comm))
        self._mark_shared_statistics()
        self.collector.renormalize()
        return merge_ranks(comm.gather_objects(episodes))

    def iterate(self) -> dict:
        """One collection + update; returns the iteration's metrics record."""
        lr = self.optimizer.lr = learning_rate(self.settings.PPO, self.iteration, self.comm.world_size)
        started = time.perf_counter()
        ended = self.share_across_ranks(self.collector.collect(self.rollout))
        start, per_step = self.env_steps, self.pool.num_envs * self.comm.world_size
        self.env_steps += self.steps_per_iteration
        self.episode_log.add_iteration([(start + (t + 1) * per_step, episode) for t, episode in ended], self.env_steps)
        collected = time.perf_counter()
        stats = self.learner.update(self.learner.batch(self.rollout))
        updated = time.perf_counter()
        self.iteration += 1
        record = {
            "iteration": self.iteration,
            "env_steps": self.env_steps,
            "steps_per_sec": self.steps_per_iteration / (updated - started),
            "episodes": self.episode_log.finished,
            **self.episode_log.current(),
            **stats,
            "lr": lr,
            "collect_seconds": collected - started,
            "update_seconds": updated - collected,
        }
        self.metrics.append(record)
        return record

    def state_dict(self) -> Checkpoint:
        """The checkpoint; a collective (every rank's action-noise state is gathered)."""
        return {
            "version": CHECKPOINT_VERSION,
            "model_spec": self.model_spec,
            "model": self.model.state_dict(),
            "optimizer": self.learner.state_dict(),
            "obs_norm": self.obs_norm.state_dict(),
            "ret_norm": self.ret_norm.state_dict(),
            "episode_log": self.episode_log.state_dict(),
            "iteration": self.iteration,
            "env_steps": self.env_steps,
            "world_size": self.comm.world_size,
            "torch_rng": torch.get_rng_state(),
            "action_rngs": self.comm.gather_objects(self.collector.rng_state()),
            "metrics": self.metrics,  # the records of iterations 1..iteration (rank 0's)
        }

    def load_state_dict(self, state: Checkpoint) -> None:
        """Restores a checkpoint of any world size (a rank beyond the saved ones keeps its fresh
        action noise); version 1 (single-process) checkpoints load too."""
        if state.get("version") not in (1, CHECKPOINT_VERSION):
            raise CheckpointError(f"checkpoint version {state.get('version')} is not {CHECKPOINT_VERSION}")
        if state["model_spec"] != self.model_spec:
            raise CheckpointError("checkpoint was trained on different observation/action sizes or MODEL keys")
        self.model.load_state_dict(state["model"])
        self.learner.load_state_dict(state["optimizer"])
        self.obs_norm.load_state_dict(state["obs_norm"])
        self.ret_norm.load_state_dict(state["ret_norm"])
        self.iteration = int(state["iteration"])
        self.env_steps = int(state["env_steps"])
        self.episode_log.load_state_dict(state["episode_log"], self.env_steps)
        torch.set_rng_state(state["torch_rng"].cpu())
        rngs = state.get("action_rngs") or [state["action_rng"]]
        if self.comm.rank < len(rngs):
            self.collector.load_rng_state(rngs[self.comm.rank])
        self._mark_shared_statistics()

    def save(self, checkpoint_path: Path | None, metrics_path: Path | None) -> None:
        """Writes the checkpoint (durably), then the metrics lines (rank 0); every rank must call it.

        In that order the metrics never describe an iteration that no checkpoint holds: a kill or a
        full disk in between leaves the file behind the checkpoint, and a resume rewrites it from the
        records the checkpoint carries (``train``).
        """
        state = self.state_dict() if checkpoint_path is not None else None
        if not self.comm.is_main:
            return
        if state is not None:
            save_checkpoint(checkpoint_path, state)
        if metrics_path is not None:
            lines = "".join(json.dumps(record, allow_nan=False) + "\n" for record in self.metrics)
            atomic_write_text(metrics_path, lines)


def _save(ppo: PPO, callbacks: Sequence[Callback], checkpoint_path: Path | None, metrics_path: Path | None) -> bool:
    """Writes the checkpoint, unless a callback on any rank says its files are another process's now."""
    if ppo.comm.any(not all(callback.may_save() for callback in callbacks)):
        return False
    ppo.save(checkpoint_path, metrics_path)
    return True


def train(
    settings: TrainerCfg,
    make_vec_env: MakeVecEnv,
    *,
    seed: int,
    checkpoint_path: str | Path | None = None,
    metrics_path: str | Path | None = None,
    resume: bool = False,
    callbacks: Sequence[Callback] = (),
    comm: Comm | None = None,
) -> TrainResult:
    """Trains a policy with PPO for ``PPO.MAX_ITERS // world size`` iterations.

    Args:
        settings: the config (``PPO.*``, ``MODEL.*``, ``DEVICE``, ``TORCH_THREADS``,
            ``CHECKPOINT_PERIOD``).
        make_vec_env: ``make_vec_env(num_envs, first_index, device)`` builds a vector env of
            ``PPO.NUM_ENVS`` envs (``derl.ppo.rollout.ArrayVectorEnv``); rank r gets
            ``first_index = r * NUM_ENVS`` and its learner's ``device``. Env ``i`` is seeded with
            ``seed + i`` at the first reset (the vector env's ``reset(seed=seed + first_index)``). A
            device env's ``device`` must be the learner's.
        seed: seeds torch (weights init, shuffling), the envs and (``seed + rank``) the action noise.
        checkpoint_path: written atomically (by rank 0) every ``CHECKPOINT_PERIOD`` iterations and
            at the end.
        metrics_path: per-iteration records as JSON lines (see the module docstring), rank 0.
        resume: continue from ``checkpoint_path`` if it exists (iteration, env steps, learning-rate
            schedule, normalisers, optimiser and RNG state); rank 0 reads it and sends it to the
            others. Envs restart fresh episodes.
        callbacks: progress, checkpoint and stop hooks (``derl.ppo.callbacks``).
        comm: the ranks of a data-parallel run (``derl.ppo.distributed.ProcessGroup``); None: one.
    """
    started = time.perf_counter()
    checkpoint_path = None if checkpoint_path is None else Path(checkpoint_path)
    metrics_path = None if metrics_path is None else Path(metrics_path)
    ppo = PPO(settings, make_vec_env, seed, comm)
    comm = ppo.comm
    try:
        state = None
        if resume and checkpoint_path is not None:
            found = comm.is_main and checkpoint_path.is_file()
            state = comm.broadcast_object(load_checkpoint(checkpoint_path) if found else None)
        if state is not None:
            try:
                ppo.load_state_dict(state)
            except CheckpointError as err:
                raise CheckpointError(f"{checkpoint_path}: {err}") from None
            if not comm.is_main:
                ppo.metrics = []
            elif "metrics" in state:
                ppo.metrics = checkpoint_records(state["metrics"], ppo.iteration, checkpoint_path)
            else:  # a checkpoint from before it carried its records
                ppo.metrics = read_metrics(metrics_path, ppo.iteration)
        start_steps = ppo.env_steps
        # A resumed run takes new env seeds so it does not replay the first episodes.
        ppo.collector.reset(seed + ppo.env_steps)
        completed = ours = True
        while ppo.iteration < ppo.max_iters:
            if comm.any(any(callback.should_stop() for callback in callbacks)):
                completed = False
                break
            record = ppo.iterate()
            for callback in callbacks:
                callback.on_iteration(record)
            if settings.CHECKPOINT_PERIOD > 0 and ppo.iteration % settings.CHECKPOINT_PERIOD == 0:
                ours = _save(ppo, callbacks, checkpoint_path, metrics_path)
                if not ours:
                    break
                for callback in callbacks:
                    callback.on_checkpoint(ppo.iteration, checkpoint_path)
        ours = ours and _save(ppo, callbacks, checkpoint_path, metrics_path)
        completed = completed and ours
        in_progress = [ep for part in comm.gather_objects(ppo.collector.episodes_so_far()) for ep in part]
        summary = ppo.episode_log.summary(in_progress)
    finally:
        ppo.pool.close()
    wall_time = time.perf_counter() - started
    steps = ppo.env_steps - start_steps
    return TrainResult(
        summary=summary,
        env_steps=ppo.env_steps,
        iterations=ppo.iteration,
        wall_time=wall_time,
        steps_per_sec=steps / wall_time if wall_time > 0 else 0.0,
        completed=completed,
        device=str(ppo.device),
        world_size=comm.world_size,
    )
