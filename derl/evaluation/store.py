"""``OUT_DIR/eval/``: the layout of a run's transfer evaluation, its claims and its summary table.

Layout::

    eval/<task>/<id>-s<seed>/          one training (derl.training.run.train_to_folder: config.yaml,
                                        run.json, model.pt, metrics.jsonl; metrics.json once finished)
    eval/claims/<task>/<id>-s<seed>-<g>.json  who trains the cell: {host, pid, token}, g-th claim
    eval/summary.json, summary.csv     every finished cell and a per-task ranking

A cell is finished when its ``metrics.json`` exists: train_to_folder writes it last. A cell's claims
follow the protocol of the search's leases (``derl.evolution.folder.claim_store.ClaimStore``): a cell
is claimed by creating ``<id>-s<seed>-0.json`` exclusively, complete from the first moment (staged in
the run's ``tmp/``, then linked); the claiming process touches it while the training runs (its mtime
is the heartbeat). The staleness rule is the evaluation's own (``EvalDir._is_stale``): a claim is
stale when its process is gone (same host, pid not running) or, from any host, when its mtime is
older than the run's ``EVO.LEASE_SECONDS`` on the shared filesystem's clock (the rule of
``derl.evolution.lease.is_stale``). A stale claim is taken over by creating the next claim ``g + 1``
exclusively: of several takers one wins, and the old owner, if it comes back, sees the later claim
and stops (``lost``). The training itself continues from the cell's checkpoint.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypedDict, TypeVar

import psutil

from derl.evaluation.plan import Cell
from derl.evolution.folder.claim_store import ClaimStore
from derl.evolution.folder.run_dir import RunDir
from derl.evolution.folder.schema import eval_claim_problem, eval_result_problem
from derl.evolution.folder.shared import Identity
from derl.evolution.lease import is_stale
from derl.fileio.folders import NotAFolder, make_folders, open_folder
from derl.fileio.reads import JsonFileError, read_json
from derl.fileio.writes import atomic_write_text, write_json
from derl.training.run import FINAL_METRICS_FILE

COLUMNS = ("id", "source", "task", "seed", "return", "metric", "env_steps", "iterations")
_CELL_NAME = re.compile(r"^(\d{6,}(?:-\d+)?)-s(\d+)$")


class CellResult(TypedDict):
    """What the evaluation reads of a finished cell's ``metrics.json`` (``derl.ppo.trainer.TrainResult``
    as written by ``train_to_folder``; ``eval_result_problem`` checked it)."""

    summary: dict[str, float]
    env_steps: int
    iterations: int


# A finished cell in ``eval/summary.json`` and ``summary.csv`` (``COLUMNS``, in order).
Row = TypedDict("Row", {"id": str, "source": str, "task": str, "seed": int, "return": float | None,
                        "metric": float | None, "env_steps": int, "iterations": int})
# A morphology's place on a task (``ranking``: ``summary.json``'s ``ranking``), its keys in the file's order.
MorphologyRank = TypedDict("MorphologyRank", {"rank": int, "id": str, "source": str, "seeds": int,
                                              "return": float | None, "metric": float | None})
# A source run's place on a task (``compare_runs``), its keys in the file's order.
RunRank = TypedDict("RunRank", {"rank": int, "source": str, "morphologies": int, "cells": int,
                                "return": float | None, "metric": float | None})


class CellClaims(ClaimStore[Cell, Any]):
    """The cells' claims, ``claims/<task>/<id>-s<seed>-<g>.json`` (all generations in one folder) in
    ``folder``, on the protocol of the search's leases. Strict: a claims folder that is a link stops the
    evaluation (``NotAFolder``). Read by ``EvalDir._is_stale`` with their mtime, not by ``read``."""

    def __init__(self, run: RunDir, folder: Path):
        super().__init__(run, strict=True)
        self.root = folder

    def file(self, cell: Cell, generation: int) -> Path:
        return self.root / cell.task / f"{cell.name}-{generation}.json"

    def generations(self, cell: Cell) -> list[int]:
        # listed through the folder's descriptor: never a folder swapped for a link (warned once)
        names = self.folder.entries(self.root / cell.task)
        claim = re.compile(rf"{re.escape(cell.name)}-(\d+)\.json")
        return [int(found[1]) for name in names if (found := claim.fullmatch(name))]

    def create_file(self, path: Path, claim: Any) -> bool:
        """Compact JSON, as the evaluation's claims always were."""
        return self.folder.create_text(path, json.dumps(claim))


