"""What ``tools/train_ppo.py`` does once its arguments are parsed: train, resume or replay one policy.

The exit codes are the tools' (docs/reference/commands.md#exit-codes): 0 done, 2 bad input (a refused
command leaves no folder behind), 128 + N stopped by signal N after saving a checkpoint.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING

from derl.cli import EXIT_INTERRUPTED, EXIT_USAGE

if TYPE_CHECKING:
    from derl.ppo.trainer import TrainResult


def main(args: argparse.Namespace) -> int:
    """Runs the command ``args`` of ``tools/train_ppo.py`` describe; returns its exit code."""
    # Imported here, not at the top: the tool's --help and usage errors answer at once; the learner's (torch)
    # once the genome is read, so that a genome outside the design space is refused in half a second.
    from derl.checked_config import load_config_or_exit
    from derl.config import RETIRED_KEYS
    from derl.fileio.outputs import check_output
    from derl.morphology.files import load_genome
    from derl.threads import limit_threads

    cfg_file, retired = args.cfg, frozenset()
    if args.eval is not None and not args.eval.is_file():
        return _error(f"checkpoint not found: {args.eval}")
    source_given = bool(args.xml or args.genome or args.env_id)
    if args.resume and not source_given:
        from derl.training.run import RUN_FILE

        if not (args.out and (args.out / RUN_FILE).is_file()):
            where = args.out or "OUT_DIR"
            return _error(f"--resume: no training in {where} (no {RUN_FILE}); give --out DIR of a training, "
                          "or --xml, --genome or --env-id to start one")
    # Replay in the world the policy was trained in; resume the run as it was started.
    saved = args.eval.parent if args.eval is not None else args.out if args.resume else None
    if cfg_file is None and saved is not None and os.path.lexists(saved / "config.yaml"):
        cfg_file, retired = [saved / "config.yaml"], RETIRED_KEYS  # derl wrote it, perhaps an older one
    cfg = load_config_or_exit(cfg_file, args.overrides, this_node=args.eval is None, retired=retired,
                              read_back=bool(retired))  # read back: never through a link or from a FIFO
    try:  # held to the config's design space before anything is built or written (derl.morphology.genome)
        genome = None if args.genome is None else load_genome(args.genome, cfg.unimal)
    except ValueError as err:  # InputError
        return _error(str(err))

    from derl.ppo.distributed import RankInfo
    from derl.ppo.trainer import max_iterations
    from derl.training.run import (
        CHECKPOINT_FILE,
        FINAL_METRICS_FILE,
        RUN_FILE,
        Interrupted,
        SignalStop,
        evaluate,
        finished_result,
        interrupted_by_signals,
        removed_on_failure,
        saved_source,
        train_to_folder,
        write_xml,
    )

    limit_threads(cfg.TORCH_THREADS)
    out = args.out or Path(cfg.OUT_DIR)
    info = RankInfo.from_environ()
    try:
        if args.eval is None or genome is not None:  # it writes in ``out``: never in a search's folder
            check_output(out, "--out" if args.out else "OUT_DIR", folder=True)
        if args.eval is not None:
            source = None
            if args.xml or genome is not None:
                out.mkdir(parents=True, exist_ok=True)
                source = {"xml": str(args.xml or write_xml(cfg.unimal, genome, out))}
            elif args.env_id:
                source = {"env_id": args.env_id}
            print(json.dumps(evaluate(cfg.world, cfg.DEVICE, args.eval, source, args.episodes, cfg.RNG_SEED), indent=2))
            return 0
        if not (source_given or args.resume):
            raise ValueError("give one of --xml, --genome or --env-id (or --eval CKPT, or --out DIR --resume)")
        if args.resume and (done := finished_result(out, max_iterations(cfg.PPO, info.world_size))) is not None:
            if info.is_main:
                print(f"{out} already finished ({done.iterations} iterations, {done.env_steps} env steps); "
                      f"nothing to do, {out / FINAL_METRICS_FILE} unchanged. Raise PPO.MAX_STATE_ACTION_PAIRS "
                      "to train further", file=sys.stderr)
                _print_result(out, done)
            return 0
        with removed_on_failure(out) if info.is_main else nullcontext():
            with interrupted_by_signals():  # building the body: a signal stops it at once
                out.mkdir(parents=True, exist_ok=True)
                if args.env_id:
                    source = {"env_id": args.env_id}
                elif not (args.xml or args.genome):
                    source = saved_source(out)  # --resume alone: the run recorded in --out
                else:
                    source = {"xml": str((args.xml or write_xml(cfg.unimal, genome, out)).resolve())}
            with SignalStop() as stop:
                result = train_to_folder(cfg, source, out, resume=args.resume, progress=not args.quiet,
                                         callbacks=[stop])
    except (ValueError, OSError) as err:  # CheckpointError, GenomeError, missing or unwritable files
        return _error(str(err))
    except KeyboardInterrupt as err:  # Ctrl-C or SIGTERM while starting, or a second one while training
        print("interrupted; nothing finished. Rerun with --out DIR --resume to continue from the last "
              "checkpoint, if any", file=sys.stderr)
        return 128 + err.signum if isinstance(err, Interrupted) else EXIT_INTERRUPTED
    if not result.completed:
        if info.is_main:
            print(f"stopped by signal {stop.signum} at iteration {result.iterations}; checkpoint "
                  f"{out / CHECKPOINT_FILE}. Continue with the same command and --resume (one process: "
                  f"tools/train_ppo.py --out {out} --resume)", file=sys.stderr)
        # Under tools/train_ddp.sh a rank exits 0 (torchrun reports any other code as a failure, with a
        # traceback); the script itself exits 128 + N.
        return int(os.environ.get("DERL_RANK_STOP_EXIT", 128 + (stop.signum or signal.SIGINT)))
    if info.is_main:
        _print_result(out, result)
    return 0


def _print_result(out: Path, result: TrainResult) -> None:
    print(json.dumps({"out": str(out), **result.summary, "env_steps": result.env_steps,
                      "steps_per_sec": round(result.steps_per_sec, 1)}))


def _error(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return EXIT_USAGE
