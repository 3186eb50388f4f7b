"""Transfer evaluation: the best morphologies of finished runs trained from scratch on the eval tasks.

    tools/evaluate.py OUT_DIR [OUT_DIR ...] --tasks all|t1,t2 [--top K | --ids ID,...] [--seeds S]
                      [--workers N] [--nproc R] [--compare FILE] [KEY VALUE ...]

Trains each (morphology, task, seed) cell under OUT_DIR/eval/<task>/<id>-s<seed>/ and writes
OUT_DIR/eval/summary.json and summary.csv (derl.evaluation). Rerun to resume; run it on several
nodes with the same arguments to share the cells. Exit codes: 0 done, 1 a cell failed
repeatedly, 2 bad input, 3 a folder of eval/ is a symbolic link or a file (refused before anything is
written), 128 + N stopped by signal N. --nproc R trains each cell with R data-parallel
ranks under torchrun (gloo on the CPU, as tools/train_ddp.sh --nproc R; DEVICE cuda for GPUs).
With several OUT_DIRs it ends with a line per task comparing the runs (mean return and metric of
their evaluated cells, best first); --compare FILE also writes that table as JSON.
"""

import re
import sys
from pathlib import Path

from derl.cli import ArgumentParser, bounded_int, run
from derl.fileio.outputs import OutputRefused, check_output, check_text


def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="tools/evaluate.py", description=__doc__.splitlines()[0])
    parser.add_argument("args", nargs="+", metavar="OUT_DIR ... [KEY VALUE ...]",
                        help="finished evolution runs, then config overrides (KEY in capitals: PPO.NUM_ENVS 8)")
    parser.add_argument("--tasks", required=True, help="all, or comma-separated names of configs/eval/<task>.yml")
    chosen = parser.add_mutually_exclusive_group()
    chosen.add_argument("--top", type=bounded_int(0, 1000), default=10, help="the K best of each run")
    chosen.add_argument("--ids", help="comma-separated morphology ids instead of --top")
    parser.add_argument("--seeds", type=bounded_int(0, 1000), default=1, help="seeds 0 .. S-1 per morphology and task")
    parser.add_argument("--nproc", type=bounded_int(0, 1024), default=1, help="ranks per training (torchrun)")
    parser.add_argument("--workers", type=bounded_int(0, 1024), help="trainings at a time (default: cores // nproc)")
    parser.add_argument("--compare", type=Path, help="write the comparison of the runs to this JSON file")
    parser.add_argument("--overwrite", action="store_true", help="replace the --compare file if it exists")
    args = parser.parse_intermixed_args(argv)
    # Imported after the arguments: --help and usage errors answer at once.
    from derl.evaluation import EvalError, evaluate, open_runs, plan_cells, task_names, write_comparison
    from derl.evolution.node_size import usable_cores
    workers = max(1, usable_cores() // max(args.nproc, 1)) if args.workers is None else args.workers
    first_key = next((k for k, arg in enumerate(args.args) if re.fullmatch(r"[A-Z][A-Z0-9_.]*", arg)), len(args.args))
    out_dirs, overrides = [Path(arg) for arg in args.args[:first_key]], args.args[first_key:]
    try:
        if not out_dirs:
            raise EvalError("give at least one OUT_DIR before the KEY VALUE overrides")
        if len(overrides) % 2:
            raise EvalError(f"config overrides come in KEY VALUE pairs; {overrides[-1]!r} has no value")
        if min(args.top, args.seeds, workers, args.nproc) < 1:
            raise EvalError("--top, --seeds, --workers and --nproc must be at least 1")
        if args.compare is not None and (args.compare.is_dir() or not args.compare.parent.is_dir()):
            raise EvalError(f"--compare {args.compare}: give a file name in an existing folder")
        for out_dir in out_dirs:  # derl.fileio.outputs: eval/ inside each run is its own place
            check_text(out_dir, "OUT_DIR")
        if args.compare is not None:
            check_output(args.compare, "--compare", args.overwrite)
        ids = None if args.ids is None else [i.strip() for i in args.ids.split(",") if i.strip()]
        views = open_runs(out_dirs)  # each run's one RunDir, planned from, trained in and compared
        cells = plan_cells(views, task_names(args.tasks), args.top, ids, args.seeds, overrides)
    except (EvalError, OutputRefused) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    code = evaluate(cells, views, overrides, workers, args.nproc)
    if len(out_dirs) > 1 or args.compare is not None:
        for line in write_comparison([view.run for view in views], args.compare):
            print(f"[evaluate] {line}")
    return code


if __name__ == "__main__":
    run(main)
