"""How many workers a node runs, and on which devices: its cores, its free memory and its GPUs'
free memory, at each worker's measured peak (or a default before any was measured).

``EVO.NUM_PROCESSES`` 0 takes as many as the node holds; a count above what it holds is refused in
one line (``resolve_num_processes``).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path

import psutil

from derl.checked_config import EvoCfg
from derl.config import ConfigError
from derl.evolution.folder.run_dir import RunDir
from derl.evolution.process import log
from derl.ppo.config import TrainerCfg

# Peak resident memory of one worker before any was measured in this OUT_DIR: the largest preset
# measured (ft.yml, 32 envs: 1.23 GB; vt 0.74 GB; mvt 0.53 GB) plus a margin.
DEFAULT_WORKER_MEMORY_BYTES = 1400 * 2**20
# GPU memory of one worker's learner before any was measured: a CUDA context (~500 MB) and DERL's
# small networks with their batches.
DEFAULT_WORKER_GPU_BYTES = 1024 * 2**20
# SIM.BACKEND warp adds this per world (PPO.NUM_ENVS): MuJoCo Warp's Data took 41-57 KiB a world for
# FT bodies of 2-8 limbs (nv 8-16) at SIM.NCONMAX 64 and SIM.NJMAX 256 (put_data on warp's CPU device,
# whose arrays have a GPU's sizes); about 4x that is a margin, not measured on a GPU, for larger
# bodies, the step's scratch and captured graph, and the world's rollout tensors. 4096 worlds: +1 GiB.
WARP_WORLD_GPU_BYTES = 256 * 2**10
# and this per worker: the CUDA modules MuJoCo Warp loads for a morphology (about 40, specialised per
# model: tools/benchmarks/sim.py's new_morphology counts them) and its three captured graphs (step, reset,
# forward; derl.envs.warp_physics) with their memory-pool allocations. Not measured on a GPU: the
# margin of a few MB per module; `make gpu-check` measures it against this estimate.
WARP_MODEL_GPU_BYTES = 192 * 2**20
# Workers a node may run per worker slot (VECENV.THREADS cores): some oversubscription pays while
# workers wait on the shared folder or build MJCF; beyond it they only share the cores and hold memory.
MAX_WORKERS_PER_CORE = 4
# Where CUDA's MPS control daemon keeps its pipes unless CUDA_MPS_PIPE_DIRECTORY says otherwise (NVIDIA's MPS docs).
MPS_PIPE_DIRECTORY = "/tmp/nvidia-mps"


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def resolve_num_processes(requested: int, cores: int, available_bytes: int, total_bytes: int,
                          per_worker_bytes: int) -> int:
    """This node's worker count: ``requested``, or with 0 as many as both the cores (a worker per
    ``VECENV.THREADS`` cores, counted by the caller) and the free memory hold (at least 1).

    Raises:
        ConfigError: ``requested`` is more than ``MAX_WORKERS_PER_CORE`` per core, or more than the
            node's whole memory (``total_bytes``) holds at ``per_worker_bytes`` each: such a node
            would thrash or be killed by the kernel's OOM killer with slots claimed, not run faster.
    """
    if requested < 0:
        raise ValueError(f"EVO.NUM_PROCESSES must be >= 0, got {requested}")
    if requested == 0:
        return max(1, min(cores, available_bytes // per_worker_bytes))
    by_cores, by_memory = cores * MAX_WORKERS_PER_CORE, max(1, total_bytes // per_worker_bytes)
    if requested > min(by_cores, by_memory):
        raise ConfigError(f"config key EVO.NUM_PROCESSES {requested} is more than this node holds: "
                          f"{by_cores} by its cores ({MAX_WORKERS_PER_CORE} workers per VECENV.THREADS usable "
                          f"cores), {by_memory} by its memory ({total_bytes / 2**30:.1f} GB, "
                          f"{per_worker_bytes / 2**20:.0f} MB per worker); use at most {min(by_cores, by_memory)}, "
                          "or 0 for as many as it holds", "EVO.NUM_PROCESSES")
    return requested


def worker_memory_estimate(run: RunDir, node: int, key: str = "peak_rss_bytes",
                           default: int = DEFAULT_WORKER_MEMORY_BYTES) -> tuple[int, str]:
    """Memory to reserve per worker: the largest peak this node's workers reported in an earlier session.

    ``key`` is ``peak_rss_bytes`` (RAM) or ``peak_gpu_bytes`` (GPU memory, with ``default``
    ``default_worker_gpu_bytes``).
    """
    peaks = [getattr(state, key) for state in run.workers.states() if state.node == node]
    if peaks and max(peaks) > 0:
        return int(1.2 * max(peaks)), "measured peak of this node's workers + 20%"
    return default, "default until workers have been measured"


def default_worker_gpu_bytes(backend: str, num_envs: int) -> int:
    """GPU memory to reserve per worker before any was measured: the learner's, plus with
    ``SIM.BACKEND warp`` ``num_envs`` worlds of MuJoCo Warp (``WARP_WORLD_GPU_BYTES`` each) and a
    morphology's modules and graphs (``WARP_MODEL_GPU_BYTES``)."""
    worlds = num_envs * WARP_WORLD_GPU_BYTES + WARP_MODEL_GPU_BYTES if backend == "warp" else 0
    return DEFAULT_WORKER_GPU_BYTES + worlds


