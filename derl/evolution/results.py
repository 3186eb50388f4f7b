"""Published results: an in-memory cache of ``metadata/``, parent selection and the run summary."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Iterable
from typing import Any

import numpy as np

from derl.checked_config import EvoCfg
from derl.evolution import selection
from derl.evolution.folder.genome_store import StoredGenome
from derl.evolution.folder.publication_store import lowest_free
from derl.evolution.folder.record import PublishedRecord
from derl.evolution.folder.run_dir import RunDir
from derl.evolution.folder.schema import RecordRules
from derl.evolution.population import num_initial_slots, parse_id, search_kind

TOP_K = 10


class PublishedResults:
    """The published records of a run, as its config ``evo`` accepts them (``schema.RecordRules``).

    Published files never change, so each is read once. ``unavailable`` holds the published
    morphologies whose genome could not be read when drawn as a parent (quarantined since): they
    stay published (and counted) but leave the tournament pool.
    """

    def __init__(self, run: RunDir, evo: EvoCfg):
        self.run = run
        self.rules = RecordRules.of(evo)
        self.by_id: dict[str, PublishedRecord] = {}
        self.unavailable: set[str] = set()
        # Every publication number below next_number was seen taken (numbers are never removed); pending:
        # those of them whose record was not published yet (being written, or a gap a dead worker left).
        self.next_number = 0
        self.pending: dict[int, str] = {}
        self.refreshed = False

    def refresh(self) -> None:
        """Reads every published record not read yet: a listing of ``metadata/`` (and of ``published/``, for
        ``refresh_new``), so a record behind a missing number is found too. For the waits and the summary."""
        publications = self.run.publications
        for morphology_id in publications.published_ids():
            if morphology_id not in self.by_id and (record := publications.read_metadata(morphology_id, self.rules)):
                self.by_id[morphology_id] = record  # None: quarantined meanwhile
        numbers = publications.taken_numbers()  # listed after metadata/: a record missed is pending below
        known = {record.publication for record in self.by_id.values()}
        self.next_number = max(self.next_number, lowest_free(numbers))
        for number in sorted(numbers - known - set(self.pending)):
            if number < self.next_number and (taker := publications.taken_id(number)) is not None:
                self.pending[number] = taker
        self._read_pending()
        self.refreshed = True

    def refresh_new(self) -> None:
        """Reads the records published since the last refresh, at the cost of what is new: the numbers from
        ``next_number`` up to the first free one (``PublicationStore.taken_from``), and the few pending.

        In a folder derl wrote the numbers taken are ``0 .. n - 1``, each record's among them, so this
        finds what ``refresh`` finds; a record behind a number someone removed waits for the next
        ``refresh`` (the scheduler's waits). What a tournament draws from and a publication takes per
        step, without listing a folder that grows with the search.
        """
        if not self.refreshed:
            self.refresh()
            return
        found = self.run.publications.taken_from(self.next_number)
        self.next_number += len(found)
        self.pending.update({number: morphology_id for number, morphology_id in found.items() if morphology_id})
        self._read_pending()

    def _read_pending(self) -> None:
        for number, morphology_id in list(self.pending.items()):
            if morphology_id not in self.by_id and \
                    (record := self.run.publications.read_metadata(morphology_id, self.rules)) is not None:
                self.by_id[morphology_id] = record
            if morphology_id in self.by_id:
                del self.pending[number]

    def count_slots_below(self, limit: int) -> int:
        """Published morphologies in slots below ``limit`` (``num_initial_slots``: the initial ones)."""
        return sum(1 for morphology_id in self.by_id if parse_id(morphology_id)[0] < limit)

    def select_parent(self, evo: EvoCfg, rng: np.random.Generator) -> StoredGenome:
        """The genome of the parent chosen by ``EVO.TOURNAMENT_TYPE`` (vanilla retires a loser).

        A winner whose genome cannot be read leaves the pool and the tournament is drawn again, so
        a genome lost to ``quarantine/`` never costs the child an attempt.

        Raises:
            FileNotFoundError: no morphology in the pool has a readable genome (the folder's problem).
        """
        while True:
            pool = self._tournament_pool(evo)
            if not pool:
                raise FileNotFoundError(f"no parent: no published morphology of {self.run.root} has a readable "
                                        "genome (see quarantine/)")
            table = selection.criteria_table([r.fitness for r in pool], evo.SELECTION_CRITERIA)
            costs = selection.costs_from_table(table, evo.SELECTION_CRITERIA_OBJ)
            num = selection.num_participants(evo.TOURNAMENT_TYPE, evo.NUM_PARTICIPANTS, evo.PERCENT_PARTICIPANTS,
                                             len(pool))
            winner, participants = selection.tournament(costs, num, rng)
            try:
                genome = self.run.genomes.read_genome(pool[winner].id)
            except FileNotFoundError as err:
                print(f"warning: {pool[winner].id} leaves the tournament pool: {err}", file=sys.stderr, flush=True)
                self.unavailable.add(pool[winner].id)
                continue
            if not evo.TOURNAMENT_TYPE.startswith("aging"):
                loser = selection.first_dominated(costs, participants)
                if loser is not None:
                    self.run.publications.retire(pool[loser].id)
            return genome

    def _tournament_pool(self, evo: EvoCfg) -> list[PublishedRecord]:
        """The records a tournament may draw: the aging window, or those not retired (vanilla)."""
        records = [r for r in self.by_id.values() if r.id not in self.unavailable]
        if evo.TOURNAMENT_TYPE.startswith("aging"):
            window = selection.aging_window([r.publication for r in records], evo.AGING_WINDOW_SIZE)
            return [records[i] for i in window]
        retired = self.run.publications.retired_ids()
        return sorted((r for r in records if r.id not in retired), key=lambda r: r.slot)


def summarize(
    evo: EvoCfg, run: RunDir, results: PublishedResults, session: dict[str, float]
) -> dict[str, Any]:
    """The content of ``summary.json``.

    Args:
        session: ``{"started": unix time, "published_at_start": count}`` of the
            coordinator writing it; the rate is measured over its own session so
            that no clock of another machine is involved.
    """
    records = list(results.by_id.values())
    done = len(records)
    total = evo.SEARCH_SPACE_SIZE
    elapsed_h = max(time.time() - session["started"], 1e-9) / 3600
    rate = (done - session["published_at_start"]) / elapsed_h
    ranked = rank(records, evo.SELECTION_CRITERIA, evo.SELECTION_CRITERIA_OBJ)
    top = [top_entry(r, evo.SELECTION_CRITERIA) for r in ranked[:TOP_K]]
    return {
        "published": done,
        "total": total,
        "search": search_kind(evo),
        "initial_population_size": num_initial_slots(evo),
        "claimed_slots": run.slots.num_claimed(),
        "failed": len(run.failures.failed_ids()),
        "selection_criteria": list(evo.SELECTION_CRITERIA),
        "best": top[0] if top else None,
        "top_k": top,
        "morphologies_per_hour": rate,
        "eta_hours": (total - done) / rate if rate > 0 else None,
        "updated": time.time(),
    }


def top_entry(record: PublishedRecord, criteria: tuple[str, ...]) -> dict[str, str | float]:
    """A morphology as ``summary.json``'s ``best`` and ``top_k`` show it: id, lineage, its selection criteria."""
    return {"id": record.id, "lineage": record.lineage, **{key: record.fitness[key] for key in criteria}}


def rank(records: Iterable[PublishedRecord], criteria: tuple[str, ...],
         objectives: tuple[int, ...]) -> list[PublishedRecord]:
    """Records best first: lexicographic on the criteria, each in its objective's direction."""
    usable = [r for r in records if all(key in r.fitness for key in criteria)]
    signs = list(zip(criteria, objectives, strict=True))
    return sorted(usable, key=lambda r: tuple(sign * r.fitness[key] for key, sign in signs))


def is_finite_summary(summary: dict[str, float]) -> bool:
    return all(math.isfinite(float(value)) for value in summary.values())
