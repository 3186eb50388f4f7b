"""tools/bench.py fidelity: the agreement statistics on hand-made fitnesses, bad input, and a tiny study."""

import json
import math
import runpy
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from benchmarks.agreement import agreement, kendall, seed_agreement, spearman, tournament_agreement, tournaments

ROOT = Path(__file__).resolve().parents[2]
NUMBERS_REFUSED = ("error: need --seeds >= 2, --scale in (0, 1000], --jobs >= 1, --gpu-jobs >= 1 and "
                   "--resamples >= 100\n")


def test_rank_correlations_of_hand_made_orders():
    a = [1.0, 2.0, 3.0, 4.0, 5.0]
    assert spearman(a, [10, 20, 30, 40, 50]) == pytest.approx(1.0)
    assert spearman(a, [5, 4, 3, 2, 1]) == pytest.approx(-1.0)
    # one swap of neighbours among 5: rho = 1 - 6 * 2 / (5 * 24) = 0.9; tau = (9 - 1) / 10 = 0.8
    assert spearman(a, [1, 3, 2, 4, 5]) == pytest.approx(0.9)
    assert kendall(a, [1, 3, 2, 4, 5]) == pytest.approx(0.8)
    assert math.isnan(spearman(a, [1, 1, 1, 1, 1])) and math.isnan(spearman([1, 2], [2, 1]))
    with pytest.raises(ValueError, match="5 and 4 bodies"):
        spearman(a, [1, 2, 3, 4])


def test_tournaments_are_every_four_body_draw_or_a_sample():
    assert tournaments(5).tolist() == [[0, 1, 2, 3], [0, 1, 2, 4], [0, 1, 3, 4], [0, 2, 3, 4], [1, 2, 3, 4]]
    many = tournaments(40)  # C(40, 4) = 91,390 > 5,000: a sample, four distinct bodies each
    assert many.shape == (5000, 4) and all(len(set(row)) == 4 for row in many.tolist())


def test_tournament_agreement_counts_the_draws_with_the_same_winner():
    reference = [1.0, 2.0, 3.0, 4.0, 5.0]
    # The best body (4) demoted below body 3: of the 5 draws, the 4 that hold body 4 change winner
    # (4 -> 3, or -> the best of the others); the one without it, [0, 1, 2, 3], keeps 3.
    assert tournament_agreement(reference, [1.0, 2.0, 3.0, 4.0, 0.0]) == pytest.approx(1 / 5)
    assert tournament_agreement(reference, reference) == 1.0
    # Smaller is better: the winners are the smallest.
    assert tournament_agreement(reference, [0.0, 2.0, 3.0, 4.0, 5.0], larger_is_better=False) == 1.0
    assert tournament_agreement(reference, [9.0, 2.0, 3.0, 4.0, 5.0], larger_is_better=False) == pytest.approx(1 / 5)


def test_agreement_is_against_each_reference_seed_and_the_ceiling_between_seeds():
    seeds = [[1.0, 2.0, 3.0, 4.0, 5.0], [1.0, 3.0, 2.0, 4.0, 5.0]]
    ceiling = seed_agreement(seeds)
    assert ceiling["seed_spearman"] == pytest.approx(0.9) and ceiling["seed_kendall"] == pytest.approx(0.8)
    candidate = [2.0, 4.0, 6.0, 8.0, 10.0]  # seed 1's order, twice its fitness
    result = agreement(candidate, seeds)
    assert result["spearman"] == pytest.approx((1.0 + 0.9) / 2)
    assert result["fitness_ratio"] == pytest.approx(2.0)
    with pytest.raises(ValueError, match="two seeds"):
        seed_agreement(seeds[:1])


