"""Where one worker's PPO time goes: microseconds per env step per component (``bench.py ppo --profile``).

The trainer runs as in a speed run (one process, one torch thread, DERL's defaults) with its
pieces wrapped by timers; each timer counts its own time, not that of the timed calls nested in
it (exclusive time), so the components add up to the run:

==========================  ===========================================================
component                   what
==========================  ===========================================================
physics                     ``mujoco.batch.Batch.step`` (the batched Unimal env's substeps) or
                            ``mujoco.mj_step`` (single envs)
env_python                  ``UnimalBatch.step`` minus physics and observations: rewards, flags over
                            arrays (or single envs' ``step`` and wrappers minus physics)
observations                ``UnimalBatch.observe``: proprioception and the task's keys (VT's height
                            map), after each step and each restart
env_reset                   ``UnimalBatch.reset`` and ``restart`` (or single envs' ``reset``): episode
                            ends and the first reset (terrain drawn, props placed, the state reset)
episode_bookkeeping         ``EpisodeStatistics``: the step's info values, per-episode sums
vector_env                  the vector env's ``step`` minus the above: autoreset, final observations
                            and infos (and a ``SyncVectorEnv``'s loop over its envs)
policy_forward              action sampling, log-probabilities and values (NumPy forward)
normalisation               observation and reward normalisers (statistics and scaling)
collector                   the rest of collection: rollout writes, action clipping
gae                         GAE, advantage normalisation, the batch as tensors
update                      the PPO epochs: forward, backward, optimiser steps
iteration                   the rest of an iteration: episode log, metrics record
setup_envs, setup_learner   building the envs; the model, optimiser, normalisers, rollout
other                       the rest of ``train`` (first reset's Python, summary, close)
==========================  ===========================================================

Timers read the wall clock (``perf_counter``: about 50 ns a read; CPU clocks cost a system call
each, several microseconds per env step); every figure is then scaled by the run's CPU time over
its wall time, so that time the process spent descheduled on a shared machine is spread
proportionally instead of counting as work. ``plain_us_per_env_step`` is the same run without
timers (CPU time), the honest total; the timers themselves cost the difference.

Worker start-up (``setup``) is the CPU time of building the envs, model and normalisers and of
the first reset, with its share of a ``PPO.MAX_STATE_ACTION_PAIRS`` (5e6) training at the plain
rate.

``physics_replay_us_per_env_step`` is ``mj_step`` replaying the run's trajectories one env at a
time, ``lockstep_physics_replay_us_per_env_step`` the same with the envs in lockstep, the physics
limit of a lockstep trainer (see ``benchmarks.ppo``).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import mujoco
import mujoco.batch
from gymnasium.vector import VectorEnv

from derl.envs import batch
from derl.ppo import acting, episode_stats, learner, normalize, rollout, train, trainer
from derl.ppo.config import TrainerCfg

FULL_TRAINING_STEPS = 5_000_000


class Profiler:
    """Exclusive wall time per name of wrapped callables (nested timers subtract from their parent)."""

    def __init__(self) -> None:
        self.exclusive: dict[str, float] = defaultdict(float)
        self.inclusive: dict[str, float] = defaultdict(float)
        self._stack = [0.0]  # time of the timed calls nested in each open call
        self._patched: list[tuple[object, str, object]] = []  # (owner, attribute, own value or None)

    def wrap(self, fn: Callable, name: str) -> Callable:
        clock, stack, exclusive, inclusive = time.perf_counter, self._stack, self.exclusive, self.inclusive

        def timed(*args, **kwargs):
            stack.append(0.0)
            started = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                elapsed = clock() - started
                exclusive[name] += elapsed - stack.pop()
                inclusive[name] += elapsed
                stack[-1] += elapsed

        return timed

    def patch(self, owner, attribute: str, name: str) -> None:
        """Replaces ``owner.attribute`` by its timed version until ``restore()``."""
        self._patched.append((owner, attribute, vars(owner).get(attribute)))
        setattr(owner, attribute, self.wrap(getattr(owner, attribute), name))

    def restore(self) -> None:
        """Puts back what ``patch`` replaced (an inherited method is inherited again)."""
        for owner, attribute, own in reversed(self._patched):
            if own is None:
                delattr(owner, attribute)
            else:
                setattr(owner, attribute, own)
        self._patched.clear()


def _instrument_derl(profiler: Profiler) -> None:
    patch = profiler.patch
    patch(mujoco, "mj_step", "physics")
    patch(mujoco.batch.Batch, "step", "physics")
    patch(batch.UnimalBatch, "step", "env_python")
    patch(batch.UnimalBatch, "reset", "env_reset")
    patch(batch.UnimalBatch, "restart", "env_reset")
    patch(batch.UnimalBatch, "observe", "observations")
    patch(episode_stats.EpisodeStatistics, "add", "episode_bookkeeping")
    patch(episode_stats.EpisodeStatistics, "finished", "episode_bookkeeping")
    patch(rollout, "vector_step_values", "episode_bookkeeping")
    for method in ("sample", "value"):
        patch(acting.NumpyActorCritic, method, "policy_forward")
    for method in ("update", "normalize"):
        patch(normalize.ObsNormalizer, method, "normalisation")
    patch(normalize.ReturnNormalizer, "normalize", "normalisation")
    patch(rollout.Collector, "collect", "collector")
    patch(rollout.Collector, "reset", "first_reset")
    patch(learner.Learner, "batch", "gae")
    patch(learner.Learner, "update", "update")
    patch(trainer.PPO, "iterate", "iteration")
    patch(trainer.PPO, "__init__", "setup_learner")


def _instrument_env(profiler: Profiler, env: gym.Env, done: set[type]) -> None:
    """Wraps ``step`` and ``reset`` of every class in a single env's wrapper chain, once."""
    layer = env
    while True:
        cls = type(layer)
        if cls not in done:
            done.add(cls)
            profiler.patch(cls, "step", "env_python")
            profiler.patch(cls, "reset", "env_reset")
        if not isinstance(layer, gym.Wrapper):
            return
        layer = layer.env


