"""`tools/bench.py env` runs small and reports the batched env's throughput, the physics alone (batch and
loop) and reset costs."""

import argparse
import json
import subprocess
import sys
from pathlib import Path

import mujoco
import numpy as np
import pytest

from benchmarks import env as bench
from benchmarks.cases import env_configs

ROOT = Path(__file__).resolve().parents[2]


def test_bench_reports_ratio_and_reset_cost_per_env():
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    args = parser.parse_args(["--envs", "ft,vt,escape_bowl", "--morphologies", "1", "--steps", "30",
                              "--num-envs", "4", "--resets", "2"])
    result = bench.run(args)
    assert set(env_configs()) >= {"ft", "vt", "mvt", "patrol", "point_nav", "obstacle", "exploration",
                                        "incline", "push_box_incline", "escape_bowl", "manipulation_ball"}
    for name in ("ft", "vt", "escape_bowl"):
        row = result[name]["per_morphology"][0]
        assert row["env_steps_per_sec"] > 0 and row["batch_physics_steps_per_sec"] > 0
        assert abs(row["ratio"] - row["env_steps_per_sec"] / row["batch_physics_steps_per_sec"]) < 1e-2
        assert abs(row["ratio_to_loop"] - row["env_steps_per_sec"] / row["loop_physics_steps_per_sec"]) < 1e-2
        assert result[name]["median_reset_ms"] > 0 and result[name]["median_compile_ms"] > 0
    json.dumps(result)


def test_bench_sets_the_terrain_bank_and_the_blas_pools_of_a_training(monkeypatch):
    limits = []
    monkeypatch.setattr(bench, "limit_threads", limits.append)
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    args = parser.parse_args(["--envs", "escape_bowl", "--morphologies", "1", "--steps", "5", "--num-envs", "2",
                              "--resets", "1", "--bank-size", "3"])
    result = bench.run(args)
    assert result["bank_size"] == 3 and result["escape_bowl"]["median_reset_ms"] < 1.0  # a pick, not a draw
    assert limits == [1]  # TORCH_THREADS


def test_bench_script_rejects_an_unknown_env():
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "bench.py"), "env", "--envs", "ocean"],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode != 0 and "unknown env 'ocean'" in done.stderr


def test_single_env_bench_pairs_gym_make_with_mj_step_alone():
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    args = parser.parse_args(["--single", "--envs", "ft,vt", "--seeds", "3,1", "--steps", "40"])
    result = bench.run(args)
    assert result["seeds"] == [3, 1] and result["single"] and "num_envs" not in result
    for name in ("ft", "vt"):
        rows = result[name]["per_morphology"]
        assert [row["seed"] for row in rows] == [3, 1]
        for row in rows:
            assert row["episodes"] >= 1
            assert abs(row["ratio"] - row["env_steps_per_sec"] / row["physics_steps_per_sec"]) < 1e-2
            assert row["floor_ratio"] > 0
        assert result[name]["median_ratio"] > 0 and "median_batch_physics_steps_per_sec" not in result[name]
        assert result[name]["median_floor_ratio"] > 0
    json.dumps(result)


def test_bench_rejects_no_timed_resets():
    """--resets 0 divided by zero after the whole run; now a one-line error before it."""
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    with pytest.raises(SystemExit, match="--resets must be >= 1"):
        bench.run(parser.parse_args(["--envs", "ft", "--resets", "0"]))


def test_bench_rejects_seeds_that_are_not_integers():
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "bench.py"), "env", "--seeds", "5,x"],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 2 and "--seeds takes comma-separated integers" in done.stderr


def test_single_env_bench_measures_given_mjcf_files():
    fixture = ROOT / "tests" / "assets" / "envs" / "quadruped.xml"
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    result = bench.run(parser.parse_args(["--single", "--envs", "ft", "--xml", str(fixture), "--steps", "30"]))
    assert result["xml"] == [str(fixture)] and "seeds" not in result
    assert result["ft"]["per_morphology"][0]["xml"] == "quadruped.xml"
    missing = parser.parse_args(["--single", "--envs", "ft", "--xml", str(fixture.with_name("none.xml"))])
    with pytest.raises(SystemExit, match="unimal MJCF .*none.xml not found"):
        bench.run(missing)


def test_floor_env_plays_the_physics_of_the_episode_it_is_given():
    """The floor of a Python env (``floor_ratio``) plays the same trajectory as mj_step alone: a reset
    loads the start state given, a step is FRAME_SKIP substeps of the action."""
    model = mujoco.MjModel.from_xml_path(str(ROOT / "tests" / "assets" / "envs" / "quadruped.xml"))
    data = mujoco.MjData(model)
    data.qpos[2] += 0.1
    data.qvel[0] = 0.3
    state = np.empty(mujoco.mj_stateSize(model, bench._SIGNATURE))
    mujoco.mj_getState(model, data, state, bench._SIGNATURE)
    actions = np.random.default_rng(0).uniform(-1, 1, (5, model.nu))
    env = bench._FloorEnv(model)
    obs, _ = env.reset(options={"state": state})
    assert np.array_equal(obs, np.concatenate([data.qpos, data.qvel]))
    for action in actions:
        data.ctrl[:] = action
        mujoco.mj_step(model, data, bench.FRAME_SKIP)
        obs, reward, terminated, truncated, info = env.step(action)
        assert np.array_equal(obs, np.concatenate([data.qpos, data.qvel]))
        assert (reward, terminated, truncated, info) == (0.0, False, False, {})
    assert bench._floor_seconds(model, [(state, 0, 5)], actions) > 0
