"""Checkpoints as plain tensors and containers, loadable with ``torch.load(weights_only=True)``.

Written atomically (``torch.save`` into memory, then ``derl.fileio.atomic_write_bytes``): a reader
or a resumed run sees the previous checkpoint or the new one, never half a file. NumPy arrays are
stored as tensors; nothing is pickled beyond what the weights-only loader accepts.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import torch

from derl.fileio import atomic_write_bytes


def _tensors_for_numpy(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(obj))
    if isinstance(obj, dict):
        return {key: _tensors_for_numpy(value) for key, value in obj.items()}
    if isinstance(obj, list | tuple):
        return [_tensors_for_numpy(value) for value in obj]
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


def save_checkpoint(path: str | Path, state: dict[str, Any]) -> None:
    buffer = io.BytesIO()
    torch.save(_tensors_for_numpy(state), buffer)
    atomic_write_bytes(path, buffer.getvalue())


def load_checkpoint(path: str | Path, device: str | torch.device = "cpu") -> dict[str, Any]:
    """Loads a checkpoint with the weights-only unpickler; tensors land on ``device``."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint not found: {path}")
    return torch.load(path, map_location=device, weights_only=True)
