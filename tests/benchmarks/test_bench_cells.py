"""benchmarks.cells: the fidelity studies' table of trainings, and the bootstrap intervals over bodies."""

import json
import threading

import numpy as np
import pytest

from benchmarks.agreement import bootstrap, seed_agreement
from benchmarks.cells import Cell, CellError, CellKey, CellTable, body_digest, cell_from_dict, sources


def _cell(seed: int = 1, fitness: float = 12.5, machine: str = "CPU A (AVX2)", date: str = "2026-11-28",
          body: str = "a" * 64) -> Cell:
    key = CellKey("ft", (("PPO.NUM_ENVS", "8"),), 1250000, body, seed, "mujoco")
    return Cell(key, "s1-0000-m0", 5, "__reward__forward", fitness, 1249280, "cpu", machine, None, date,
                "0123abc", 61.5, 60.0)


def test_a_cell_round_trips_through_its_line_and_the_table(tmp_path):
    table = CellTable(tmp_path / "cells.jsonl")
    assert table.cells() == []  # no table yet: no cells
    first, second = _cell(1), _cell(2, fitness=3.0)
    table.add(first)
    table.add(second)
    assert table.cells() == [first, second]
    line = json.loads((tmp_path / "cells.jsonl").read_text().splitlines()[0])
    assert line["key"]["overrides"] == {"PPO.NUM_ENVS": "8"} and line["fitness"] == 12.5
    assert cell_from_dict(line) == first


def test_the_first_cell_of_a_key_is_the_one_used_and_sources_count_where_they_came_from(tmp_path):
    table = CellTable(tmp_path / "cells.jsonl")
    for cell in (_cell(1), _cell(1, fitness=99.0, machine="GPU node"), _cell(2, machine="GPU node")):
        table.add(cell)
    chosen = table.by_key()
    assert len(chosen) == 2 and chosen[_cell(1).key].fitness == 12.5
    where = {"gpu": None, "device": "cpu", "date": "2026-11-28", "commit": "0123abc", "cells": 1}
    assert sources(chosen.values()) == [{"machine": "CPU A (AVX2)", **where}, {"machine": "GPU node", **where}]


def test_studies_adding_at_once_lose_no_cell(tmp_path):
    table = CellTable(tmp_path / "cells.jsonl")
    threads = [threading.Thread(target=table.add, args=(_cell(seed),)) for seed in range(1, 21)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(cell.key.seed for cell in table.cells()) == list(range(1, 21))


@pytest.mark.parametrize("line, problem", [
    ("{", "not valid JSON"),
    ("[1, 2]", "a cell must have exactly the fields"),
    ("CELL:fitness=\"12\"", "field 'fitness' must be float or int"),
    ("CELL:limbs=true", "field 'limbs' must be int"),
    ("KEY:seed=1.5", "a cell's key field 'seed' must be int"),
    ("KEY:body=\"abc\"", "must be a SHA-256"),
    ("KEY:overrides={\"A\": 1}", "overrides must map keys to strings"),
    # Every number read back is finite: a study never averages NaN or writes JSON that is not JSON.
    ("CELL:fitness=NaN", "field 'fitness' must be a finite number"),
    ("CELL:fitness=Infinity", "field 'fitness' must be a finite number"),
    ("CELL:wall_seconds=-Infinity", "field 'wall_seconds' must be a finite number"),
    ("CELL:cpu_seconds=1e999", "field 'cpu_seconds' must be a finite number"),
])
def test_a_bad_line_is_an_error_naming_the_file_and_line(tmp_path, line, problem):
    path = tmp_path / "cells.jsonl"
    good = _cell().to_line()
    if line.startswith(("CELL:", "KEY:")):
        where, _, change = line.partition(":")
        field, _, value = change.partition("=")
        data = json.loads(good)
        (data["key"] if where == "KEY" else data)[field] = json.loads(value)
        line = json.dumps(data)
    path.write_text(f"{good}\n{line}\n")
    with pytest.raises(CellError) as caught:
        CellTable(path).cells()
    assert str(caught.value).startswith(f"{path}:2: ") and problem in str(caught.value), str(caught.value)
    with pytest.raises(CellError):
        CellTable(path).add(_cell(3))  # never rewritten over a line it cannot read
    assert path.read_text() == f"{good}\n{line}\n"


def test_a_linked_table_is_refused(tmp_path):
    (tmp_path / "elsewhere.jsonl").write_text(_cell().to_line() + "\n")
    (tmp_path / "cells.jsonl").symlink_to(tmp_path / "elsewhere.jsonl")
    with pytest.raises(CellError, match="symbolic link"):
        CellTable(tmp_path / "cells.jsonl").cells()


def test_the_body_digest_ignores_the_name_and_lineage_but_not_the_body():
    genome = {"id": "000006", "parent_id": "000005", "mutation": "grow_limb", "head_radius": 0.1, "groups": []}
    renamed = {**genome, "id": "s1-0000-m0", "parent_id": None, "mutation": None}
    assert body_digest(genome) == body_digest(renamed)
    assert body_digest(genome) != body_digest({**genome, "head_radius": 0.11})


def test_bootstrap_intervals_hold_the_point_figures_and_narrow_with_agreement():
    rng = np.random.default_rng(1)
    truth = rng.random(16) * 100
    seeds = [truth + rng.normal(0, 5, 16), truth + rng.normal(0, 5, 16)]
    close, far = truth + rng.normal(0, 5, 16), truth + rng.normal(0, 40, 16)
    near = bootstrap(seeds, resamples=400, candidate=close)
    noisy = bootstrap(seeds, resamples=400, candidate=far)
    low, high = near["seed_spearman_ci"]
    assert low <= seed_agreement(seeds)["seed_spearman"] <= high <= 1.0
    assert near["tournament_agreement_ci"][0] > noisy["tournament_agreement_ci"][0]
    # DERL's noise minus the candidate's, paired per draw: clearly positive only for the noisy candidate
    assert noisy["tournament_gap_ci"][0] > 0 > near["tournament_gap_ci"][0]
    assert near["seed_spearman_ci"] == noisy["seed_spearman_ci"]  # the same draws: seeded
    assert set(near) == {"seed_spearman_ci", "seed_kendall_ci", "seed_tournament_agreement_ci", "spearman_ci",
                         "kendall_ci", "tournament_agreement_ci", "fitness_ratio_ci", "tournament_gap_ci"}
    assert set(bootstrap(seeds, resamples=100)) == {"seed_spearman_ci", "seed_kendall_ci",
                                                    "seed_tournament_agreement_ci"}
