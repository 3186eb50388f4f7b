"""tools/bench.py learner, ddp and memory, run for real with tiny budgets (the figures themselves are the lead's)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench(*args: str) -> dict:
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "bench.py"), *args], capture_output=True,
                          text=True, timeout=600, check=False, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_learner_bench_reports_every_grid_point():
    report = _bench("learner", "--env-id", "Pendulum-v1", "--envs", "2,4", "--timesteps", "8",
                    "--minibatch", "8,16", "--iters", "1")
    points = report["points"]
    assert [(p["num_envs"], p["minibatch"]) for p in points] == [(2, 8), (2, 16), (4, 8), (4, 16)]
    assert all(p["steps_per_sec"] > 0 and 0 < p["learner_share"] < 1 for p in points)
    # 4 epochs x (2 x 8 rows / 8-row minibatches)
    assert points[0]["optimizer_steps_per_iter"] == 8 and report["device"] == "cpu"


@pytest.mark.slow
def test_ddp_bench_compares_one_and_two_ranks():
    report = _bench("ddp", "--env-id", "Pendulum-v1", "--envs", "2", "--timesteps", "16", "--iters", "3",
                    "--repeats", "1", "--return-steps", "128", "--seeds", "1", "--return-split",
                    "PPO.LR_SCALING", "sqrt")
    assert report["throughput"]["speedup"] > 0
    returns = report["returns"]
    assert set(returns) == {"env_steps", "split", "ranks_1", "ranks_2"}
    # --return-split: two ranks share the one-rank batch and minibatches
    one, two = returns["ranks_1"], returns["ranks_2"]
    assert (one["num_envs_per_rank"], one["batch_size_per_rank"]) == (2, 512)
    assert (two["num_envs_per_rank"], two["batch_size_per_rank"]) == (1, 256)


@pytest.mark.slow
def test_memory_bench_samples_the_worker_after_each_publication():
    report = _bench("memory", "--morphologies", "4", "--init", "2", "--baseline", "2", "--steps", "4096")
    sizes = report["rss_mb_by_published"]
    assert report["rss_mb_after_baseline"] > 50 and report["growth"] > 0
    assert {"2", "3"} <= set(sizes)  # JSON keys; the worker exits after the last publication
