"""The report's figures: plain functions from arrays and records to a matplotlib ``Figure``.

No pyplot and no global state: each function builds a ``Figure`` (Agg canvas) that the caller
saves with ``save_png``. Fixed-size figures are ``FIGSIZE`` inches at ``DPI`` (800 x 450 pixels).
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from derl.analysis.lineage import LineageGraph
from derl.analysis.stats import window_mean
from derl.fileio.writes import atomic_write_bytes

FIGSIZE = (8.0, 4.5)
DPI = 100
INITIAL_COLOUR, CHILD_COLOUR, BEST_COLOUR, WINDOW_COLOUR = "#9e9e9e", "#1f77b4", "#d62728", "#ff7f0e"


def new_figure(size: tuple[float, float] = FIGSIZE) -> Figure:
    figure = Figure(figsize=size, dpi=DPI)
    FigureCanvasAgg(figure)
    return figure


def save_png(figure: Figure, path: str | Path, root: str | Path | None = None) -> tuple[int, int]:
    """Saves at ``DPI`` (no tight cropping, so the pixel size is the figure's); returns (width, height).

    Written atomically through its folder's descriptor (``root``: as ``derl.fileio.writes.atomic_write_bytes``).
    """
    png = io.BytesIO()
    figure.savefig(png, dpi=DPI, format="png")
    atomic_write_bytes(path, png.getvalue(), root)
    width, height = figure.get_size_inches() * DPI
    return round(width), round(height)


def _empty(axes, message: str = "no data yet") -> None:
    axes.text(0.5, 0.5, message, ha="center", va="center", transform=axes.transAxes, color="gray")


def fitness_over_time(order: np.ndarray, fitness: np.ndarray, initial: np.ndarray, best: np.ndarray,
                      window: np.ndarray, label: str, window_size: int) -> Figure:
    """Fitness of every morphology against publication order, running best and aging-window mean."""
    figure = new_figure()
    axes = figure.add_subplot()
    if len(order):
        axes.scatter(order[initial], fitness[initial], s=8, color=INITIAL_COLOUR, label="initial population")
        axes.scatter(order[~initial], fitness[~initial], s=8, color=CHILD_COLOUR, label="children")
        axes.plot(order, best, color=BEST_COLOUR, lw=1.5, label="running best")
        axes.plot(order, window, color=WINDOW_COLOUR, lw=1.5, label=f"mean of last {window_size}")
        axes.legend(loc="lower right", fontsize=8)
    else:
        _empty(axes)
    axes.set_xlabel("publication order")
    axes.set_ylabel(label)
    axes.set_title("Fitness over the search")
    figure.tight_layout()
    return figure


def distributions(initial: np.ndarray, last: np.ndarray, label: str) -> Figure:
    """Histograms of the initial population (light grey bars) and of the last aging window (a blue
    outline drawn over them, so where the two overlap shows no third colour), with their means."""
    figure = new_figure()
    axes = figure.add_subplot()
    both = np.concatenate([initial, last])
    if len(both):
        low, high = float(both.min()), float(both.max())
        bins = np.linspace(low, high if high > low else low + 1.0, 25).tolist()
        if len(initial):
            axes.hist(initial, bins=bins, histtype="stepfilled", color="#d9d9d9", edgecolor=INITIAL_COLOUR,
                      label=f"initial population (n={len(initial)})")
            axes.axvline(initial.mean(), color=INITIAL_COLOUR, ls="--", lw=1.5, label="its mean")
        if len(last):
            axes.hist(last, bins=bins, histtype="step", color=CHILD_COLOUR, lw=2,
                      label=f"last aging window (n={len(last)})")
            axes.axvline(last.mean(), color=CHILD_COLOUR, ls="--", lw=1.5, label="its mean")
        axes.legend(fontsize=8)
    else:
        _empty(axes)
    axes.set_xlabel(label)
    axes.set_ylabel("morphologies")
    axes.yaxis.set_major_locator(MaxNLocator(integer=True))  # counts, never 0.25 of a morphology
    axes.set_title("Initial population vs last aging window")
    figure.tight_layout()
    return figure


def morphology_over_time(order: np.ndarray, series: Mapping[str, np.ndarray], window: int) -> Figure:
    """One panel per body statistic (limbs, DoF, mass) against publication order, with a window mean."""
    figure = new_figure((FIGSIZE[0], FIGSIZE[1] * 1.5))
    panels = figure.subplots(len(series), 1, sharex=True, squeeze=False)[:, 0]
    for axes, (name, values) in zip(panels, series.items(), strict=True):
        known = np.isfinite(values)
        if known.any():
            axes.scatter(order[known], values[known], s=6, color=CHILD_COLOUR, alpha=0.5)
            axes.plot(order[known], window_mean(values[known], window), color=WINDOW_COLOUR, lw=1.5)
        else:
            _empty(axes, "no genome statistics")
        axes.set_ylabel(name)
    panels[0].set_title(f"Morphology over the search (line: mean of last {window})")
    panels[-1].set_xlabel("publication order")
    figure.tight_layout()
    return figure


def lineage_tree(graph: LineageGraph, positions: Mapping[str, tuple[float, int]], labels: Mapping[str, str],
                 values: Mapping[str, float], highlight: Sequence[str]) -> Figure:
    """The family tree of the top morphologies: generations downwards, nodes coloured by fitness."""
    leaves = max((x for x, _ in positions.values()), default=0) + 1
    depth = max((d for _, d in positions.values()), default=0) + 1
    figure = new_figure((max(FIGSIZE[0], 1.6 * leaves), max(FIGSIZE[1], 1.2 * depth + 1)))
    axes = figure.add_subplot()
    if not positions:
        _empty(axes)
        return figure
    for node, (x, d) in positions.items():
        parent = graph.parent.get(node)
        if parent is not None and parent in positions:
            px, pd = positions[parent]
            axes.plot([px, x], [pd, d], color="#bbbbbb", lw=1, zorder=1)
    nodes = list(positions)
    finite = [values[n] for n in nodes if math.isfinite(values.get(n, math.nan))]
    low, high = (min(finite), max(finite)) if finite else (0.0, 1.0)
    colours = [values.get(n, math.nan) for n in nodes]
    points = axes.scatter([positions[n][0] for n in nodes], [positions[n][1] for n in nodes], c=colours,
                          cmap="viridis", vmin=low, vmax=high if high > low else low + 1, s=90, zorder=2,
                          edgecolors=["#d62728" if n in highlight else "black" for n in nodes],
                          linewidths=[2.0 if n in highlight else 0.5 for n in nodes])
    for node in nodes:
        x, d = positions[node]
        axes.annotate(labels.get(node, node), (x, d), xytext=(0, 9), textcoords="offset points", ha="center",
                      va="bottom", fontsize=9,
                      bbox={"boxstyle": "round,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.8})
    figure.colorbar(points, ax=axes, label="fitness", fraction=0.03)
    axes.set_ylim(depth - 0.5, -0.9)  # generation 0 at the top, room for the labels above each node
    axes.set_xlim(-0.6, leaves - 0.4)
    locator = axes.yaxis.get_major_locator()
    if isinstance(locator, MaxNLocator):  # matplotlib's default (AutoLocator): whole generations only
        locator.set_params(integer=True)
    axes.set_ylabel("generation")
    axes.set_xticks([])
    axes.set_title("Lineages of the top K (red ring); labels: id, fitness, mutation", fontsize=11)
    figure.tight_layout()
    return figure


def learning_curves(curves: Mapping[str, tuple[np.ndarray, np.ndarray]], label: str) -> Figure:
    """Per-iteration ``label`` of each named curve (``id -> (iterations, values)``)."""
    figure = new_figure()
    axes = figure.add_subplot()
    drawn = [(name, it, v) for name, (it, v) in curves.items() if len(it)]
    for name, iterations, values in drawn:
        axes.plot(iterations, values, lw=1, label=name)
    if drawn:
        axes.legend(fontsize=7, ncol=2)
    else:
        _empty(axes)
    axes.set_xlabel("PPO iteration")
    axes.set_ylabel(label)
    axes.set_title("Learning curves of the top K")
    figure.tight_layout()
    return figure


def baldwin(order: np.ndarray, iterations: np.ndarray, line: tuple[float, float] | None, fraction: float) -> Figure:
    """Iterations to reach ``fraction`` of the final fitness against publication order, with its trend."""
    figure = new_figure()
    axes = figure.add_subplot()
    if len(order):
        axes.scatter(order, iterations, s=8, color=CHILD_COLOUR, alpha=0.6)
        if line is not None:
            slope, intercept = line
            xs = np.array([order.min(), order.max()], dtype=float)
            axes.plot(xs, slope * xs + intercept, color=BEST_COLOUR, lw=2,
                      label=f"trend: {slope:+.4f} iterations per morphology")
            axes.legend(fontsize=8)
    else:
        _empty(axes, "no learning curve with a positive final fitness yet")
    axes.set_xlabel("publication order")
    axes.set_ylabel(f"iterations to {fraction:.0%} of final fitness")
    axes.set_title("Learning speed over the search (morphological Baldwin effect)")
    figure.tight_layout()
    return figure


def transfer(tasks: Sequence[str], ids: Sequence[str], means: np.ndarray, errors: np.ndarray) -> Figure:
    """Grouped bars: mean return of each morphology (``means [ids, tasks]``) on each task.

    A NaN mean (no finished cell) has no bar, not a bar at 0; a NaN error has no error bar.
    """
    figure = new_figure()
    axes = figure.add_subplot()
    if len(tasks) and len(ids):
        width = 0.8 / len(ids)
        x = np.arange(len(tasks))
        for k, morphology_id in enumerate(ids):
            shown = np.isfinite(means[k])
            axes.bar((x + k * width - 0.4 + width / 2)[shown], means[k][shown], width, yerr=errors[k][shown],
                     label=morphology_id, capsize=2)
        axes.set_xticks(x, tasks, rotation=20, fontsize=8)
        axes.legend(fontsize=7, ncol=min(len(ids), 5))
    else:
        _empty(axes)
    axes.set_ylabel("return (mean over seeds)")
    axes.set_title("Transfer evaluation")
    figure.tight_layout()
    return figure


def fidelity_scatter(reference: Mapping[str, Sequence[float]], candidates: Mapping[str, Mapping[str, float]],
                     criterion: str) -> Figure:
    """Each candidate's fitness against the reference's mean (the bar: the reference's seeds)."""
    figure = new_figure((6.4, 5.6))
    axes = figure.add_subplot()
    ids = list(reference)
    means = np.array([np.mean(reference[i]) for i in ids])
    low = means - np.array([min(reference[i]) for i in ids])
    high = np.array([max(reference[i]) for i in ids]) - means
    for label, fitness in candidates.items():
        axes.errorbar(means, [fitness[i] for i in ids], xerr=[low, high], fmt="o", capsize=2, label=label)
    every = [*means, *(v for f in candidates.values() for v in f.values())]
    line = [min(every), max(every)]
    axes.plot(line, line, color="grey", lw=0.8, ls="--")
    axes.set_xlabel(f"reference {criterion} (mean of its seeds; bar: their range)")
    axes.set_ylabel(f"candidate {criterion}")
    axes.legend(fontsize=7)
    axes.set_title("Fitness per body: candidate against reference")
    figure.tight_layout()
    return figure
