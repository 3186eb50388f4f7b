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
"""

import argparse
import json
import sys
from pathlib import Path

from derl.config import RETIRED_KEYS, load_config_or_exit
from derl.ppo.distributed import RankInfo
from derl.training.run import evaluate, genome_to_xml, saved_source, train_to_folder


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="tools/train_ppo.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cfg", type=Path, action="append",
                        help="YAML config file; repeat to layer files (later ones win)")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--xml", type=Path, help="unimal MJCF file")
    source.add_argument("--genome", type=Path, help="genome JSON file (derl.morphology)")
    source.add_argument("--env-id", help="a Gymnasium env id with a Box action space, e.g. Ant-v5")
    parser.add_argument("--out", type=Path, help="output folder (default: OUT_DIR)")
    parser.add_argument("--resume", action="store_true", help="continue from OUT/model.pt if present")
    parser.add_argument("--eval", type=Path, metavar="CKPT", help="replay this checkpoint deterministically")
    parser.add_argument("--episodes", type=int, default=1, help="episodes to replay with --eval")
    parser.add_argument("--quiet", action="store_true", help="no progress line")
    parser.add_argument("overrides", nargs="*", metavar="KEY VALUE", help="config overrides")
    return parser.parse_intermixed_args(argv)


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    cfg_file, retired = args.cfg, frozenset()
    # Replay in the world the policy was trained in; resume the run as it was started.
    saved = args.eval.parent if args.eval is not None else args.out if args.resume else None
    if cfg_file is None and saved is not None and (saved / "config.yaml").is_file():
        cfg_file, retired = [saved / "config.yaml"], RETIRED_KEYS  # derl wrote it, perhaps an older one
    cfg = load_config_or_exit(cfg_file, args.overrides, this_node=args.eval is None, retired=retired)
    out = args.out or Path(cfg.OUT_DIR)
    try:
        if args.eval is not None:
            source = None
            if args.xml or args.genome:
                out.mkdir(parents=True, exist_ok=True)
                source = {"xml": str(args.xml or genome_to_xml(cfg, args.genome, out))}
            elif args.env_id:
                source = {"env_id": args.env_id}
            print(json.dumps(evaluate(cfg, args.eval, source, args.episodes, cfg.RNG_SEED), indent=2))
            return
        if not (args.xml or args.genome or args.env_id or args.resume):
            raise ValueError("give one of --xml, --genome or --env-id (or --eval CKPT, or --out DIR --resume)")
        out.mkdir(parents=True, exist_ok=True)
        if args.env_id:
            source = {"env_id": args.env_id}
        elif not (args.xml or args.genome):
            source = saved_source(out)  # --resume alone: the run recorded in --out
        else:
            source = {"xml": str((args.xml or genome_to_xml(cfg, args.genome, out)).resolve())}
        result = train_to_folder(cfg, source, out, resume=args.resume, progress=not args.quiet)
    except (ValueError, OSError) as err:  # CheckpointError, GenomeError, missing or unwritable files
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    if RankInfo.from_environ().is_main:
        print(json.dumps({"out": str(out), **result.summary, "env_steps": result.env_steps,
                          "steps_per_sec": round(result.steps_per_sec, 1)}))


if __name__ == "__main__":
    main(sys.argv[1:])
