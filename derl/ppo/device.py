"""``DEVICE`` key → ``torch.device``: the learner runs there; envs stay on the CPU."""

from __future__ import annotations

import re

import torch


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
        raise ValueError(f"DEVICE must be cpu, cuda, cuda:N or auto, got {name!r}")
    if not torch.cuda.is_available():
        raise ValueError(f"DEVICE {name} requested but CUDA is not available on this machine")
    index = int(match.group(1) or 0)
    if index >= torch.cuda.device_count():
        raise ValueError(f"DEVICE {name}: only {torch.cuda.device_count()} CUDA device(s) present")
    return torch.device("cuda", index)
