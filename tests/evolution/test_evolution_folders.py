"""The run folder's folders and the files read back, swapped or planted while derl uses them.

A folder of ``OUT_DIR`` replaced by a symbolic link (or a file) at any moment is refused at its next
use, never written through; a file that a tool reads back (``config.yaml``, ``metrics/<id>.jsonl``)
that is a link, a FIFO, too large or too deep is refused with one line, and scored as the folder's
problem, never a morphology's. Real processes where a tool's answer is the point.
"""

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from derl.checked_config import load_config
from derl.config import dump_config
from derl.evolution.folder.run_dir import RunDir
from derl.evolution.process import EXIT_FATAL
from tests.evolution import test_evolution_untrusted
from tests.evolution.test_evolution_protocol import ENV, ROOT, assert_complete, start
from tests.evolution.test_evolution_untrusted import search_run
from tests.project.test_untrusted_fuzz import snapshot

sentinel = test_evolution_untrusted.sentinel  # the fixture: a folder outside the run, compared byte for byte


def tool(*argv):
    return subprocess.run([sys.executable, *argv], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=60)


def test_status_and_report_refuse_a_config_yaml_that_is_a_link_out_of_the_folder(tmp_path, sentinel):
    run = search_run(tmp_path)
    outside = sentinel / "config.yaml"
    outside.write_text(dump_config(load_config(None, ["EVO.SEARCH_SPACE_SIZE", "7777"])))
    run.config_path().symlink_to(outside)
    for argv in (["tools/status.py", str(run.root)],
                 ["tools/report.py", str(run.root), "--no-media", "--out", str(tmp_path / "report")]):
        done = tool(*argv)
        assert done.returncode == 2, (argv, done.stdout, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert "config.yaml: is a symbolic link, not a regular file" in done.stderr
        assert "/7777" not in done.stdout  # before: status printed the outside file's search size
    assert not (tmp_path / "report").exists()


def test_status_and_report_refuse_a_config_yaml_that_is_a_fifo(tmp_path):
    """Before: the report fell back to the defaults without a word."""
    from derl.analysis.run import RunError, RunView
    from derl.evolution.status import status_lines

    run = search_run(tmp_path)
    os.mkfifo(run.config_path())
    with pytest.raises(RunError, match="config.yaml: is a FIFO, not a regular file"):
        RunView(run.root)
    with pytest.raises(ValueError, match="config.yaml: is a FIFO, not a regular file"):
        status_lines(str(run.root))


@pytest.mark.parametrize("text, reason", [
    ("EVO: &e {SEARCH_SPACE_SIZE: 1000}\nPPO: *e\n", "aliases"),
    ("a: " + "[" * 5000, "nests deeper"),
    ("EVO: {SEARCH_SPACE_SIZE: 1000}\n" + "#" * (2**20 + 1), "larger than"),
])
def test_a_config_yaml_read_back_is_bounded_and_without_aliases(tmp_path, text, reason):
    from derl.checked_config import load_run_config
    from derl.config import ConfigError

    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=reason):
        load_run_config(path)


def swap_for_link(folder, outside):
    """Replaces ``folder`` by a symbolic link to ``outside``, a copy of it; the folder itself moves aside
    (beside ``outside``), where a write already under way when it moved may still finish."""
    with contextlib.suppress(shutil.Error):  # a staged file renamed while copied
        shutil.copytree(folder, outside, symlinks=True)
    os.rename(folder, outside.with_name(f"{outside.name}.aside"))
    folder.symlink_to(outside, target_is_directory=True)


def swap_while_running(tmp_path, name, after_published=2, extra=()):
    """Starts a node (fake backend), swaps ``OUT_DIR/<name>`` for a link to a folder outside once
    ``after_published`` morphologies are published, and waits for the node; returns (exit code, log,
    what the folder outside held right after the swap, what it holds now)."""
    out = tmp_path / "run"
    node = start(out, *extra)
    outside = tmp_path / "outside" / name
    outside.parent.mkdir()
    try:
        deadline = time.monotonic() + 60
        while len(list((out / "metadata").glob("*.json"))) < after_published:
            assert node.poll() is None and time.monotonic() < deadline, "the node ended before the swap"
            time.sleep(0.02)
        swap_for_link(out / name, outside)
        before = snapshot(outside)
        code = node.wait(timeout=90)
    finally:
        if node.poll() is None:
            node.kill()
    return code, (tmp_path / "run-coordinator.log").read_text(), before, snapshot(outside)


