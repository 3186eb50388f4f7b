"""A genome is held to the design space before any work (issue 48, "One way in"): the tools refuse a
100,000-limb genome at once, every range and rule of UNIMAL is checked, the project's own genomes pass,
and building a body is linear in its limbs."""

import dataclasses
import json
import math
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from derl.checked_config import load_config
from derl.morphology import Genome, GenomeError, Joint, LimbGroup, mutate, random_genome, to_mjcf
from derl.morphology.files import InputError, load_genome
from derl.morphology.genome import genome_problem
from derl.morphology.genome_checks import max_genome_bytes
from derl.morphology.geometry import place_limbs
from derl.morphology.mutations import has_forbidden_contact
from tests.conftest import ROOT

CFG = load_config().unimal
PRESETS = [None, *sorted((ROOT / "configs" / "evo").glob("*.yml"))]


def _good() -> dict:
    return json.loads(random_genome(CFG, np.random.default_rng(0), "g0").to_json())


def _huge(form: str, limbs: int = 100_000) -> dict:
    """A ``limbs``-limb chain (each limb on the previous one's tip) or star (every limb on the head)."""
    groups = [{"ids": [i], "parent": None if form == "star" or i == 0 else i - 1,
               "site": "center" if form == "star" or i == 0 else "btm", "radius": 0.05, "length": 0.2,
               "theta": 0, "phi": 180, "joints": [{"axis": "x", "range": [-30, 30], "gear": 150}]}
              for i in range(limbs)]
    return {"id": "huge", "head_radius": 0.1, "head_density": 500, "limb_density": 500, "groups": groups,
            "next_limb_id": limbs, "parent_id": None, "mutation": None, "schema_version": 1}


# ---------------------------------------------------------------- the tools, on a 100,000-limb genome

# The tool runs under a CPU limit set in its own process (RLIMIT_CPU: SIGXCPU past it, never exit 2), generous
# for a slow or busy machine; the measure is its peak memory and what it said, never its seconds.
MEASURED = """
import resource, subprocess, sys
limit = lambda: resource.setrlimit(resource.RLIMIT_CPU, (60, 60))
done = subprocess.run(sys.argv[1:], capture_output=True, text=True, preexec_fn=limit)
print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)
sys.stderr.write(done.stderr)
"""


def _measured(argv: list[str], cwd: Path) -> tuple[int, float, list[str]]:
    """Exit code and peak MB of the tool ``argv`` (measured alone, in a process of its own, under a CPU
    limit), and its stderr lines."""
    done = subprocess.run([sys.executable, "-c", MEASURED, sys.executable, *argv], cwd=cwd, capture_output=True,
                          text=True, timeout=300)
    code, megabytes = done.stdout.split()
    return int(code), float(megabytes), done.stderr.strip().splitlines()


