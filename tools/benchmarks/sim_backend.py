"""A backend that does not train, for the simulated cluster (``benchmarks.cluster``) and the scale benchmark.

Selected with ``DERL_EVO_BACKEND=benchmarks.sim_backend:InstantBackend``: the real coordinator, workers and
run folder run on it, only bodies and training are stand-ins. A genome is a number (its ``size``);
training takes ``DERL_SIM_TRAIN_SECONDS`` (default 0: instant), writes a checkpoint and a one-line curve,
and its fitness is the size, so a run's results are a pure function of its genomes. Slot ``s`` fails at
attempt 0 where ``s % DERL_SIM_FAIL_EVERY == DERL_SIM_FAIL_EVERY - 1`` (0 or unset: never), to exercise
``error_metadata/``. With ``DERL_SIM_LOG`` set (a folder outside ``OUT_DIR``), every training start is
logged there as ``<id>.<pid>`` so that a run can count its trainings.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from derl.evolution.backend import GenomeFiles, TrainingSetup
from derl.evolution.folder.genome_store import GenomeLimits, StoredGenome
from derl.evolution.population import parse_id
from derl.fileio.reads import read_json
from derl.fileio.writes import atomic_write_text
from derl.morphology.config import UnimalCfg

ITERATIONS = 4  # checkpoints written per training: a killed worker resumes from one


def _files(genome_id: str, parent_id: str | None, mutation: str | None, size: float) -> GenomeFiles:
    genome = {"schema_version": 1, "id": genome_id, "parent_id": parent_id, "mutation": mutation, "size": size}
    return GenomeFiles(json.dumps(genome), f'<mujoco model="unimal"><!-- {genome_id} --></mujoco>\n')


def _size_problem(data: dict[str, Any]) -> str | None:
    """The simulated design space: a genome's size is a finite number below 1e6."""
    size = data.get("size")
    ok = isinstance(size, int | float) and not isinstance(size, bool) and abs(size) < 1e6
    return None if ok else f"has no size in the simulated design space: {size!r:.40}"


@dataclass
class Outcome:
    """What the evolution reads of a training (``derl.evolution.backend.TrainOutcome``)."""

    iterations: int
    wall_time: float
    completed: bool
    summary: dict[str, float] = field(default_factory=dict)

    @property
    def env_steps(self) -> int:
        return self.iterations * 100

    @property
    def steps_per_sec(self) -> float:
        return self.env_steps / max(self.wall_time, 1e-9)


class InstantBackend:
    """Genomes are numbers, training is a few file writes (see the module docstring)."""

    def genome_limits(self, unimal: UnimalCfg) -> GenomeLimits:
        return GenomeLimits(4096, _size_problem)

    def initial_population(self, unimal: UnimalCfg, seed: int, ids: Sequence[str],
                           num_workers: int) -> list[GenomeFiles]:
        rng = np.random.default_rng(seed)
        return [_files(genome_id, None, None, float(rng.uniform(0, 5))) for genome_id in ids]

    def random_genome(self, unimal: UnimalCfg, rng: np.random.Generator, genome_id: str) -> GenomeFiles:
        return _files(genome_id, None, None, float(rng.uniform(0, 5)))

    def mutate(self, unimal: UnimalCfg, parent: StoredGenome, rng: np.random.Generator,
               child_id: str) -> GenomeFiles:
        return _files(child_id, parent.id, "size", float(parent.data["size"]) + float(rng.normal()))

    def train(self, training: TrainingSetup, xml_path: Path, *, seed: int, checkpoint_path: Path,
              metrics_path: Path, resume: bool, should_stop: Callable[[], bool],
              may_save: Callable[[], bool]) -> Outcome:
        genome_id = Path(xml_path).stem
        start = time.monotonic()
        done = _resumed_iteration(checkpoint_path) if resume else 0
        if log := os.environ.get("DERL_SIM_LOG"):
            Path(log, f"{genome_id}.{os.getpid()}.{time.monotonic_ns()}").touch()
        slot, attempt = parse_id(genome_id)
        every = int(os.environ.get("DERL_SIM_FAIL_EVERY") or 0)
        if every and attempt == 0 and slot % every == every - 1:
            raise RuntimeError("injected MuJoCo failure")
        pause = float(os.environ.get("DERL_SIM_TRAIN_SECONDS") or 0) / ITERATIONS
        while done < ITERATIONS:
            if should_stop():  # as derl.ppo.train: a final checkpoint, if the files are still ours
                if may_save():
                    atomic_write_text(checkpoint_path, json.dumps({"iteration": done}))
                return Outcome(done, time.monotonic() - start, False)
            time.sleep(pause)
            done += 1
            if not may_save():
                return Outcome(done, time.monotonic() - start, False)
            atomic_write_text(checkpoint_path, json.dumps({"iteration": done}))
        size = float(read_json(Path(xml_path).parents[1] / "genomes" / f"{genome_id}.json")["size"])
        atomic_write_text(metrics_path, json.dumps({"iteration": done, "return": size}) + "\n")
        summary = {"return": size, "__reward__forward": size, "__reward__ctrl": -0.1, "x_pos": size, "metric": size}
        return Outcome(done, time.monotonic() - start, True, summary)

    def record_video(self, training: TrainingSetup, xml_path: Path, checkpoint_path: Path, seed: int,
                     path: Path) -> Path:
        raise RuntimeError("the simulated backend films nothing (set EVO.VIDEOS_LAST_N 0)")


def _resumed_iteration(checkpoint_path: Path) -> int:
    """The iteration a checkpoint holds; 0 for one that is not the simulation's (a damaged file trains anew)."""
    try:
        iteration = read_json(checkpoint_path)["iteration"]
    except (OSError, ValueError, KeyError, TypeError):
        return 0
    return iteration if isinstance(iteration, int) and 0 <= iteration <= ITERATIONS else 0
