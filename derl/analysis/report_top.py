"""The report's table of the top K morphologies (``derl.analysis.report``): rank, id, how it was made
(its mutation and parent) and its files, the body's picture beside its numbers (a click on it plays its
policy's video, ``media/``, reused when already rendered), the fitness ± the spread of its curve, the
fitness terms that vary between morphologies and are known for at least one row, the lineage; their
learning curves under the table.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from derl.analysis import plots
from derl.analysis.curves import Curve, fitness_window
from derl.analysis.records import Morphology
from derl.analysis.replay import replay
from derl.analysis.report_content import curve_note, episode_lengths, varying_terms
from derl.analysis.report_page import PageWriter, esc, num
from derl.envs.media import render_body, write_png
from derl.metrics import REWARD_PREFIX


def top_section(w: PageWriter) -> None:
    """The ``top`` section: a row per top-K morphology, its curves under the table."""
    view, options = w.view, w.options
    top = view.top(options.top_k)
    terms, constant = varying_terms(view)
    key = view.fitness_key
    # The fitness has its own column, with its spread; a term no top row has (a curve still without
    # episodes) would be a column of dashes.
    terms = [g for g in terms if key not in g and any(_known(r.fitness.get(g[0])) for r in top)]
    curves = {r.id: c for r in top if key in (c := view.curve(r.id, (key, "env_steps", "episodes"))).values}
    videos = view.videos()
    # Compact rows: the picture (its policy's video on a click) beside the numbers, the body's size,
    # parent and files under the id, term names that may wrap after their prefix.
    seed = view.cfg.RNG_SEED if options.seed is None else options.seed
    head = ("<tr><th>rank</th><th>morphology</th><th>body<br><small>a click plays its policy<br>(seed "
            + f"{seed}, {options.video_steps} steps)</small></th>"
            + f"<th>{_term_name(key)}<br><small>published ± std of its curve over the last 409,600 env steps"
            + "</small></th>"
            + "".join(f"<th>{' = '.join(_term_name(t) for t in group)}{_term_note(group)}</th>" for group in terms)
            + "<th>lineage</th></tr>")
    rows = []
    for rank, record in enumerate(top, 1):
        media = _media(w, record) if options.media else ""
        if options.media:
            w.bar.update(1)
        run = view.run
        files = " · ".join(f'<a href="{w.link(path)}">{name}</a>' for name, path in (
            ("genome", run.genomes.genome_path(record.id)), ("xml", run.genomes.xml_path(record.id)),
            ("checkpoint", run.checkpoint_path(record.id)), ("curve", run.metrics_path(record.id))) if path.exists())
        if record.id in videos:
            files += f' · <a href="{w.link(videos[record.id])}">evolution video</a>'
        made = f"{esc(record.mutation)} of {esc(record.parent_id)}" if record.parent_id else "initial"
        lineage = " → ".join(esc(node) for node in record.lineage)
        rows.append(
            f'<tr id="m{esc(record.id)}"><td>{rank}</td><td><b>{esc(record.id)}</b> {made}<br>'
            f'<small>{num(record.limbs)} limbs, {num(record.dof)} DoF, mass {num(record.mass, 2)}<br>{files}'
            f'</small></td><td class="media">{media}</td>'
            + f"<td>{_spread(record.fitness.get(key), curves.get(record.id), key)}</td>"
            + "".join(f"<td>{_term_value(record.fitness.get(group[0]))}</td>" for group in terms)
            + f'<td class="lineage">{lineage}</td></tr>')
    body = f'<table class="top">{head}{"".join(rows)}</table>' if rows else "<p>nothing published yet</p>"
    if constant:
        body += ("<p><small>Not shown, the same for every morphology of this run: "
                 + ", ".join(f"{esc(t)} = {num(v)}" for t, v in sorted(constant.items())) + ".</small></p>")
    if rows:
        body += w.figure("top_curves", lambda: plots.learning_curves(
            {name: (curve.iterations, curve.values[key]) for name, curve in curves.items()}, key))
        lengths = episode_lengths(curves.values(), view.cfg.ENV.EPISODE_LENGTH)
        body += f'<p class="caption">{esc(curve_note(view.cfg.ENV.EPISODE_LENGTH, view.cfg.PPO, lengths))}</p>'
    w.section("top", f"Top {len(top)} by {', '.join(view.criteria)}", body)


# What a summary field measures, under its column header (the reward terms say it by their names).
TERM_NOTES = {"energy": "Σ |actuator force| per episode", "x_pos": "final x (m)", "metric": "the task's metric"}


def _term_name(term: str) -> str:
    """A fitness term's column header, which may wrap after ``__reward__``."""
    return esc(term).replace(REWARD_PREFIX, f"{REWARD_PREFIX}<wbr>")