@pytest.fixture(scope="module")
def huge_files(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("huge")
    for form in ("chain", "star"):
        (folder / f"{form}.json").write_text(json.dumps(_huge(form)))  # 16 MB each
        bodies = folder / f"{form}_bodies"  # bench fidelity --genomes: three good ones and the huge one
        bodies.mkdir()
        for seed in range(3):
            (bodies / f"g{seed}.json").write_text(random_genome(CFG, np.random.default_rng(seed), f"g{seed}").to_json())
        (bodies / "huge.json").write_text(json.dumps(_huge(form)))
    return folder


@pytest.mark.parametrize("form", ["chain", "star"])
@pytest.mark.parametrize("tool", ["train_ppo", "morphology", "fidelity"])
def test_the_tools_refuse_a_100000_limb_genome_at_once(tool, form, huge_files, tmp_path):
    """Once 298 s and 1.8 GB, then an XML nesting error (the chain) or an unknown exception at 2 GB (the star)."""
    genome, work = huge_files / f"{form}.json", tmp_path / "work"
    argv = {"train_ppo": ["tools/train_ppo.py", "--genome", str(genome), "--out", str(work)],
            "morphology": ["tools/morphology.py", "xml", str(genome)],
            "fidelity": ["tools/bench.py", "fidelity", "--cpu", "--genomes", str(huge_files / f"{form}_bodies"),
                         "--work", str(work)]}[tool]
    code, megabytes, lines = _measured(argv, ROOT)
    assert code == 2 and len(lines) == 1, lines[-5:]
    # Refused by its size before it is parsed, under 300 MB (the interpreter and torch): at once.
    assert lines[0].startswith("error: ") and "is larger than 45056 bytes" in lines[0] and "MAX_LIMBS" in lines[0]
    assert megabytes < 300, megabytes
    assert not work.exists()


def test_a_linked_genome_file_is_refused(tmp_path):
    good = tmp_path / "good.json"
    good.write_text(json.dumps(_good()))
    (tmp_path / "link.json").symlink_to(good)
    with pytest.raises(InputError, match="link.json: is a symbolic link, not a regular file"):
        load_genome(tmp_path / "link.json", CFG)
    os.mkfifo(tmp_path / "fifo.json")  # never opened for reading: it would block
    with pytest.raises(InputError, match="fifo.json: is a FIFO"):
        load_genome(tmp_path / "fifo.json", CFG)
    done = subprocess.run([sys.executable, "tools/train_ppo.py", "--genome", str(tmp_path / "link.json"),
                           "--out", str(tmp_path / "out")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "symbolic link" in done.stderr, done.stderr
    assert not (tmp_path / "out").exists()


def test_a_parsed_genome_past_max_limbs_is_refused_before_its_groups_are_read():
    """``genome_problem`` (the run folder's check): a 100,000-group genome is refused on its count alone."""
    data = {**_good(), "groups": [None] * 100_000}  # a group read would be "malformed"
    assert genome_problem(data, CFG) == "genome g0: 100000 limb groups, more than LIMB.MAX_LIMBS (10) limbs"
    assert genome_problem(_huge("chain"), CFG).startswith("genome huge: 100000 limb groups")
    assert genome_problem(_good(), CFG) is None
    assert max_genome_bytes(CFG) == 4096 + 4096 * 10
    with pytest.raises(GenomeError, match="genome: is larger than 45056 bytes"):
        Genome.from_json(json.dumps(_huge("star", 400)), CFG)


# ---------------------------------------------------------------- the design space


def _edited(path: str, value) -> dict:
    """The good genome with the value at ``path`` (``groups.0.joints.0.gear``) replaced."""
    data = _good()
    *parents, last = path.split(".")
    node = data
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return data


def _first_pair(data: dict) -> dict:
    return next(g for g in data["groups"] if len(g["ids"]) == 2)


OUTSIDE = {  # a value the default config's design space lacks -> the message naming it
    "head_radius": (0.2, "head_radius 0.2 is outside TORSO.HEAD_RADIUS_RANGE [0.1, 0.1]"),
    "head_density": (1200, "head_density 1200 is outside TORSO.DENSITY_RANGE [500, 1000]"),
    "limb_density": (100, "limb_density 100 is outside LIMB.DENSITY_RANGE [500, 1000]"),
    "groups.0.radius": (0.06, "radius 0.06 is outside LIMB.RADIUS_RANGE [0.05, 0.05]"),
    "groups.0.length": (0.5, "length 0.5 is outside LIMB.HEIGHT_RANGE [0.2, 0.4]"),
    "groups.0.joints.0.gear": (400, "joint gear 400 is outside BODY.MOTOR_GEAR_RANGE [150, 300]"),
    "groups.0.joints.0.range": ([-10, 10], "joint range [-10, 10] is not one of BODY.JOINT_ANGLE_LIST"),
    "groups.0.phi": (45, "is not one UNIMAL grows"),
    "groups.0.theta": (30, "is not one UNIMAL grows"),
}


@pytest.mark.parametrize("path", OUTSIDE)
def test_values_outside_the_config_ranges_are_refused(path):
    value, message = OUTSIDE[path]
    problem = genome_problem(_edited(path, value), CFG)
    assert problem is not None and message in problem and "\n" not in problem, problem
    assert Genome.from_dict(_edited(path, value)) is not None  # without a config: only the physical bounds


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("path", ["head_radius", "groups.0.length", "groups.0.joints.0.gear", "groups.0.theta",
                                  "groups.0.joints.0.range.0"])
def test_non_finite_values_are_refused(path, value):
    text = json.dumps(_edited(path, value))  # NaN, Infinity: Python's json reads them
    with pytest.raises(GenomeError, match="must be a number in"):
        Genome.from_json(text, CFG)


def test_limb_counts_outside_1_to_max_limbs_are_refused():
    assert genome_problem({**_good(), "groups": []}, CFG) == "genome g0: 0 limbs, outside 1..LIMB.MAX_LIMBS (10)"
    eleven = _huge("chain", 11)
    assert genome_problem(eleven, CFG) == "genome huge: 11 limb groups, more than LIMB.MAX_LIMBS (10) limbs"
    six_pairs = _good()
    pair = _first_pair(six_pairs)
    six_pairs["groups"] = [{**pair, "ids": [2 * k, 2 * k + 1]} for k in range(6)]
    six_pairs["next_limb_id"] = 12
    assert genome_problem(six_pairs, CFG) == "genome g0: 12 limbs, outside 1..LIMB.MAX_LIMBS (10)"
    assert genome_problem(_huge("chain", 10), CFG) is None  # a 10-limb chain is in the space (no overlap check here)


def _walker() -> dict:
    """Thighs (0, 1) leaving the head sideways-down, shins (2, 3) on their tips, a tail (4) on the plane."""
    def group(ids, parent, site, theta, phi):
        return {"ids": ids, "parent": parent, "site": site, "radius": 0.05, "length": 0.3, "theta": theta,
                "phi": phi, "joints": [{"axis": "x", "range": [-30, 30], "gear": 150}]}

    return {"id": "walker", "head_radius": 0.1, "head_density": 700, "limb_density": 600, "next_limb_id": 5,
            "groups": [group([0, 1], None, "center", 90, 135), group([2, 3], 0, "btm", 0, 180),
                       group([4], None, "center", 180, 90)],
            "parent_id": None, "mutation": None, "schema_version": 1}


def _walker_with(edit) -> dict:
    data = _walker()
    edit(data)
    return data


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["groups"][2].update(theta=90), "a single limb must lie on the symmetry plane"),
    (lambda d: d["groups"][0].update(theta=0), "a pair on a plane site must leave the symmetry plane"),
    (lambda d: d["groups"][0].update(theta=270), "a pair on a plane site has theta below 180"),  # limbs swapped
    (lambda d: (d["groups"][1].update(ids=[2, 4]), d["groups"][2].update(ids=[3])),
     "a pair's ids must be consecutive"),
    (lambda d: d["groups"].append({**d["groups"][2], "ids": [5], "parent": 0, "site": "btm", "theta": 0,
                                   "phi": 180}) or d.update(next_limb_id=6),
     "a single limb cannot hang from a mirrored pair"),
    (lambda d: d["groups"].append({**d["groups"][2], "ids": [5], "parent": 4, "site": "mid"}) or
     d.update(next_limb_id=6), "continues its parent's direction from its mid site"),
    (lambda d: d["groups"][2].update(joints=[{"axis": "y", "range": [-30, 30], "gear": 150},
                                             {"axis": "x", "range": [-30, 30], "gear": 150}]),
     "joint axes 'yx' are not one of BODY.JOINT_AXIS"),
    (lambda d: d["groups"][2].update(ids=[4, 5, 6]), "a group holds one or two limbs"),
    (lambda d: d["groups"][2].update(parent=4, site="btm"), "parent 4 is not the first limb of an earlier group"),
    (lambda d: d["groups"].reverse(), "parent 0 is not the first limb of an earlier group"),  # child first
    (lambda d: d["groups"][1].update(parent=9), "parent 9 is not the first limb of an earlier group"),
    (lambda d: d["groups"][0].update(ids=[-2, -1]), "limb ids must lie in 0..next_limb_id - 1"),
])
def test_genomes_outside_unimals_rules_are_refused(edit, message):
    """Symmetry as UNIMAL grows pairs, its growth and joint rules, one tree from the head."""
    assert genome_problem(_walker(), CFG) is None
    problem = genome_problem(_walker_with(edit), CFG)
    assert problem is not None and message in problem and "\n" not in problem, (problem, message)


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: "defaults" if p is None else p.stem)
def test_every_genome_the_project_makes_is_accepted(preset):
    """The initial population's draws and every mutation, under each preset's config, pass the check."""
    unimal = load_config(preset).unimal
    checked = 0
    for seed in range(12):
        rng = np.random.default_rng(seed)
        genome = random_genome(unimal, rng, f"g{seed}")
        for step in range(15):
            assert Genome.from_json(genome.to_json(), unimal) == genome
            assert genome_problem(json.loads(genome.to_json()), unimal) is None
            assert len(genome.to_json()) <= max_genome_bytes(unimal)
            genome = mutate(genome, unimal, rng, f"g{seed}-{step}")
            checked += 1
    assert checked == 12 * 15


