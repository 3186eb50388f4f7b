"""What a node's coordinator and its worker processes agree on: exit codes, stop signals, the
worker lock, and the state file in which a worker reports its slot and peak memory.

Exit codes of a worker (docs/reference/commands.md): 0 no slot left, ``EXIT_CONFIG`` a fault of the
config found while training (``derl.evolution.failures.config_fault``: one line naming the key),
``EXIT_STOPPED`` stopped on request (``Stopped``: a signal, the STOP file, the coordinator gone),
``EXIT_FATAL`` a problem a restart cannot fix (``FatalError``), ``EXIT_ENVIRONMENT`` a failure that is not
the morphology's (``derl.evolution.failures``: a full disk, an I/O error, a missing device, a bug); its slot and
checkpoint stay as they were and the coordinator restarts the worker after a back-off.
"""

from __future__ import annotations

import fcntl
import os
import resource
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

from derl.evolution.folder.run_dir import RunDir
from derl.evolution.folder.worker_store import WorkerStatus

# The code of bad input (``derl.cli.EXIT_USAGE``, a floor above): a config fault a worker finds while training.
EXIT_CONFIG = 2
EXIT_FATAL = 3
EXIT_STOPPED = 4
EXIT_ENVIRONMENT = 5
# The coordinator's pid, set in each worker's environment: a worker whose parent changes stops.
COORDINATOR_PID_VARIABLE = "DERL_EVO_COORDINATOR_PID"
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
# GPU memory a CUDA context takes outside torch's allocator (driver, kernels), added to its peak.
CUDA_CONTEXT_BYTES = 500 * 2**20


class Stopped(Exception):
    """The worker was asked to stop; its slot stays claimed and resumes on restart (``EXIT_STOPPED``)."""


class FatalError(Exception):
    """A problem that restarting the worker would repeat (``EXIT_FATAL``)."""


def catch_stop_signals(handler: Callable[[int, Any], None]) -> dict[int, Any]:
    """Sends SIGINT and SIGTERM to ``handler``; returns the handlers they had, to restore."""
    return {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}


def peak_rss_bytes() -> int:
    """Peak resident memory of this worker and its finished subprocesses (Linux reports KiB)."""
    usage = [resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    return sum(usage) * 1024


def peak_gpu_bytes() -> int:
    """Peak GPU memory of this worker (0 if it never used CUDA); never imports torch or warp.

    Torch's allocator peak (the learner; the trainer set its device current), MuJoCo Warp's on that
    device (``SIM.BACKEND warp`` allocates outside torch's allocator: ``warp_peak_bytes``) and one
    CUDA context, which torch and warp share (both use the device's primary context).
    """
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return 0
    device = f"cuda:{torch.cuda.current_device()}"
    return torch.cuda.max_memory_reserved() + warp_peak_bytes(device) + CUDA_CONTEXT_BYTES


def warp_peak_bytes(device: str) -> int:
    """High-water mark of warp's memory pool on ``device`` (0 if this process never imported warp).

    Warp allocates from the device's CUDA memory pool where the device supports one (warp's
    default, ``wp.config.enable_mempools_at_init``); without a pool its allocations are not counted.
    """
    wp = sys.modules.get("warp")
    if wp is None or not wp.is_mempool_enabled(device):
        return 0
    return int(wp.get_mempool_used_mem_high(device))


def try_worker_lock(run: RunDir, node: int, worker: int) -> int | None:
    """The lock of worker ``node-worker`` if no process holds it (None if one does)."""
    fd = run.open_own_file(run.workers.lock_path(node, worker))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def hold_worker_lock(run: RunDir, node: int, worker: int) -> int:
    """Blocks until no other process runs as this worker (e.g. one still stopping), then holds the lock."""
    fd = try_worker_lock(run, node, worker)
    if fd is None:
        print(f"[worker {node}-{worker}] waiting for the previous worker {node}-{worker} to exit", flush=True)
        fd = run.open_own_file(run.workers.lock_path(node, worker))
        fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


class WorkerState:
    """This worker's ``workers/<node>-<worker>.json`` (slot, status, peak memory: ``tools/status.py`` shows
    it; the coordinator sizes the next session by the peaks) and its log lines.

    The peaks are kept across restarts; ``previous`` is the state an earlier session left (its slot
    is resumed first).
    """

    def __init__(self, run: RunDir, node: int, worker: int):
        self.run, self.node, self.worker = run, node, worker
        self.previous = run.workers.read_state(node, worker) or WorkerStatus(node=node, worker=worker)
        self.state: dict[str, Any] = {"slot": None, "id": None, "status": "starting",
                                      "peak_rss_bytes": self.previous.peak_rss_bytes,
                                      "peak_gpu_bytes": self.previous.peak_gpu_bytes}

    def write(self, **changes: Any) -> None:
        self.state.update(changes, node=self.node, worker=self.worker, pid=os.getpid(), updated=time.time(),
                          peak_rss_bytes=max(self.state["peak_rss_bytes"], peak_rss_bytes()),
                          peak_gpu_bytes=max(self.state["peak_gpu_bytes"], peak_gpu_bytes()))
        self.run.workers.write_state(WorkerStatus(**self.state))

    def log(self, message: str) -> None:
        print(f"[worker {self.node}-{self.worker}] {message}", flush=True)


def log(message: str) -> None:
    """A line of the coordinator's log (stdout), stamped with the time."""
    print(f"[coordinator {time.strftime('%H:%M:%S')}] {message}", flush=True)