def test_help_exits_0_and_bad_input_is_one_line_exit_2(tmp_path, capsys):
    """The exit codes through a real process once; each bad input in-process (an import of torch fewer)."""
    command = [sys.executable, "tools/bench.py", "fidelity", "--work", str(tmp_path / "w")]
    assert subprocess.run([*command, "--help"], cwd=ROOT, capture_output=True).returncode == 0
    done = subprocess.run([*command, "--seeds", "1"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr == NUMBERS_REFUSED, done.stderr
    bench = runpy.run_path(str(ROOT / "tools" / "bench.py"))
    (tmp_path / "bad.jsonl").write_text("{}\n")
    for args, message in ((["--cpu", "--genomes", str(tmp_path)], "need at least 4 genome JSON files"),
                          (["--cpu", "--cells", str(tmp_path / "bad.jsonl")],
                           f"error: {tmp_path / 'bad.jsonl'}:1: a cell must have exactly the fields"),
                          (["--cpu", "--cells-only", "--cells", str(tmp_path / "none.jsonl")],
                           "error: 24 of 24 trainings have no cell in"),
                          (["--candidate", "nowhere.yml"], "preset file not found: nowhere.yml"),
                          (["--candidate", "configs/evo/ft_gpu.yml:PPO.EPOCHS"], "is not KEY=VALUE"),
                          *([([], "this machine has no GPU: add --cpu")] if not torch.cuda.is_available() else [])):
        assert bench["main"](command[2:] + args) == 2
        captured = capsys.readouterr()
        assert captured.err.count("\n") == 1 and message in captured.err, captured.err


@pytest.mark.parametrize("scale", ["nan", "inf", "-1", "0", "1e300"])
def test_a_scale_that_is_not_a_finite_positive_factor_is_refused_before_anything_is_written(scale, tmp_path, capsys):
    """--scale nan was a 19-line traceback after the sampled bodies were written to --work."""
    bench = runpy.run_path(str(ROOT / "tools" / "bench.py"))
    work = tmp_path / "w"
    assert bench["main"](["fidelity", "--cpu", "--scale", scale, "--work", str(work)]) == 2
    captured = capsys.readouterr()
    assert captured.err == NUMBERS_REFUSED
    assert not work.exists()


def test_a_genome_outside_the_design_space_is_refused_before_any_training(tmp_path, capsys):
    from derl.checked_config import load_config
    from derl.morphology import random_genome

    bodies, work = tmp_path / "bodies", tmp_path / "w"
    bodies.mkdir()
    unimal = load_config().unimal
    for seed in range(4):
        (bodies / f"g{seed}.json").write_text(random_genome(unimal, np.random.default_rng(seed), f"g{seed}").to_json())
    data = json.loads((bodies / "g3.json").read_text())
    data["groups"][0]["length"] = 2.0  # 0.2-0.4 in DERL's space
    (bodies / "g3.json").write_text(json.dumps(data))
    bench = runpy.run_path(str(ROOT / "tools" / "bench.py"))
    assert bench["main"](["fidelity", "--cpu", "--genomes", str(bodies), "--work", str(work)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "g3.json: genome g3: limb group" in err and "LIMB.HEIGHT_RANGE" in err, err
    assert not work.exists()


@pytest.mark.slow
def test_a_tiny_study_reports_every_figure_records_its_cells_and_a_later_study_reuses_them(tmp_path):
    """4 bodies, 2 reference seeds and 1 candidate of a few dozen env steps each, on the CPU; then a
    study of the cells table alone (another --work: nothing trained) gives the same figures."""
    work, out, cells = tmp_path / "work", tmp_path / "study.json", tmp_path / "cells.jsonl"
    command = [sys.executable, "tools/bench.py", "fidelity", "--sample", "4", "--cpu", "--work", str(work),
               "--cells", str(cells), "--resamples", "200",
               "--out", str(out), "--plot", str(tmp_path / "study.png"), "--candidate",
               "configs/evo/ft_gpu.yml:PPO.NUM_ENVS=4,PPO.TIMESTEPS=8,PPO.BATCH_SIZE=16",
               "PPO.NUM_ENVS", "2", "PPO.TIMESTEPS", "16", "PPO.MAX_STATE_ACTION_PAIRS", "64",
               "ENV.EPISODE_LENGTH", "20"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    study = json.loads(out.read_text())
    assert len(study["bodies"]) == 4 and study["criterion"] == "__reward__forward"
    assert set(study["reference"]) >= {"seed_spearman", "seed_kendall", "seed_tournament_agreement", "fitness"}
    (candidate,) = study["candidates"].values()
    assert set(candidate) >= {"spearman", "kendall", "tournament_agreement", "fitness_ratio", "env_steps",
                              "seconds_per_training", "cpu_seconds_per_training", "spearman_ci",
                              "tournament_agreement_ci", "fitness_ratio_ci", "tournament_gap_ci",
                              "tournament_agreement_within_derl", "sources"}
    low, high = study["reference"]["seed_tournament_agreement_ci"]
    assert low <= high and candidate["tournament_agreement_within_derl"] == (candidate["tournament_agreement"] >= low)
    assert candidate["env_steps"] == 64 and np.isfinite(list(candidate["fitness"].values())).all()
    # one source, or more if the checkout's commit changed between trainings
    assert sum(source["cells"] for source in candidate["sources"]) == 4
    assert all(source["device"] == "cpu" and source["gpu"] is None for source in candidate["sources"])
    assert (tmp_path / "study.png").read_bytes()[:4] == b"\x89PNG"
    lines = cells.read_text().splitlines()
    assert len(lines) == 12 and {json.loads(line)["key"]["sim"] for line in lines} == {"mujoco"}
    alone = [*command[:7], str(tmp_path / "elsewhere"), "--cells-only", "--overwrite", *command[8:]]  # study.json again
    again = subprocess.run(alone, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr[-2000:]
    assert json.loads(out.read_text())["reference"] == study["reference"]
    assert not (tmp_path / "elsewhere" / "ft").exists() and cells.read_text().splitlines() == lines


def test_sampled_bodies_take_the_mutation_counts_in_turn(tmp_path):
    """``sample`` with a list mutates body k ``mutations[k % len]`` times; each body is the one a single
    count would give (the same genome chain from the k-th seed)."""
    from derl.checked_config import load_config
    from derl.morphology.files import sample

    cfg = load_config(ROOT / "configs" / "evo" / "ft.yml")
    mixed = sample(cfg.unimal, 4, 3, tmp_path / "mixed", [0, 2])
    assert [p.stem for p in mixed] == ["s3-0000-m0", "s3-0001-m2", "s3-0002-m0", "s3-0003-m2"]
    twice = sample(cfg.unimal, 4, 3, tmp_path / "twice", 2)
    assert mixed[1].read_text() == twice[1].read_text() and mixed[3].read_text() == twice[3].read_text()


def test_a_cells_key_names_what_the_overrides_changed_however_they_were_written():
    """Leaf or dotted names, a value equal to the preset's, the device and the simulator (fields or
    provenance of their own): the same cells."""
    from benchmarks.fidelity import ON_CPU, parse_preset

    gpu = str(ROOT / "configs" / "evo" / "ft_gpu.yml")
    dotted = parse_preset(f"{gpu}:PPO.NUM_ENVS=1024,PPO.BATCH_SIZE=6144", ON_CPU, [])
    leaves = parse_preset(f"{gpu}:NUM_ENVS=1024,BATCH_SIZE=6144,EPOCHS=5", {}, ["TORCH_THREADS", "2"])
    assert dotted.changed == leaves.changed == (("PPO.BATCH_SIZE", "6144"), ("PPO.NUM_ENVS", "1024"))
    assert parse_preset(gpu, {}, ["PPO.MAX_STATE_ACTION_PAIRS", "64", "RNG_SEED", "3"]).changed == ()
    assert parse_preset(gpu, {}, ["PPO.EPOCHS", "3"]).changed == (("PPO.EPOCHS", "3"),)
