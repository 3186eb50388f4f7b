"""The search's own curves in TensorBoard (``OUT_DIR/tensorboard/search/``), so
``tensorboard --logdir OUT_DIR`` follows a live search.

One point per published morphology, by publication number: its fitness (the first of
``EVO.SELECTION_CRITERIA``) and return, the running best, the mean over the aging window that
the tournament draws from (``EVO.AGING_WINDOW_SIZE``), the body's limbs and degrees of freedom;
and the rate of the search (morphologies per hour) each time ``summary.json`` is written. Node 0's
coordinator writes them; each of its sessions rewrites the whole curve and hides the previous
session's points (``purge_step=0``), so a restart draws no doubled line.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from derl.checked_config import EvoCfg
from derl.evolution.folder.record import PublishedRecord
from derl.evolution.folder.run_dir import RunDir
from derl.fileio.folders import make_folders
from derl.morphology import Genome, GenomeError

SEARCH_TAGS = ("search/fitness", "search/return", "search/best", "search/aging_window_mean",
               "search/morphologies_per_hour", "morphology/limbs", "morphology/dof")


class SearchCurves:
    """Writes the points of newly published morphologies each time ``update`` is called."""

    def __init__(self, evo: EvoCfg, run: RunDir):
        from torch.utils.tensorboard import SummaryWriter  # imports tensorboard: only when asked for

        self.run = run
        self.criterion = evo.SELECTION_CRITERIA[0]
        self.sign = -evo.SELECTION_CRITERIA_OBJ[0]  # +1: larger is better
        self.window = evo.AGING_WINDOW_SIZE
        make_folders(run.tensorboard_dir("search"), run.root)  # none a link: the events would land outside
        self.writer = SummaryWriter(str(run.tensorboard_dir("search")), purge_step=0, flush_secs=30)
        self.fitness: dict[int, float] = {}  # publication number -> fitness, of the points written
        self.best = -math.inf

    def update(self, records: Iterable[PublishedRecord], morphologies_per_hour: float | None = None) -> None:
        """Adds the records not written yet, in publication order, then the search's rate."""
        new = sorted((r for r in records if r.publication not in self.fitness and self.criterion in r.fitness),
                     key=lambda r: r.publication)
        for record in new:
            step, value = record.publication, record.fitness[self.criterion]
            self.fitness[step] = value
            self.best = max(self.best, self.sign * value)
            window = [v for p, v in self.fitness.items() if step - self.window < p <= step]
            self.writer.add_scalar("search/fitness", value, step)
            self.writer.add_scalar("search/best", self.sign * self.best, step)
            self.writer.add_scalar("search/aging_window_mean", float(np.mean(window)), step)
            if "return" in record.fitness:
                self.writer.add_scalar("search/return", record.fitness["return"], step)
            self._body(record.id, step)
        if morphologies_per_hour is not None and self.fitness and morphologies_per_hour > 0:
            self.writer.add_scalar("search/morphologies_per_hour", morphologies_per_hour, max(self.fitness))
        self.writer.flush()

    def _body(self, morphology_id: str, step: int) -> None:
        """Limbs and degrees of freedom of the genome, where it is one of ``derl.morphology``."""
        # Drawing never moves a file: a genome that does not parse is skipped here and left for the
        # search to judge (quarantined only if a worker needs it as a parent).
        try:
            with self.run.skipping_bad_files():
                genome = Genome.from_dict(self.run.genomes.read_genome(morphology_id).data)
        except (GenomeError, OSError, ValueError):
            return
        self.writer.add_scalar("morphology/limbs", genome.num_limbs, step)
        self.writer.add_scalar("morphology/dof", genome.dof, step)

    def close(self) -> None:
        self.writer.close()
