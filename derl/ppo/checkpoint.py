"""Checkpoints as plain tensors and containers, loadable with ``torch.load(weights_only=True)``.

Written atomically (``torch.save`` into memory, then ``derl.fileio.writes.atomic_write_bytes``): a reader
or a resumed run sees the previous checkpoint or the new one, never half a file. NumPy arrays are
stored as tensors; nothing is pickled beyond what the weights-only loader accepts.
"""

from __future__ import annotations

import io
import os
import warnings
from pathlib import Path
from typing import Any, Required, TypedDict, cast

import numpy as np
import torch

from derl.fileio.reads import open_file
from derl.fileio.writes import atomic_write_bytes
from derl.ppo.normalize import MeanStdState


class ModelSpec(TypedDict):
    """What a checkpoint's network was built for (``derl.ppo.trainer.PPO``): it loads only into the same."""

    layout: dict  # derl.ppo.obs_layout.ObsLayout.to_dict
    action_dim: int
    hidden: list[int]  # MODEL.PRO_HIDDEN_DIMS
    feat_hidden: list[int]  # MODEL.OBS_FEAT_HIDDEN_DIMS


class Checkpoint(TypedDict, total=False):
    """A checkpoint as ``derl.ppo.trainer.PPO.state_dict`` writes it. A version 1 file (one process) has
    ``action_rng`` where version 2 has one generator state per rank (``action_rngs``); ``load_checkpoint``
    checks only the keys every version has (``CHECKPOINT_KEYS``)."""

    version: Required[int]
    model_spec: Required[ModelSpec]
    model: Required[dict[str, torch.Tensor]]
    optimizer: dict
    obs_norm: MeanStdState
    ret_norm: MeanStdState
    episode_log: dict
    iteration: int
    env_steps: int
    world_size: int
    torch_rng: torch.Tensor
    action_rngs: list[str]
    action_rng: str
    metrics: list[dict]  # the records of iterations 1..iteration (rank 0's)


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


def save_checkpoint(path: str | Path, state: Checkpoint) -> None:
    """Writes ``state`` atomically and durably: the file and its rename are on disk when this returns.

    The trainer writes the metrics that describe a checkpoint only after it (``PPO.save``), so the
    folder's entry is synced too: after a power cut the metrics are never newer than the checkpoint.
    """
    buffer = io.BytesIO()
    torch.save(_tensors_for_numpy(state), buffer)
    atomic_write_bytes(path, buffer.getvalue())
    folder = os.open(Path(path).parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


class CheckpointError(ValueError):
    """A file that is not a readable derl checkpoint, or one that does not fit the run (message names it)."""


# Keys every derl checkpoint has (``derl.ppo.trainer.PPO.state_dict``); a file without them is not ours.
CHECKPOINT_KEYS = ("version", "model_spec", "model")


def load_checkpoint(path: str | Path, device: str | torch.device = "cpu") -> Checkpoint:
    """Loads a checkpoint with the weights-only unpickler; tensors land on ``device``.

    Raises:
        FileNotFoundError: no such file.
        NotRegularFile: a symbolic link, FIFO or folder (an OSError: the folder's problem).
        CheckpointError: the file does not load (truncated, corrupt, not torch) or is not derl's.
    """
    path = Path(path)
    try:  # never through a link or from a FIFO (NotRegularFile): a run folder is untrusted input
        file = os.fdopen(open_file(path), "rb")
    except FileNotFoundError:
        raise FileNotFoundError(f"checkpoint not found: {path}") from None
    try:
        with file, warnings.catch_warnings():  # torch warns about pickle protocols before it fails on a foreign file
            warnings.simplefilter("ignore")
            state = torch.load(file, map_location=device, weights_only=True)
    except OSError:
        raise
    except Exception as err:  # noqa: BLE001 - torch raises pickle, zip, EOF and runtime errors alike
        raise CheckpointError(f"{path}: not a readable checkpoint ({type(err).__name__})") from None
    if not isinstance(state, dict) or not all(key in state for key in CHECKPOINT_KEYS):
        raise CheckpointError(f"{path}: not a derl checkpoint (needs {', '.join(CHECKPOINT_KEYS)})")
    return cast(Checkpoint, state)  # the rest is judged where it is read (PPO.load_state_dict: its version first)
