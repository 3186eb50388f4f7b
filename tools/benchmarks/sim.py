"""Physics steps/s against the number of worlds, per simulation backend (``SIM.BACKEND``) and device.

One seeded FT morphology (``random_genome`` seed ``--seed`` under ``configs/evo/ft.yml``, in its
world: ``derl.envs.world.build_xml``) is stepped in ``nworld`` copies with random controls in
[-1, 1], drawn anew for each env step of ``FRAME_SKIP`` physics substeps, by

- ``mujoco``: ``mujoco.batch.Batch(model, nworld, nthread=--threads)``, on the CPU whatever
  ``--device`` says;
- ``warp``: MuJoCo Warp on ``--device`` (``put_model``; ``put_data`` with ``nworld`` and the
  ``SIM.NCONMAX``/``SIM.NJMAX`` of ``ft.yml``; ``mujoco_warp.step``). On CUDA an env step's
  substeps are captured once in a CUDA graph (``wp.ScopedCapture``) and the graph is launched, as
  MuJoCo Warp's ``testspeed`` does; warp's CPU device runs them as they are (correctness, not speed).

``steps_per_sec`` counts physics substeps of all worlds per second of wall time; writing the
controls is not timed. ``first_step_seconds`` is the first env step alone: for warp, compiling the
kernels (or loading them from warp's kernel cache on disk) and capturing the graph. Warp also
reports its kernel cache (directory, modules there before and after: new ones were compiled) and
``new_morphology``: put_model + put_data + first env step of other bodies (seeds after ``--seed``)
once the first one's kernels are loaded, what each new morphology of an evolution pays, since
MuJoCo Warp specialises some kernels per model (docs/guides/gpus.md#simulating-on-a-gpu).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import mujoco
import mujoco.batch
import numpy as np

from benchmarks.cases import ft_model
from derl.arguments import any_seed, bounded_int
from derl.checked_config import load_config
from derl.config import ConfigError
from derl.envs.batch import FRAME_SKIP
from derl.envs.warp_check import check_backend_here
from derl.envs.warp_log import quiet_warp
from derl.evolution.node_size import usable_cores
from derl.paths import evo_preset

DEFAULT_NWORLD = {"cpu": (8, 64), "cuda": (1024, 4096, 8192)}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backends", default="mujoco,warp", help="comma-separated among mujoco, warp")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="warp's device (mujoco: the CPU)")
    parser.add_argument("--nworld", help="comma-separated world counts (default 8,64 on cpu, 1024,4096,8192 on cuda)")
    parser.add_argument("--steps", type=bounded_int(1, 10**7), default=20,
                        help=f"timed env steps ({FRAME_SKIP} substeps each)")
    parser.add_argument("--threads", type=bounded_int(1, 1024), default=usable_cores(),
                        help="threads of mujoco.batch.Batch (default: all usable cores)")
    parser.add_argument("--seed", type=any_seed, default=0, help="the benchmark morphology's seed")
    parser.add_argument("--new-morphologies", type=bounded_int(0, 100_000), default=2,
                        help="warp: bodies of the following seeds built after the first (0: none)")


@dataclass
class Rate:
    """One (backend, device, nworld) point."""

    backend: str
    device: str
    nworld: int
    steps_per_sec: float
    first_step_seconds: float
    setup_seconds: float  # Batch, or put_model + put_data
    nonfinite_worlds: int  # worlds whose qpos went NaN/inf: a physics problem, not a speed one


def _timed_steps(set_ctrl: Callable[[np.ndarray], None], step: Callable[[], None], nworld: int, nu: int,
                 steps: int, seed: int) -> tuple[float, float]:
    """Seconds of the first env step and of the ``steps`` after it, controls written untimed."""
    rng = np.random.default_rng(seed)
    seconds = []
    for _ in range(steps + 1):
        set_ctrl(rng.uniform(-1, 1, (nworld, nu)).astype(np.float32))
        t0 = time.perf_counter()
        step()
        seconds.append(time.perf_counter() - t0)
    return seconds[0], sum(seconds[1:])


def mujoco_rate(model: mujoco.MjModel, nworld: int, steps: int, threads: int, seed: int = 0) -> Rate:
    """``Batch.step(nstep=FRAME_SKIP)`` of ``nworld`` simulations on ``threads`` threads."""
    t0 = time.perf_counter()
    batch = mujoco.batch.Batch(model, nworld, nthread=threads)
    ctrl, qpos = batch.bind("ctrl"), batch.bind("qpos")
    setup = time.perf_counter() - t0

    def set_ctrl(actions: np.ndarray) -> None:
        ctrl[:] = actions

    first, seconds = _timed_steps(set_ctrl, lambda: batch.step(nstep=FRAME_SKIP), nworld, model.nu, steps, seed)
    bad = int((~np.isfinite(qpos).all(axis=1)).sum())
    return Rate("mujoco", "cpu", nworld, round(steps * FRAME_SKIP * nworld / seconds, 1), round(first, 4),
                round(setup, 4), bad)


class WarpSim:
    """MuJoCo Warp on one device: model and data upload, an env step, the kernel cache."""

    def __init__(self, device: str):
        try:
            check_backend_here("warp")
        except ConfigError as err:
            raise SystemExit(f"error: {err}") from None
        wp = quiet_warp()  # no banner on stdout, where the JSON goes; no per-module load timings either
        wp.init()
        if device == "cuda" and not wp.is_cuda_available():
            raise SystemExit("error: --device cuda: warp sees no CUDA device on this machine")
        import mujoco_warp

        self.wp, self.mjw = wp, mujoco_warp
        self.device = wp.get_device(device)
        self.cache_dir = Path(wp.config.kernel_cache_dir)

    def modules(self) -> set[str]:
        """The compiled modules in warp's kernel cache directory (its ``wp_*`` folders), by name."""
        return {path.name for path in self.cache_dir.glob("wp_*")}

    def cached_modules(self) -> int:
        """How many compiled modules warp's kernel cache directory holds."""
        return len(self.modules())

    def put(self, model: mujoco.MjModel, nworld: int, nconmax: int, njmax: int) -> tuple[object, object, float, float]:
        """The device model and data of ``nworld`` worlds, and the seconds each upload took."""
        with self.wp.ScopedDevice(self.device):
            t0 = time.perf_counter()
            m = self.mjw.put_model(model)
            t1 = time.perf_counter()
            d = self.mjw.put_data(model, mujoco.MjData(model), nworld=nworld, nconmax=nconmax, njmax=njmax)
            self.wp.synchronize_device(self.device)
            return m, d, t1 - t0, time.perf_counter() - t1

    def env_step(self, m, d) -> Callable[[], None]:
        """``FRAME_SKIP`` substeps, synchronised; on CUDA a graph captured on the first call, then launched."""
        wp, mjw, device = self.wp, self.mjw, self.device

        def substeps() -> None:
            with wp.ScopedDevice(device):
                for _ in range(FRAME_SKIP):
                    mjw.step(m, d)
            wp.synchronize_device(device)

        if not device.is_cuda:
            return substeps
        graph = None

        def launch() -> None:
            nonlocal graph
            if graph is None:
                substeps()  # compiles and loads the kernels outside the capture
                with wp.ScopedDevice(device), wp.ScopedCapture(device=device) as capture:
                    for _ in range(FRAME_SKIP):
                        mjw.step(m, d)
                graph = capture.graph
            wp.capture_launch(graph)
            wp.synchronize_device(device)

        return launch

    def rate(self, model: mujoco.MjModel, nworld: int, steps: int, nconmax: int, njmax: int,
             seed: int = 0) -> Rate:
        m, d, put_model, put_data = self.put(model, nworld, nconmax, njmax)
        first, seconds = _timed_steps(d.ctrl.assign, self.env_step(m, d), nworld, model.nu, steps, seed)
        bad = int((~np.isfinite(d.qpos.numpy()).all(axis=1)).sum())
        return Rate("warp", str(self.device), nworld, round(steps * FRAME_SKIP * nworld / seconds, 1),
                    round(first, 4), round(put_model + put_data, 4), bad)

    def build_cost(self, model: mujoco.MjModel, nworld: int, nconmax: int, njmax: int) -> dict:
        """Seconds of put_model, put_data and the first env step of a model, and the modules it compiled."""
        before = self.cached_modules()
        m, d, put_model, put_data = self.put(model, nworld, nconmax, njmax)
        first, _ = _timed_steps(d.ctrl.assign, self.env_step(m, d), nworld, model.nu, 0, 0)
        return {"put_model_seconds": round(put_model, 4), "put_data_seconds": round(put_data, 4),
                "first_step_seconds": round(first, 4), "modules_compiled": self.cached_modules() - before}