def test_slots_swapped_for_a_link_while_a_node_runs_stop_the_node(tmp_path):
    code, log, before, after = swap_while_running(tmp_path, "slots")
    assert after == before  # no claim written, moved or touched outside OUT_DIR
    assert code == EXIT_FATAL, log[-3000:]
    assert "slots is not a folder (a symbolic link or a file)" in log and "Traceback" not in log, log[-3000:]
    assert "search complete" not in log


@pytest.mark.parametrize("carried", [False, True], ids=["checkpoint without records", "checkpoint with records"])
@pytest.mark.parametrize("plant", ["empty record", "deep nesting", "wrong type", "long line", "fifo", "symlink"])
def test_a_bad_metrics_file_is_dropped_and_training_goes_on_from_the_checkpoint(tmp_path, sentinel, plant, carried,
                                                                                caplog):
    """Before: deep nesting raised RecursionError (a morphology failure: the checkpoint thrown away), ``{}``
    a KeyError (a restart loop ending in exit 5), a link was read through.

    A checkpoint that carries its metrics records never reads the file (it is rewritten from them);
    one from before it did (its records removed here) reads the file back, checked."""
    from derl.ppo import StopWhen, train
    from derl.ppo.checkpoint import load_checkpoint, save_checkpoint
    from tests.ppo.test_ppo_train import _cfg, _pendulum

    cfg = _cfg(iters=4, CHECKPOINT_PERIOD=1)
    ckpt, metrics = tmp_path / "ckpt.pt", tmp_path / "metrics.jsonl"
    calls = iter(range(100))
    train(cfg.trainer, _pendulum, seed=0, checkpoint_path=ckpt, metrics_path=metrics,
          callbacks=[StopWhen(lambda: next(calls) >= 2)])
    good = metrics.read_text()
    metrics.unlink()
    if not carried:
        state = load_checkpoint(ckpt)
        del state["metrics"]
        save_checkpoint(ckpt, state)
    if plant == "fifo":
        os.mkfifo(metrics)
    elif plant == "symlink":
        (sentinel / "metrics.jsonl").write_text(good)
        metrics.symlink_to(sentinel / "metrics.jsonl")
    else:
        bad = {"empty record": "{}", "deep nesting": "[" * 50_000, "wrong type": '{"iteration": 1, "lr": "x"}',
               "long line": '{"iteration": 1, "pad": "' + "x" * 2**17 + '"}'}[plant]
        metrics.write_text(good + bad + "\n")
    before = snapshot(sentinel)
    resumed = train(cfg.trainer, _pendulum, seed=0, checkpoint_path=ckpt, metrics_path=metrics, resume=True)
    assert resumed.completed and resumed.iterations == 4
    if carried:
        assert [json.loads(line)["iteration"] for line in metrics.read_text().splitlines()] == [1, 2, 3, 4]
    else:
        assert "training goes on from the checkpoint" in caplog.text and str(metrics) in caplog.text
        assert [json.loads(line)["iteration"] for line in metrics.read_text().splitlines()] == [3, 4]
    assert not metrics.is_symlink() and snapshot(sentinel) == before


def test_a_genome_whose_xml_is_a_link_is_made_anew_from_scratch(tmp_path, sentinel):
    run = search_run(tmp_path)
    genome = json.dumps({"schema_version": 1, "id": "000004", "parent_id": None})
    run.genomes.write_genome("000004", genome, "<mujoco/>")
    for path in (run.checkpoint_path("000004"), run.metrics_path("000004")):
        path.write_text("trained on the body outside\n")
    run.genomes.xml_path("000004").unlink()
    run.genomes.xml_path("000004").symlink_to(sentinel / "victim.json")
    assert not run.genomes.has_genome("000004")
    assert not run.genomes.has_genome("000004")  # the link moved aside once
    run.genomes.write_genome("000004", genome, "<mujoco/>")
    assert run.genomes.has_genome("000004") and run.genomes.read_xml("000004").startswith("<mujoco/>\n<!-- derl genome")
    assert sorted(p.name for p in (run.root / "quarantine").iterdir()) == [
        "metrics-000004.jsonl", "models-000004.pt", "xml-000004.xml"]  # the new body trains from scratch


def test_a_checkpoint_that_is_a_link_is_moved_aside_before_training(tmp_path, sentinel):
    """Before: ``load_checkpoint`` read it through the link (a node problem, restart after restart)."""
    run = search_run(tmp_path)
    genome = json.dumps({"schema_version": 1, "id": "000004", "parent_id": None})
    run.genomes.write_genome("000004", genome, "<mujoco/>")
    run.checkpoint_path("000004").symlink_to(sentinel / "victim.json")
    os.mkfifo(run.metrics_path("000004"))
    assert run.genomes.has_genome("000004") and not os.path.lexists(run.checkpoint_path("000004"))
    assert sorted(p.name for p in (run.root / "quarantine").iterdir()) == ["metrics-000004.jsonl", "models-000004.pt"]


