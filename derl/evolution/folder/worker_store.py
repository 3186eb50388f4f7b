"""The workers' corner of ``OUT_DIR`` (``derl.evolution.folder.run_dir`` has the layout): each worker's state
file, lock and heartbeat (``workers/<node>-<worker>.json|.lock|.alive``), and the heartbeat of a
node's coordinator while it prepares the run (``nodes/<node>-<token>.preparing``).

Heartbeats are file times on the shared filesystem, touched without an explicit time: the file
server's clock, one clock for every node. A state read back is a ``WorkerStatus``, checked once when
it is built.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from derl.evolution.folder import schema
from derl.evolution.folder.json_record import JsonRecord, is_int, json_field
from derl.evolution.folder.shared import SharedFolder


@dataclass(frozen=True, kw_only=True)
class WorkerStatus(JsonRecord):
    """What worker ``worker`` of node ``node`` last said of itself (``workers/<node>-<worker>.json``): the
    ``slot`` and morphology ``id`` it works on (None between slots), its ``status`` line, its ``pid``, when
    it wrote (``updated``, its host's clock) and its memory peaks, which the coordinator sizes the next
    session by. Checked when it is built (``JsonRecord``: a ``ValueError``)."""

    NAMED = ("node", "worker")
    WHAT = "a worker state"

    node: int
    worker: int
    slot: int | None = json_field(default=None, check=(is_int, "a slot number"), null=True)
    id: str | None = json_field(default=None, check=(schema.is_id, "a morphology id"), null=True)
    status: str | None = None
    pid: int | None = None
    updated: float | None = None
    peak_rss_bytes: int = 0
    peak_gpu_bytes: int = 0

    @classmethod
    def name_problem(cls, data: Mapping[str, object], **named: Any) -> str | None:
        """Why ``data`` is not the state of worker ``named["node"]``-``named["worker"]``, or None."""
        if (data.get("node"), data.get("worker")) != (named["node"], named["worker"]):
            return (f"is the state of worker {data.get('node')!r:.20}-{data.get('worker')!r:.20}, "
                    f"expected {named['node']}-{named['worker']}")
        return None


class WorkerStore:
    """Reads and writes of the worker states and heartbeats in ``run`` (a ``RunDir``), through the
    checked primitives of its ``SharedFolder``."""

    def __init__(self, run: SharedFolder):
        self.run = run

    def name(self, node: int, worker: int) -> str:
        return f"{node}-{worker}"

    def _file(self, node: int, worker: int, suffix: str) -> Path:
        return self.run.root / "workers" / f"{self.name(node, worker)}{suffix}"

    def lock_path(self, node: int, worker: int) -> Path:
        return self._file(node, worker, ".lock")

    def write_state(self, state: WorkerStatus) -> None:
        self.run.write_json(self._file(state.node, state.worker, ".json"), state.to_json())

    def read_state(self, node: int, worker: int) -> WorkerStatus | None:
        """The state of worker ``node-worker``; None if it has none (or it was just quarantined)."""
        data = self.run.read_checked(self._file(node, worker, ".json"),
                                     lambda data: WorkerStatus.problem(data, node=node, worker=worker))
        return None if data is None else WorkerStatus.from_json(data, node=node, worker=worker)

    def indices(self, node: int) -> list[int]:
        """Every worker index of ``node`` that has ever written its state, in any session."""
        prefix = f"{node}-"
        return sorted(int(name[len(prefix):]) for name in self.run.names("workers") if name.startswith(prefix))

    def states(self) -> list[WorkerStatus]:
        states = []
        for name in self.run.names("workers"):
            node, worker = (int(part) for part in name.split("-"))
            if (state := self.read_state(node, worker)) is not None:
                states.append(state)
        return states

    # Heartbeats, judged by file times on the shared filesystem (one clock for every node).
    def heartbeat_path(self, node: int, worker: int) -> Path:
        return self._file(node, worker, ".alive")

    def beat(self, node: int, worker: int) -> float:
        """Touches the heartbeat of ``node-worker``; returns its new mtime (the filesystem's "now")."""
        return self._touch(self.heartbeat_path(node, worker))

    def _touch(self, path: Path) -> float:
        fd = self.run.open_own_file(path)
        try:
            os.utime(fd)  # no explicit time: the file server's clock (NFS SET_TO_SERVER_TIME)
            return os.fstat(fd).st_mtime
        finally:
            os.close(fd)

    def heartbeat_time(self, node: int, worker: int) -> float | None:
        """The last heartbeat of ``node-worker`` (file mtime), None if it never beat."""
        found = self.run.lstat(self.heartbeat_path(node, worker))
        return None if found is None else found.st_mtime

    # A node's coordinator while it prepares the run: a heartbeat of its own, never a worker's.
    def preparing_path(self, node: int) -> Path:
        """``nodes/<node>-<token>.preparing`` of this process: the token keeps two hosts' names apart."""
        return self.run.root / "nodes" / f"{node}-{self.run.identity.token}.preparing"

    def beat_preparing(self, node: int) -> float:
        """Touches this coordinator's preparing heartbeat; returns its new mtime."""
        return self._touch(self.preparing_path(node))

    def end_preparing(self, node: int) -> None:
        """Removes this coordinator's preparing heartbeat (its workers beat from now on)."""
        path = self.preparing_path(node)
        with contextlib.suppress(FileNotFoundError), self.run.open_dir(path.parent) as folder:
            os.unlink(path.name, dir_fd=folder)

    def preparing_beats(self) -> dict[int, float]:
        """The newest preparing heartbeat (mtime of a regular file) of each node, fresh or stale."""
        beats: dict[int, float] = {}
        for stem in self.run.names("nodes", ".preparing"):
            found = self.run.lstat(self.run.root / "nodes" / f"{stem}.preparing")
            if found is not None and stat.S_ISREG(found.st_mode):
                node = int(stem.split("-")[0])
                beats[node] = max(beats.get(node, found.st_mtime), found.st_mtime)
        return beats
