"""When does a GPU pay? Env steps/s, update time and the learner's share of an iteration.

For every point of a grid ``NUM_ENVS x TIMESTEPS x BATCH_SIZE`` (and AMP off/on), one training
run in this process on ``--device``: one warm-up iteration (CUDA start-up, first allocations),
then ``--iters`` timed iterations. Reported per point: env steps per second of the loop
(collection + update), the update's seconds per iteration, the learner's share of an iteration
(its utilisation: collection and learning alternate), and the optimiser steps per iteration.
More steps per update (larger ``NUM_ENVS x TIMESTEPS``) and larger minibatches raise the
learner's utilisation at the cost of fewer updates per env step: the trade-off users tune.

The env is the FT unimal env of a seeded random genome (as ``tools/bench.py ppo``), or any
Gymnasium env with ``--env-id``.
"""

from __future__ import annotations

import argparse
import itertools
import tempfile
import time
from pathlib import Path

from benchmarks.cases import FT_GENOME_SEED, ft_xml
from derl.arguments import bounded_int, bounded_ints
from derl.checked_config import load_config
from derl.paths import evo_preset
from derl.ppo.device import resolve_device
from derl.ppo.trainer import PPO
from derl.training.envs import GymEnvFactory, UnimalEnvFactory


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="cpu", help="learner device: cpu, cuda, cuda:N (envs stay on the CPU)")
    parser.add_argument("--envs", type=bounded_ints(1, 65_536), default=[16, 32, 64],
                        help="NUM_ENVS values, comma-separated")
    parser.add_argument("--timesteps", type=bounded_ints(1, 100_000), default=[128, 256], help="TIMESTEPS values")
    parser.add_argument("--minibatch", type=bounded_ints(1, 10**7), default=[512, 2048], help="BATCH_SIZE values")
    parser.add_argument("--amp", choices=("off", "on", "both"), default="off", help="PPO.AMP (bf16, CUDA only)")
    parser.add_argument("--iters", type=bounded_int(1, 100_000), default=3, help="timed iterations per grid point")
    parser.add_argument("--env-id", help="a Gymnasium env id instead of the FT unimal env")


def _point(args: argparse.Namespace, factory, num_envs: int, steps: int, minibatch: int, amp: bool) -> dict:
    overrides = {"PPO.NUM_ENVS": num_envs, "PPO.TIMESTEPS": steps, "PPO.BATCH_SIZE": minibatch,
                 "PPO.MAX_STATE_ACTION_PAIRS": (args.iters + 1) * num_envs * steps, "PPO.AMP": amp,
                 "DEVICE": args.device, "TORCH_THREADS": 1, "PPO.LINEAR_LR_DECAY": False}
    cfg = load_config(None if args.env_id else evo_preset("ft"), overrides)
    ppo = PPO(cfg.trainer, factory, seed=0)
    try:
        ppo.collector.reset(0)
        ppo.iterate()  # warm-up
        records = [ppo.iterate() for _ in range(args.iters)]
    finally:
        ppo.pool.close()
    collect = sum(r["collect_seconds"] for r in records)
    update = sum(r["update_seconds"] for r in records)
    rows = num_envs * steps
    return {
        "num_envs": num_envs, "timesteps": steps, "minibatch": minibatch,
        "amp": ppo.learner.amp,  # False on the CPU whatever was asked
        "steps_per_sec": round(rows * len(records) / (collect + update), 1),
        "update_seconds": round(update / len(records), 4),
        "collect_seconds": round(collect / len(records), 4),
        "learner_share": round(update / (collect + update), 3),
        "optimizer_steps_per_iter": cfg.PPO.EPOCHS * (rows // min(minibatch, rows)),
        "kl_early_stops": int(sum(r["kl_early_stop"] for r in records)),
    }


def run(args: argparse.Namespace) -> dict:
    device = str(resolve_device(args.device))
    amps = {"off": [False], "on": [True], "both": [False, True]}[args.amp]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        if args.env_id:
            factory, env = GymEnvFactory(args.env_id), args.env_id
        else:
            factory = UnimalEnvFactory(load_config(evo_preset("ft")).world, str(ft_xml(Path(folder))))
            env = f"ft (random_genome seed {FT_GENOME_SEED})"
        grid = itertools.product(args.envs, args.timesteps, args.minibatch, amps)
        points = [_point(args, factory, *point) for point in grid]
    return {"device": device, "env": env, "iters": args.iters, "points": points,
            "seconds": round(time.perf_counter() - started, 1)}
