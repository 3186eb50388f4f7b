"""``DEVICE`` key → ``torch.device``: the learner runs there, and so do envs that simulate on a device
(the trainer decides it once and hands it to the env factory, ``derl.ppo.trainer.PPO``)."""

from __future__ import annotations

import os
import re
import subprocess

import torch

from derl.config import ConfigError


class DeviceError(ValueError):
    """A ``DEVICE`` this machine does not have (a problem of the node, not of what trains on it)."""


def resolve_device(name: str) -> torch.device:
    """``cpu``, ``cuda``, ``cuda:N`` or ``auto`` (CUDA if available, else CPU).

    Raises:
        ValueError: unknown name, or a CUDA device this machine does not have.
    """
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cpu":
        return torch.device("cpu")
    match = re.fullmatch(r"cuda(?::(\d+))?", name)
    if match is None:
        raise DeviceError(f"DEVICE must be cpu, cuda, cuda:N or auto, got {name!r}")
    if not torch.cuda.is_available():
        raise DeviceError(f"DEVICE {name} requested but CUDA is not available on this machine")
    index = int(match.group(1) or 0)
    if index >= torch.cuda.device_count():
        raise DeviceError(f"DEVICE {name}: only {torch.cuda.device_count()} CUDA device(s) present")
    return torch.device("cuda", index)


def assign_device(name: str, index: int, gpu_count: int) -> str:
    """The device of evolution worker (or local rank) ``index`` on a node with ``gpu_count`` GPUs.

    ``cuda`` (and ``auto`` when a GPU is visible) spread the workers round-robin:
    ``cuda:(index mod gpu_count)``; ``cpu``, ``cuda:N`` and ``auto`` without a GPU are kept as
    they are (``auto`` becomes ``cpu``). ``gpu_count`` counts the GPUs this process sees, so
    ``CUDA_VISIBLE_DEVICES`` decides which physical GPUs take part.

    Raises:
        ValueError: ``cuda`` without a visible GPU, or an unknown name.
    """
    if name == "cpu" or (name == "auto" and gpu_count == 0):
        return "cpu"
    if name in ("cuda", "auto"):
        if gpu_count < 1:
            raise ValueError("DEVICE cuda requested but no CUDA device is visible (CUDA_VISIBLE_DEVICES?)")
        return f"cuda:{index % gpu_count}"
    if re.fullmatch(r"cuda:\d+", name) is None:
        raise DeviceError(f"DEVICE must be cpu, cuda, cuda:N or auto, got {name!r}")
    return name


def visible_gpu_count() -> int:
    """GPUs this process may use (``CUDA_VISIBLE_DEVICES`` applied); creates no CUDA context."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def parse_free_memory(nvidia_smi_csv: str, visible: str | None) -> list[int]:
    """Free bytes of each visible GPU, in CUDA's order, from ``nvidia-smi`` CSV output.

    Args:
        nvidia_smi_csv: ``nvidia-smi --query-gpu=index,uuid,memory.free --format=csv,noheader,nounits``
            (MiB per line).
        visible: ``CUDA_VISIBLE_DEVICES`` (None: every GPU); entries are indices or UUIDs (or
            their prefixes, as CUDA accepts); the list stops at the first invalid entry, as in CUDA.
    """
    rows = []
    for line in nvidia_smi_csv.strip().splitlines():
        index, uuid, free = (part.strip() for part in line.split(","))
        rows.append((index, uuid, int(float(free)) * 2**20))
    if visible is None:
        return [free for _, _, free in rows]
    chosen = []
    for entry in (e.strip() for e in visible.split(",")):
        match = [free for index, uuid, free in rows if entry and (entry == index or uuid.startswith(entry))]
        if not match:
            break
        chosen.append(match[0])
    return chosen


def gpu_free_memory() -> list[int] | None:
    """Free bytes of each visible GPU via ``nvidia-smi`` (no CUDA context); None if unavailable."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,uuid,memory.free", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout
        return parse_free_memory(out, os.environ.get("CUDA_VISIBLE_DEVICES"))
    except (OSError, subprocess.SubprocessError, ValueError):
        return None


def max_workers_on_gpus(free_bytes: list[int], per_worker_bytes: int) -> int:
    """Most workers that fit when worker ``w`` goes to GPU ``w mod len(free_bytes)``.

    GPU ``g`` then holds ``k // n + (g < k % n)`` of ``k`` workers; each must fit its free memory.
    """
    n = len(free_bytes)
    if n == 0:
        return 0
    fits = [free // max(per_worker_bytes, 1) for free in free_bytes]
    k = 0
    while all((k + 1) // n + (g < (k + 1) % n) <= fits[g] for g in range(n)):
        k += 1
    return k


def learner_device(name: str, local_rank: int, world_size: int) -> torch.device:
    """The learner's device for ``DEVICE`` ``name`` on one rank of a (possibly data-parallel) run.

    ``cuda`` and ``auto`` put local rank ``r`` on ``cuda:r``; one rank alone takes ``cuda:0``.
    Data-parallel ranks never share a GPU: NCCL refuses two ranks on one device.

    Raises:
        ValueError: as ``resolve_device``; or several ranks on one GPU (``cuda:N``, or more local
            ranks than visible GPUs).
    """
    if world_size > 1 and name.startswith("cuda:"):
        raise ValueError(f"DEVICE {name} with {world_size} ranks: use DEVICE cuda (rank r takes cuda:LOCAL_RANK)")
    if name in ("cuda", "auto"):
        gpus = visible_gpu_count()
        if world_size > 1 and 0 < gpus <= local_rank:
            raise DeviceError(f"DEVICE {name}: local rank {local_rank} but {gpus} GPU(s) visible; data-parallel "
                              "ranks cannot share a GPU (start one rank per GPU, or DEVICE cpu)")
        name = assign_device(name, local_rank, gpus)
    return resolve_device(name)


def check_device_here(device: str) -> None:
    """``DEVICE`` (``cuda`` or ``cuda:N``) exists on this machine: without a visible GPU it is an error."""
    gpus = visible_gpu_count()
    index = int(device.partition(":")[2] or 0)
    if index >= gpus:
        found = f"only {gpus} CUDA device(s) are visible" if gpus else "no CUDA device is visible on this node"
        raise ConfigError(f"config key DEVICE {device}: {found} (use DEVICE cpu or auto)", "DEVICE")
