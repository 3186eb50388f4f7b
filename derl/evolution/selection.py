"""Parent selection: Pareto front and tournaments over a table of published results.

Pure functions: they take rows of criteria values and an ``np.random.Generator``
and return indices; they never touch the file system.

A *table* is an ``(n, k)`` array: one row per published morphology, one column
per entry of ``EVO.SELECTION_CRITERIA``. ``objectives`` holds one sign per
column: ``-1`` maximise, ``+1`` minimise (DERL's ``SELECTION_CRITERIA_OBJ``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from derl.checked_config import TOURNAMENT_TYPES


def pareto_mask(costs: np.ndarray) -> np.ndarray:
    """Marks the non-dominated rows of ``costs`` (every column minimised).

    Row ``j`` dominates row ``i`` when it is no worse in every column and better
    in one. Exact ties collapse to the first of the tied rows, so a morphology
    drawn twice into a tournament counts once.

    Args:
        costs: ``(n, k)`` array, ``n >= 1``.

    Returns:
        Boolean ``(n,)`` array, True for the Pareto-efficient rows.
    """
    costs = np.asarray(costs, dtype=float)
    if costs.ndim != 2 or len(costs) == 0:
        raise ValueError(f"pareto_mask expects a non-empty (n, k) array, got shape {costs.shape}")
    no_worse = np.all(costs[:, None, :] <= costs[None, :, :], axis=2)  # [j, i]: j no worse than i
    better = np.any(costs[:, None, :] < costs[None, :, :], axis=2)
    earlier = np.tri(len(costs), k=-1, dtype=bool).T  # [j, i]: j < i
    dominated = np.any(no_worse & (better | earlier), axis=0)
    return ~dominated


def criteria_table(fitness: Sequence[Mapping[str, float]], criteria: Sequence[str]) -> np.ndarray:
    """The table of the published morphologies whose fitness terms are ``fitness`` (each a
    ``PublishedRecord.fitness``): one row each, one column per criterion."""
    return np.array([[terms[key] for key in criteria] for terms in fitness], dtype=float)


def costs_from_table(table: np.ndarray, objectives: Sequence[float]) -> np.ndarray:
    """Turns criteria values into costs to minimise: ``objective * value`` per column."""
    table = np.asarray(table, dtype=float)
    signs = np.asarray(objectives, dtype=float)
    if table.ndim != 2 or table.shape[1] != len(signs):
        raise ValueError(
            f"selection table has shape {table.shape} but there are {len(signs)} objectives"
        )
    if not np.all(np.isin(signs, (-1.0, 1.0))):
        raise ValueError(f"SELECTION_CRITERIA_OBJ must hold -1 or 1, got {signs.tolist()}")
    return table * signs


def num_participants(tournament_type: str, num: int, percent: float, pool_size: int) -> int:
    """Participants per tournament: ``num`` for ``*_num``, ``max(2, percent% of pool)`` for ``*_percent``."""
    if tournament_type not in TOURNAMENT_TYPES:
        known = ", ".join(TOURNAMENT_TYPES)
        raise ValueError(f"unknown TOURNAMENT_TYPE {tournament_type!r}; use one of {known}")
    if tournament_type.endswith("_num"):
        if num < 1:
            raise ValueError(f"NUM_PARTICIPANTS must be at least 1, got {num}")
        return num
    return max(2, int(pool_size * percent / 100))


def aging_window(publication_numbers: Sequence[int], window_size: int) -> np.ndarray:
    """Indices of the ``window_size`` newest entries by publication number, oldest first.

    Publication numbers are taken by exclusive creation when a result is published
    (``PublicationStore.take_publication_number``), so they order the population as it was
    published, without file times or the clocks of several machines (DERL sorted
    by file time). Ordering by slot instead would let a morphology that is slow to
    train enter the window late yet leave it on schedule. Gaps are allowed.
    """
    if window_size < 1:
        raise ValueError(f"AGING_WINDOW_SIZE must be at least 1, got {window_size}")
    order = np.argsort(np.asarray(publication_numbers), kind="stable")
    return order[-window_size:]


def tournament(costs: np.ndarray, num: int, rng: np.random.Generator) -> tuple[int, np.ndarray]:
    """Draws ``num`` participants with replacement and returns a random Pareto-front member.

    Args:
        costs: ``(n, k)`` costs of the candidate pool (minimised).
        num: participants drawn uniformly, with replacement (as in DERL).
        rng: the caller's generator.

    Returns:
        ``(winner, participants)``: the winner's row index in ``costs`` and the
        drawn row indices (the first dominated participant is the one
        ``vanilla`` tournaments retire).
    """
    costs = np.asarray(costs, dtype=float)
    if len(costs) == 0:
        raise ValueError("tournament needs at least one published morphology")
    participants = rng.integers(0, len(costs), size=num)
    front = np.flatnonzero(pareto_mask(costs[participants]))
    return int(participants[rng.choice(front)]), participants


def first_dominated(costs: np.ndarray, participants: np.ndarray) -> int | None:
    """The first participant off the Pareto front, or None when all are on it.

    A morphology drawn twice counts once, so a front member is never retired
    for being tied with itself.
    """
    _, first_draws = np.unique(participants, return_index=True)
    distinct = np.asarray(participants)[np.sort(first_draws)]
    off_front = np.flatnonzero(~pareto_mask(np.asarray(costs, dtype=float)[distinct]))
    if len(off_front) == 0:
        return None
    return int(distinct[off_front[0]])
