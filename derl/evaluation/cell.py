"""The training process of one cell, started by ``derl.evaluation.runner``.

    python -m derl.evaluation RUN_DIR TASK ID SEED OUT_DIR [KEY VALUE ...]   (derl/evaluation/__main__.py)

Trains from scratch, or from the cell's checkpoint if a killed training left one
(``train_to_folder(resume=True)``). Exit 0 once ``OUT_DIR/metrics.json`` is written. Under
``torchrun`` (``tools/evaluate.py --nproc N``) every rank runs this; rank 0 writes the folder.
Each process dies with its parent (the evaluation, or torchrun's agent for a rank).
"""

from __future__ import annotations

import os
from pathlib import Path

from derl.checked_config import load_run_config
from derl.evaluation.plan import Cell, cell_config
from derl.evolution.folder.genome_store import morphology_file
from derl.fileio.folders import confine_writes
from derl.fileio.outputs import SEARCH_CONFIG
from derl.lifetime import die_with_parent
from derl.threads import limit_threads
from derl.training.run import train_to_folder

PARENT_PID_VARIABLE = "DERL_EVAL_PARENT_PID"


def orphaned() -> bool:
    """Whether the parent died before ``die_with_parent`` took effect (this process was re-parented).

    The evaluation names itself in ``PARENT_PID_VARIABLE``: in a container it may be PID 1, the
    reaper's own number. A torchrun rank's parent, the agent, is never PID 1.
    """
    expected = os.environ.get(PARENT_PID_VARIABLE)
    return os.getppid() != int(expected) if expected else os.getppid() == 1


def main(argv: list[str]) -> None:
    die_with_parent()
    if orphaned():
        raise SystemExit(1)
    run, task, morphology_id, seed, out_dir, *overrides = argv
    cell = Cell(Path(run), task, morphology_id, int(seed))
    confine_writes(cell.run)  # every write below OUT_DIR (the trainer's too): no folder passed as a link
    cfg = cell_config(cell, load_run_config(cell.run / SEARCH_CONFIG), Path(out_dir), overrides)
    limit_threads(cfg.TORCH_THREADS)  # one training per core: no BLAS or OpenMP pools fighting
    train_to_folder(cfg, {"xml": str(morphology_file(cell.run, "xml", cell.id))}, Path(out_dir), resume=True,
                    progress=False)

