"""Running statistics for observation and return normalisation (VecNormalize semantics).

Observations: ``(x - mean) / sqrt(var + eps)`` clipped to ``±clip``, statistics updated with every
batch of observations the envs return. Rewards: divided by the standard deviation of the running
discounted return (not centred), clipped to ``±clip``; the running return restarts at episode ends.

Each normaliser keeps its statistics in NumPy (``device=None``: the collector of CPU envs) or as
float64 torch tensors on ``device`` (the collector of a device env, ``derl.ppo.rollout``);
the algorithm is the same code either way (``combine``), and so is the state dict (NumPy arrays
and a float), so a checkpoint loads into either.
"""

from __future__ import annotations

from typing import TypedDict

import numpy as np
import torch

# NumPy arrays or tensors (Any): which one follows the normaliser's device, a link mypy cannot follow.
from derl.arrays import Array

EPSILON = 1e-8
CLIP = 10.0
Moments = tuple[float, Array, Array]  # (count, mean, M2 = var * count)


class MeanStdState(TypedDict):
    """A ``RunningMeanStd``'s statistics, as a checkpoint holds them: NumPy arrays (a NumPy scalar for a
    scalar's) when written, tensors once a checkpoint is loaded."""

    mean: Array
    var: Array
    count: float


def combine(a: Moments, b: Moments) -> Moments:
    """Chan et al.'s merge of two sets of statistics: the moments of both sets' data together.

    Plain arithmetic, so NumPy arrays and torch tensors alike (``RunningMeanStd.update``, and the
    merge of the ranks' statistics in ``derl.ppo.distributed``).
    """
    count_a, mean_a, m2_a = a
    count_b, mean_b, m2_b = b
    total = count_a + count_b
    delta = mean_b - mean_a
    mean = mean_a + delta * (count_b / total)
    return total, mean, m2_a + m2_b + delta**2 * (count_a * count_b / total)


def _batch_moments(batch: Array) -> tuple[Array, Array]:
    """Mean and (population) variance over the first axis, in float64."""
    n = batch.shape[0]
    if isinstance(batch, torch.Tensor):
        batch_mean = batch.sum(0, dtype=torch.float64) / n
        centred = batch - batch_mean
        return batch_mean, (centred * centred).sum(0) / n
    batch_mean = np.add.reduce(batch, axis=0, dtype=np.float64) / n  # ufunc reductions: called every step
    centred = batch - batch_mean
    return batch_mean, np.add.reduce(centred * centred, axis=0) / n


class RunningMeanStd:
    """Mean and variance of a stream of batches (parallel algorithm of Chan et al.).

    The count starts at ``1e-4`` as in DERL so the first batch dominates a zero prior. The mean and
    variance are float64 NumPy arrays, or float64 tensors on ``device``; the count is a float
    (host-side bookkeeping: updating it never waits for a device).
    """

    def __init__(self, shape: tuple[int, ...] = (), device: torch.device | None = None):
        self.device = device
        self.mean = self.as_array(np.zeros(shape, np.float64))
        self.var = self.as_array(np.ones(shape, np.float64))
        self.count = 1e-4

    def as_array(self, values) -> Array:
        """``values`` as this object's float64 array (a copy)."""
        if self.device is None:
            return np.asarray(values, np.float64).copy()
        return torch.as_tensor(values, dtype=torch.float64).to(self.device, copy=True)

    def update(self, batch: Array) -> None:
        """Folds a batch ``[n, *shape]`` into the statistics."""
        n = batch.shape[0]
        batch_mean, batch_var = _batch_moments(batch)
        total, self.mean, m2 = combine((self.count, self.mean, self.var * self.count), (n, batch_mean, batch_var * n))
        self.var = m2 / total
        self.count = total

    def state_dict(self) -> MeanStdState:
        """NumPy arrays whatever the device (the checkpoint format)."""
        if self.device is None:
            return {"mean": self.mean.copy(), "var": self.var.copy(), "count": float(self.count)}

        def host(tensor: torch.Tensor) -> np.ndarray | np.float64:
            array = tensor.cpu().numpy()
            return array[()] if array.ndim == 0 else array  # a scalar's statistics are NumPy scalars there

        return {"mean": host(self.mean), "var": host(self.var), "count": float(self.count)}

    def load_state_dict(self, state: MeanStdState) -> None:
        """Takes NumPy arrays or tensors (a checkpoint loads them as tensors)."""
        self.mean = self.as_array(state["mean"])
        self.var = self.as_array(state["var"])
        self.count = float(state["count"])


