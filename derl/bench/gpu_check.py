"""The GPU check (``tools/gpu_check.py``, ``make gpu-check``): does ``SIM.BACKEND warp`` work on this GPU?

Checks on the real device what no CPU test can show, and prints a verdict table (and writes it as
JSON): warp's CUDA, driver, conditional graphs and memory pool (``derl.checked_config.check_warp_cuda``);
the first step captured and launched (``derl.envs.warp_physics``: warp's own stream, a warm-up that
leaves the state as it was); zero host syncs in env steps with episode restarts under
``torch.cuda.set_sync_debug_mode("error")``; the overflow tally over ``--steps`` steps at the largest
``--nworld``; the GPU memory the worlds took against the coordinator's estimate; physics steps/s
against ``nworld`` for an FT body. The checks of issue-sized work not built yet (VT and MVT on the
device, PPO end to end, workers per GPU, learner modes, a ``configs/evo/ft_gpu.yml`` evolution) are
rows marked ``not run`` with the command that measures them.

On a machine without a GPU it says so in one line and exits non-zero. ``--device cpu`` runs the
checks that apply on warp's CPU device (the capture path included: warp's CPU device captures
too), small, for the tests.
"""

from __future__ import annotations

import argparse
import importlib.util
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np

from derl.bench.sim import ft_model
from derl.checked_config import check_warp_cuda_here, load_config
from derl.config import PRESET_DIR, ConfigError
from derl.envs.batch import FRAME_SKIP
from derl.envs.warp_log import quiet_warp
from derl.envs.warp_overflow import SOLVER_BITS, Buffers
from derl.envs.warp_overflow import describe as describe_overflow
from derl.evolution.coordinator import WARP_MODEL_GPU_BYTES, WARP_WORLD_GPU_BYTES
from derl.evolution.failures import classify, describe

PASS, FAIL, MEASURED, NOT_RUN = "pass", "fail", "measured", "not run"
# What the checks not built here need, and how to measure it by hand meanwhile.
NOT_BUILT = {
    "vt_mvt_on_device": "VT/MVT draw terrain per episode, not on the device yet (terrain banks: issue 32 item 4)",
    "ppo_vs_mujoco": "tools/bench.py ppo --envs ft --sim warp --device cuda (against SIM.BACKEND mujoco)",
    "workers_per_gpu": "evo_single_proc.py --cfg configs/evo/ft_gpu.yml EVO.NUM_PROCESSES 1|2|4",
    "learner_modes": "tools/bench.py learner; tools/bench.py ddp (>= 2 GPUs); AMP",
    "ft_gpu_evolution": "evo_single_proc.py --cfg configs/evo/ft_gpu.yml (a short run that publishes)",
}


@dataclass
class Check:
    """One row of the verdict table."""

    name: str
    verdict: str
    note: str = ""
    measured: dict = field(default_factory=dict)


def no_gpu(torch_sees_cuda: bool, warp_installed: bool) -> str | None:
    """The one line to print when this machine cannot run the check on ``cuda``, or None."""
    if not warp_installed:
        return "gpu_check: warp and mujoco_warp are not installed: run `make setup-gpu` on a GPU node"
    if not torch_sees_cuda:
        return "gpu_check: no GPU on this machine (torch sees no CUDA device): run it on a node with an NVIDIA GPU"
    return None


def guarded(name: str, body: Callable[[], Check]) -> Check:
    """``body()``, or a failed row naming the error and whose it is (``derl.evolution.failures``)."""
    try:
        return body()
    except Exception as err:  # noqa: BLE001 - a failed check is a row of the table, not a crash
        return Check(name, FAIL, f"{describe(err)} ({classify(err)})")


def capture_verdict(seconds: float, time_after: float, dt: float, finite: bool) -> Check:
    """The first step: launched, one step on (the warm-up undone), the state finite."""
    ok = finite and abs(time_after - dt) < dt / 100
    note = "" if ok else f"time after the first step {time_after:.6f} s, expected {dt:.6f} s; finite {finite}"
    return Check("capture_first_step", PASS if ok else FAIL, note, {"seconds": round(seconds, 4)})


def sync_verdict(steps: int, error: str | None) -> Check:
    """Zero host syncs: ``set_sync_debug_mode("error")`` raised nothing in ``steps`` env steps."""
    return Check("host_syncs", PASS if error is None else FAIL, error or "", {"env_steps": steps})


def overflow_verdict(counts: dict[str, int], steps: int, nworld: int, buffers: Buffers) -> Check:
    """No buffer ran out (``derl.envs.warp_overflow``); solver limits are counted, not failed."""
    ran_out = {name: count for name, count in counts.items() if count and name not in SOLVER_BITS}
    return Check("overflow", FAIL if ran_out else PASS, describe_overflow(counts, steps, buffers) or "",
                 {"steps": steps, "nworld": nworld, "world_steps": counts})


