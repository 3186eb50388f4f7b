"""Transfer evaluation (``tools/evaluate.py``): evolved morphologies trained from scratch on the eval tasks.

- ``plan``: which cells (run, morphology id, task, seed) and the config of each;
- ``store``: the layout of ``OUT_DIR/eval/``, claims shared between nodes, the summary table;
- ``runner``: one training process per core, restarts, progress lines;
- ``cell``: the training process of one cell (``python -m derl.evaluation.cell``).
"""

from derl.evaluation.plan import Cell, EvalError, plan_cells, task_names
from derl.evaluation.runner import evaluate

__all__ = ["Cell", "EvalError", "evaluate", "plan_cells", "task_names"]
