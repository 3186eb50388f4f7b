"""Replay a published morphology's trained policy from the run folder alone.

The env is the run's own (``config.yaml``: task, terrain, episode length), the body is
``xml/<id>.xml`` and the policy ``models/<id>.pt``. Actions are the policy's mean, so a replay
with the same seed repeats exactly, and gives what ``tools/train_ppo.py --eval`` gives for the
same checkpoint, config and seed. A video keeps going past the end of the first episode (the env
resets, seeded ``seed + 1``, ...) until it has its frames, as the original's video recorder did;
the results are those of the first episode.

The published values (``published`` in the JSON: the selection criteria, e.g. ``__reward__forward``,
and ``return``) are another statistic: DERL's, over the stochastic episodes of training
(``FITNESS_NOTE``). A policy's mean action can walk much less far than its noisy actions did in
training, or further; ``replay(..., episodes=N)`` therefore also plays N episodes each way, with the
mean action and with sampled actions, and reports the mean and spread of the return and of each
selection criterion (``criteria``, the per-episode sums of the same terms) next to the published values.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from derl.analysis.run import RunError, RunView
from derl.envs.config import WorldCfg
from derl.envs.media import VIDEO_SIZE, write_video
from derl.evolution.folder.run_dir import RunDir
from derl.fileio.folders import make_folders
from derl.fileio.reads import NotRegularFile, read_bytes
from derl.metrics import RETURN, REWARD_PREFIX
from derl.training.play import run_policy

# A body or a policy larger than this is refused as not a regular file (a derl checkpoint is a few MB at most).
MAX_FILE_BYTES = 256 * 2**20
FITNESS_NOTE = ("a published value (the fitness: a selection criterion such as __reward__forward, or the return) "
                "is DERL's training statistic: the mean, over the last 409,600 env steps of training (DERL's last 100 "
                "PPO iterations), of that value's mean over the last 10 finished training episodes, with "
                "stochastic (sampled) actions; "
                "a deterministic replay uses the policy's mean action instead and can differ a lot")


@dataclass(frozen=True)
class Spread:
    """Returns, task metrics and selection criteria of several episodes (seeds ``seed``, ``seed + 1``, ...)."""

    returns: list[float]
    metrics: list[float]
    criteria: dict[str, list[float]]  # each selection criterion's value in each episode

    def to_json(self) -> dict[str, Any]:
        return {"mean": float(np.mean(self.returns)), "std": float(np.std(self.returns)),
                "min": float(np.min(self.returns)), "max": float(np.max(self.returns)),
                "metric_mean": float(np.mean(self.metrics)), "returns": self.returns,
                "criteria": {key: {"mean": float(np.mean(values)), "std": float(np.std(values))}
                             for key, values in self.criteria.items()}}


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
    published: dict[str, float] | None = None  # the selection criteria and return as published (training)
    deterministic: Spread | None = None  # with episodes > 0: mean actions over several episodes
    stochastic: Spread | None = None  # and sampled actions, as in training

    def to_json(self) -> dict[str, Any]:
        data = {"id": self.id, "seed": self.seed, "return": self.episode_return, "terms": self.terms,
                "metric": self.metric, "x_pos": self.x_pos, "length": self.length, "video": self.video,
                "frames": self.frames}
        if self.deterministic is not None and self.stochastic is not None:
            data.update({"published": self.published, "deterministic": self.deterministic.to_json(),
                         "stochastic": self.stochastic.to_json(), "note": FITNESS_NOTE})
        return data


def replay_line(result: ReplayResult, episodes: int) -> str:
    """The first selection criterion, published and replayed both ways, in one line (``tools/replay.py``)."""
    deterministic, stochastic, published = result.deterministic, result.stochastic, result.published
    if deterministic is None or stochastic is None or published is None:
        raise ValueError(f"the replay of {result.id} ran no episodes: it has no spread to show")
    key = next(iter(deterministic.criteria))
    spread = {name: part.to_json()["criteria"][key] for name, part in
              (("stochastic", stochastic), ("deterministic", deterministic))}
    replayed = ", ".join(f"{name} {s['mean']:.2f} +- {s['std']:.2f}" for name, s in spread.items())
    return (f"{result.id}: published {key} {published[key]:.2f} (training statistic, stochastic actions) | "
            f"replay's {key} over {episodes} episodes: {replayed}")


def with_episode_length(world: WorldCfg, steps: int) -> WorldCfg:
    """``world`` with episodes of ``steps`` env steps (``ENV.EPISODE_LENGTH``)."""
    return dataclasses.replace(world, ENV=dataclasses.replace(world.ENV, EPISODE_LENGTH=int(steps)))


@contextlib.contextmanager
def _private_copies(run: RunDir, morphology_id: str) -> Iterator[tuple[Path, Path]]:
    """The body (``xml/<id>.xml``) and the policy (``models/<id>.pt``) of ``morphology_id``, copied into a
    private temporary folder, where ``run_policy`` opens them by path. Each is read through a descriptor
    of its folder (``SharedFolder.read_in_folder``): a folder swapped for a link at any moment is never read
    through, and a link or a FIFO in its place is refused.

    Raises:
        RunError: one is missing, or is not a regular file in a real folder; or, from the ``with`` body,
            an ``OSError`` or ``ValueError`` (``CheckpointError``, a malformed MJCF), its message naming the
            run's file, never the copy.
    """
    with tempfile.TemporaryDirectory(prefix="derl-replay-") as private:
        originals = {}  # copy -> the run's file
        for path in (run.genomes.xml_path(morphology_id), run.checkpoint_path(morphology_id)):
            try:
                data = run.read_in_folder(path, partial(read_bytes, max_bytes=MAX_FILE_BYTES))
            except FileNotFoundError:
                raise RunError(f"{path} is missing: cannot replay {morphology_id}") from None
            except NotRegularFile:
                raise RunError(f"{path} is not a regular file in a folder (a link, FIFO or folder): cannot replay "
                               f"{morphology_id}") from None
            (Path(private) / path.name).write_bytes(data)
            originals[str(Path(private) / path.name)] = str(path)
        xml, checkpoint = (Path(copy) for copy in originals)
        try:
            yield xml, checkpoint
        except (OSError, ValueError) as err:
            message = str(err)
            for copy, original in originals.items():
                message = message.replace(copy, original)
            raise RunError(message) from None


def replay(view: RunView, morphology_id: str, *, seed: int | None = None, steps: int | None = None,
           video: str | Path | None = None, video_steps: int | None = None,
           size: tuple[int, int] = VIDEO_SIZE, episodes: int = 0, overwrite: bool = False) -> ReplayResult:
    """Replays a published morphology of ``view`` deterministically.

    Args:
        seed: the env seed of the episode (default: the run's ``RNG_SEED``, as ``train_ppo.py --eval``).
        steps: episode length (default: the run's ``ENV.EPISODE_LENGTH``); an episode may end sooner.
        video: write a video of ``video_steps`` frames (default ``steps`` or the episode length) here
            (a GIF beside it where MP4 is unavailable), replacing a file there only with ``overwrite``.
        episodes: also play this many episodes with mean and with sampled actions (``Spread``), next
            to the published values (``FITNESS_NOTE``); 0: the first deterministic episode only.
    """
    published = view.require_published(morphology_id)
    run = view.run
    if steps is not None and steps < 1:
        raise RunError(f"--steps must be at least 1, got {steps}")
    world = view.cfg.world if steps is None else with_episode_length(view.cfg.world, steps)
    seed = view.cfg.RNG_SEED if seed is None else seed
    threads = view.cfg.TORCH_THREADS
    frames_wanted = 0 if video is None else (video_steps or world.ENV.EPISODE_LENGTH)
    with _private_copies(run, morphology_id) as (xml_path, checkpoint):
        played, frames, fps = run_policy(world, xml_path, checkpoint, seed, torch_threads=threads,
                                         video_frames=frames_wanted, size=size, episodes=max(episodes, 1))
        sampled = [] if episodes == 0 else run_policy(world, xml_path, checkpoint, seed, torch_threads=threads,
                                                      deterministic=False, episodes=episodes)[0]
    episode = played[0]
    spreads: dict[str, Any] = {}
    if episodes > 0:
        selection = view.cfg.EVO.SELECTION_CRITERIA
        criteria = (*selection, *((RETURN,) if RETURN not in selection else ()))
        for name, records in (("deterministic", played), ("stochastic", sampled)):
            spreads[name] = Spread([float(r["return"]) for r in records],
                                   [float(r.get("metric", math.nan)) for r in records],
                                   {key: [float(r.get(key, math.nan)) for r in records]
                                    for key in selection})
        spreads["published"] = {key: float(published.fitness.get(key, math.nan)) for key in criteria}
    written = None
    if video is not None:
        root = run.root_above(video)  # the report's media/: no folder on the way a link
        make_folders(Path(video).parent, root)
        written = str(write_video(frames, Path(video), fps, root, overwrite))
    terms = {k: float(v) for k, v in episode.items() if k.startswith(REWARD_PREFIX)}
    return ReplayResult(
        id=morphology_id, seed=seed, episode_return=float(episode["return"]), terms=terms,
        metric=float(episode.get("metric", math.nan)), x_pos=float(episode.get("x_pos", math.nan)),
        length=int(episode["length"]), video=written, frames=len(frames),
        **spreads,
    )