class EvalDir:
    """The ``eval/`` folder of ``run`` (the process's ``RunDir`` of it); claims record ``identity``."""

    def __init__(self, run: RunDir, lease_seconds: float, identity: Identity | None = None):
        self.run = run
        self.root = self.run.root / "eval"
        self.lease_seconds = lease_seconds
        self.identity = identity or Identity.current()
        self.claims = CellClaims(self.run, self.root / "claims")

    def cell_dir(self, cell: Cell) -> Path:
        return self.root / cell.task / cell.name

    def check_folders(self, cells: Iterable[Cell]) -> None:
        """Refuses, before anything is read or written, a folder of ``eval/`` that ``cells`` would use
        (``claims/``, ``claims/<task>/``, ``<task>/``, ``<task>/<id>-s<seed>/``) that is a symbolic link
        or a file: what is trained, claimed or read through it would leave the run. Missing ones are
        fine (made later, never through a link: ``make_folders``).

        Raises:
            NotAFolder: the first such folder (a restart would find it again: ``EXIT_FATAL``).
        """
        folders = {self.root / "claims"}
        for cell in cells:
            folders |= {self.root / "claims" / cell.task, self.root / cell.task, self.cell_dir(cell)}
        for folder in sorted(folders):  # a folder before those below it
            with contextlib.suppress(FileNotFoundError):
                os.close(open_folder(folder, self.run.root))

    def result(self, cell: Cell) -> CellResult | None:
        """The final ``TrainResult`` of a finished cell, or None.

        A ``metrics.json`` that does not parse or match its schema (``derl.evolution.folder.schema``) counts
        as unfinished (one warning line): the cell is trained again, from its checkpoint, and the
        file rewritten.
        """
        path = self.cell_dir(cell) / FINAL_METRICS_FILE
        try:
            result: CellResult = self.run.read_in_folder(path, read_json)
        except (FileNotFoundError, NotAFolder):  # eval/ or a folder of it swapped for a link: warned once
            return None
        except JsonFileError as err:
            print(f"warning: {err}; the cell counts as unfinished", file=sys.stderr, flush=True)
            return None
        problem = eval_result_problem(result)
        if problem:
            print(f"warning: {path} {problem}; the cell counts as unfinished", file=sys.stderr, flush=True)
            return None
        return result

    # Claims (the protocol of ClaimStore: generation g is the g-th claim of a cell).
    def _claim_path(self, cell: Cell, generation: int) -> Path:
        return self.claims.file(cell, generation)

    def _generation(self, cell: Cell) -> int | None:
        """The latest claim's number, or None if the cell was never claimed."""
        return max(self.claims.generations(cell), default=None)

    def _is_stale(self, path: Path) -> bool:
        try:
            mtime, owner = self.run.read_in_folder(path, _claim_time_and_owner)
        except FileNotFoundError:
            return False  # replaced meanwhile: judge again later
        if eval_claim_problem(owner):
            owner = {}  # a damaged claim: judged by its time alone
        if owner.get("host") == self.identity.host and isinstance(owner.get("pid"), int):
            started = _process_started(owner["pid"])
            if started is None or started != owner.get("started", started):
                return True  # dead, or its number now names another process (containers reuse them)
        return is_stale(self.run.filesystem_now(), mtime, None, self.lease_seconds)

    def claim(self, cell: Cell) -> int | None:
        """Claims ``cell`` (or takes over its stale claim); the claim's number, or None if held elsewhere."""
        generation = self._generation(cell)
        if generation is not None and not self._is_stale(self._claim_path(cell, generation)):
            return None
        mine = 0 if generation is None else generation + 1
        for folder in (self._claim_path(cell, mine).parent, self.run.root / "tmp"):  # tmp/: where it is staged
            make_folders(folder, self.run.root)
        owner = {**self.identity.as_dict(), "started": _process_started(os.getpid())}
        return mine if self.claims.create(cell, mine, owner) else None

    def beat(self, cell: Cell, generation: int) -> None:
        """Touches the claim (the file server's clock, as ``WorkerStore.beat``)."""
        self.claims.touch(cell, generation)

    def lost(self, cell: Cell, generation: int) -> bool:
        """True once another process holds a later claim of ``cell`` (looked up in the claims folder's
        descriptor: one swapped for a link raises ``NotAFolder``, as ``beat``)."""
        return self.claims.taken_over(cell, generation)

    # The summary.
    def rows(self) -> list[Row]:
        """Every finished cell under ``eval/``, whichever process trained it."""
        rows: list[Row] = []
        for task_dir in sorted(self.root.iterdir()) if self.root.is_dir() else []:
            if task_dir.name == "claims" or not task_dir.is_dir():
                continue
            for cell_dir in sorted(task_dir.iterdir()):
                match = _CELL_NAME.match(cell_dir.name)
                if match is None:
                    continue
                cell = Cell(self.run.root, task_dir.name, match.group(1), int(match.group(2)))
                if (result := self.result(cell)) is not None:
                    rows.append({"id": cell.id, "source": str(self.run.root), "task": cell.task, "seed": cell.seed,
                                 "return": result["summary"].get("return"), "metric": result["summary"].get("metric"),
                                 "env_steps": result["env_steps"], "iterations": result["iterations"]})
        return rows

    def write_summary(self) -> Path:
        """Writes ``summary.json`` (``{"rows", "ranking", "updated"}``) and ``summary.csv``; returns the JSON path."""
        rows = self.rows()
        make_folders(self.root, self.run.root)
        path = self.run.eval_summary_path()
        write_json(path, {"rows": rows, "ranking": ranking(rows), "updated": time.time()}, self.run.root)
        text = io.StringIO()
        writer = csv.DictWriter(text, COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        atomic_write_text(path.with_suffix(".csv"), text.getvalue(), self.run.root)
        return path


def ranking(rows: list[Row]) -> dict[str, list[MorphologyRank]]:
    """Per task, the morphologies best first by mean return over their seeds (rows without a return last)."""
    return {task: [{"rank": group.rank, "id": group.key[1], "source": group.key[0], "seeds": len(group.rows),
                    "return": group.mean_return, "metric": group.mean_metric} for group in groups]
            for task, groups in _ranked_per_task(rows, lambda row: (row["source"], row["id"])).items()}


def compare_runs(rows: list[Row]) -> dict[str, list[RunRank]]:
    """DERL's transfer comparison: per task, the source runs best first by the mean return of their
    evaluated cells (every morphology and seed alike), with the mean metric and the counts."""
    return {task: [{"rank": group.rank, "source": group.key, "morphologies": len({row["id"] for row in group.rows}),
                    "cells": len(group.rows), "return": group.mean_return, "metric": group.mean_metric}
                   for group in groups]
            for task, groups in _ranked_per_task(rows, lambda row: row["source"]).items()}


K = TypeVar("K", str, tuple[str, str])  # what rows are grouped by: a source run, a morphology of one


@dataclass(frozen=True)
class _Group(Generic[K]):
    """The rows of one task that share a ``key``, at their ``rank`` by their mean return (1: the best)."""

    rank: int
    key: K
    rows: list[Row]
    mean_return: float | None
    mean_metric: float | None


def _ranked_per_task(rows: list[Row], group_of: Callable[[Row], K]) -> dict[str, list[_Group[K]]]:
    """Per task, the rows grouped by ``group_of(row)`` with the mean return and metric of each group, ranked by
    that return (best first, groups without one last, ties by key)."""
    table: dict[str, list[_Group[K]]] = {}
    for task in sorted({row["task"] for row in rows}):
        groups: dict[K, list[Row]] = {}
        for row in rows:
            if row["task"] == task:
                groups.setdefault(group_of(row), []).append(row)
        means = [(key, cells, _mean(row["return"] for row in cells), _mean(row["metric"] for row in cells))
                 for key, cells in groups.items()]
        means.sort(key=lambda item: (item[2] is None, -(item[2] or 0.0), item[0]))
        table[task] = [_Group(rank, *group) for rank, group in enumerate(means, 1)]
    return table


def write_comparison(runs: list[RunDir], path: Path | None) -> list[str]:
    """``compare_runs`` over the finished cells of ``runs``, written as JSON to ``path`` (if given);
    returns one line per task for the terminal."""
    rows = [row for run in runs for row in EvalDir(run, 0.0).rows()]
    table = compare_runs(rows)
    if path is not None:
        write_json(path, {"runs": [str(run.root) for run in runs], "tasks": table, "updated": time.time()})

    def number(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}"

    return [f"{task}: " + " > ".join(f"{e['source']} {number(e['return'])} (metric {number(e['metric'])}, "
                                     f"{e['cells']} cells)" for e in entries) for task, entries in table.items()]


def _mean(values: Iterable[float | None]) -> float | None:
    numbers = [float(v) for v in values if isinstance(v, int | float)]
    return sum(numbers) / len(numbers) if numbers else None


def _claim_time_and_owner(path: Path, dir_fd: int) -> tuple[float, Any]:
    """A claim's mtime and content, both in its folder's descriptor (``SharedFolder.read_in_folder``); the
    content ``{}`` where it does not parse: a claim of an older derl being written right now (it wrote
    after creating), or not a file."""
    mtime = os.lstat(path.name, dir_fd=dir_fd).st_mtime
    try:
        return mtime, read_json(path, dir_fd=dir_fd)
    except JsonFileError:
        return mtime, {}


def _process_started(pid: int) -> float | None:
    """When process ``pid`` of this host started (psutil's clock), or None if there is none."""
    try:
        return psutil.Process(pid).create_time()
    except psutil.NoSuchProcess:
        return None