def worker_devices(evo: EvoCfg, trainer: TrainerCfg, run: RunDir, num: int, *, node: int,
                   sim_backend: str) -> tuple[list[str], int]:
    """Each worker's ``DEVICE`` (``trainer.DEVICE``, round-robin over the visible GPUs) and the worker
    count GPUs allow.

    With ``NUM_PROCESSES 0`` and CUDA workers, ``num`` shrinks until each GPU's free memory holds
    its share of workers at their measured GPU peak (before any: ``default_worker_gpu_bytes`` of
    ``sim_backend``, ``SIM.BACKEND``, and ``PPO.NUM_ENVS``), as ``node``'s workers reported it. Torch is
    imported only for a non-CPU device.
    """
    device = trainer.DEVICE
    if device == "cpu":
        return ["cpu"] * num, num
    from derl.ppo.device import assign_device, gpu_free_memory, max_workers_on_gpus, visible_gpu_count

    gpus = visible_gpu_count()
    if evo.NUM_PROCESSES == 0 and gpus > 0 and assign_device(device, 0, gpus).startswith("cuda"):
        free = gpu_free_memory()
        if free is None or len(free) != gpus:
            log("NUM_PROCESSES 0: GPU free memory unknown (nvidia-smi failed); counting cores and RAM only")
        else:
            default = default_worker_gpu_bytes(sim_backend, trainer.PPO.NUM_ENVS)
            per_gpu, source = worker_memory_estimate(run, node, "peak_gpu_bytes", default)
            fit = max(1, max_workers_on_gpus(free, per_gpu))
            if fit < num:
                log(f"NUM_PROCESSES 0: {gpus} GPUs with {sum(free) / 2**30:.1f} GB free hold {fit} workers "
                    f"({per_gpu / 2**20:.0f} MB each, {source})")
                num = fit
    return [assign_device(device, worker, gpus) for worker in range(num)], num


def mps_running(environ: Mapping[str, str]) -> bool:
    """Whether a CUDA MPS control daemon serves processes started with ``environ``: its ``control`` pipe
    (a FIFO, or a UNIX socket in recent drivers) in ``CUDA_MPS_PIPE_DIRECTORY`` (default
    ``MPS_PIPE_DIRECTORY``). Without it, workers sharing a GPU take turns on it instead of running their
    kernels at once. The pipe is looked at, never opened: one that a killed daemon left behind reads as on."""
    folder = environ.get("CUDA_MPS_PIPE_DIRECTORY") or MPS_PIPE_DIRECTORY
    try:
        mode = (Path(folder) / "control").stat().st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def mps_note(devices: list[str], environ: Mapping[str, str]) -> str:
    """What the coordinator's device line says of MPS: nothing unless a worker uses CUDA."""
    if not any(device.startswith("cuda") for device in devices):
        return ""
    if mps_running(environ):
        return "; MPS: on"
    return ("; MPS: off, workers sharing a GPU take turns (start it with nvidia-cuda-mps-control -d: "
            "docs/guides/gpus.md#many-small-trainers-per-gpu)")


def worker_count(evo: EvoCfg, run: RunDir, *, node: int, vecenv_threads: int) -> int:
    """``resolve_num_processes`` of ``EVO.NUM_PROCESSES`` on this node's cores (a worker per
    ``vecenv_threads``, ``VECENV.THREADS``) and memory (at the peak ``node``'s workers reported); a count
    of 0 is logged with why."""
    memory = psutil.virtual_memory()
    per_worker, source = worker_memory_estimate(run, node)
    cores = max(1, usable_cores() // vecenv_threads)  # each worker steps its envs on THREADS cores
    num = resolve_num_processes(evo.NUM_PROCESSES, cores, memory.available, memory.total, per_worker)
    if evo.NUM_PROCESSES == 0:
        log(f"NUM_PROCESSES 0: using {num} workers ({usable_cores()} cores, VECENV.THREADS "
            f"{vecenv_threads}, {memory.available / 2**30:.1f} GB free, "
            f"{per_worker / 2**20:.0f} MB per worker, {source})")
    return num
