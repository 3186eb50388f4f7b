"""The read side of a run without trainings: records, body statistics, curves, lineage, statistics, RunView."""

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import mujoco
import numpy as np
import pytest
from matplotlib.container import BarContainer

from benchmarks.report import build_synthetic_run
from derl.analysis import plots
from derl.analysis.curves import Curve, iterations_to_fraction, parse_curve, read_curve
from derl.analysis.lineage import LineageGraph, tree_layout
from derl.analysis.records import body_stats, publication_order, to_morphology
from derl.analysis.report import ReportOptions, write_report
from derl.analysis.report_content import eval_rows, transfer_table
from derl.analysis.run import RunError, RunView
from derl.analysis.stats import TREND_MIN_POINTS, running_best, trend, trend_test, window_mean
from derl.checked_config import load_preset, load_run_config
from derl.config import dump_config, with_values
from derl.evolution.folder.record import PublishedRecord, fitness_terms
from derl.evolution.results import rank
from derl.evolution.status import status_lines
from derl.morphology import random_genome, to_mjcf
from derl.ppo.episodes import FITNESS_STEPS

ROOT = Path(__file__).resolve().parents[2]


def test_body_stats_match_the_compiled_model():
    cfg = load_preset("ft")
    for k in range(5):
        genome = random_genome(cfg.unimal, np.random.default_rng(k), f"g{k}")
        stats = body_stats(json.loads(genome.to_json()))
        model = mujoco.MjModel.from_xml_string(to_mjcf(genome, cfg))
        assert stats.limbs == genome.num_limbs and stats.dof == genome.dof == model.nu
        # The MJCF writes 8 significant digits, hence the tolerance.
        assert stats.mass == pytest.approx(model.body_subtreemass[1], rel=1e-6)


def test_body_stats_of_a_genome_without_a_body_are_unknown():
    assert body_stats({"id": "x", "size": 3.0}).limbs is None
    assert body_stats(None).mass is None


def _record(morphology_id, slot, **extra):
    return PublishedRecord.from_json({
        "id": morphology_id, "slot": slot, "attempt": 0, "parent_id": None, "lineage": morphology_id,
        "mutation": None, "return": 1.0, "__reward__forward": 2.0, "wall_time": 5.0, "files": {}, **extra})


def test_publication_order_is_the_order_of_the_publication_numbers():
    late_slot = [_record("000001", 1, publication=0), _record("000000", 0, publication=1)]
    assert [r.id for r in publication_order(late_slot)] == ["000001", "000000"]
    gaps = [_record("000000", 0, publication=7), _record("000001", 1, publication=2),
            _record("000002", 2, publication=5)]  # a number a dead worker took is never a record's
    assert [r.id for r in publication_order(gaps)] == ["000001", "000002", "000000"]


def test_fitness_terms_are_the_numeric_results_only():
    record = to_morphology(_record("000004", 4, x_pos=0.5, seed=7, publication=3, node=0), None, 0)
    assert record.fitness == {"return": 1.0, "__reward__forward": 2.0, "x_pos": 0.5}
    assert fitness_terms({"id": "a", "flag": True, "metric": 2}) == {"metric": 2.0}


def test_iterations_to_fraction_worked_example():
    # values 1, 2, 4, 4, the last 2 in the fitness's 409,600 env steps; final = 4; 50% -> 2, first at iteration 2.
    steps = np.array([1.0, 2.0, 3.0, 4.0]) * FITNESS_STEPS / 2
    curve = Curve(np.array([1, 2, 3, 4]), {"f": np.array([1.0, 2.0, 4.0, 4.0]), "env_steps": steps})
    assert iterations_to_fraction(curve, "f", 0.5) == 2
    assert iterations_to_fraction(curve, "f", 1.0) == 3
    # Without env steps, the last 100 records (DERL's iterations): here all four, final 2.75.
    assert iterations_to_fraction(Curve(curve.iterations, {"f": curve.values["f"]}), "f", 1.0) == 3
    negative = Curve(np.array([1, 2]), {"f": np.array([-3.0, -1.0])})
    assert iterations_to_fraction(negative, "f", 0.5) is None
    assert iterations_to_fraction(curve, "missing", 0.5) is None