def _instrumenting_factory(profiler: Profiler, make_vec_env: Callable[[int, int, Any], VectorEnv]) -> Callable:
    """Times building the envs, the vector env's ``step`` and (a ``SyncVectorEnv``'s) single envs."""
    done: set[type] = set()

    def build(num_envs: int, first_index: int, device: Any) -> VectorEnv:
        envs = make_vec_env(num_envs, first_index, device)
        if type(envs) not in done:
            done.add(type(envs))
            profiler.patch(type(envs), "step", "vector_env")
        for env in getattr(envs, "envs", ()):
            _instrument_env(profiler, env, done)
        return envs

    return profiler.wrap(build, "setup_envs")


def profile_run(trainer: TrainerCfg, make_vec_env: Callable[[int, int, Any], VectorEnv], seed: int) -> dict:
    """One instrumented training: seconds per component (exclusive, wall) and the run's clocks."""
    profiler = Profiler()
    try:
        _instrument_derl(profiler)
        build = _instrumenting_factory(profiler, make_vec_env)
        wall, cpu = time.perf_counter(), time.process_time()
        result = train(trainer, build, seed=seed)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    finally:
        profiler.restore()
    return {"env_steps": result.env_steps, "wall_seconds": wall, "cpu_seconds": cpu,
            "exclusive": dict(profiler.exclusive), "inclusive": dict(profiler.inclusive)}


def summarise(profiled: dict, plain: dict, physics_replay_rate: float, lockstep_rate: float) -> dict:
    """us per env step per component (CPU-scaled), the plain total, the start-up and its share."""
    steps = profiled["env_steps"]
    scale = 1e6 * profiled["cpu_seconds"] / profiled["wall_seconds"] / steps
    exclusive = dict(profiled["exclusive"])
    exclusive.pop("first_reset", None)  # its Python outside the env's reset goes to "other"
    parts = {name: seconds * scale for name, seconds in exclusive.items()}
    parts["other"] = (profiled["wall_seconds"] - sum(exclusive.values())) * scale
    plain_us = 1e6 * plain["cpu_seconds"] / plain["env_steps"]
    inclusive = profiled["inclusive"]
    setup_wall = inclusive.get("setup_learner", 0.0) + inclusive.get("first_reset", 0.0)
    setup_cpu = setup_wall * profiled["cpu_seconds"] / profiled["wall_seconds"]
    full_training = setup_cpu + FULL_TRAINING_STEPS * plain_us * 1e-6
    ordered = dict(sorted(parts.items(), key=lambda item: -item[1]))
    return {
        "us_per_env_step": {name: round(value, 2) for name, value in ordered.items()},
        "profiled_us_per_env_step": round(sum(parts.values()), 2),
        "plain_us_per_env_step": round(plain_us, 2),
        "physics_replay_us_per_env_step": round(1e6 / physics_replay_rate, 2),
        "plain_vs_physics_alone": round(1e6 / physics_replay_rate / plain_us, 3),
        "lockstep_physics_replay_us_per_env_step": round(1e6 / lockstep_rate, 2),
        "plain_vs_lockstep_physics": round(1e6 / lockstep_rate / plain_us, 3),
        "setup_seconds": round(setup_cpu, 3),
        "setup_share_of_5e6_steps": float(f"{setup_cpu / full_training:.3g}"),  # a small share keeps its digits
    }
