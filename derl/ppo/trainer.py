"""DERL's PPO trainer (spec section 3): one morphology, one process, ``PPO.NUM_ENVS`` envs.

Per-iteration metrics are kept in memory and the whole JSON-lines file is rewritten atomically
(``derl.fileio``) at every checkpoint and at the end, not appended line by line: another process
(the evolution, a dashboard) never reads half a line, and after a resume the file matches the
checkpoint's iteration exactly (records past the last checkpoint are dropped with the state they
describe).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

from derl.config import CfgNode
from derl.fileio import atomic_write_text
from derl.ppo.checkpoint import load_checkpoint, save_checkpoint
from derl.ppo.device import resolve_device
from derl.ppo.episodes import EpisodeLog
from derl.ppo.losses import compute_gae, gaussian_entropy, gaussian_log_prob, ppo_loss
from derl.ppo.networks import ActorCritic
from derl.ppo.normalize import ObsNormalizer, ReturnNormalizer
from derl.ppo.optim import FlatAdam
from derl.ppo.pool import make_pool
from derl.ppo.rollout import Collector, Rollout

CHECKPOINT_VERSION = 1


@dataclass
class TrainResult:
    summary: dict[str, float]  # mean of the last 100 episodes: return, __reward__*, x_pos, metric
    env_steps: int  # total, including steps before a resume
    iterations: int  # total, including iterations before a resume
    wall_time: float  # seconds spent in this call
    steps_per_sec: float  # env steps per second in this call
    completed: bool  # False when should_stop() ended the run early


def _learning_rate(cfg: CfgNode, iteration: int) -> float:
    """Linear decay to 0 over ``PPO.MAX_ITERS``, evaluated at the start of ``iteration``."""
    if not cfg.PPO.LINEAR_LR_DECAY:
        return cfg.PPO.BASE_LR
    return cfg.PPO.BASE_LR * (1.0 - iteration / cfg.PPO.MAX_ITERS)


class PPO:
    """Model, optimiser, normalisers and counters of one training run."""

    def __init__(self, cfg: CfgNode, make_env: Callable[[int], gym.Env], seed: int):
        self.cfg = cfg
        self.device = resolve_device(cfg.DEVICE)
        torch.set_num_threads(cfg.TORCH_THREADS)
        torch.manual_seed(seed)
        self.pool = make_pool(make_env, cfg.PPO.NUM_ENVS, cfg.VECENV.TYPE, cfg.VECENV.IN_SERIES)
        layout, action_dim = self.pool.layout, int(np.prod(self.pool.action_space.shape))
        self.model_spec = {
            "layout": layout.to_dict(),
            "action_dim": action_dim,
            "hidden": list(cfg.MODEL.PRO_HIDDEN_DIMS),
            "feat_hidden": list(cfg.MODEL.OBS_FEAT_HIDDEN_DIMS),
        }
        self.model = ActorCritic(
            layout, action_dim, cfg.MODEL.PRO_HIDDEN_DIMS, cfg.MODEL.OBS_FEAT_HIDDEN_DIMS
        ).to(self.device)
        self.optimizer = FlatAdam(self.model, lr=cfg.PPO.BASE_LR, eps=cfg.PPO.EPS)
        self.obs_norm = ObsNormalizer(*layout.normalized_columns())
        self.ret_norm = ReturnNormalizer(cfg.PPO.NUM_ENVS, cfg.PPO.GAMMA)
        self.episode_log = EpisodeLog()
        self.collector = Collector(
            self.pool, self.model, self.obs_norm, self.ret_norm, self.episode_log, seed
        )
        self.rollout = Rollout.allocate(cfg.PPO.TIMESTEPS, cfg.PPO.NUM_ENVS, layout.size, action_dim)
        self.iteration = 0
        self.env_steps = 0
        self.metrics: list[dict] = []

    def update(self) -> dict[str, float]:
        """PPO epochs over the rollout; returns mean losses and statistics."""
        cfg, r, device = self.cfg.PPO, self.rollout, self.device
        advantages, returns = compute_gae(
            r.rewards, r.values, r.bootstrap_value, r.terminated, r.truncated, r.final_values,
            cfg.GAMMA, cfg.GAE_LAMBDA,
        )
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-5)

        def flat(array: np.ndarray) -> torch.Tensor:
            return torch.from_numpy(array.reshape(-1, *array.shape[2:])).to(device)

        columns = [flat(a) for a in (r.obs, r.actions, r.log_probs, r.values, returns, advantages)]
        total = columns[0].shape[0]
        minibatch = min(cfg.BATCH_SIZE, total)
        kl_limit = cfg.KL_TARGET_COEF * 0.01
        sums = torch.zeros(6, device=device)
        count = 0
        for _ in range(cfg.EPOCHS):
            order = torch.randperm(total, device=device)
            shuffled = [column[order] for column in columns]  # one gather per epoch, then slices
            for start in range(0, total - minibatch + 1, minibatch):  # drop the last partial batch
                obs, actions, old_log_probs, old_values, b_returns, b_advantages = (
                    column[start : start + minibatch] for column in shuffled
                )
                mean, value = self.model(obs)
                log_prob = gaussian_log_prob(actions, mean, self.model.log_std)
                terms = ppo_loss(
                    log_prob, old_log_probs, b_advantages, value, old_values, b_returns,
                    gaussian_entropy(self.model.log_std), cfg.CLIP_EPS, cfg.VALUE_COEF,
                    cfg.ENTROPY_COEF, cfg.USE_CLIP_VALUE_FUNC,
                )
                sums += torch.stack([term.detach() for term in terms])
                count += 1
                if terms.approx_kl.item() > kl_limit:  # DERL's KL early stop: end the whole update
                    return self._update_stats(sums, count, stopped=True)
                self.optimizer.zero_grad()
                terms.total.backward()
                self.optimizer.clip_grad_norm(cfg.MAX_GRAD_NORM)
                self.optimizer.step()
        return self._update_stats(sums, count, stopped=False)

    @staticmethod
    def _update_stats(sums: torch.Tensor, count: int, stopped: bool) -> dict[str, float]:
        names = ("loss", "policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction")
        means = (sums / max(count, 1)).tolist()
        stats = {name: float(v) for name, v in zip(names, means, strict=True)}
        stats["kl_early_stop"] = float(stopped)
        return stats

    def iterate(self) -> dict:
        """One collection + update; returns the iteration's metrics record."""
        lr = self.optimizer.lr = _learning_rate(self.cfg, self.iteration)
        started = time.perf_counter()
        self.env_steps += self.collector.collect(self.rollout)
        collected = time.perf_counter()
        stats = self.update()
        updated = time.perf_counter()
        self.iteration += 1
        record = {
            "iteration": self.iteration,
            "env_steps": self.env_steps,
            "steps_per_sec": self.rollout.obs.shape[0] * self.rollout.obs.shape[1] / (updated - started),
            "episodes": self.episode_log.finished,
            **self.episode_log.summary(),
            **stats,
            "lr": lr,
            "collect_seconds": collected - started,
            "update_seconds": updated - collected,
        }
        self.metrics.append(record)
        return record

    def state_dict(self) -> dict:
        return {
            "version": CHECKPOINT_VERSION,
            "model_spec": self.model_spec,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "obs_norm": self.obs_norm.state_dict(),
            "ret_norm": self.ret_norm.state_dict(),
            "episode_log": self.episode_log.state_dict(),
            "iteration": self.iteration,
            "env_steps": self.env_steps,
            "torch_rng": torch.get_rng_state(),
            "action_rng": json.dumps(self.collector.rng.bit_generator.state),
        }

    def load_state_dict(self, state: dict) -> None:
        if state.get("version") != CHECKPOINT_VERSION:
            raise ValueError(f"checkpoint version {state.get('version')} is not {CHECKPOINT_VERSION}")
        if state["model_spec"] != self.model_spec:
            raise ValueError("checkpoint was trained on different observation/action sizes or MODEL keys")
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.obs_norm.load_state_dict(state["obs_norm"])
        self.ret_norm.load_state_dict(state["ret_norm"])
        self.episode_log.load_state_dict(state["episode_log"])
        self.iteration = int(state["iteration"])
        self.env_steps = int(state["env_steps"])
        torch.set_rng_state(state["torch_rng"].cpu())
        self.collector.rng.bit_generator.state = json.loads(state["action_rng"])

    def save(self, checkpoint_path: Path | None, metrics_path: Path | None) -> None:
        if checkpoint_path is not None:
            save_checkpoint(checkpoint_path, self.state_dict())
        if metrics_path is not None:
            lines = "".join(json.dumps(record, allow_nan=False) + "\n" for record in self.metrics)
            atomic_write_text(metrics_path, lines)


