"""What the evolution needs from the rest of derl: genomes, MJCF and PPO training.

The worker sees a genome as the JSON it reads and writes (a parent read and checked once by ``RunDir``:
``StoredGenome``, its body the JSON object; a child as the files it is written to: ``GenomeFiles``) and
training as a function, through the ``Backend`` protocol. ``DerlBackend`` is the real one (derl.morphology,
derl.envs, derl.ppo). The environment variable ``DERL_EVO_BACKEND=module:attr``
selects another object with the same methods, inherited by every worker process:
the protocol tests use it to run many morphologies in seconds.
"""

from __future__ import annotations

import functools
import importlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Protocol

import numpy as np

from derl.checked_config import Config, TensorboardCfg
from derl.envs.config import WorldCfg
from derl.envs.media import write_video
from derl.evolution.folder.genome_store import GenomeLimits, StoredGenome
from derl.evolution.folder.run_dir import RunDir
from derl.morphology import Genome, initial_population, mutate, random_genome, to_mjcf
from derl.morphology.config import UnimalCfg
from derl.morphology.genome import genome_problem, max_genome_bytes
from derl.ppo.config import TrainerCfg

BACKEND_VARIABLE = "DERL_EVO_BACKEND"


class TrainOutcome(Protocol):
    """The fields of ``derl.ppo.TrainResult`` the evolution reads."""

    summary: dict[str, float]
    env_steps: int
    iterations: int
    wall_time: float
    steps_per_sec: float
    completed: bool


class GenomeFiles(NamedTuple):
    """A new genome as it is written (``RunDir.write_genome``): its JSON text and its MJCF, both made
    from the one genome object the backend built."""

    genome_json: str
    mjcf: str


@dataclass(frozen=True)
class TrainingSetup:
    """What training and filming a morphology of the search read: the learner's bundle (``PPO``,
    ``MODEL``, ``DEVICE``, ``TORCH_THREADS``, ``CHECKPOINT_PERIOD``), the world's, ``TENSORBOARD`` and
    the folder of per-morphology curves (``tensorboard/morphologies`` of the worker's ``RunDir``)."""

    trainer: TrainerCfg
    world: WorldCfg
    tensorboard: TensorboardCfg
    morphology_boards: Path

    @staticmethod
    def of(tree: Config, run: RunDir) -> TrainingSetup:
        """The training setup of a node's config (the worker's entry point holds the whole tree) in ``run``."""
        return TrainingSetup(tree.trainer, tree.world, tree.TENSORBOARD, run.tensorboard_dir("morphologies"))


class Backend(Protocol):
    """What the DERL step asks of bodies and brains. ``DERL_EVO_BACKEND`` (``module:attr``) names another
    (tests run the search on a fake one). The genome methods take what bodies are drawn from
    (``UnimalCfg``); ``train`` and ``record_video`` what a training reads (``TrainingSetup``)."""

    def initial_population(self, unimal: UnimalCfg, seed: int, ids: Sequence[str],
                           num_workers: int) -> list[GenomeFiles]:
        """A de-duplicated initial population, one genome per id."""

    def genome_limits(self, unimal: UnimalCfg) -> GenomeLimits:
        """What a genome read back from the run folder must be: its bytes and its body's design space."""

    def random_genome(self, unimal: UnimalCfg, rng: np.random.Generator, genome_id: str) -> GenomeFiles:
        """One new random morphology (replaces a failed initial one)."""

    def mutate(self, unimal: UnimalCfg, parent: StoredGenome, rng: np.random.Generator,
               child_id: str) -> GenomeFiles:
        """A child of the genome ``parent`` (``GenomeStore.read_genome``; its body: ``parent.data``), by one
        mutation."""

    def train(
        self,
        training: TrainingSetup,
        xml_path: Path,
        *,
        seed: int,
        checkpoint_path: Path,
        metrics_path: Path,
        resume: bool,
        should_stop: Callable[[], bool],
        may_save: Callable[[], bool],
    ) -> TrainOutcome:
        """Trains a controller for the MJCF at ``xml_path``; writes ``checkpoint_path`` and
        ``metrics_path`` only while ``may_save()`` (False: another worker owns them now)."""

    def record_video(self, training: TrainingSetup, xml_path: Path, checkpoint_path: Path, seed: int,
                     path: Path) -> Path:
        """Writes a video of the trained policy to ``path`` (``PPO.VIDEO_LENGTH`` frames); returns the file
        written (its suffix may differ: GIF fallback)."""


