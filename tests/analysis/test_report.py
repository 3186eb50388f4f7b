"""The report, replays and videos on a tiny real run (the session fixture ``tiny_run``) and on live runs."""

import json
import os
import re
import shutil
import struct
import subprocess
import sys
import time
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from derl.analysis import plots
from derl.analysis.replay import replay
from derl.analysis.report import ReportOptions, write_report
from derl.analysis.report_page import plural
from derl.analysis.run import RunView
from derl.envs import media
from tests.conftest import TINY_RUN

ROOT = Path(__file__).resolve().parents[2]
FIXED_SIZE = tuple(round(v * plots.DPI) for v in plots.FIGSIZE)


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.links: list[tuple[str, str]] = []  # (tag, url)
        self.sections: list[str] = []
        self.nav: list[str] = []  # the sections the navigation bar links to
        self.in_nav = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "section":
            self.sections.append(attrs["id"])
        self.in_nav |= tag == "nav"
        if tag == "a" and self.in_nav:
            self.nav.append(attrs["href"].removeprefix("#"))
        for name in ("src", "href", "poster"):
            if attrs.get(name) and not attrs[name].startswith("#"):
                self.links.append((tag, attrs[name]))

    def handle_endtag(self, tag):
        self.in_nav &= tag != "nav"


def _parse(index: Path) -> _Links:
    parser = _Links()
    parser.feed(index.read_text())
    return parser


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()[:24]
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


