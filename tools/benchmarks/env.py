"""Batched env throughput against the physics alone, for every task (FT, VT, MVT and the eight
evaluation tasks) on sampled morphologies.

For each env and each morphology (``random_genome`` with seeds seed..seed+n-1), a
``UnimalVectorEnv`` of ``--num-envs`` simulations plays random actions (autoresets included), and
each step's actions are played beside it on the same models and states by
``mujoco.batch.Batch.step`` alone (one call writes ``ctrl`` and steps, no observation, reward or
reset: *batch physics*) and by a bare loop of ``mujoco.mj_step`` over one ``MjData`` per env (*loop
physics*, what one env object per simulation pays at least). Where the env reset some simulations,
both copies take the env's new states before the next step, untimed. The three are timed step by
step, side by side, in CPU time of this process; ``--threads`` steps the env and batch physics on
more threads (``VECENV.THREADS``), where wall time counts: ``wall_env_steps_per_sec``. Also reported:
reset cost per env (ms, terrain re-drawn in place) and the cost of compiling the model from XML.

``--single`` measures the single Gymnasium env instead (``gym.make("Unimal-v0")``, what users plug
into other RL libraries): it plays ``--steps`` random actions, resetting where an episode ends
(resets timed with the env), and after each episode replays that episode's actions from its start
state through ``mujoco.mj_step`` x FRAME_SKIP alone on the same model (*physics*: the same
trajectory, as the physics is deterministic). Both in CPU time of this process, paired episode by
episode; ``ratio`` is physics time over env time (1.0: the env's Python costs nothing). Beside it,
``floor_ratio``: the same episodes through the least a Python env can be (``_FloorEnv``, made by
``gym.make`` with the same wrappers: ``ctrl``, the physics and ``[qpos, qvel]`` out, nothing else),
the ceiling of ``ratio`` for any env written in Python on that body.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import gymnasium as gym
import mujoco
import mujoco.batch
import numpy as np

from benchmarks.cases import env_configs, morphology_seeds, seeded_body
from benchmarks.stats import median
from derl.arguments import any_seed, bounded_int
from derl.checked_config import load_config
from derl.config import ConfigError
from derl.envs import ENV_ID, UnimalVectorEnv
from derl.envs.batch import FRAME_SKIP
from derl.envs.config import WorldCfg
from derl.envs.physics import MujocoPhysics
from derl.envs.world import build_xml
from derl.progress import progress_bar
from derl.threads import limit_threads

_SIGNATURE = mujoco.mjtState.mjSTATE_INTEGRATION  # a state that mj_step continues from exactly


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--envs", default="all",
                        help="comma-separated names among ft, vt, mvt and the configs/eval tasks, or all")
    parser.add_argument("--morphologies", type=bounded_int(1, 100_000), default=3, help="sampled morphologies per env")
    parser.add_argument("--steps", type=bounded_int(1, 10**7), default=300,
                        help="lockstep steps of all envs per morphology")
    parser.add_argument("--num-envs", type=bounded_int(1, 65_536), default=32,
                        help="simulations in the batch (PPO.NUM_ENVS)")
    parser.add_argument("--threads", type=bounded_int(1, 1024), default=1,
                        help="threads that step them (VECENV.THREADS)")
    parser.add_argument("--resets", type=bounded_int(0, 10_000), default=3,
                        help="timed resets of every env per morphology")
    parser.add_argument("--seed", type=any_seed, default=0, help="first morphology seed")
    parser.add_argument("--seeds", help="comma-separated morphology seeds instead of --seed and --morphologies")
    parser.add_argument("--xml", help="comma-separated unimal MJCF files instead of sampled morphologies (e.g. "
                                      "tools/morphology.py sample output); the actions' seeds count from --seed")
    parser.add_argument("--bank-size", type=bounded_int(0, 100_000), default=0,
                        help="TERRAIN.BANK_SIZE: 0 (the default) draws a new terrain per episode, as DERL; K > 0 "
                             "picks VT's, MVT's and escape_bowl's terrain from K drawn at build")
    parser.add_argument("--single", action="store_true",
                        help="the single Gymnasium env (gym.make) against mj_step alone, instead of the batch")


class _Physics:
    """The env's simulations again, stepped by ``Batch.step`` alone and by an ``mj_step`` loop."""

    def __init__(self, env: UnimalVectorEnv, threads: int):
        sim = env.sim
        self.models = sim.models
        self.batch = mujoco.batch.Batch(sim.model, env.num_envs, nthread=threads)
        if not sim.static:
            self.batch.set_models(sim.models)
        self.ctrl = self.batch.bind("ctrl")
        self.datas = [mujoco.MjData(sim.model) for _ in range(env.num_envs)]
        self._source = sim.physics

    def copy_states(self, envs: np.ndarray) -> None:
        """The env's current states of ``envs`` (their models set again, or their terrain bank entries
        copied: terrain may have changed)."""
        if self.batch.models is not None:
            self.batch.set_models(self.models)
        if isinstance(self._source, MujocoPhysics):  # a batch of one writes its rows into its own model
            entries = self._source.batch.expanded("geom_dataid")
            if entries is not None:
                self.batch.expand("geom_dataid")[envs] = entries[envs]
        for env in envs.tolist():
            state = self._source.state(env)
            self.batch.state[env] = state
            mujoco.mj_setState(self.models[env], self.datas[env], state, _SIGNATURE)

    def batch_step(self, actions: np.ndarray) -> float:
        t0 = time.process_time()
        self.ctrl[:] = actions
        self.batch.step(nstep=FRAME_SKIP)
        return time.process_time() - t0

    def loop_step(self, actions: np.ndarray) -> float:
        t0 = time.process_time()
        for model, data, action in zip(self.models, self.datas, actions, strict=True):
            data.ctrl[:] = action
            mujoco.mj_step(model, data, FRAME_SKIP)
        return time.process_time() - t0


