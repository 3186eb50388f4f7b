"""The static HTML report of a run (``tools/report.py``): one page, plots as PNG, media next to their rows.

Layout of the report folder (default ``OUT_DIR/report``)::

    index.html            opens from disk, no server; every link is relative
    plots/<name>.png      the figures of derl.analysis.plots (top_curves.png: learning curves of the top K)
    media/<id>.png        a picture of each top-K body
    media/<id>-s<S>-<N>f.mp4  a video of its trained policy, seed S, N frames (.gif where MP4 is unavailable)

Media of a published morphology never change, so existing files are reused. A figure or a
medium that fails leaves a note in its place; the rest of the report is still written.
"""

from __future__ import annotations

import html
import math
import os
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from derl.analysis import plots
from derl.analysis.curves import Curve, fitness_window
from derl.analysis.lineage import tree_layout
from derl.analysis.records import Morphology
from derl.analysis.replay import FITNESS_NOTE, replay
from derl.analysis.run import RunView
from derl.analysis.stats import TREND_ALPHA, TREND_MIN_POINTS, running_best, trend, trend_test, window_mean
from derl.config import CfgNode
from derl.envs.media import render_body, write_png
from derl.evolution.population import search_text
from derl.fileio import atomic_write_text, make_folders
from derl.metrics import REWARD_PREFIX
from derl.ppo.episodes import EPISODES_PER_POINT
from derl.progress import progress_bar

SECTIONS = ("summary", "fitness", "distribution", "morphology", "lineage", "baldwin", "top", "transfer",
            "progress")
# Below either, the report says plainly that its plots cannot support conclusions (``_small_run_note``).
SMALL_RUN_MORPHOLOGIES = 300
SMALL_RUN_STEPS = 1_000_000
# The iterations DERL's fitness averages over (``derl.ppo.episodes``): the spread shown per top morphology.


@dataclass(frozen=True)
class ReportOptions:
    top_k: int = 10
    fraction: float = 0.75  # of the final fitness, for the learning-speed (Baldwin) plot
    video_steps: int = 200  # frames per top-K video (4 s at 50 fps)
    media: bool = True  # pictures and videos of the top K (needs rendering)
    seed: int | None = None  # replay seed of the videos (default: the run's RNG_SEED)


@dataclass
class Report:
    """What was written: the page, its sections, the plots (pixel sizes) and media, timings."""

    index: Path
    sections: list[str] = field(default_factory=list)
    plots: dict[str, tuple[int, int]] = field(default_factory=dict)
    media: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    baldwin_slope: float | None = None


def _esc(value: Any) -> str:
    return html.escape(str(value))


def _num(value: float | None, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


class _Writer:
    def __init__(self, view: RunView, out: Path, options: ReportOptions):
        self.view, self.out, self.options = view, out, options
        self.report = Report(out / "index.html")
        self.parts: list[str] = []
        rows = min(options.top_k, len(view)) if options.media else 0  # a picture and a video each
        self.bar = progress_bar(len(_BUILDERS) + rows, "report", unit="step")
        self.root = view.run.root_above(out)  # inside OUT_DIR: no folder on the way a link, at each write
        for folder in ("plots", "media"):
            make_folders(out / folder, self.root)

    def link(self, path: Path) -> str:
        """``path`` relative to the report folder, with forward slashes (a URL)."""
        return Path(os.path.relpath(path, self.out)).as_posix()

    def timed(self, name: str, build: Callable[[], None]) -> None:
        started = time.perf_counter()
        self.bar.set_postfix_str(name, refresh=False)
        build()
        self.bar.update(1)
        self.report.seconds[name] = round(time.perf_counter() - started, 3)

    def section(self, name: str, title: str, body: str) -> None:
        self.report.sections.append(name)
        self.parts.append(f'<section id="{name}"><h2>{_esc(title)}</h2>\n{body}\n</section>')

    def figure(self, name: str, build: Callable[[], Any]) -> str:
        """Saves ``plots/<name>.png``; returns its ``<img>`` (or a note if the figure failed)."""
        path = self.out / "plots" / f"{name}.png"
        try:
            figure = build()
            width, height = plots.save_png(figure, path, self.root)
        except Exception as err:  # noqa: BLE001 - one bad figure must not cost the whole report
            return self.problem(f"plot {name}", err)
        self.report.plots[name] = (width, height)
        return f'<img src="{self.link(path)}" width="{width}" height="{height}" alt="{name}">'

    def problem(self, what: str, err: Exception) -> str:
        message = f"{what}: {type(err).__name__}: {err}".splitlines()[0]
        self.report.problems.append(message)
        if os.environ.get("DERL_REPORT_TRACEBACKS"):
            traceback.print_exc()
        return f'<p class="note">unavailable ({_esc(message)})</p>'


def write_report(view: RunView, out: str | Path | None = None, options: ReportOptions = ReportOptions()) -> Report:
    """Writes the report of ``view`` into ``out`` (default ``OUT_DIR/report``); returns what it wrote."""
    out = Path(out) if out is not None else view.run.report_dir()
    writer = _Writer(view, out, options)
    started = time.perf_counter()
    with writer.bar:
        for name, build in _BUILDERS.items():
            writer.timed(name, lambda build=build: build(writer))
    page = _PAGE.format(title=_esc(f"derl report: {view.run.root.name}"), body="\n".join(writer.parts),
                        generated=_esc(time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())))
    atomic_write_text(writer.report.index, page, writer.root)
    writer.report.seconds["total"] = round(time.perf_counter() - started, 3)
    return writer.report


