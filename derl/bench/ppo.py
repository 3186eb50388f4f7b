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
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import gymnasium as gym
import mujoco
import numpy as np

from derl.bench.env import env_configs
from derl.checked_config import load_config
from derl.config import ConfigError
from derl.morphology import random_genome, to_mjcf
from derl.paths import REPO_ROOT
from derl.progress import progress_bar
from derl.threads import limit_threads

# The progress bar of the running benchmark (``run``): each child training counts one (``_spawn``).
_PROGRESS = progress_bar(None, "", enabled=False)
FT_GENOME_SEED = 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--envs", default="ft,Ant-v5",
                        help="comma-separated cases: unimal tasks (ft, vt, mvt, a configs/eval task name, or a "
                             "task config .yml) and/or Gymnasium env ids")
    parser.add_argument("--xml", type=Path,
                        help="unimal MJCF for the unimal cases (default: a seeded random genome)")
    parser.add_argument("--genome-seed", type=int, default=FT_GENOME_SEED,
                        help="seed of the unimal cases' random genome (random_genome under the case's config)")
    parser.add_argument("--iters", type=int, default=10,
                        help="PPO iterations per speed run (4096 steps each)")
    parser.add_argument("--repeats", type=int, default=2, help="speed runs per trainer, alternating")
    parser.add_argument("--return-iters", type=int, default=0, help="iterations per return run (0: skip)")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per trainer for the return runs")
    parser.add_argument("--profile", action="store_true",
                        help="instead of the SB3 comparison: derl's us per env step per component "
                             "(derl/bench/ppo_profile.py)")
    parser.add_argument("--sim", choices=("mujoco", "warp"), default="mujoco",
                        help="warp: instead of the SB3 comparison, derl's FT training on MuJoCo Warp on --device "
                             "next to derl on MuJoCo C (ft case only)")
    parser.add_argument("--device", default="cpu", help="DEVICE of the --sim warp runs (cuda, or cpu: warp's CPU "
                                                         "device, for correctness only)")
    parser.add_argument("--num-envs", type=int, default=32, help="PPO.NUM_ENVS of the --sim warp runs")


# ----------------------------------------------------------------------------- child process
def speed_overrides(iters: int) -> dict:
    """One worker with DERL's PPO shape: 32 envs x 128 steps for ``iters`` iterations, one torch thread."""
    return {"PPO.NUM_ENVS": 32, "PPO.TIMESTEPS": 128, "PPO.MAX_STATE_ACTION_PAIRS": iters * 32 * 128,
            "TORCH_THREADS": 1, "DEVICE": "cpu"}


def _config(case: dict, iters: int):
    """The case's task config for unimals, the defaults for Gymnasium envs; DERL's PPO keys (a case's
    ``sim`` may put them on MuJoCo Warp: its ``SIM.BACKEND``, ``DEVICE`` and ``PPO.NUM_ENVS``)."""
    overrides = speed_overrides(iters)
    if "sim" in case:
        num_envs = case["sim"]["PPO.NUM_ENVS"]
        overrides.update(case["sim"], **{"PPO.MAX_STATE_ACTION_PAIRS": iters * num_envs * 128})
    return load_config(case["config"] if case["kind"] == "unimal" else None, overrides)


def _env_factory(case: dict, cfg, flat: bool):
    """``make(i)`` builds one env (SB3 steps them in its ``DummyVecEnv``)."""
    if case["kind"] == "unimal":
        from derl.envs import make_env  # lazy: each trainer's child imports only what it runs (peak RSS)

        return lambda _i: make_env(cfg.world, case["xml"], flat=flat)
    return lambda _i: gym.make(case["env_id"])


def _vector_env_factory(case: dict, cfg):
    """What derl trains on: ``factory(num_envs, first_index)``, the batched Unimal env or Gymnasium's
    ``SyncVectorEnv`` of an env id."""
    from derl.training.envs import GymEnvFactory, UnimalEnvFactory  # lazy: as in _env_factory

    return UnimalEnvFactory(cfg, case["xml"]) if case["kind"] == "unimal" else GymEnvFactory(case["env_id"])


