"""Worker memory over a search: resident memory of one worker after each morphology it publishes.

Runs the real ``evo_single_proc.py`` on the FT preset (``configs/evo/ft.yml``) with one worker,
``--init`` initial morphologies and ``--morphologies`` in all (aging tournaments on a window of
``--init``), each trained for ``--steps`` env steps, and samples the worker's resident memory
(the worker with its subprocesses, as the coordinator's progress line reports it) every time
the count of published morphologies grows. A worker that leaks grows with every morphology it
trains; ``growth`` is the size after the last morphology over the size after ``--baseline``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import psutil

from benchmarks.children import Child
from derl.arguments import bounded_int
from derl.paths import evo_preset

POLL_SECONDS = 0.2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--morphologies", type=bounded_int(1, 100_000), default=50,
                        help="morphologies the worker trains")
    parser.add_argument("--init", type=bounded_int(1, 100_000), default=5, help="initial population size")
    parser.add_argument("--baseline", type=bounded_int(1, 100_000), default=5,
                        help="the count whose size growth is measured from")
    parser.add_argument("--steps", type=bounded_int(1, 10**9), default=16384, help="env steps per morphology")


def _tree_rss_mb(root: psutil.Process) -> float:
    tree = [root, *root.children(recursive=True)]
    return sum(proc.memory_info().rss for proc in tree) / 2**20


def _worker(coordinator: psutil.Process) -> psutil.Process | None:
    for child in coordinator.children():
        if "derl.evolution.worker" in child.cmdline():
            return child
    return None


def _published(out_dir: Path) -> int:
    folder = out_dir / "metadata"
    return sum(1 for _ in folder.glob("*.json")) if folder.is_dir() else 0


def run(args: argparse.Namespace) -> dict:
    if not 0 < args.baseline < args.morphologies:
        raise SystemExit("error: --baseline must be between 1 and --morphologies - 1")
    with tempfile.TemporaryDirectory(prefix="derl-bench-memory-") as tmp:
        out_dir = Path(tmp)
        overrides = [
            "OUT_DIR", str(out_dir), "NUM_NODES", "1", "NODE_ID", "0", "EVO.NUM_PROCESSES", "1",
            "EVO.INIT_POPULATION_SIZE", str(args.init), "EVO.AGING_WINDOW_SIZE", str(args.init),
            "EVO.SEARCH_SPACE_SIZE", str(args.morphologies), "PPO.MAX_STATE_ACTION_PAIRS", str(args.steps),
        ]
        command = [sys.executable, "evo_single_proc.py", "--cfg", str(evo_preset("ft")), *overrides]
        evolution = Child(command, "evolution run", log=out_dir / "node.log")
        coordinator, sizes = psutil.Process(evolution.proc.pid), {}

        def sample() -> None:
            try:
                worker = _worker(coordinator)
                count = _published(out_dir)
                if worker is not None and count not in sizes:
                    sizes[count] = round(_tree_rss_mb(worker), 1)
            except psutil.Error:
                pass  # the worker is between morphologies or exiting

        evolution.wait(poll=sample, every=POLL_SECONDS).check()
    last = max(sizes)
    return {
        "config": {"preset": "configs/evo/ft.yml", "init": args.init, "morphologies": args.morphologies,
                   "steps_per_morphology": args.steps},
        "rss_mb_by_published": sizes,
        "rss_mb_after_baseline": sizes.get(args.baseline),
        "rss_mb_after_last": sizes[last],
        "last_sampled": last,
        "growth": round(sizes[last] / sizes[args.baseline], 3) if args.baseline in sizes else None,
    }
