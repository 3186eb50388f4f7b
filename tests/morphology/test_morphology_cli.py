"""tools/morphology.py: sample, xml, mutate, stats, and one-line errors."""

import importlib.util
import json
import subprocess
import sys

import mujoco
import pytest

from derl.morphology import Genome
from tests.conftest import ROOT
from tests.morphology_checks import assert_mirror_symmetric, simulate_on_floor

SCRIPT = ROOT / "tools" / "morphology.py"
_spec = importlib.util.spec_from_file_location("morphology_tool", SCRIPT)
tool = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tool)


def run(capsys, *argv):
    """Runs the tool in-process; returns (exit code, stdout, stderr)."""
    try:
        tool.main([str(a) for a in argv])
        code = 0
    except SystemExit as exit_:
        code = exit_.code
    out, err = capsys.readouterr()
    return code, out, err


def test_sample_twice_gives_identical_files_and_xml_reproduces_them(tmp_path, capsys):
    for name in ("a", "b"):
        code, out, _ = run(capsys, "sample", "--num", 4, "--seed", 7, "--mutations", 3, "--out", tmp_path / name)
        assert code == 0 and len(out.split()) == 4
    files = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert len(files) == 8 and files == sorted(p.name for p in (tmp_path / "b").iterdir())
    for name in files:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    genome_file = tmp_path / "a" / "s7-0002-m3.json"
    genome = Genome.from_json(genome_file.read_text())
    assert genome.parent_id == "s7-0002-m2" and genome.mutation is not None
    code, out, _ = run(capsys, "xml", genome_file)
    assert code == 0 and out == (tmp_path / "a" / "s7-0002-m3.xml").read_text()
    mujoco.MjModel.from_xml_path(str(tmp_path / "a" / "s7-0002-m3.xml"))


def test_mutate_writes_one_child_and_stats_counts(tmp_path, capsys):
    run(capsys, "sample", "--num", 3, "--seed", 1, "--out", tmp_path)
    code, out, _ = run(capsys, "mutate", tmp_path / "s1-0000-m0.json", "--seed", 5, "--out", tmp_path / "kids")
    assert code == 0 and out.strip().endswith("s1-0000-m0-c5.json")
    child = Genome.from_json((tmp_path / "kids" / "s1-0000-m0-c5.json").read_text())
    assert child.parent_id == "s1-0000-m0" and (tmp_path / "kids" / "s1-0000-m0-c5.xml").is_file()
    code, out, _ = run(capsys, "stats", tmp_path)
    stats = json.loads(out)
    assert stats["genomes"] == 3 and sum(stats["limbs"].values()) == 3 and sum(stats["dof"].values()) == 3
    assert 1 <= stats["unique_structures"] <= stats["unique_genomes"] == 3


def test_sample_and_mutate_replace_another_body_only_when_asked(tmp_path, capsys):
    """A rerun keeps the files (same bytes); another body under the same ids (another design space) is one
    line and exit 2 with every file as it was, and ``--overwrite`` replaces them."""
    def files() -> dict[str, bytes]:
        return {path.name: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()}

    assert run(capsys, "sample", "--num", 2, "--seed", 4, "--out", tmp_path)[0] == 0
    assert run(capsys, "mutate", tmp_path / "s4-0000-m0.json", "--seed", 1, "--out", tmp_path / "kids")[0] == 0
    written = files()
    assert run(capsys, "sample", "--num", 2, "--seed", 4, "--out", tmp_path)[0] == 0 and files() == written
    wider = ["TORSO.HEAD_RADIUS_RANGE", "[0.12]"]
    code, _, err = run(capsys, "sample", "--num", 2, "--seed", 4, "--out", tmp_path, *wider)
    assert code == 2 and err.count("\n") == 1 and "s4-0000-m0.xml: exists and holds another body" in err
    assert "--overwrite" in err and files() == written
    (tmp_path / "kids" / "s4-0000-m0-c1.json").write_text("{}")  # the user's file under the child's name
    code, _, err = run(capsys, "mutate", tmp_path / "s4-0000-m0.json", "--seed", 1, "--out", tmp_path / "kids")
    assert code == 2 and "s4-0000-m0-c1.json: exists and holds another body" in err
    assert (tmp_path / "kids" / "s4-0000-m0-c1.json").read_text() == "{}"
    assert run(capsys, "sample", "--num", 2, "--seed", 4, "--out", tmp_path, "--overwrite", *wider)[0] == 0
    assert Genome.from_json((tmp_path / "s4-0001-m0.json").read_text()).to_json() != written["s4-0001-m0.json"].decode()
    assert run(capsys, "mutate", tmp_path / "s4-0000-m0.json", "--seed", 1, "--out", tmp_path / "kids",
               "--overwrite", *wider)[0] == 0
    assert Genome.from_json((tmp_path / "kids" / "s4-0000-m0-c1.json").read_text()).parent_id == "s4-0000-m0"


@pytest.mark.parametrize("argv, message", [
    (["xml", "missing.json"], "error: genome file not found: missing.json"),
    (["xml", "{bad}"], "{bad}: not valid JSON"),
    (["sample", "--num", "0", "--seed", "1", "--out", "x"], "argument --num: 0 is out of range: give 1 .. 100,000"),
    (["sample", "--num", "1", "--seed", "-1", "--out", "x"], "argument --seed: -1 is out of range"),
    (["stats", "nowhere"], "error: not a folder: nowhere"),
    (["stats", ".", "NUM_LIMB", "3"], "error: unknown config key 'NUM_LIMB'"),
    (["stats", ".", "MAX_LIMBS", "many"], "error: config key LIMB.MAX_LIMBS expects int, got 'many'"),
    (["stats", ".", "DENSITY_RANGE", "[1]"], "error: ambiguous config key 'DENSITY_RANGE'"),
    (["stats", ".", "--cfg", "none.yml"], "error: config file not found: none.yml"),
])
def test_bad_input_gives_one_line_and_exit_2(tmp_path, capsys, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "{bad}").write_text("{not json")
    code, out, err = run(capsys, *argv)
    assert code == 2 and message in err and err.count("\n") == 1


def test_script_runs_as_a_program(tmp_path):
    result = subprocess.run([sys.executable, SCRIPT, "sample", "--num", "2", "--seed", "3", "--out", tmp_path],
                            capture_output=True, text=True, check=True)
    assert len(result.stdout.split()) == 2


@pytest.mark.slow
def test_acceptance_300_genomes_after_20_mutations(tmp_path):
    subprocess.run([sys.executable, SCRIPT, "sample", "--num", "300", "--seed", "7", "--mutations", "20",
                    "--out", tmp_path], check=True, capture_output=True)
    xmls = sorted(tmp_path.glob("*.xml"))
    assert len(xmls) == 300
    for path in xmls:
        genome = Genome.from_json(path.with_suffix(".json").read_text())
        assert 1 <= genome.num_limbs <= 10
        mujoco.MjModel.from_xml_path(str(path))
        simulate_on_floor(path.read_text())
        assert_mirror_symmetric(path.read_text())
