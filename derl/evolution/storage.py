"""The shared output folder (``OUT_DIR``): its layout and every read and write of it.

Nothing else in derl builds paths inside ``OUT_DIR``. Rules that make the folder
safe to share between processes and nodes:

- every file written here is staged in ``tmp/`` (``derl.fileio``: temp + fsync +
  rename) and then renamed into place, so these folders never show a partial
  file; staged names carry the host, the pid, a random token of the process and a
  counter, so no two processes (other hosts, other pid namespaces) or calls share
  one; ``models/`` and ``metrics/`` are written by derl.ppo, atomically too (a
  temporary file next to the target, then a rename);
- claims are published with ``os.link``, which fails if the target exists: an
  exclusive creation whose file is complete from the first moment it is seen;
- a morphology is published by its ``metadata/<id>.json``, written last;
- published files are never rewritten or deleted, so readers may cache them.

Layout::

    config.yaml                 resolved config (node 0)
    init_population.json        {"ids": [...]}: the initial population is ready (written last by node 0)
    genomes/<id>.json           genome (derl.morphology JSON)
    xml/<id>.xml                MJCF of the genome
    models/<id>.pt              PPO checkpoint
    metrics/<id>.jsonl          training curves (JSON lines, one record per PPO iteration)
    slots/<slot>.json           claim of a slot: {slot, id, attempt, node, worker, host, pid, token}
    published/<n>.json          publication number n, taken by exclusive creation: {id, node, worker}
    metadata/<id>.json          published result (see derl.evolution.worker.build_metadata)
    error_metadata/<id>.json    failed morphology: {id, slot, attempt, reason, node, worker}
    retired/<id>.json           removed from the vanilla-tournament population
    workers/<node>-<worker>.json  worker state and heartbeat; .lock: held while it runs
    videos/<id>.mp4             policy video of one of the last EVO.VIDEOS_LAST_N morphologies (.gif fallback)
    eval/summary.json           transfer evaluation table (tools/evaluate.py)
    report/                     the static HTML report (tools/report.py)
    summary.json                progress, best so far, top-k, morphologies/hour
    STOP                        create it to stop every worker after its current iteration
    tmp/                        staging area for atomic writes
"""

from __future__ import annotations

import itertools
import os
import secrets
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from derl.fileio import atomic_write_text, read_json, write_json

_FOLDERS = ("genomes", "xml", "models", "metrics", "slots", "published", "metadata", "error_metadata",
            "retired", "workers", "videos", "tmp")


class Identity(NamedTuple):
    """Who writes: unique across hosts and pid namespaces thanks to the random token."""

    host: str
    pid: int
    token: str

    @staticmethod
    def current() -> Identity:
        return Identity(socket.gethostname(), os.getpid(), secrets.token_hex(8))

    def as_dict(self) -> dict[str, Any]:
        return {"host": self.host, "pid": self.pid, "token": self.token}