class ObsNormalizer:
    """Normalises the columns ``[start, stop)`` of flat observations; other columns pass through.

    DERL normalises only the ``proprioceptive`` key (height maps and object vectors stay raw).
    Observations are float32 NumPy arrays, or float32 tensors on ``device``.
    """

    def __init__(self, start: int, stop: int, device: torch.device | None = None):
        self.start, self.stop = start, stop
        self.rms = RunningMeanStd((stop - start,), device)
        self._refresh()

    def _refresh(self) -> None:
        if self.rms.device is None:
            self._mean = self.rms.mean.astype(np.float32)
            self._inv_std = (1.0 / np.sqrt(self.rms.var + EPSILON)).astype(np.float32)
        else:
            self._mean = self.rms.mean.float()
            self._inv_std = (1.0 / torch.sqrt(self.rms.var + EPSILON)).float()

    def update(self, obs: Array) -> None:
        self.rms.update(obs[:, self.start : self.stop])
        self._refresh()

    def normalize(self, obs: Array, out: Array | None = None) -> Array:
        """Returns normalised observations ``[n, D]``, written into ``out`` when given."""
        if self.rms.device is not None:
            out = obs.clone() if out is None else out.copy_(obs)
            out[:, self.start : self.stop].sub_(self._mean).mul_(self._inv_std).clamp_(-CLIP, CLIP)
            return out
        if out is None:
            out = np.empty(obs.shape, np.float32)
        np.copyto(out, obs)
        part = out[:, self.start : self.stop]
        np.subtract(part, self._mean, out=part)
        np.multiply(part, self._inv_std, out=part)
        np.maximum(part, -CLIP, out=part)
        np.minimum(part, CLIP, out=part)
        return out

    def state_dict(self) -> MeanStdState:
        return self.rms.state_dict()

    def load_state_dict(self, state: MeanStdState) -> None:
        self.rms.load_state_dict(state)
        self._refresh()


class ReturnNormalizer:
    """Scales rewards by the running std of each env's discounted return (NumPy, or tensors on ``device``)."""

    def __init__(self, num_envs: int, gamma: float, device: torch.device | None = None):
        self.gamma = gamma
        self.rms = RunningMeanStd(device=device)
        self.returns = self.rms.as_array(np.zeros(num_envs))

    def normalize(self, rewards: Array, dones: Array) -> Array:
        """Updates the statistics with this step's rewards and returns them scaled (float32)."""
        self.returns = self.returns * self.gamma + rewards
        self.rms.update(self.returns)
        if self.rms.device is not None:
            self.returns.masked_fill_(dones, 0.0)  # no boolean indexing: it would wait for the device
            scaled = rewards.double() / torch.sqrt(self.rms.var + EPSILON)  # float64, as NumPy promotes
            return scaled.clamp(-CLIP, CLIP).float()
        self.returns[dones] = 0.0
        scaled = rewards / np.sqrt(self.rms.var + EPSILON)
        return np.minimum(np.maximum(scaled, -CLIP), CLIP).astype(np.float32)

    def state_dict(self) -> MeanStdState:
        return self.rms.state_dict()

    def load_state_dict(self, state: MeanStdState) -> None:
        self.rms.load_state_dict(state)
