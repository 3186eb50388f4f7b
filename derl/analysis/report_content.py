"""What the report's sections compute and say, apart from their HTML (``derl.analysis.report``):
the Baldwin verdict of the learning speeds, the fitness terms worth a column, the episode lengths and
caption under the top morphologies' curves, and the transfer table of ``eval/summary.json``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from derl.analysis.curves import Curve
from derl.analysis.run import RunView
from derl.analysis.stats import TREND_ALPHA, TREND_MIN_POINTS, trend_test
from derl.ppo.config import PpoCfg
from derl.ppo.episodes import EPISODES_PER_POINT


def baldwin_verdict(order: np.ndarray, iterations: np.ndarray) -> str:
    """What the learning speeds say about a Baldwin effect: a claim only where Spearman's test of
    iterations against publication order supports it (p < TREND_ALPHA over TREND_MIN_POINTS+ morphologies)."""
    test = trend_test(order, iterations)
    if test is None:
        return "Too few distinct points for a test of a trend."
    figures = f"Spearman's rho {test.rho:+.2f}, p = {test.p:.2g}, n = {test.n}"
    verdict = {-1: "Later morphologies learn faster: a Baldwin effect",
               1: "Later morphologies learn more slowly: no Baldwin effect"}.get(test.direction())
    if verdict is not None:
        return f"{verdict} ({figures})."
    return (f"No trend the data support ({figures}; a claim needs p < {TREND_ALPHA} over at least "
            f"{TREND_MIN_POINTS} morphologies).")


def varying_terms(view: RunView) -> tuple[list[tuple[str, ...]], dict[str, float]]:
    """The fitness terms that differ between the run's morphologies, terms equal for every morphology
    grouped into one column (``metric`` is ``x_pos`` on locomotion), and the constant ones with their
    value (``__reward__stand`` is 0 for every body on a task that does not reward standing)."""
    values: dict[str, tuple] = {}
    for term in sorted({t for record in view.records for t in record.fitness}):
        values[term] = tuple(record.fitness.get(term) for record in view.records)
    constant = {t: v[0] for t, v in values.items() if len(set(v)) == 1 and v[0] is not None and len(view) > 1}
    groups: dict[tuple, list[str]] = {}
    for term, column in values.items():
        if term not in constant:
            groups.setdefault(column, []).append(term)
    return [tuple(group) for group in groups.values()], constant


def episode_lengths(curves: Iterable[Curve], longest: int) -> list[float]:
    """Each training's mean episode length: its env steps over its finished episodes (at the end), at
    most ``longest`` (the steps of the episodes still running count too: a slight overestimate)."""
    lengths = []
    for curve in curves:
        steps, episodes = curve.get("env_steps"), curve.get("episodes")
        if steps is not None and episodes is not None and len(steps) and episodes[-1] > 0:
            lengths.append(min(float(steps[-1] / episodes[-1]), float(longest)))
    return lengths


def curve_note(episode_length: int, ppo: PpoCfg, lengths: Sequence[float]) -> str:
    """The caption under the top morphologies' curves: how long their episodes lasted (at most
    ``episode_length``, ``ENV.EPISODE_LENGTH``), and why the curves of bodies that do not fall climb in steps."""
    length, steps, envs = episode_length, ppo.TIMESTEPS, ppo.NUM_ENVS
    seen = (f"These trainings' episodes lasted about {min(lengths):.0f} to {max(lengths):.0f} steps on average (an "
            f"episode ends at {length} steps or when the body falls). ") if lengths else ""
    return (f"{seen}A point is the mean of the last {EPISODES_PER_POINT} finished training episodes. The {envs} "
            f"envs start together, so at {steps} steps per iteration a body that does not fall ends its episodes "
            f"together about every {length / steps:.0f} iterations and its curve climbs in steps; a body that "
            "falls ends them at scattered times and its curve is smooth.")


def eval_rows(data: Any) -> list[dict[str, Any]]:
    """The rows of ``eval/summary.json``: a list of rows, or an object holding one under ``rows``/``results``."""
    if isinstance(data, dict):
        data = next((data[key] for key in ("rows", "results", "cells") if isinstance(data.get(key), list)), [])
    return [row for row in data if isinstance(row, dict) and "task" in row and "id" in row] if isinstance(
        data, list) else []


# The page's transfer table and plot show at most this many morphologies and tasks (the first by name): an
# evaluation has DERL's 8 tasks and a run's top 10, so a larger eval/summary.json is not one to read as a table,
# and the page's work stays linear in its rows (the table and the plot are ids x tasks).
MAX_TRANSFER_IDS = 40
MAX_TRANSFER_TASKS = 16


def _transfer_cells(rows: list[dict[str, Any]]) -> dict[tuple[str, str], tuple[list[float], list[float]]]:
    """``(label, task) -> (returns, metrics)`` over the seeds, in one pass over ``rows``.

    Rows from several runs (``source``) are labelled ``<run folder name>:<id>``: ids repeat across runs.
    """
    sources = {str(row.get("source", row.get("run", ""))) for row in rows}
    cells: dict[tuple[str, str], tuple[list[float], list[float]]] = {}
    for row in rows:
        source = str(row.get("source", row.get("run", "")))
        label = str(row["id"]) if len(sources) == 1 else f"{Path(source).name}:{row['id']}"
        returns, metrics = cells.setdefault((label, str(row["task"])), ([], []))
        if isinstance(value := row.get("return"), int | float):
            returns.append(float(value))
        if isinstance(value := row.get("metric"), int | float):
            metrics.append(float(value))
    return cells


def transfer_size(rows: list[dict[str, Any]]) -> tuple[int, int]:
    """How many morphologies and tasks ``rows`` hold (``transfer_table`` shows the first of them)."""
    cells = _transfer_cells(rows)
    return len({label for label, _ in cells}), len({task for _, task in cells})


def transfer_table(rows: list[dict[str, Any]]) -> tuple[list[str], list[str], np.ndarray, np.ndarray, np.ndarray]:
    """``tasks, ids, mean return [ids, tasks], std [ids, tasks], mean metric [ids, tasks]`` over seeds,
    of the first ``MAX_TRANSFER_TASKS`` tasks and ``MAX_TRANSFER_IDS`` morphologies by name.

    The std is the sample standard deviation (ddof 1): NaN, no spread, for a cell with one seed.
    Rows from several runs (``source``) are labelled ``<run folder name>:<id>``.
    """
    cells = _transfer_cells(rows)
    tasks = sorted({task for _, task in cells})[:MAX_TRANSFER_TASKS]
    ids = sorted({label for label, _ in cells})[:MAX_TRANSFER_IDS]
    row_of, column_of = {label: i for i, label in enumerate(ids)}, {task: j for j, task in enumerate(tasks)}
    shape = (len(ids), len(tasks))
    means, stds, metrics = np.full(shape, np.nan), np.full(shape, np.nan), np.full(shape, np.nan)
    for (label, task), (returns, metric) in cells.items():
        if label not in row_of or task not in column_of:
            continue
        i, j = row_of[label], column_of[task]
        if returns:
            means[i, j] = np.mean(returns)
        if len(returns) > 1:
            stds[i, j] = np.std(returns, ddof=1)
        if metric:
            metrics[i, j] = np.mean(metric)
    return tasks, ids, means, stds, metrics
