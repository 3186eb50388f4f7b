"""The fidelity studies' cells: one training of one body under one preset, kept where later studies find it.

``tools/bench.py fidelity`` records every training it runs as one line of a JSON Lines table
(``--cells``, by default the committed ``docs/measurements/fidelity-cells.jsonl``) and looks each
training up there before it trains: a study combines cells of earlier runs and other machines (the
reference trained on CPUs one day, a candidate on a GPU node another) and says where each came from
(``sources``). A cell is found by its ``CellKey``: what decides the training's result (preset,
overrides, budget, body, seed, simulator); where and when it ran is provenance (machine, GPU, date,
commit). The body is named by ``body_digest``, so a genome renamed or copied from a search is the
same body.

Each addition rewrites the table atomically under an advisory lock on its folder, so readers never
see half a line; every line read back is validated (every number finite), and a bad one is an error
naming the file and line.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
import platform
import subprocess
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from derl.fileio.reads import parse_json, read_bytes
from derl.fileio.writes import atomic_write_text
from derl.paths import REPO_ROOT

CELLS = REPO_ROOT / "docs" / "measurements" / "fidelity-cells.jsonl"
# A cell is about 700 bytes: 16 MiB holds some 24,000 trainings.
MAX_CELLS_BYTES = 16 * 2**20
# A genome's fields that name it or its lineage, not the body.
LINEAGE_FIELDS = ("id", "parent_id", "mutation")


class CellError(ValueError):
    """A cells table that cannot be read: the message names the file and line."""


def body_digest(genome: dict[str, Any]) -> str:
    """SHA-256 of the genome without its name and lineage (``LINEAGE_FIELDS``), written canonically."""
    body = {key: value for key, value in genome.items() if key not in LINEAGE_FIELDS}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


@dataclass(frozen=True)
class CellKey:
    """What decides a training's result: a later study reuses a cell only when all of it matches."""

    preset: str  # the preset file's stem (configs/evo/<preset>.yml)
    overrides: tuple[tuple[str, str], ...]  # the full KEY and VALUE of what differs from the preset file, sorted
    budget: int  # PPO.MAX_STATE_ACTION_PAIRS
    body: str  # body_digest
    seed: int  # RNG_SEED
    sim: str  # SIM.BACKEND the training ran on

    def describe(self) -> str:
        extra = "".join(f" {key}={value}" for key, value in self.overrides)
        return f"{self.preset}{extra} at {self.budget} env steps, seed {self.seed}, {self.sim}"


@dataclass(frozen=True)
class Cell:
    """One finished training: its key, result and provenance."""

    key: CellKey
    name: str  # the genome file's stem when it was trained
    limbs: int
    criterion: str  # the fitness statistic (EVO.SELECTION_CRITERIA[0])
    fitness: float
    env_steps: int
    device: str  # the learner's device: cpu, cuda:0, ...
    machine: str  # the CPU (machine_name)
    gpu: str | None  # the GPU's name when the learner ran on one
    date: str  # YYYY-MM-DD (UTC) the training ended
    commit: str | None  # derl's git commit
    wall_seconds: float
    cpu_seconds: float

    def to_line(self) -> str:
        fields = asdict(self)
        fields["key"]["overrides"] = dict(self.key.overrides)
        return json.dumps(fields, sort_keys=True, separators=(",", ":"))


_TYPES: dict[str, tuple[type, ...]] = {
    "name": (str,), "limbs": (int,), "criterion": (str,), "fitness": (float, int), "env_steps": (int,),
    "device": (str,), "machine": (str,), "gpu": (str, type(None)), "date": (str,), "commit": (str, type(None)),
    "wall_seconds": (float, int), "cpu_seconds": (float, int)}
_KEY_TYPES: dict[str, tuple[type, ...]] = {"preset": (str,), "overrides": (dict,), "budget": (int,), "body": (str,),
                                           "seed": (int,), "sim": (str,)}


