"""A tiny real search: derl.morphology genomes, derl.envs, derl.ppo training, two worker processes."""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch

from derl.evolution.population import parse_id
from tests.conftest import DEFAULT_CFG

ROOT = Path(__file__).resolve().parents[2]


def tiny_search(out: Path, search: int, env_steps: int, *extra: str) -> list[str]:
    """Overrides of a real search: 2 workers, 4 initial morphologies, 4 envs x 128 steps."""
    return [
        "--cfg", str(DEFAULT_CFG), "OUT_DIR", str(out), "EVO.NUM_PROCESSES", "2",
        "EVO.INIT_POPULATION_SIZE", "4",
        "EVO.SEARCH_SPACE_SIZE", str(search), "EVO.AGING_WINDOW_SIZE", "4",
        "EVO.SELECTION_CRITERIA", "[__reward__forward]", "EVO.SELECTION_CRITERIA_OBJ", "[-1]",
        "PPO.NUM_ENVS", "4", "PPO.TIMESTEPS", "128", "PPO.MAX_STATE_ACTION_PAIRS", str(env_steps), *extra,
    ]


def test_tiny_real_search_publishes_every_morphology_with_its_files(tmp_path):
    out = tmp_path / "run"
    overrides = tiny_search(out, 8, 3072)
    done = subprocess.run([sys.executable, "evo_single_proc.py", *overrides], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    records = [json.loads(p.read_text()) for p in (out / "metadata").glob("*.json")]
    failed = list((out / "error_metadata").glob("*.json"))
    assert len(records) == 8, failed
    assert sorted(r["slot"] for r in records) == list(range(8))
    for record in records:
        assert record["env_steps"] == 3072 and record["steps_per_sec"] > 0
        assert "__reward__forward" in record and "x_pos" in record
        genome = json.loads((out / record["files"]["genome"]).read_text())
        assert genome["id"] == record["id"] and genome["parent_id"] == record["parent_id"]
        assert (out / record["files"]["xml"]).read_text().startswith("<mujoco")
        torch.load(out / record["files"]["checkpoint"], weights_only=True)
    children = [r for r in records if parse_id(r["id"])[0] >= 4]
    assert all(r["parent_id"] is not None and r["mutation"] for r in children)
    assert len({r["seed"] for r in records}) == 8


@pytest.mark.slow
def test_real_search_survives_sigkilled_workers_and_a_killed_coordinator(tmp_path):
    out = tmp_path / "run"
    command = [sys.executable, "evo_single_proc.py", *tiny_search(out, 10, 10240, "CHECKPOINT_PERIOD", "4")]
    coordinator = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rng = random.Random(1)
    kills = 0
    while kills < 3 and coordinator.poll() is None:
        time.sleep(rng.uniform(1.0, 4.0))
        states = [json.loads(p.read_text()) for p in (out / "workers").glob("*.json")]
        pids = [state["pid"] for state in states if psutil.pid_exists(state["pid"])]
        if pids:
            os.kill(rng.choice(pids), signal.SIGKILL)
            kills += 1
    coordinator.kill()
    coordinator.wait()
    assert subprocess.run(command, cwd=ROOT, capture_output=True, timeout=600).returncode == 0
    records = [json.loads(p.read_text()) for p in (out / "metadata").glob("*.json")]
    assert sorted(r["slot"] for r in records) == list(range(10))
    assert all(r["env_steps"] == 10240 for r in records)
