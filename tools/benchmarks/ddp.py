"""Data-parallel PPO: env steps/s of 1 vs N ranks, and returns at an equal total env-step budget.

Every run is ``tools/train_ddp.sh --nproc K`` (torchrun, gloo on the CPU; add ``--device cuda``
for one rank per GPU) training the FT unimal env of a seeded random genome, or ``--env-id``,
with the same per-rank settings (``--envs`` x ``--timesteps``).

Throughput: K ranks train ``--iters`` iterations each (K times the env steps of one rank); the
loop rate is the env steps of all ranks over rank 0's collection + update time, the first
iteration (warm-up) excluded. ``--repeats`` alternating runs per K; the best counts (the machine
may be shared), all are listed. ``speedup`` is the N-rank rate over the 1-rank rate: each rank
steps its own envs on its own core, so the ideal is N.

Returns (``--return-steps B``): for each of ``--seeds`` seeds, 1 rank and N ranks each train for
B env steps in total (``PPO.MAX_STATE_ACTION_PAIRS`` is the total over the ranks) and report the
run's return (``metrics.json``'s summary: DERL's fitness, ``derl.ppo.episodes``). With the same
per-rank settings N ranks learn from an N times larger batch, so they make N times fewer updates;
``--return-split`` instead gives each of the N ranks ``--envs / N`` envs and ``PPO.BATCH_SIZE / N``
rows per minibatch: the one-rank batch, minibatches and number of updates (what to use when the aim
is the same learning, faster).
Trailing ``KEY VALUE`` pairs (e.g. ``PPO.LR_SCALING sqrt``) apply to every run.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from benchmarks.cases import FT_GENOME_SEED, ft_xml
from benchmarks.children import run_command
from benchmarks.stats import over_seeds
from derl.arguments import bounded_int
from derl.checked_config import load_config
from derl.fileio.reads import parse_json, read_bytes, read_json
from derl.paths import REPO_ROOT, evo_preset
from derl.ppo.metrics_file import MAX_METRICS_BYTES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ranks", type=bounded_int(1, 1024), default=2, help="N, the ranks compared with one")
    parser.add_argument("--device", default="cpu", help="cpu (one rank per core) or cuda (one rank per GPU)")
    parser.add_argument("--envs", type=bounded_int(1, 65_536), default=32, help="PPO.NUM_ENVS per rank")
    parser.add_argument("--timesteps", type=bounded_int(1, 100_000), default=128, help="PPO.TIMESTEPS")
    parser.add_argument("--iters", type=bounded_int(1, 100_000), default=10,
                        help="iterations per rank of a throughput run")
    parser.add_argument("--repeats", type=bounded_int(1, 1000), default=2,
                        help="alternating throughput runs per rank count")
    parser.add_argument("--return-steps", type=bounded_int(0, 10**10), default=0,
                        help="total env steps of a return run (0: skip)")
    parser.add_argument("--seeds", type=bounded_int(1, 1000), default=3,
                        help="seeds per rank count for the return runs")
    parser.add_argument("--return-split", action="store_true",
                        help="return runs: N ranks share the one-rank batch (--envs / N envs per rank)")
    parser.add_argument("--env-id", help="a Gymnasium env id instead of the FT unimal env")
    parser.add_argument("overrides", nargs="*", metavar="KEY VALUE", help="config overrides for every run")


def _config(args: argparse.Namespace):
    """The config every run starts from (before the per-run keys)."""
    return load_config(None if args.env_id else evo_preset("ft"), args.overrides)


def _train(args: argparse.Namespace, source: list[str], ranks: int, out: Path, overrides: dict) -> dict:
    """One ``tools/train_ddp.sh`` run; returns metrics.json and the metrics.jsonl records."""
    cfg = [] if args.env_id else ["--cfg", str(evo_preset("ft"))]
    keys = {"PPO.NUM_ENVS": args.envs, "PPO.TIMESTEPS": args.timesteps, "TORCH_THREADS": 1,
            "CHECKPOINT_PERIOD": 0, "DEVICE": args.device, **overrides}
    pairs = [str(item) for key, value in keys.items() for item in (key, value)] + args.overrides
    command = [str(REPO_ROOT / "tools" / "train_ddp.sh"), "--nproc", str(ranks), *source, *cfg,
               "--out", str(out), "--quiet", *pairs]
    run_command(command, f"tools/train_ddp.sh --nproc {ranks}", log=out.parent / f"{out.name}.log",
        env=dict(os.environ, PYTHON=sys.executable))
    lines = read_bytes(out / "metrics.jsonl", MAX_METRICS_BYTES).decode(errors="replace").splitlines()
    records = [parse_json(line, f"{out / 'metrics.jsonl'} line {number}") for number, line in enumerate(lines, 1)
               if line]
    return {"final": read_json(out / "metrics.json"), "records": records}


def _throughput(args: argparse.Namespace, source: list[str], folder: Path) -> dict:
    per_iteration = args.envs * args.timesteps
    runs: dict[int, list[dict]] = {1: [], args.ranks: []}
    for repeat in range(args.repeats):
        for ranks in runs:
            budget = args.iters * per_iteration * ranks
            out = folder / f"speed-{ranks}-{repeat}"
            result = _train(args, source, ranks, out, {"PPO.MAX_STATE_ACTION_PAIRS": budget})
            timed = result["records"][1:] or result["records"]
            loop = sum(r["collect_seconds"] + r["update_seconds"] for r in timed)
            runs[ranks].append({
                "loop_steps_per_sec": per_iteration * ranks * len(timed) / loop,
                "steps_per_sec": result["final"]["steps_per_sec"],
                "update_share": sum(r["update_seconds"] for r in timed) / loop,
            })
    report: dict = {}
    for ranks, results in runs.items():
        best = max(results, key=lambda r: r["loop_steps_per_sec"])
        report[f"ranks_{ranks}"] = {
            "loop_steps_per_sec": round(best["loop_steps_per_sec"], 1),
            "all_loop_steps_per_sec": [round(r["loop_steps_per_sec"], 1) for r in results],
            "steps_per_sec": round(best["steps_per_sec"], 1),
            "update_share": round(best["update_share"], 3),
        }
    one, many = report["ranks_1"], report[f"ranks_{args.ranks}"]
    report["speedup"] = round(many["loop_steps_per_sec"] / one["loop_steps_per_sec"], 3)
    report["end_to_end_speedup"] = round(many["steps_per_sec"] / one["steps_per_sec"], 3)
    return report


def _returns(args: argparse.Namespace, source: list[str], folder: Path) -> dict:
    report: dict = {"env_steps": args.return_steps, "split": args.return_split}
    minibatch = _config(args).PPO.BATCH_SIZE
    for ranks in (1, args.ranks):
        share = ranks if args.return_split else 1
        envs, rows = args.envs // share, minibatch // share
        finals = []
        for seed in range(args.seeds):
            overrides = {"PPO.MAX_STATE_ACTION_PAIRS": args.return_steps, "RNG_SEED": seed, "PPO.NUM_ENVS": envs,
                         "PPO.BATCH_SIZE": rows}
            result = _train(args, source, ranks, folder / f"return-{ranks}-{seed}", overrides)
            finals.append(result["final"]["summary"].get("return"))
        report[f"ranks_{ranks}"] = {"num_envs_per_rank": envs, "batch_size_per_rank": rows, **over_seeds(finals)}
    return report


def run(args: argparse.Namespace) -> dict:
    if args.ranks < 2:
        raise SystemExit("error: --ranks must be at least 2")
    if len(args.overrides) % 2:
        raise SystemExit(f"error: overrides come in KEY VALUE pairs, got {' '.join(args.overrides)}")
    if args.return_split and (args.envs % args.ranks or _config(args).PPO.BATCH_SIZE % args.ranks):
        raise SystemExit(f"error: --return-split needs --envs and PPO.BATCH_SIZE divisible by --ranks ({args.ranks})")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        if args.env_id:
            source, env = ["--env-id", args.env_id], args.env_id
        else:
            source, env = ["--xml", str(ft_xml(folder))], f"ft (random_genome seed {FT_GENOME_SEED})"
        results: dict = {"env": env, "ranks": args.ranks, "device": args.device, "num_envs_per_rank": args.envs,
                         "timesteps": args.timesteps, "iters_per_rank": args.iters,
                         "throughput": _throughput(args, source, folder)}
        if args.return_steps > 0:
            results["returns"] = _returns(args, source, folder)
    return results
