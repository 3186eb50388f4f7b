"""Which cells an evaluation trains, and the config of each.

A cell is one training: a morphology of a finished run, trained from scratch on one evaluation
task with one seed. Its config is, in order: the defaults, ``configs/eval/<task>.yml`` (the
task's env settings), the run's own PPO settings and budget (``PPO``, ``MODEL``,
``CHECKPOINT_PERIOD``, ``DEVICE``, ``TORCH_THREADS`` of ``OUT_DIR/config.yaml``), the
command line's ``KEY VALUE`` pairs, then ``RNG_SEED`` = the cell's seed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from derl.analysis.run import RunError, RunView
from derl.checked_config import DERIVED_KEYS, Config, load_config
from derl.config import ConfigError
from derl.paths import EVAL_PRESETS

# What a cell keeps of the evolution run's config: how PPO trains and for how long.
CARRIED_SECTIONS = ("PPO", "MODEL")
CARRIED_KEYS = ("CHECKPOINT_PERIOD", "DEVICE", "TORCH_THREADS")


class EvalError(ValueError):
    """Bad input to an evaluation (unknown task or id, no finished run, a bad override): one line."""


@dataclass(frozen=True, order=True)
class Cell:
    """One training: morphology ``id`` of the run in ``run`` on ``task`` with ``seed``."""

    run: Path
    task: str
    id: str
    seed: int

    @property
    def name(self) -> str:
        return f"{self.id}-s{self.seed}"

    def label(self) -> str:
        return f"{self.task} {self.run.name}:{self.id} seed {self.seed}"


def task_names(spec: str) -> list[str]:
    """The tasks of ``--tasks``: ``all`` or a comma-separated list of ``configs/eval/<task>.yml`` names."""
    known = sorted(path.stem for path in EVAL_PRESETS.glob("*.yml"))
    if spec == "all":
        return known
    tasks = list(dict.fromkeys(name.strip() for name in spec.split(",") if name.strip()))
    unknown = [name for name in tasks if name not in known]
    if not tasks or unknown:
        raise EvalError(f"unknown task {unknown[0] if unknown else spec!r}; known: {', '.join(known)} or all")
    return tasks


def open_runs(out_dirs: Sequence[Path]) -> list[RunView]:
    """Each run folder once (its ``RunDir``, read with its own config): what the evaluation plans from,
    trains in and compares.

    Raises:
        EvalError: a folder is no run, or its config does not load (one line).
    """
    try:
        return [RunView(out_dir) for out_dir in dict.fromkeys(Path(out_dir).resolve() for out_dir in out_dirs)]
    except RunError as err:
        raise EvalError(str(err)) from None


def select_ids(view: RunView, top: int | None, ids: Sequence[str] | None) -> list[str]:
    """The ``top`` best morphologies of a finished run by its selection criteria, or ``ids`` checked
    against the run's published ids (so an id never becomes a path unless the run published it)."""
    if ids is not None and not ids:
        raise EvalError("no morphology id given (--ids names none)")
    if not view.is_finished():
        raise EvalError(f"{view.run.root} holds no finished run ({len(view)} of {view.total} morphologies "
                        "published)")
    if ids is None:
        return [record.id for record in view.top(top or 1)]
    unknown = [morphology_id for morphology_id in ids if morphology_id not in view.by_id]
    if unknown:
        raise EvalError(f"unknown morphology id {unknown[0]!r}: not published in {view.run.root}")
    return list(dict.fromkeys(ids))


def cell_config(cell: Cell, run_cfg: Config, out_dir: Path, overrides: Sequence[str]) -> Config:
    """The config of ``cell`` (module docstring) of the run whose config is ``run_cfg``; ``out_dir`` is its
    training folder.

    Raises:
        ConfigError: a bad override (one line).
    """
    carried = [(f"{section}.{key}", value) for section in CARRIED_SECTIONS
               for key, value in getattr(run_cfg, section).to_dict().items()]
    carried += [(key, getattr(run_cfg, key)) for key in CARRIED_KEYS]
    # A text key takes the command line's text as it is; every other value goes as the JSON it reads back as.
    pairs = [text for key, value in carried if key not in DERIVED_KEYS
             for text in (key, value if isinstance(value, str) else json.dumps(value))]
    return load_config(EVAL_PRESETS / f"{cell.task}.yml",
                       [*pairs, *overrides, "OUT_DIR", str(out_dir), "RNG_SEED", str(cell.seed)])


def plan_cells(views: Sequence[RunView], tasks: Sequence[str], top: int | None, ids: Sequence[str] | None,
               seeds: int, overrides: Sequence[str]) -> list[Cell]:
    """Every (run, task, id, seed) cell of the runs ``views`` (``open_runs``), seeds ``0 .. seeds-1``; each
    run's and task's config is checked here, so a bad input fails before anything trains.

    Raises:
        EvalError: one line naming the problem.
    """
    cells = []
    for view in views:
        run = view.run.root
        chosen = select_ids(view, top, ids)
        if os.path.islink(run / "eval") or os.path.lexists(run / "eval") and not (run / "eval").is_dir():
            raise EvalError(f"{run / 'eval'} is not a folder (a symbolic link or a file): trainings written "
                            "through it would leave the run; remove it")
        for task in tasks:
            try:
                cell_config(Cell(run, task, chosen[0], 0), view.cfg, run / "eval", overrides)
            except ConfigError as err:
                raise EvalError(f"{task}: {err}") from None
            cells += [Cell(run, task, morphology_id, seed) for morphology_id in chosen for seed in range(seeds)]
    return sorted(cells)