# ---------------------------------------------------------------------- sections
def _summary(w: _Writer) -> None:
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
        rows.append(("unreadable files", f"{len(view.unreadable)} skipped (corrupt or foreign; the search "
                                         "moves them to quarantine/): " + "; ".join(sorted(view.unreadable))[:500]))
    if best:
        rows.append(("best", f"{best[0].id}: {view.fitness_key} = {_num(best[0].fitness.get(view.fitness_key))}"))
    wall = [r.wall_time for r in view.records if r.wall_time is not None]
    if wall:
        hours = sum(wall) / 3600
        total = f"{hours:.1f} worker-hours" if hours >= 1 else f"{hours * 60:.1f} worker-minutes"
        rows.append(("training time", f"{total} in all, {np.mean(wall):.1f} s per morphology on average"))
    body = "<table class=\"kv\">" + "".join(f"<tr><th>{_esc(k)}</th><td>{_esc(v)}</td></tr>" for k, v in rows)
    w.section("summary", "Summary", body + "</table>" + _small_run_note(view))


def _small_run_note(view: RunView) -> str:
    """A plain warning when the search is too small for its plots to say much about evolution."""
    budget = view.cfg.PPO.MAX_STATE_ACTION_PAIRS
    if len(view) >= SMALL_RUN_MORPHOLOGIES and budget >= SMALL_RUN_STEPS:
        return ""
    return (f'<p class="small-run"><b>Small run.</b> {len(view)} morphologies trained for {budget:,} env steps '
            f"each (DERL: 4,000 at 5,000,000). At this size the trends below (fitness over the search, the "
            "Baldwin slope, morphology drift) are mostly noise: read them as a check that the machinery "
            f"works, not as results. Conclusions need at least {SMALL_RUN_MORPHOLOGIES} morphologies and "
            f"budgets of {SMALL_RUN_STEPS:,}+ env steps.</p>")


def _fitness(w: _Writer) -> None:
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
              f"<p>Every published morphology's {_esc(view.fitness_key)} in publication order, the best so "
              f"far and the mean of the aging window (last {window}).</p>"
              f'<p class="fitness-note"><b>What the fitness is:</b> {_esc(FITNESS_NOTE)}. The videos of the top '
              "morphologies replay the mean action, so a body can lie still there and still have a high fitness; "
              "<code>tools/replay.py OUT_DIR ID</code> prints both returns with their spread.</p>"
              f"{img}")
    first = view.fitness(view.initial())
    last = view.fitness(view.last_window())
    first, last = first[np.isfinite(first)], last[np.isfinite(last)]
    img = w.figure("distribution", lambda: plots.distributions(first, last, view.fitness_key))
    stats = (f"<p>Initial population: mean {_num(float(first.mean()) if len(first) else None)} (n={len(first)}); "
             f"last window: mean {_num(float(last.mean()) if len(last) else None)} (n={len(last)}).</p>")
    w.section("distribution", "Initial population vs last aging window", stats + img)


def _morphology(w: _Writer) -> None:
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
    return f"{node}\n{_num(record.fitness.get(view.fitness_key), 2)}\n{record.mutation or 'initial'}"


def _lineage(w: _Writer) -> None:
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
              f"<p>{len(family)} morphologies over {depth} generations.</p>{img}")


def _baldwin(w: _Writer) -> None:
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
              f"{_esc(view.fitness_key)} (mean of its curve over the last 409,600 env steps), for the "
              f"{len(points)} morphologies with a positive final value. {baldwin_verdict(order, iterations)}</p>"
              f"{img}")


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