def _checked(data: Any, types: dict[str, tuple[type, ...]], what: str) -> dict[str, Any]:
    if not isinstance(data, dict) or set(data) != set(types):
        have = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise ValueError(f"{what} must have exactly the fields {sorted(types)}, has {have}")
    for field, allowed in types.items():
        value = data[field]
        if not isinstance(value, allowed) or isinstance(value, bool):
            raise ValueError(f"{what} field {field!r} must be {' or '.join(t.__name__ for t in allowed)}, "
                             f"got {value!r}")
        if isinstance(value, float) and not math.isfinite(value):  # NaN, Infinity: Python's json reads them
            raise ValueError(f"{what} field {field!r} must be a finite number, got {value!r}")
    return data


def cell_from_dict(data: Any) -> Cell:
    """A ``Cell`` from one parsed line. Raises ValueError naming the field that is wrong."""
    fields = _checked(data, {"key": (dict,), **_TYPES}, "a cell")
    key = _checked(fields["key"], _KEY_TYPES, "a cell's key")
    overrides = key["overrides"]
    if not all(isinstance(value, str) for value in overrides.values()):
        raise ValueError("a cell's overrides must map keys to strings")
    if len(key["body"]) != 64 or key["budget"] < 1:
        raise ValueError("a cell's body must be a SHA-256 and its budget at least 1")
    return Cell(**{**fields, "key": CellKey(**{**key, "overrides": tuple(sorted(overrides.items()))})})


class CellTable:
    """The JSON Lines file ``path``: one ``Cell`` per line, in the order they were recorded."""

    def __init__(self, path: Path):
        self.path = path

    def cells(self) -> list[Cell]:
        """Every cell, validated. Raises CellError (file and line) for a line that is not a cell."""
        try:
            text = read_bytes(self.path, MAX_CELLS_BYTES).decode()
        except FileNotFoundError:
            return []
        except (OSError, UnicodeDecodeError) as err:
            raise CellError(f"cells table {self.path}: {err}") from None
        found = []
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    found.append(cell_from_dict(parse_json(line, f"{self.path}:{number}")))
                except ValueError as err:  # JsonFileError is one
                    raise CellError(f"{self.path}:{number}: {getattr(err, 'reason', err)}") from None
        return found

    def by_key(self) -> dict[CellKey, Cell]:
        """The first cell recorded of each key (a later one of the same key is a repeat, not used)."""
        first: dict[CellKey, Cell] = {}
        for cell in self.cells():
            first.setdefault(cell.key, cell)
        return first

    def add(self, cell: Cell) -> None:
        """Appends ``cell``: the whole table rewritten atomically, under a lock on its folder that
        other studies adding to it take too."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        folder = os.open(self.path.parent, os.O_RDONLY)
        try:
            fcntl.flock(folder, fcntl.LOCK_EX)
            lines = [c.to_line() for c in self.cells()]
            atomic_write_text(self.path, "".join(f"{line}\n" for line in [*lines, cell.to_line()]))
        finally:
            os.close(folder)  # releases the lock


def sources(cells: Iterable[Cell]) -> list[dict[str, Any]]:
    """Where ``cells`` came from: one entry per machine, GPU, device, date and commit, with its count."""
    counts: dict[tuple, int] = {}
    for cell in cells:
        where = (cell.machine, cell.gpu, cell.device, cell.date, cell.commit)
        counts[where] = counts.get(where, 0) + 1
    fields = ("machine", "gpu", "device", "date", "commit")
    return [{**dict(zip(fields, where, strict=True)), "cells": count} for where, count in counts.items()]


def machine_name() -> str:
    """This machine's CPU model and its widest vector unit (AVX-512 or AVX2: they round differently)."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            name, _, value = line.partition(":")
            if name.strip() == "model name":
                model = value.strip()
            elif name.strip() == "flags":
                flags = set(value.split())
                break
    except OSError:
        pass
    vector = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else None
    return f"{model} ({vector})" if vector else model


def gpu_name(device: str) -> str | None:
    """The name of CUDA ``device`` (``cuda:N``) by nvidia-smi, or None for another device or no answer."""
    if not device.startswith("cuda"):
        return None
    index = device.partition(":")[2] or "0"
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i", index],
                              capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None


def utc_date(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%d")
