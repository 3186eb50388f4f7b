"""Replay a published morphology's trained policy from the run folder alone.

The env is the run's own (``config.yaml``: task, terrain, episode length), the body is
``xml/<id>.xml`` and the policy ``models/<id>.pt``. Actions are the policy's mean, so a replay
with the same seed repeats exactly, and gives what ``tools/train_ppo.py --eval`` gives for the
same checkpoint, config and seed. A video keeps going past the end of the first episode (the env
resets, seeded ``seed + 1``, ...) until it has its frames, as the original's video recorder did;
the results are those of the first episode.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from derl.config import CfgNode
from derl.ppo.episode_stats import REWARD_PREFIX

if TYPE_CHECKING:
    from derl.analysis.run import RunView

VIDEO_SIZE = (320, 240)  # width, height; multiples of 16 for MP4


@dataclass(frozen=True)
class ReplayResult:
    """The first episode of a replay: return, its reward terms, the task metric, final x."""

    id: str
    seed: int
    episode_return: float
    terms: dict[str, float]
    metric: float
    x_pos: float
    length: int
    video: str | None = None
    frames: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "seed": self.seed, "return": self.episode_return, "terms": self.terms,
                "metric": self.metric, "x_pos": self.x_pos, "length": self.length, "video": self.video,
                "frames": self.frames}


def with_episode_length(cfg: CfgNode, steps: int) -> CfgNode:
    tree = cfg.to_dict()
    tree["ENV"]["EPISODE_LENGTH"] = int(steps)
    return CfgNode(tree)


def run_policy(cfg: CfgNode, xml_path: Path, checkpoint: Path, seed: int, *, video_frames: int = 0,
               size: tuple[int, int] = VIDEO_SIZE) -> tuple[dict[str, float], list[np.ndarray], float]:
    """One deterministic episode (and ``video_frames`` rendered frames, one per step).

    Returns the first episode's ``info["episode"]`` record, the frames and the frame rate.
    """
    from derl.envs import make_env
    from derl.ppo.episode_stats import EpisodeStats
    from derl.ppo.policy import load_policy

    policy = load_policy(checkpoint)
    width, height = size
    env = EpisodeStats(make_env(cfg, str(xml_path), render_mode="rgb_array" if video_frames else None,
                                width=width, height=height))
    frames: list[np.ndarray] = []
    first: dict[str, float] | None = None
    episode = 0
    try:
        obs, _ = env.reset(seed=seed)
        while first is None or len(frames) < video_frames:
            action = policy.act(obs, deterministic=True, action_space=env.action_space)
            obs, _, terminated, truncated, info = env.step(action)
            if len(frames) < video_frames:
                frames.append(env.render())
            if terminated or truncated:
                if first is None:
                    first = dict(info["episode"])
                episode += 1
                obs, _ = env.reset(seed=seed + episode)
        fps = 1.0 / env.unwrapped.dt
    finally:
        env.close()
    return first, frames, fps


def replay(view: RunView, morphology_id: str, *, seed: int | None = None, steps: int | None = None,
           video: str | Path | None = None, video_steps: int | None = None,
           size: tuple[int, int] = VIDEO_SIZE) -> ReplayResult:
    """Replays a published morphology of ``view`` deterministically.

    Args:
        seed: the env seed of the episode (default: the run's ``RNG_SEED``, as ``train_ppo.py --eval``).
        steps: episode length (default: the run's ``ENV.EPISODE_LENGTH``); an episode may end sooner.
        video: write a video of ``video_steps`` frames (default ``steps`` or the episode length) here.
    """
    from derl.analysis.media import write_video
    from derl.analysis.run import RunError

    view.require_published(morphology_id)
    run = view.run
    checkpoint, xml_path = run.checkpoint_path(morphology_id), run.xml_path(morphology_id)
    for path in (checkpoint, xml_path):
        if not path.is_file():
            raise RunError(f"{path} is missing: cannot replay {morphology_id}")
    if steps is not None and steps < 1:
        raise RunError(f"--steps must be at least 1, got {steps}")
    cfg = view.cfg if steps is None else with_episode_length(view.cfg, steps)
    seed = cfg.RNG_SEED if seed is None else seed
    frames_wanted = 0 if video is None else (video_steps or cfg.ENV.EPISODE_LENGTH)
    episode, frames, fps = run_policy(cfg, xml_path, checkpoint, seed, video_frames=frames_wanted, size=size)
    written = None
    if video is not None:
        Path(video).parent.mkdir(parents=True, exist_ok=True)
        written = str(write_video(frames, Path(video), fps))
    terms = {k: float(v) for k, v in episode.items() if k.startswith(REWARD_PREFIX)}
    return ReplayResult(
        id=morphology_id, seed=seed, episode_return=float(episode["return"]), terms=terms,
        metric=float(episode.get("metric", math.nan)), x_pos=float(episode.get("x_pos", math.nan)),
        length=int(episode["length"]), video=written, frames=len(frames),
    )
