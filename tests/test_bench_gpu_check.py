"""``tools/gpu_check.py``: its verdicts, table and report from measurements (no GPU needed), the tool
without a GPU (one line, exit 1), and its checks on warp's CPU device (slow)."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from derl.bench.gpu_check import (
    FAIL,
    NOT_RUN,
    PASS,
    Check,
    capture_verdict,
    memory_verdict,
    no_gpu,
    overflow_verdict,
    report,
    sync_verdict,
    table,
)
from derl.envs.warp_overflow import Buffers
from derl.evolution.coordinator import WARP_MODEL_GPU_BYTES, WARP_WORLD_GPU_BYTES
from tests.test_envs_tasks import ROOT


def _tool(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "tools/gpu_check.py", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, env=env)


def test_each_verdict_follows_from_its_measurements():
    assert capture_verdict(0.5, 0.02, 0.02, True).verdict == PASS
    assert capture_verdict(0.5, 0.025, 0.02, True).verdict == FAIL  # the warm-up's step was kept
    assert capture_verdict(0.5, 0.02, 0.02, False).verdict == FAIL
    assert sync_verdict(200, None).verdict == PASS
    assert sync_verdict(200, "RuntimeError: called a synchronizing CUDA operation").verdict == FAIL
    counts = dict.fromkeys(("NARROWPHASE", "ITERATIONS", "NEFC"), 0)
    assert overflow_verdict({**counts, "ITERATIONS": 9}, 1000, 4096, Buffers(64, 256)).verdict == PASS  # counted only
    ran_out = overflow_verdict({**counts, "NARROWPHASE": 4096}, 1000, 4096, Buffers(64, 256))
    assert ran_out.verdict == FAIL and "SIM.NCONMAX 128" in ran_out.note
    estimate = 4096 * WARP_WORLD_GPU_BYTES + WARP_MODEL_GPU_BYTES
    assert memory_verdict(estimate, 4096).verdict == PASS
    assert memory_verdict(estimate + 1, 4096).verdict == FAIL


def test_the_table_has_a_row_per_check_and_the_report_fails_on_any_failure():
    checks = [Check("startup", PASS), Check("capture_first_step", FAIL, "Warp error: unknown stream"),
              Check("memory", NOT_RUN, "CUDA only")]
    lines = table(checks).splitlines()
    assert len(lines) == 2 + len(checks) and lines[3].split()[:2] == ["capture_first_step", FAIL]
    assert report(checks, "cuda:0 (H100)", {})["passed"] is False
    assert report([checks[0], checks[2]], "cuda:0", {})["passed"] is True
    json.dumps(report(checks, "cuda:0", {"cuda_driver": (12, 8)}))


def test_without_a_gpu_the_tool_says_so_in_one_line_and_exits_1():
    assert no_gpu(False, True).startswith("gpu_check: no GPU") and no_gpu(True, False).startswith("gpu_check: warp")
    assert no_gpu(True, True) is None
    done = _tool("--out", "/nonexistent/never-written.json", env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert done.returncode == 1 and done.stdout == "" and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert _tool("--help").returncode == 0


@pytest.mark.slow
def test_the_checks_run_on_warps_cpu_device(tmp_path):
    pytest.importorskip("mujoco_warp", reason="the warp backend is an optional install (requirements-gpu.txt)")
    out = tmp_path / "gpu_check.json"
    done = _tool("--device", "cpu", "--nworld", "4", "--steps", "5", "--out", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    checks = {check["name"]: check for check in json.loads(out.read_text())["checks"]}
    assert checks["capture_first_step"]["verdict"] == PASS and checks["overflow"]["verdict"] == PASS
    assert checks["ft_physics_rate"]["measured"]["4"] > 0 and checks["host_syncs"]["verdict"] == NOT_RUN


def _make_dry(tmp_path, *args: str) -> str:
    """``make -n`` of a copy of the Makefile and requirements in ``tmp_path`` (nothing is downloaded)."""
    for name in ("Makefile", "requirements.txt", "requirements-gpu.txt", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    # --no-print-directory: under `make test` this make is a sub-make, which would print its directory
    done = subprocess.run(["make", "-n", "--no-print-directory", *args], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.skipif(shutil.which("make") is None, reason="no make here")
def test_wheelhouse_downloads_every_wheel_for_the_named_python_and_platform_and_setup_gpu_installs_from_it(tmp_path):
    download = _make_dry(tmp_path, "wheelhouse", "PYTHON_VERSION=3.11", "PLATFORM=manylinux2014_x86_64")
    words = download.replace("\\\n", " ").split()
    assert words[:4] == ["python3", "-m", "pip", "download"] and "--only-binary=:all:" in words
    assert words[words.index("--python-version") + 1] == "3.11"
    assert words[words.index("--platform") + 1] == "manylinux2014_x86_64"
    assert "requirements.txt" in words and "requirements-gpu.txt" in words and "pip" in words
    assert "--platform manylinux_2_28_x86_64" in _make_dry(tmp_path, "wheelhouse").replace("\\\n", " ")
    online = [line for line in _make_dry(tmp_path, "setup-gpu").splitlines() if "pip install" in line]
    assert online and not any("--no-index" in line for line in online)
    (tmp_path / "wheelhouse").mkdir()
    (tmp_path / "wheelhouse" / "warp_lang-1.19.0-py3-none-manylinux_2_28_x86_64.whl").touch()
    offline = [line for line in _make_dry(tmp_path, "setup-gpu").splitlines() if "pip install" in line]
    assert [line for line in offline if "-r requirements" in line or "--upgrade pip" in line] == \
        [line for line in offline if "--no-index --find-links wheelhouse" in line]
    assert any("requirements-gpu.txt" in line for line in offline)