def test_reading_a_few_keys_equals_parsing_every_record(tmp_path):
    lines = [json.dumps({"iteration": k + 1, "return": 1.5 * k - 3, "__reward__forward": 1e-5 * k, "lr": 3e-4})
             for k in range(50)]
    path = tmp_path / "m.jsonl"
    path.write_text("\n".join(lines) + "\n")
    fast, full = read_curve(path, ("return", "__reward__forward")), parse_curve(path.read_text())
    assert np.array_equal(fast.iterations, full.iterations)
    for key in ("return", "__reward__forward"):
        assert np.array_equal(fast.values[key], full.values[key])
    # A record without the key: the pattern's count does not match, so the records are parsed (NaN there).
    path.write_text(path.read_text() + json.dumps({"iteration": 51, "lr": 1e-4}) + "\n")
    partial = read_curve(path, ("return",))
    assert len(partial) == 51 and math.isnan(partial.values["return"][-1])
    assert len(read_curve(tmp_path / "absent.jsonl", ("return",))) == 0


def test_running_statistics_and_trend():
    assert window_mean(np.array([1.0, 2.0, 3.0, 4.0]), 2).tolist() == [1.0, 1.5, 2.5, 3.5]
    assert running_best(np.array([1.0, 3.0, 2.0]), maximise=True).tolist() == [1.0, 3.0, 3.0]
    assert running_best(np.array([3.0, 1.0, 2.0]), maximise=False).tolist() == [3.0, 1.0, 1.0]
    slope, intercept = trend(np.array([0, 1, 2, 3]), np.array([10.0, 8.0, 6.0, 4.0]))
    assert slope == pytest.approx(-2.0) and intercept == pytest.approx(10.0)
    assert trend(np.array([1.0]), np.array([2.0])) is None


def test_a_trend_over_the_search_is_claimed_only_when_spearmans_test_supports_it():
    order = np.arange(40.0)
    falling = trend_test(order, 100.0 - order)
    assert falling.rho == pytest.approx(-1.0) and falling.p < 1e-6 and falling.direction() == -1
    assert trend_test(order, order ** 2).direction() == 1
    few = trend_test(order[:TREND_MIN_POINTS - 1], 100.0 - order[:TREND_MIN_POINTS - 1])
    assert few.p < 1e-6 and few.direction() == 0  # significant, but too few morphologies for a claim
    noise = trend_test(order, np.random.default_rng(0).normal(size=40))
    assert noise.p > 0.05 and noise.direction() == 0
    assert trend_test(order[:2], order[:2]) is None and trend_test(order, np.ones(40)) is None


def test_the_baldwin_verdict_states_its_test_and_sample_size():
    from derl.analysis.report_content import baldwin_verdict

    order = np.arange(40.0)
    assert baldwin_verdict(order, 100.0 - order).startswith("Later morphologies learn faster: a Baldwin effect")
    assert "n = 40" in baldwin_verdict(order, 100.0 - order)
    small = baldwin_verdict(order[:20], 100.0 - order[:20])
    assert small.startswith("No trend the data support (Spearman's rho -1.00") and "n = 20" in small
    assert baldwin_verdict(order[:2], order[:2]) == "Too few distinct points for a test of a trend."


def test_the_fitness_histogram_counts_whole_morphologies():
    from derl.analysis import plots

    figure = plots.distributions(np.array([1.0, 2.0]), np.array([2.5]), "fitness")
    ticks = figure.axes[0].get_yticks()
    assert len(ticks) and all(float(t).is_integer() for t in ticks)


def _records(lineages):
    return [to_morphology(_record(chain.split("/")[-1], k, lineage=chain, publication=k), None, k)
            for k, chain in enumerate(lineages)]


