"""bench ppo's child process: one training of a case, timed (``python -m benchmarks.ppo_runs SPEC``,
through ``benchmarks.children``; ``benchmarks.ppo`` starts them and says what is measured).

A spec names the trainer (``ours``: derl, ``sb3``: Stable-Baselines3, ``profile``: derl instrumented
by ``benchmarks.ppo_profile``), the case, iterations and seed, and for derl whether to ``record`` the
trajectories for the physics replay (``benchmarks.ppo_replay``) or count episode ``returns``.
Each trainer's imports stay in its own function: a child imports only what it runs (peak RSS).
"""

from __future__ import annotations

import resource
import time
from collections.abc import Callable

import gymnasium as gym
import numpy as np

from benchmarks.children import serve
from benchmarks.ppo_replay import EpisodeReturns, StateRecorder, lockstep_physics_seconds, physics_seconds
from derl.checked_config import Config, load_config
from derl.envs.config import WorldCfg
from derl.threads import limit_threads


def speed_overrides(iters: int) -> dict:
    """One worker with DERL's PPO shape: 32 envs x 128 steps for ``iters`` iterations, one torch thread."""
    return {"PPO.NUM_ENVS": 32, "PPO.TIMESTEPS": 128, "PPO.MAX_STATE_ACTION_PAIRS": iters * 32 * 128,
            "TORCH_THREADS": 1, "DEVICE": "cpu"}


def case_config(case: dict, iters: int) -> Config:
    """The case's task config for unimals, the defaults for Gymnasium envs; DERL's PPO keys (a case's
    ``sim`` may put them on MuJoCo Warp: its ``SIM.BACKEND``, ``DEVICE`` and ``PPO.NUM_ENVS``)."""
    overrides = speed_overrides(iters)
    if "sim" in case:
        num_envs = case["sim"]["PPO.NUM_ENVS"]
        overrides.update(case["sim"], **{"PPO.MAX_STATE_ACTION_PAIRS": iters * num_envs * 128})
    return load_config(case["config"] if case["kind"] == "unimal" else None, overrides)


def env_factory(case: dict, world: WorldCfg, flat: bool) -> Callable[[int], gym.Env]:
    """``make(i)`` builds one env (SB3 steps them in its ``DummyVecEnv``)."""
    if case["kind"] == "unimal":
        from derl.envs import make_env  # lazy: each trainer's child imports only what it runs (peak RSS)

        return lambda _i: make_env(world, case["xml"], flat=flat)
    return lambda _i: gym.make(case["env_id"])


def vector_env_factory(case: dict, world: WorldCfg) -> Callable:
    """What derl trains on: ``factory(num_envs, first_index)``, the batched Unimal env or Gymnasium's
    ``SyncVectorEnv`` of an env id."""
    from derl.training.envs import GymEnvFactory, UnimalEnvFactory  # lazy: as in env_factory

    return UnimalEnvFactory(world, case["xml"]) if case["kind"] == "unimal" else GymEnvFactory(case["env_id"])


def run_ours(case: dict, iters: int, seed: int, record: bool, with_returns: bool) -> dict:
    """One derl training; ``with_returns`` adds the episode-return wrapper (return runs only: speed
    runs time derl as a worker runs it), ``record`` the physics replay after it."""
    from derl.ppo import OnIteration, train  # lazy: the SB3 child never imports derl's learner

    cfg = case_config(case, iters)
    base = vector_env_factory(case, cfg.world)
    recorders: list[StateRecorder] = []
    returns: list[float] = []

    def make(num_envs: int, first_index: int = 0, device=None):
        env = base(num_envs, first_index, device)
        if record:
            recorders.append(StateRecorder(env))
            env = recorders[-1]
        return EpisodeReturns(env, returns) if with_returns else env

    records: list[dict] = []
    cpu_started = time.process_time()
    result = train(cfg.trainer, make if record or with_returns else base, seed=seed,
                   callbacks=[OnIteration(records.append)])
    cpu = time.process_time() - cpu_started
    collect = sum(r["collect_seconds"] for r in records)
    update = sum(r["update_seconds"] for r in records)
    out = {
        "env_steps": result.env_steps,
        "wall_time": result.wall_time,
        "cpu_seconds": cpu,
        "setup_seconds": result.wall_time - collect - update,
        "collect_seconds": collect,
        "update_seconds": update,
        "final_return": float(np.mean(returns[-100:])) if returns else None,
    }
    if record:
        replays = [replay for recorder in recorders for replay in recorder.replays]
        out["physics_seconds"], out["physics_steps"] = physics_seconds(replays)
        out["lockstep_physics_seconds"] = lockstep_physics_seconds(replays)
    return out


