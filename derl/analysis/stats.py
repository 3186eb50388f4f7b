"""Pure statistics over publication order: running best, aging-window mean, linear trend."""

from __future__ import annotations

import numpy as np


def running_best(values: np.ndarray, maximise: bool = True) -> np.ndarray:
    """Best value so far at each position (NaN-free input)."""
    return np.maximum.accumulate(values) if maximise else np.minimum.accumulate(values)


def window_mean(values: np.ndarray, window: int) -> np.ndarray:
    """Mean of the last ``window`` values at each position (fewer at the start).

    Example: values 1, 2, 3, 4 with window 2 -> 1, 1.5, 2.5, 3.5.
    """
    values = np.asarray(values, dtype=float)
    sums = np.cumsum(np.concatenate([[0.0], values]))
    ends = np.arange(1, len(values) + 1)
    starts = np.maximum(ends - window, 0)
    return (sums[ends] - sums[starts]) / (ends - starts)


def trend(x: np.ndarray, y: np.ndarray) -> tuple[float, float] | None:
    """Least-squares line ``y = slope x + intercept``; None with fewer than two distinct x."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) < 2 or np.ptp(x) == 0:
        return None
    slope, intercept = np.polyfit(x, y, 1)
    return float(slope), float(intercept)
