"""The training process of one cell, started by ``derl.evaluation.runner``.

    python -m derl.evaluation.cell RUN_DIR TASK ID SEED OUT_DIR [KEY VALUE ...]

Trains from scratch, or from the cell's checkpoint if a killed training left one
(``train_to_folder(resume=True)``). Exit 0 once ``OUT_DIR/metrics.json`` is written.
"""

from __future__ import annotations

import sys
from pathlib import Path

from derl.evaluation.plan import Cell, cell_config
from derl.evolution.storage import RunDir
from derl.training.run import train_to_folder


def main(argv: list[str]) -> None:
    run, task, morphology_id, seed, out_dir, *overrides = argv
    cell = Cell(Path(run), task, morphology_id, int(seed))
    cfg = cell_config(cell, Path(out_dir), overrides)
    train_to_folder(cfg, {"xml": str(RunDir(cell.run).xml_path(cell.id))}, Path(out_dir), resume=True,
                    progress=False)


if __name__ == "__main__":
    main(sys.argv[1:])