def run_sb3(case: dict, iters: int, seed: int) -> dict:
    """One Stable-Baselines3 training with DERL's settings (``benchmarks.ppo``'s docstring)."""
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    limit_threads(1)  # torch is loaded now (derl's trainer does this itself)
    torch.optim.Adam([torch.zeros(1, requires_grad=True)])  # its one-off import is not timed
    cfg = case_config(case, iters)
    make = env_factory(case, cfg.world, flat=True)
    started, cpu_started = time.perf_counter(), time.process_time()
    venv = DummyVecEnv([lambda i=i: Monitor(make(i)) for i in range(32)])
    venv.seed(seed)
    venv = VecNormalize(venv, norm_obs=True, norm_reward=True, clip_obs=10.0, clip_reward=10.0,
                        gamma=0.99, epsilon=1e-8)

    class Split(BaseCallback):
        def __init__(self):
            super().__init__()
            self.collect = 0.0

        def _on_rollout_start(self):
            self._started = time.perf_counter()

        def _on_rollout_end(self):
            self.collect += time.perf_counter() - self._started

        def _on_step(self):
            return True

    model = PPO(
        "MlpPolicy", venv, learning_rate=lambda progress: 3e-4 * progress, n_steps=128, batch_size=512,
        n_epochs=4, gamma=0.99, gae_lambda=0.95, clip_range=0.2, clip_range_vf=0.2, ent_coef=0.01,
        vf_coef=0.5, max_grad_norm=0.5, target_kl=0.2 / 1.5, seed=seed, device="cpu",
        policy_kwargs={"net_arch": {"pi": [64, 64], "vf": [64, 64]}, "activation_fn": torch.nn.Tanh,
                       "log_std_init": 0.0, "ortho_init": True},
    )
    split = Split()
    learn_started = time.perf_counter()
    model.learn(total_timesteps=iters * 32 * 128, callback=split)
    finished, cpu = time.perf_counter(), time.process_time() - cpu_started
    returns = [info["r"] for info in model.ep_info_buffer]
    return {
        "env_steps": int(model.num_timesteps),
        "wall_time": finished - started,
        "cpu_seconds": cpu,
        "setup_seconds": learn_started - started,
        "collect_seconds": split.collect,
        "update_seconds": finished - learn_started - split.collect,
        "final_return": float(np.mean(returns)) if returns else None,
    }


def run_profiled(case: dict, iters: int, seed: int) -> dict:
    """One derl training with its components timed (``benchmarks.ppo_profile.profile_run``)."""
    from benchmarks.ppo_profile import profile_run  # lazy: only the profiled child imports the profiler

    cfg = case_config(case, iters)
    return profile_run(cfg.trainer, vector_env_factory(case, cfg.world), seed)


def child(spec: dict) -> dict:
    """The spec's training (module docstring), with the child's peak RSS."""
    if spec["trainer"] == "ours":
        out = run_ours(spec["case"], spec["iters"], spec["seed"], spec.get("record", False),
                       spec.get("returns", False))
    elif spec["trainer"] == "profile":
        out = run_profiled(spec["case"], spec["iters"], spec["seed"])
    else:
        out = run_sb3(spec["case"], spec["iters"], spec["seed"])
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


if __name__ == "__main__":
    limit_threads(1)  # each trainer measured on one core, its BLAS included
    serve(child)
