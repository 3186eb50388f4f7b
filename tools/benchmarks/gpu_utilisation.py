"""One GPU's utilisation and memory, sampled once a second in a background process while something runs.

``python -m benchmarks.gpu_utilisation ARGS`` prints ``utilisation %, memory MiB`` lines (the format of
``nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader,nounits``) for the GPU
``UUID`` until it is stopped or the process that started it dies (``benchmarks.children``'s launcher):
through NVML (``pynvml``) where it is importable, else by becoming ``nvidia-smi -l 1`` (the
parent-death signal survives the exec, so a check killed at its time limit leaves no sampler
behind). ``Sampling`` runs it around a block and ``parse_samples`` reads what it printed.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.children import Child

SMI_QUERY = ("--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits", "-l", "1")


def sampler_args(uuid: str, nvml: bool, smi: str | None) -> list[str] | None:
    """How the sampler samples the GPU ``uuid`` (``main``'s arguments): NVML in Python
    (``nvml``: pynvml importable), else the program ``smi`` (nvidia-smi's path), else None (nothing
    here can sample a GPU)."""
    if nvml:
        return ["--nvml", uuid]
    if smi is not None:
        return [smi, *SMI_QUERY, "-i", uuid]
    return None


def sampler_here(uuid: str) -> list[str] | None:
    """``sampler_args`` on this machine."""
    return sampler_args(uuid, importlib.util.find_spec("pynvml") is not None, shutil.which("nvidia-smi"))


def parse_samples(text: str) -> list[tuple[float, float]]:
    """``(utilisation %, memory MiB)`` per line of two numbers; other lines (``[N/A]``, a warning) are skipped."""
    samples = []
    for line in text.splitlines():
        parts = [part.strip() for part in line.split(",")]
        try:
            utilisation, memory = (float(part) for part in parts)
        except ValueError:  # not two numbers
            continue
        samples.append((utilisation, memory))
    return samples


class Sampling:
    """Samples while the ``with`` block runs: the sampler with ``args`` (``sampler_args``) in a child
    process writing to ``path``; ``samples`` once the block is over."""

    def __init__(self, args: list[str], path: Path):
        self.args, self.path = args, path
        self.child: Child | None = None

    def __enter__(self) -> Sampling:
        self.child = Child([sys.executable, "-m", __name__, *self.args], "the GPU sampler", self.path,
                           dies_with_parent=True)
        return self

    def __exit__(self, *exc) -> None:
        self.child.stop()

    @property
    def proc(self) -> subprocess.Popen:
        return self.child.proc

    @property
    def samples(self) -> list[tuple[float, float]]:
        return parse_samples(self.path.read_text(errors="replace"))


def _nvml(uuid: str) -> None:
    import pynvml  # nvidia-ml-py: optional, only where it is installed

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByUUID(uuid.encode())
    while True:
        utilisation = pynvml.nvmlDeviceGetUtilizationRates(handle).gpu
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle).used / 2**20
        print(f"{utilisation}, {memory:.0f}", flush=True)
        time.sleep(1)


def main(rest: list[str]) -> None:
    """``--nvml UUID`` or ``PROGRAM ARGS...`` (nvidia-smi)."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # Sampling stops it: no traceback in the samples
    if rest[0] == "--nvml":
        _nvml(rest[1])
    else:
        os.execv(rest[0], rest)


if __name__ == "__main__":
    main(sys.argv[1:])
