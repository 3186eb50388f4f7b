"""Pure statistics over publication order: running best, aging-window mean, linear trend and its test."""

from __future__ import annotations

from dataclasses import dataclass

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


# A trend over the search is claimed only when a rank test supports it, over enough morphologies.
TREND_ALPHA = 0.05
TREND_MIN_POINTS = 30


@dataclass(frozen=True)
class TrendTest:
    """Spearman's rank correlation of ``y`` with ``x``, its two-sided p-value and the sample size."""

    rho: float
    p: float
    n: int

    def direction(self) -> int:
        """-1 or +1 when ``y`` falls or rises with ``x`` at p < TREND_ALPHA over at least
        TREND_MIN_POINTS points, else 0 (no trend the data support)."""
        if self.n < TREND_MIN_POINTS or not self.p < TREND_ALPHA:
            return 0
        return -1 if self.rho < 0 else 1


def trend_test(x: np.ndarray, y: np.ndarray) -> TrendTest | None:
    """Spearman's test of a monotonic trend of ``y`` over ``x``; None where it is undefined (fewer than
    three points, or ``x`` or ``y`` constant)."""
    from scipy.stats import spearmanr

    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return None
    result = spearmanr(x, y)
    return TrendTest(float(result.statistic), float(result.pvalue), len(x))
