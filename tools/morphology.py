"""UNIMAL morphologies from the command line.

    tools/morphology.py sample --num N --seed S --out DIR [--mutations K] [--overwrite] [--cfg F] [KEY VALUE ...]
    tools/morphology.py xml GENOME.json
    tools/morphology.py mutate GENOME.json --seed S --out DIR [--overwrite]
    tools/morphology.py stats DIR
    tools/morphology.py image GENOME.json --out FILE.png [--size W H] [--overwrite]

``sample`` and ``mutate`` write ``DIR/<id>.json`` (genome) and ``DIR/<id>.xml`` (MJCF), over other bytes only
with ``--overwrite``; ``image`` renders the body at its start pose on a floor, headless (MUJOCO_GL=egl).
"""

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")

from derl.cli import ArgumentParser, any_seed, bounded_int, run  # noqa: E402
from derl.fileio.outputs import OutputRefused, check_output  # noqa: E402


def main(argv: list[str]) -> None:
    parser = ArgumentParser(prog="tools/morphology.py", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    sample = commands.add_parser("sample", help="random genomes, optionally mutated K times")
    sample.add_argument("--num", type=bounded_int(1, 100_000), required=True)
    sample.add_argument("--seed", type=any_seed, required=True)
    sample.add_argument("--out", type=Path, required=True)
    sample.add_argument("--mutations", type=bounded_int(0, 1000), default=0)
    xml = commands.add_parser("xml", help="print the MJCF of a saved genome")
    xml.add_argument("genome", type=Path)
    mutate = commands.add_parser("mutate", help="write one mutated child of a saved genome")
    mutate.add_argument("genome", type=Path)
    mutate.add_argument("--seed", type=any_seed, required=True)
    mutate.add_argument("--out", type=Path, required=True)
    stats = commands.add_parser("stats", help="limb and DoF histograms, unique structures")
    stats.add_argument("dir", type=Path)
    image = commands.add_parser("image", help="a PNG picture of a saved genome")
    image.add_argument("genome", type=Path)
    image.add_argument("--out", type=Path, required=True, help="PNG file to write")
    for sub, what in ((sample, "DIR/<id> files of other bodies"), (mutate, "DIR/<id> files of another body"),
                      (image, "the --out file if it exists")):
        sub.add_argument("--overwrite", action="store_true", help=f"replace {what}")
    image.add_argument("--size", type=int, nargs=2, default=[480, 360], metavar=("W", "H"))
    for sub in (sample, xml, mutate, stats, image):
        sub.add_argument("--cfg", help="YAML config file")
        sub.add_argument("overrides", nargs="*", metavar="KEY VALUE", help="config overrides")
    args = parser.parse_with_overrides(argv)  # KEY VALUE pairs may follow the options too
    try:  # derl.fileio.outputs: never inside a run folder, never over a file unasked
        if args.command in ("sample", "mutate", "image"):
            check_output(args.out, "--out", args.overwrite, folder=args.command != "image")
    except OutputRefused as err:
        parser.error(str(err))
    # Imported after the arguments: --help and usage errors answer at once.
    from derl.checked_config import load_config_or_exit
    from derl.cli import morphology
    from derl.morphology.files import sample

    cfg = load_config_or_exit(args.cfg, args.overrides)
    try:
        if args.command == "sample":
            for path in sample(cfg.unimal, args.num, args.seed, args.out, args.mutations, args.overwrite):
                print(path)
        elif args.command == "xml":
            sys.stdout.write(morphology.genome_xml(cfg.unimal, args.genome))
        elif args.command == "mutate":
            print(morphology.mutate_file(cfg.unimal, args.genome, args.seed, args.out, args.overwrite))
        elif args.command == "image":
            print(morphology.image(cfg.world, cfg.unimal, args.genome, args.out, tuple(args.size)))
        else:
            print(json.dumps(morphology.stats(cfg.unimal, args.dir), indent=2))
    except (ValueError, OSError) as err:  # morphology.InputError, unwritable --out
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    run(main)