def _top(w: _Writer) -> None:
    view, options = w.view, w.options
    top = view.top(options.top_k)
    terms, constant = _varying_terms(view)
    key = view.fitness_key
    terms = [g for g in terms if key not in g]  # the fitness has its own column, with its spread
    curves = {r.id: c for r in top if key in (c := view.curve(r.id, (key, "env_steps", "episodes"))).values}
    videos = view.videos()
    # Narrow enough for a 1,400 px window: the picture above the video, the files and the body's
    # size under the id, term names that may wrap after their prefix.
    head = ("<tr><th>rank</th><th>morphology</th><th>body and policy</th>"
            + f"<th>{_term_name(key)}<br><small>published ± std of its curve over the last 409,600 env steps"
            + "</small></th>"
            + "".join(f"<th>{' = '.join(_term_name(t) for t in group)}{_term_note(group)}</th>" for group in terms)
            + "<th>lineage</th></tr>")
    rows = []
    for rank, record in enumerate(top, 1):
        image, video = _media(w, record) if options.media else ("", "")
        if options.media:
            w.bar.update(1)
        run = view.run
        files = "<br>".join(f'<a href="{w.link(path)}">{name}</a>' for name, path in (
            ("genome", run.genomes.genome_path(record.id)), ("xml", run.genomes.xml_path(record.id)),
            ("checkpoint", run.checkpoint_path(record.id)), ("curve", run.metrics_path(record.id))) if path.exists())
        if record.id in videos:
            files += f'<br><a href="{w.link(videos[record.id])}">evolution video</a>'
        lineage = " → ".join(_esc(node) for node in record.lineage)
        rows.append(
            f'<tr id="m{_esc(record.id)}"><td>{rank}</td><td><b>{_esc(record.id)}</b><br>'
            f'{_esc(record.mutation or "initial")}<br><small>{_num(record.limbs)} limbs, {_num(record.dof)} DoF, '
            f'mass {_num(record.mass, 2)}</small><br><small>{files}</small></td><td class="media">{image}{video}</td>'
            + f"<td>{_spread(record.fitness.get(key), curves.get(record.id), key)}</td>"
            + "".join(f"<td>{_term_value(record.fitness.get(group[0]))}</td>" for group in terms)
            + f'<td class="lineage">{lineage}</td></tr>')
    body = f'<table class="top">{head}{"".join(rows)}</table>' if rows else "<p>nothing published yet</p>"
    if constant:
        body += ("<p><small>Not shown, the same for every morphology of this run: "
                 + ", ".join(f"{_esc(t)} = {_num(v)}" for t, v in sorted(constant.items())) + ".</small></p>")
    if rows:
        body += w.figure("top_curves", lambda: plots.learning_curves(
            {name: (curve.iterations, curve.values[key]) for name, curve in curves.items()}, key))
        lengths = episode_lengths(curves.values(), view.cfg.ENV.EPISODE_LENGTH)
        body += f'<p class="caption">{_esc(curve_note(view.cfg, lengths))}</p>'
    w.section("top", f"Top {len(top)} by {', '.join(view.criteria)}", body)


# What a summary field measures, under its column header (the reward terms say it by their names).
TERM_NOTES = {"energy": "Σ |actuator force| per episode", "x_pos": "final x (m)", "metric": "the task's metric"}


def _varying_terms(view: RunView) -> tuple[list[tuple[str, ...]], dict[str, float]]:
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


def _term_name(term: str) -> str:
    """A fitness term's column header, which may wrap after ``__reward__``."""
    return _esc(term).replace(REWARD_PREFIX, f"{REWARD_PREFIX}<wbr>")


def _term_note(group: tuple[str, ...]) -> str:
    notes = [TERM_NOTES[t] for t in group if t in TERM_NOTES]
    return f"<br><small>{_esc('; '.join(notes))}</small>" if notes else ""


def _term_value(value: float | None) -> str:
    """Three decimals, or whole numbers with thousands separators from 1,000 on (``energy``)."""
    if isinstance(value, float) and math.isfinite(value) and abs(value) >= 1000:
        return f"{value:,.0f}"
    return _num(value)


def _spread(published: float | None, curve: Curve | None, key: str) -> str:
    """The published fitness ± the std of its learning curve over the stretch the fitness averages
    (``fitness_window``)."""
    values = None if curve is None else curve.get(key)
    if values is None or not np.isfinite(values).any():
        return f"<b>{_num(published, 2)}</b>"
    tail = values[np.isfinite(values) & fitness_window(curve)]
    return f"<b>{_num(published, 2)}</b> ± {_num(float(tail.std()), 2)}<br><small>n={len(tail)}</small>"


