"""Transfer evaluation (``tools/evaluate.py``): evolved morphologies trained from scratch on the eval tasks.

- ``plan``: which cells (run, morphology id, task, seed) and the config of each;
- ``store``: the layout of ``OUT_DIR/eval/``, claims shared between nodes, the summary table, the
  comparison of several runs;
- ``runner``: one training process per core, restarts, progress lines;
- ``cell``: the training process of one cell (``python -m derl.evaluation``).
"""

from derl.evaluation.plan import Cell, EvalError, open_runs, plan_cells, task_names
from derl.evaluation.runner import evaluate
from derl.evaluation.store import compare_runs, write_comparison

__all__ = ["Cell", "EvalError", "compare_runs", "evaluate", "open_runs", "plan_cells", "task_names", "write_comparison"]