def _nworlds(args: argparse.Namespace) -> list[int]:
    if args.nworld is None:
        return list(DEFAULT_NWORLD[args.device])
    try:
        values = [int(part) for part in args.nworld.split(",") if part.strip()]
    except ValueError:
        raise SystemExit(f"error: --nworld expects comma-separated integers, got {args.nworld!r}") from None
    if not values or min(values) < 1:
        raise SystemExit(f"error: --nworld values must be >= 1, got {args.nworld!r}")
    return values


def run(args: argparse.Namespace) -> dict:
    backends = [name.strip() for name in args.backends.split(",") if name.strip()]
    unknown = [name for name in backends if name not in ("mujoco", "warp")]
    if unknown or not backends:
        raise SystemExit(f"error: unknown backend {unknown[0] if unknown else args.backends!r}; use mujoco, warp")
    if args.steps < 1 or args.threads < 1 or args.new_morphologies < 0:
        raise SystemExit("error: --steps and --threads must be >= 1, --new-morphologies >= 0")
    nworlds = _nworlds(args)
    sim_cfg = load_config(evo_preset("ft")).SIM
    model, body = ft_model(args.seed)
    result: dict = {"body": body, "frame_skip": FRAME_SKIP, "steps": args.steps, "threads": args.threads,
                    "nconmax": sim_cfg.NCONMAX, "njmax": sim_cfg.NJMAX, "rates": []}
    if "mujoco" in backends:
        result["rates"] += [asdict(mujoco_rate(model, n, args.steps, args.threads, args.seed)) for n in nworlds]
    if "warp" in backends:
        warp = WarpSim(args.device)
        cache = {"dir": str(warp.cache_dir), "modules_before": warp.cached_modules()}
        result["rates"] += [asdict(warp.rate(model, n, args.steps, sim_cfg.NCONMAX, sim_cfg.NJMAX, args.seed))
                            for n in nworlds]
        result["new_morphology"] = []
        for seed in range(args.seed + 1, args.seed + 1 + args.new_morphologies):
            other, other_body = ft_model(seed)
            cost = warp.build_cost(other, min(nworlds), sim_cfg.NCONMAX, sim_cfg.NJMAX)
            result["new_morphology"].append({**other_body, "nworld": min(nworlds), **cost})
        result["warp_kernel_cache"] = {**cache, "modules_after": warp.cached_modules()}
    return result
