"""Shows the progress of an evolution run: `python tools/status.py OUT_DIR`."""

import sys

from derl.cli import ArgumentParser, run
from derl.evolution.status import status_lines


def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="tools/status.py", description=__doc__)
    parser.add_argument("out_dir", help="the run's OUT_DIR, e.g. output/quick")
    args = parser.parse_args(argv)
    try:
        print("\n".join(status_lines(args.out_dir)))
    except (FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    run(main)