class RunDir:
    """One run's ``OUT_DIR``: paths, atomic writes, exclusive claims, listings.

    Args:
        identity: this process (``Identity.current()`` unless a test injects one); it
            names staged files and is recorded in the claims this process makes.
    """

    def __init__(self, out_dir: str | Path, identity: Identity | None = None):
        self.root = Path(out_dir).resolve()
        self.identity = identity or Identity.current()
        self._counter = itertools.count()

    def create(self) -> None:
        for folder in _FOLDERS:
            (self.root / folder).mkdir(parents=True, exist_ok=True)

    # Paths of a morphology's files.
    def genome_path(self, morphology_id: str) -> Path:
        return self.root / "genomes" / f"{morphology_id}.json"

    def xml_path(self, morphology_id: str) -> Path:
        return self.root / "xml" / f"{morphology_id}.xml"

    def checkpoint_path(self, morphology_id: str) -> Path:
        return self.root / "models" / f"{morphology_id}.pt"

    def metrics_path(self, morphology_id: str) -> Path:
        return self.root / "metrics" / f"{morphology_id}.jsonl"

    def metadata_path(self, morphology_id: str) -> Path:
        return self.root / "metadata" / f"{morphology_id}.json"

    def error_path(self, morphology_id: str) -> Path:
        return self.root / "error_metadata" / f"{morphology_id}.json"

    def video_path(self, morphology_id: str, suffix: str = ".mp4") -> Path:
        return self.root / "videos" / f"{morphology_id}{suffix}"

    def relative(self, path: Path) -> str:
        return str(path.relative_to(self.root))

    # Atomic writes, staged outside the target folder.
    def _staged(self, target: Path) -> Path:
        me, call = self.identity, next(self._counter)
        return self.root / "tmp" / f"{me.host}-{me.pid}-{me.token}-{call}-{target.parent.name}-{target.name}"

    def _write_text(self, target: Path, text: str) -> None:
        staged = self._staged(target)
        atomic_write_text(staged, text)
        os.replace(staged, target)

    def _write_json(self, target: Path, obj: Any) -> None:
        staged = self._staged(target)
        write_json(staged, obj)
        os.replace(staged, target)

    def _create_json(self, target: Path, obj: Any) -> bool:
        """Creates ``target`` with ``obj`` unless it exists; True if this call created it."""
        staged = self._staged(target)
        write_json(staged, obj)
        try:
            os.link(staged, target)
        except FileExistsError:
            return False
        finally:
            staged.unlink()
        return True

    # Run-level files.
    def write_config(self, text: str) -> None:
        self._write_text(self.root / "config.yaml", text)

    def config_path(self) -> Path:
        return self.root / "config.yaml"

    def stop_requested(self) -> bool:
        return (self.root / "STOP").exists()

    def write_summary(self, summary: dict[str, Any]) -> None:
        self._write_json(self.root / "summary.json", summary)

    def read_summary(self) -> dict[str, Any] | None:
        path = self.root / "summary.json"
        return read_json(path) if path.exists() else None

    # Initial population.
    def init_population_ids(self) -> list[str] | None:
        """The ids of the initial population, or None until node 0 has written all of it."""
        path = self.root / "init_population.json"
        return read_json(path)["ids"] if path.exists() else None

    def mark_init_population(self, ids: list[str]) -> None:
        self._write_json(self.root / "init_population.json", {"ids": ids})

    # Genomes.
    def write_genome(self, morphology_id: str, genome_json: str, mjcf: str) -> None:
        """Writes the MJCF, then the genome (the genome file means both exist)."""
        self._write_text(self.xml_path(morphology_id), mjcf)
        self._write_text(self.genome_path(morphology_id), genome_json)

    def has_genome(self, morphology_id: str) -> bool:
        return self.genome_path(morphology_id).exists()

    def read_genome(self, morphology_id: str) -> str:
        return self.genome_path(morphology_id).read_text()

    # Slots.
    def _slot_path(self, slot: int) -> Path:
        return self.root / "slots" / f"{slot:06d}.json"

    def claim_slot(self, slot: int, claim: dict[str, Any]) -> bool:
        """Claims ``slot`` exclusively (the claim records this process); False if someone else holds it."""
        return self._create_json(self._slot_path(slot), {**claim, **self.identity.as_dict()})

    def is_claimed(self, slot: int) -> bool:
        return self._slot_path(slot).exists()

    def read_slot(self, slot: int) -> dict[str, Any] | None:
        path = self._slot_path(slot)
        return read_json(path) if path.exists() else None

    def replace_slot(self, slot: int, claim: dict[str, Any]) -> None:
        """Rewrites the claim of a slot this worker owns (a failed morphology is replaced)."""
        self._write_json(self._slot_path(slot), {**claim, **self.identity.as_dict()})

    def num_claimed_slots(self) -> int:
        return sum(1 for _ in self._json_names("slots"))

    # Results.
    def _json_names(self, folder: str) -> list[str]:
        return [p.stem for p in (self.root / folder).glob("*.json") if not p.name.startswith(".")]

    def published_ids(self) -> list[str]:
        return self._json_names("metadata")

    def failed_ids(self) -> list[str]:
        return self._json_names("error_metadata")

    def is_published(self, morphology_id: str) -> bool:
        return self.metadata_path(morphology_id).exists()

    def has_failed(self, morphology_id: str) -> bool:
        return self.error_path(morphology_id).exists()

    def read_metadata(self, morphology_id: str) -> dict[str, Any]:
        return read_json(self.metadata_path(morphology_id))

    def take_publication_number(self, morphology_id: str, node: int, worker: int) -> int:
        """The next free publication number, taken by creating ``published/<n>.json`` exclusively.

        Numbers are unique on every node (exclusive creation), increasing in the order they
        are taken, and need no clock. The search starts above the highest number seen; a
        number taken concurrently by another process makes this one try the next.
        A number whose taker died before writing its metadata stays taken and unused (a gap):
        the morphology takes a new number when it is published again.
        """
        folder = self.root / "published"
        taken = [int(p.stem) for p in folder.glob("*.json") if p.stem.isdigit()]
        number = max(taken, default=-1) + 1
        record = {"id": morphology_id, "node": node, "worker": worker}
        while not self._create_json(folder / f"{number:08d}.json", record):
            number += 1
        return number

    def publish(self, metadata: dict[str, Any]) -> None:
        """Publishes a finished morphology. Its other files must already be on disk, and
        ``metadata["publication"]`` must come from ``take_publication_number``."""
        self._write_json(self.metadata_path(metadata["id"]), metadata)

    def record_failure(self, failure: dict[str, Any]) -> None:
        self._write_json(self.error_path(failure["id"]), failure)

    def retire(self, morphology_id: str) -> None:
        """Removes a morphology from the vanilla population; its files stay."""
        self._create_json(self.root / "retired" / f"{morphology_id}.json", {"id": morphology_id})

    def retired_ids(self) -> set[str]:
        return set(self._json_names("retired"))

    def claimed_slots(self) -> list[int]:
        """Every claimed slot, in order."""
        return sorted(int(name) for name in self._json_names("slots"))

    # Videos and what other tools write.
    def save_video(self, morphology_id: str, write: Callable[[Path], Path]) -> Path:
        """Publishes ``videos/<id>.<ext>`` atomically.

        ``write(staged)`` writes the video to the staged ``.mp4`` path and returns the file it
        wrote (its suffix may differ: the GIF fallback), which is then renamed into place.
        """
        self.video_path(morphology_id).parent.mkdir(exist_ok=True)
        written = write(self._staged(self.video_path(morphology_id)))
        target = self.video_path(morphology_id, written.suffix)
        os.replace(written, target)
        return target

    def videos(self) -> dict[str, Path]:
        """The published videos by morphology id."""
        folder = self.root / "videos"
        return {p.stem: p for p in folder.glob("*") if not p.name.startswith(".")} if folder.is_dir() else {}

    def eval_summary_path(self) -> Path:
        return self.root / "eval" / "summary.json"

    def report_dir(self) -> Path:
        return self.root / "report"

    # Workers.
    def worker_name(self, node: int, worker: int) -> str:
        return f"{node}-{worker}"

    def worker_lock_path(self, node: int, worker: int) -> Path:
        return self.root / "workers" / f"{self.worker_name(node, worker)}.lock"

    def write_worker_state(self, node: int, worker: int, state: dict[str, Any]) -> None:
        self._write_json(self.root / "workers" / f"{self.worker_name(node, worker)}.json", state)

    def read_worker_state(self, node: int, worker: int) -> dict[str, Any] | None:
        path = self.root / "workers" / f"{self.worker_name(node, worker)}.json"
        return read_json(path) if path.exists() else None

    def worker_indices(self, node: int) -> list[int]:
        """Every worker index of ``node`` that has ever written its state, in any session."""
        prefix = f"{node}-"
        return sorted(int(name[len(prefix):]) for name in self._json_names("workers") if name.startswith(prefix))

    def worker_states(self) -> list[dict[str, Any]]:
        return [read_json(self.root / "workers" / f"{name}.json") for name in self._json_names("workers")]
