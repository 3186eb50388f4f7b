"""The DERL evolution step: choose a parent by tournament, mutate it into a child, train the child,
publish it (docs/guides/evolution.md).

DERL's ``tournament_evolution`` runs this step in a loop. Here ``Step`` runs it once for the
morphology ``slot_id(slot, attempt)`` that the slot scheduler (``derl.evolution.scheduling``) gives
this worker, and resumes what a killed worker left: a genome already written is not made again,
a checkpoint is trained on. Leases and stop requests reach it through ``StopSignal``
(``derl.evolution.lease``); everything it reads and writes goes through ``RunDir``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from derl.checked_config import EvoCfg
from derl.config import ConfigError
from derl.evolution.backend import Backend, TrainingSetup, TrainOutcome
from derl.evolution.failures import damaged_checkpoint, describe
from derl.evolution.folder.genome_store import StoredGenome
from derl.evolution.folder.record import PublishedRecord, morphology_files
from derl.evolution.folder.run_dir import RunDir
from derl.evolution.lease import SlotLost, StopSignal
from derl.evolution.population import num_initial_slots, ppo_seed, slot_id, slot_rng
from derl.evolution.process import FatalError, Stopped
from derl.evolution.results import PublishedResults, is_finite_summary
from derl.morphology.config import UnimalCfg

# Bodies made for one morphology in one fill at most: the first, and one more each time its genome was written
# over while it trained (quarantined); past that something else writes in OUT_DIR, and the worker stops.
MAX_BODIES = 3


class Step:
    """One worker's DERL step; ``results`` is the worker's cache of what is published.

    It reads the search (``evo``), what bodies are made with (``unimal``) and trained with
    (``training``; its ``trainer.DEVICE`` is the worker's concrete device), the worker's ``node`` and
    the run's ``rng_seed`` (``RNG_SEED``, root of each slot's streams).
    """

    def __init__(self, evo: EvoCfg, unimal: UnimalCfg, training: TrainingSetup, run: RunDir, backend: Backend,
                 results: PublishedResults, stop: StopSignal, worker: int, log: Callable[[str], None], *,
                 node: int, rng_seed: int):
        self.evo, self.unimal, self.training, self.rng_seed = evo, unimal, training, rng_seed
        self.run, self.backend, self.results, self.stop = run, backend, results, stop
        self.node, self.worker, self.log = node, worker, log

    def __call__(self, slot: int, attempt: int) -> None:
        """Makes, trains and publishes morphology ``slot_id(slot, attempt)``.

        Raises:
            Stopped, SlotLost: asked to stop, or the slot was taken over, before it was published.
            Exception: the morphology failed (the scheduler records it and tries the next attempt).
        """
        evo = self.evo
        child_id = slot_id(slot, attempt)
        seed = ppo_seed(self.rng_seed, slot, attempt)
        outcome, genome = self._trained_body(child_id, slot, attempt, seed)
        if slot >= evo.SEARCH_SPACE_SIZE - evo.VIDEOS_LAST_N:
            self._record_video(child_id, seed)
        self._publish(child_id, slot, attempt, seed, outcome, genome)

    def _trained_body(self, child_id: str, slot: int, attempt: int, seed: int) -> tuple[TrainOutcome, StoredGenome]:
        """Makes the body of ``child_id`` unless its genome is there, and trains it; its outcome and genome.

        A genome written over while its body trained is quarantined and the body made anew; so is one
        whose files are not all regular files once trained (an MJCF swapped for a link: ``has_genome``
        moves it aside), since a published record stays published whatever they become. At most
        ``MAX_BODIES`` times: then ``FatalError``, never a loop without end.
        """
        for _ in range(MAX_BODIES):
            if not self.run.genomes.has_genome(child_id):
                self._make(child_id, slot, attempt)
            outcome = self._train(child_id, seed)
            if (problem := self.run.genomes.files_problem(child_id)) is not None:
                self.log(f"{child_id} is not published: {problem}; made anew")
            elif (genome := self._trained_genome(child_id)) is not None:
                return outcome, genome
        raise FatalError(f"the body of {child_id} was made {MAX_BODIES} times in a row, its genome or files "
                         "changed while it trained each time (see quarantine/): something else writes in OUT_DIR")

    def _make(self, child_id: str, slot: int, attempt: int) -> None:
        """Draws the body of ``child_id`` (a tournament child, or a random one in an initial slot) and writes it
        (a ``ConfigError`` if the genome reader would refuse it: ``GenomeStore.write_genome``)."""
        rng = slot_rng(self.rng_seed, slot, attempt)
        if slot < num_initial_slots(self.evo):  # a replacement of a failed initial morphology
            child = self.backend.random_genome(self.unimal, rng, child_id)
        else:
            parent = self._tournament(rng)
            child = self.backend.mutate(self.unimal, parent, rng, child_id)
        self.run.genomes.write_genome(child_id, child.genome_json, child.mjcf)

    def _trained_genome(self, morphology_id: str) -> StoredGenome | None:
        """The genome of the body just trained, or None if it was quarantined (it no longer matches
        ``xml/<id>.xml``, or fails its schema: ``GenomeStore.read_genome``)."""
        try:
            return self.run.genomes.read_genome(morphology_id)
        except FileNotFoundError:
            self.log(f"the genome of {morphology_id} is no longer the body trained (see quarantine/); made anew")
            return None

    def _tournament(self, rng: np.random.Generator) -> StoredGenome:
        """The genome of the parent that ``EVO.TOURNAMENT_TYPE`` chooses among the published morphologies
        (a parent whose genome was quarantined leaves the pool: ``PublishedResults.select_parent``)."""
        self.results.refresh_new()
        return self.results.select_parent(self.evo, rng)

    def _train(self, morphology_id: str, seed: int) -> TrainOutcome:
        """Trains the controller of ``morphology_id`` to the end, from its checkpoint if it has one."""
        checkpoint = self.run.checkpoint_path(morphology_id)
        resume = checkpoint.exists()
        self.log(f"{'resuming' if resume else 'training'} {morphology_id} (seed {seed})")
        try:
            outcome = self._backend_train(morphology_id, seed, resume)
        except Exception as err:
            if not (resume and damaged_checkpoint(err)):
                raise
            # The folder's file, not the node's nor the body's: set aside once, the body trains from the start.
            self.run.genomes.drop_trained(morphology_id, f"does not load ({describe(err)}); {morphology_id} trains "
                                                         "from the start")
            self.log(f"training {morphology_id} from the start (seed {seed})")
            outcome = self._backend_train(morphology_id, seed, False)
        if not outcome.completed:
            self.stop.check()
            raise Stopped
        if not is_finite_summary(outcome.summary):  # rewards the config's weights and scales overflow
            raise ConfigError(f"the training summary of {morphology_id} is not finite ({outcome.summary}): a "
                              "reward weight or scale of the config (ENV.*_WEIGHT, PPO) overflows, not the body")
        return outcome

    def _backend_train(self, morphology_id: str, seed: int, resume: bool) -> TrainOutcome:
        return self.backend.train(
            self.training, self.run.genomes.xml_path(morphology_id), seed=seed,
            checkpoint_path=self.run.checkpoint_path(morphology_id), metrics_path=self.run.metrics_path(morphology_id),
            resume=resume, should_stop=self.stop, may_save=self.stop.still_ours,
        )

    def _record_video(self, morphology_id: str, seed: int) -> None:
        """``videos/<id>.mp4`` of one of the last ``EVO.VIDEOS_LAST_N`` morphologies, before it is published.

        A video that cannot be made (no headless GL, say) is logged and skipped: it never costs the result.
        """
        try:
            xml, checkpoint = self.run.genomes.xml_path(morphology_id), self.run.checkpoint_path(morphology_id)
            path = self.run.save_video(morphology_id, lambda staged: self.backend.record_video(
                self.training, xml, checkpoint, seed, staged))
            self.log(f"video {self.run.relative(path)}")
        except Exception as err:  # noqa: BLE001 - see the docstring
            self.log(f"no video for {morphology_id}: {type(err).__name__}: {err}".splitlines()[0])

    def _publish(self, morphology_id: str, slot: int, attempt: int, seed: int, outcome: TrainOutcome,
                 genome: StoredGenome) -> None:
        """Takes a publication number and writes ``metadata/<id>.json``, unless the slot is no longer ours."""
        # Dying between the number and the metadata leaves the number unused (a gap): the
        # resumed worker finds the finished checkpoint and takes a new number.
        if not self.stop.still_ours():
            raise SlotLost
        self.results.refresh_new()  # every number below next_number is taken: the lowest free is tried first
        try:
            publication = self.run.publications.take_publication_number(morphology_id, self.node, self.worker,
                                                                         self.results.next_number)
        except RuntimeError as err:  # every number of the range taken: the folder's problem, never the body's
            raise FatalError(str(err)) from None
        device = self.training.trainer.DEVICE  # the coordinator gives each worker a concrete device
        record = PublishedRecord(
            id=morphology_id, parent_id=genome.parent_id,
            lineage=lineage(self.run, self.results, morphology_id, genome.parent_id),
            mutation=genome.mutation, slot=slot, attempt=attempt, seed=seed, node=self.node,
            worker=self.worker, device=device,
            fitness={key: float(value) for key, value in outcome.summary.items()},
            env_steps=int(outcome.env_steps), iterations=int(outcome.iterations), wall_time=float(outcome.wall_time),
            steps_per_sec=float(outcome.steps_per_sec), files=morphology_files(morphology_id),
            published_at=time.time(), publication=publication,
        )
        if not self.run.publications.publish(record):
            raise SlotLost  # published by the worker that took the slot over
        shown = (self.evo.SELECTION_CRITERIA[0], "return")
        fitness = {key: outcome.summary.get(key, float("nan")) for key in shown}
        self.log(f"published {morphology_id} (publication {publication}): "
                 + ", ".join(f"{key} {value:.3f}" for key, value in fitness.items()))


def lineage(run: RunDir, results: PublishedResults, morphology_id: str, parent_id: str | None) -> str:
    """``<root>/.../<parent>/<id>``: the parent's published lineage, or, if its metadata was
    quarantined after it was chosen, its genome's parent, and so on (the result is not lost).

    Where the chain breaks (an ancestor's genome quarantined too, or a crafted cycle) the
    lineage starts at the last ancestor known: the result is published, never retried forever.
    """
    chain = [morphology_id]
    while parent_id is not None and parent_id not in chain:
        parent = results.by_id.get(parent_id)
        if parent is not None:
            return "/".join([parent.lineage, *reversed(chain)])
        chain.append(parent_id)
        try:
            parent_id = run.genomes.read_genome(parent_id).parent_id
        except FileNotFoundError:
            break
    return "/".join(reversed(chain))
