"""Fuzz of the run folder: each file kind of a finished tiny run corrupted in turn, then the search,
``tools/status.py``, ``tools/report.py`` and ``tools/evaluate.py`` run again under a time limit.

Training is the fake backend's (``tests/evo_fake_backend.py``) and every evaluation cell is planted
finished, so nothing trains for real. After each corruption: no traceback, no hang, the sentinel
folder outside the run unchanged byte for byte, and the search ends with exactly
``SEARCH_SPACE_SIZE`` results whose files match their metadata (``assert_complete``). Every case
is slow (a search, a report and an evaluation each); ``tests/evolution/test_evolution_untrusted.py`` checks
each kind in-process in the default suite. Then each folder of the layout swapped for a symbolic link
while a node runs (``test_a_folder_swapped_for_a_link_while_a_node_runs``; the default suite swaps
``slots/``, ``tests/evolution/test_evolution_folders.py``).
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.attacks import damage
from tests.evolution.test_evolution_protocol import ENV, ROOT, assert_complete, published, start

SIZE = 6
# One file of each kind of OUT_DIR (docs/reference/output-folder.md) in the finished run; the fake backend fails
# slot 5 once, so error_metadata/000005.json exists.
KINDS = {
    "metadata": "metadata/000003.json",
    "genome": "genomes/000002.json",
    "claim": "slots/000004.json",
    "publication": "published/00000001.json",
    "failure": "error_metadata/000005.json",
    "worker state": "workers/0-0.json",
    "heartbeat": "workers/0-0.alive",
    "worker lock": "workers/0-1.lock",
    "manifest": "manifest/0.json",
    "init population": "init_population.json",
    "summary": "summary.json",
    "eval result": "eval/point_nav/000001-s0/metrics.json",
    "eval claim": "eval/claims/point_nav/000001-s0-0.json",
}


def snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None, p.lstat().st_mtime_ns)
            for p in sorted(folder.rglob("*"))}


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("fuzz") / "run"
    assert start(out, "EVO.SEARCH_SPACE_SIZE", str(SIZE), iterations=2).wait(timeout=120) == 0
    for morphology_id in published(out):  # every cell finished: evaluate.py trains nothing
        cell = out / "eval" / "point_nav" / f"{morphology_id}-s0"
        cell.mkdir(parents=True)
        (cell / "metrics.json").write_text(json.dumps({"summary": {"return": 1.0, "metric": 0.5}, "env_steps": 64,
                                                       "iterations": 1}))
        claim = out / "eval" / "claims" / "point_nav" / f"{morphology_id}-s0-0.json"
        claim.parent.mkdir(parents=True, exist_ok=True)
        claim.write_text(json.dumps({"host": "elsewhere", "pid": 1, "token": "t", "started": 0.0}))
    return out


def tool(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *argv], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=60)


def check_after(out: Path, tmp_path: Path, sentinel: Path, before: dict, lost: frozenset[str] = frozenset()) -> None:
    """The search, status, report and evaluate after the corruption: no traceback, no hang, nothing outside.
    ``lost``: a published morphology's files made unreadable, quarantined; its record stays published."""
    search = start(out, "EVO.SEARCH_SPACE_SIZE", str(SIZE), iterations=2, log_name="rerun.log")
    try:
        assert search.wait(timeout=90) == 0
    finally:
        if search.poll() is None:
            search.kill()
    log = (out.parent / f"{out.name}-rerun.log").read_text()
    assert "Traceback" not in log, log[-3000:]
    assert_complete(out, SIZE, lost)
    for argv in (["tools/status.py", str(out)],
                 ["tools/report.py", str(out), "--no-media", "--out", str(tmp_path / "report")],
                 ["tools/evaluate.py", str(out), "--tasks", "point_nav", "--top", "1"]):
        done = tool(*argv)
        assert done.returncode == 0 and "Traceback" not in done.stderr, (argv, done.stderr[-3000:])
    assert snapshot(sentinel) == before


@pytest.fixture
def sentinel(tmp_path) -> Path:
    folder = tmp_path / "sentinel"
    folder.mkdir()
    (folder / "victim.json").write_text('{"id": "000003", "slot": 3}')
    return folder


@pytest.mark.slow  # ~50 s: a search, a report, an evaluation (test_evolution_untrusted.py: in-process)
def test_several_planted_files_at_once(finished_run, tmp_path, sentinel):
    """The default suite's small version: a FIFO, a folder, a link outside, deep nesting, wrong types."""
    out = tmp_path / "run"
    shutil.copytree(finished_run, out, symlinks=True)
    before = snapshot(sentinel)
    for kind, how in (("metadata", "fifo"), ("genome", "directory"), ("heartbeat", "symlink"),
                      ("worker state", "deep nesting"), ("eval result", "wrong type"), ("claim", "truncate"),
                      ("publication", "null")):
        damage(out / KINDS[kind], how, sentinel / "victim.json")
    check_after(out, tmp_path, sentinel, before, frozenset({KINDS["genome"]}))


@pytest.mark.slow
@pytest.mark.parametrize("how", ["truncate", "wrong type", "null", "huge value", "deep nesting", "directory",
                                 "fifo", "symlink"])
@pytest.mark.parametrize("kind", KINDS)
def test_each_file_kind_corrupted(finished_run, tmp_path, sentinel, kind, how):
    out = tmp_path / "run"
    shutil.copytree(finished_run, out, symlinks=True)
    before = snapshot(sentinel)
    damage(out / KINDS[kind], how, sentinel)
    unreadable = kind == "genome" and how in ("directory", "fifo", "symlink")  # quarantined, never read through
    check_after(out, tmp_path, sentinel, before, frozenset({KINDS[kind]} if unreadable else ()))


# Every folder of the layout a node writes into while it runs (docs/reference/output-folder.md).
RUNNING_FOLDERS = ("slots", "leases", "published", "metadata", "error_metadata", "genomes", "xml", "models",
                   "metrics", "workers", "tmp", "quarantine")


@pytest.mark.slow  # ~8 s each: a search until the swap, then until the node stops
@pytest.mark.parametrize("folder", RUNNING_FOLDERS)
def test_a_folder_swapped_for_a_link_while_a_node_runs(tmp_path, folder):
    """Nothing written, moved or touched through the link; the node stops on it with one line (a worker's
    exit 3, or exit 2 where the coordinator meets it first), or finishes the search without using it
    again; never a "search complete" that is not."""
    from derl.evolution.process import EXIT_FATAL
    from tests.evolution.test_evolution_folders import swap_while_running

    code, log, before, after = swap_while_running(tmp_path, folder)
    assert after == before
    assert "Traceback" not in log, log[-3000:]
    out = tmp_path / "run"
    if code == 0:
        assert_complete(out, 12)
    else:
        assert code in (EXIT_FATAL, 2), log[-3000:]
        assert f"{folder} is not a folder (a symbolic link or a file)" in log, log[-3000:]
        assert "search complete" not in log