@pytest.mark.slow  # ~20 s: a search whose takeover waits for a scan (the default suite: the test above)
def test_an_xml_swapped_for_a_link_during_training_is_redone_once_not_in_a_loop(tmp_path, sentinel):
    """Before: train, publish, quarantine (the record lists a link), take over, publish again: 253 times
    in 10 minutes, and the search never ended."""
    out = tmp_path / "run"
    (sentinel / "victim.xml").write_text('<mujoco model="outside"/>\n')
    node = start(out, "EVO.LEASE_SECONDS", "4", iterations=20)
    try:
        deadline = time.monotonic() + 60
        while not (training := [p.name.split(".")[0] for p in (out / "fake_starts").glob("00000[4-9]*")]):
            assert node.poll() is None and time.monotonic() < deadline, "no child trained"
            time.sleep(0.02)
        xml = out / "xml" / f"{training[0]}.xml"
        xml.unlink()
        xml.symlink_to(sentinel / "victim.xml")
        before = snapshot(sentinel)
        code = node.wait(timeout=90)
    finally:
        if node.poll() is None:
            node.kill()
    log = (tmp_path / "run-coordinator.log").read_text()
    assert code == 0, log[-3000:]
    assert_complete(out, 12)
    assert snapshot(sentinel) == before
    moved = [p.name for p in (out / "quarantine").iterdir()]
    assert moved.count(f"xml-{training[0]}.xml") == 1, moved
    assert sum(name.startswith(f"metadata-{training[0]}") for name in moved) <= 1, moved


@pytest.mark.parametrize("folder", ["eval", "eval/claims", "eval/claims/point_nav"])
def test_eval_folders_swapped_for_a_link_are_refused(tmp_path, sentinel, folder):
    from derl.evaluation.plan import Cell
    from derl.evaluation.store import EvalDir
    from derl.fileio.folders import NotAFolder

    run = search_run(tmp_path)
    store = EvalDir(RunDir(run.root), 60.0)
    cell = Cell(run.root, "point_nav", "000001", 0)
    generation = store.claim(cell)
    swap_for_link(run.root / folder, sentinel / "eval")
    before = snapshot(sentinel)
    uses = [lambda: store.claim(Cell(run.root, "point_nav", "000002", 0)), lambda: store.beat(cell, generation)]
    for use in uses + [store.write_summary] * (folder == "eval"):
        with pytest.raises(NotAFolder, match="is not a folder"):
            use()
    assert snapshot(sentinel) == before


def test_a_confined_process_refuses_a_folder_swapped_for_a_link(tmp_path, sentinel, monkeypatch):
    """What the trainer and TensorBoard write below OUT_DIR (worker, evaluation cell): not only the last folder."""
    from derl.fileio import folders
    from derl.fileio.writes import atomic_write_text
    from derl.ppo.callbacks import TensorBoard

    monkeypatch.setattr(folders, "_CONFINED", [])
    run = search_run(tmp_path)
    folders.confine_writes(run.root)
    (run.root / "eval" / "point_nav" / "000001-s0").mkdir(parents=True)
    swap_for_link(run.root / "eval", sentinel / "eval")
    before = snapshot(sentinel)
    with pytest.raises(folders.NotAFolder, match="eval is not a folder"):
        atomic_write_text(run.root / "eval" / "point_nav" / "000001-s0" / "model.pt", "weights")
    with pytest.raises(folders.NotAFolder, match="eval is not a folder"):
        TensorBoard(run.root / "eval" / "point_nav" / "000001-s0" / "tensorboard").on_iteration({"env_steps": 1})
    assert snapshot(sentinel) == before


def test_readers_never_read_through_a_folder_swapped_for_a_link(tmp_path, sentinel, capsys):
    """The report's curves and the evaluation's results: a link on the way is named once and skipped."""
    from derl.analysis.run import RunView
    from derl.evaluation.plan import Cell
    from derl.evaluation.store import EvalDir

    run = search_run(tmp_path)
    run.config_path().write_text(dump_config(load_config(None, [])))
    (sentinel / "metrics").mkdir()
    (sentinel / "metrics" / "000001.jsonl").write_text('{"iteration": 1, "return": 5.0}\n')
    os.rmdir(run.root / "metrics")
    (run.root / "metrics").symlink_to(sentinel / "metrics")
    assert len(RunView(run.root).curve("000001")) == 0
    cell = Cell(run.root, "point_nav", "000001", 0)
    (sentinel / "point_nav" / "000001-s0").mkdir(parents=True)
    (sentinel / "point_nav" / "000001-s0" / "metrics.json").write_text(json.dumps(
        {"summary": {"return": 1.0}, "env_steps": 64, "iterations": 1}))
    (run.root / "eval").mkdir()
    (run.root / "eval" / "point_nav").symlink_to(sentinel / "point_nav")
    assert EvalDir(RunDir(run.root), 60.0).result(cell) is None
    err = capsys.readouterr().err
    assert "metrics is a link or a file, not a folder" in err and "point_nav is a link or a file" in err


