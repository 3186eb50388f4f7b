"""The rules every tool shares (docs/reference/commands.md): where a tool may write (never inside a search's
folder, never over a file unasked, never a path that is not text), negative numbers as override values,
an upper bound on every count, and a refused record named with its reason. Run through the real tools."""

import ast
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.report import build_synthetic_run
from derl.evolution.folder.run_dir import RunDir
from tests.conftest import ROOT

QUICK = str(ROOT / "configs" / "evo" / "quick.yml")
ENV = dict(os.environ, PYTHONPATH=str(ROOT), MUJOCO_GL="egl")


def _tool(*argv: str | bytes, cwd: Path = ROOT, timeout: float = 120) -> subprocess.CompletedProcess:
    """``python argv...`` from the checkout (a tool's path first), its output as text."""
    return subprocess.run([sys.executable, *argv], cwd=cwd, env=ENV, capture_output=True, text=True,
                          timeout=timeout)


def _refused(done: subprocess.CompletedProcess, *words: str) -> None:
    """One line on stderr naming ``words``, exit 2, no traceback."""
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: "), done.stderr[-2000:]
    assert all(word in done.stderr for word in words), done.stderr


def _digests(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.md5(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory) -> Path:
    """A finished search's OUT_DIR (synthetic: records, genomes, curves, models; no training)."""
    out = tmp_path_factory.mktemp("rules") / "run"
    build_synthetic_run(out, morphologies=6, iterations=5, genomes=2)
    return out


# ------------------------------------------------------------------ output paths
def test_the_search_markers_are_the_run_folders_own_names(run_folder):
    from derl.fileio.outputs import SEARCH_CONFIG, SEARCH_FOLDERS, search_holding

    assert set(SEARCH_FOLDERS) <= set(RunDir.FOLDERS) and RunDir(run_folder).config_path().name == SEARCH_CONFIG
    assert search_holding(run_folder / "models" / "000003.pt") == run_folder.resolve()
    assert search_holding(run_folder.parent) is None


def test_replay_never_writes_over_a_runs_files(run_folder, tmp_path):
    """`--video RUN/models/000003.pt` wrote an MP4 over the published policy; metadata/ the same."""
    before = _digests(run_folder)
    for target in ("models/000003.pt", "metadata/000002.json", "videos/new.mp4"):
        _refused(_tool("tools/replay.py", str(run_folder), "000001", "--video", str(run_folder / target)),
                 "--video", "search", target)
    assert _digests(run_folder) == before
    mine = tmp_path / "mine.mp4"
    mine.write_bytes(b"my own video")
    _refused(_tool("tools/replay.py", str(run_folder), "000001", "--video", str(mine)), "exists", "--overwrite")
    assert mine.read_bytes() == b"my own video"


def test_train_ppo_refuses_a_folder_that_holds_a_search(run_folder):
    """`train_ppo --out <a search's OUT_DIR>` replaced its config.yaml: the search could not resume."""
    before = _digests(run_folder)
    genome = str(run_folder / "genomes" / "000000.json")
    for out in (run_folder, run_folder / "inside"):
        _refused(_tool("tools/train_ppo.py", "--cfg", QUICK, "--genome", genome, "--out", str(out)), str(out), "search")
    assert _digests(run_folder) == before and not (run_folder / "inside").exists()


@pytest.mark.parametrize("argv", [
    ["tools/bench.py", "fidelity", "--cells-only", "--work", "{run}"],
    ["tools/bench.py", "fidelity", "--cells-only", "--plot", "{run}/metadata/000001.json"],
    ["tools/bench.py", "report", "--out", "{run}/summary.json"],
    ["tools/report.py", "{run}", "--out", "{run}/models"],
    ["tools/morphology.py", "sample", "--num", "2", "--seed", "0", "--out", "{run}/genomes"],
    ["tools/morphology.py", "mutate", "{run}/genomes/000000.json", "--seed", "1", "--out", "{run}/genomes"],
    ["tools/evaluate.py", "{run}", "--tasks", "patrol", "--compare", "{run}/summary.json"],
    ["tools/gpu_check.py", "--device", "cpu", "--out", "{run}/summary.json"],
], ids=lambda argv: " ".join(argv[:2]))
def test_no_tool_writes_inside_a_search(run_folder, argv):
    before = _digests(run_folder)
    _refused(_tool(*(arg.format(run=run_folder) for arg in argv)), "search")
    assert _digests(run_folder) == before


@pytest.mark.parametrize("argv", [
    ["tools/bench.py", "report", "--out", "{file}"],
    ["tools/bench.py", "fidelity", "--cells-only", "--plot", "{file}"],
    ["tools/evaluate.py", "{run}", "--tasks", "patrol", "--compare", "{file}"],
    ["tools/morphology.py", "image", "{run}/genomes/000000.json", "--out", "{file}"],
], ids=lambda argv: " ".join(argv[:2]))
def test_no_tool_replaces_a_file_unasked(run_folder, tmp_path, argv):
    mine = tmp_path / "mine.png"
    mine.write_bytes(b"mine")
    _refused(_tool(*(arg.format(run=run_folder, file=mine) for arg in argv)), str(mine), "--overwrite")
    assert mine.read_bytes() == b"mine"


def test_check_output_kinds(tmp_path, run_folder):
    from derl.fileio.outputs import OutputRefused, check_output

    (tmp_path / "file").write_text("x")
    assert check_output(tmp_path / "new.json", "--out") == tmp_path / "new.json"
    assert check_output(tmp_path / "file", "--out", overwrite=True) == tmp_path / "file"
    assert check_output(tmp_path, "--work", folder=True) == tmp_path
    assert check_output(run_folder / "report" / "x", "--out", folder=True, own=run_folder / "report")
    for path, kwargs, said in [(tmp_path, {}, "is a folder"), (tmp_path / "file", {"folder": True}, "not a folder"),
                               (run_folder, {"folder": True, "own": run_folder / "report"}, "is a search's folder"),
                               (os.fsdecode(b"/tmp/\xff.json"), {}, "not UTF-8")]:
        with pytest.raises(OutputRefused, match=said):
            check_output(path, "--out", **kwargs)


def test_a_path_that_is_not_text_is_refused_before_anything_is_made(run_folder, tmp_path):
    """Bytes that are not UTF-8 in an output path: one line, exit 2, nothing created."""
    bad = os.fsencode(tmp_path) + b"/out\xff"
    genome = str(run_folder / "genomes" / "000000.json")
    for argv in ([b"tools/train_ppo.py", b"--cfg", QUICK.encode(), b"--genome", genome.encode(), b"--out", bad],
                 [b"tools/morphology.py", b"sample", b"--num", b"1", b"--seed", b"0", b"--out", bad],
                 [b"tools/replay.py", os.fsencode(run_folder), b"000001", b"--video", bad + b".mp4"]):
        done = subprocess.run([os.fsencode(sys.executable), *argv], cwd=ROOT, env=ENV, capture_output=True,
                              timeout=120)
        assert done.returncode == 2 and b"not UTF-8" in done.stderr and done.stderr.count(b"\n") == 1, done.stderr
    assert os.listdir(tmp_path) == []


# ------------------------------------------------------------------ overrides and counts
@pytest.mark.parametrize("argv", [
    ["evo_single_proc.py", "--cfg", QUICK, "OUT_DIR", "{tmp}/run"],
    ["-m", "derl.evolution.worker", "--worker", "0", "--cfg", QUICK, "OUT_DIR", "{tmp}/run"],
    ["tools/train_ppo.py", "--cfg", QUICK, "--out", "{tmp}/run"],
    ["tools/morphology.py", "sample", "--num", "1", "--seed", "0", "--out", "{tmp}/run", "--cfg", QUICK],
    ["tools/evaluate.py", "{tmp}/run", "--tasks", "patrol"],
    ["tools/bench.py", "fidelity", "--cells-only", "--cells", "{tmp}/cells.jsonl", "--work", "{tmp}/w"],
], ids=lambda argv: argv[0] if argv[0] != "-m" else argv[1])
def test_a_negative_number_in_any_notation_is_an_override_value(tmp_path, argv):
    """`TERRAIN.INCLINE_ANGLE -1e1` was `unrecognized arguments: -1e1`; here every tool gets past its
    arguments to the config (EVO.SEARCH_SPACE_SIZE 0 is then refused, or the tool goes on)."""
    argv = [arg.format(tmp=tmp_path) for arg in argv]
    done = _tool(*argv, "TERRAIN.INCLINE_ANGLE", "-1e1", "ENV.FORWARD_REWARD_WEIGHT", "-.5E0",
                 "EVO.SEARCH_SPACE_SIZE", "0")
    assert "unrecognized arguments" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not (tmp_path / "run").exists()


def test_overrides_may_follow_a_subcommands_options(tmp_path):
    """`tools/morphology.py xml G.json --cfg F KEY VALUE` left `KEY VALUE` over (`unrecognized arguments`)."""
    made = _tool("tools/morphology.py", "sample", "--num", "1", "--seed", "0", "--out", str(tmp_path), "--cfg", QUICK)
    genome = made.stdout.split()[0]
    done = _tool("tools/morphology.py", "xml", genome, "--cfg", QUICK, "TERRAIN.INCLINE_ANGLE", "-1e1")
    assert done.returncode == 0 and done.stdout.startswith("<mujoco"), done.stderr
    _refused(_tool("tools/morphology.py", "xml", genome, "--cfg", QUICK, "--bogus", "1"), "unrecognized arguments")


def test_the_shared_parser_takes_negative_numbers_but_not_unknown_flags():
    from derl.arguments import ArgumentParser

    parser = ArgumentParser(prog="x")
    parser.add_argument("--cfg")
    parser.add_argument("overrides", nargs="*")
    values = ["-1e1", "-.5", "-1.5E-3", "-10", "-inf", "-.inf", "-1_000"]
    assert parser.parse_args(["K", *values, "--cfg", "f"]).overrides == ["K", *values]
    with pytest.raises(SystemExit):
        parser.parse_args(["K", "-x"])


@pytest.mark.parametrize("argv, flag", [
    (["tools/morphology.py", "sample", "--num", "100000000", "--seed", "0", "--out", "{tmp}/g"], "--num"),
    (["tools/bench.py", "fidelity", "--cells-only", "--resamples", "10000000000", "--work", "{tmp}/w"], "--resamples"),
    (["tools/bench.py", "fidelity", "--cells-only", "--seeds", "1000000000", "--work", "{tmp}/w"], "--seeds"),
    (["tools/bench.py", "fidelity", "--cells-only", "--sample", "1000000000", "--work", "{tmp}/w"], "--sample"),
    (["tools/bench.py", "fidelity", "--cells-only", "--mutations", "0,100000000", "--work", "{tmp}/w"], "--mutations"),
    (["tools/replay.py", "{tmp}", "000001", "--episodes", "1000000000"], "--episodes"),
    (["tools/report.py", "{tmp}", "--video-steps", "1000000000"], "--video-steps"),
    (["tools/evaluate.py", "{tmp}", "--tasks", "patrol", "--seeds", "1000000000"], "--seeds"),
    (["tools/train_ppo.py", "--eval", "x.pt", "--episodes", "1000000000"], "--episodes"),
    (["tools/morphology.py", "sample", "--num", "1", "--seed", "1000000000000", "--out", "{tmp}/g"], "--seed"),
], ids=lambda value: value if isinstance(value, str) else " ".join(value[:2]))
def test_a_count_out_of_its_range_is_one_line_before_anything_runs(tmp_path, argv, flag):
    _refused(_tool(*(arg.format(tmp=tmp_path) for arg in argv), timeout=60), flag, "out of range")
    assert sorted(os.listdir(tmp_path)) == []


COUNT_FILES = [*sorted((ROOT / "tools").glob("*.py")), ROOT / "evo_single_proc.py",
               *sorted((ROOT / "derl" / "cli").glob("*.py")), *sorted((ROOT / "derl" / "bench").glob("*.py"))]
# An image's size is held to 16 .. MAX_IMAGE_SIDE pixels by derl.cli.morphology.image.
NOT_COUNTS = {"--size"}


def test_every_integer_argument_of_every_tool_is_bounded_or_a_seed():
    """No `type=int`: every count takes `bounded_int` (derl.arguments) or `bounded_ints`, a seed `any_seed`."""
    unbounded = []
    for path in COUNT_FILES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
                kinds = [k.value for k in node.keywords if k.arg == "type"]
                flag = next((a.value for a in node.args if isinstance(a, ast.Constant)), None)
                if any(isinstance(kind, ast.Name) and kind.id == "int" for kind in kinds) and flag not in NOT_COUNTS:
                    unbounded.append(f"{path.relative_to(ROOT)}: {flag}")
    assert unbounded == []
    from derl.arguments import MAX_SEED, bounded_float, bounded_int
    from derl.config.keys import INT32_MAX

    with pytest.raises(Exception, match="out of range"):
        bounded_int(1, 10)("11")
    for text in ("nan", "inf", "1e10"):
        with pytest.raises(Exception, match="out of range"):
            bounded_float(1, 100)(text)
    assert MAX_SEED == INT32_MAX  # RNG_SEED's range (derl.checked_config): a tool's seed is one the config takes


# ------------------------------------------------------------------ what a tool says
def test_replay_of_a_refused_record_gives_the_reason(run_folder, tmp_path):
    """It said `(no metadata/000001.json)` although the file was there."""
    run = tmp_path / "run"
    subprocess.run(["cp", "-a", str(run_folder), str(run)], check=True)
    (run / "metadata" / "000001.json").write_text('{"id": "000001"}')
    done = _tool("tools/replay.py", str(run), "000001")
    _refused(done, "000001 is not published", "metadata/000001.json is refused: ")
    assert "(no metadata" not in done.stderr


# ------------------------------------------------------------------ the report's work
class _CountingRow(dict):
    """A row of eval/summary.json that counts how often it is read."""

    reads = 0

    def __getitem__(self, key):
        type(self).reads += 1
        return super().__getitem__(key)

    def get(self, key, default=None):
        type(self).reads += 1
        return super().get(key, default)


def _transfer_reads(rows: int) -> int:
    """Reads of the rows by the transfer table of ``rows`` rows, each its own morphology and task."""
    from derl.analysis.report_content import transfer_table

    table = [_CountingRow(id=f"{k:06d}", task=f"t{k}", seed=0, **{"return": float(k)}) for k in range(rows)]
    _CountingRow.reads = 0
    transfer_table(table)
    return _CountingRow.reads


def test_the_transfer_tables_work_is_linear_in_its_rows():
    """43 KB of 1,000 rows took the report > 300 s: its work was ids x tasks x rows (64x for 4x the rows)."""
    assert _transfer_reads(240) <= 4 * _transfer_reads(60)


def test_the_page_shows_a_bounded_transfer_table(run_folder, tmp_path):
    """A summary of 150 morphologies on 150 tasks: the page shows the first 40 x 16 and says so."""
    from derl.analysis.report import ReportOptions, write_report
    from derl.analysis.run import RunView

    run = tmp_path / "run"
    subprocess.run(["cp", "-a", str(run_folder), str(run)], check=True)
    (run / "eval").mkdir()
    rows = [{"id": f"{k:06d}", "task": f"t{k:03d}", "seed": 0, "return": float(k)} for k in range(150)]
    (run / "eval" / "summary.json").write_text(json.dumps({"rows": rows}))
    report = write_report(RunView(run), tmp_path / "report", ReportOptions(top_k=2, media=False))
    html = report.index.read_text()
    table = html.split('id="transfer"')[1].split("</table>")[0]
    assert table.count("<tr>") == 1 + 40 and table.count("<th>t") == 16, table[:300]
    assert "150 morphologies x 150 tasks" in html and "the first 40 morphologies and 16 tasks" in html


# ------------------------------------------------------------------ numbers read back
@pytest.mark.parametrize("fitness", ["NaN", "Infinity"])
def test_a_fidelity_study_refuses_a_cell_that_is_not_finite(tmp_path, fitness):
    """A NaN or Infinity fitness was accepted: the study exited 0 and wrote JSON that is not JSON."""
    from tests.benchmarks.test_bench_cells import _cell

    cells = tmp_path / "cells.jsonl"
    cells.write_text(_cell().to_line().replace('"fitness":12.5', f'"fitness":{fitness}') + "\n")
    before = cells.read_bytes()
    done = _tool("tools/bench.py", "fidelity", "--cells-only", "--cells", str(cells), "--sample", "4",
                 "--work", str(tmp_path / "w"), "--out", str(tmp_path / "study.json"))
    _refused(done, f"{cells}:1: ", "'fitness' must be a finite number")
    assert cells.read_bytes() == before and not (tmp_path / "study.json").exists()
