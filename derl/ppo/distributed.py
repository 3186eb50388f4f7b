"""Data-parallel PPO: the process group and the few collectives one training run needs.

``torchrun`` starts N ranks and sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and
``MASTER_PORT``; ``ProcessGroup`` reads them, joins the group (``nccl`` for CUDA, ``gloo`` on the
CPU) and leaves it on exit. A run without those variables is one rank and every collective is
the identity, so the trainer has a single code path.

What crosses ranks, and when (every rank reaches every collective in the same order):

- per minibatch: one all-reduce of the flat gradient buffer, with the minibatch's approximate KL
  appended, so the gradients are averaged and the KL early stop is one joint decision;
- per iteration: the observation and return normalisers' new statistics, the global mean and
  standard deviation of the advantages, the episodes finished, the loss statistics and the stop
  request;
- at a checkpoint: each rank's action-noise generator state (rank 0 writes the file);
- at a resume: rank 0 reads the checkpoint and broadcasts it.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from derl.ppo.normalize import MeanStdState, Moments, combine

TIMEOUT = datetime.timedelta(minutes=30)


@dataclass(frozen=True)
class RankInfo:
    """This process's place in the run: rank, number of ranks, rank on this machine."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> RankInfo:
        """Reads ``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK`` (set by ``torchrun``); absent: one rank.

        Raises:
            ValueError: inconsistent values.
        """
        environ = os.environ if environ is None else environ
        try:
            world = int(environ.get("WORLD_SIZE", "1"))
            rank = int(environ.get("RANK", "0"))
            local = int(environ.get("LOCAL_RANK", str(rank)))
        except ValueError:
            raise ValueError("RANK, WORLD_SIZE and LOCAL_RANK must be integers") from None
        if world < 1 or not 0 <= rank < world or local < 0:
            raise ValueError(f"bad torchrun variables: RANK={rank} WORLD_SIZE={world} LOCAL_RANK={local}")
        return cls(rank, world, local)


def backend_for(device: torch.device) -> str:
    return "nccl" if device.type == "cuda" else "gloo"