def _measure(world: WorldCfg, xml_path: Path, seed: int, args) -> dict:
    env = UnimalVectorEnv(xml_path, world, args.num_envs)
    n = env.num_envs
    actions = np.random.default_rng(seed).uniform(-1, 1, (args.steps, *env.action_space.shape)).astype(np.float32)
    env.reset(seed=seed)
    physics = _Physics(env, args.threads)
    everyone = np.arange(n)
    physics.copy_states(everyone)
    env_time = batch_time = loop_time = wall_time = 0.0
    for step_actions in actions:
        batch_time += physics.batch_step(step_actions)
        loop_time += physics.loop_step(step_actions)
        t0, w0 = time.process_time(), time.perf_counter()
        _, _, terminated, truncated, _ = env.step(step_actions)
        env_time += time.process_time() - t0
        wall_time += time.perf_counter() - w0
        ended = np.flatnonzero(terminated | truncated)
        if len(ended):
            physics.copy_states(ended)
    t0 = time.process_time()
    for _ in range(args.resets):
        env.reset()
    reset_ms = (time.process_time() - t0) / (args.resets * n) * 1e3
    t0 = time.process_time()
    mujoco.MjModel.from_xml_string(build_xml(xml_path.read_bytes(), world))
    compile_ms = (time.process_time() - t0) * 1e3
    steps = args.steps * n
    return {
        "num_actuators": int(env.sim.model.nu),
        "env_steps_per_sec": round(steps / env_time, 1),
        "wall_env_steps_per_sec": round(steps / wall_time, 1),
        "batch_physics_steps_per_sec": round(steps / batch_time, 1),
        "loop_physics_steps_per_sec": round(steps / loop_time, 1),
        "ratio": round(batch_time / env_time, 3),
        "ratio_to_loop": round(loop_time / env_time, 3),
        "reset_ms": round(reset_ms, 3),
        "compile_ms": round(compile_ms, 2),
    }


class _FloorEnv(gym.Env):
    """A Gymnasium env with nothing but the physics: a step writes ``ctrl``, runs ``mj_step`` x FRAME_SKIP
    and returns ``[qpos, qvel]``, reward 0 and no flags; a reset loads ``options["state"]`` (mjSTATE_INTEGRATION)
    after ``mj_resetData`` and runs ``mj_forward``, as any env's reset does after its draws. What it costs
    on top of the physics is the least any env written in Python pays (``floor_ratio``)."""

    def __init__(self, model: mujoco.MjModel):
        self.model, self.data = model, mujoco.MjData(model)
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (model.nq + model.nv,), np.float64)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (model.nu,), np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        mujoco.mj_resetData(self.model, self.data)
        mujoco.mj_setState(self.model, self.data, options["state"], _SIGNATURE)
        mujoco.mj_forward(self.model, self.data)
        return np.concatenate([self.data.qpos, self.data.qvel]), {}

    def step(self, action) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.data.ctrl[:] = action
        mujoco.mj_step(self.model, self.data, FRAME_SKIP)
        return np.concatenate([self.data.qpos, self.data.qvel]), 0.0, False, False, {}


def _floor_seconds(model: mujoco.MjModel, episodes: list[tuple[np.ndarray, int, int]], actions: np.ndarray) -> float:
    """CPU seconds ``_FloorEnv`` (through ``gym.make``'s wrappers) takes to play ``episodes`` (start state,
    first and end step of ``actions``): the resets after the first timed, as the env's are."""
    env = gym.make(gym.envs.registration.EnvSpec("derl-floor", entry_point=_FloorEnv), model=model)
    seconds = 0.0
    for k, (state, first, end) in enumerate(episodes):
        t0 = time.process_time()
        env.reset(options={"state": state})
        if k:
            seconds += time.process_time() - t0
        for action in actions[first:end]:
            t0 = time.process_time()
            env.step(action)
            seconds += time.process_time() - t0
    return seconds


