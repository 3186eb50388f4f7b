"""The page of the HTML report (``derl.analysis.report``): its options, the record of what was written,
the writer its sections fill (figures saved as PNG, a note in place of what failed, links relative to
the page) and the HTML around them.
"""

from __future__ import annotations

import html
import math
import os
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from derl.analysis import plots
from derl.analysis.run import RunView
from derl.fileio.folders import make_folders
from derl.progress import progress_bar


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


def esc(value: Any) -> str:
    """``value`` as HTML text."""
    return html.escape(str(value))


def plural(count: int, word: str, many: str | None = None) -> str:
    """``count`` and ``word`` agreeing: "1 task", "2 tasks", "1,000 morphologies" (``many``: the plural
    where it is not ``word`` + "s")."""
    return f"{count:,} {word if count == 1 else many or word + 's'}"


def num(value: float | None, digits: int = 3) -> str:
    """A number for the page: ``digits`` decimals for a float, "–" where there is none or it is not finite."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


class PageWriter:
    """The page being written: the sections fill it (``section``), save their figures (``figure``) and
    leave a note where something failed (``problem``); ``page_html`` is the whole page.

    Args:
        steps: the sections to write, for the progress bar (with a picture and a video per top-K row).
    """

    def __init__(self, view: RunView, out: Path, options: ReportOptions, steps: int):
        self.view, self.out, self.options = view, out, options
        self.report = Report(out / "index.html")
        self.parts: list[str] = []
        rows = min(options.top_k, len(view)) if options.media else 0  # a picture and a video each
        self.bar = progress_bar(steps + rows, "report", unit="step")
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
        self.parts.append(f'<section id="{name}"><h2>{esc(title)}</h2>\n{body}\n</section>')

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
        return f'<p class="note">unavailable ({esc(message)})</p>'

    def page_html(self) -> str:
        """The whole page: the sections written so far, in the page's HTML, with a link to each in the
        navigation bar (none to a section this run does not have, such as ``transfer`` before an evaluation)."""
        nav = "".join(f'<a href="#{name}">{esc(NAV[name])}</a>' for name in self.report.sections if name in NAV)
        return _PAGE.format(title=esc(f"derl report: {self.view.run.root.name}"), nav=nav, body="\n".join(self.parts),
                            generated=esc(time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())))


# The navigation bar's label of each section that has one, in the sections' order.
NAV = {"fitness": "fitness", "distribution": "initial vs last", "morphology": "morphology", "lineage": "lineage",
       "baldwin": "Baldwin effect", "top": "top morphologies", "transfer": "transfer", "progress": "in progress"}


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; margin: 0.5em 0; }}
td, th {{ border: 1px solid #ccc; padding: 4px 6px; font-size: 13px; vertical-align: top; }}
table.kv th {{ text-align: left; background: #f4f4f4; }}
td.lineage {{ max-width: 14em; font-size: 11px; }}
td.media {{ width: 200px; }}
td.media img, td.media video {{ display: block; }}
td.media small {{ color: #555; }}
table.top td {{ vertical-align: middle; }}
p.caption {{ font-size: 13px; max-width: 60em; color: #444; }}
.note {{ color: #a33; font-size: 12px; }}
.small-run, .fitness-note {{ background: #fff8e0; border-left: 4px solid #e0a000; padding: 6px 10px; max-width: 60em; }}
nav a {{ margin-right: 1em; }}
</style></head><body>
<h1>{title}</h1>
<nav>{nav}</nav>
{body}
<footer><p><small>generated {generated} by tools/report.py</small></p></footer>
</body></html>
"""
