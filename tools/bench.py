"""Benchmarks, printed as JSON: `python tools/bench.py {env,ppo,ab,evolve,report,learner,ddp,memory} [options]`.

Each benchmark lives in `derl/bench/<name>.py` with `add_arguments(parser)` and
`run(args) -> dict`; ratios are measured side by side in one run.
"""

import argparse
import importlib
import json
import sys
from pathlib import Path

from derl.fileio import atomic_write_text

BENCHMARKS = ("env", "ppo", "ab", "evolve", "report", "learner", "ddp", "memory")


def main(argv: list[str]) -> None:
    if not argv or argv[0] not in BENCHMARKS:
        print(f"usage: tools/bench.py {{{','.join(BENCHMARKS)}}} [options] [--out FILE]", file=sys.stderr)
        raise SystemExit(2)
    module = importlib.import_module(f"derl.bench.{argv[0]}")
    parser = argparse.ArgumentParser(prog=f"tools/bench.py {argv[0]}", description=module.__doc__)
    parser.add_argument("--out", type=Path, help="also write the JSON result to this file")
    module.add_arguments(parser)
    args = parser.parse_args(argv[1:])
    try:
        result = module.run(args)
    except SystemExit as err:  # a benchmark's "error: ..." on bad input: one line, exit 2 as every tool
        if not isinstance(err.code, str):
            raise
        print(err.code, file=sys.stderr)
        raise SystemExit(2) from None
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        atomic_write_text(args.out, text + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
