"""tools/bench.py sim, run for real with tiny world counts (the figures themselves go in docs/benchmarks.md)."""

import argparse
import json
import subprocess
import sys

import pytest

from benchmarks.cases import ft_model
from benchmarks.sim import FRAME_SKIP, WarpSim, add_arguments, mujoco_rate, run
from derl.envs.warp_check import WARP_MODULES
from tests.conftest import ROOT


def _bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "tools" / "bench.py"), "sim", *args], capture_output=True,
                          text=True, timeout=600, check=False, cwd=ROOT)


def test_the_mujoco_backend_reports_physics_steps_per_second_for_each_world_count(tmp_path):
    out = tmp_path / "sim.json"
    proc = _bench("--backends", "mujoco", "--nworld", "2,3", "--steps", "2", "--threads", "1", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert json.loads(out.read_text()) == report
    assert report["body"]["seed"] == 0 and report["body"]["nu"] > 0 and report["frame_skip"] == FRAME_SKIP
    assert [(r["backend"], r["device"], r["nworld"]) for r in report["rates"]] == [("mujoco", "cpu", 2),
                                                                                   ("mujoco", "cpu", 3)]
    assert all(r["steps_per_sec"] > 0 and r["nonfinite_worlds"] == 0 for r in report["rates"])
    assert "warp_kernel_cache" not in report


def test_the_same_seed_builds_the_same_body_and_a_rate_counts_substeps_of_all_worlds(monkeypatch):
    (model, body), (again, _) = ft_model(3), ft_model(3)
    assert body["nv"] == model.nv == again.nv and body["ngeom"] == again.ngeom
    seconds = iter([0.5, 1.0, 1.0])  # first env step, then two timed ones: 2 x 4 substeps x 5 worlds in 2 s
    monkeypatch.setattr("benchmarks.sim._timed_steps", lambda *args: (next(seconds), next(seconds) + next(seconds)))
    rate = mujoco_rate(model, 5, 2, threads=1)
    assert rate.steps_per_sec == 2 * FRAME_SKIP * 5 / 2.0 and rate.first_step_seconds == 0.5


@pytest.mark.parametrize("args, text", [
    (["--backends", "mjx"], "unknown backend 'mjx'"),
    (["--nworld", "8,lots"], "--nworld expects comma-separated integers"),
    (["--nworld", "0"], "--nworld values must be >= 1"),
])
def test_bad_options_are_one_line_errors(args, text):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    with pytest.raises(SystemExit) as caught:
        run(parser.parse_args(args))
    assert str(caught.value.code).startswith(f"error: {text}") and "\n" not in str(caught.value.code)


def test_the_warp_backend_without_its_packages_says_how_to_install_them(monkeypatch):
    for name in WARP_MODULES:
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(SystemExit, match=r"^error: config key SIM.BACKEND warp needs .*requirements-gpu.txt"):
        WarpSim("cpu")


@pytest.mark.slow
def test_the_warp_backend_steps_on_the_cpu_device_and_reports_its_kernel_cache():
    pytest.importorskip("mujoco_warp")
    proc = _bench("--nworld", "2,4", "--steps", "2", "--threads", "1", "--new-morphologies", "1")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    warp = [r for r in report["rates"] if r["backend"] == "warp"]
    assert [(r["device"], r["nworld"]) for r in warp] == [("cpu", 2), ("cpu", 4)]
    assert all(r["steps_per_sec"] > 0 and r["nonfinite_worlds"] == 0 for r in warp)
    cache = report["warp_kernel_cache"]
    assert cache["dir"].endswith("1.19.0") and cache["modules_after"] >= cache["modules_before"]
    assert cache["modules_after"] > 0  # the step's kernels are on disk now, compiled or found there
    (new,) = report["new_morphology"]
    assert new["seed"] == 1 and new["nworld"] == 2 and new["first_step_seconds"] > 0 and new["modules_compiled"] >= 0
