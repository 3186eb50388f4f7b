"""The simulated cluster (``benchmarks.cluster``): real coordinators and workers on one folder, instant
training, faults drawn from a seed, invariants checked after each search.

A few seeds run here in ``make test``; ``make fuzz`` (``-m fuzz``) runs hundreds through
``test_a_fuzzed_seed_keeps_every_invariant`` (``DERL_FUZZ_SEEDS``, 200 there, from ``DERL_FUZZ_FIRST_SEED``,
default 1000). A failing seed names the command that reproduces it (``tools/bench.py cluster --seed N --keep DIR``).
"""

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from benchmarks.cluster import reproduce_command, simulate
from benchmarks.sim_checks import Ledger, number_problems, slot_problems
from benchmarks.sim_plan import KINDS, plan

ROOT = Path(__file__).resolve().parents[2]
# Seeds each failing on 8222025 in another family of docs/design/scale.md: 0 damages the genomes of published
# bodies, SIGKILLs a coordinator and skews a node's clock a year ahead; 23 plants a lease of the largest
# generation; 44 plants a heartbeat from the future; 55 names its OUT_DIR "run #2". make test runs the two
# quickest (20-40 s each on a busy 2-core machine; 0 and 23 take 50-70 s, and their families have unit tests in
# tests/evolution/test_search_rules.py); make fuzz runs all four before its drawn seeds.
SEEDS = (0, 23, 44, 55)
MAKE_TEST_SEEDS = (44, 55)
FUZZ_FIRST = int(os.environ.get("DERL_FUZZ_FIRST_SEED") or 1000)
FUZZ_SEEDS = range(FUZZ_FIRST, FUZZ_FIRST + int(os.environ.get("DERL_FUZZ_SEEDS") or 0))
FIXED_SEEDS = SEEDS if FUZZ_SEEDS else MAKE_TEST_SEEDS


def _assert_invariants(seed: int, where: Path) -> None:
    problems, log = simulate(seed, where)
    assert not problems, f"seed {seed}: {problems}\nreproduce: {reproduce_command(seed)}\nlog: {log}"


@pytest.mark.fuzz
@pytest.mark.parametrize("seed", FIXED_SEEDS)
def test_a_simulated_search_keeps_every_invariant_under_its_faults(seed, tmp_path):
    _assert_invariants(seed, tmp_path)


@pytest.mark.fuzz
@pytest.mark.parametrize("seed", FUZZ_SEEDS)
def test_a_fuzzed_seed_keeps_every_invariant(seed, tmp_path):
    _assert_invariants(seed, tmp_path)


def test_the_seeds_of_make_test_carry_the_faults_they_are_chosen_for():
    kinds = {seed: {fault.kind for fault in plan(seed).faults} for seed in SEEDS}
    assert {"damaged-genome", "sigkill-coordinator"} <= kinds[0] and plan(0).clock_offsets[1] > 0
    assert "lease-at-end" in kinds[23]
    assert "future-heartbeat" in kinds[44]
    assert plan(55).out_name == "run #2"


def test_a_seed_is_its_plan_and_two_hundred_seeds_draw_every_fault():
    assert plan(17) == plan(17) and plan(17) != plan(18)
    drawn = Counter(fault.kind for seed in range(200) for fault in plan(seed).faults)
    assert set(drawn) == set(KINDS)
    assert any(plan(seed).out_name != "run" for seed in range(200))


def _record(out: Path, morphology_id: str, slot: int, publication: int) -> None:
    (out / "metadata" / f"{morphology_id}.json").write_text(json.dumps({"id": morphology_id, "slot": slot,
                                                                         "publication": publication}))
    (out / "published" / f"{publication:08d}.json").write_text(json.dumps({"id": morphology_id}))
    (out / "models" / f"{morphology_id}.pt").write_text("weights")


def test_the_checks_name_a_slot_published_twice_a_missing_failure_a_shared_number_and_a_lost_file(tmp_path):
    for folder in ("metadata", "published", "models", "error_metadata"):
        (tmp_path / folder).mkdir()
    _record(tmp_path, "000000", 0, 0)
    _record(tmp_path, "000001-1", 1, 1)
    ledger = Ledger(tmp_path)
    assert ledger.scan() == 2
    assert slot_problems(tmp_path, 2) == ["slot 1 is published as 000001-1 but 000001 has no failure record"]
    (tmp_path / "error_metadata" / "000001.json").write_text("{}")
    assert slot_problems(tmp_path, 3) == ["slot 2 is published 0 times (never)"]
    _record(tmp_path, "000000-1", 0, 1)
    assert slot_problems(tmp_path, 2) == ["slot 0 is published 2 times (000000-1, 000000)"]
    assert number_problems(tmp_path) == ["000001-1's publication 1 is given to '000000-1' in published/",
                                         "publication 1 is shared by 000000-1, 000001-1"]
    (tmp_path / "models" / "000000.pt").write_text("other weights")
    (tmp_path / "metadata" / "000001-1.json").unlink()
    assert ledger.problems() == ["metadata/000001-1.json was published and is now gone",
                                 "models/000000.pt was published and is now changed"]
    ledger.damaged.add(tmp_path / "models" / "000000.pt")  # damaged by the simulation itself: no loss
    assert ledger.problems() == ["metadata/000001-1.json was published and is now gone"]


def test_bench_cluster_reproduces_a_seed_by_its_number_and_refuses_a_bad_one():
    bad = subprocess.run([sys.executable, "tools/bench.py", "cluster", "--seed", "x"], cwd=ROOT, capture_output=True,
                         text=True)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    assert bad.stderr.startswith("error: argument --seed: not a seed or a range of seeds: 'x'")
    assert reproduce_command(7) == "python tools/bench.py cluster --seed 7 --keep /tmp/derl-sim-7"


def test_a_search_without_progress_is_a_problem_a_slow_one_is_not(tmp_path):
    """The deadline counts from the last progress (a publication, a training, a start), not from the start: on a
    busy machine the fuzzed seeds failed a 300 s deadline on the whole search while still publishing."""
    problems, _ = simulate(44, tmp_path, deadline=0.01)
    assert len(problems) == 1 and problems[0].startswith("the search made no progress in 0.01 s"), problems