class _Replay:
    """One env's recorded trajectory: its model, substeps per step and a log of full physics states
    (after each reset, warm start included) and actions. Replaying them through ``mj_step`` from the
    same states reproduces the simulated trajectory exactly, without the env's Python or the learner (a
    terrain redrawn per episode aside: every episode replays on its env's last terrain, drawn whole, as
    keeping each episode's 4 MB map would take GBs. Against each episode replayed on its own terrain and
    props (300 random-action steps of 32 envs, 2026-11-26): VT's physics costs the same within 2.5%, MVT's
    8-12% less, so MVT's ``vs_physics_alone`` reads about 10% low)."""

    SIGNATURE = mujoco.mjtState.mjSTATE_INTEGRATION

    def __init__(self, model: mujoco.MjModel, frame_skip: int):
        self.model, self.frame_skip, self.log = model, frame_skip, []


class _StateRecorder(gym.vector.VectorWrapper):
    """Records every env's trajectory of a ``UnimalVectorEnv`` (``replays``, one ``_Replay`` per env)."""

    def __init__(self, env):
        super().__init__(env)
        sim = env.unwrapped.sim
        sim.arena.draw_whole()  # each replay's model holds its env's last terrain whole, not the tiles it walked
        self._physics = sim.physics
        self.replays = [_Replay(model, round(sim.dt / model.opt.timestep)) for model in sim.models]

    def _record_states(self, envs) -> None:
        for env in envs:
            self.replays[env].log.append(self._physics.state(env))

    def reset(self, **kwargs):
        result = self.env.reset(**kwargs)
        self._record_states(range(self.num_envs))
        return result

    def step(self, actions):
        for replay, action in zip(self.replays, actions, strict=True):
            replay.log.append(np.array(action, np.float64))
        result = self.env.step(actions)
        self._record_states(np.flatnonzero(result[2] | result[3]).tolist())
        return result


class _EpisodeReturns(gym.vector.VectorWrapper):
    """Appends the raw return of every finished episode to ``returns``, as SB3's ``Monitor`` records it.

    derl's own ``summary["return"]`` is DERL's fitness (``derl.ppo.episodes``: the last 409,600
    env steps of the curve): over a short run that averages the whole curve, so the
    return comparison takes the last 100 episodes of both trainers instead.
    """

    def __init__(self, env, returns: list):
        super().__init__(env)
        self.returns = returns
        self._totals = np.zeros(env.num_envs)

    def reset(self, **kwargs):
        self._totals[:] = 0.0
        return self.env.reset(**kwargs)

    def step(self, actions):
        obs, rewards, terminated, truncated, infos = self.env.step(actions)
        self._totals += rewards
        ended = terminated | truncated
        self.returns.extend(self._totals[ended].tolist())
        self._totals[ended] = 0.0
        return obs, rewards, terminated, truncated, infos


def _physics_seconds(replays: list[_Replay]) -> tuple[float, int]:
    """CPU seconds ``mj_step`` x frame_skip takes to replay the recorded episodes, one env at a time."""
    total, steps = 0.0, 0
    for replay in replays:
        model = replay.model
        data = mujoco.MjData(model)
        for entry in replay.log:
            if entry.shape[0] != model.nu:
                mujoco.mj_setState(model, data, entry, replay.SIGNATURE)
                continue
            data.ctrl[:] = entry
            started = time.process_time()
            mujoco.mj_step(model, data, replay.frame_skip)
            total += time.process_time() - started
            steps += 1
    return total, steps


def _lockstep_physics_seconds(replays: list[_Replay]) -> float:
    """The same replay with the envs in lockstep, one step of each in turn, one ``MjData`` per env.

    Each env's state then leaves the CPU caches between two of its steps (32 envs' MuJoCo data
    and models do not fit in L2), which costs ``mj_step`` itself time: this is the physics limit
    of one env object per simulation, ``_physics_seconds`` that of one env stepped alone.
    """
    envs = [(replay, mujoco.MjData(replay.model), iter(replay.log)) for replay in replays]
    total = 0.0
    while envs:
        stepped = []
        for env in envs:
            replay, data, entries = env
            for entry in entries:
                if entry.shape[0] != replay.model.nu:
                    mujoco.mj_setState(replay.model, data, entry, replay.SIGNATURE)
                    continue
                data.ctrl[:] = entry
                started = time.process_time()
                mujoco.mj_step(replay.model, data, replay.frame_skip)
                total += time.process_time() - started
                stepped.append(env)
                break
        envs = stepped
    return total


