"""A read-only view of one evolution run (``OUT_DIR``), finished or in progress.

Reads go through ``derl.evolution.folder.run_dir.RunDir``. Published files never change, so each
metadata file and genome is read once, each learning curve once per statistic and kept; ``refresh()`` picks up
what was published since. Nothing is written to the run folder.

    view = RunView("output/quick")
    best = view.top(1)[0]
    curve = view.curve(best.id)

``derl.analysis.replay.replay(view, best.id, seed=0)`` replays one (a floor above: it runs the policy).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from derl.analysis.curves import EMPTY, Curve, iterations_to_fraction, read_curve
from derl.analysis.lineage import LineageGraph
from derl.analysis.records import Morphology, publication_order, to_morphology
from derl.checked_config import Config, load_config
from derl.config import ConfigError
from derl.evolution.folder.failure_store import Failure
from derl.evolution.folder.genome_store import StoredGenome
from derl.evolution.folder.record import PublishedRecord
from derl.evolution.folder.run_dir import RunDir
from derl.evolution.folder.schema import RecordRules
from derl.evolution.folder.slot_store import Claim
from derl.evolution.population import parse_id
from derl.evolution.results import rank
from derl.fileio.folders import NotAFolder
from derl.fileio.outputs import SEARCH_CONFIG
from derl.fileio.reads import JsonFileError, read_json


class RunError(ValueError):
    """A folder that is not a readable run (one-line message naming the file)."""


@dataclass(frozen=True)
class Training:
    """A claimed slot whose morphology is not published (training, or waiting to resume)."""

    id: str
    slot: int
    node: int
    worker: int
    iterations: int  # PPO iterations checkpointed so far


class RunView:
    """Typed records, learning curves, lineage and replays of the run in ``out_dir``.

    Attributes:
        cfg: the run's whole config (``OUT_DIR/config.yaml``), kept whole: a view is the read side's entry
            point, and what reads a run (the report, a replay) takes its sections from here (``EVO``,
            ``PPO``, ``ENV``, ``RNG_SEED``, ``TORCH_THREADS``, ``cfg.world``).
        run: the folder's reader (``derl.evolution.folder.run_dir.RunDir``: paths such as ``xml_path(id)``).
        records: the published morphologies (``Morphology``), in publication order.
        by_id: the same records by id.
        unreadable: files skipped because they did not parse or failed their schema: path -> reason.

    Raises:
        RunError: ``out_dir`` is not a run folder or its config does not load (one line).
    """

    def __init__(self, out_dir: str | Path):
        # The names in the folder held to this search's size (slots, publication numbers), as the search holds them.
        self.run = self._open(out_dir)
        if (problem := self.run.not_a_search()) is not None:
            raise RunError(problem)
        self.cfg: Config = self.run.config or load_config()  # the defaults for a run that has no config.yaml
        self._published: dict[str, PublishedRecord] = {}
        self._genomes: dict[str, StoredGenome | None] = {}
        self.unreadable: dict[str, str] = {}  # path -> reason: files skipped because they did not parse
        self._speeds: dict[tuple[str, float], dict[str, int | None]] = {}
        self.records: list[Morphology] = []
        self.by_id: dict[str, Morphology] = {}
        self.refresh()

    @staticmethod
    def _open(out_dir: str | Path) -> RunDir:
        """The run with its ``config.yaml`` read (a link, FIFO or folder there is refused: ``load_run_config``)."""
        try:
            return RunDir.open(out_dir)
        except ConfigError as err:
            path = Path(out_dir).resolve() / SEARCH_CONFIG
            raise RunError(str(err) if str(path) in str(err) else f"{path}: {err}") from None

    # ------------------------------------------------------------------ records
    def refresh(self) -> None:
        """Reads the morphologies published since the last call (each file once)."""
        for morphology_id in self.run.publications.published_ids():
            if morphology_id in self._published:
                continue
            try:
                record = self.run.publications.read_metadata(morphology_id, RecordRules.of(self.cfg.EVO))
            except json.JSONDecodeError as err:  # derl.fileio.reads.JsonFileError names the file
                # A corrupt or foreign file: the search quarantines it; a reader skips it and retries.
                self.unreadable[str(self.run.publications.metadata_path(morphology_id))] = str(err)
                continue
            if record is None:
                continue  # moved to quarantine/ by a worker meanwhile
            self.unreadable.pop(str(self.run.publications.metadata_path(morphology_id)), None)
            self._published[morphology_id] = record
            self._genomes[morphology_id] = self._read_genome(morphology_id)
        self._name_refused_names()
        ordered = publication_order(list(self._published.values()))
        self.records = [to_morphology(record, self.genome(record.id), k) for k, record in enumerate(ordered)]
        self.by_id = {record.id: record for record in self.records}

    def _read_genome(self, morphology_id: str) -> StoredGenome | None:
        try:
            return self.run.genomes.read_genome(morphology_id)
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def genome(self, morphology_id: str) -> Mapping[str, Any] | None:
        """The genome JSON of a published morphology (None if its file is missing or refused)."""
        stored = self._genomes.get(morphology_id)
        return None if stored is None else stored.data

    def __len__(self) -> int:
        return len(self.records)

    @property
    def criteria(self) -> tuple[str, ...]:
        return tuple(self.cfg.EVO.SELECTION_CRITERIA)

    @property
    def objectives(self) -> tuple[int, ...]:
        return tuple(self.cfg.EVO.SELECTION_CRITERIA_OBJ)

    @property
    def fitness_key(self) -> str:
        """The first selection criterion: the fitness shown in one-number plots."""
        return self.criteria[0]

    @property
    def maximise(self) -> bool:
        return self.objectives[0] < 0

    def fitness(self, records: list[Morphology] | None = None) -> np.ndarray:
        """The first criterion of ``records`` (default: all, in publication order); NaN where absent."""
        chosen = self.records if records is None else records
        return np.array([r.fitness.get(self.fitness_key, np.nan) for r in chosen], dtype=float)

    def top(self, k: int) -> list[Morphology]:
        """The ``k`` best by the selection criteria (lexicographic, as ``summary.json``)."""
        ranked = rank([self._published[r.id] for r in self.records], self.criteria, self.objectives)
        return [self.by_id[record.id] for record in ranked[:k]]

    def initial(self) -> list[Morphology]:
        """The initial population (slots below ``INIT_POPULATION_SIZE``, replacements included)."""
        size = self.cfg.EVO.INIT_POPULATION_SIZE
        return [r for r in self.records if r.slot < size]

    def last_window(self) -> list[Morphology]:
        """The newest ``AGING_WINDOW_SIZE`` published morphologies."""
        return self.records[-self.cfg.EVO.AGING_WINDOW_SIZE:]

    def lineage(self) -> LineageGraph:
        """The lineage graph of the published morphologies (and of all their ancestors)."""
        return LineageGraph(self.records)

    # ------------------------------------------------------------------ curves
    def curve(self, morphology_id: str, keys: tuple[str, ...] | None = None) -> Curve:
        """The learning curve of a morphology (``keys``: only these columns). Read anew at each call:
        a curve of a running training grows, and thousands of full curves would not fit in memory."""
        try:
            return self.run.read_in_folder(self.run.metrics_path(morphology_id), partial(read_curve, keys=keys))
        except (FileNotFoundError, NotAFolder):  # no metrics/ yet, or a link or a file: warned once
            return EMPTY

    def learning_speed(self, fraction: float, key: str | None = None) -> dict[str, int | None]:
        """Per published morphology, the iterations to reach ``fraction`` of its final ``key``
        (default: the fitness key); see ``derl.analysis.curves.iterations_to_fraction``.

        Results are kept per ``(key, fraction)``: each curve is read once.
        """
        key = key or self.fitness_key
        known = self._speeds.setdefault((key, fraction), {})
        for record in self.records:
            if record.id not in known:
                known[record.id] = iterations_to_fraction(self.curve(record.id, (key,)), key, fraction)
        return {record.id: known[record.id] for record in self.records}

    def _name_refused_names(self) -> None:
        """A name out of the search's range (``RunDir.name_problem``) is never read: named as unreadable."""
        self.unreadable.update({str(path): reason for path, reason in self.run.refused_names.items()})

    # ------------------------------------------------------------------ progress
    def in_progress(self) -> list[Training]:
        """Claimed slots whose current morphology is neither published nor failed."""
        trainings = []
        published_slots = {record.slot for record in self.records}  # a published slot's claim is final
        for slot in self.run.slots.claimed():
            if slot in published_slots or (claim := self._read_slot(slot)) is None or claim.id is None \
                    or claim.node is None or claim.worker is None:  # damaged: its owner unknown
                continue
            morphology_id = claim.id
            if morphology_id in self._published or self.run.publications.is_published(morphology_id):
                continue
            try:
                if self.run.failures.has_failed(morphology_id):
                    continue
            except JsonFileError as err:  # a failure record that fails its schema: named, and the slot skipped
                self.unreadable[str(err.path)] = str(err)
                continue
            trainings.append(Training(morphology_id, claim.slot, claim.node, claim.worker,
                                      len(self.curve(morphology_id, ()))))
        self._name_refused_names()  # the listing of slots/ and leases/ above
        return trainings

    def _read_slot(self, slot: int) -> Claim | None:
        """``SlotStore.read``; a claim that does not parse or match its schema is recorded and skipped."""
        try:
            return self.run.slots.read(slot)
        except JsonFileError as err:
            self.unreadable[str(err.path)] = str(err)
            return None

    def failed(self) -> list[Failure]:
        """The failure records of the run (``error_metadata/``), by id; a damaged one is named in ``unreadable``."""
        failures = []
        for morphology_id in sorted(self.run.failures.failed_ids()):
            try:
                failure = self.run.failures.read_failure(morphology_id)
            except JsonFileError as err:  # names the file
                self.unreadable[str(err.path)] = str(err)
                continue
            if failure is not None:
                failures.append(failure)
        return failures

    def summary(self) -> dict[str, Any] | None:
        return self.run.read_summary()

    def eval_summary(self) -> dict[str, Any] | list | None:
        """``eval/summary.json`` of the transfer evaluation, or None where there is none."""
        try:
            return self.run.read_in_folder(self.run.eval_summary_path(), read_json)
        except (FileNotFoundError, NotAFolder):  # none, or eval/ is a link or a file: warned once
            return None
        except JsonFileError as err:  # not a regular file, too large or deep, not JSON
            raise RunError(str(err)) from None

    def videos(self) -> dict[str, Path]:
        return self.run.videos()

    @property
    def total(self) -> int:
        return self.cfg.EVO.SEARCH_SPACE_SIZE

    def is_finished(self) -> bool:
        return len(self.records) >= self.total

    def require_published(self, morphology_id: str) -> Morphology:
        """The record of ``morphology_id``, read anew if it was published since.

        Raises:
            RunError: not a morphology id, or not published (one line naming the metadata file).
        """
        if morphology_id not in self.by_id:
            self.refresh()
        if morphology_id not in self.by_id:
            try:
                parse_id(morphology_id)
            except ValueError:
                raise RunError(f"not a morphology id: {morphology_id!r}") from None
            raise RunError(f"morphology {morphology_id} is not published in {self.run.root} "
                           f"({self._why_unpublished(morphology_id)})")
        return self.by_id[morphology_id]

    def _why_unpublished(self, morphology_id: str) -> str:
        """Why the record of an unpublished id is not read: refused (the reason), not numbered, or missing."""
        path = self.run.publications.metadata_path(morphology_id)
        shown = self.run.relative(path)
        if (reason := self.unreadable.get(str(path))) is not None:
            return f"{shown} is refused: {reason.removeprefix(f'{path}: ')}"
        if os.path.lexists(path):
            return f"{shown} exists but no publication number in published/ names it"
        return f"no {shown}"