class Comm:
    """Collectives over the ranks of one run; with one rank every method is the identity.

    ``device`` is where collective tensors live: the learner's CUDA device with ``nccl``, the
    CPU with ``gloo``.
    """

    def __init__(self, info: RankInfo | None = None, device: torch.device | None = None):
        self.info = info or RankInfo()
        nccl = device is not None and backend_for(device) == "nccl" and self.info.world_size > 1
        self.device = device if nccl else torch.device("cpu")

    @property
    def rank(self) -> int:
        return self.info.rank

    @property
    def world_size(self) -> int:
        return self.info.world_size

    @property
    def is_main(self) -> bool:
        return self.info.is_main

    def sum_(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sums ``tensor`` over the ranks, in place (it must live on ``self.device``)."""
        if self.world_size > 1:
            dist.all_reduce(tensor)
        return tensor

    def mean_(self, tensor: torch.Tensor) -> torch.Tensor:
        """Averages ``tensor`` over the ranks, in place (it must live on ``self.device``)."""
        if self.world_size > 1:
            self.sum_(tensor).div_(self.world_size)
        return tensor

    def sum(self, values: np.ndarray) -> np.ndarray:
        """Sum over the ranks of a small float64 array (returned as a new array)."""
        if self.world_size == 1:
            return np.array(values, np.float64)
        stacked = self.gather(values)
        return stacked.sum(axis=0)  # the same order on every rank: identical results everywhere

    def gather(self, values: np.ndarray) -> np.ndarray:
        """Every rank's copy of a small float64 array, stacked in rank order: ``[world, *shape]``."""
        array = np.asarray(values, np.float64)
        if self.world_size == 1:
            return array[None].copy()
        local = torch.from_numpy(np.ascontiguousarray(array)).to(self.device)
        parts = [torch.empty_like(local) for _ in range(self.world_size)]
        dist.all_gather(parts, local)
        return torch.stack(parts).cpu().numpy()

    def gather_objects(self, obj: Any) -> list[Any]:
        """Every rank's picklable ``obj``, in rank order."""
        if self.world_size == 1:
            return [obj]
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def broadcast_object(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank."""
        if self.world_size == 1:
            return obj
        box = [obj if self.is_main else None]
        dist.broadcast_object_list(box, src=0, device=self.device)
        return box[0]

    def any(self, flag: bool) -> bool:
        """True on every rank if it is True on any rank."""
        if self.world_size == 1:
            return bool(flag)
        return bool(self.sum(np.array([float(flag)]))[0] > 0)

    def broadcast_(self, tensor: torch.Tensor) -> torch.Tensor:
        """Overwrites ``tensor`` with rank 0's (it must live on ``self.device``)."""
        if self.world_size > 1:
            dist.broadcast(tensor, src=0)
        return tensor

    def barrier(self) -> None:
        if self.world_size > 1:
            dist.barrier()


class ProcessGroup:
    """``with ProcessGroup(device) as comm:`` joins the ranks ``torchrun`` started, then leaves.

    One rank (no ``WORLD_SIZE`` or ``WORLD_SIZE=1``) starts no group. A group someone else
    initialised is used and left alone.
    """

    def __init__(self, device: torch.device, info: RankInfo | None = None):
        self.info = info or RankInfo.from_environ()
        self.device = device
        self._owned = False

    def __enter__(self) -> Comm:
        if self.info.world_size > 1 and not dist.is_initialized():
            if self.device.type == "cuda":
                torch.cuda.set_device(self.device)
            dist.init_process_group(
                backend_for(self.device), rank=self.info.rank, world_size=self.info.world_size, timeout=TIMEOUT,
            )
            self._owned = True
        return Comm(self.info, self.device)

    def __exit__(self, *exc: object) -> None:
        if self._owned and dist.is_initialized():
            dist.destroy_process_group()
        self._owned = False


# ----------------------------------------------------------------------------- normaliser merge
def _moments(rms_state: MeanStdState) -> Moments:
    count = float(rms_state["count"])
    mean = np.asarray(rms_state["mean"], np.float64)
    return count, mean, np.asarray(rms_state["var"], np.float64) * count


def subtract(total: Moments, base: Moments) -> Moments:
    """The statistics ``d`` with ``combine(base, d) == total``: what one rank added since ``base``."""
    count_t, mean_t, m2_t = total
    count_b, mean_b, m2_b = base
    count = count_t - count_b
    if count <= 0:
        return 0.0, np.zeros_like(mean_t), np.zeros_like(m2_t)
    mean = (count_t * mean_t - count_b * mean_b) / count
    m2 = m2_t - m2_b - (mean - mean_b) ** 2 * (count_b * count / count_t)
    return count, mean, np.maximum(m2, 0.0)


def merge_statistics(local: MeanStdState, base: MeanStdState, comm: Comm) -> MeanStdState:
    """``base`` plus every rank's data since ``base``: a ``RunningMeanStd`` state dict.

    ``base`` is the state all ranks shared (at the start, after a resume or after the last
    merge); each rank's ``local`` state has since folded in its own observations. Every rank
    computes the same merge from the same gathered numbers, in rank order, so the result is
    identical on all ranks and equals the statistics of the pooled data (Chan's merge is exact
    whatever the grouping).
    """
    if comm.world_size == 1:
        return local.copy()
    mean = np.asarray(local["mean"], np.float64)
    shape, size = mean.shape, mean.size
    row = np.concatenate([[float(local["count"])], mean.ravel(), np.asarray(local["var"], np.float64).ravel()])
    base_moments = _moments(base)
    merged = base_moments
    for rank_row in comm.gather(row):
        state: MeanStdState = {"count": rank_row[0], "mean": rank_row[1 : 1 + size].reshape(shape),
                               "var": rank_row[1 + size :].reshape(shape)}
        merged = combine(merged, subtract(_moments(state), base_moments))
    count, mean, m2 = merged
    return {"count": float(count), "mean": mean, "var": m2 / count}
