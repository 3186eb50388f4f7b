"""Checks that SIM.BACKEND warp works on this machine's GPU: a verdict table, and a JSON file.

`python tools/gpu_check.py [--quick] [--out output/gpu_check.json]` (`make gpu-check`); see
tools/benchmarks/gpu_check.py for what each check measures. The report is rewritten after each row, so a
check stopped midway leaves the rows it finished. Without a GPU: one `error:` line, exit 1.
"""

import argparse
import json
import sys
from pathlib import Path

from benchmarks import gpu_check, gpu_verdicts
from derl.cli import ArgumentParser, run
from derl.fileio.outputs import OutputRefused, check_outputs
from derl.fileio.writes import atomic_write_text


def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="tools/gpu_check.py", description=gpu_check.__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("output/gpu_check.json"), help="the JSON report")
    gpu_check.add_arguments(parser)
    args = parser.parse_args(argv)
    try:  # its report replaces the last one; never inside a search's folder (derl.fileio.outputs)
        check_outputs(args, {"out": "report", **gpu_check.OUTPUTS})
    except OutputRefused as err:
        parser.error(str(err))
    missing = gpu_check.gpu_missing(args.device)
    if missing:
        print(missing, file=sys.stderr)
        return 1

    def write(report: dict) -> None:  # after each row: a check stopped midway keeps its rows
        args.out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(args.out, json.dumps(report, indent=2) + "\n")

    try:
        checks, report = gpu_check.run(args, write)
    except SystemExit as err:  # "error: ..." on bad input: one line, exit 2 as every tool
        if not isinstance(err.code, str):
            raise
        print(err.code, file=sys.stderr)
        return 2
    print(gpu_verdicts.table(checks))
    write(report)
    print(f"report: {args.out}")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    run(main)