def test_train_ppo_resume_refuses_a_saved_config_that_is_a_link(tmp_path, sentinel):
    out = tmp_path / "train"
    out.mkdir()
    (out / "run.json").write_text(json.dumps({"env_id": "Pendulum-v1"}))
    (sentinel / "config.yaml").write_text("PPO: {NUM_ENVS: 3}\n")
    (out / "config.yaml").symlink_to(sentinel / "config.yaml")
    done = tool("tools/train_ppo.py", "--out", str(out), "--resume", "--quiet")
    assert done.returncode == 2 and "config.yaml: is a symbolic link, not a regular file" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("use", ["read", "list"])
@pytest.mark.parametrize("quarantine", [True, False], ids=["search", "read-only tool"])
def test_a_folder_swapped_for_a_link_between_its_check_and_its_use_is_never_read_through(tmp_path, sentinel,
                                                                                         monkeypatch, use, quarantine):
    """The check-then-use race: ``error_metadata/`` becomes a link to a folder outside right before
    the file is opened (``read_json``) or the folder listed (``os.scandir``), after any check of the
    folder by path. Before: the record planted outside was read, or listed, as the run's own."""
    from derl.evolution.folder import shared as shared_folder
    from derl.evolution.folder.failure_store import Failure

    run = RunDir(search_run(tmp_path).root, quarantine=quarantine, skip=not quarantine)
    failure = Failure(id="000001", slot=1, attempt=0, reason="the run's own", node=0, worker=0)
    run.failures.record_failure(failure)
    outside = sentinel / "error_metadata"
    name, real = ("read_json", shared_folder.read_json) if use == "read" else ("scandir", os.scandir)
    swapped = []

    def swap_then_use(*args, **kwargs):
        if not swapped:  # once (copytree lists folders too)
            swapped.append(True)
            swap_for_link(run.root / "error_metadata", outside)
            (outside / "000001.json").write_text(json.dumps({**failure.to_json(), "reason": "planted outside"}))
            (outside / "000002.json").write_text(json.dumps({**failure.to_json(), "id": "000002"}))
        return real(*args, **kwargs)

    monkeypatch.setattr(shared_folder if use == "read" else os, name, swap_then_use)
    if use == "read":
        assert run.failures.read_failure("000001") == failure  # from the folder opened, never through the link
    else:
        assert run.failures.failed_ids() == ["000001"]
    assert (run.root / "error_metadata").is_symlink()  # the swap did happen


def test_a_tmp_folder_swapped_for_a_link_while_a_video_is_encoded_gets_nothing(tmp_path, sentinel):
    """The encoder writes by path: ``tmp/`` becomes a link to a folder outside while it runs. Before
    (tmp/ checked, then the video staged there by path), the video was written outside ``OUT_DIR``."""
    from derl.fileio.folders import NotAFolder

    run = search_run(tmp_path)
    outside = sentinel / "tmp"

    def encode(path):
        swap_for_link(run.root / "tmp", outside)
        path.write_bytes(b"video")
        return path

    with pytest.raises(NotAFolder, match="tmp is not a folder"):
        run.save_video("000001", encode)
    assert snapshot(outside) == {} and not os.path.lexists(run.video_path("000001"))


def test_a_video_is_published_and_a_failed_encoder_leaves_nothing(tmp_path):
    run = search_run(tmp_path)

    def fail(path):
        path.write_bytes(b"half a video")
        raise RuntimeError("encoder failed")

    def gif_fallback(path):
        path.with_suffix(".gif").write_bytes(b"GIF89a")
        return path.with_suffix(".gif")

    with pytest.raises(RuntimeError, match="encoder failed"):
        run.save_video("000001", fail)
    assert os.listdir(run.root / "tmp") == [] and os.listdir(run.root / "videos") == []
    assert run.save_video("000001", gif_fallback) == run.video_path("000001", ".gif")
    assert run.videos() == {"000001": run.video_path("000001", ".gif")} and os.listdir(run.root / "tmp") == []
    assert run.video_path("000001", ".gif").read_bytes() == b"GIF89a"