def episode_lengths(curves: Iterable[Curve], longest: int) -> list[float]:
    """Each training's mean episode length: its env steps over its finished episodes (at the end), at
    most ``longest`` (the steps of the episodes still running count too: a slight overestimate)."""
    lengths = []
    for curve in curves:
        steps, episodes = curve.get("env_steps"), curve.get("episodes")
        if steps is not None and episodes is not None and len(steps) and episodes[-1] > 0:
            lengths.append(min(float(steps[-1] / episodes[-1]), float(longest)))
    return lengths


def curve_note(cfg: CfgNode, lengths: Sequence[float]) -> str:
    """The caption under the top morphologies' curves: how long their episodes lasted, and why the
    curves of bodies that do not fall climb in steps."""
    length, steps, envs = cfg.ENV.EPISODE_LENGTH, cfg.PPO.TIMESTEPS, cfg.PPO.NUM_ENVS
    seen = (f"These trainings' episodes lasted about {min(lengths):.0f} to {max(lengths):.0f} steps on average (an "
            f"episode ends at {length} steps or when the body falls). ") if lengths else ""
    return (f"{seen}A point is the mean of the last {EPISODES_PER_POINT} finished training episodes. The {envs} "
            f"envs start together, so at {steps} steps per iteration a body that does not fall ends its episodes "
            f"together about every {length / steps:.0f} iterations and its curve climbs in steps; a body that "
            "falls ends them at scattered times and its curve is smooth.")


def _media(w: _Writer, record: Morphology) -> tuple[str, str]:
    """The picture and policy video of one morphology (reused when already rendered)."""
    view, steps = w.view, w.options.video_steps
    seed = view.cfg.RNG_SEED if w.options.seed is None else w.options.seed
    image_path = w.out / "media" / f"{record.id}.png"
    try:
        if not image_path.exists():
            write_png(render_body(view.run.genomes.read_xml(record.id), view.cfg), image_path, w.root)
        w.report.media[f"{record.id}.png"] = str(image_path)
        image = f'<img src="{w.link(image_path)}" width="240" alt="{_esc(record.id)}">'
    except Exception as err:  # noqa: BLE001 - a body that cannot be rendered keeps its row
        image = w.problem(f"picture of {record.id}", err)
    if not view.run.checkpoint_path(record.id).exists():
        return image, '<p class="note">no checkpoint</p>'
    try:
        stem = f"{record.id}-s{seed}-{steps}f"
        existing = [p for p in (w.out / "media").glob(f"{stem}.*") if p.suffix in (".mp4", ".gif")]
        path = existing[0] if existing else Path(replay(
            view, record.id, seed=seed, video=w.out / "media" / f"{stem}.mp4", video_steps=steps).video)
        w.report.media[path.name] = str(path)
        if path.suffix == ".gif":
            return image, f'<img src="{w.link(path)}" width="240" alt="policy of {_esc(record.id)}">'
        return image, (f'<video src="{w.link(path)}" width="240" height="180" controls loop muted autoplay '
                       'playsinline></video>')
    except Exception as err:  # noqa: BLE001
        return image, w.problem(f"video of {record.id}", err)


def eval_rows(data: Any) -> list[dict[str, Any]]:
    """The rows of ``eval/summary.json``: a list of rows, or an object holding one under ``rows``/``results``."""
    if isinstance(data, dict):
        data = next((data[key] for key in ("rows", "results", "cells") if isinstance(data.get(key), list)), [])
    return [row for row in data if isinstance(row, dict) and "task" in row and "id" in row] if isinstance(
        data, list) else []


