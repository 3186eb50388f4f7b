"""What ``tools/train_ppo.py`` does: pick the env, train into an output folder, replay a policy.

Output folder layout (all files written atomically):

- ``config.yaml``: the resolved config; ``run.json``: the env source (``xml`` or ``env_id``);
- ``<id>.xml``: the unimal MJCF when training from a genome file;
- ``model.pt``: checkpoint (``torch.load(weights_only=True)``), ``metrics.jsonl``: one record per
  iteration, ``metrics.json``: the final ``TrainResult`` (``summary`` = means of the last 100
  episodes of ``return``, every ``__reward__*``, ``x_pos``, ``metric``), env steps and wall time
  of all ranks together.

Under ``torchrun`` (``tools/train_ddp.sh``) every rank runs ``train_to_folder``; rank 0 alone
writes the folder.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from typing import TextIO

import numpy as np

from derl.config import CfgNode, dump_config
from derl.fileio import atomic_write_text, read_json, write_json
from derl.ppo.callbacks import Callback
from derl.ppo.device import learner_device
from derl.ppo.distributed import ProcessGroup, RankInfo
from derl.ppo.episode_stats import EpisodeStatistics, vector_step_values
from derl.ppo.episodes import mean_fields
from derl.ppo.policy import load_policy
from derl.ppo.trainer import TrainResult, max_iterations, train
from derl.training.envs import env_factory

CHECKPOINT_FILE = "model.pt"
METRICS_LINES_FILE = "metrics.jsonl"
FINAL_METRICS_FILE = "metrics.json"
RUN_FILE = "run.json"


def genome_to_xml(cfg: CfgNode, genome_path: Path, out_dir: Path) -> Path:
    """Writes the MJCF of a genome JSON file to ``out_dir/<id>.xml``; returns its path."""
    from derl.morphology import Genome, GenomeError, to_mjcf

    if not genome_path.is_file():
        raise FileNotFoundError(f"genome file not found: {genome_path}")
    try:
        genome = Genome.from_json(genome_path.read_text())
    except GenomeError as err:
        raise ValueError(f"{genome_path}: {err}") from None
    xml_path = out_dir / f"{genome.id}.xml"
    atomic_write_text(xml_path, to_mjcf(genome, cfg))
    return xml_path


def saved_source(folder: Path) -> dict[str, str]:
    """The env source (``xml`` or ``env_id``) that ``train_to_folder`` recorded in ``folder/run.json``."""
    run_file = folder / RUN_FILE
    if not run_file.is_file():
        raise FileNotFoundError(f"no {RUN_FILE} in {folder}: give --xml, --genome or --env-id")
    source = read_json(run_file)
    if not (isinstance(source, dict) and len(source) == 1 and isinstance(source.get("xml", source.get("env_id")), str)):
        raise ValueError(f"{run_file}: not a run.json of tools/train_ppo.py (one of xml, env_id)")
    return source


class ProgressLine(Callback):
    """A stderr line rewritten in place: iteration, env steps, steps/s, mean return, ETA."""

    def __init__(self, max_iters: int, stream: TextIO = sys.stderr):
        self.max_iters, self.stream = max_iters, stream
        self.started = time.perf_counter()
        self.first_iteration: int | None = None

    def on_iteration(self, record: dict) -> None:
        if self.first_iteration is None:
            self.first_iteration = record["iteration"] - 1
        elapsed = time.perf_counter() - self.started
        done = record["iteration"] - self.first_iteration
        eta = elapsed / done * (self.max_iters - record["iteration"])
        mean_return = f"{record['return']:.1f}" if "return" in record else "-"
        self.stream.write(
            f"\riter {record['iteration']}/{self.max_iters} | steps {record['env_steps']} | "
            f"{record['steps_per_sec']:.0f} steps/s | return {mean_return} | "
            f"ETA {time.strftime('%H:%M:%S', time.gmtime(eta))}   "
        )
        if record["iteration"] == self.max_iters:
            self.stream.write("\n")
        self.stream.flush()


def train_to_folder(
    cfg: CfgNode, source: dict[str, str], out_dir: Path, resume: bool = False, progress: bool = True
) -> TrainResult:
    """Trains with ``seed = RNG_SEED`` and writes the output folder (module docstring).

    Joins the ranks ``torchrun`` started, if any (``derl.ppo.distributed``); one rank otherwise.
    """
    factory = env_factory(cfg, source)
    info = RankInfo.from_environ()
    device = learner_device(cfg.DEVICE, info.local_rank, info.world_size)
    out_dir.mkdir(parents=True, exist_ok=True)
    with ProcessGroup(device, info) as comm:
        if comm.is_main:
            atomic_write_text(out_dir / "config.yaml", dump_config(cfg))
            write_json(out_dir / RUN_FILE, source)
        show = progress and comm.is_main
        result = train(
            cfg,
            factory,
            seed=cfg.RNG_SEED,
            checkpoint_path=out_dir / CHECKPOINT_FILE,
            metrics_path=out_dir / METRICS_LINES_FILE,
            resume=resume,
            callbacks=[ProgressLine(max_iterations(cfg, comm.world_size))] if show else [],
            comm=comm,
        )
        if comm.is_main:
            write_json(out_dir / FINAL_METRICS_FILE, dataclasses.asdict(result))
    return result


def evaluate(cfg: CfgNode, checkpoint: Path, source: dict[str, str] | None, episodes: int, seed: int) -> dict:
    """Replays the policy deterministically (mean actions) for ``episodes`` episodes.

    ``source`` defaults to the ``run.json`` next to the checkpoint. Returns the mean return,
    each episode's return, and the means of the ``__reward__*``/``x_pos``/``metric`` fields.
    """
    if source is None:
        source = saved_source(checkpoint.parent)
    policy = load_policy(checkpoint)
    envs = env_factory(cfg, source)(1, 0)  # one env, as the trainer builds them
    stats, finished = EpisodeStatistics(1), []
    try:
        for k in range(episodes):
            obs, _ = envs.reset(seed=seed + k)
            stats.restart()
            ended: list = []
            while not ended:
                action = policy.act(obs, deterministic=True, action_space=envs.single_action_space)
                obs, reward, terminated, truncated, infos = envs.step(action)
                done = terminated | truncated
                ended = stats.add(reward, done, vector_step_values(infos, done))
            finished += ended
    finally:
        envs.close()
    return {
        **mean_fields(finished),
        "returns": [ep["return"] for ep in finished],
        "lengths": [int(ep["length"]) for ep in finished],
        "mean_length": float(np.mean([ep["length"] for ep in finished])),
    }
