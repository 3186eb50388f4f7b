"""Benchmarks, printed as JSON: `python tools/bench.py {env,ppo,evolve} [options]`.

Each benchmark lives in `derl/bench/<name>.py` with `add_arguments(parser)` and
`run(args) -> dict`; ratios are measured side by side in one run.
"""

import argparse
import importlib
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

BENCHMARKS = ("env", "ppo", "evolve")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="name", required=True)
    modules = {}
    for name in BENCHMARKS:
        module = importlib.import_module(f"derl.bench.{name}")
        modules[name] = module
        p = sub.add_parser(name, help=module.__doc__.splitlines()[0])
        p.add_argument("--out", type=Path, help="also write the JSON result to this file")
        module.add_arguments(p)
    args = parser.parse_args()
    result = modules[args.name].run(args)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        from derl.fileio import atomic_write_text

        atomic_write_text(args.out, text + "\n")


if __name__ == "__main__":
    main()
