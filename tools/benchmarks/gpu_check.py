"""The GPU check (``tools/gpu_check.py``, ``make gpu-check``): does ``SIM.BACKEND warp`` work on this GPU?

Checks on the real device what no CPU test can show, and prints a verdict table (and writes it as
JSON, rewritten after each row): warp's CUDA, driver, conditional graphs and memory pool
(``derl.envs.warp_check.check_warp_cuda``); the first step captured and launched
(``derl.envs.warp_physics``: warp's own stream, a warm-up that leaves the state as it was); zero
host syncs in env steps with episode restarts (FT, and VT on a terrain bank) under
``torch.cuda.set_sync_debug_mode("error")``;
the overflow tally over ``--steps`` steps at the largest ``--nworld``; the GPU memory the worlds took
against the coordinator's estimate; physics steps/s against ``nworld`` for an FT body. Then
(``LATER_ROWS``): VT and MVT stepped on the device (``not run`` with the refusal while a task cannot
run there); end to end, in processes started as a user starts them (``benchmarks.gpu_training``):
PPO on the GPU against MuJoCo C on all the node's cores, 1, 2 and 4 trainers sharing the GPU and
the GPU's utilisation meanwhile (``benchmarks.gpu_utilisation``), a tiny ``configs/evo/ft_gpu.yml``
evolution that must publish, the share of its trainings spent starting up (kernel compiles
included), the morphologies per hour a GPU would train at ``ft_gpu.yml``'s budget, K
``configs/evo/ft_warp.yml`` trainers (DERL's learner, the physics on the GPU) sharing the GPU against K
``ft.yml`` trainers on MuJoCo C for K = 1, 2, 4, 8 and the node's cores (capped), the GPU's utilisation
meanwhile, ``configs/gpu_server.yml``'s learner with AMP off and on and its round-robin over the GPUs, DDP with
two GPUs, a new morphology's first step (the kernels MuJoCo Warp specialises per model); last,
``tools/bench.py fidelity``: does ``ft_gpu.yml`` on the GPU rank bodies as DERL's ``ft.yml`` on the
CPU cores does, trained at the same time (``benchmarks.gpu_rows``). About 15 minutes on a GPU
without that last row and ``derl_shape_per_gpu`` (measured on an H200), ``--quick`` about 5;
``preset_fidelity`` adds some 15 and 5, ``derl_shape_per_gpu`` some 10 and 5 (estimated: neither has
run on a GPU yet).

On a machine without a GPU it says so in one line (``error: ...``, before looking for warp) and
exits 1. ``--device cpu`` runs the checks that apply on warp's CPU device (the capture path
included: warp's CPU device captures too), tiny, for the tests.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from benchmarks.cases import ft_model, seeded_genome
from benchmarks.gpu_rows import EndToEnd
from benchmarks.gpu_verdicts import (
    FAIL,
    MEASURED,
    NOT_RUN,
    PASS,
    SYNC_TASKS,
    Check,
    capture_verdict,
    compile_verdict,
    guarded,
    listed_gpus,
    memory_verdict,
    no_gpu,
    overflow_verdict,
    report,
    sync_verdict,
    task_on_device_verdict,
)
from derl.arguments import any_seed, bounded_int
from derl.checked_config import load_config
from derl.config import ConfigError
from derl.envs.batch import FRAME_SKIP
from derl.envs.warp_check import check_warp_cuda_here
from derl.envs.warp_log import quiet_warp
from derl.envs.warp_overflow import Buffers
from derl.evolution.failures import classify, describe
from derl.paths import evo_preset

# The rows after ft_physics_rate, in the order they run (what a check stopped at its limit misses first
# comes last: preset_fidelity takes longest; a new morphology's cost also shows in any evolution); --skip
# takes these.
LATER_ROWS = ("vt_on_device", "mvt_on_device", "ppo_vs_mujoco", "workers_per_gpu", "gpu_utilisation",
              "ft_gpu_evolution", "compile_share", "morphologies_per_hour", "derl_shape_per_gpu", "learner_modes",
              "learner_ddp", "new_morphology_compile", "preset_fidelity")
# The sizes of the end-to-end rows, full (about 30 minutes on a GPU in all, half of it preset_fidelity) and
# --quick (about 10). derl_shape: the counts of ft_warp.yml trainers sharing the GPU, with the node's cores,
# at most "most" (gpu_rows.trainer_counts). preset_fidelity: bench fidelity's bodies, the share of each
# preset's budget (full: DERL's 5M env steps for ft.yml, 20M for ft_gpu.yml), its time limit.
FULL = {"train_iters": 4, "new_morphologies": 2, "workers": (1, 2, 4), "row_seconds": 240.0,
        "derl_shape": {"counts": (1, 2, 4, 8), "most": 32},
        "fidelity": {"sample": 6, "scale": 1.0, "seconds": 1500.0}}
QUICK = {"train_iters": 2, "new_morphologies": 1, "workers": (1, 2, 4), "row_seconds": 150.0,
         "derl_shape": {"counts": (1, 4), "most": 16},
         "fidelity": {"sample": 4, "scale": 0.1, "seconds": 420.0}}
OUTPUTS = {"keep": "folder"}  # its output paths besides the report (derl.fileio.outputs.check_outputs)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N, or cpu (warp's CPU device: the tests)")
    parser.add_argument("--nworld", default="1024,4096", help="comma-separated world counts of the rate check")
    parser.add_argument("--steps", type=bounded_int(1, 10**7), default=None,
                        help="env steps of the overflow tally (default 1000)")
    parser.add_argument("--sync-steps", type=bounded_int(1, 10**7), default=None,
                        help="env steps watched for host syncs (default 200)")
    parser.add_argument("--seed", type=any_seed, default=0, help="the FT body's seed")
    parser.add_argument("--quick", action="store_true",
                        help="about 10 minutes on a GPU (default about 30; see the description): shorter "
                             "trainings, one new morphology, bench fidelity on 4 bodies at 0.1 of the budgets; "
                             "with it --steps defaults to 200 and --sync-steps to 50")
    parser.add_argument("--skip", default="", help="comma-separated rows not to run, of those after ft_physics_rate "
                                                   "(e.g. learner_modes,preset_fidelity)")
    parser.add_argument("--keep", type=Path, help="keep the trainings, the evolution and their logs in this new "
                                                   "folder (default: a temporary folder, removed)")


def _sync(device: str) -> None:
    import torch
    import warp as wp

    wp.synchronize_device(device)
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def _capture(model, device: str, dt: float) -> Check:
    from derl.envs.warp_physics import WarpPhysics

    physics = WarpPhysics(model, 4, device, capture=True)
    physics.arrays["ctrl"][:] = 0.5
    t0 = time.perf_counter()
    physics.step(FRAME_SKIP)
    _sync(device)
    seconds = time.perf_counter() - t0
    finite = bool(physics.arrays["qpos"].isfinite().all())
    return capture_verdict(seconds, float(physics.arrays["time"][0]), dt, finite)


def _host_syncs(device: str, steps: int, nworld: int) -> Check:
    """FT, then VT on a terrain bank (its restarts pick entries on the device): the first error of each."""
    errors = {name: _syncs_of(name, overrides, device, steps, nworld) for name, overrides in SYNC_TASKS.items()}
    return sync_verdict(steps, "; ".join(f"{name}: {error}" for name, error in errors.items() if error) or None)


def _syncs_of(name: str, overrides: dict, device: str, steps: int, nworld: int) -> str | None:
    """The error ``set_sync_debug_mode("error")`` raised in ``steps`` env steps of ``name`` (a
    ``configs/evo`` preset, a seeded body, episodes of 20 steps), or None."""
    import torch

    from derl.envs import UnimalVectorEnv
    from derl.morphology import to_mjcf

    cfg = load_config(evo_preset(name), {"SIM.BACKEND": "warp", "ENV.EPISODE_LENGTH": 20, **overrides})
    mjcf = to_mjcf(seeded_genome(cfg.unimal, 0), cfg.unimal)
    env = UnimalVectorEnv(None, cfg.world, nworld, device=device, mjcf=mjcf)
    env.reset(seed=0)
    actions = torch.zeros((nworld, env.single_action_space.shape[0]), device=device)
    for _ in range(25):  # every graph captured, episodes restarted: the syncs of set-up are not counted
        env.step(actions)
    _sync(device)
    error = None
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(steps):
            env.step(actions)
    except RuntimeError as err:
        error = describe(err)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    return error


def _tally_and_memory(model, device: str, nworld: int, steps: int, buffers: Buffers) -> list[Check]:
    import torch

    from derl.envs.warp_physics import WarpPhysics

    cuda = device.startswith("cuda")
    free_before = torch.cuda.mem_get_info(device)[0] if cuda else 0
    physics = WarpPhysics(model, nworld, device, nconmax=buffers[0], njmax=buffers[1])
    rng = torch.Generator(physics.torch_device).manual_seed(0)
    for _ in range(steps):
        physics.arrays["ctrl"][:] = torch.rand(physics.arrays["ctrl"].shape, generator=rng,
                                               device=physics.torch_device) * 2 - 1
        physics.step(FRAME_SKIP)
    _sync(device)
    checks = [overflow_verdict(physics.overflows.counts(), steps, nworld, buffers)]
    if cuda:
        checks.append(memory_verdict(free_before - torch.cuda.mem_get_info(device)[0], nworld))
    else:
        checks.append(Check("memory", NOT_RUN, "CUDA only"))
    return checks


def _rates(model, device: str, nworlds: list[int], steps: int) -> Check:
    from derl.envs.warp_physics import WarpPhysics

    rates = {}
    for nworld in nworlds:
        physics = WarpPhysics(model, nworld, device)
        physics.step(FRAME_SKIP)  # capture
        _sync(device)
        t0 = time.perf_counter()
        for _ in range(steps):
            physics.step(FRAME_SKIP)
        _sync(device)
        rates[str(nworld)] = round(steps * FRAME_SKIP * nworld / (time.perf_counter() - t0), 1)
    return Check("ft_physics_rate", MEASURED, "physics substeps/s of all worlds, by nworld", rates)


def _on_device(name: str, device: str, nworld: int, steps: int) -> Check:
    """``name``'s env (``configs/evo/<name>.yml``, a seeded body; VT and MVT on warp's terrain bank) on the
    warp backend: ``steps`` random steps."""
    import torch

    from derl.envs import UnimalVectorEnv
    from derl.morphology import to_mjcf

    try:  # the config check and UnimalBatch refuse a task the backend cannot run on the device
        cfg = load_config(evo_preset(name), {"SIM.BACKEND": "warp"})
        mjcf = to_mjcf(seeded_genome(cfg.unimal, 0), cfg.unimal)
        env = UnimalVectorEnv(None, cfg.world, nworld, device=device, mjcf=mjcf)
    except (ConfigError, ValueError) as err:
        return task_on_device_verdict(name, str(err), 0, 0, 0.0)
    obs, _ = env.reset(seed=0)
    rng = torch.Generator(device).manual_seed(0)
    shape = (nworld, env.single_action_space.shape[0])
    env.step(torch.rand(shape, generator=rng, device=device) * 2 - 1)  # graphs captured
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(steps):
        obs, *_ = env.step(torch.rand(shape, generator=rng, device=device) * 2 - 1)
    _sync(device)
    seconds = time.perf_counter() - t0
    finite = torch.isfinite(obs["proprioceptive"]).all(dim=1)
    return task_on_device_verdict(name, None, steps, int((~finite).sum()), steps * nworld / seconds)


def _new_morphologies(device: str, count: int, nworld: int, buffers: Buffers) -> Check:
    """``count`` bodies this machine has not compiled (seeds drawn from the OS), through bench sim's ``build_cost``."""
    from benchmarks.sim import WarpSim

    warp = WarpSim(device)
    costs = []
    for seed in np.random.SeedSequence().generate_state(count):
        model, body = ft_model(int(seed))
        costs.append({**body, "nworld": nworld, **warp.build_cost(model, nworld, *buffers)})
    return compile_verdict(costs)


