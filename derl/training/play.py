"""Playing a trained policy in its env: episodes with mean or sampled actions, and video frames.

The one loop behind a published morphology's video (``derl.evolution.backend``) and a replay of a
finished run (``derl.analysis.replay``); ``derl.training.run.evaluate`` plays a training's
checkpoint on the trainer's own vector env instead.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from derl.envs import make_env
from derl.envs.config import WorldCfg
from derl.envs.media import VIDEO_SIZE
from derl.ppo.episode_stats import EpisodeStats
from derl.ppo.policy import load_policy
from derl.threads import limit_threads


def run_policy(world: WorldCfg, xml_path: Path, checkpoint: Path, seed: int, *, torch_threads: int,
               video_frames: int = 0, size: tuple[int, int] = VIDEO_SIZE, deterministic: bool = True,
               episodes: int = 1) -> tuple[list[dict[str, float]], list[np.ndarray], float]:
    """``episodes`` episodes (seeds ``seed``, ``seed + 1``, ...) and ``video_frames`` rendered frames, in
    ``world`` on ``torch_threads`` threads (``TORCH_THREADS``).

    Actions are the policy's mean, or sampled (``deterministic=False``, torch seeded with ``seed``).
    Returns the episodes' ``info["episode"]`` records, the frames and the frame rate.
    """
    limit_threads(torch_threads)  # replays, reports and --eval play on the budget the trainer had
    policy = load_policy(checkpoint)
    torch.manual_seed(seed)  # the action noise of a stochastic replay
    width, height = size
    env = EpisodeStats(make_env(world, str(xml_path), render_mode="rgb_array" if video_frames else None,
                                width=width, height=height))
    frames: list[np.ndarray] = []
    finished: list[dict[str, float]] = []
    try:
        obs, _ = env.reset(seed=seed)
        while len(finished) < episodes or len(frames) < video_frames:
            action = policy.act(obs, deterministic=deterministic, action_space=env.action_space)
            obs, _, terminated, truncated, info = env.step(action)
            if len(frames) < video_frames:
                frames.append(env.render())
            if terminated or truncated:
                finished.append(dict(info["episode"]))
                obs, _ = env.reset(seed=seed + len(finished))
        fps = 1.0 / env.unwrapped.dt
    finally:
        env.close()
    return finished[:max(episodes, 1)], frames, fps
