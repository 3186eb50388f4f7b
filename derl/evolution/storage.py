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
- a morphology is published by its ``metadata/<id>.json``, written last and
  created exclusively, so no morphology is published twice;
- published files are never rewritten or deleted, so readers may cache them;
- a file that does not parse or match its schema (a stray or corrupt file) is moved
  to ``quarantine/`` with a one-line warning by the search processes
  (``quarantine=True``); other readers get a ``JsonFileError`` naming the file.

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
    metadata/<id>.json          published result (see derl.evolution.worker.build_metadata)
    error_metadata/<id>.json    failed morphology: {id, slot, attempt, reason, node, worker}
    retired/<id>.json           removed from the vanilla-tournament population
    workers/<node>-<worker>.json  worker state; .lock: held while it runs; .alive: heartbeat (its mtime)
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

import itertools
import json
import os
import re
import secrets
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from derl.evolution.population import parse_id
from derl.fileio import JsonFileError, atomic_write_text, read_json, write_json

_FOLDERS = ("genomes", "xml", "models", "metrics", "slots", "leases", "published", "metadata", "error_metadata",
            "retired", "workers", "videos", "manifest", "tmp")
_ID = r"\d{6,}(?:-\d+)?"
# The only names the listed folders may hold; anything else is foreign (hidden names are ignored:
# NFS keeps deleted open files as .nfsXXXX).
_NAMES = {
    "slots": re.compile(r"^\d{6,}\.json$"),
    "leases": re.compile(r"^\d{6,}-\d+\.json$"),
    "published": re.compile(r"^\d{8,}\.json$"),
    "metadata": re.compile(rf"^{_ID}\.json$"),
    "error_metadata": re.compile(rf"^{_ID}\.json$"),
    "retired": re.compile(rf"^{_ID}\.json$"),
    "workers": re.compile(r"^\d+-\d+\.(json|lock|alive)$"),
    "manifest": re.compile(r"^\d+\.json$"),
}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _id_problem(data: Any, name: str) -> str | None:
    """Why ``data`` is not a record of morphology ``name`` (id, slot, attempt), or None."""
    if not isinstance(data, dict):
        return "is not a JSON object"
    if data.get("id") != name:
        return f"has id {data.get('id')!r}, expected {name!r}"
    if (data.get("slot"), data.get("attempt")) != parse_id(name):
        return f"has slot/attempt {data.get('slot')!r}/{data.get('attempt')!r}, expected {parse_id(name)}"
    return None


def claim_problem(data: Any, slot: int) -> str | None:
    """Why ``data`` is not a claim of ``slot``, or None."""
    if not isinstance(data, dict):
        return "is not a JSON object"
    if not isinstance(data.get("id"), str) or not re.fullmatch(_ID, data["id"]):
        return f"has no valid morphology id (id={data.get('id')!r})"
    if parse_id(data["id"])[0] != slot:
        return f"claims {data['id']}, not in slot {slot}"
    missing = [key for key in ("node", "worker") if not _is_int(data.get(key))]
    return f"lacks integer {', '.join(missing)}" if missing else _id_problem(data, data["id"])


def metadata_problem(data: Any, name: str) -> str | None:
    """Why ``data`` is not the published metadata of ``name``, or None."""
    problem = _id_problem(data, name)
    if problem is None and not (_is_int(data.get("publication")) and data["publication"] >= 0):
        problem = f"has no publication number (publication={data.get('publication')!r})"
    if problem is None and not isinstance(data.get("lineage"), str):
        problem = "has no lineage"
    return problem


def worker_state_problem(data: Any, node: int, worker: int) -> str | None:
    if not isinstance(data, dict):
        return "is not a JSON object"
    if (data.get("node"), data.get("worker")) != (node, worker):
        return f"is the state of worker {data.get('node')!r}-{data.get('worker')!r}, expected {node}-{worker}"
    return None