def _nworlds(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise SystemExit(f"error: --nworld expects comma-separated integers >= 1, got {text!r}")
    return values


def _steps(args: argparse.Namespace) -> tuple[int, int]:
    """``--steps`` and ``--sync-steps``, their defaults by ``--quick``; bad values end the tool (exit 2)."""
    steps = args.steps if args.steps is not None else 200 if args.quick else 1000
    sync_steps = args.sync_steps if args.sync_steps is not None else 50 if args.quick else 200
    if steps < 1 or sync_steps < 1:
        raise SystemExit("error: --steps and --sync-steps must be >= 1")
    return steps, sync_steps


def run(args: argparse.Namespace, on_row: Callable[[dict], None] = lambda report: None) -> tuple[list[Check], dict]:
    """The checks on ``args.device`` and the JSON report (the caller said there is a GPU, or chose cpu).

    ``on_row(report)`` after each row: the tool writes the report so far, so that a check
    stopped at its time limit leaves the rows it finished.
    """
    nworlds = _nworlds(args.nworld)
    steps, sync_steps = _steps(args)
    if args.keep is not None:
        try:
            args.keep.mkdir(parents=True)
        except OSError as err:
            raise SystemExit(f"error: --keep {args.keep}: {err.strerror or err} (give a new folder)") from None
    skip = {name.strip() for name in args.skip.split(",") if name.strip()}
    if skip - set(LATER_ROWS):
        raise SystemExit(f"error: --skip: unknown row {sorted(skip - set(LATER_ROWS))[0]!r}; "
                         f"use some of {', '.join(LATER_ROWS)}")
    wp = quiet_warp()  # no banner above the table, no per-module load timings
    wp.init()
    cuda = args.device.startswith("cuda")
    device = wp.get_device(args.device)
    model, body = ft_model(args.seed)
    versions = {"warp": wp.__version__, "cuda_toolkit": wp.get_cuda_toolkit_version(),
                "cuda_driver": wp.get_cuda_driver_version(), "body": body}
    checks: list[Check] = []

    def add(*rows: Check) -> None:
        checks.extend(rows)
        on_row(report(checks, f"{device.alias} ({device.name})", versions))

    if cuda:
        try:
            check_warp_cuda_here(args.device)
            add(Check("startup", PASS))
        except ConfigError as err:
            add(Check("startup", FAIL, str(err)))
    sim = load_config(evo_preset("ft")).SIM
    buffers = Buffers(int(sim.NCONMAX), int(sim.NJMAX))
    add(guarded("capture_first_step", lambda: _capture(model, args.device, FRAME_SKIP * model.opt.timestep)))
    if cuda:
        add(guarded("host_syncs", lambda: _host_syncs(args.device, sync_steps, min(nworlds))))
    else:
        add(Check("host_syncs", NOT_RUN, "CUDA only (torch.cuda.set_sync_debug_mode)"))
    try:
        add(*_tally_and_memory(model, args.device, max(nworlds), steps, buffers))
    except Exception as err:  # noqa: BLE001 - a row, not a crash
        add(Check("overflow", FAIL, f"{describe(err)} ({classify(err)})"))
    add(guarded("ft_physics_rate", lambda: _rates(model, args.device, nworlds, min(steps, 100))))
    sizes = QUICK if args.quick else FULL
    with tempfile.TemporaryDirectory(prefix="gpu_check-") as folder:
        rows = EndToEnd(args.device, sizes, args.keep or Path(folder), device.uuid if cuda else None)
        later = {
            "vt_on_device": lambda: _on_device("vt", args.device, min(nworlds), 50),
            "mvt_on_device": lambda: _on_device("mvt", args.device, min(nworlds), 50),
            "new_morphology_compile": lambda: _new_morphologies(args.device, sizes["new_morphologies"], min(nworlds),
                                                                buffers),
            "ppo_vs_mujoco": rows.ppo_vs_mujoco, "workers_per_gpu": rows.workers_per_gpu,
            "gpu_utilisation": rows.gpu_utilisation, "ft_gpu_evolution": rows.ft_gpu_evolution,
            "compile_share": rows.compile_share, "morphologies_per_hour": rows.morphologies_per_hour,
            "derl_shape_per_gpu": rows.derl_shape_per_gpu,
            "learner_modes": rows.learner_modes, "learner_ddp": rows.learner_ddp,
            "preset_fidelity": rows.preset_fidelity}
        for name in LATER_ROWS:
            add(Check(name, NOT_RUN, "--skip") if name in skip else guarded(name, later[name]))
    return checks, report(checks, f"{device.alias} ({device.name})", versions)


def _nvidia_smi_gpus() -> int | None:
    """The GPUs ``nvidia-smi -L`` lists (0 when it fails: no driver), None without nvidia-smi."""
    try:
        done = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return listed_gpus(done.stdout) if done.returncode == 0 else 0


def gpu_missing(device: str) -> str | None:
    """``no_gpu``'s line for this machine when ``device`` is CUDA (asks torch, then nvidia-smi if torch sees
    no GPU; looks for warp without importing it)."""
    if not device.startswith("cuda"):
        return None
    import torch

    sees = torch.cuda.is_available()
    installed = all(importlib.util.find_spec(name) is not None for name in ("warp", "mujoco_warp"))
    return no_gpu(sees, None if sees else _nvidia_smi_gpus(), installed)
