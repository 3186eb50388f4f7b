"""One thread budget (derl/threads.py): every entry point leaves torch and every BLAS and OpenMP pool
at ``TORCH_THREADS``, whatever thread counts the libraries started with.

Each case runs in its own process (pools are per process) that starts its libraries at 4 threads,
as they would start on a 4-core machine, and reads the pools with threadpoolctl afterwards.
"""

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT

QUADRUPED = ROOT / "tests" / "assets" / "envs" / "quadruped.xml"
# What the libraries start with on a 4-core machine when nothing limits them.
FOUR_CORES = {"OMP_NUM_THREADS": "4", "MKL_NUM_THREADS": "4", "OPENBLAS_NUM_THREADS": "4"}
# Runs a tool's main(argv) without its `run` wrapper (which exits), then prints the thread count of
# every pool loaded by then and torch's (if the tool loaded torch) as the last line.
AFTER_MAIN = """
import json, os, runpy, sys, threadpoolctl
sys.path.insert(0, os.path.dirname(sys.argv[1]))  # as python does for the script it runs (bench.py: benchmarks)
tool = runpy.run_path(sys.argv[1])
code = tool["main"](sys.argv[2:])
pools = {info["filepath"]: info["num_threads"] for info in threadpoolctl.threadpool_info()}
torch = sys.modules.get("torch")
print(json.dumps({"code": code, "pools": pools, "torch": torch and torch.get_num_threads()}))
"""


def _threads_after(script: str, *args: str) -> dict:
    done = subprocess.run([sys.executable, "-c", script, *args], cwd=ROOT, env={**os.environ, **FOUR_CORES},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_limit_threads_sets_torch_and_every_loaded_pool():
    script = """
import json, sys, threadpoolctl
import numpy
from derl.threads import limit_threads
limit_threads(2)
without_torch = "torch" in sys.modules
import torch
limit_threads(3)
pools = {info["filepath"]: info["num_threads"] for info in threadpoolctl.threadpool_info()}
print(json.dumps({"imported_torch": without_torch, "pools": pools, "torch": torch.get_num_threads()}))
"""
    found = _threads_after(script)
    assert found["imported_torch"] is False  # a coordinator never loads torch through it
    assert len(found["pools"]) >= 2 and set(found["pools"].values()) == {3}, found  # numpy's and torch's
    assert found["torch"] == 3


@pytest.mark.parametrize("tool, args", [
    ("train_ppo.py", ["--cfg", "configs/evo/ft.yml", "--xml", str(QUADRUPED), "--quiet", "PPO.NUM_ENVS", "2",
                      "PPO.TIMESTEPS", "16", "PPO.BATCH_SIZE", "16", "PPO.MAX_STATE_ACTION_PAIRS", "32"]),
    ("bench.py", ["env", "--envs", "ft", "--morphologies", "1", "--steps", "2", "--num-envs", "2", "--resets", "1"]),
])
def test_entry_points_leave_every_pool_at_the_budget(tmp_path, tool, args):
    if tool == "train_ppo.py":
        args = [*args, "--out", str(tmp_path / "out")]
    found = _threads_after(AFTER_MAIN, str(ROOT / "tools" / tool), *args)
    assert found["code"] == 0
    assert found["pools"] and set(found["pools"].values()) == {1}, found["pools"]  # TORCH_THREADS 1 (default)
    assert found["torch"] in (None, 1)
