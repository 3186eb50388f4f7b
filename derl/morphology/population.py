"""The initial population: 10x random candidates, look-alikes removed ("species").

Two genomes are the same species (DERL's rule, not graph isomorphism) when they
have the same limb count and the optimal assignment of their limbs' rotation
matrices costs less than 0.2 (sum of Euclidean distances); species are the
connected components of that relation.

DERL compared all pairs (16.6 M assignments for 5,760 candidates). Here equal
multisets of matrices are merged by hashing first, and the assignment is solved
only for pairs whose matrix sums differ by less than the threshold: by the
triangle inequality ``cost >= |sum A - sum B|``, so no same-species pair is missed.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable, Sequence

import numpy as np
from scipy.optimize import linear_sum_assignment
from scipy.spatial.distance import cdist

from derl.lifetime import map_in_processes
from derl.morphology.config import UnimalCfg
from derl.morphology.genome import Genome
from derl.morphology.geometry import rotation_signature
from derl.morphology.mutations import random_genome
from derl.progress import progress_bar

SPECIES_THRESHOLD = 0.2
CANDIDATES_PER_MEMBER = 10


def assignment_cost(a: np.ndarray, b: np.ndarray) -> float:
    """Minimum total Euclidean distance matching the rows of ``a`` to the rows of ``b``."""
    cost = cdist(a, b)
    rows, cols = linear_sum_assignment(cost)
    return float(cost[rows, cols].sum())


class _UnionFind:
    def __init__(self, size: int):
        self.parent = list(range(size))

    def find(self, k: int) -> int:
        while self.parent[k] != k:
            self.parent[k] = self.parent[self.parent[k]]
            k = self.parent[k]
        return k

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        self.parent[max(ra, rb)] = min(ra, rb)  # the root is the smallest index


def species_labels(signatures: Sequence[np.ndarray], threshold: float = SPECIES_THRESHOLD) -> list[int]:
    """For each signature ([num_limbs, 9] rotation matrices), the smallest index of its species."""
    groups = _UnionFind(len(signatures))
    first_of_multiset: dict[tuple, int] = {}
    for k, sig in enumerate(signatures):
        key = (len(sig), tuple(sorted(map(tuple, np.round(sig, 6) + 0.0))))
        if key in first_of_multiset:
            groups.union(first_of_multiset[key], k)
        else:
            first_of_multiset[key] = k
    by_count: dict[int, list[int]] = defaultdict(list)
    for k in first_of_multiset.values():
        by_count[len(signatures[k])].append(k)
    for members in by_count.values():
        sums = np.stack([signatures[k].sum(axis=0) for k in members])
        close = np.argwhere(np.triu(cdist(sums, sums) < threshold, k=1))
        for i, j in close:
            a, b = members[i], members[j]
            if groups.find(a) != groups.find(b) and assignment_cost(signatures[a], signatures[b]) < threshold:
                groups.union(a, b)
    return [groups.find(k) for k in range(len(signatures))]


def _candidate(unimal: UnimalCfg, seed: np.random.SeedSequence, index: int) -> Genome:
    return random_genome(unimal, np.random.default_rng(seed), f"candidate-{index}")


def _candidate_job(job: tuple[UnimalCfg, np.random.SeedSequence, int]) -> Genome:
    return _candidate(*job)


def _build_candidates(unimal: UnimalCfg, seeds: Sequence[np.random.SeedSequence], num_workers: int) -> list[Genome]:
    # minutes at DERL's 5,760 candidates: a progress bar
    with progress_bar(len(seeds), "initial population candidates", unit="genome") as bar:
        if num_workers <= 1:
            candidates = []
            for k, s in enumerate(seeds):
                candidates.append(_candidate(unimal, s, k))
                bar.update(1)
            return candidates
        # Pool processes die with this one, also on SIGKILL; leaving the call (an interrupt included)
        # kills and reaps them within seconds (``derl.lifetime``: never ``multiprocessing.Pool``, whose
        # terminate() can hang for good).
        jobs = [(unimal, s, k) for k, s in enumerate(seeds)]
        batch = max(1, min(64, len(seeds) // (num_workers * 8)))
        return map_in_processes(_candidate_job, jobs, num_workers, batch=batch, done=bar.update)


def initial_population(
    unimal: UnimalCfg,
    seed: int,
    size: int,
    ids: Sequence[str] | Callable[[int], str],
    num_workers: int = 1,
) -> list[Genome]:
    """``size`` genomes from ``10 * size`` limb-count candidates, one per species first.

    Candidate k is built from ``SeedSequence(seed).spawn(...)[k]``, so the result does
    not depend on ``num_workers``. One member per species (the earliest candidate) is
    kept; too many species are trimmed at random, too few are padded with random
    other candidates (look-alikes, but distinct genomes).

    Args:
        ids: the ids of the returned genomes, as a sequence of ``size`` unique strings
            or a function of the position 0..size-1.
    """
    if size < 1:
        raise ValueError(f"population size must be at least 1, got {size}")
    names = [ids(i) for i in range(size)] if callable(ids) else list(ids)
    if len(names) != size or len(set(names)) != size:
        raise ValueError(f"initial_population needs {size} unique ids, got {len(set(names))} unique of {len(names)}")
    count = CANDIDATES_PER_MEMBER * size
    *seeds, selection_seed = np.random.SeedSequence(seed).spawn(count + 1)
    candidates = _build_candidates(unimal, seeds, num_workers)
    labels = species_labels([rotation_signature(g) for g in candidates])
    chosen = select_members(labels, size, np.random.default_rng(selection_seed))
    return [dataclasses.replace(candidates[k], id=name) for k, name in zip(chosen, names, strict=True)]


def select_members(labels: Sequence[int], size: int, rng: np.random.Generator) -> list[int]:
    """One index per species (trimmed at random to ``size``), padded with random others."""
    representatives = [k for k, label in enumerate(labels) if label == k]
    if len(representatives) >= size:
        return sorted(int(k) for k in rng.choice(representatives, size, replace=False))
    others = [k for k, label in enumerate(labels) if label != k]
    padding = sorted(int(k) for k in rng.choice(others, size - len(representatives), replace=False))
    return representatives + padding
