"""Train one morphology (or any Gymnasium Box-action env) with DERL's PPO, or replay a policy.

    tools/train_ppo.py --cfg CFG [--cfg CFG ...] (--xml F | --genome F | --env-id ID) [--out DIR] [--resume]
        [KEY VALUE ...]
    tools/train_ppo.py --out DIR --resume [KEY VALUE ...]
    tools/train_ppo.py --eval CKPT [--cfg CFG] [--episodes N] [KEY VALUE ...]

--eval uses the config.yaml and run.json next to CKPT, --resume those in --out, unless --cfg / --xml /
--genome / --env-id say otherwise.
The output folder (default OUT_DIR) gets config.yaml, run.json, model.pt, metrics.jsonl and
metrics.json (see derl/training/run.py). --eval prints the deterministic return as JSON.
Under torchrun (tools/train_ddp.sh) each rank runs this script; rank 0 writes the folder and prints.
A --resume of a finished training says so and changes nothing. Exit codes
(docs/reference/commands.md#exit-codes): 0 done, 2 bad input (a refused command leaves no folder
behind), 130/143 stopped by Ctrl-C or SIGTERM after saving a checkpoint (resume with --resume).
The work: derl/cli/train_ppo.py.
"""

import argparse
from pathlib import Path

from derl.cli import ArgumentParser, bounded_int, run


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = ArgumentParser(
        prog="tools/train_ppo.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cfg", type=Path, action="append",
                        help="YAML config file; repeat to layer files (later ones win)")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--xml", type=Path, help="unimal MJCF file")
    source.add_argument("--genome", type=Path, help="genome JSON file (derl.morphology)")
    source.add_argument("--env-id", help="a Gymnasium env id with a Box action space, e.g. Ant-v5")
    parser.add_argument("--out", type=Path, help="output folder (default: OUT_DIR)")
    parser.add_argument("--resume", action="store_true",
                        help="continue from OUT/model.pt if present; a finished training is left as it is")
    parser.add_argument("--eval", type=Path, metavar="CKPT", help="replay this checkpoint deterministically")
    parser.add_argument("--episodes", type=bounded_int(1, 10_000), default=1, help="episodes to replay with --eval")
    parser.add_argument("--quiet", action="store_true", help="no progress bar (it is drawn on a terminal only anyway)")
    parser.add_argument("overrides", nargs="*", metavar="KEY VALUE", help="config overrides")
    return parser.parse_intermixed_args(argv)


def main(argv: list[str]) -> int:
    from derl.cli.train_ppo import main as train_ppo  # after the arguments: --help answers at once

    return train_ppo(parse_args(argv))


if __name__ == "__main__":
    run(main)
