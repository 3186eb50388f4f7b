"""Static HTML report of an evolution run: fitness, morphology, lineage, Baldwin effect, top K with videos.

    tools/report.py OUT_DIR [--out DIR] [--top K] [--fraction F] [--video-steps N] [--no-media] [--seed S]

Writes DIR/index.html (default OUT_DIR/report/index.html), plots/ and media/ beside it; open the
page from disk. Works on a run in progress. Prints what it wrote as JSON.
"""

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")

from derl.cli import ArgumentParser, any_seed, bounded_int, run  # noqa: E402
from derl.fileio.outputs import OutputRefused, check_output  # noqa: E402


def main(argv: list[str]) -> None:
    parser = ArgumentParser(prog="tools/report.py", description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path, help="the run's OUT_DIR")
    parser.add_argument("--out", type=Path, help="report folder (default OUT_DIR/report)")
    parser.add_argument("--top", type=bounded_int(1, 1000), default=10, help="morphologies in the table and tree")
    parser.add_argument("--fraction", type=float, default=0.75,
                        help="fraction of the final fitness for the learning-speed (Baldwin) plot")
    parser.add_argument("--video-steps", type=bounded_int(1, 100_000), default=200, help="frames of each top-K video")
    parser.add_argument("--no-media", action="store_true", help="no body pictures or videos (no rendering)")
    parser.add_argument("--seed", type=any_seed, help="replay seed of the videos (default: the run's RNG_SEED)")
    args = parser.parse_args(argv)
    try:  # derl.fileio.outputs: inside a run folder only its own report/
        check_output(args.out or args.out_dir / "report", "--out", folder=True, own=args.out_dir / "report")
    except OutputRefused as err:
        parser.error(str(err))
    # Imported after the arguments: --help and usage errors answer at once.
    from derl.analysis.report import ReportOptions, write_report
    from derl.analysis.run import RunError, RunView
    if not 0 < args.fraction <= 1:
        parser.error(f"--fraction must be in (0, 1], got {args.fraction}")
    options = ReportOptions(top_k=args.top, fraction=args.fraction, video_steps=args.video_steps,
                            media=not args.no_media, seed=args.seed)
    try:
        report = write_report(RunView(args.out_dir), args.out, options)
    except (RunError, OSError) as err:  # not a run folder, unwritable --out
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    print(json.dumps({"index": str(report.index), "sections": report.sections, "plots": report.plots,
                      "media": len(report.media), "problems": report.problems, "seconds": report.seconds,
                      "baldwin_slope": report.baldwin_slope}, indent=2))


if __name__ == "__main__":
    run(main)
