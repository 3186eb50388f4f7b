"""The invariants a simulated search must keep, checked on its run folder (``benchmarks.cluster``).

Each check returns the problems it found, one line each, empty when the invariant holds:

- ``slot_problems``: every slot is published exactly once, and each attempt before the published one
  has its failure record (``error_metadata/``);
- ``number_problems``: no publication number is shared, and ``published/<n>.json`` names its record;
- ``agreement_problems``: ``tools/status.py``, ``summary.json`` and the report's reader
  (``derl.analysis.run.RunView``) count the same morphologies and name the same best;
- ``Ledger``: nothing published is lost or changed (md5 of ``metadata/`` and ``models/``, watched while
  the search runs and compared after later starts); a file the simulation damaged itself is left out.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from derl.analysis.run import RunView
from derl.evolution.population import parse_id, slot_id
from derl.fileio.reads import JsonFileError, read_json
from derl.paths import REPO_ROOT


def _records(out: Path) -> dict[str, dict[str, Any]]:
    """The published records as they are on disk (a record that does not parse is named by its problem)."""
    records = {}
    for path in sorted((out / "metadata").glob("*.json")):
        try:
            records[path.stem] = read_json(path)
        except (OSError, JsonFileError) as err:
            records[path.stem] = {"problem": str(err)}
    return records


def slot_problems(out: Path, search: int) -> list[str]:
    by_slot: dict[int, list[str]] = defaultdict(list)
    for morphology_id in _records(out):
        by_slot[parse_id(morphology_id)[0]].append(morphology_id)
    problems = []
    for slot in range(search):
        ids = by_slot.get(slot, [])
        if len(ids) != 1:
            problems.append(f"slot {slot} is published {len(ids)} times ({', '.join(ids) or 'never'})")
            continue
        attempt = parse_id(ids[0])[1]
        missing = [slot_id(slot, a) for a in range(attempt)
                   if not (out / "error_metadata" / f"{slot_id(slot, a)}.json").exists()]
        if missing:
            problems.append(f"slot {slot} is published as {ids[0]} but {', '.join(missing)} has no failure record")
    problems += [f"slot {slot} is outside the search ({', '.join(ids)})"
                 for slot, ids in by_slot.items() if slot >= search]
    return problems


def number_problems(out: Path) -> list[str]:
    owners: dict[Any, list[str]] = defaultdict(list)
    problems = []
    for morphology_id, record in _records(out).items():
        number = record.get("publication")
        owners[number].append(morphology_id)
        try:
            taken = read_json(out / "published" / f"{number:08d}.json")
        except (OSError, JsonFileError, TypeError, ValueError) as err:
            problems.append(f"{morphology_id}'s publication {number!r} has no readable published/ record: {err}")
            continue
        if taken.get("id") != morphology_id:
            problems.append(f"{morphology_id}'s publication {number} is given to {taken.get('id')!r} in published/")
    problems += [f"publication {n} is shared by {', '.join(ids)}" for n, ids in owners.items() if len(ids) > 1]
    return problems


def agreement_problems(out: Path) -> list[str]:
    """``status``, ``summary.json`` and the report's reader, compared on the count and the best."""
    done = subprocess.run([sys.executable, str(REPO_ROOT / "tools" / "status.py"), str(out)], capture_output=True,
                          text=True, cwd=REPO_ROOT, timeout=600)
    if done.returncode != 0:
        return [f"tools/status.py exits {done.returncode}: {done.stderr.strip()[-300:]}"]
    count = re.search(r"^done: (\d+)/", done.stdout, re.MULTILINE)
    best = re.search(r"^best: (\S+)", done.stdout, re.MULTILINE)
    status = (int(count[1]) if count else None, best[1] if best else None)
    try:
        summary = read_json(out / "summary.json")
        written = (summary["published"], (summary.get("best") or {}).get("id"))
    except (OSError, JsonFileError, KeyError, TypeError) as err:
        return [f"summary.json is not readable: {err}"]
    view = RunView(out)
    criterion = view.cfg.EVO.SELECTION_CRITERIA[0]
    sign = view.cfg.EVO.SELECTION_CRITERIA_OBJ[0]
    ranked = sorted(view.records, key=lambda r: sign * r.fitness.get(criterion, float("nan")))
    report = (len(view.records), ranked[0].id if ranked else None)
    if status == written == report:
        return []
    return [f"status says {status[0]} published, best {status[1]}; summary.json {written[0]}, best {written[1]}; "
            f"the report {report[0]}, best {report[1]}"]


def _md5(path: Path) -> str | None:
    try:
        return hashlib.md5(path.read_bytes()).hexdigest()
    except OSError:
        return None


class Ledger:
    """What was published, as first seen: the md5 of each ``metadata/<id>.json`` and ``models/<id>.pt``."""

    def __init__(self, out: Path):
        self.out = out
        self.seen: dict[Path, str] = {}
        self.damaged: set[Path] = set()  # files the simulation damaged on purpose: their change is no loss

    def scan(self) -> int:
        """Records the published files not seen before; returns how many morphologies are published."""
        names = os.listdir(self.out / "metadata") if (self.out / "metadata").is_dir() else []
        for name in names:
            if not name.endswith(".json") or (self.out / "metadata" / name) in self.seen:
                continue
            paths = [self.out / "metadata" / name, self.out / "models" / f"{name[:-5]}.pt"]
            digests = [_md5(path) for path in paths]
            for path, digest in zip(paths, digests, strict=True):  # a file not there yet is seen next time
                if digest is not None and all(digests):
                    self.seen[path] = digest
        return len(names)

    def problems(self) -> list[str]:
        lost = []
        for path, digest in sorted(self.seen.items()):
            if path in self.damaged:
                continue
            now = _md5(path)
            if now != digest:
                lost.append(f"{path.relative_to(self.out)} was published and is now "
                            f"{'gone' if now is None else 'changed'}")
        return lost