def _term_note(group: tuple[str, ...]) -> str:
    notes = [TERM_NOTES[t] for t in group if t in TERM_NOTES]
    return f"<br><small>{esc('; '.join(notes))}</small>" if notes else ""


def _known(value: float | None) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def _term_value(value: float | None) -> str:
    """Three decimals, or whole numbers with thousands separators from 1,000 on (``energy``)."""
    if isinstance(value, float) and math.isfinite(value) and abs(value) >= 1000:
        return f"{value:,.0f}"
    return num(value)


def _spread(published: float | None, curve: Curve | None, key: str) -> str:
    """The published fitness ± the std of its learning curve over the stretch the fitness averages
    (``fitness_window``)."""
    values = None if curve is None else curve.get(key)
    if curve is None or values is None or not np.isfinite(values).any():
        return f"<b>{num(published, 2)}</b>"
    tail = values[np.isfinite(values) & fitness_window(curve)]
    return f"<b>{num(published, 2)}</b> ± {num(float(tail.std()), 2)}<br><small>n={len(tail)}</small>"


# The picture's size in the table (the pictures and videos are 4:3).
THUMB = (200, 150)


def _media(w: PageWriter, record: Morphology) -> str:
    """The picture of one morphology, which plays its policy's video when clicked (the video's poster,
    loaded only then); the picture alone, with a note, where there is no video (reused when already rendered)."""
    view, steps = w.view, w.options.video_steps
    seed = view.cfg.RNG_SEED if w.options.seed is None else w.options.seed
    width, height = THUMB
    image_path = w.out / "media" / f"{record.id}.png"
    try:
        if not image_path.exists():
            write_png(render_body(view.run.genomes.read_xml(record.id), view.cfg.world), image_path, w.root)
        w.report.media[f"{record.id}.png"] = str(image_path)
        poster: str | None = w.link(image_path)
        image = f'<img src="{poster}" width="{width}" height="{height}" alt="{esc(record.id)}">'
    except Exception as err:  # noqa: BLE001 - a body that cannot be rendered keeps its row
        poster, image = None, w.problem(f"picture of {record.id}", err)
    if not view.run.checkpoint_path(record.id).exists():
        return image + '<p class="note">no checkpoint</p>'
    try:
        stem = f"{record.id}-s{seed}-{steps}f"
        existing = [p for p in (w.out / "media").glob(f"{stem}.*") if p.suffix in (".mp4", ".gif")]
        path = existing[0] if existing else Path(str(replay(
            view, record.id, seed=seed, video=w.out / "media" / f"{stem}.mp4", video_steps=steps).video))
        w.report.media[path.name] = str(path)
        if path.suffix == ".gif" or poster is None:  # a GIF plays as a picture: linked, opened on a click
            return f'<a href="{w.link(path)}">{image}</a>'
        # No controls drawn over the picture: a click plays or pauses (controls come with the video's menu).
        return (f'<video src="{w.link(path)}" poster="{poster}" width="{width}" height="{height}" preload="none" '
                'loop muted playsinline title="click: play or pause its policy" '
                'onclick="this.paused ? this.play() : this.pause()"></video>')
    except Exception as err:  # noqa: BLE001
        return image + w.problem(f"video of {record.id}", err)
