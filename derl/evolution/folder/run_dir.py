"""The evolution's shared output folder (``OUT_DIR``): its layout and every read and write of it.

Nothing else in derl builds paths inside ``OUT_DIR``. ``RunDir`` adds the layout and the records
of the protocol to the primitives of ``derl.evolution.folder.shared.SharedFolder`` (staged writes, exclusive
creations, checked reads, quarantine), which make the folder safe to share between processes and
nodes. It keeps the run-level files (config, summary, manifest, initial population, videos) and
composes one small store per corner of the layout, each on those primitives:

- ``run.slots`` (``slot_store.SlotStore``): ``slots/`` and ``leases/``, who trains which slot, on the
  claim protocol (``claim_store.ClaimStore``) that the evaluation's claims share;
- ``run.workers`` (``worker_store.WorkerStore``): ``workers/`` and ``nodes/``, states and heartbeats;
- ``run.genomes`` (``genome_store.GenomeStore``): ``genomes/`` and ``xml/``, each body before it trains;
- ``run.publications`` (``publication_store.PublicationStore``): ``published/``, ``metadata/`` and
  ``retired/``, the results and the vanilla population;
- ``run.failures`` (``failure_store.FailureStore``): ``error_metadata/``, the failed morphologies.

Besides those:

- ``models/`` and ``metrics/`` are written by derl.ppo, atomically too (a temporary file next to
  the target, then a rename);
- claims are exclusive creations, complete from the first moment they are seen;
- a morphology is published by its ``metadata/<id>.json``, written last and created exclusively,
  so no morphology is published twice;
- published files are never rewritten or deleted, so readers may cache them;
- every read checks its file kind's schema (``derl.evolution.folder.schema``); ids are checked before
  they become paths. A damaged claim is kept: the lease decides (``SlotStore.read``).

Layout::

    config.yaml                 the search's config: created once, exclusively, by the first node
    manifest/<node>.json        versions (derl commit, Python, torch, mujoco, numpy, gymnasium) of each node
    init_population.json        {"ids": [...]}: the initial population is ready (written last by node 0)
    genomes/<id>.json           genome (derl.morphology JSON)
    xml/<id>.xml                MJCF of the genome
    models/<id>.pt              PPO checkpoint
    metrics/<id>.jsonl          training curves (JSON lines, one record per PPO iteration)
    slots/<slot>.json           claim of a slot: {slot, id, attempt, node, worker, host, pid, token, lease}
    leases/<slot>-<g>.json      the claim after the g-th takeover of a slot whose owner went silent
    published/<n>.json          publication number n, taken by exclusive creation: {id, node, worker}
    metadata/<id>.json          published result (derl.evolution.folder.record.PublishedRecord)
    error_metadata/<id>.json    failed morphology: {id, slot, attempt, reason, node, worker}
    retired/<id>.json           removed from the vanilla-tournament population
    workers/<node>-<worker>.json  worker state; .lock: held while it runs; .alive: heartbeat (its mtime)
    nodes/<node>-<token>.preparing  heartbeat (its mtime) of a node's coordinator while it prepares the run
                                (node 0 draws the initial population, others wait for it); removed once
                                its workers start; <token> is the coordinator's Identity token
    videos/<id>.mp4             policy video of one of the last EVO.VIDEOS_LAST_N morphologies (.gif fallback)
    tensorboard/search/         TensorBoard event files of the search's curves (node 0; append-only, as
                                TensorBoard writes them); tensorboard/morphologies/<id>/: per morphology, if asked
    eval/                       transfer evaluation (tools/evaluate.py; layout in derl.evaluation.store)
    report/                     the static HTML report (tools/report.py)
    summary.json                progress, best so far, top-k, morphologies/hour
    STOP                        create it to stop every worker after its current iteration
    tmp/                        staging area for atomic writes
    quarantine/                 files that did not parse or match their schema, moved out of the way
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import stat
import tempfile
from collections.abc import Callable, Iterator
from functools import cached_property
from pathlib import Path
from typing import Any

from derl.checked_config import Config, load_run_config
from derl.evolution.folder import schema
from derl.evolution.folder.failure_store import FailureStore
from derl.evolution.folder.genome_store import GenomeLimits, GenomeStore, morphology_file
from derl.evolution.folder.publication_store import PublicationStore
from derl.evolution.folder.shared import Identity, SharedFolder
from derl.evolution.folder.slot_store import SlotStore
from derl.evolution.folder.worker_store import WorkerStore
from derl.fileio.folders import make_folders
from derl.fileio.outputs import SEARCH_CONFIG
from derl.fileio.reads import read_bytes

_FOLDERS = ("genomes", "xml", "models", "metrics", "slots", "leases", "published", "metadata", "error_metadata",
            "retired", "workers", "nodes", "videos", "manifest", "tmp", "quarantine")
_ID = schema.ID_PATTERN.pattern
# The only names the listed folders may hold; anything else is foreign.
_NAMES = {
    "slots": re.compile(r"^\d{6,}\.json\Z"),
    "leases": re.compile(r"^\d{6,}-\d+\.json\Z"),
    "published": re.compile(r"^\d{8,}\.json\Z"),
    "metadata": re.compile(rf"^{_ID}\.json\Z"),
    "error_metadata": re.compile(rf"^{_ID}\.json\Z"),
    "retired": re.compile(rf"^{_ID}\.json\Z"),
    "workers": re.compile(r"^\d+-\d+\.(json|lock|alive)\Z"),
    "nodes": re.compile(r"^\d+-[0-9A-Za-z_]+\.preparing\Z"),
    "manifest": re.compile(r"^\d+\.json\Z"),
}


class RunDir(SharedFolder):
    """One run's ``OUT_DIR``: its paths, claims, leases, publications and records.

    Args (``SharedFolder``):
        identity: this process (``Identity.current()`` unless a test injects one); it
            names staged files and is recorded in the claims this process makes.
        quarantine: a file that fails its schema is moved to ``quarantine/`` (the search).
        skip: a file that fails its schema is skipped with one warning line (read-only tools);
            with neither, reading it raises ``JsonFileError``.
        search_space_size: the search's ``EVO.SEARCH_SPACE_SIZE``: the numbers in file names are held to
            it (``schema.name_problem``: slots, leases, publication numbers, ids), so a planted name is
            never counted or continued from; None (a folder whose config is not read yet) holds them
            to the largest search (``schema.MAX_SEARCH_SPACE_SIZE``).
        genome_limits: what a genome read back must be (its bytes, its body's design space): the
            backend's (``Backend.genome_limits``, the search's workers); None: only bounded JSON.
    """

    FOLDERS = _FOLDERS
    NAMES = _NAMES
    OTHER_FOLDERS = ("eval",)

    def __init__(self, root: str | Path, identity: Identity | None = None, quarantine: bool = False,
                 skip: bool = False, search_space_size: int | None = None,
                 genome_limits: GenomeLimits | None = None):
        super().__init__(root, identity, quarantine, skip)
        self.search_space_size = search_space_size or schema.MAX_SEARCH_SPACE_SIZE
        self.genome_limits = genome_limits or GenomeLimits()
        self.config: Config | None = None  # config.yaml, once read (``open``, ``read_config``)

    @classmethod
    def open(cls, root: str | Path, identity: Identity | None = None, *, quarantine: bool = False,
             skip: bool = False) -> RunDir:
        """The run at ``root`` as a process that reads it (status, the report, an evaluation) opens it: once,
        its ``config.yaml`` read (``config``, None while it has none) and the names held to its search's size.

        Raises:
            ConfigError: ``config.yaml`` does not load (one line naming it).
        """
        run = cls(root, identity, quarantine, skip)
        run.read_config()
        return run

    def read_config(self) -> Config | None:
        """Loads ``config.yaml`` (``load_run_config``: a link or FIFO there is refused) into ``config`` and
        holds the names to its ``EVO.SEARCH_SPACE_SIZE``; None while the run has none."""
        if os.path.lexists(self.config_path()):
            self.config = load_run_config(self.config_path())
            self.hold_names_to(self.config.EVO.SEARCH_SPACE_SIZE)
        return self.config

    def hold_names_to(self, search_space_size: int) -> None:
        """Holds the numbers in file names to the search's ``EVO.SEARCH_SPACE_SIZE`` from now on: a node
        knows it only once it has joined the search (``config.yaml``). The publication store, which holds
        its numbers to it, is built anew on its next use."""
        self.search_space_size = search_space_size
        self.__dict__.pop("publications", None)

    @contextlib.contextmanager
    def skipping_bad_files(self) -> Iterator[None]:
        """Within: a file that fails its schema is skipped with one warning, never moved nor raised (a
        reader inside a process that writes, such as the search's curves in the coordinator: a genome
        that does not parse is left for the workers to judge)."""
        modes = self.quarantine_bad_files, self.skip_bad_files
        self.quarantine_bad_files, self.skip_bad_files = False, True
        try:
            yield
        finally:
            self.quarantine_bad_files, self.skip_bad_files = modes

    def name_problem(self, folder: str, name: str) -> str | None:
        """The pattern of ``folder`` (``NAMES``), then the numbers in ``name`` held to the search's range."""
        return super().name_problem(folder, name) or \
            schema.name_problem(folder, name.split(".")[0], self.search_space_size)

    @cached_property
    def slots(self) -> SlotStore:
        """Slot claims and their leases: who trains which slot."""
        return SlotStore(self)

    @cached_property
    def workers(self) -> WorkerStore:
        """Worker states, their locks and heartbeats, and the coordinators' preparing beats."""
        return WorkerStore(self)

    @cached_property
    def genomes(self) -> GenomeStore:
        """Each morphology's genome and MJCF, written before it trains."""
        return GenomeStore(self, self.genome_limits)

    @cached_property
    def publications(self) -> PublicationStore:
        """Publication numbers, published records (checked against the slots) and retirements."""
        return PublicationStore(self, self.slots, self.search_space_size)

    @cached_property
    def failures(self) -> FailureStore:
        """The records of failed morphologies."""
        return FailureStore(self)

    def not_a_search(self) -> str | None:
        """Why ``root`` is no evolution ``OUT_DIR`` (missing, empty, a ``tools/train_ppo.py`` training), or None."""
        if not self.root.is_dir():
            return f"run folder not found: {self.root}"
        if (self.root / "metadata").is_dir():
            return None
        if (self.root / "run.json").is_file():  # derl.training.run's layout
            return (f"{self.root} is a training of tools/train_ppo.py, not an evolution OUT_DIR: its result is "
                    "metrics.json, its curves tensorboard/")
        if not self.config_path().is_file():
            return f"{self.root} is not an evolution output folder (no metadata/ or config.yaml)"
        return None

    # Paths of a morphology's files.
    def checkpoint_path(self, morphology_id: str) -> Path:
        return morphology_file(self.root, "checkpoint", morphology_id)

    def metrics_path(self, morphology_id: str) -> Path:
        return morphology_file(self.root, "metrics", morphology_id)

    def video_path(self, morphology_id: str, suffix: str = ".mp4") -> Path:
        return self.root / "videos" / f"{schema.checked_id(morphology_id)}{suffix}"

    def tensorboard_dir(self, name: str) -> Path:
        """``tensorboard/<name>``: event files (``search``, ``morphologies/<id>``) for ``tensorboard --logdir``."""
        return self.root / "tensorboard" / name

    # Run-level files.
    def create_config(self, text: str) -> bool:
        """Creates ``config.yaml`` unless it exists (exclusive, complete from the first moment); True if created."""
        return self.create_text(self.config_path(), text)

    def write_config(self, text: str) -> None:
        """Replaces ``config.yaml`` (a run from before the one-config rule adopts the current config)."""
        self.write_text(self.config_path(), text)

    def read_config_text(self) -> str | None:
        """The text of ``config.yaml``, None if missing.

        Raises:
            NotRegularFile: it is a symbolic link, FIFO, directory or device, or over 16 MiB.
        """
        try:
            return read_bytes(self.config_path()).decode(errors="replace")
        except FileNotFoundError:
            return None

    def config_path(self) -> Path:
        return self.root / SEARCH_CONFIG

    def stop_requested(self) -> bool:
        return os.path.lexists(self.root / "STOP")

    def write_summary(self, summary: dict[str, Any]) -> None:
        self.write_json(self.root / "summary.json", summary)

    def read_summary(self) -> dict[str, Any] | None:
        return self.read_checked(self.root / "summary.json", schema.summary_problem)

    # Versions of each node (manifest/<node>.json: one writer per file, so no update is lost).
    def write_manifest(self, node: int, entry: dict[str, Any]) -> None:
        self.write_json(self.root / "manifest" / f"{node}.json", entry)

    def manifest(self) -> dict[int, dict[str, Any]]:
        """Every node's manifest entry, by node."""
        entries = {}
        for node in sorted(int(name) for name in self.names("manifest")):
            entry = self.read_checked(self.root / "manifest" / f"{node}.json",
                                      functools.partial(schema.manifest_problem, node=node))
            if entry is not None:
                entries[node] = entry
        return entries

    # Initial population.
    def init_population_ids(self) -> list[str] | None:
        """The ids of the initial population, or None until node 0 has written all of it."""
        data = self.read_checked(self.root / "init_population.json", schema.init_population_problem)
        return None if data is None else data["ids"]

    def mark_init_population(self, ids: list[str]) -> None:
        self.write_json(self.root / "init_population.json", {"ids": ids})

    # Videos and what other tools write.
    def save_video(self, morphology_id: str, write: Callable[[Path], Path]) -> Path:
        """Publishes ``videos/<id>.<ext>`` atomically.

        ``write(path)`` writes the video to a ``.mp4`` path in a private temporary folder of this
        node and returns the file it wrote (its suffix may differ: the GIF fallback), which is then
        staged and renamed into place (``write_bytes``). The encoder writes by path, so it never
        writes in ``OUT_DIR``, where a folder swapped for a link would take its file outside; a
        failed encoder leaves nothing behind.
        """
        make_folders(self.video_path(morphology_id).parent, self.root)
        with tempfile.TemporaryDirectory(prefix="derl-video-") as private:
            written = write(Path(private) / f"{morphology_id}.mp4")
            target = self.video_path(morphology_id, written.suffix)
            self.write_bytes(target, written.read_bytes())
        return target

    def videos(self) -> dict[str, Path]:
        """The published videos by morphology id."""
        found = [self.root / "videos" / name for name in self.entries(self.root / "videos")]
        return {p.stem: p for p in found if schema.is_id(p.stem) and p.suffix in (".mp4", ".gif")
                and (kind := self.lstat(p)) is not None and stat.S_ISREG(kind.st_mode)}

    def eval_summary_path(self) -> Path:
        return self.root / "eval" / "summary.json"

    def report_dir(self) -> Path:
        return self.root / "report"

    def root_above(self, path: str | Path) -> Path | None:
        """``root`` if ``path`` lies below it, else None (a user's own folder): the ``root`` that
        ``derl.fileio``'s writes take, so that every folder between it and ``path`` is opened without
        following a link."""
        return self.root if Path(os.path.abspath(path)).is_relative_to(self.root) else None
