"""Runs DERL evolution on this node: `python evo_single_proc.py --cfg configs/evo/ft.yml [KEY VALUE ...]`.

Run it once per node with `NODE_ID k NUM_NODES n` and the same shared OUT_DIR;
run the same command again to resume after a crash. See docs/guides/evolution.md.
--cfg is required: the declared defaults alone (docs/reference/config.md) are no study (a paper-size search of 4,000
morphologies on DERL's Floor), so starting one by accident is refused.
"""

import os
import signal
import sys
from pathlib import Path

from derl.cli import ArgumentParser, run
from derl.config import ConfigError
from derl.paths import EVO_PRESETS


def main(argv: list[str]) -> int:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cfg", help="YAML config file (required), e.g. configs/evo/ft.yml or configs/evo/quick.yml")
    parser.add_argument("overrides", nargs="*", help="KEY VALUE pairs, e.g. NODE_ID 1 NUM_NODES 2")
    args = parser.parse_args(argv)
    if args.cfg is None:
        presets = Path(os.path.relpath(EVO_PRESETS))
        names = ", ".join(p.stem for p in sorted(presets.glob("*.yml")))
        print(f"error: give --cfg FILE: a preset in {presets}/ ({names}) or a file of your own", file=sys.stderr)
        return 2
    from derl.evolution.coordinator import run_node  # after the arguments: --help answers at once

    try:
        return run_node(args.cfg, args.overrides)
    except (ConfigError, ValueError, TimeoutError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as err:  # Ctrl-C, or SIGTERM (coordinator.Interrupted)
        print("interrupted while preparing the run; run the same command again to resume", file=sys.stderr)
        return 128 + getattr(err, "signum", signal.SIGINT)


if __name__ == "__main__":
    run(main)
