"""The static HTML report of a run (``tools/report.py``): one page, plots as PNG, media next to their rows.

Layout of the report folder (default ``OUT_DIR/report``)::

    index.html            opens from disk, no server; every link is relative
    plots/<name>.png      the figures of derl.analysis.plots (top_curves.png: learning curves of the top K)
    media/<id>.png        a picture of each top-K body
    media/<id>-s<S>-<N>f.mp4  a video of its trained policy, seed S, N frames (.gif where MP4 is unavailable)

Media of a published morphology never change, so existing files are reused. A figure or a
medium that fails leaves a note in its place; the rest of the report is still written.

Here: ``write_report`` and the sections of the page. The page and its writer are
``derl.analysis.report_page``, the table of the top K with its media ``derl.analysis.report_top``,
what the sections compute apart from their HTML ``derl.analysis.report_content``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np

from derl.analysis import plots
from derl.analysis.lineage import tree_layout
from derl.analysis.records import Morphology
from derl.analysis.replay import FITNESS_NOTE
from derl.analysis.report_content import baldwin_verdict, eval_rows, transfer_size, transfer_table
from derl.analysis.report_page import PageWriter, Report, ReportOptions, esc, num, plural
from derl.analysis.report_top import top_section
from derl.analysis.run import RunView
from derl.analysis.stats import running_best, trend, window_mean
from derl.evolution.population import search_text
from derl.fileio.writes import atomic_write_text

# The report's options and result come with write_report (defined with the page they describe).
__all__ = ["Report", "ReportOptions", "write_report"]

# Below either, the report says plainly that its plots cannot support conclusions (``_small_run_note``).
SMALL_RUN_MORPHOLOGIES = 300
SMALL_RUN_STEPS = 1_000_000


def write_report(view: RunView, out: str | Path | None = None,
                 options: ReportOptions = ReportOptions()) -> Report:  # noqa: B008 - a frozen dataclass
    """Writes the report of ``view`` into ``out`` (default ``OUT_DIR/report``); returns what it wrote."""
    out = Path(out) if out is not None else view.run.report_dir()
    writer = PageWriter(view, out, options, len(_BUILDERS))
    started = time.perf_counter()
    with writer.bar:
        for name, build in _BUILDERS.items():
            writer.timed(name, partial(build, writer))
    atomic_write_text(writer.report.index, writer.page_html(), writer.root)
    writer.report.seconds["total"] = round(time.perf_counter() - started, 3)
    return writer.report


# ---------------------------------------------------------------------- sections
def _summary(w: PageWriter) -> None:
    view, cfg = w.view, w.view.cfg
    best = view.top(1)
    rows = [
        ("run", str(view.run.root)),
        ("state", "finished" if view.is_finished() else "in progress"),
        ("published", f"{len(view)} / {view.total}"),
        ("training now", str(len(view.in_progress()))),
        ("failed", str(len(view.run.failures.failed_ids()))),
        ("task", f"{cfg.ENV.TASK} ({', '.join(cfg.ENV.MODULES)})"),
        ("search", search_text(cfg.EVO)),
        ("PPO budget", f"{cfg.PPO.MAX_STATE_ACTION_PAIRS:,} env steps ({cfg.PPO.MAX_ITERS} iterations) per morphology"),
    ]
    if view.unreadable:
        rows.append(("unreadable files", f"{plural(len(view.unreadable), 'file')} skipped (corrupt or foreign; the "
                                         "search moves them to quarantine/): "
                                         + "; ".join(sorted(view.unreadable))[:500]))
    if best:
        rows.append(("best", f"{best[0].id}: {view.fitness_key} = {num(best[0].fitness.get(view.fitness_key))}"))
    wall = [r.wall_time for r in view.records if r.wall_time is not None]
    if wall:
        hours = sum(wall) / 3600
        total = f"{hours:.1f} worker-hours" if hours >= 1 else f"{hours * 60:.1f} worker-minutes"
        rows.append(("training time", f"{total} in all, {np.mean(wall):.1f} s per morphology on average"))
    body = "<table class=\"kv\">" + "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in rows)
    w.section("summary", "Summary", body + "</table>" + _small_run_note(view))


def _small_run_note(view: RunView) -> str:
    """A plain warning when the search is too small for its plots to say much about evolution."""
    budget = view.cfg.PPO.MAX_STATE_ACTION_PAIRS
    if len(view) >= SMALL_RUN_MORPHOLOGIES and budget >= SMALL_RUN_STEPS:
        return ""
    return (f'<p class="small-run"><b>Small run.</b> {plural(len(view), "morphology", "morphologies")} trained '
            f"for {budget:,} env steps each (DERL: 4,000 at 5,000,000). At this size the trends below (fitness "
            "over the search, the Baldwin slope, morphology drift) are mostly noise: read them as a check that the "
            f"machinery works, not as results. Conclusions need at least {SMALL_RUN_MORPHOLOGIES} morphologies and "
            f"budgets of {SMALL_RUN_STEPS:,}+ env steps.</p>")


def _fitness(w: PageWriter) -> None:
    view = w.view
    fitness = view.fitness()
    known = np.isfinite(fitness)
    records = [r for r, ok in zip(view.records, known, strict=True) if ok]
    values = fitness[known]
    order = np.array([r.publication for r in records], dtype=float)
    initial = np.array([r.slot < view.cfg.EVO.INIT_POPULATION_SIZE for r in records], dtype=bool)
    window = view.cfg.EVO.AGING_WINDOW_SIZE
    best = running_best(values, view.maximise) if len(values) else values
    img = w.figure("fitness", lambda: plots.fitness_over_time(order, values, initial, best,
                                                               window_mean(values, window), view.fitness_key, window))
    w.section("fitness", "Fitness over the search",
              f"<p>Every published morphology's {esc(view.fitness_key)} in publication order, the best so "
              f"far and the mean of the aging window (last {window}).</p>"
              f'<p class="fitness-note"><b>What the fitness is:</b> {esc(FITNESS_NOTE)}. The videos of the top '
              "morphologies replay the mean action, so a body can lie still there and still have a high fitness; "
              "<code>tools/replay.py OUT_DIR ID</code> prints both returns with their spread.</p>"
              f"{img}")
    first = view.fitness(view.initial())
    last = view.fitness(view.last_window())
    first, last = first[np.isfinite(first)], last[np.isfinite(last)]
    img = w.figure("distribution", lambda: plots.distributions(first, last, view.fitness_key))
    stats = (f"<p>Initial population: mean {num(float(first.mean()) if len(first) else None)} (n={len(first)}); "
             f"last window: mean {num(float(last.mean()) if len(last) else None)} (n={len(last)}).</p>")
    w.section("distribution", "Initial population vs last aging window", stats + img)


def _morphology(w: PageWriter) -> None:
    view = w.view
    order = np.array([r.publication for r in view.records], dtype=float)

    def column(get: Callable[[Morphology], float | None]) -> np.ndarray:
        return np.array([np.nan if get(r) is None else get(r) for r in view.records], dtype=float)

    series = {"limbs": column(lambda r: r.limbs), "DoF": column(lambda r: r.dof),
              "mass (kg)": column(lambda r: r.mass)}
    img = w.figure("morphology", lambda: plots.morphology_over_time(order, series, view.cfg.EVO.AGING_WINDOW_SIZE))
    w.section("morphology", "Morphology over the search", img)


def _label(view: RunView, node: str) -> str:
    record = view.by_id.get(node)
    if record is None:
        return node
    return f"{node}\n{num(record.fitness.get(view.fitness_key), 2)}\n{record.mutation or 'initial'}"


def _lineage(w: PageWriter) -> None:
    view = w.view
    top = [r.id for r in view.top(w.options.top_k)]
    graph = view.lineage()
    family = graph.family(top)
    positions = tree_layout(graph, family)
    labels = {node: _label(view, node) for node in family}
    values = {node: view.by_id[node].fitness.get(view.fitness_key, math.nan) for node in family if node in view.by_id}
    img = w.figure("lineage", lambda: plots.lineage_tree(graph, positions, labels, values, top))
    depth = max((len(graph.ancestors(node)) for node in top), default=0)
    w.section("lineage", f"Family tree of the top {len(top)}",
              f"<p>{plural(len(family), 'morphology', 'morphologies')} over "
              f"{plural(depth, 'generation')}.</p>{img}")


def _baldwin(w: PageWriter) -> None:
    view, fraction = w.view, w.options.fraction
    speeds = view.learning_speed(fraction)
    points = [(view.by_id[i].publication, n) for i, n in speeds.items() if n is not None]
    order = np.array([p for p, _ in points], dtype=float)
    iterations = np.array([n for _, n in points], dtype=float)
    line = trend(order, iterations)
    w.report.baldwin_slope = None if line is None else line[0]
    img = w.figure("baldwin", lambda: plots.baldwin(order, iterations, line, fraction))
    w.section("baldwin", "Learning speed (Baldwin effect)",
              f"<p>PPO iterations each morphology needed to first reach {fraction:.0%} of its final "
              f"{esc(view.fitness_key)} (mean of its curve over the last 409,600 env steps), for the "
              f"{plural(len(points), 'morphology', 'morphologies')} with a positive final value. "
              f"{baldwin_verdict(order, iterations)}</p>"
              f"{img}")


def _transfer(w: PageWriter) -> None:
    try:
        data = w.view.eval_summary()
    except ValueError as err:
        w.section("transfer", "Transfer evaluation", w.problem("eval/summary.json", err))
        return
    if data is None:
        return
    rows = eval_rows(data)
    tasks, ids, means, stds, metrics = transfer_table(rows)
    img = w.figure("transfer", lambda: plots.transfer(tasks, ids, means, stds))
    head = "<tr><th>morphology</th>" + "".join(f"<th>{esc(t)}</th>" for t in tasks) + "</tr>"
    ranks = {}
    for j in range(len(tasks)):  # only the morphologies with a result on the task are ranked
        column = means[:, j]  # best first, ties in the table's order
        order = sorted((i for i in range(len(ids)) if np.isfinite(column[i])), key=column.__getitem__, reverse=True)
        ranks.update({(i, j): k + 1 for k, i in enumerate(order)})
    body_rows = []
    for i, morphology_id in enumerate(ids):
        cells = "".join(
            f"<td>{num(means[i, j], 1)} ± {num(stds[i, j], 1)}<br><small>metric {num(metrics[i, j], 2)}, "
            f"rank {num(ranks.get((i, j)))}</small></td>" for j in range(len(tasks)))
        body_rows.append(f"<tr><td>{esc(morphology_id)}</td>{cells}</tr>")
    seeds = len({str(row.get("seed")) for row in rows})
    all_ids, all_tasks = transfer_size(rows)
    shown = "" if (all_ids, all_tasks) == (len(ids), len(tasks)) else (
        f" Shown: the first {len(ids)} morphologies and {len(tasks)} tasks by name; eval/summary.json holds all.")
    w.section("transfer", "Transfer evaluation",
              f"<p>{plural(len(rows), 'training')}: {plural(all_ids, 'morphology', 'morphologies')} x "
              f"{plural(all_tasks, 'task')} x {plural(seeds, 'seed')}; "
              f"return mean ± sample std over seeds (– with one seed), rank within the task.{shown}</p>"
              f'<table class="top">{head}{"".join(body_rows)}</table>{img}')


def _progress(w: PageWriter) -> None:
    view = w.view
    training = view.in_progress()
    failed = view.failed()
    if not training and not failed:
        return
    parts = []
    if training:
        total = view.cfg.PPO.MAX_ITERS
        parts.append("<table><tr><th>morphology</th><th>slot</th><th>worker</th><th>iterations</th></tr>" + "".join(
            f"<tr><td>{esc(t.id)}</td><td>{t.slot}</td><td>{t.node}-{t.worker}</td><td>{t.iterations} / {total}</td>"
            "</tr>" for t in training) + "</table>")
    if failed:
        parts.append(f"<p>{plural(len(failed), 'failed morphology', 'failed morphologies')} (replaced in their "
                     "slots):</p><ul>" + "".join(
            f"<li>{esc(f.id)}: {esc(f.reason)}</li>" for f in failed[:20]) + "</ul>")
    w.section("progress", "In progress and failed", "".join(parts))


_BUILDERS: dict[str, Callable[[PageWriter], None]] = {
    "summary": _summary, "fitness": _fitness, "morphology": _morphology, "lineage": _lineage,
    "baldwin": _baldwin, "top": top_section, "transfer": _transfer, "progress": _progress,
}
