"""One evolution worker process: fill slots with the DERL step until the search is done.

Run by the coordinator as ``python -m derl.evolution.worker --worker W [--cfg FILE] [KEY VALUE ...]``.
The step (choose a parent, mutate, train, publish) is ``derl.evolution.step``; which slot it fills
next, ``derl.evolution.scheduling``; the leases and the stop signal, ``derl.evolution.lease``; exit
codes and what the coordinator shares with its workers, ``derl.evolution.process``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import traceback
from pathlib import Path
from typing import Any

from derl.arguments import ArgumentParser
from derl.checked_config import Config, load_config_or_exit
from derl.evolution.backend import Backend, TrainingSetup, load_backend
from derl.evolution.failures import WHOSE, classify, config_fault, describe
from derl.evolution.folder.run_dir import RunDir
from derl.evolution.lease import Heartbeat, StopSignal, heartbeat_interval
from derl.evolution.process import (
    COORDINATOR_PID_VARIABLE,
    EXIT_CONFIG,
    EXIT_ENVIRONMENT,
    EXIT_FATAL,
    EXIT_STOPPED,
    FatalError,
    Stopped,
    WorkerState,
    catch_stop_signals,
    hold_worker_lock,
)
from derl.evolution.results import PublishedResults
from derl.evolution.scheduling import Scheduler
from derl.evolution.step import Step
from derl.fileio.folders import NotAFolder, confine_writes
from derl.lifetime import die_with_parent, guard_group
from derl.threads import limit_threads


def run_worker(cfg: Config, worker: int, backend: Backend | None = None) -> int:
    """Runs worker ``worker`` of node ``cfg.NODE_ID``; returns its exit code.

    A failure that is not a morphology's (those are recorded per slot) stops the worker with one
    line on stderr (and the traceback of a bug) and ``EXIT_ENVIRONMENT``; nothing else is written,
    so its slot keeps its attempt and its checkpoint. A folder of ``OUT_DIR`` that became a symbolic
    link or a file (``NotAFolder``), or more memory than the node has (a ``MemoryError``: ``classify``
    calls it the config's), is one a restart would find again: ``EXIT_FATAL`` stops the node. A fault of
    the config found while training (a ``ConfigError``: ``config_fault``) is one line naming the key and
    ``EXIT_CONFIG``, as bad input: the node stops, no morphology pays for it.
    """
    try:
        return _run_worker(cfg, worker, backend)
    except NotAFolder as err:
        print(f"[worker {cfg.NODE_ID}-{worker}] fatal: {err}", file=sys.stderr, flush=True)
        return EXIT_FATAL
    except Exception as err:  # noqa: BLE001 - see the docstring
        if (fault := config_fault(err)) is not None:
            print(f"[worker {cfg.NODE_ID}-{worker}] error: {fault}", file=sys.stderr, flush=True)
            return EXIT_CONFIG
        cause = classify(err)
        if cause == "config":  # a restart would ask for the same memory again: the node stops
            print(f"[worker {cfg.NODE_ID}-{worker}] fatal: {describe(err)} ({WHOSE[cause]})", file=sys.stderr,
                  flush=True)
            return EXIT_FATAL
        if cause != "environment":
            traceback.print_exc()
        print(f"[worker {cfg.NODE_ID}-{worker}] error: {describe(err)} ({WHOSE[cause]}; the slot and its "
              "checkpoint are kept; the coordinator restarts the worker)", file=sys.stderr, flush=True)
        return EXIT_ENVIRONMENT


def _run_worker(cfg: Config, worker: int, backend: Backend | None) -> int:
    os.environ.setdefault("MUJOCO_GL", "egl")  # headless rendering for EVO.VIDEOS_LAST_N; read at mujoco's import
    backend = backend or load_backend()
    run = RunDir(cfg.OUT_DIR, quarantine=True, search_space_size=cfg.EVO.SEARCH_SPACE_SIZE,
                 genome_limits=backend.genome_limits(cfg.unimal))
    confine_writes(run.root)  # the trainer's and TensorBoard's writes too: no folder of OUT_DIR passed as a link
    if run.init_population_ids() is None:
        print(f"error: {run.root} has no initial population; start evo_single_proc.py", file=sys.stderr)
        return EXIT_FATAL
    lock = hold_worker_lock(run, cfg.NODE_ID, worker)
    beat_every = heartbeat_interval(cfg.EVO.LEASE_SECONDS)
    heartbeat = Heartbeat(lambda: run.workers.beat(cfg.NODE_ID, worker), beat_every).start()
    state = WorkerState(run, cfg.NODE_ID, worker)
    stop = StopSignal(run, state.write)
    results = PublishedResults(run, cfg.EVO)
    step = Step(cfg.EVO, cfg.unimal, TrainingSetup.of(cfg, run), run, backend, results, stop, worker,
                state.log, node=cfg.NODE_ID, rng_seed=cfg.RNG_SEED)
    scheduler = Scheduler(cfg.EVO, cfg.NUM_NODES, run, results, stop, state, step)
    catch_stop_signals(stop.handle_signal)
    try:
        scheduler.run_all()
        return 0
    except Stopped:
        _try_write_state(state, status="stopped")
        return EXIT_STOPPED
    except FatalError as err:
        print(f"[worker {cfg.NODE_ID}-{worker}] fatal: {err}", file=sys.stderr, flush=True)
        _try_write_state(state, status=f"fatal: {err}")
        return EXIT_FATAL
    except Exception as err:
        _try_write_state(state, status=f"stopped by a {classify(err)} failure: {describe(err)}")
        raise
    finally:
        heartbeat.stop()
        os.close(lock)


def _try_write_state(state: WorkerState, **changes: Any) -> None:
    """Records the worker's last status if the filesystem lets it (a full disk may not)."""
    with contextlib.suppress(OSError):
        state.write(**changes)


def main(argv: list[str] | None = None) -> None:
    parser = ArgumentParser(description=__doc__.splitlines()[0])  # a negative override value is a value
    parser.add_argument("--worker", type=int, required=True, help="worker index on this node")
    parser.add_argument("--cfg", type=Path, help="YAML config file")
    parser.add_argument("overrides", nargs="*", help="KEY VALUE pairs")
    args = parser.parse_args(argv)
    # The coordinator's death (SIGKILL included) kills this worker at once, and the guard its children.
    die_with_parent(signal.SIGKILL, int(os.environ.get(COORDINATOR_PID_VARIABLE, os.getppid())))
    guard_group()
    cfg = load_config_or_exit(args.cfg, args.overrides, this_node=True)
    limit_threads(cfg.TORCH_THREADS)  # one worker per core: no BLAS or OpenMP pools fighting
    raise SystemExit(run_worker(cfg, args.worker))


if __name__ == "__main__":
    main()
