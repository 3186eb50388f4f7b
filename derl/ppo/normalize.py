"""Running statistics for observation and return normalisation (VecNormalize semantics).

Observations: ``(x - mean) / sqrt(var + eps)`` clipped to ``±clip``, statistics updated with every
batch of observations the envs return. Rewards: divided by the standard deviation of the running
discounted return (not centred), clipped to ``±clip``; the running return restarts at episode ends.
"""

from __future__ import annotations

import numpy as np

EPSILON = 1e-8
CLIP = 10.0


class RunningMeanStd:
    """Mean and variance of a stream of batches (parallel algorithm of Chan et al.).

    The count starts at ``1e-4`` as in DERL so the first batch dominates a zero prior.
    """

    def __init__(self, shape: tuple[int, ...] = ()):
        self.mean = np.zeros(shape, np.float64)
        self.var = np.ones(shape, np.float64)
        self.count = 1e-4

    def update(self, batch: np.ndarray) -> None:
        """Folds a batch ``[n, *shape]`` into the statistics (ufunc reductions: called every step)."""
        n = batch.shape[0]
        batch_mean = np.add.reduce(batch, axis=0, dtype=np.float64) / n
        centred = batch - batch_mean
        batch_var = np.add.reduce(centred * centred, axis=0) / n
        delta = batch_mean - self.mean
        total = self.count + n
        self.mean = self.mean + delta * (n / total)
        m2 = self.var * self.count + batch_var * n + delta**2 * (self.count * n / total)
        self.var = m2 / total
        self.count = total

    def state_dict(self) -> dict[str, np.ndarray | float]:
        return {"mean": self.mean.copy(), "var": self.var.copy(), "count": float(self.count)}

    def load_state_dict(self, state: dict) -> None:
        self.mean = np.asarray(state["mean"], np.float64).copy()
        self.var = np.asarray(state["var"], np.float64).copy()
        self.count = float(state["count"])


class ObsNormalizer:
    """Normalises the columns ``[start, stop)`` of flat observations; other columns pass through.

    DERL normalises only the ``proprioceptive`` key (height maps and object vectors stay raw).
    """

    def __init__(self, start: int, stop: int):
        self.start, self.stop = start, stop
        self.rms = RunningMeanStd((stop - start,))
        self._refresh()

    def _refresh(self) -> None:
        self._mean = self.rms.mean.astype(np.float32)
        self._inv_std = (1.0 / np.sqrt(self.rms.var + EPSILON)).astype(np.float32)

    def update(self, obs: np.ndarray) -> None:
        self.rms.update(obs[:, self.start : self.stop])
        self._refresh()

    def normalize(self, obs: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """Returns normalised observations ``[n, D]``, written into ``out`` when given."""
        if out is None:
            out = np.empty(obs.shape, np.float32)
        np.copyto(out, obs)
        part = out[:, self.start : self.stop]
        np.subtract(part, self._mean, out=part)
        np.multiply(part, self._inv_std, out=part)
        np.maximum(part, -CLIP, out=part)
        np.minimum(part, CLIP, out=part)
        return out

    def state_dict(self) -> dict:
        return self.rms.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.rms.load_state_dict(state)
        self._refresh()


class ReturnNormalizer:
    """Scales rewards by the running std of each env's discounted return."""

    def __init__(self, num_envs: int, gamma: float):
        self.gamma = gamma
        self.rms = RunningMeanStd()
        self.returns = np.zeros(num_envs, np.float64)

    def normalize(self, rewards: np.ndarray, dones: np.ndarray) -> np.ndarray:
        """Updates the statistics with this step's rewards and returns them scaled (float32)."""
        self.returns = self.returns * self.gamma + rewards
        self.rms.update(self.returns)
        self.returns[dones] = 0.0
        scaled = rewards / np.sqrt(self.rms.var + EPSILON)
        return np.minimum(np.maximum(scaled, -CLIP), CLIP).astype(np.float32)

    def state_dict(self) -> dict:
        return self.rms.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.rms.load_state_dict(state)
