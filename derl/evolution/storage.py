"""The evolution's shared output folder (``OUT_DIR``): its layout and every read and write of it.

Nothing else in derl builds paths inside ``OUT_DIR``. ``RunDir`` adds the layout and the records
of the protocol to the primitives of ``derl.shared_folder.SharedFolder`` (staged writes, exclusive
creations, checked reads, quarantine), which make the folder safe to share between processes and
nodes. Besides those:

- ``models/`` and ``metrics/`` are written by derl.ppo, atomically too (a temporary file next to
  the target, then a rename);
- claims are exclusive creations, complete from the first moment they are seen;
- a morphology is published by its ``metadata/<id>.json``, written last and created exclusively,
  so no morphology is published twice;
- published files are never rewritten or deleted, so readers may cache them;
- every read checks its file kind's schema (``derl.evolution.schema``); ids are checked before
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
    metadata/<id>.json          published result (derl.evolution.record.PublishedRecord)
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

import os
import re
import stat
import tempfile
from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from typing import Any, TypeVar

from derl.evolution import schema
from derl.evolution.slot_store import SlotStore
from derl.evolution.worker_store import WorkerStore
from derl.fileio.folders import NotAFolder, make_folders
from derl.fileio.reads import JsonFileError, read_bytes, read_json
from derl.shared_folder import SharedFolder

T = TypeVar("T")

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


def _checked_id(morphology_id: str) -> str:
    """``morphology_id`` if it is a morphology id; a ``ValueError`` before it can become a path
    (``../../victim`` from a crafted record must never name a file outside ``OUT_DIR``)."""
    if not schema.is_id(morphology_id):
        raise ValueError(f"not a morphology id: {morphology_id!r:.60}")
    return morphology_id


class RunDir(SharedFolder):
    """One run's ``OUT_DIR``: its paths, claims, leases, publications and records.

    Args (``SharedFolder``):
        identity: this process (``Identity.current()`` unless a test injects one); it
            names staged files and is recorded in the claims this process makes.
        quarantine: a file that fails its schema is moved to ``quarantine/`` (the search).
        skip: a file that fails its schema is skipped with one warning line (read-only tools);
            with neither, reading it raises ``JsonFileError``.
    """

    FOLDERS = _FOLDERS
    NAMES = _NAMES
    OTHER_FOLDERS = ("eval",)

    @cached_property
    def slots(self) -> SlotStore:
        """Slot claims and their leases: who trains which slot."""
        return SlotStore(self)

    @cached_property
    def workers(self) -> WorkerStore:
        """Worker states, their locks and heartbeats, and the coordinators' preparing beats."""
        return WorkerStore(self)

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
    def genome_path(self, morphology_id: str) -> Path:
        return self.root / "genomes" / f"{_checked_id(morphology_id)}.json"

    def xml_path(self, morphology_id: str) -> Path:
        return self.root / "xml" / f"{_checked_id(morphology_id)}.xml"

    def checkpoint_path(self, morphology_id: str) -> Path:
        return self.root / "models" / f"{_checked_id(morphology_id)}.pt"

    def metrics_path(self, morphology_id: str) -> Path:
        return self.root / "metrics" / f"{_checked_id(morphology_id)}.jsonl"

    def metadata_path(self, morphology_id: str) -> Path:
        return self.root / "metadata" / f"{_checked_id(morphology_id)}.json"

    def error_path(self, morphology_id: str) -> Path:
        return self.root / "error_metadata" / f"{_checked_id(morphology_id)}.json"

    def video_path(self, morphology_id: str, suffix: str = ".mp4") -> Path:
        return self.root / "videos" / f"{_checked_id(morphology_id)}{suffix}"

    def tensorboard_dir(self, name: str) -> Path:
        """``tensorboard/<name>``: event files (``search``, ``morphologies/<id>``) for ``tensorboard --logdir``."""
        return self.root / "tensorboard" / name

    # Run-level files.
    def create_config(self, text: str) -> bool:
        """Creates ``config.yaml`` unless it exists (exclusive, complete from the first moment); True if created."""
        return self._create_text(self.config_path(), text)

    def write_config(self, text: str) -> None:
        """Replaces ``config.yaml`` (a run from before the one-config rule adopts the current config)."""
        self._write_text(self.config_path(), text)

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
        return self.root / "config.yaml"

    def stop_requested(self) -> bool:
        return os.path.lexists(self.root / "STOP")

    def write_summary(self, summary: dict[str, Any]) -> None:
        self._write_json(self.root / "summary.json", summary)

    def read_summary(self) -> dict[str, Any] | None:
        return self._read_checked(self.root / "summary.json", schema.summary_problem)

    # Versions of each node (manifest/<node>.json: one writer per file, so no update is lost).
    def write_manifest(self, node: int, entry: dict[str, Any]) -> None:
        self._write_json(self.root / "manifest" / f"{node}.json", entry)

    def manifest(self) -> dict[int, dict[str, Any]]:
        """Every node's manifest entry, by node."""
        entries = {}
        for node in sorted(int(name) for name in self._names("manifest")):
            entry = self._read_checked(self.root / "manifest" / f"{node}.json",
                                       lambda data, node=node: schema.manifest_problem(data, node))
            if entry is not None:
                entries[node] = entry
        return entries

    # Initial population.
    def init_population_ids(self) -> list[str] | None:
        """The ids of the initial population, or None until node 0 has written all of it."""
        data = self._read_checked(self.root / "init_population.json", schema.init_population_problem)
        return None if data is None else data["ids"]

    def mark_init_population(self, ids: list[str]) -> None:
        self._write_json(self.root / "init_population.json", {"ids": ids})

    # Genomes.
    def write_genome(self, morphology_id: str, genome_json: str, mjcf: str) -> None:
        """Writes the MJCF, then the genome (the genome file means both exist).

        A checkpoint and metrics already there belong to the body this one replaces (``has_genome``
        found it damaged): they are quarantined, so that the new body trains from scratch.
        """
        for stale in (self.checkpoint_path(morphology_id), self.metrics_path(morphology_id)):
            if self._lexists(stale):
                self.quarantine(stale, "belongs to a body made anew (its genome or MJCF was damaged)")
        self._write_text(self.xml_path(morphology_id), mjcf)
        self._write_text(self.genome_path(morphology_id), genome_json)

    def read_in_folder(self, path: Path, read: Callable[..., T]) -> T:
        """``read(path, dir_fd=folder)``: the file ``path``, below ``root``, looked up in a descriptor of
        its folder (``_folder``), as ``derl.fileio.reads.read_bytes`` and ``read_json`` take one. The check that
        every folder on the way is real and the read are one open: a folder swapped for a link at any
        moment is never read through.

        Raises:
            NotAFolder: a folder on the way is a link or a file (its entries lie outside): the search
                stops on it; a reader is warned once (``_refuse``) and should skip the file.
            FileNotFoundError: the folder is missing (or, from ``read``, the file).
        """
        try:
            with self._folder(path.parent) as folder:
                return read(path, dir_fd=folder)
        except NotAFolder as err:
            self._refuse(err)
            raise

    def read_xml(self, morphology_id: str) -> str:
        """The MJCF text of ``morphology_id``, never read through a link or from a FIFO.

        Raises:
            NotRegularFile: it (or ``xml/``) is a symbolic link, FIFO or folder, or over 16 MiB.
            FileNotFoundError: it is missing.
        """
        return self.read_in_folder(self.xml_path(morphology_id), read_bytes).decode(errors="replace")

    def _checked_genome(self, morphology_id: str) -> dict[str, Any] | None:
        return self._read_checked(self.genome_path(morphology_id),
                                  lambda data: schema.genome_problem(data, morphology_id))

    def has_genome(self, morphology_id: str) -> bool:
        """True if the genome exists and parses and its MJCF is a regular file; else the morphology
        is made anew (``write_genome``), once.

        A corrupt genome is quarantined; so is an MJCF that is a link, FIFO or folder (trained on,
        it would be read from outside ``OUT_DIR``, and its published record refused, again and again),
        and a checkpoint or metrics file that is one (the training then starts without it).
        """
        for path in (self.checkpoint_path(morphology_id), self.metrics_path(morphology_id)):
            if (kind := self._lstat(path)) is not None and not stat.S_ISREG(kind.st_mode):
                self._bad_file(path, "is not a regular file (a link, FIFO or folder); training starts without it")
        xml = self.xml_path(morphology_id)
        found = self._lstat(xml)
        if found is not None and not stat.S_ISREG(found.st_mode):
            self._bad_file(xml, "is not a regular file (a link, FIFO or folder); the morphology is made anew")
            return False
        return found is not None and self._checked_genome(morphology_id) is not None

    def read_genome(self, morphology_id: str) -> dict[str, Any]:
        """The genome, parsed and checked (``schema.genome_problem``; the body itself is the backend's to check).

        Raises:
            FileNotFoundError: it is missing, or was just quarantined.
        """
        data = self._checked_genome(morphology_id)
        if data is None:
            raise FileNotFoundError(f"{self.genome_path(morphology_id)} is missing (see quarantine/)")
        return data

    # Results.
    def published_ids(self) -> list[str]:
        return self._names("metadata")

    def failed_ids(self) -> list[str]:
        return self._names("error_metadata")

    def is_published(self, morphology_id: str) -> bool:
        return self._lexists(self.metadata_path(morphology_id))

    def has_failed(self, morphology_id: str) -> bool:
        """True if ``error_metadata/<id>.json`` exists and matches its schema (a bad one is quarantined,
        and the morphology counts as not failed: it is tried again)."""
        return self._read_checked(self.error_path(morphology_id),
                                  lambda data: schema.error_problem(data, morphology_id)) is not None

    def read_failure(self, morphology_id: str) -> dict[str, Any] | None:
        return self._read_checked(self.error_path(morphology_id),
                                  lambda data: schema.error_problem(data, morphology_id))

    def read_metadata(self, morphology_id: str, rules: schema.RecordRules) -> dict[str, Any] | None:
        """The published metadata of ``morphology_id`` in a run with ``rules``; None if missing or quarantined.

        Besides its schema (``derl.evolution.schema.metadata_problem``: a slot of the search, the
        selection criteria), the files it lists must be regular files of this folder, its publication
        number must be its own (``published/<n>.json`` names it), so no two records share a number,
        and its slot's claim must name it, so that only the morphology a worker held the slot for counts.
        """
        return self._read_checked(self.metadata_path(morphology_id),
                                  lambda data: schema.metadata_problem(data, morphology_id, rules)
                                  or self._metadata_files_problem(data) or self._metadata_claim_problem(data))

    def _metadata_files_problem(self, data: dict[str, Any]) -> str | None:
        for relative in data["files"].values():
            if (found := self._lstat(self.root / relative)) is None:
                return f"lists {relative}, which is missing"
            if not stat.S_ISREG(found.st_mode):
                return f"lists {relative}, which is not a regular file"
        number = data["publication"]
        path = self.root / "published" / f"{number:08d}.json"
        try:
            with self._folder(path.parent) as folder:
                taken = read_json(path, dir_fd=folder)
        except FileNotFoundError:
            return f"has publication {number}, which was never taken (no {self.relative(path)})"
        except NotAFolder as err:
            self._refuse(err)
            return f"has publication {number}, whose folder {self.relative(err.path)}/ is a link or a file"
        except JsonFileError as err:
            return f"has publication {number}, whose record {self.relative(path)} {err.reason}"
        if schema.published_problem(taken) or taken["id"] != data["id"]:
            return f"has publication {number}, which {self.relative(path)} gives to {taken.get('id')!r:.40}" \
                if isinstance(taken, dict) else f"has publication {number}, whose record is not an object"
        return None

    def _metadata_claim_problem(self, data: dict[str, Any]) -> str | None:
        """Why the current claim of the record's slot (``slots/`` or its latest lease) refutes it, or None.

        A worker names each morphology in its slot's claim before training it and never changes the
        claim once it is published, so a record its slot never held (planted) is refused. A damaged
        claim names nobody and refutes nothing (``SlotStore.read``: the lease, not its content, decides who
        finishes the slot): refusing the record would throw away the result its owner just published.
        """
        slot = data["slot"]
        try:
            claim = self.slots.read(slot)
        except JsonFileError:  # damaged, read by a reader that neither quarantines nor skips
            return None
        if claim is None:
            return f"is in slot {slot}, which was never claimed (no {self.relative(self.slots.path(slot))})"
        if claim.get("damaged") or claim["id"] == data["id"]:
            return None
        name = self.relative(self.slots.lease_path(slot, claim["lease"]))
        return f"is in slot {slot}, whose claim {name} names {claim['id']}"

    def take_publication_number(self, morphology_id: str, node: int, worker: int) -> int:
        """The next free publication number, taken by creating ``published/<n>.json`` exclusively.

        Numbers are unique on every node (exclusive creation), increasing in the order they
        are taken, and need no clock. The search starts above the highest number seen; a
        number taken concurrently by another process makes this one try the next.
        A number whose taker died before writing its metadata stays taken and unused (a gap):
        the morphology takes a new number when it is published again.
        """
        folder = self.root / "published"
        taken = [int(name) for name in self._names("published")]  # a damaged record's number stays taken
        number = max(taken, default=-1) + 1
        record = {"id": morphology_id, "node": node, "worker": worker}
        while not self._create_json(folder / f"{number:08d}.json", record):
            number += 1
        return number

    def publish(self, metadata: dict[str, Any]) -> bool:
        """Publishes a finished morphology (exclusive creation); False if it was already published.

        Its other files must already be on disk, and ``metadata["publication"]`` must come
        from ``take_publication_number``.
        """
        return self._create_json(self.metadata_path(metadata["id"]), metadata)

    def record_failure(self, failure: dict[str, Any]) -> None:
        self._write_json(self.error_path(failure["id"]), failure)

    def retire(self, morphology_id: str) -> None:
        """Removes a morphology from the vanilla population; its files stay."""
        self._create_json(self.root / "retired" / f"{_checked_id(morphology_id)}.json", {"id": morphology_id})

    def retired_ids(self) -> set[str]:
        return set(self._names("retired"))

    # Videos and what other tools write.
    def save_video(self, morphology_id: str, write: Callable[[Path], Path]) -> Path:
        """Publishes ``videos/<id>.<ext>`` atomically.

        ``write(path)`` writes the video to a ``.mp4`` path in a private temporary folder of this
        node and returns the file it wrote (its suffix may differ: the GIF fallback), which is then
        staged and renamed into place (``_write_bytes``). The encoder writes by path, so it never
        writes in ``OUT_DIR``, where a folder swapped for a link would take its file outside; a
        failed encoder leaves nothing behind.
        """
        make_folders(self.video_path(morphology_id).parent, self.root)
        with tempfile.TemporaryDirectory(prefix="derl-video-") as private:
            written = write(Path(private) / f"{morphology_id}.mp4")
            target = self.video_path(morphology_id, written.suffix)
            self._write_bytes(target, written.read_bytes())
        return target

    def videos(self) -> dict[str, Path]:
        """The published videos by morphology id."""
        found = [self.root / "videos" / name for name in self.entries(self.root / "videos")]
        return {p.stem: p for p in found if schema.is_id(p.stem) and p.suffix in (".mp4", ".gif")
                and (kind := self._lstat(p)) is not None and stat.S_ISREG(kind.st_mode)}

    def eval_summary_path(self) -> Path:
        return self.root / "eval" / "summary.json"

    def report_dir(self) -> Path:
        return self.root / "report"

    def root_above(self, path: str | Path) -> Path | None:
        """``root`` if ``path`` lies below it, else None (a user's own folder): the ``root`` that
        ``derl.fileio``'s writes take, so that every folder between it and ``path`` is opened without
        following a link."""
        return self.root if Path(os.path.abspath(path)).is_relative_to(self.root) else None