class DerlBackend:
    """derl.morphology for genomes, derl.envs + derl.ppo for training.

    Training and videos import torch inside the method: a coordinator and the workers of a test
    backend (``DERL_EVO_BACKEND``) never load it.
    """

    def initial_population(self, unimal: UnimalCfg, seed: int, ids: Sequence[str],
                           num_workers: int) -> list[GenomeFiles]:
        genomes = initial_population(unimal, seed, len(ids), list(ids), num_workers=num_workers)
        return [_files(unimal, genome) for genome in genomes]

    def genome_limits(self, unimal: UnimalCfg) -> GenomeLimits:
        return GenomeLimits(max_genome_bytes(unimal), functools.partial(genome_problem, unimal=unimal))

    def random_genome(self, unimal: UnimalCfg, rng: np.random.Generator, genome_id: str) -> GenomeFiles:
        return _files(unimal, random_genome(unimal, rng, genome_id))

    def mutate(self, unimal: UnimalCfg, parent: StoredGenome, rng: np.random.Generator,
               child_id: str) -> GenomeFiles:
        return _files(unimal, mutate(Genome.from_dict(parent.data, unimal), unimal, rng, child_id))

    def train(
        self,
        training: TrainingSetup,
        xml_path: Path,
        *,
        seed: int,
        checkpoint_path: Path,
        metrics_path: Path,
        resume: bool,
        should_stop: Callable[[], bool],
        may_save: Callable[[], bool],
    ) -> TrainOutcome:
        from derl.envs.sim_warnings import counted_warnings
        from derl.ppo import SaveWhile, StopWhen, train  # lazy: torch (see the class docstring)
        from derl.ppo.callbacks import TensorBoard
        from derl.training.envs import UnimalEnvFactory
        from derl.training.faults import FiniteTraining, config_faults

        tensorboard, board = training.tensorboard, None
        if tensorboard.ENABLED and tensorboard.PER_MORPHOLOGY:  # a search has thousands: if asked
            board = TensorBoard(training.morphology_boards / Path(xml_path).stem)
        # A reward that stops being finite, an allocation that does not fit: the config's faults (ConfigError
        # naming its keys: the node stops, exit 2), never a morphology's.
        callbacks = [FiniteTraining(training.world), StopWhen(should_stop), SaveWhile(may_save),
                     *([board] if board else [])]
        try:
            with counted_warnings(f"training {Path(xml_path).stem}"), \
                    config_faults(training.world, training.trainer.PPO):
                return train(
                    training.trainer, UnimalEnvFactory(training.world, str(xml_path), seed), seed=seed,  # type: ignore[arg-type]
                    checkpoint_path=checkpoint_path, metrics_path=metrics_path, resume=resume, callbacks=callbacks,
                )
        finally:
            if board is not None:
                board.close()


    def record_video(self, training: TrainingSetup, xml_path: Path, checkpoint_path: Path, seed: int,
                     path: Path) -> Path:
        from derl.training.play import run_policy  # lazy: torch (see the class docstring)

        trainer = training.trainer
        _, frames, fps = run_policy(training.world, xml_path, checkpoint_path, seed,
                                    torch_threads=trainer.TORCH_THREADS, video_frames=trainer.PPO.VIDEO_LENGTH)
        return write_video(frames, path, fps)


def _files(unimal: UnimalCfg, genome: Genome) -> GenomeFiles:
    """The JSON and MJCF of a ``derl.morphology.Genome``."""
    return GenomeFiles(genome.to_json(), to_mjcf(genome, unimal))


def load_backend() -> Backend:
    """The backend named by ``DERL_EVO_BACKEND`` (``module:attr``), else ``DerlBackend``."""
    spec = os.environ.get(BACKEND_VARIABLE)
    if not spec:
        return DerlBackend()
    module_name, _, attr = spec.partition(":")
    if not attr:
        raise ValueError(f"{BACKEND_VARIABLE} must look like module:attr, got {spec!r}")
    backend = getattr(importlib.import_module(module_name), attr)
    return backend() if isinstance(backend, type) else backend
