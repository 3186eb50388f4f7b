"""PPO training throughput and returns: derl.ppo against Stable-Baselines3, side by side.

Each trainer runs in a fresh subprocess (one worker, one torch thread), one after the other,
alternating, on the same env with DERL's defaults: 32 envs x 128 steps, 4 epochs, batch 512, Adam
3e-4 decaying linearly, clip 0.2 (policy and value), entropy 0.01, value 0.5, GAE 0.95, gamma 0.99,
grad norm 0.5, observation and reward normalisation, separate [64, 64] tanh actor and critic,
log_std 0, orthogonal init; SB3 uses ``target_kl = 0.2 / 1.5`` for DERL's KL stop at 0.2. SB3
gets the flattened observation (``make_env(flat=True)``: the single env, stepping one ``MjData``)
and a DummyVecEnv of Monitor-wrapped envs.

A case (``--envs``) is a unimal task, by bench name (ft, vt, mvt or a configs/eval task, as
``bench env``) or by config file (``configs/evo/vt.yml``), on the random genome of
``--genome-seed`` drawn under that config (or ``--xml``); any other name is a Gymnasium env id.

Per trainer: env steps per CPU second of the worker, end to end (building the envs, normalisers
and networks included, one-off imports excluded for both; CPU time because the machine is
shared), the same per wall-clock second, ``loop_steps_per_sec`` (collection + updates only), the
collection/update split, and peak RSS of the worker process. Each of ``--repeats`` repeats runs
derl, SB3 and a recording derl run, one after the other. The recording run's trajectories (same
seed, so the same as derl's) are replayed through ``mj_step`` x frame_skip alone
(``physics_steps_per_cpu_sec``) and with the 32 envs in lockstep, as a trainer steps them
(``lockstep_physics_steps_per_cpu_sec``: ``mj_step`` is slower there, the envs' data leave the
caches between their steps). ``vs_physics_alone`` is a trainer's end-to-end rate over the first
(1.0 would mean the learner and the env's Python cost nothing), ``derl_vs_lockstep_physics`` over
the second. The top-level figures take each trainer's least disturbed run (least CPU time) and the
fastest replays; ``paired_medians`` takes the ratios within each repeat, then their median: on a
shared host whose speed drifts between minutes, quote those.

``--return-iters N`` also trains both for N iterations with ``--seeds`` seeds each and reports the
mean return of the last 100 episodes at that equal env-step budget. Needs ``requirements-bench.txt``.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from benchmarks.cases import FT_GENOME_SEED, task_config, unimal_case
from benchmarks.children import run_json
from benchmarks.stats import over_seeds, paired_median
from derl.arguments import any_seed, bounded_int
from derl.progress import progress_bar

# The progress bar of the running benchmark (``run``): each child training counts one (``_spawn``).
_PROGRESS = progress_bar(None, "", enabled=False)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--envs", default="ft,Ant-v5",
                        help="comma-separated cases: unimal tasks (ft, vt, mvt, a configs/eval task name, or a "
                             "task config .yml) and/or Gymnasium env ids")
    parser.add_argument("--xml", type=Path,
                        help="unimal MJCF for the unimal cases (default: a seeded random genome)")
    parser.add_argument("--genome-seed", type=any_seed, default=FT_GENOME_SEED,
                        help="seed of the unimal cases' random genome (random_genome under the case's config)")
    parser.add_argument("--iters", type=bounded_int(1, 100_000), default=10,
                        help="PPO iterations per speed run (4096 steps each)")
    parser.add_argument("--repeats", type=bounded_int(1, 1000), default=2, help="speed runs per trainer, alternating")
    parser.add_argument("--return-iters", type=bounded_int(0, 100_000), default=0,
                        help="iterations per return run (0: skip)")
    parser.add_argument("--seeds", type=bounded_int(1, 1000), default=3, help="seeds per trainer for the return runs")
    parser.add_argument("--profile", action="store_true",
                        help="instead of the SB3 comparison: derl's us per env step per component "
                             "(tools/benchmarks/ppo_profile.py)")
    parser.add_argument("--sim", choices=("mujoco", "warp"), default="mujoco",
                        help="warp: instead of the SB3 comparison, derl's FT training on MuJoCo Warp on --device "
                             "next to derl on MuJoCo C (ft case only)")
    parser.add_argument("--device", default="cpu", help="DEVICE of the --sim warp runs (cuda, or cpu: warp's CPU "
                                                         "device, for correctness only)")
    parser.add_argument("--num-envs", type=bounded_int(1, 65_536), default=32,
                        help="PPO.NUM_ENVS of the --sim warp runs")


def _spawn(spec: dict) -> dict:
    """One training in a child process (``benchmarks.ppo_runs``)."""
    _PROGRESS.set_postfix_str(f"{spec['trainer']}{' physics' if spec.get('record') else ''}")
    result = run_json("benchmarks.ppo_runs", spec, f"bench child {spec['trainer']}")
    _PROGRESS.update(1)
    return result


def _children(args: argparse.Namespace) -> int:
    """Trainings ``run`` starts per case (``_speed``, ``_backends`` or ``_profile``, then ``_returns``)."""
    measured = args.repeats + 2 if args.profile else 2 * args.repeats if args.sim == "warp" else 3 * args.repeats
    return measured + (2 * args.seeds if args.return_iters > 0 else 0)


def _rate(run: dict) -> float:
    return run["env_steps"] / run["cpu_seconds"]


def _summarise(runs: list[dict], physics_rate: float) -> dict:
    """The least disturbed run (the machine is shared) and the spread of all runs.

    ``steps_per_cpu_sec`` divides by the worker's CPU time, which other processes on the machine
    disturb much less than the wall clock; the wall-clock figures are given next to it.
    """
    best = min(runs, key=lambda r: r["cpu_seconds"])
    busy = best["collect_seconds"] + best["update_seconds"]
    return {
        "steps_per_cpu_sec": round(_rate(best), 1),
        "all_steps_per_cpu_sec": [round(_rate(r), 1) for r in runs],
        "steps_per_sec": round(best["env_steps"] / best["wall_time"], 1),
        "loop_steps_per_sec": round(best["env_steps"] / busy, 1),
        "all_steps_per_sec": [round(r["env_steps"] / r["wall_time"], 1) for r in runs],
        "setup_seconds": round(best["setup_seconds"], 3),
        "collect_share": round(best["collect_seconds"] / busy, 3),
        "update_share": round(best["update_seconds"] / busy, 3),
        "peak_rss_mb": round(max(r["peak_rss_mb"] for r in runs), 1),
        "vs_physics_alone": round(_rate(best) / physics_rate, 3),
    }


def paired_medians(derl: list[float], sb3: list[float], physics: list[float], lockstep: list[float]) -> dict:
    """Medians over the repeats of ratios taken within each repeat (rates in env steps per CPU-second).

    One repeat runs derl, SB3 and the physics replay one after the other, so the ratios within it
    share the host's speed of that minute; the best-of figures do not (a shared host drifts by
    tens of percent between minutes), and these medians are the figures to quote.
    """
    return {
        "speedup_derl_over_sb3": paired_median(derl, sb3),
        "derl_vs_physics_alone": paired_median(derl, physics),
        "derl_vs_lockstep_physics": paired_median(derl, lockstep),
        "sb3_vs_physics_alone": paired_median(sb3, physics),
    }


def _speed(case: dict, args: argparse.Namespace) -> dict:
    runs: dict[str, list[dict]] = {"derl": [], "sb3": [], "physics": []}
    for _ in range(args.repeats):
        runs["derl"].append(_spawn({"trainer": "ours", "case": case, "iters": args.iters, "seed": 0}))
        runs["sb3"].append(_spawn({"trainer": "sb3", "case": case, "iters": args.iters, "seed": 0}))
        runs["physics"].append(_spawn({"trainer": "ours", "case": case, "iters": args.iters, "seed": 0,
                                       "record": True}))
    physics_rates = [r["physics_steps"] / r["physics_seconds"] for r in runs["physics"]]
    lockstep_rates = [r["physics_steps"] / r["lockstep_physics_seconds"] for r in runs["physics"]]
    physics_rate, lockstep_rate = max(physics_rates), max(lockstep_rates)
    report = {name: _summarise(runs[name], physics_rate) for name in ("derl", "sb3")}
    report["physics_steps_per_cpu_sec"] = round(physics_rate, 1)
    report["lockstep_physics_steps_per_cpu_sec"] = round(lockstep_rate, 1)
    report["derl_vs_lockstep_physics"] = round(report["derl"]["steps_per_cpu_sec"] / lockstep_rate, 3)
    derl, sb3 = report["derl"], report["sb3"]
    report["speedup_derl_over_sb3"] = round(derl["steps_per_cpu_sec"] / sb3["steps_per_cpu_sec"], 3)
    report["wall_speedup_derl_over_sb3"] = round(derl["steps_per_sec"] / sb3["steps_per_sec"], 3)
    report["loop_speedup_derl_over_sb3"] = round(derl["loop_steps_per_sec"] / sb3["loop_steps_per_sec"], 3)
    report["paired_medians"] = paired_medians([_rate(r) for r in runs["derl"]], [_rate(r) for r in runs["sb3"]],
                                              physics_rates, lockstep_rates)
    return report


def _backends(case: dict, args: argparse.Namespace) -> dict:
    """derl on MuJoCo Warp (``--device``, ``--num-envs``) and on MuJoCo C (32 envs, the CPU preset),
    alternating, ``--repeats`` each: env steps per wall-clock second (a GPU's work is not CPU time)."""
    warp = {**case, "sim": {"SIM.BACKEND": "warp", "DEVICE": args.device, "PPO.NUM_ENVS": args.num_envs}}
    runs: dict[str, list[dict]] = {"warp": [], "mujoco": []}
    for _ in range(args.repeats):
        runs["warp"].append(_spawn({"trainer": "ours", "case": warp, "iters": args.iters, "seed": 0}))
        runs["mujoco"].append(_spawn({"trainer": "ours", "case": case, "iters": args.iters, "seed": 0}))
    report = {}
    for name, measured in runs.items():
        best = max(measured, key=lambda r: r["env_steps"] / r["wall_time"])
        busy = best["collect_seconds"] + best["update_seconds"]
        report[name] = {"env_steps": best["env_steps"],
                        "steps_per_sec": round(best["env_steps"] / best["wall_time"], 1),
                        "loop_steps_per_sec": round(best["env_steps"] / busy, 1),
                        "setup_seconds": round(best["setup_seconds"], 3),
                        "collect_share": round(best["collect_seconds"] / busy, 3)}
    report["warp"].update(device=args.device, num_envs=args.num_envs)
    warp_rate, mujoco_rate = report["warp"]["steps_per_sec"], report["mujoco"]["steps_per_sec"]
    report["wall_speedup_warp_over_mujoco"] = round(warp_rate / mujoco_rate, 3)
    return report


def _profile(case: dict, args: argparse.Namespace) -> dict:
    """The instrumented run, the least disturbed of ``--repeats`` plain runs, the physics replay."""
    from benchmarks.ppo_profile import summarise  # lazy: it imports derl's learner (torch); the parent spawns

    spec = {"case": case, "iters": args.iters, "seed": 0}
    profiled = _spawn({"trainer": "profile", **spec})
    plain = min((_spawn({"trainer": "ours", **spec}) for _ in range(args.repeats)), key=lambda r: r["cpu_seconds"])
    physics = _spawn({"trainer": "ours", "record": True, **spec})
    return summarise(profiled, plain, physics["physics_steps"] / physics["physics_seconds"],
                     physics["physics_steps"] / physics["lockstep_physics_seconds"])


def _returns(case: dict, args: argparse.Namespace) -> dict:
    report = {"env_steps": args.return_iters * 32 * 128}
    for trainer, name in (("ours", "derl"), ("sb3", "sb3")):
        specs = [{"trainer": trainer, "case": case, "iters": args.return_iters, "seed": seed, "returns": True}
                 for seed in range(args.seeds)]
        report[name] = over_seeds([_spawn(spec)["final_return"] for spec in specs])
    return report


def run(args: argparse.Namespace) -> dict:
    global _PROGRESS
    results: dict = {"iters": args.iters, "env_steps_per_run": args.iters * 32 * 128, "cases": {}}
    cases = args.envs.split(",")
    configs = {name: task_config(name) for name in cases}  # every name checked before the first run
    with tempfile.TemporaryDirectory() as folder, progress_bar(len(cases) * _children(args), "bench ppo",
                                                                  unit="run") as _PROGRESS:
        for name in cases:
            config = configs[name]
            case = ({"kind": "gym", "env_id": name} if config is None
                    else unimal_case(config, args.xml, args.genome_seed, Path(folder)))
            measure = _profile if args.profile else _backends if args.sim == "warp" else _speed
            if args.sim == "warp" and case["kind"] != "unimal":
                raise SystemExit(f"error: bench ppo --sim warp trains unimal cases only, not {name}")
            entry = {"case": {k: v for k, v in case.items() if k != "xml" or args.xml}, **measure(case, args)}
            if args.return_iters > 0:
                entry["returns"] = _returns(case, args)
            results["cases"][name] = entry
    return results


