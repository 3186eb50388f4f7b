"""The benchmarks' statistics over repeated measurements, in one place.

On a shared machine a run's speed drifts by tens of percent between minutes, so two things
measured minutes apart are compared by ratios taken *within* a pair (a repeat, or an iteration of
each, that ran both one after the other), then the median of those ratios (``paired_median``),
quoted beside the unpaired ratio of totals (``ratio_of_totals``). Results over seeds (returns) are
a mean with its standard deviation (``over_seeds``).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence

import numpy as np


def paired_ratios(numerators: Sequence[float], denominators: Sequence[float]) -> list[float]:
    """``numerators[i] / denominators[i]`` for each pair (both of one repeat)."""
    return [a / b for a, b in zip(numerators, denominators, strict=True)]


def paired_median(numerators: Sequence[float], denominators: Sequence[float], digits: int = 3) -> float:
    """The median of the within-pair ratios, rounded: the figure to quote on a shared machine."""
    return median(paired_ratios(numerators, denominators), digits)


def ratio_of_totals(numerators: Sequence[float], denominators: Sequence[float], digits: int = 4) -> float:
    """``sum(numerators) / sum(denominators)``: the unpaired figure beside the paired median."""
    return round(sum(numerators) / sum(denominators), digits)


def median(values: Iterable[float], digits: int = 3) -> float:
    """The median, rounded (a benchmark's figure over its bodies or repeats)."""
    return round(float(statistics.median(values)), digits)


def over_seeds(finals: Sequence[float]) -> dict:
    """Results of one setting over seeds: each, their mean and standard deviation."""
    return {"final_returns": list(finals), "mean": float(np.mean(finals)), "std": float(np.std(finals))}