def _read_metrics(metrics_path: Path | None, up_to_iteration: int) -> list[dict]:
    if metrics_path is None or not metrics_path.is_file():
        return []
    records = [json.loads(line) for line in metrics_path.read_text().splitlines() if line]
    return [record for record in records if record["iteration"] <= up_to_iteration]


def train(
    cfg: CfgNode,
    make_env: Callable[[int], gym.Env],
    *,
    seed: int,
    checkpoint_path: Path | None = None,
    metrics_path: Path | None = None,
    resume: bool = False,
    should_stop: Callable[[], bool] | None = None,
    on_iteration: Callable[[dict], None] | None = None,
) -> TrainResult:
    """Trains a policy with PPO for ``PPO.MAX_ITERS`` iterations.

    Args:
        cfg: the config (``PPO.*``, ``MODEL.*``, ``VECENV.*``, ``DEVICE``, ``TORCH_THREADS``,
            ``CHECKPOINT_PERIOD``).
        make_env: builds env ``i`` (``0 <= i < PPO.NUM_ENVS``), unwrapped: the trainer adds
            ``EpisodeStats``. Env ``i`` is seeded with ``seed + i`` at its first reset.
        seed: seeds torch (weights init, action noise) and the envs.
        checkpoint_path: written atomically every ``CHECKPOINT_PERIOD`` iterations and at the end.
        metrics_path: per-iteration records as JSON lines (see the module docstring).
        resume: continue from ``checkpoint_path`` if it exists (iteration, env steps, learning-rate
            schedule, normalisers, optimiser and RNG state). Envs restart fresh episodes.
        should_stop: polled once per iteration; a True answer saves and returns early.
        on_iteration: called with each iteration's metrics record (progress display).
    """
    started = time.perf_counter()
    ppo = PPO(cfg, make_env, seed)
    try:
        if resume and checkpoint_path is not None and Path(checkpoint_path).is_file():
            ppo.load_state_dict(load_checkpoint(checkpoint_path, ppo.device))
            ppo.metrics = _read_metrics(metrics_path, ppo.iteration)
        start_steps = ppo.env_steps
        # A resumed run takes new env seeds so it does not replay the first episodes.
        ppo.collector.reset(seed + ppo.env_steps)
        completed = True
        while ppo.iteration < cfg.PPO.MAX_ITERS:
            if should_stop is not None and should_stop():
                completed = False
                break
            record = ppo.iterate()
            if on_iteration is not None:
                on_iteration(record)
            if cfg.CHECKPOINT_PERIOD > 0 and ppo.iteration % cfg.CHECKPOINT_PERIOD == 0:
                ppo.save(checkpoint_path, metrics_path)
        ppo.save(checkpoint_path, metrics_path)
        summary = ppo.episode_log.summary(ppo.pool.episodes_so_far())
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
    )