def _measure_single(world: WorldCfg, xml_path: Path, seed: int, args) -> dict:
    """The single env's steps and resets against ``mj_step`` alone, paired episode by episode."""
    env = gym.make(ENV_ID, xml_path=xml_path, world=world, seed=seed)
    model = env.unwrapped.model
    data = mujoco.MjData(model)
    state = np.empty(mujoco.mj_stateSize(model, _SIGNATURE))
    actions = np.random.default_rng(seed).uniform(-1, 1, (args.steps, *env.action_space.shape)).astype(np.float32)
    env.reset()
    env_time = physics_time = 0.0
    episodes: list[tuple[np.ndarray, int, int]] = []  # (start state, first step, end step)
    first = 0
    for step in range(args.steps):
        if step == first:  # the episode's start state, untimed
            mujoco.mj_getState(model, env.unwrapped.data, state, _SIGNATURE)
        t0 = time.process_time()
        _, _, terminated, truncated, _ = env.step(actions[step])
        env_time += time.process_time() - t0
        ended = terminated or truncated
        if ended or step == args.steps - 1:  # before the next episode's draw changes the model: replay this one
            mujoco.mj_setState(model, data, state, _SIGNATURE)
            t0 = time.process_time()
            for action in actions[first:step + 1]:
                data.ctrl[:] = action
                mujoco.mj_step(model, data, FRAME_SKIP)
            physics_time += time.process_time() - t0
            episodes.append((state.copy(), first, step + 1))
            first = step + 1
        if ended:
            t0 = time.process_time()
            env.reset()
            env_time += time.process_time() - t0
    env.close()
    floor_time = _floor_seconds(model, episodes, actions)
    return {
        "num_actuators": int(model.nu),
        "episodes": len(episodes),
        "env_steps_per_sec": round(args.steps / env_time, 1),
        "physics_steps_per_sec": round(args.steps / physics_time, 1),
        "ratio": round(physics_time / env_time, 3),
        "floor_ratio": round(physics_time / floor_time, 3),
    }


def _summary(rows: list[dict]) -> dict:
    keys = [key for key in ("env_steps_per_sec", "wall_env_steps_per_sec", "batch_physics_steps_per_sec",
                            "loop_physics_steps_per_sec", "physics_steps_per_sec", "ratio", "floor_ratio",
                            "ratio_to_loop", "reset_ms", "compile_ms") if key in rows[0]]
    return {f"median_{key}": median(row[key] for row in rows) for key in keys}


def run(args: argparse.Namespace) -> dict:
    known = env_configs()
    names = list(known) if args.envs == "all" else [n.strip() for n in args.envs.split(",") if n.strip()]
    unknown = [name for name in names if name not in known]
    if unknown:
        raise SystemExit(f"error: unknown env {unknown[0]!r}; known: {', '.join(known)} (or all)")
    if min(args.num_envs, args.threads, args.steps, args.resets) < 1:
        raise SystemExit("error: --num-envs, --threads, --steps and --resets must be >= 1")
    seeds = morphology_seeds(args.seeds, args.seed, args.morphologies)
    overrides = {"VECENV.THREADS": args.threads, "TERRAIN.BANK_SIZE": args.bank_size}
    try:
        configs = {name: load_config(known[name], overrides) for name in names}
    except ConfigError as err:
        raise SystemExit(f"error: {err}") from None
    xmls = [Path(path) for path in args.xml.split(",") if path.strip()] if args.xml else []
    missing = [path for path in xmls if not path.is_file()]
    if missing:
        raise SystemExit(f"error: --xml: unimal MJCF {missing[0]} not found")
    result: dict = {"steps": args.steps, "frame_skip": FRAME_SKIP, "single": args.single, "bank_size": args.bank_size,
                    **({"xml": [str(path) for path in xmls]} if xmls else {"seeds": seeds})}
    if not args.single:
        result.update(num_envs=args.num_envs, threads=args.threads)
    measure = _measure_single if args.single else _measure
    bodies = len(xmls) or len(seeds)
    with tempfile.TemporaryDirectory() as folder, progress_bar(len(names) * bodies, "bench env", unit="body") as bar:
        for name in names:
            cfg = configs[name]
            limit_threads(cfg.TORCH_THREADS)  # BLAS pools as a training has them (the bowl's product uses one)
            rows = []
            for k in range(bodies):
                if xmls:
                    seed, xml_path, body = args.seed + k, xmls[k], {"xml": xmls[k].name}
                else:
                    seed = seeds[k]
                    xml_path = Path(folder) / f"{name}-{seed}.xml"
                    genome = seeded_body(cfg.unimal, seed, xml_path)
                    body = {"seed": seed, "num_limbs": genome.num_limbs}
                rows.append({**body, **measure(cfg, xml_path, seed, args)})
                bar.update(1)
            result[name] = {**_summary(rows), "per_morphology": rows}
    return result