def manifest_problem(data: Any, node: int) -> str | None:
    if not isinstance(data, dict):
        return "is not a JSON object"
    return None if data.get("node") == node else f"is not the manifest entry of node {node}"


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

    def __init__(self, out_dir: str | Path, identity: Identity | None = None, quarantine: bool = False):
        self.root = Path(out_dir).resolve()
        self.identity = identity or Identity.current()
        self.quarantine_bad_files = quarantine
        self._counter = itertools.count()

    def create(self) -> None:
        for folder in _FOLDERS:
            (self.root / folder).mkdir(parents=True, exist_ok=True)

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

    def tensorboard_dir(self, name: str) -> Path:
        """``tensorboard/<name>``: event files (``search``, ``morphologies/<id>``) for ``tensorboard --logdir``."""
        return self.root / "tensorboard" / name

    def relative(self, path: Path) -> str:
        return str(path.relative_to(self.root))

    # Atomic writes, staged outside the target folder.
    def _staged(self, target: Path) -> Path:
        me, call = self.identity, next(self._counter)
        return self.root / "tmp" / f"{me.host}-{me.pid}-{me.token}-{call}-{target.parent.name}-{target.name}"

    def _write_text(self, target: Path, text: str) -> None:
        staged = self._staged(target)
        atomic_write_text(staged, text)
        self._move_staged(staged, target)

    def _write_json(self, target: Path, obj: Any) -> None:
        staged = self._staged(target)
        write_json(staged, obj)
        self._move_staged(staged, target)

    @staticmethod
    def _move_staged(staged: Path, target: Path) -> None:
        """Renames a staged file into place; if that fails (I/O error, full disk), removes it."""
        try:
            os.replace(staged, target)
        except BaseException:
            staged.unlink(missing_ok=True)
            raise

    def _create_json(self, target: Path, obj: Any) -> bool:
        """Creates ``target`` with ``obj`` unless it exists; True if this call created it."""
        staged = self._staged(target)
        write_json(staged, obj)
        return self._link_staged(staged, target)

    def _create_text(self, target: Path, text: str) -> bool:
        staged = self._staged(target)
        atomic_write_text(staged, text)
        return self._link_staged(staged, target)

    @staticmethod
    def _link_staged(staged: Path, target: Path) -> bool:
        """Links the complete ``staged`` file to ``target`` unless it exists (then False), and drops ``staged``."""
        try:
            os.link(staged, target)
        except FileExistsError:
            return False
        finally:
            staged.unlink()
        return True

    # Foreign and corrupt files.
    def quarantine(self, path: Path, reason: str) -> None:
        """Moves ``path`` to ``quarantine/`` (its relative path flattened) with a one-line warning."""
        folder = self.root / "quarantine"
        folder.mkdir(exist_ok=True)
        target = folder / self.relative(path).replace(os.sep, "-")
        if target.exists():
            target = target.with_name(f"{target.name}.{self.identity.token}-{next(self._counter)}")
        try:
            os.rename(path, target)
        except FileNotFoundError:
            return  # moved by another process, or gone
        print(f"warning: {path} {reason}; moved to {self.relative(target)}", file=sys.stderr, flush=True)

    def _bad_file(self, path: Path, reason: str) -> None:
        if not self.quarantine_bad_files:
            raise JsonFileError(path, reason)
        self.quarantine(path, reason)

    def _read_checked(self, path: Path, problem: Callable[[Any], str | None]) -> Any | None:
        """The JSON content of ``path`` if it parses and ``problem`` finds nothing; None if missing.

        A bad file is quarantined (``quarantine=True``, then None) or raises ``JsonFileError``.
        """
        try:
            data = read_json(path)
        except FileNotFoundError:
            return None
        except JsonFileError as err:
            self._bad_file(path, err.reason)
            return None
        reason = problem(data)
        if reason is None:
            return data
        self._bad_file(path, reason)
        return None

    def _names(self, folder: str, suffix: str = ".json") -> list[str]:
        """Stems of the ``suffix`` files of ``folder``; foreign names are quarantined (or skipped)."""
        names = []
        try:
            entries = list(os.scandir(self.root / folder))
        except FileNotFoundError:
            return []
        for entry in entries:
            if entry.name.startswith("."):
                continue
            if not _NAMES[folder].match(entry.name):
                if self.quarantine_bad_files:
                    self.quarantine(Path(entry.path), f"is not a {folder}/ file name")
                continue
            if entry.name.endswith(suffix):
                names.append(entry.name[: -len(suffix)])
        return names

    # Run-level files.
    def create_config(self, text: str) -> bool:
        """Creates ``config.yaml`` unless it exists (exclusive, complete from the first moment); True if created."""
        return self._create_text(self.config_path(), text)

    def write_config(self, text: str) -> None:
        """Replaces ``config.yaml`` (a run from before the one-config rule adopts the current config)."""
        self._write_text(self.config_path(), text)

    def read_config_text(self) -> str | None:
        try:
            return self.config_path().read_text()
        except FileNotFoundError:
            return None

    def config_path(self) -> Path:
        return self.root / "config.yaml"

    def stop_requested(self) -> bool:
        return (self.root / "STOP").exists()

    def write_summary(self, summary: dict[str, Any]) -> None:
        self._write_json(self.root / "summary.json", summary)

    def read_summary(self) -> dict[str, Any] | None:
        return self._read_checked(self.root / "summary.json",
                                  lambda data: None if isinstance(data, dict) else "is not a JSON object")

    # Versions of each node (manifest/<node>.json: one writer per file, so no update is lost).
    def write_manifest(self, node: int, entry: dict[str, Any]) -> None:
        self._write_json(self.root / "manifest" / f"{node}.json", entry)

    def manifest(self) -> dict[int, dict[str, Any]]:
        """Every node's manifest entry, by node."""
        entries = {}
        for node in sorted(int(name) for name in self._names("manifest")):
            entry = self._read_checked(self.root / "manifest" / f"{node}.json",
                                       lambda data, node=node: manifest_problem(data, node))
            if entry is not None:
                entries[node] = entry
        return entries

    # Initial population.
    def init_population_ids(self) -> list[str] | None:
        """The ids of the initial population, or None until node 0 has written all of it."""
        def problem(data: Any) -> str | None:
            ids = data.get("ids") if isinstance(data, dict) else None
            ok = isinstance(ids, list) and all(isinstance(i, str) and re.fullmatch(_ID, i) for i in ids)
            return None if ok else "has no list of morphology ids"

        data = self._read_checked(self.root / "init_population.json", problem)
        return None if data is None else data["ids"]

    def mark_init_population(self, ids: list[str]) -> None:
        self._write_json(self.root / "init_population.json", {"ids": ids})

    # Genomes.
    def write_genome(self, morphology_id: str, genome_json: str, mjcf: str) -> None:
        """Writes the MJCF, then the genome (the genome file means both exist)."""
        self._write_text(self.xml_path(morphology_id), mjcf)
        self._write_text(self.genome_path(morphology_id), genome_json)

    def _checked_genome(self, morphology_id: str) -> dict[str, Any] | None:
        def problem(data: Any) -> str | None:
            ok = isinstance(data, dict) and data.get("id") == morphology_id
            return None if ok else f"is not a genome with id {morphology_id!r}"

        return self._read_checked(self.genome_path(morphology_id), problem)

    def has_genome(self, morphology_id: str) -> bool:
        """True if the genome exists and parses (a corrupt one is quarantined, then made anew)."""
        return self._checked_genome(morphology_id) is not None

    def read_genome(self, morphology_id: str) -> str:
        """The genome's JSON text.

        Raises:
            FileNotFoundError: it is missing, or was just quarantined.
        """
        data = self._checked_genome(morphology_id)
        if data is None:
            raise FileNotFoundError(f"{self.genome_path(morphology_id)} is missing (see quarantine/)")
        return json.dumps(data, indent=2) + "\n"

    # Slots.
    def _slot_path(self, slot: int) -> Path:
        return self.root / "slots" / f"{slot:06d}.json"

    def _lease_path(self, slot: int, lease: int) -> Path:
        return self._slot_path(slot) if lease == 0 else self.root / "leases" / f"{slot:06d}-{lease}.json"

    def _leases(self, slot: int) -> list[int]:
        prefix = f"{slot:06d}-"
        return [int(name[len(prefix):]) for name in self._names("leases") if name.startswith(prefix)]

    def claim_slot(self, slot: int, claim: dict[str, Any]) -> bool:
        """Claims ``slot`` exclusively (the claim records this process); False if someone else holds it."""
        return self._create_json(self._slot_path(slot), {**claim, **self.identity.as_dict(), "lease": 0})

    def is_claimed(self, slot: int) -> bool:
        return self._slot_path(slot).exists() or bool(self._leases(slot))

    def read_slot(self, slot: int) -> dict[str, Any] | None:
        """The current claim of ``slot`` (its latest lease: ``lease`` counts takeovers), or None."""
        for lease in sorted(self._leases(slot), reverse=True) + [0]:
            claim = self._read_checked(self._lease_path(slot, lease), lambda data: claim_problem(data, slot))
            if claim is not None:
                return {**claim, "lease": lease}
        return None

    def claim_time(self, slot: int, lease: int) -> float | None:
        """Modification time (shared-filesystem clock) of the claim file of ``slot``'s lease ``lease``."""
        try:
            return self._lease_path(slot, lease).stat().st_mtime
        except FileNotFoundError:
            return None

    def replace_slot(self, slot: int, claim: dict[str, Any]) -> None:
        """Rewrites the claim of a slot this worker owns (a failed morphology is replaced)."""
        lease = claim.get("lease", 0)
        self._write_json(self._lease_path(slot, lease), {**claim, **self.identity.as_dict(), "lease": lease})

    def take_over_slot(self, slot: int, current: dict[str, Any], claim: dict[str, Any]) -> bool:
        """Takes ``slot`` from the owner of its ``current`` claim, by exclusive creation of the next lease.

        Of all processes that judged the same claim stale, exactly one succeeds. The old owner
        learns it lost the slot from ``slot_taken_over``.
        """
        lease = current["lease"] + 1
        return self._create_json(self._lease_path(slot, lease), {**claim, **self.identity.as_dict(), "lease": lease})

    def slot_taken_over(self, slot: int, lease: int) -> bool:
        """True once someone holds a later lease of ``slot`` than ``lease`` (one stat on the shared folder)."""
        return self._lease_path(slot, lease + 1).exists()

    def num_claimed_slots(self) -> int:
        return len(self.claimed_slots())

    # Results.
    def published_ids(self) -> list[str]:
        return self._names("metadata")

    def failed_ids(self) -> list[str]:
        return self._names("error_metadata")

    def is_published(self, morphology_id: str) -> bool:
        return self.metadata_path(morphology_id).exists()

    def has_failed(self, morphology_id: str) -> bool:
        return self.error_path(morphology_id).exists()

    def read_metadata(self, morphology_id: str) -> dict[str, Any] | None:
        """The published metadata of ``morphology_id``; None if missing or quarantined."""
        return self._read_checked(self.metadata_path(morphology_id), lambda data: metadata_problem(data, morphology_id))

    def take_publication_number(self, morphology_id: str, node: int, worker: int) -> int:
        """The next free publication number, taken by creating ``published/<n>.json`` exclusively.

        Numbers are unique on every node (exclusive creation), increasing in the order they
        are taken, and need no clock. The search starts above the highest number seen; a
        number taken concurrently by another process makes this one try the next.
        A number whose taker died before writing its metadata stays taken and unused (a gap):
        the morphology takes a new number when it is published again.
        """
        folder = self.root / "published"
        taken = [int(name) for name in self._names("published")]
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
        self._create_json(self.root / "retired" / f"{morphology_id}.json", {"id": morphology_id})

    def retired_ids(self) -> set[str]:
        return set(self._names("retired"))

    def claimed_slots(self) -> list[int]:
        """Every claimed slot, in order."""
        leased = {int(name.split("-")[0]) for name in self._names("leases")}
        return sorted(leased | {int(name) for name in self._names("slots")})

    # Videos and what other tools write.
    def save_video(self, morphology_id: str, write: Callable[[Path], Path]) -> Path:
        """Publishes ``videos/<id>.<ext>`` atomically.

        ``write(staged)`` writes the video to the staged ``.mp4`` path and returns the file it
        wrote (its suffix may differ: the GIF fallback), which is then renamed into place.
        """
        self.video_path(morphology_id).parent.mkdir(exist_ok=True)
        staged = self._staged(self.video_path(morphology_id))
        try:
            written = write(staged)
        except BaseException:  # no half-written video left in tmp/ (a full disk, a failed encoder)
            for leftover in staged.parent.glob(f"{staged.stem}.*"):
                leftover.unlink(missing_ok=True)
            raise
        target = self.video_path(morphology_id, written.suffix)
        self._move_staged(written, target)
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
        return self._read_checked(path, lambda data: worker_state_problem(data, node, worker))

    def worker_indices(self, node: int) -> list[int]:
        """Every worker index of ``node`` that has ever written its state, in any session."""
        prefix = f"{node}-"
        return sorted(int(name[len(prefix):]) for name in self._names("workers") if name.startswith(prefix))

    def worker_states(self) -> list[dict[str, Any]]:
        states = []
        for name in self._names("workers"):
            node, worker = (int(part) for part in name.split("-"))
            if (state := self.read_worker_state(node, worker)) is not None:
                states.append(state)
        return states

    # Heartbeats, judged by file times on the shared filesystem (one clock for every node).
    def heartbeat_path(self, node: int, worker: int) -> Path:
        return self.root / "workers" / f"{self.worker_name(node, worker)}.alive"

    def beat(self, node: int, worker: int) -> float:
        """Touches the heartbeat of ``node-worker``; returns its new mtime (the filesystem's "now")."""
        path = self.heartbeat_path(node, worker)
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o666))  # less the umask
        os.utime(path)  # no explicit time: the file server's clock (NFS SET_TO_SERVER_TIME)
        return path.stat().st_mtime

    def heartbeat_time(self, node: int, worker: int) -> float | None:
        """The last heartbeat of ``node-worker`` (file mtime), None if it never beat."""
        try:
            return self.heartbeat_path(node, worker).stat().st_mtime
        except FileNotFoundError:
            return None

    def filesystem_now(self) -> float:
        """The shared filesystem's clock: the mtime of a probe file created now in ``tmp/``."""
        probe = self.root / "tmp" / f"clock-{self.identity.host}-{self.identity.pid}-{self.identity.token}"
        os.close(os.open(probe, os.O_CREAT | os.O_WRONLY, 0o666))  # less the umask
        try:
            os.utime(probe)
            return probe.stat().st_mtime
        finally:
            probe.unlink(missing_ok=True)