def test_lineage_graph_and_family_tree_layout():
    graph = LineageGraph(_records(["a", "b", "a/c", "a/d", "a/c/e", "b/f"]))
    assert graph.roots == ["a", "b"]
    assert graph.ancestors("e") == ["a", "c", "e"]
    assert graph.family(["e", "d"]) == {"a", "c", "d", "e"}
    assert graph.descendants("a") == 3
    positions = tree_layout(graph, graph.family(["e", "d", "f"]))
    assert positions["a"][1] == 0 and positions["e"][1] == 2
    assert positions["a"][0] == (positions["c"][0] + positions["d"][0]) / 2  # a parent over its children
    assert len({positions[leaf][0] for leaf in ("e", "d", "f")}) == 3  # leaves side by side


def test_family_tree_layout_of_a_lineage_deeper_than_the_recursion_limit():
    chain = "/".join(f"{k:06d}" for k in range(3000))
    graph = LineageGraph(_records([chain]))
    positions = tree_layout(graph, graph.family(["002999"]))
    assert positions["002999"] == (0.0, 2999)


@pytest.fixture(scope="module")
def synthetic_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("synthetic") / "run"
    build_synthetic_run(out, morphologies=30, iterations=20, genomes=4)
    return out


def test_run_view_of_a_synthetic_run(synthetic_run):
    view = RunView(synthetic_run)
    assert len(view) == 30 and [r.publication for r in view.records] == list(range(30))
    assert [r.slot for r in view.records] == list(range(30))  # published_at rises with the slot here
    assert all(r.limbs and r.dof and r.mass for r in view.records)
    published = [PublishedRecord.from_json(json.loads(path.read_text()))
                 for path in (synthetic_run / "metadata").glob("*.json")]
    expected = rank(published, view.criteria, view.objectives)[:5]
    assert [r.id for r in view.top(5)] == [record.id for record in expected]
    speeds = view.learning_speed(0.75)
    assert len(speeds) == 30 and all(n is not None and 1 <= n <= 20 for n in speeds.values())
    assert view.in_progress() == [] and view.eval_summary() is None
    graph = view.lineage()
    assert all(graph.ancestors(r.id) == list(r.lineage) for r in view.records)
    assert len(view.curve("000003")) == 20


