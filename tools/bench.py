"""Benchmarks, printed as JSON: `python tools/bench.py NAME [options]` (`--help` lists the names).

Each benchmark lives in `derl/bench/<name>.py` with `add_arguments(parser)` and
`run(args) -> dict`; ratios are measured side by side in one run.
"""

import argparse
import json
import sys
from pathlib import Path
from types import ModuleType

from derl.cli import ArgumentParser, run
from derl.fileio.writes import atomic_write_text
from derl.threads import limit_threads

BENCHMARKS = ("env", "ppo", "ab", "evolve", "report", "learner", "ddp", "memory", "sim", "compile", "fidelity")


def benchmark(name: str) -> ModuleType:
    """The module of benchmark ``name``, imported alone: importing all of them costs seconds of start-up."""
    if name == "env":
        from derl.bench import env as module
    elif name == "ppo":
        from derl.bench import ppo as module
    elif name == "ab":
        from derl.bench import ab as module
    elif name == "evolve":
        from derl.bench import evolve as module
    elif name == "report":
        from derl.bench import report as module
    elif name == "learner":
        from derl.bench import learner as module
    elif name == "ddp":
        from derl.bench import ddp as module
    elif name == "memory":
        from derl.bench import memory as module
    elif name == "sim":
        from derl.bench import sim as module
    elif name == "compile":
        from derl.bench import compile as module
    elif name == "fidelity":
        from derl.bench import fidelity as module
    else:
        raise ValueError(f"no benchmark {name!r}")
    return module


def main(argv: list[str]) -> int:
    chooser = ArgumentParser(prog="tools/bench.py", description=__doc__.splitlines()[0],
                             epilog="`tools/bench.py NAME --help` lists a benchmark's options.")
    chooser.add_argument("benchmark", choices=BENCHMARKS, help="the benchmark to run")
    chooser.add_argument("options", nargs=argparse.REMAINDER, help="its options")
    chosen = chooser.parse_args(argv)
    module = benchmark(chosen.benchmark)
    parser = ArgumentParser(prog=f"tools/bench.py {chosen.benchmark}", description=module.__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, help="also write the JSON result to this file")
    module.add_arguments(parser)
    args = parser.parse_args(chosen.options)
    limit_threads(1)  # every benchmark measures one core per process (TORCH_THREADS 1), BLAS included
    try:
        result = module.run(args)
    except SystemExit as err:  # a benchmark's "error: ..." on bad input: one line, exit 2 as every tool
        if not isinstance(err.code, str):
            raise
        print(err.code, file=sys.stderr)
        return 2
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        atomic_write_text(args.out, text + "\n")
    return 0


if __name__ == "__main__":
    run(main)