def memory_verdict(measured_bytes: int, nworld: int) -> Check:
    """The worlds, modules and graphs took no more than the coordinator reserves for them."""
    estimate = nworld * WARP_WORLD_GPU_BYTES + WARP_MODEL_GPU_BYTES
    ok = measured_bytes <= estimate
    note = "" if ok else "raise WARP_WORLD_GPU_BYTES/WARP_MODEL_GPU_BYTES (derl/evolution/coordinator.py)"
    return Check("memory", PASS if ok else FAIL, note,
                 {"nworld": nworld, "measured_mib": round(measured_bytes / 2**20, 1),
                  "estimate_mib": round(estimate / 2**20, 1)})


def table(checks: list[Check]) -> str:
    """The verdict table: one row per check (name, verdict, note)."""
    width = max(len(check.name) for check in checks)
    rows = [f"{'check':<{width}}  {'verdict':<8}  note", f"{'-' * width}  {'-' * 8}  ----"]
    rows += [f"{check.name:<{width}}  {check.verdict:<8}  {check.note}".rstrip() for check in checks]
    return "\n".join(rows)


def passed(checks: list[Check]) -> bool:
    return all(check.verdict != FAIL for check in checks)


def report(checks: list[Check], device: str, versions: dict) -> dict:
    """The JSON the tool writes: the device, the versions, every check."""
    return {"device": device, "versions": versions, "passed": passed(checks),
            "checks": [asdict(check) for check in checks]}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N, or cpu (warp's CPU device: the tests)")
    parser.add_argument("--nworld", default="1024,4096", help="comma-separated world counts of the rate check")
    parser.add_argument("--steps", type=int, default=1000, help="env steps of the overflow tally")
    parser.add_argument("--sync-steps", type=int, default=200, help="env steps watched for host syncs")
    parser.add_argument("--seed", type=int, default=0, help="the FT body's seed")


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
    import torch

    from derl.envs import UnimalVectorEnv
    from derl.morphology import random_genome, to_mjcf

    cfg = load_config(PRESET_DIR / "ft.yml", {"SIM.BACKEND": "warp", "ENV.EPISODE_LENGTH": 20})
    mjcf = to_mjcf(random_genome(cfg, np.random.default_rng(0), "gpu-check"), cfg)
    env = UnimalVectorEnv(None, cfg, nworld, device=device, mjcf=mjcf)
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
    return sync_verdict(steps, error)


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


def _nworlds(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise SystemExit(f"error: --nworld expects comma-separated integers >= 1, got {text!r}")
    return values


def run(args: argparse.Namespace) -> tuple[list[Check], dict]:
    """The checks on ``args.device`` and the JSON report (the caller said there is a GPU, or chose cpu)."""
    nworlds = _nworlds(args.nworld)
    if args.steps < 1 or args.sync_steps < 1:
        raise SystemExit("error: --steps and --sync-steps must be >= 1")
    wp = quiet_warp()  # no banner above the table, no per-module load timings
    wp.init()
    cuda = args.device.startswith("cuda")
    checks = []
    if cuda:
        try:
            check_warp_cuda_here(args.device)
            checks.append(Check("startup", PASS))
        except ConfigError as err:
            checks.append(Check("startup", FAIL, str(err)))
    model, body = ft_model(args.seed)
    sim = load_config(PRESET_DIR / "ft.yml").SIM
    buffers = Buffers(int(sim.NCONMAX), int(sim.NJMAX))
    checks.append(guarded("capture_first_step", lambda: _capture(model, args.device, FRAME_SKIP * model.opt.timestep)))
    if cuda:
        checks.append(guarded("host_syncs", lambda: _host_syncs(args.device, args.sync_steps, min(nworlds))))
    else:
        checks.append(Check("host_syncs", NOT_RUN, "CUDA only (torch.cuda.set_sync_debug_mode)"))
    try:
        checks += _tally_and_memory(model, args.device, max(nworlds), args.steps, buffers)
    except Exception as err:  # noqa: BLE001 - a row, not a crash
        checks.append(Check("overflow", FAIL, f"{describe(err)} ({classify(err)})"))
    checks.append(guarded("ft_physics_rate", lambda: _rates(model, args.device, nworlds, min(args.steps, 100))))
    checks += [Check(name, NOT_RUN, note) for name, note in NOT_BUILT.items()]
    versions = {"warp": wp.__version__, "cuda_toolkit": wp.get_cuda_toolkit_version(),
                "cuda_driver": wp.get_cuda_driver_version(), "body": body}
    device = wp.get_device(args.device)
    return checks, report(checks, f"{device.alias} ({device.name})", versions)


def gpu_missing(device: str) -> str | None:
    """``no_gpu``'s line for this machine when ``device`` is CUDA (imports torch, not warp)."""
    if not device.startswith("cuda"):
        return None
    installed = all(importlib.util.find_spec(name) is not None for name in ("warp", "mujoco_warp"))
    import torch

    return no_gpu(torch.cuda.is_available(), installed)