def _run_ours(case: dict, iters: int, seed: int, record: bool, with_returns: bool) -> dict:
    """One derl training; ``with_returns`` adds the episode-return wrapper (return runs only: speed
    runs time derl as a worker runs it), ``record`` the physics replay after it."""
    from derl.ppo import OnIteration, train  # lazy: the SB3 child never imports derl's learner

    cfg = _config(case, iters)
    base = _vector_env_factory(case, cfg)
    recorders: list[_StateRecorder] = []
    returns: list[float] = []

    def make(num_envs: int, first_index: int = 0, device=None):
        env = base(num_envs, first_index, device)
        if record:
            recorders.append(_StateRecorder(env))
            env = recorders[-1]
        return _EpisodeReturns(env, returns) if with_returns else env

    records: list[dict] = []
    cpu_started = time.process_time()
    result = train(cfg.trainer, make if record or with_returns else base, seed=seed,
                   callbacks=[OnIteration(records.append)])
    cpu = time.process_time() - cpu_started
    collect = sum(r["collect_seconds"] for r in records)
    update = sum(r["update_seconds"] for r in records)
    out = {
        "env_steps": result.env_steps,
        "wall_time": result.wall_time,
        "cpu_seconds": cpu,
        "setup_seconds": result.wall_time - collect - update,
        "collect_seconds": collect,
        "update_seconds": update,
        "final_return": float(np.mean(returns[-100:])) if returns else None,
    }
    if record:
        replays = [replay for recorder in recorders for replay in recorder.replays]
        out["physics_seconds"], out["physics_steps"] = _physics_seconds(replays)
        out["lockstep_physics_seconds"] = _lockstep_physics_seconds(replays)
    return out


def _run_sb3(case: dict, iters: int, seed: int) -> dict:
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    limit_threads(1)  # torch is loaded now (derl's trainer does this itself)
    torch.optim.Adam([torch.zeros(1, requires_grad=True)])  # its one-off import is not timed
    cfg = _config(case, iters)
    make = _env_factory(case, cfg, flat=True)
    started, cpu_started = time.perf_counter(), time.process_time()
    venv = DummyVecEnv([lambda i=i: Monitor(make(i)) for i in range(32)])
    venv.seed(seed)
    venv = VecNormalize(venv, norm_obs=True, norm_reward=True, clip_obs=10.0, clip_reward=10.0,
                        gamma=0.99, epsilon=1e-8)

    class Split(BaseCallback):
        def __init__(self):
            super().__init__()
            self.collect = 0.0

        def _on_rollout_start(self):
            self._started = time.perf_counter()

        def _on_rollout_end(self):
            self.collect += time.perf_counter() - self._started

        def _on_step(self):
            return True

    model = PPO(
        "MlpPolicy", venv, learning_rate=lambda progress: 3e-4 * progress, n_steps=128, batch_size=512,
        n_epochs=4, gamma=0.99, gae_lambda=0.95, clip_range=0.2, clip_range_vf=0.2, ent_coef=0.01,
        vf_coef=0.5, max_grad_norm=0.5, target_kl=0.2 / 1.5, seed=seed, device="cpu",
        policy_kwargs={"net_arch": {"pi": [64, 64], "vf": [64, 64]}, "activation_fn": torch.nn.Tanh,
                       "log_std_init": 0.0, "ortho_init": True},
    )
    split = Split()
    learn_started = time.perf_counter()
    model.learn(total_timesteps=iters * 32 * 128, callback=split)
    finished, cpu = time.perf_counter(), time.process_time() - cpu_started
    returns = [info["r"] for info in model.ep_info_buffer]
    return {
        "env_steps": int(model.num_timesteps),
        "wall_time": finished - started,
        "cpu_seconds": cpu,
        "setup_seconds": learn_started - started,
        "collect_seconds": split.collect,
        "update_seconds": finished - learn_started - split.collect,
        "final_return": float(np.mean(returns)) if returns else None,
    }


