"""Env throughput against the physics limit, for every task (FT, VT, MVT and the eight evaluation
tasks) on sampled morphologies.

For each env and each morphology (``random_genome`` with seeds seed..seed+n-1) the same
random actions are played twice in alternating rounds: through ``UnimalEnv.step`` and through
``mujoco.mj_step`` alone on the env's compiled model with the same substeps (the *physics
limit*: the loop writes ``ctrl`` and steps), restarting from the env's recorded start states
where the env's episodes ended. Episodes are timed as blocks of steps, resets apart, in CPU
time of this process (other processes on the machine do not count). Also reported: reset
cost (ms, terrain re-drawn in place) and the cost of compiling the model from XML, which the
original paid at every reset.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import mujoco
import numpy as np

from derl.config import PRESET_DIR, ConfigError, load_config
from derl.envs import UnimalEnv
from derl.envs.unimal_env import FRAME_SKIP
from derl.envs.world import build_xml
from derl.morphology import random_genome, to_mjcf
from derl.progress import progress_bar

EVAL_DIR = PRESET_DIR.parent / "eval"


def env_configs() -> dict[str, Path]:
    """Bench names: the evolution presets (ft, vt, mvt) and every ``configs/eval`` task."""
    names = {name: PRESET_DIR / f"{name}.yml" for name in ("ft", "vt", "mvt")}
    names.update({path.stem: path for path in sorted(EVAL_DIR.glob("*.yml"))})
    return names


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--envs", default="all",
                        help="comma-separated names among ft, vt, mvt and the configs/eval tasks, or all")
    parser.add_argument("--morphologies", type=int, default=5, help="sampled morphologies per env")
    parser.add_argument("--steps", type=int, default=3000, help="env steps per morphology")
    parser.add_argument("--rounds", type=int, default=5, help="alternating env/physics rounds")
    parser.add_argument("--resets", type=int, default=10, help="timed resets per morphology")
    parser.add_argument("--seed", type=int, default=0, help="first morphology seed")


def _episodes(env: UnimalEnv, actions: np.ndarray) -> tuple[float, list[tuple[np.ndarray, np.ndarray, int]]]:
    """CPU seconds spent stepping the env, and each episode's (start qpos, qvel, number of steps).

    Each episode's steps are timed as one block; the reset that follows is not timed.
    """
    episodes, elapsed, i = [], 0.0, 0
    while i < len(actions):
        qpos, qvel, first = env.data.qpos.copy(), env.data.qvel.copy(), i
        done = False
        t0 = time.process_time()
        while not done and i < len(actions):
            _, _, terminated, truncated, _ = env.step(actions[i])
            done = terminated or truncated
            i += 1
        elapsed += time.process_time() - t0
        episodes.append((qpos, qvel, i - first))
        if done:
            env.reset()
    return elapsed, episodes


def _replay(model: mujoco.MjModel, actions: np.ndarray, episodes) -> float:
    """CPU seconds spent writing ctrl and calling ``mj_step`` on the same actions and starts."""
    data = mujoco.MjData(model)
    elapsed, i = 0.0, 0
    for qpos, qvel, length in episodes:
        mujoco.mj_resetData(model, data)
        data.qpos[:], data.qvel[:] = qpos, qvel
        mujoco.mj_forward(model, data)
        ctrl = data.ctrl
        t0 = time.process_time()
        for action in actions[i:i + length]:
            ctrl[:] = action
            mujoco.mj_step(model, data, FRAME_SKIP)
        elapsed += time.process_time() - t0
        i += length
    return elapsed


def _measure(cfg, xml_path: Path, seed: int, args) -> dict:
    env = UnimalEnv(xml_path, cfg, seed=seed)
    actions = np.random.default_rng(seed).uniform(-1, 1, (args.steps, env.model.nu)).astype(np.float32)
    env_time = physics_time = 0.0
    env.reset()
    for chunk in np.array_split(actions, args.rounds):
        elapsed, episodes = _episodes(env, chunk)
        env_time += elapsed
        physics_time += _replay(env.model, chunk, episodes)
    t0 = time.process_time()
    for _ in range(args.resets):
        env.reset()
    reset_ms = (time.process_time() - t0) / args.resets * 1e3
    t0 = time.process_time()
    mujoco.MjModel.from_xml_string(build_xml(xml_path.read_bytes(), cfg))
    compile_ms = (time.process_time() - t0) * 1e3
    env.close()
    return {
        "num_actuators": int(env.model.nu),
        "env_steps_per_sec": round(args.steps / env_time, 1),
        "physics_steps_per_sec": round(args.steps / physics_time, 1),
        "ratio": round(physics_time / env_time, 3),
        "reset_ms": round(reset_ms, 2),
        "compile_ms": round(compile_ms, 2),
    }


def _summary(rows: list[dict]) -> dict:
    keys = ("env_steps_per_sec", "physics_steps_per_sec", "ratio", "reset_ms", "compile_ms")
    return {f"median_{key}": round(statistics.median(row[key] for row in rows), 3) for key in keys}


def run(args: argparse.Namespace) -> dict:
    known = env_configs()
    names = list(known) if args.envs == "all" else [n.strip() for n in args.envs.split(",") if n.strip()]
    unknown = [name for name in names if name not in known]
    if unknown:
        raise SystemExit(f"error: unknown env {unknown[0]!r}; known: {', '.join(known)} (or all)")
    try:
        configs = {name: load_config(known[name]) for name in names}
    except ConfigError as err:
        raise SystemExit(f"error: {err}") from None
    result: dict = {"steps": args.steps, "morphologies": args.morphologies, "frame_skip": FRAME_SKIP}
    with tempfile.TemporaryDirectory() as folder, progress_bar(len(names) * args.morphologies, "bench env",
                                                                  unit="body") as bar:
        for name in names:
            cfg = configs[name]
            rows = []
            for k in range(args.morphologies):
                seed = args.seed + k
                genome = random_genome(cfg, np.random.default_rng(seed), f"bench-{seed}")
                xml_path = Path(folder) / f"{name}-{seed}.xml"
                xml_path.write_text(to_mjcf(genome, cfg))
                measured = _measure(cfg, xml_path, seed, args)
                rows.append({"seed": seed, "num_limbs": genome.num_limbs, **measured})
                bar.update(1)
            result[name] = {**_summary(rows), "per_morphology": rows}
    return result
