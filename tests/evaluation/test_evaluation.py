"""Transfer evaluation (``tools/evaluate.py``, ``derl.evaluation``) on a copy of the tiny real run."""

import json
import os
import runpy
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from derl.analysis.report import ReportOptions, write_report
from derl.analysis.run import RunView
from derl.evaluation import Cell, EvalError, open_runs, plan_cells, task_names
from derl.evaluation.cell import PARENT_PID_VARIABLE, orphaned
from derl.evaluation.store import EvalDir, compare_runs, ranking
from derl.evolution.folder.run_dir import RunDir
from derl.evolution.folder.shared import Identity
from tests.analysis.test_analysis import swap_before

ROOT = Path(__file__).resolve().parents[2]
TASKS = ("patrol", "point_nav")
# 20 iterations of 2 envs x 32 steps, a checkpoint every 2 iterations.
BUDGET = ["PPO.MAX_STATE_ACTION_PAIRS", "1280", "ENV.EPISODE_LENGTH", "50", "CHECKPOINT_PERIOD", "2"]


def _evaluate(run: Path, *args: str, budget: list[str] = BUDGET) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "tools/evaluate.py", str(run), "--workers", "1", *args, *budget],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.fixture(scope="module")
def evaluated(tiny_run, tmp_path_factory):
    """The best morphology of a copy of the tiny run evaluated on point_nav (one cell)."""
    run = tmp_path_factory.mktemp("evaluate") / "run"
    shutil.copytree(tiny_run, run)
    done = _evaluate(run, "--tasks", "point_nav", "--top", "1")
    out, _ = done.communicate(timeout=300)
    assert done.returncode == 0, out
    return run, out


def test_evaluation_of_a_tiny_run(evaluated):
    run, out = evaluated
    summary = json.loads((run / "eval" / "summary.json").read_text())
    best = RunView(run).top(1)[0].id
    assert [(row["id"], row["task"], row["seed"], row["source"]) for row in summary["rows"]] == [
        (best, "point_nav", 0, str(run))]
    assert isinstance(summary["rows"][0]["return"], float) and isinstance(summary["rows"][0]["metric"], float)
    assert summary["ranking"]["point_nav"][0]["id"] == best
    assert len((run / "eval" / "summary.csv").read_text().splitlines()) == 2
    assert "1 cells, 0 already done" in out and f"1/1 done: point_nav run:{best} seed 0" in out
    config = (run / "eval" / "point_nav" / f"{best}-s0" / "config.yaml").read_text()
    assert "TASK: point_nav" in config and "TIMESTEPS: 32" in config  # the task's env, the run's PPO
    assert "Warning" not in out  # the cell's process starts without loading its module twice
    curves = EventAccumulator(str(run / "eval" / "point_nav" / f"{best}-s0" / "tensorboard"))
    curves.Reload()
    assert {"episode/return", "reward/reach", "train/entropy"} <= set(curves.Tags()["scalars"])


def test_rerun_of_a_finished_evaluation_trains_nothing(evaluated):
    run = evaluated[0]
    mtimes = {p: p.stat().st_mtime_ns for p in (run / "eval").glob("*/*/*")}
    done = _evaluate(run, "--tasks", "point_nav", "--top", "1")
    out, _ = done.communicate(timeout=120)
    assert done.returncode == 0 and "1 cells, 1 already done" in out and " done: " not in out, out
    assert {p: p.stat().st_mtime_ns for p in (run / "eval").glob("*/*/*")} == mtimes


def test_report_shows_the_evaluation(evaluated):
    run = evaluated[0]
    report = write_report(RunView(run), run / "report", ReportOptions(top_k=2, media=False))
    assert "transfer" in report.sections and report.problems == []
    html = (run / "report" / "index.html").read_text()
    row = json.loads((run / "eval" / "summary.json").read_text())["rows"][0]
    assert f"<td>{row['id']}</td>" in html and "<th>point_nav</th>" in html