def _run_profiled(case: dict, iters: int, seed: int) -> dict:
    from derl.bench.ppo_profile import profile_run  # lazy: only the profiled child imports the profiler

    cfg = _config(case, iters)
    return profile_run(cfg, _vector_env_factory(case, cfg), seed)


def _child(spec: dict) -> dict:
    if spec["trainer"] == "ours":
        out = _run_ours(spec["case"], spec["iters"], spec["seed"], spec.get("record", False),
                        spec.get("returns", False))
    elif spec["trainer"] == "profile":
        out = _run_profiled(spec["case"], spec["iters"], spec["seed"])
    else:
        out = _run_sb3(spec["case"], spec["iters"], spec["seed"])
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


# ----------------------------------------------------------------------------- parent
def _spawn(spec: dict) -> dict:
    _PROGRESS.set_postfix_str(f"{spec['trainer']}{' physics' if spec.get('record') else ''}")
    proc = subprocess.run(
        [sys.executable, "-m", "derl.bench.ppo", json.dumps(spec)],
        cwd=REPO_ROOT, capture_output=True, text=True, check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"bench child {spec['trainer']} failed:\n{proc.stderr[-3000:]}")
    _PROGRESS.update(1)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _children(args: argparse.Namespace) -> int:
    """Trainings ``run`` starts per case (``_speed``, ``_backends`` or ``_profile``, then ``_returns``)."""
    measured = args.repeats + 2 if args.profile else 2 * args.repeats if args.sim == "warp" else 3 * args.repeats
    return measured + (2 * args.seeds if args.return_iters > 0 else 0)


def task_config(name: str) -> Path | None:
    """The config file of a unimal case ``name`` (a bench env name or a .yml file), None for a Gymnasium id."""
    known = env_configs()
    if name in known:
        return known[name]
    if name.endswith((".yml", ".yaml")):
        path = Path(name)
        if not path.is_file():
            raise SystemExit(f"error: bench ppo: task config {name} not found")
        return path.resolve()
    return None


def unimal_case(config: Path, xml: Path | None, genome_seed: int, folder: Path) -> dict:
    """The task of ``config`` on the unimal ``xml``, or on the random genome of ``genome_seed`` under that
    config (its MJCF written to ``folder``)."""
    case = {"kind": "unimal", "config": str(config)}
    if xml is not None:
        return {**case, "xml": str(xml.resolve()), "genome": None}
    try:
        cfg = load_config(config)
    except ConfigError as err:
        raise SystemExit(f"error: {err}") from None
    genome = random_genome(cfg.unimal, np.random.default_rng(genome_seed), f"bench-{genome_seed}")
    path = folder / f"{config.stem}-{genome.id}.xml"
    path.write_text(to_mjcf(genome, cfg.unimal))
    return {**case, "xml": str(path), "genome": f"random_genome seed {genome_seed}", "num_limbs": genome.num_limbs}


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
    def median(values) -> float:
        return round(float(np.median(list(values))), 3)

    return {
        "speedup_derl_over_sb3": median(d / s for d, s in zip(derl, sb3, strict=True)),
        "derl_vs_physics_alone": median(d / p for d, p in zip(derl, physics, strict=True)),
        "derl_vs_lockstep_physics": median(d / p for d, p in zip(derl, lockstep, strict=True)),
        "sb3_vs_physics_alone": median(s / p for s, p in zip(sb3, physics, strict=True)),
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
    from derl.bench.ppo_profile import summarise  # lazy: it imports derl's learner (torch); the parent spawns

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
        finals = [_spawn(spec)["final_return"] for spec in specs]
        report[name] = {"final_returns": finals, "mean": float(np.mean(finals)), "std": float(np.std(finals))}
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


if __name__ == "__main__":
    limit_threads(1)  # each trainer measured on one core, its BLAS included
    print(json.dumps(_child(json.loads(sys.argv[1]))))
