"""tools/bench.py compile: the summary of per-body records worked by hand, its inputs, and one real run (slow)."""

import argparse
import json
import shutil
import subprocess
import sys

import pytest

from benchmarks.compile import (
    BodyCompile,
    _genome_files,
    add_arguments,
    collision_pairs,
    kernel_name,
    run,
    summarise,
)
from derl.checked_config import load_config
from derl.paths import EVO_PRESETS
from tests.conftest import ROOT

FT = load_config(EVO_PRESETS / "ft.yml")

CHOLESKY = "wp__update_gradient_cholesky__locals__kernel_4c171783_1b26c4d"
JTDAJ = "wp__update_gradient_JTDAJ_dense_tiled__locals__kernel_89e25008_1c67c9b"
NARROW = "wp__primitive_narrowphase__locals__primitive_narrowphase_4bac71c7_6c51457"


def _body(name, nv, nc, pairs, modules, first_step, process):
    return BodyCompile(name, 3, nv, 5, 9, 5, 6, -(-nv // 4) * 4, nc, pairs, modules, 0.1, first_step, process)


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(argv)


def test_the_summary_counts_modules_classes_and_which_keys_the_compiles_follow():
    cold = tuple(f"wp_mujoco_warp._src.m{index}_{index:07x}" for index in range(39))
    bodies = [
        _body("a", 11, 62, ("S-C",), cold, 60.0, 66.0),  # the cold cache: everything compiles
        _body("b", 11, 62, ("S-C",), (), 1.5, 8.0),  # the same shapes: loads only
        _body("c", 11, 60, ("S-C",), (JTDAJ,), 3.0, 10.0),  # same nv, another tree: nC new
        _body("d", 14, 89, ("S-C",), (CHOLESKY, JTDAJ), 17.0, 24.0),  # nv new (nv_pad 16)
        _body("e", 13, 96, ("S-C", "C-C"), (CHOLESKY, JTDAJ, NARROW), 4.0, 12.0),  # nv, nC and the pairs new
        _body("f", 13, 89, ("S-C",), (), 2.0, 9.0),  # (nv, nC) new, but nv_pad 16 with nC 89 is d's: no compile
    ]
    summary = summarise(bodies)
    assert (summary["bodies"], summary["bodies_compiling"], summary["modules"]) == (6, 4, 39 + 0 + 1 + 2 + 3 + 0)
    assert summary["modules_per_body"] == [39, 0, 1, 2, 3, 0]
    assert summary["cumulative_modules"] == [39, 39, 40, 42, 45, 45]
    assert summary["modules_later_bodies"] == 6 and summary["last_body_compiling"] == 5
    assert summary["modules_in_second_half"] == 45 - 40  # after body 3 of 6
    assert summary["classes"] == {"nv": 3, "nv_pad, nC": 4, "geom_pairs": 2}
    assert summary["cumulative_classes"] == {"nv": [1, 1, 1, 2, 3, 3], "nv_pad, nC": [1, 1, 2, 3, 4, 4],
                                             "geom_pairs": [1, 1, 1, 1, 2, 2]}
    follows = summary["compiles_follow"]
    # nv alone: b (seen, none), d and e (new, compiled) and f (seen, none) agree; c compiled with nv seen
    assert follows["nv"] == {"agree": 4, "of": 5}
    assert follows["nv, nC"] == {"agree": 4, "of": 5}  # f's (13, 89) is new, yet nothing compiled
    assert follows["nv | nv_pad, nC | geom_pairs"] == {"agree": 5, "of": 5}
    assert summary["kernels_compiled_again"] == {"_update_gradient_JTDAJ_dense_tiled": 3,
                                                 "_update_gradient_cholesky": 2, "_primitive_narrowphase": 1}
    assert summary["first_step_seconds"] == {"first_body": 60.0, "later_compiling_median": 4.0,
                                             "later_loading_median": 1.75}
    # first steps that compiled (60 + 3 + 17 + 4) over the processes' wall (66 + 8 + 10 + 24 + 12 + 9)
    assert summary["compiling_seconds"] == 84.0 and summary["wall_seconds"] == 129.0
    assert summary["compiling_share_of_wall"] == round(84 / 129, 3)


def test_kernel_names_and_collision_pairs_are_read_as_mujoco_warp_writes_them():
    assert kernel_name(CHOLESKY) == "_update_gradient_cholesky"
    assert kernel_name(NARROW) == "_primitive_narrowphase"
    assert kernel_name("wp_mujoco_warp._src.smooth_439a86e") == "mujoco_warp._src.smooth"
    # the upper triangle over 3 types, row after row: (0,0) (0,1) (0,2) (1,1) (1,2) (2,2)
    assert collision_pairs([0, 2, 0, 0, 1, 1], ["PLANE", "SPHERE", "CAPSULE"]) == (
        "PLANE-SPHERE", "SPHERE-CAPSULE", "CAPSULE-CAPSULE")


def test_sampled_bodies_take_the_mutation_counts_in_turns(tmp_path):
    paths = _genome_files(_args("--sample", "5", "--seed", "3", "--mutations", "0,2"), FT.unimal, tmp_path)
    assert [path.stem for path in paths] == ["s3-0000-m0", "s4-0000-m2", "s3-0001-m0", "s4-0001-m2", "s3-0002-m0"]


@pytest.mark.parametrize("argv, text", [
    ([], "give --genomes DIR or --sample N"),
    (["--sample", "2", "--genomes", "."], "give --genomes DIR or --sample N"),
    (["--sample", "2", "--mutations", "1,x"], "--mutations expects comma-separated integers"),
    (["--sample", "0"], "--sample must be >= 1"),
    (["--sample", "1", "--nworld", "0"], "--nworld must be >= 1"),
    (["--genomes", "EMPTY"], "--genomes: no genome JSON files"),
    (["--genomes", "BAD"], "BAD/x.json"),
    (["--sample", "1", "--cache", "FULL"], "--cache must be a new or empty folder"),
])
def test_bad_input_is_one_line_before_any_body_runs(tmp_path, argv, text):
    for name in ("EMPTY", "BAD", "FULL"):
        (tmp_path / name).mkdir()
    (tmp_path / "BAD" / "x.json").write_text("{not json")
    (tmp_path / "FULL" / "wp_module").mkdir()
    argv = [str(tmp_path / arg) if arg in ("EMPTY", "BAD", "FULL") else arg for arg in argv]
    with pytest.raises(SystemExit) as caught:
        run(_args(*argv))
    message = str(caught.value.code)
    assert message.startswith("error: ") and text.replace("BAD", str(tmp_path / "BAD")) in message
    assert "\n" not in message


@pytest.mark.slow
def test_a_body_seen_by_an_earlier_process_compiles_nothing(tmp_path):
    """Two processes on one cold cache (about 90 s on 2 cores): the second body, the same as the first,
    loads the first's modules; a third, of another nv, compiles a few."""
    pytest.importorskip("mujoco_warp")
    genomes = tmp_path / "genomes"
    first, other = _genome_files(_args("--sample", "2", "--mutations", "0,4"), FT.unimal, tmp_path / "sampled")
    genomes.mkdir()
    shutil.copy(first, genomes / "1.json")
    shutil.copy(first, genomes / "2.json")
    shutil.copy(other, genomes / "3.json")
    out = tmp_path / "compile.json"
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "bench.py"), "compile", "--genomes", str(genomes),
                           "--nworld", "1", "--cache", str(tmp_path / "cache"), "--out", str(out)],
                          capture_output=True, text=True, timeout=900, check=False, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    one, two, three = report["per_body"]
    assert one["nv"] != three["nv"]  # the samples of seeds 0 and 1 (4 mutations) differ in dofs
    assert len(one["new_modules"]) > 10 and two["new_modules"] == [] and 0 < len(three["new_modules"]) < 10
    assert report["summary"]["bodies_compiling"] == 2 and report["summary"]["classes"]["nv"] == 2
    cached = {path.name for path in (tmp_path / "cache").glob("*/wp_*")}
    assert cached == set(one["new_modules"]) | set(three["new_modules"])