def _run_tool(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done


def test_report_of_a_finished_run(tiny_run, tmp_path):
    out = tmp_path / "report"
    printed = json.loads(_run_tool("tools/report.py", str(tiny_run), "--out", str(out), "--top", "3",
                                   "--video-steps", "24").stdout)
    assert printed["problems"] == []
    page = _parse(out / "index.html")
    assert page.sections == ["summary", "fitness", "distribution", "morphology", "lineage", "baldwin", "top"]
    assert page.nav == page.sections[1:]  # a link to every section but the first, none to a transfer not run
    for _tag, url in page.links:
        assert (out / url).exists(), url  # every picture, video and file link resolves from disk
    pngs = [out / url for tag, url in page.links if tag == "img" and url.startswith("plots/")]
    assert {p.stem for p in pngs} == {"fitness", "distribution", "morphology", "lineage", "baldwin", "top_curves"}
    for png in pngs:
        expected = tuple(printed["plots"][png.stem])
        assert png_size(png) == expected
        if png.stem in ("fitness", "distribution", "baldwin", "top_curves"):
            assert expected == FIXED_SIZE
    # Each body's picture is its video's poster: a click plays the policy, and the row stays one picture tall.
    videos = [out / url for tag, url in page.links if tag == "video" and url.endswith(".mp4")]
    bodies = [out / url for tag, url in page.links if tag == "video" and url.endswith(".png")]
    assert len(videos) == len(bodies) == 3 and not [url for tag, url in page.links if tag == "img" and "media/" in url]
    for video in videos:
        frames = media.read_video(video)
        assert frames.shape == (24, 240, 320, 3)
        assert frames.std() > 5 and frames.std(axis=0).mean() > 0.1  # not blank, and it moves
    for body in bodies:
        assert png_size(body) == media.IMAGE_SIZE
    html = (out / "index.html").read_text()
    view = RunView(tiny_run)
    # What the fitness is, next to the first plot; a tiny run says its plots mean little.
    assert html.index('class="fitness-note"') < html.index('src="plots/fitness.png"')
    assert "stochastic" in html and 'class="small-run"' in html and "Small run." in html
    # A term equal for every morphology is no column (it is listed once under the table).
    constant = [t for t in {k for r in view.records for k in r.fitness}
                if len({r.fitness.get(t) for r in view.records}) == 1]
    top_table = html.split('<table class="top">', 1)[1].split("</table>", 1)[0]
    assert all(f"<th>{t}</th>" not in top_table for t in constant)
    assert "std of its curve over the last 409,600 env steps" in top_table and top_table.count(" ± ") >= 3
    # The fitness is one column (it was two: its spread and its value); picture and video share a
    # cell, limbs, DoF, mass and files sit under the id: 5 columns and the other varying terms that
    # at least one of the top 3 has (a column of dashes is left out).
    header = top_table.split("</tr>", 1)[0]
    key = view.fitness_key
    assert header.count(key.replace("__reward__", "__reward__<wbr>")) == 1 and header.count(key) == 0
    # Terms equal for every morphology share a column (metric is x_pos on locomotion), summary fields
    # say what they measure, and energy is a whole number with thousands separators.
    columns = {tuple(r.fitness.get(t) for r in view.records)
               for t in {t for r in view.records for t in r.fitness} - set(constant) - {key}
               if any(isinstance(r.fitness.get(t), float) for r in view.top(3))}
    assert header.count("<th>") == 5 + len(columns), header
    assert "<td>–</td>" not in top_table.split("</tr>", 1)[1].replace('<td class="lineage">', "<td>")
    assert "metric = x_pos<br><small>the task&#x27;s metric; final x (m)</small>" in header
    assert "Σ |actuator force| per episode" in header and re.search(r"<td>\d{1,3}(,\d{3})+</td>", top_table)
    # How long the episodes lasted, and why the curves of bodies that do not fall are staircases.
    caption = html.split('src="plots/top_curves.png"', 1)[1]
    assert 'class="caption"' in caption and "ends its episodes together about every 3 iterations" in caption
    lengths = re.search(r"episodes lasted about (\d+) to (\d+) steps on average", caption)
    assert lengths and 0 < int(lengths[1]) <= int(lengths[2]) <= TINY_RUN["episode_length"]
    # The Baldwin section claims nothing a test of so few points does not support.
    assert "No trend the data support (Spearman&#x27;s rho" in html or "Too few distinct points" in html
    for record in view.top(3):
        assert f'id="m{record.id}"' in html
        assert f"{os.path.relpath(tiny_run / 'genomes', out)}/{record.id}.json" in html
    # A second report reuses the media already rendered: the files are left as they were, not written again.
    def written(paths):
        return {path: (path.stat().st_ino, path.stat().st_mtime_ns) for path in paths}

    rendered = written([*videos, *bodies])
    again = write_report(view, out, ReportOptions(top_k=3, video_steps=24))
    assert again.problems == [] and written(rendered) == rendered


def test_report_defaults_to_the_run_folder(tiny_run):
    view = RunView(tiny_run)
    report = write_report(view, options=ReportOptions(top_k=2, media=False))
    assert report.index == tiny_run / "report" / "index.html" and report.index.is_file()
    assert "top" in report.sections and report.problems == []


def test_report_videos_are_kept_per_seed(tiny_run, tmp_path, monkeypatch):
    """A report with another --seed renders that seed's video instead of reusing the default seed's."""
    view = RunView(tiny_run)
    best, other = view.top(1)[0].id, view.cfg.RNG_SEED + 1
    out = tmp_path / "report"
    (out / "media").mkdir(parents=True)
    (out / "media" / f"{best}.png").write_bytes(b"")  # reused: no body is rendered
    replayed = []

    def replay(_view, morphology_id, *, seed, video, video_steps):
        replayed.append(video.name)
        video.write_bytes(b"")
        return SimpleNamespace(video=video)

    monkeypatch.setattr("derl.analysis.report_top.replay", replay)
    for seed in (None, other, other):
        assert write_report(view, out, ReportOptions(top_k=1, video_steps=5, seed=seed)).problems == []
    assert replayed == [f"{best}-s{view.cfg.RNG_SEED}-5f.mp4", f"{best}-s{other}-5f.mp4"]


def test_replay_equals_train_ppo_eval_and_is_deterministic(tiny_run, tmp_path):
    best = RunView(tiny_run).top(1)[0].id
    done = _run_tool("tools/replay.py", str(tiny_run), best, "--seed", "5", "--episodes", "3")
    replayed = json.loads(done.stdout)
    # Both returns, with their spread, next to the fitness and what it is.
    assert len(replayed["deterministic"]["returns"]) == len(replayed["stochastic"]["returns"]) == 3
    assert replayed["deterministic"]["returns"][0] == replayed["return"]
    assert replayed["stochastic"]["returns"] != replayed["deterministic"]["returns"]
    # The published values under the names status, report and selection use; the replay's own apart.
    published = RunView(tiny_run).by_id[best].fitness
    assert "fitness" not in replayed and replayed["published"] == {
        "__reward__forward": published["__reward__forward"], "return": published["return"]}
    for spread in (replayed["deterministic"], replayed["stochastic"]):
        assert set(spread["criteria"]) == {"__reward__forward"}
    assert "stochastic" in replayed["note"] and "deterministic" in done.stderr
    assert f"published __reward__forward {published['__reward__forward']:.2f}" in done.stderr, done.stderr
    evaluated = json.loads(_run_tool(
        "tools/train_ppo.py", "--eval", str(tiny_run / "models" / f"{best}.pt"), "--cfg", str(tiny_run / "config.yaml"),
        "--xml", str(tiny_run / "xml" / f"{best}.xml"), "RNG_SEED", "5", "OUT_DIR", str(tmp_path / "eval")).stdout)
    assert replayed["return"] == evaluated["return"]
    assert replayed["metric"] == evaluated["metric"] and replayed["length"] == evaluated["lengths"][0]
    assert replayed["terms"]["__reward__forward"] == evaluated["__reward__forward"]
    video = tmp_path / "best.mp4"
    again = replay(RunView(tiny_run), best, seed=5, video=video, video_steps=30)
    assert again.episode_return == replayed["return"]  # rendering changes nothing
    assert media.read_video(video).shape[0] == 30 == again.frames


def test_replay_with_fewer_steps_and_default_seed(tiny_run, tmp_path):
    view = RunView(tiny_run)
    best = view.top(1)[0].id
    short = json.loads(_run_tool("tools/replay.py", str(tiny_run), best, "--steps", "10", "--video",
                                 str(tmp_path / "v.gif")).stdout)
    assert short["length"] <= 10 and short["seed"] == view.cfg.RNG_SEED
    assert short["video"].endswith(".gif") and media.read_video(short["video"]).shape[0] == 10


def test_tensorboard_of_a_real_search(tiny_run):
    """`tensorboard --logdir OUT_DIR` of the quick preset (tiny): the search's curves and, as asked
    (TENSORBOARD.PER_MORPHOLOGY), each morphology's training curves, read by TensorBoard's own reader."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    search = EventAccumulator(str(tiny_run / "tensorboard" / "search"))
    search.Reload()
    assert {"search/fitness", "search/best", "search/aging_window_mean", "search/return", "morphology/limbs",
            "morphology/dof"} <= set(search.Tags()["scalars"])
    assert len(search.Scalars("search/fitness")) == TINY_RUN["search"]
    morphologies = sorted(p.name for p in (tiny_run / "tensorboard" / "morphologies").iterdir())
    assert morphologies == sorted(RunView(tiny_run).by_id)
    one = EventAccumulator(str(tiny_run / "tensorboard" / "morphologies" / morphologies[0]))
    one.Reload()
    assert {"episode/return", "reward/forward", "train/entropy", "train/lr"} <= set(one.Tags()["scalars"])
    assert len(one.Scalars("train/lr")) == TINY_RUN["iterations"]


def test_videos_of_the_last_morphologies_of_the_search(tiny_run):
    videos = sorted(p.name for p in (tiny_run / "videos").iterdir())
    assert videos == [f"{TINY_RUN['search'] - 1:06d}.mp4"]  # EVO.VIDEOS_LAST_N 1: the last slot only
    frames = media.read_video(tiny_run / "videos" / videos[0])
    assert frames.shape[0] == TINY_RUN["video_length"] and frames.std() > 5
    assert not list((tiny_run / "tmp").glob("*videos*"))  # nothing left staged


def test_report_of_a_run_in_progress(tiny_run, tmp_path):
    """The run as it looks while the last morphology trains: no metadata yet, a partial curve."""
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run, ignore=shutil.ignore_patterns("report", "videos"))
    last = f"{TINY_RUN['search'] - 1:06d}"
    (run / "metadata" / f"{last}.json").unlink()
    curve = run / "metrics" / f"{last}.jsonl"
    curve.write_text("".join(curve.read_text().splitlines(keepends=True)[:5]))
    (run / "eval").mkdir()
    rows = [{"id": i, "source": str(run), "task": task, "seed": seed, "return": 10.0 * k + seed, "metric": 1.0}
            for k, i in enumerate(["000000", "000001"]) for task in ("patrol", "incline") for seed in (0, 1)]
    (run / "eval" / "summary.json").write_text(json.dumps({"rows": rows, "ranking": {}}))
    # A corrupt file under a name the search could write (slot 4's second attempt) is skipped.
    (run / "metadata" / "000004-2.json").write_text('{"id": "000004-2", "slot"')
    view = RunView(run)
    assert list(view.unreadable) == [str(run / "metadata" / "000004-2.json")]
    assert len(view) == TINY_RUN["search"] - 1 and not view.is_finished()
    assert [(t.id, t.iterations) for t in view.in_progress()] == [(last, 5)]
    report = write_report(view, run / "report", ReportOptions(top_k=2, video_steps=12))
    assert report.problems == []
    assert report.sections[-2:] == ["transfer", "progress"]
    assert _parse(report.index).nav[-2:] == ["transfer", "progress"]
    assert png_size(run / "report" / "plots" / "transfer.png") == FIXED_SIZE
    html = report.index.read_text()
    assert f"<td>{last}</td>" in html and f"5 / {TINY_RUN['iterations']}" in html and "in progress" in html
    assert "patrol" in html and "incline" in html and "unreadable files" in html
    assert "8 trainings: 2 morphologies x 2 tasks x 2 seeds" in html and "1 file skipped" in html


def test_report_while_a_search_runs(tmp_path):
    """Reports taken while a real coordinator and its workers publish (fake training), then at the end."""
    from tests.evolution.test_evolution_protocol import start

    out = tmp_path / "live"
    coordinator = start(out, "EVO.SEARCH_SPACE_SIZE", "10")
    try:
        seen = set()
        deadline = time.monotonic() + 120
        while coordinator.poll() is None and time.monotonic() < deadline:
            if (out / "config.yaml").is_file() and (out / "metadata").is_dir():
                report = write_report(RunView(out), tmp_path / "report", ReportOptions(top_k=3, media=False))
                assert report.problems == [] and report.index.is_file()
                seen.add(len(RunView(out)))
            time.sleep(0.3)
        assert coordinator.wait(timeout=60) == 0
    finally:
        if coordinator.poll() is None:
            coordinator.kill()
            coordinator.wait()
    assert len(seen) >= 2  # reports at different stages of the run
    final = write_report(RunView(out), tmp_path / "report", ReportOptions(top_k=3))
    assert "top" in final.sections and RunView(out).is_finished()
    assert all("picture" in p or "video" in p for p in final.problems)  # fake bodies cannot be rendered


def test_plural():
    assert [plural(n, "task") for n in (0, 1, 2)] == ["0 tasks", "1 task", "2 tasks"]
    assert plural(1, "morphology", "morphologies") == "1 morphology"
    assert plural(1000, "morphology", "morphologies") == "1,000 morphologies"


def test_distributions_overlap_in_no_third_colour():
    """The initial population as light bars, the last window as an outline over them: no translucent
    fill, so where they overlap no colour appears that the legend does not show."""
    figure = plots.distributions(np.array([1.0, 2.0, 2.5, 3.0]), np.array([2.0, 2.5, 3.5, 4.0]), "fitness")
    axes = figure.axes[0]
    bars = [patch for patch in axes.patches if patch.get_label() != ""]
    assert [patch.get_fill() for patch in bars] == [True, False]
    assert all(patch.get_alpha() in (None, 1.0) for patch in axes.patches)
    assert [text.get_text() for text in axes.get_legend().get_texts()] == [
        "initial population (n=4)", "its mean", "last aging window (n=4)", "its mean"]


def test_morphology_image(tiny_run, tmp_path):
    out = tmp_path / "body.png"
    _run_tool("tools/morphology.py", "image", str(tiny_run / "genomes" / "000000.json"), "--out", str(out),
              "--size", "320", "240")
    assert png_size(out) == (320, 240)
    import imageio.v3 as iio

    pixels = iio.imread(out)
    assert pixels.std() > 10 and np.unique(pixels.reshape(-1, pixels.shape[-1]), axis=0).shape[0] > 50
    bad = subprocess.run([sys.executable, "tools/morphology.py", "image", str(tmp_path / "none.json"), "--out",
                          str(tmp_path / "other.png")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "genome file not found" in bad.stderr


@pytest.mark.slow  # 13-23 s: kept out of make test's 10-minute budget
def test_a_video_that_cannot_be_made_never_costs_the_result(tmp_path):
    """The fake backend has no ``record_video``: every video of EVO.VIDEOS_LAST_N fails, every result stays."""
    from tests.evolution.test_evolution_protocol import assert_complete, start

    out = tmp_path / "run"
    coordinator = start(out, "EVO.SEARCH_SPACE_SIZE", "8", "EVO.VIDEOS_LAST_N", "3")
    assert coordinator.wait(timeout=120) == 0
    assert_complete(out, 8)
    log = (tmp_path / "run-coordinator.log").read_text()
    assert log.count("no video for") == 3 and not list((out / "videos").iterdir())
