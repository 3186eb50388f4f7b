"""Evolution throughput: morphologies/hour with 1 and with 2 workers, and coordinator CPU load.

Runs the real ``evo_single_proc.py`` twice on the same small FT search (configs/evo/quick.yml
scaled down, at the 8 envs x 64 steps its figures in docs/benchmarks.md were measured with), one run
after the other, and reads each run's ``summary.json``: the rate is
measured by the coordinator over its worker session (the initial population build excluded),
the coordinator's own CPU time as a fraction of that session.

By default both runs do random search (``EVO.IS_EVO false``): every slot's morphology then
depends only on its seed, so the runs train the very same morphologies and the ratio compares
like with like. With tournaments (``--tournament``) the parents picked depend on which results
happen to be published first, so the runs train different morphologies of different cost.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from benchmarks.children import run_command
from derl.arguments import bounded_int
from derl.fileio.reads import read_json
from derl.progress import progress_bar


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--init", type=bounded_int(1, 100_000), default=4, help="initial population size")
    parser.add_argument("--search", type=bounded_int(1, 100_000), default=24,
                        help="morphologies per run (SEARCH_SPACE_SIZE)")
    parser.add_argument("--steps", type=bounded_int(1, 10**9), default=40000, help="env steps per morphology")
    parser.add_argument("--tournament", action="store_true",
                        help="aging tournaments instead of random search (runs then train different morphologies)")
    parser.add_argument("--workers", type=bounded_int(1, 1024), nargs="+", default=[1, 2],
                        help="worker counts to compare")


def _run(args: argparse.Namespace, workers: int, out_dir: Path) -> dict:
    overrides = [
        "OUT_DIR", str(out_dir), "EVO.NUM_PROCESSES", str(workers),
        "EVO.INIT_POPULATION_SIZE", str(args.init),
        "EVO.SEARCH_SPACE_SIZE", str(args.search), "EVO.AGING_WINDOW_SIZE", str(args.init),
        "PPO.NUM_ENVS", "8", "PPO.TIMESTEPS", "64",
        "PPO.MAX_STATE_ACTION_PAIRS", str(args.steps), "EVO.IS_EVO", str(args.tournament).lower(),
    ]
    command = [sys.executable, "evo_single_proc.py", "--cfg", "configs/evo/quick.yml", *overrides]
    run_command(command, f"evolution run with {workers} workers", log=out_dir.parent / f"w{workers}.log")
    summary = read_json(out_dir / "summary.json")
    return {
        "workers": workers,
        "published": summary["published"],
        "session_seconds": round(summary["coordinator"]["session_seconds"], 2),
        "morphologies_per_hour": round(summary["morphologies_per_hour"], 1),
        "coordinator_cpu_fraction": round(summary["coordinator"]["cpu_fraction"], 5),
        "load_average_1min_after": round(os.getloadavg()[0], 2),  # other jobs on the machine skew the ratio
    }


def run(args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory(prefix="derl-bench-evolve-") as tmp:
        shown = progress_bar(len(args.workers), "bench evolve", unit="search", iterable=args.workers)
        runs = [_run(args, workers, Path(tmp) / f"w{workers}") for workers in shown]
    rates = [r["morphologies_per_hour"] for r in runs]
    return {
        "config": {"init": args.init, "search": args.search, "steps_per_morphology": args.steps,
                   "tournament": args.tournament},
        "runs": runs,
        "speedup": round(rates[-1] / rates[0], 3) if rates[0] > 0 else None,
    }