# ---------------------------------------------------------------- building is linear in the limbs


class CountedGroups(tuple):
    """A genome's groups that count how many times they are walked."""

    walks = 0

    def __iter__(self):
        CountedGroups.walks += 1
        return super().__iter__()


def _chain(limbs: int) -> Genome:
    """A chain of ``limbs`` limbs hanging straight down, each from its parent's tip."""
    joint = (Joint("x", (-30, 30), 150),)
    groups = [LimbGroup((i,), None if i == 0 else i - 1, "center" if i == 0 else "btm", 0.05, 0.2, 0, 180, joint)
              for i in range(limbs)]
    return Genome("chain", 0.1, 500, 500, CountedGroups(groups), limbs)


@pytest.mark.parametrize("build", ["place_limbs", "to_mjcf", "has_forbidden_contact"])
def test_building_a_body_walks_its_groups_a_fixed_number_of_times(build):
    """Each limb's parent found by its id, not by walking the groups: once 17 of 24 s at 20,000 limbs."""
    unimal = dataclasses.replace(CFG, LIMB=dataclasses.replace(CFG.LIMB, MAX_LIMBS=400))
    run = {"place_limbs": place_limbs, "to_mjcf": lambda g: to_mjcf(g, unimal),
           "has_forbidden_contact": lambda g: has_forbidden_contact(g, unimal)}[build]
    walks = []
    for limbs in (100, 400):
        genome = _chain(limbs)
        CountedGroups.walks = 0
        run(genome)
        walks.append(CountedGroups.walks)
    assert walks[0] == walks[1] <= 3, walks


# ---------------------------------------------------------------- a signal while the body is built


def test_a_signal_while_the_body_is_built_stops_train_ppo_at_once(tmp_path, monkeypatch):
    """SIGTERM (or Ctrl-C) during the build: exit 128 + N then and there, the new folder removed; it was
    once held until the training's first iteration."""
    from derl.cli.train_ppo import main
    from derl.training import run as training_run
    from tools.train_ppo import parse_args

    built = threading.Event()

    def slow_build(genome, options):
        os.kill(os.getpid(), signal.SIGTERM)
        built.set()
        raise AssertionError("the build went on after SIGTERM")

    monkeypatch.setattr(training_run, "to_mjcf", slow_build)
    genome = tmp_path / "g0.json"
    genome.write_text(json.dumps(_good()))
    out = tmp_path / "out"
    code = main(parse_args(["--genome", str(genome), "--out", str(out), "--quiet"]))
    assert code == 128 + signal.SIGTERM and not built.is_set() and not out.exists()
