"""``configs/evo/ft_warp.yml``, DERL's learner with the physics on MuJoCo Warp: on MuJoCo C it learns as
``ft.yml`` to the last digit, and on warp's CPU device it trains and publishes in a tiny search."""

import json
import os
import subprocess
import sys

import pytest

from benchmarks.gpu_rows import CPU_PPO
from benchmarks.gpu_training import tiny_evolution
from derl.paths import evo_preset
from tests.conftest import ROOT, sampled_xml
from tests.evolution.test_evolution_reproducible import PORTABLE_KERNELS

# What an iteration record holds besides its learning: clock readings.
CLOCK = ("steps_per_sec", "collect_seconds", "update_seconds")


def _iterations(preset: str, xml, out) -> subprocess.Popen:
    """``tools/train_ppo.py`` of ``preset`` on MuJoCo C, 2 iterations of DERL's 32 x 128 env steps, episodes
    of 64 steps (so that each iteration ends some), with the kernels every x86-64 CPU has."""
    command = [sys.executable, "tools/train_ppo.py", "--cfg", str(evo_preset(preset)), "--xml", str(xml),
               "--out", str(out), "--quiet", "SIM.BACKEND", "mujoco", "DEVICE", "cpu",
               "PPO.MAX_STATE_ACTION_PAIRS", str(2 * 32 * 128), "ENV.EPISODE_LENGTH", "64"]
    return subprocess.Popen(command, cwd=ROOT, env={**os.environ, **PORTABLE_KERNELS}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def test_ft_warp_learns_as_ft_on_mujoco_c(tmp_path):
    """Its host learning is ft.yml's: the same iteration records, returns and losses to the last digit."""
    xml = sampled_xml(tmp_path, 5)
    trainings = {preset: _iterations(preset, xml, tmp_path / preset) for preset in ("ft", "ft_warp")}
    for preset, process in trainings.items():
        output = process.communicate(timeout=300)[0]
        assert process.returncode == 0, f"{preset}: {output[-2000:]}"
    records = {preset: [{key: value for key, value in json.loads(line).items() if key not in CLOCK}
                        for line in (tmp_path / preset / "metrics.jsonl").read_text().splitlines()]
               for preset in trainings}
    assert len(records["ft"]) == 2 and all("return" in record for record in records["ft"])
    assert records["ft_warp"] == records["ft"]


@pytest.mark.slow
def test_ft_warp_trains_and_publishes_a_tiny_search_on_warps_cpu_device(tmp_path):
    """The ft_gpu_evolution row's tiny search (4 morphologies, 2 workers) of ft_warp.yml, DEVICE cpu."""
    pytest.importorskip("mujoco_warp", reason="the warp backend is an optional install (requirements-gpu.txt)")
    counts = tiny_evolution("cpu", {**CPU_PPO, "PPO.MAX_STATE_ACTION_PAIRS": 256}, 600, tmp_path, preset="ft_warp")
    assert counts["published"] == counts["total"] == 4 and counts["failed"] == 0
    records = [json.loads(path.read_text()) for path in (tmp_path / "evolution" / "metadata").glob("*.json")]
    assert len(records) == 4 and all(record["env_steps"] == 256 and record["device"] == "cpu" for record in records)
