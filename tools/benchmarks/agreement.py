"""Does one way of training rank bodies as another does? Pure statistics over per-body fitnesses.

Selection in DERL is a tournament: the best of ``NUM_PARTICIPANTS`` (4) bodies of the aging window
becomes a parent. So what a change of preset must keep is the *order* of bodies, not their fitness
values: Spearman's rho and Kendall's tau between two fitness vectors over the same bodies, and the
share of 4-body tournaments whose winner is the same under both. The ceiling is the reference's own
noise: two seeds of the same preset agree only so far (``seed_agreement``).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence

import numpy as np
from scipy import stats

MAX_TOURNAMENTS = 5000  # all 4-body draws up to this many (C(12, 4) = 495); a seeded sample beyond


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rank correlation (ties averaged); NaN for fewer than 3 bodies or a constant vector."""
    return _correlation(stats.spearmanr, a, b)


def kendall(a: Sequence[float], b: Sequence[float]) -> float:
    """Kendall's tau-b; NaN as ``spearman``."""
    return _correlation(stats.kendalltau, a, b)


def _correlation(method, a: Sequence[float], b: Sequence[float]) -> float:
    a, b = np.asarray(a, float), np.asarray(b, float)
    if len(a) != len(b):
        raise ValueError(f"fitness vectors of {len(a)} and {len(b)} bodies")
    if len(a) < 3 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return math.nan
    return float(method(a, b)[0])


@functools.cache
def tournaments(bodies: int, size: int = 4, seed: int = 0) -> np.ndarray:
    """``[T, size]`` body indices: every ``size``-subset when there are at most ``MAX_TOURNAMENTS``,
    else ``MAX_TOURNAMENTS`` random draws without replacement within a tournament."""
    if bodies < size:
        raise ValueError(f"a tournament of {size} needs at least {size} bodies, got {bodies}")
    if math.comb(bodies, size) <= MAX_TOURNAMENTS:
        draws = np.array(list(itertools.combinations(range(bodies), size)))
    else:
        rng = np.random.default_rng(seed)
        draws = np.array([rng.choice(bodies, size, replace=False) for _ in range(MAX_TOURNAMENTS)])
    draws.flags.writeable = False  # cached: every caller shares it
    return draws


def tournament_agreement(a: Sequence[float], b: Sequence[float], size: int = 4, larger_is_better: bool = True
                         ) -> float:
    """The share of ``size``-body tournaments whose winner under ``a`` is the winner under ``b``."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    sign = 1.0 if larger_is_better else -1.0
    draws = tournaments(len(a), size)
    winners_a = draws[np.arange(len(draws)), np.argmax(sign * a[draws], axis=1)]
    winners_b = draws[np.arange(len(draws)), np.argmax(sign * b[draws], axis=1)]
    return float(np.mean(winners_a == winners_b))


def agreement(candidate: Sequence[float], references: Sequence[Sequence[float]], size: int = 4,
              larger_is_better: bool = True) -> dict[str, float]:
    """A candidate's agreement with each reference seed, averaged over the seeds: one run against one
    run, as the ceiling (``seed_agreement``) compares; and ``fitness_ratio``, the candidate's mean
    fitness over the reference's (all seeds)."""
    rows = [{"spearman": spearman(candidate, ref), "kendall": kendall(candidate, ref),
             "tournament_agreement": tournament_agreement(candidate, ref, size, larger_is_better)}
            for ref in references]
    result = {key: float(np.mean([row[key] for row in rows])) for key in rows[0]}
    mean_reference = float(np.mean(references))
    result["fitness_ratio"] = float(np.mean(candidate)) / mean_reference if mean_reference else math.nan
    return result


def seed_agreement(references: Sequence[Sequence[float]], size: int = 4, larger_is_better: bool = True
                   ) -> dict[str, float]:
    """The reference against itself: every pair of its seeds, averaged (DERL's own noise: the ceiling)."""
    pairs = list(itertools.combinations(range(len(references)), 2))
    if not pairs:
        raise ValueError("the ceiling needs at least two seeds of the reference")
    rows = [{"spearman": spearman(references[i], references[j]), "kendall": kendall(references[i], references[j]),
             "tournament_agreement": tournament_agreement(references[i], references[j], size, larger_is_better)}
            for i, j in pairs]
    return {f"seed_{key}": float(np.mean([row[key] for row in rows])) for key in rows[0]}


def bootstrap(references: Sequence[Sequence[float]], size: int = 4, larger_is_better: bool = True,
              resamples: int = 2000, candidate: Sequence[float] | None = None, seed: int = 0
              ) -> dict[str, list[float]]:
    """95% percentile intervals over bodies: ``resamples`` draws of the bodies with replacement, each
    scored as the whole set is. ``seed_<figure>_ci`` for the reference's seeds against each other
    (``seed_agreement``); with a ``candidate``, ``<figure>_ci`` for it (``agreement``) and
    ``tournament_gap_ci``, DERL's seed-to-seed tournament agreement less the candidate's, paired
    within each draw. A draw too small to rank (a single body drawn throughout) counts as missing."""
    refs = np.asarray(references, float)
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(resamples):
        draw = rng.integers(0, refs.shape[1], refs.shape[1])
        row = seed_agreement(refs[:, draw], size, larger_is_better)
        if candidate is not None:
            row.update(agreement(np.asarray(candidate, float)[draw], refs[:, draw], size, larger_is_better))
            row["tournament_gap"] = row["seed_tournament_agreement"] - row["tournament_agreement"]
        rows.append(row)
    return {f"{key}_ci": [float(v) for v in np.nanpercentile([row[key] for row in rows], [2.5, 97.5])]
            for key in rows[0]}
