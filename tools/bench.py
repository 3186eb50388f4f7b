"""Benchmarks, printed as JSON: `python tools/bench.py NAME [options]` (`--help` lists the names).

Each benchmark lives in `tools/benchmarks/<name>.py` (beside this script; derl never imports them) with
`add_arguments(parser)`, `run(args) -> dict` and its output paths in `OUTPUTS` (derl.fileio.outputs); ratios
are measured side by side in one run.
"""

import argparse
import importlib
import json
import sys
from pathlib import Path
from types import ModuleType

from derl.cli import ArgumentParser, run
from derl.fileio.outputs import OutputRefused, check_outputs
from derl.fileio.writes import atomic_write_text
from derl.threads import limit_threads

BENCHMARKS = ("env", "ppo", "ab", "evolve", "report", "learner", "ddp", "memory", "sim", "compile", "fidelity",
              "cluster", "scale")


def benchmark(name: str) -> ModuleType:
    """The module of benchmark ``name``, imported alone: importing all of them costs seconds of start-up."""
    if name not in BENCHMARKS:
        raise ValueError(f"no benchmark {name!r}")
    return importlib.import_module(f"benchmarks.{name}")


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
    parser.add_argument("--overwrite", action="store_true", help="replace --out (or another output file) if it exists")
    module.add_arguments(parser)
    args = parser.parse_args(chosen.options)
    try:  # before anything runs: never inside a search's folder, never over a file unasked
        check_outputs(args, {"out": "file", **getattr(module, "OUTPUTS", {})}, args.overwrite)
    except OutputRefused as err:
        parser.error(str(err))
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
