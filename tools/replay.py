"""Replay a published morphology of a run deterministically, from the run folder alone.

    tools/replay.py OUT_DIR ID [--video FILE] [--steps N] [--seed S]

Uses OUT_DIR/config.yaml (the run's env), xml/ID.xml and models/ID.pt. Prints the first
episode's return, reward terms, metric and length as JSON; the same seed gives the same numbers,
equal to `tools/train_ppo.py --eval OUT_DIR/models/ID.pt --cfg OUT_DIR/config.yaml
--xml OUT_DIR/xml/ID.xml RNG_SEED S`. --video writes an MP4 (GIF if MP4 is unavailable) of N
frames (default: the episode length), continuing into new episodes if the first one ends sooner.
"""

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")

from derl.analysis.run import RunError, RunView  # noqa: E402


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="tools/replay.py", description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("out_dir", type=Path, help="the run's OUT_DIR")
    parser.add_argument("id", help="a published morphology id, e.g. 000042")
    parser.add_argument("--video", type=Path, help="write a video of the policy here (.mp4 or .gif)")
    parser.add_argument("--steps", type=int, help="episode length (default: the run's ENV.EPISODE_LENGTH)")
    parser.add_argument("--seed", type=int, help="env seed (default: the run's RNG_SEED)")
    args = parser.parse_args(argv)
    try:
        result = RunView(args.out_dir).replay(args.id, seed=args.seed, steps=args.steps, video=args.video)
    except (RunError, ValueError, OSError) as err:  # CheckpointError, malformed MJCF, missing files
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    print(json.dumps(result.to_json(), indent=2))


if __name__ == "__main__":
    main(sys.argv[1:])