def test_run_view_errors_are_one_line(tmp_path, synthetic_run):
    with pytest.raises(RunError, match="run folder not found"):
        RunView(tmp_path / "nothing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(RunError, match="not an evolution output folder"):
        RunView(tmp_path / "empty")
    with pytest.raises(RunError, match="000099 is not published"):
        RunView(synthetic_run).require_published("000099")
    for command in (["tools/report.py", str(tmp_path / "nothing")],
                    ["tools/replay.py", str(synthetic_run), "000099"],
                    ["tools/replay.py", str(synthetic_run), "000001"]):  # published, but it has no checkpoint
        done = subprocess.run([sys.executable, *command], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and done.stderr.startswith("error: ") and len(done.stderr.splitlines()) == 1


def test_unreadable_claims_are_reported_and_skipped(tmp_path, synthetic_run):
    run = tmp_path / "run"
    shutil.copytree(synthetic_run, run)
    (run / "slots" / "000030.json").write_text('{"slot": 30, "id"')  # truncated
    (run / "leases" / "000031-1.json").write_text(json.dumps({"id": "000005", "node": 0, "worker": 0}))  # foreign slot
    view = RunView(run)
    assert view.in_progress() == []
    assert sorted(view.unreadable) == [str(run / "leases" / "000031-1.json"), str(run / "slots" / "000030.json")]
    report = write_report(view, tmp_path / "report", ReportOptions(top_k=2, media=False))
    assert report.problems == [] and "unreadable files" in report.index.read_text()


def test_status_and_report_name_the_search_random_search_included(tmp_path, synthetic_run):
    """With EVO.IS_EVO false both said "aging_num on __reward__forward (window 30, ...)"."""
    report = write_report(RunView(synthetic_run), tmp_path / "evolution", ReportOptions(top_k=2, media=False))
    row = "<tr><th>search</th><td>evolution: aging_num tournaments on __reward__forward (window 30, initial"
    assert row in report.index.read_text()
    run = tmp_path / "run"
    shutil.copytree(synthetic_run, run)
    cfg = load_run_config(run / "config.yaml")
    (run / "config.yaml").write_text(dump_config(with_values(cfg, {"EVO.IS_EVO": False})))
    said = "search: random search (EVO.IS_EVO false): 30 morphologies drawn like an initial population, no tournament"
    assert status_lines(str(run))[1].startswith(said)
    report = write_report(RunView(run), tmp_path / "random", ReportOptions(top_k=2, media=False))
    assert f"<tr><th>{said.replace(': ', '</th><td>', 1)}" in report.index.read_text()


def test_transfer_table_means_over_seeds():
    rows = eval_rows({"rows": [
        {"id": "a", "task": "patrol", "seed": 0, "return": 10.0, "metric": 1.0},
        {"id": "a", "task": "patrol", "seed": 1, "return": 20.0, "metric": 3.0},
        {"id": "b", "task": "incline", "seed": 0, "return": 5.0, "metric": 0.5},
        {"note": "not a row"},
    ]})
    tasks, ids, means, stds, metrics = transfer_table(rows)
    assert tasks == ["incline", "patrol"] and ids == ["a", "b"]
    assert means[0, 1] == 15.0 and stds[0, 1] == pytest.approx(50 ** 0.5) and metrics[0, 1] == 2.0  # sample std
    assert math.isnan(means[0, 0]) and means[1, 0] == 5.0 and math.isnan(stds[1, 0])  # one seed: no spread
    two_runs = [{"id": "a", "source": "/x/ft", "task": "t", "return": 1.0},
                {"id": "a", "source": "/x/vt", "task": "t", "return": 2.0}]
    assert transfer_table(eval_rows(two_runs))[1] == ["ft:a", "vt:a"]
    assert eval_rows([{"id": "a", "task": "t"}]) == [{"id": "a", "task": "t"}]
    assert eval_rows("nonsense") == []


def test_transfer_without_a_result_has_no_bar_and_no_rank(tmp_path, synthetic_run):
    rows = [{"id": "000001", "task": "patrol", "seed": 0, "return": 10.0, "metric": 1.0},
            {"id": "000001", "task": "patrol", "seed": 1, "return": 20.0, "metric": 3.0},
            {"id": "000002", "task": "incline", "seed": 0, "return": 5.0, "metric": 0.5}]
    tasks, ids, means, stds, _ = transfer_table(rows)
    bars = [c for c in plots.transfer(tasks, ids, means, stds).axes[0].containers if isinstance(c, BarContainer)]
    assert [[patch.get_height() for patch in bars_of_id] for bars_of_id in bars] == [[15.0], [5.0]]
    run = tmp_path / "run"
    shutil.copytree(synthetic_run, run)
    (run / "eval").mkdir()
    (run / "eval" / "summary.json").write_text(json.dumps({"rows": rows}))
    report = write_report(RunView(run), tmp_path / "report", ReportOptions(top_k=2, media=False))
    html = report.index.read_text()
    assert report.problems == [] and "15.0 ± 7.1<br><small>metric 2.00, rank 1<" in html
    assert "5.0 ± –<br><small>metric 0.50, rank 1<" in html and html.count("rank –<") == 2


def _frames(count: int) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.integers(0, 255, (48, 64, 3), dtype=np.uint8) for _ in range(count)]


def test_videos_are_mp4_with_every_frame_or_gif_when_mp4_fails(tmp_path, monkeypatch):
    from derl.envs import media

    path = media.write_video(_frames(7), tmp_path / "a.mp4", fps=50)
    assert path == tmp_path / "a.mp4" and media.read_video(path).shape == (7, 48, 64, 3)

    def broken(*args, **kwargs):
        raise RuntimeError("no ffmpeg here")

    monkeypatch.setattr(media, "_mp4", broken)
    path = media.write_video(_frames(5), tmp_path / "b.mp4", fps=50)
    assert path == tmp_path / "b.gif" and media.read_video(path).shape == (5, 48, 64, 3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.mp4", "b.gif"]  # nothing staged left
    # A user's --video is checked before the replay; the GIF in its place only here: never over a file unasked.
    with pytest.raises(FileExistsError, match="b.gif: exists; give --overwrite"):
        media.write_video(_frames(3), tmp_path / "b.mp4", fps=50, overwrite=False)
    assert media.read_video(tmp_path / "b.gif").shape[0] == 5
    assert media.write_video(_frames(3), tmp_path / "b.mp4", fps=50) == tmp_path / "b.gif"
    assert media.read_video(tmp_path / "b.gif").shape[0] == 3


def test_a_report_of_a_run_with_planted_files_never_hangs_or_fails(tmp_path, synthetic_run):
    """A FIFO as a curve and as eval/summary.json, a failure record of the wrong type and a genome
    whose numbers overflow: the report is written, each named as a problem or skipped."""
    run = tmp_path / "run"
    shutil.copytree(synthetic_run, run)
    (run / "metrics" / "000003.jsonl").unlink()
    os.mkfifo(run / "metrics" / "000003.jsonl")
    (run / "eval").mkdir()
    os.mkfifo(run / "eval" / "summary.json")
    (run / "error_metadata").mkdir(exist_ok=True)
    (run / "error_metadata" / "000004.json").write_text("[1, 2]")
    genome = json.loads((run / "genomes" / "000005.json").read_text())
    (run / "genomes" / "000005.json").write_text(json.dumps({**genome, "head_radius": 1e300}))
    view = RunView(run)
    assert len(view.curve("000003")) == 0 and view.by_id["000005"].mass is None
    report = write_report(view, tmp_path / "report", ReportOptions(top_k=2, media=False))
    assert str(run / "error_metadata" / "000004.json") in view.unreadable
    assert any("eval/summary.json" in problem for problem in report.problems)


def swap_before(monkeypatch, module, names, folder, outside, plant):
    """Replaces ``module.<name>`` (each of ``names``) by a call that first swaps ``folder`` for a link to
    ``outside`` (once) and writes ``plant`` (file name: text) there: the swap lands between any check of
    the folder by path and its use."""
    from tests.evolution.test_evolution_folders import swap_for_link

    swapped = []

    def swapping(real):
        def swap_then_use(*args, **kwargs):
            if not swapped:  # once (copytree lists folders too)
                swapped.append(True)
                swap_for_link(folder, outside)
                for name, text in plant.items():
                    (outside / name).write_text(text)
            return real(*args, **kwargs)
        return swap_then_use

    for name in names:
        monkeypatch.setattr(module, name, swapping(getattr(module, name)))



def test_a_metrics_folder_swapped_for_a_link_between_its_check_and_its_use_is_never_read_through(tmp_path,
                                                                                               monkeypatch):
    """``metrics/`` becomes a link to a folder outside right before a curve is read. Before: the folder was
    checked by path (``in_real_folder``), then the curve planted outside read as the morphology's."""
    from derl.analysis import run as run_module
    from derl.checked_config import load_config
    from derl.config import dump_config
    from derl.evolution.folder.run_dir import RunDir

    folder = RunDir(tmp_path / "run")
    folder.create()
    folder.config_path().write_text(dump_config(load_config(None, [])))
    folder.metrics_path("000001").write_text('{"iteration": 1, "return": 5.0}\n')
    view = RunView(folder.root)
    swap_before(monkeypatch, run_module, ["read_curve"], folder.root / "metrics", tmp_path / "outside",
                {"000001.jsonl": '{"iteration": 1, "return": 99.0}\n{"iteration": 2, "return": 99.0}\n'})
    curve = view.curve("000001", ("return",))
    assert list(curve.values["return"]) == [5.0]  # from the folder opened, never through the link
    assert (folder.root / "metrics").is_symlink()


@pytest.mark.parametrize("folder, module, name", [
    ("plots", "derl.analysis.plots", "new_figure"),  # right before a figure is saved
    ("media", "derl.analysis.report_top", "render_body"),  # right before a body's picture is written
    ("media", "derl.analysis.replay", "run_policy"),  # right before a policy's video is written
], ids=["figure", "picture", "video"])
def test_a_report_folder_swapped_for_a_link_between_its_check_and_a_write_gets_nothing(
        tmp_path, synthetic_run, monkeypatch, folder, module, name):
    """The report makes ``OUT_DIR/report/plots/`` and ``media/`` (each folder from ``OUT_DIR`` down
    checked), then writes into them: the folder becomes a link to a folder outside right before a figure,
    a picture or a video is written. Before: written by path, through the link, outside ``OUT_DIR``."""
    import importlib

    run = tmp_path / "run"
    shutil.copytree(synthetic_run, run)
    frame = np.zeros((32, 48, 3), np.uint8)
    monkeypatch.setattr("derl.analysis.report_top.render_body", lambda *args: frame)
    monkeypatch.setattr("derl.analysis.replay.run_policy", lambda *args, **kwargs: (
        [{"return": 1.0, "length": 2}], [frame, frame], 50.0))
    outside = tmp_path / "outside"
    swap_before(monkeypatch, importlib.import_module(module), [name], run / "report" / folder, outside, {})
    report = write_report(RunView(run), options=ReportOptions(top_k=1))
    assert (run / "report" / folder).is_symlink()  # the swap did happen
    assert sorted(os.listdir(outside)) == sorted(os.listdir(tmp_path / "outside.aside"))  # nothing written through
    assert any(f"report/{folder} is not a folder" in problem for problem in report.problems), report.problems


@pytest.mark.parametrize("folder", ["xml", "models"])
def test_a_folder_swapped_for_a_link_between_the_replays_check_and_its_use_is_never_read_through(
        tmp_path, synthetic_run, monkeypatch, folder):
    """``xml/`` or ``models/`` becomes a link to a folder outside right before the policy is played.
    Before: both files were checked by path (lstat), then ``run_policy`` opened them by path, through
    the link: the body or the policy planted outside was played as the morphology's."""
    from derl.analysis import replay as replay_module

    run = tmp_path / "run"
    shutil.copytree(synthetic_run, run)
    view = RunView(run)
    best = view.top(1)[0].id
    name = f"{best}.xml" if folder == "xml" else f"{best}.pt"
    own = (run / folder / name).read_bytes()
    played = []

    def run_policy(world, xml_path, checkpoint, seed, **kwargs):
        played.append((Path(xml_path).read_bytes(), Path(checkpoint).read_bytes()))
        return [{"return": 1.0, "length": 2}], [], 50.0

    monkeypatch.setattr(replay_module, "run_policy", run_policy)
    swap_before(monkeypatch, replay_module, ["run_policy"], run / folder, tmp_path / "outside",
                {name: "planted outside\n"})
    replay_module.replay(view, best)
    assert (run / folder).is_symlink()  # the swap did happen
    assert played[0][0 if folder == "xml" else 1] == own  # from the folder opened, never through the link


def test_a_replay_names_the_runs_file_not_its_private_copy(tmp_path, synthetic_run):
    """A replay plays private copies (the test above); a checkpoint that does not load is named as the run's file."""
    from derl.analysis.replay import replay

    view = RunView(synthetic_run)
    best = view.top(1)[0].id
    with pytest.raises(RunError, match=f"^{view.run.checkpoint_path(best)}: not a readable checkpoint"):
        replay(view, best)


def test_an_eval_folder_swapped_for_a_link_before_its_summary_is_read_is_never_read_through(tmp_path, synthetic_run,
                                                                                            monkeypatch):
    """``eval/`` becomes a link right before ``eval/summary.json`` is read (the report's transfer table).
    Before: read by path, through the link: the summary planted outside."""
    from derl.analysis import run as run_module

    run = tmp_path / "run"
    shutil.copytree(synthetic_run, run)
    (run / "eval").mkdir()
    (run / "eval" / "summary.json").write_text(json.dumps({"rows": []}))
    view = RunView(run)
    swap_before(monkeypatch, run_module, ["read_json"], run / "eval", tmp_path / "outside",
                {"summary.json": json.dumps({"rows": [{"task": "planted", "id": "000001"}]})})
    assert view.eval_summary() == {"rows": []}
    assert (run / "eval").is_symlink()