def transfer_table(rows: list[dict[str, Any]]) -> tuple[list[str], list[str], np.ndarray, np.ndarray, np.ndarray]:
    """``tasks, ids, mean return [ids, tasks], std [ids, tasks], mean metric [ids, tasks]`` over seeds.

    The std is the sample standard deviation (ddof 1): NaN, no spread, for a cell with one seed.
    Rows from several runs (``source``) are labelled ``<run folder name>:<id>``.
    """
    sources = {str(row.get("source", row.get("run", ""))) for row in rows}

    def label(row: dict[str, Any]) -> str:  # ids repeat across runs: name the run when there are several
        source = str(row.get("source", row.get("run", "")))
        return str(row["id"]) if len(sources) == 1 else f"{Path(source).name}:{row['id']}"

    tasks = sorted({str(row["task"]) for row in rows})
    ids = sorted({label(row) for row in rows})
    shape = (len(ids), len(tasks))
    means, stds, metrics = np.full(shape, np.nan), np.full(shape, np.nan), np.full(shape, np.nan)
    for i, morphology_id in enumerate(ids):
        for j, task in enumerate(tasks):
            cell = [row for row in rows if label(row) == morphology_id and str(row["task"]) == task]
            returns = [float(row["return"]) for row in cell if isinstance(row.get("return"), int | float)]
            metric = [float(row["metric"]) for row in cell if isinstance(row.get("metric"), int | float)]
            if returns:
                means[i, j] = np.mean(returns)
            if len(returns) > 1:
                stds[i, j] = np.std(returns, ddof=1)
            if metric:
                metrics[i, j] = np.mean(metric)
    return tasks, ids, means, stds, metrics


def _transfer(w: _Writer) -> None:
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
    head = "<tr><th>morphology</th>" + "".join(f"<th>{_esc(t)}</th>" for t in tasks) + "</tr>"
    ranks = {}
    for j in range(len(tasks)):  # only the morphologies with a result on the task are ranked
        order = sorted((i for i in range(len(ids)) if np.isfinite(means[i, j])), key=lambda i, j=j: -means[i, j])
        ranks.update({(i, j): k + 1 for k, i in enumerate(order)})
    body_rows = []
    for i, morphology_id in enumerate(ids):
        cells = "".join(
            f"<td>{_num(means[i, j], 1)} ± {_num(stds[i, j], 1)}<br><small>metric {_num(metrics[i, j], 2)}, "
            f"rank {_num(ranks.get((i, j)))}</small></td>" for j in range(len(tasks)))
        body_rows.append(f"<tr><td>{_esc(morphology_id)}</td>{cells}</tr>")
    seeds = len({row.get("seed") for row in rows})
    w.section("transfer", "Transfer evaluation",
              f"<p>{len(rows)} trainings: {len(ids)} morphologies x {len(tasks)} tasks x {seeds} seed(s); "
              f"return mean ± sample std over seeds (– with one seed), rank within the task.</p>"
              f'<table class="top">{head}{"".join(body_rows)}</table>{img}')


def _progress(w: _Writer) -> None:
    view = w.view
    training = view.in_progress()
    failed = view.failed()
    if not training and not failed:
        return
    parts = []
    if training:
        total = view.cfg.PPO.MAX_ITERS
        parts.append("<table><tr><th>morphology</th><th>slot</th><th>worker</th><th>iterations</th></tr>" + "".join(
            f"<tr><td>{_esc(t.id)}</td><td>{t.slot}</td><td>{t.node}-{t.worker}</td><td>{t.iterations} / {total}</td>"
            "</tr>" for t in training) + "</table>")
    if failed:
        parts.append(f"<p>{len(failed)} failed morphologies (replaced in their slots):</p><ul>" + "".join(
            f"<li>{_esc(f.get('id'))}: {_esc(f.get('reason'))}</li>" for f in failed[:20]) + "</ul>")
    w.section("progress", "In progress and failed", "".join(parts))


_BUILDERS: dict[str, Callable[[_Writer], None]] = {
    "summary": _summary, "fitness": _fitness, "morphology": _morphology, "lineage": _lineage,
    "baldwin": _baldwin, "top": _top, "transfer": _transfer, "progress": _progress,
}

_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; margin: 0.5em 0; }}
td, th {{ border: 1px solid #ccc; padding: 4px 6px; font-size: 13px; vertical-align: top; }}
table.kv th {{ text-align: left; background: #f4f4f4; }}
td.lineage {{ max-width: 14em; font-size: 11px; }}
td.media img, td.media video {{ display: block; }}
p.caption {{ font-size: 13px; max-width: 60em; color: #444; }}
.note {{ color: #a33; font-size: 12px; }}
.small-run, .fitness-note {{ background: #fff8e0; border-left: 4px solid #e0a000; padding: 6px 10px; max-width: 60em; }}
nav a {{ margin-right: 1em; }}
</style></head><body>
<h1>{title}</h1>
<nav><a href="#fitness">fitness</a><a href="#morphology">morphology</a><a href="#lineage">lineage</a>
<a href="#baldwin">Baldwin effect</a><a href="#top">top K</a><a href="#transfer">transfer</a></nav>
{body}
<footer><p><small>generated {generated} by tools/report.py</small></p></footer>
</body></html>
"""