def test_several_runs_are_compared_per_task(evaluated, tmp_path):
    run = evaluated[0]
    twin = tmp_path / "twin"
    shutil.copytree(run, twin)  # its cell is finished too: nothing is trained
    compare = tmp_path / "compare.json"
    done = subprocess.Popen([sys.executable, "tools/evaluate.py", str(run), str(twin), "--workers", "1",
                             "--tasks", "point_nav", "--top", "1", "--compare", str(compare), *BUDGET],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out, _ = done.communicate(timeout=120)
    assert done.returncode == 0 and " done: " not in out, out
    table = json.loads(compare.read_text())
    assert table["runs"] == [str(run), str(twin)]
    entries = table["tasks"]["point_nav"]
    assert sorted(e["source"] for e in entries) == sorted([str(run), str(twin)])
    assert entries[0]["return"] == entries[1]["return"] and entries[0]["cells"] == 1
    assert any(line.startswith("[evaluate] point_nav: ") and str(twin) in line for line in out.splitlines())


@pytest.mark.slow
def test_killed_evaluation_finishes_without_retraining(tiny_run, tmp_path):
    """2 morphologies x 2 tasks, one training at a time, killed (SIGKILL) while the second cell
    trains, then rerun: every cell ends in the summary, the first is not retrained, the second
    continues from its checkpoint. Wherever the kill lands, the metrics lines are a prefix of the
    checkpoint's records (the trainer writes the checkpoint first), so the rerun's curve extends them."""
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    # 50 iterations: the kill must land after the second cell's first checkpoint and before its end.
    budget = [*BUDGET, "PPO.MAX_STATE_ACTION_PAIRS", "3200"]
    first = _evaluate(run, "--tasks", ",".join(TASKS), "--top", "2", budget=budget)
    second_cell = None
    deadline = time.monotonic() + 240
    for line in first.stdout:  # one line per finished cell
        if "1/4 done" in line:
            break
    while second_cell is None and time.monotonic() < deadline:
        checkpoints = [p.parent for p in (run / "eval").glob("*/*/model.pt")
                       if not (p.parent / "metrics.json").exists()]
        second_cell = checkpoints[0] if checkpoints else None
        time.sleep(0.2)
    assert second_cell is not None, "no second training checkpointed"
    trainings = psutil.Process(first.pid).children(recursive=True)
    first.send_signal(signal.SIGKILL)
    first.wait()
    # The training dies with its parent (PR_SET_PDEATHSIG): wait for it, then nothing writes the folder.
    gone, alive = psutil.wait_procs(trainings, timeout=60)
    assert trainings and not alive
    finished = {p: p.stat().st_mtime_ns for p in (run / "eval").glob("*/*/metrics.json")}
    assert len(finished) == 1 and not (second_cell / "metrics.json").exists()
    before = (second_cell / "metrics.jsonl").read_text().splitlines()
    rerun = _evaluate(run, "--tasks", ",".join(TASKS), "--top", "2", budget=budget)
    out, _ = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, out
    summary = json.loads((run / "eval" / "summary.json").read_text())
    best_two = [record.id for record in RunView(run).top(2)]
    assert sorted((row["id"], row["task"], row["seed"]) for row in summary["rows"]) == sorted(
        (i, task, 0) for i in best_two for task in TASKS)
    assert set(summary["ranking"]) == set(TASKS) and all(len(v) == 2 for v in summary["ranking"].values())
    assert "4 cells, 1 already done" in out and out.count(" done: ") == 3
    for path, mtime in finished.items():
        assert path.stat().st_mtime_ns == mtime  # not retrained
    after = (second_cell / "metrics.jsonl").read_text().splitlines()
    assert before and len(after) == 50 and after[:len(before)] == before  # resumed at its checkpoint



@pytest.mark.slow
def test_evaluation_with_two_data_parallel_ranks(tiny_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    done = _evaluate(run, "--tasks", "point_nav", "--top", "1", "--nproc", "2")
    out, _ = done.communicate(timeout=300)
    assert done.returncode == 0, out
    best = RunView(run).top(1)[0].id
    result = json.loads((run / "eval" / "point_nav" / f"{best}-s0" / "metrics.json").read_text())
    # 20 iterations of 64 env steps for one rank; two ranks share that total: 10 iterations each.
    assert (result["world_size"], result["iterations"], result["env_steps"]) == (2, 10, 1280)
    rows = json.loads((run / "eval" / "summary.json").read_text())["rows"]
    assert [(row["id"], row["task"]) for row in rows] == [(best, "point_nav")]

def test_bad_input_is_one_line_and_exit_2(tiny_run, tmp_path, capsys):
    tool = runpy.run_path(str(ROOT / "tools" / "evaluate.py"))
    for args in (["--tasks", "nope"], ["--tasks", "patrol", "--ids", "000000,../x"], ["--tasks", "patrol", "FOO", "1"],
                 ["--tasks", "patrol", "PPO.NUM_ENVS"], ["--tasks", "patrol", "--seeds", "0"],
                 ["--tasks", "patrol", "--compare", str(tmp_path)],
                 ["--tasks", "patrol", "--compare", str(tmp_path / "missing" / "compare.json")]):
        assert tool["main"]([str(tiny_run), *args]) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and len(captured.err.splitlines()) == 1, captured.err
        assert captured.err.startswith("error: ")
    assert "--compare" in captured.err and "existing folder" in captured.err
    # --workers 0 names a missing run too: were 0 let through as the default, that run's error would answer.
    for run, args, problem in ((tiny_run, ["--ids", ","], "no morphology id"),
                               (tmp_path / "missing", ["--workers", "0"], "must be at least 1")):
        assert tool["main"]([str(run), "--tasks", "patrol", *args]) == 2
        captured = capsys.readouterr()
        assert captured.err.startswith("error: ") and problem in captured.err, captured.err
        assert len(captured.err.splitlines()) == 1
    with pytest.raises(EvalError, match="unknown morphology id '\\.\\./x'"):
        plan_cells(open_runs([tiny_run]), ["patrol"], None, ["../x"], 1, [])
    unfinished = tmp_path / "run"
    shutil.copytree(tiny_run, unfinished, ignore=shutil.ignore_patterns("000005.json"))
    with pytest.raises(EvalError, match="no finished run \\(5 of 6"):
        plan_cells(open_runs([unfinished]), ["patrol"], 2, None, 1, [])
    linked = tmp_path / "linked"
    shutil.copytree(tiny_run, linked, ignore=shutil.ignore_patterns("eval"))
    (linked / "eval").symlink_to(tmp_path)
    with pytest.raises(EvalError, match="eval is not a folder"):
        plan_cells(open_runs([linked]), ["patrol"], 1, None, 1, [])
    with pytest.raises(EvalError, match="unknown task"):
        task_names("patrol,point-nav")
    assert len(task_names("all")) == 8


def test_claims_of_live_and_dead_owners(tmp_path):
    (tmp_path / "tmp").mkdir()
    cell = Cell(tmp_path, "patrol", "000001", 0)
    me = EvalDir(RunDir(tmp_path), lease_seconds=600, identity=Identity("node-a", os.getpid(), "a"))
    other_host = EvalDir(RunDir(tmp_path), lease_seconds=600, identity=Identity("node-b", 1, "b"))
    assert me.claim(cell) == 0
    assert other_host.claim(cell) is None  # held by a live owner elsewhere
    claim = tmp_path / "eval" / "claims" / "patrol" / "000001-s0-0.json"
    os.utime(claim, (time.time() - 700, time.time() - 700))  # silent for longer than the lease
    assert other_host.claim(cell) == 1 and me.lost(cell, 0) and not other_host.lost(cell, 1)
    assert me.claim(cell) is None  # node-b beats (fresh claim), so node-a stays out
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    host = socket.gethostname()
    same_host = EvalDir(RunDir(tmp_path), lease_seconds=600, identity=Identity(host, os.getpid(), "c"))
    cell2 = Cell(tmp_path, "patrol", "000002", 0)
    assert EvalDir(RunDir(tmp_path), 600, Identity(host, int(dead.stdout), "d")).claim(cell2) == 0
    assert same_host.claim(cell2) == 1  # a dead process on this host holds nothing
    cell3 = Cell(tmp_path, "patrol", "000003", 0)
    assert EvalDir(RunDir(tmp_path), 600, Identity(host, os.getpid(), "e")).claim(cell3) == 0
    assert same_host.claim(cell3) is None  # this process holds it, whichever EvalDir asks
    earlier = claim.parent / "000003-s0-0.json"  # an earlier run that had our pid (a container's numbering)
    earlier.write_text(json.dumps({**json.loads(earlier.read_text()), "started": 1.0}))
    assert same_host.claim(cell3) == 1


def test_an_unparsable_result_counts_as_unfinished(tmp_path, capsys):
    """A corrupt ``metrics.json`` is one warning line; the cell is trained again instead of every call failing."""
    cell = Cell(tmp_path, "patrol", "000001", 0)
    store = EvalDir(RunDir(tmp_path), lease_seconds=600)
    path = store.cell_dir(cell) / "metrics.json"
    path.parent.mkdir(parents=True)
    path.write_text('{"summary": {"return"')
    assert store.result(cell) is None
    err = capsys.readouterr().err
    assert err.startswith(f"warning: {path}: ") and len(err.splitlines()) == 1, err
    assert store.rows() == [] and json.loads(store.write_summary().read_text())["rows"] == []


def test_a_cell_knows_its_parent_died_even_under_pid_1(monkeypatch):
    monkeypatch.setattr(os, "getppid", lambda: 1)
    monkeypatch.delenv(PARENT_PID_VARIABLE, raising=False)
    assert orphaned()  # re-parented to init
    monkeypatch.setenv(PARENT_PID_VARIABLE, "1")
    assert not orphaned()  # the evaluation is PID 1 (a container without an init)
    monkeypatch.setenv(PARENT_PID_VARIABLE, "4242")
    assert orphaned()


def test_ranking_orders_by_mean_return_over_seeds():
    rows = [{"id": i, "source": "r", "task": "t", "seed": s, "return": ret, "metric": m}
            for i, s, ret, m in [("a", 0, 1.0, 0.1), ("a", 1, 5.0, 0.3), ("b", 0, 4.0, 1.0), ("c", 0, None, None)]]
    table = ranking(rows)["t"]
    assert [(e["rank"], e["id"], e["seeds"], e["return"]) for e in table] == [
        (1, "b", 1, 4.0), (2, "a", 2, 3.0), (3, "c", 1, None)]
    assert table[1]["metric"] == pytest.approx(0.2)


def test_runs_are_compared_by_the_mean_return_of_their_cells():
    rows = [{"id": i, "source": src, "task": "t", "seed": sd, "return": ret, "metric": m}
            for src, i, sd, ret, m in [("ft", "a", 0, 1.0, 0.1), ("ft", "a", 1, 3.0, 0.3), ("ft", "b", 0, 8.0, 0.5),
                                       ("vt", "c", 0, 5.0, 1.0), ("mvt", "d", 0, None, None)]]
    table = compare_runs(rows)["t"]
    # ft: (1 + 3 + 8) / 3 = 4.0 over 3 cells of 2 morphologies; vt: 5.0; mvt: no return, last
    assert [(e["rank"], e["source"], e["morphologies"], e["cells"], e["return"]) for e in table] == [
        (1, "vt", 1, 1, 5.0), (2, "ft", 2, 3, 4.0), (3, "mvt", 1, 1, None)]
    assert table[1]["metric"] == pytest.approx(0.3)  # (0.1 + 0.3 + 0.5) / 3


@pytest.mark.parametrize("text", ["[]", "[1, 2]", "null", '{"summary": [], "env_steps": 1, "iterations": 1}',
                                  '{"summary": {"return": "x"}, "env_steps": 1, "iterations": 1}'])
def test_a_result_or_claim_of_the_wrong_type_counts_as_unfinished_or_stale(tmp_path, capsys, text):
    """``[]`` or ``[1,2]`` as a cell's metrics.json or claim crashed tools/evaluate.py with a traceback."""
    (tmp_path / "tmp").mkdir()
    cell = Cell(tmp_path, "patrol", "000001", 0)
    store = EvalDir(RunDir(tmp_path), lease_seconds=600, identity=Identity("node-a", os.getpid(), "a"))
    path = store.cell_dir(cell) / "metrics.json"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    assert store.result(cell) is None and store.rows() == []
    assert len(capsys.readouterr().err.splitlines()) == 2  # one warning per read
    claim = tmp_path / "eval" / "claims" / "patrol" / "000001-s0-0.json"
    claim.parent.mkdir(parents=True)
    claim.write_text(text)
    os.utime(claim, (time.time() - 700, time.time() - 700))
    assert store.claim(cell) == 1  # judged by its time alone


def test_a_cell_folder_swapped_for_a_link_between_its_check_and_its_use_is_never_read_through(tmp_path,
                                                                                            monkeypatch):
    """``eval/<task>/`` becomes a link to a folder outside right before ``metrics.json`` is read.
    Before: the folder was checked by path (``in_real_folder``), then the result planted outside read."""
    from derl.evaluation import store

    cell = Cell(tmp_path / "run", "point_nav", "000001", 0)
    evaluation = EvalDir(RunDir(cell.run), 600)
    own = {"summary": {"return": 1.0, "metric": 0.5}, "env_steps": 64, "iterations": 1}
    evaluation.cell_dir(cell).mkdir(parents=True)
    (evaluation.cell_dir(cell) / "metrics.json").write_text(json.dumps(own))
    planted = {**own, "summary": {"return": 99.0, "metric": 9.0}}
    swap_before(monkeypatch, store, ["read_json"], evaluation.root / "point_nav", tmp_path / "outside",
                 {f"{cell.name}/metrics.json": json.dumps(planted)})
    assert evaluation.result(cell) == own  # from the folder opened, never through the link
    assert (evaluation.root / "point_nav").is_symlink()  # the swap did happen


def test_a_claims_folder_swapped_for_a_link_between_its_check_and_its_listing_is_never_listed(tmp_path,
                                                                                             monkeypatch):
    """``eval/claims/<task>/`` becomes a link right before it is listed. Before: checked by path, then
    listed through the link: a claim planted outside (a later number) made the cell look held elsewhere."""
    (tmp_path / "tmp").mkdir()
    cell = Cell(tmp_path, "point_nav", "000001", 0)
    evaluation = EvalDir(RunDir(tmp_path), 600, identity=Identity("node-a", os.getpid(), "a"))
    assert evaluation.claim(cell) == 0
    claims = evaluation.root / "claims" / "point_nav"
    owner = json.dumps({"host": "node-b", "pid": 1, "token": "b"})
    swap_before(monkeypatch, os, ["scandir", "listdir"], claims, tmp_path / "outside", {f"{cell.name}-7.json": owner})
    assert evaluation._generation(cell) == 0
    assert claims.is_symlink()


@pytest.mark.parametrize("use", ["stale", "lost"])
def test_a_claims_folder_swapped_for_a_link_before_a_claim_is_judged_is_never_read_through(tmp_path, monkeypatch,
                                                                                           use):
    """``eval/claims/<task>/`` becomes a link right before a claim is read (is it stale?) or looked up
    (is there a later one?). Before: read by path, through the link: a claim planted outside made a live
    owner's claim stale (its pid, another start time), or the owner think it lost the cell."""
    from derl.evaluation import store

    (tmp_path / "tmp").mkdir()
    cell = Cell(tmp_path, "point_nav", "000001", 0)
    evaluation = EvalDir(RunDir(tmp_path), 600, identity=Identity(socket.gethostname(), os.getpid(), "a"))
    assert evaluation.claim(cell) == 0
    dead = json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "token": "b", "started": 1.0})
    plant = {f"{cell.name}-0.json": dead} if use == "stale" else {f"{cell.name}-1.json": dead}
    swap_before(monkeypatch, store if use == "stale" else os, ["read_json" if use == "stale" else "lstat"],
                evaluation.root / "claims" / "point_nav", tmp_path / "outside", plant)
    if use == "stale":
        assert not evaluation._is_stale(evaluation._claim_path(cell, 0))  # its own claim, alive
    else:
        assert not evaluation.lost(cell, 0)
    assert (evaluation.root / "claims" / "point_nav").is_symlink()
