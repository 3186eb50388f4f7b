"""Replay a published morphology of a run, from the run folder alone.

    tools/replay.py OUT_DIR ID [--video FILE [--overwrite]] [--steps N] [--seed S] [--episodes E]

Uses OUT_DIR/config.yaml (the run's env), xml/ID.xml and models/ID.pt. Prints as JSON the first
deterministic episode (mean actions): return, reward terms, metric, length; then E episodes (5) with
mean actions ("deterministic") and E with sampled actions ("stochastic", as in training), each with
the return's mean, std, min and max and each selection criterion's mean and std ("criteria"), next to
the values the run published ("published": the selection criteria, e.g. __reward__forward, and the
return), which are DERL's statistic over stochastic training episodes (derl/analysis/replay.py:
FITNESS_NOTE); stderr gets the first criterion's three on one line.
The same seed gives the same numbers; the first episode's are
equal to `tools/train_ppo.py --eval OUT_DIR/models/ID.pt --cfg OUT_DIR/config.yaml
--xml OUT_DIR/xml/ID.xml RNG_SEED S`. --video writes an MP4 (GIF if MP4 is unavailable) of N
frames (default: the episode length), continuing into new episodes if the first one ends sooner; never
inside OUT_DIR nor over an existing file unless --overwrite (docs/reference/commands.md#output-paths).
"""

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")

from derl.cli import ArgumentParser, any_seed, bounded_int, run  # noqa: E402
from derl.fileio.outputs import OutputRefused, check_output  # noqa: E402


def main(argv: list[str]) -> None:
    parser = ArgumentParser(prog="tools/replay.py", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir", type=Path, help="the run's OUT_DIR")
    parser.add_argument("id", help="a published morphology id, e.g. 000042")
    parser.add_argument("--video", type=Path, help="write a video of the policy here (.mp4 or .gif), outside OUT_DIR")
    parser.add_argument("--overwrite", action="store_true", help="replace the --video file if it exists")
    parser.add_argument("--steps", type=bounded_int(1, 1_000_000), help="episode length (default: ENV.EPISODE_LENGTH)")
    parser.add_argument("--seed", type=any_seed, help="env seed (default: the run's RNG_SEED)")
    parser.add_argument("--episodes", type=bounded_int(0, 10_000), default=5,
                        help="episodes with mean actions and with sampled actions, for the spread (0: the first only)")
    args = parser.parse_args(argv)
    try:  # derl.fileio.outputs: never inside a run folder (its models, its metadata), never over a file unasked
        if args.video is not None:
            check_output(args.video, "--video", args.overwrite)
    except OutputRefused as err:
        parser.error(str(err))
    # Imported after the arguments: --help and usage errors answer at once.
    from derl.analysis.replay import replay, replay_line
    from derl.analysis.run import RunError, RunView
    try:
        result = replay(RunView(args.out_dir), args.id, seed=args.seed, steps=args.steps, video=args.video,
                        episodes=args.episodes, overwrite=args.overwrite)
    except (RunError, ValueError, OSError) as err:  # CheckpointError, malformed MJCF, missing files
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    print(json.dumps(result.to_json(), indent=2))
    if result.deterministic is not None and result.stochastic is not None:
        print(replay_line(result, args.episodes), file=sys.stderr)

if __name__ == "__main__":
    run(main)
