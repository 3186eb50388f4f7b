"""``tools/gpu_check.py``: its verdicts, table and report from measurements (no GPU needed), the tool
without a GPU (one line, exit 1), and its checks on warp's CPU device (slow)."""

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks import gpu_rows
from benchmarks.gpu_check import FULL, QUICK
from benchmarks.gpu_training import (
    RowError,
    check_finished,
    evolution_verdict,
    loop_rate,
    read_iterations,
    run_at_once,
    training_rates,
)
from benchmarks.gpu_utilisation import SMI_QUERY, Sampling, parse_samples, sampler_args
from benchmarks.gpu_verdicts import (
    FAIL,
    MEASURED,
    NOT_RUN,
    PASS,
    Check,
    capture_verdict,
    compile_share_verdict,
    compile_verdict,
    ddp_not_run,
    derl_shape_verdict,
    fidelity_verdict,
    guarded,
    learner_verdict,
    listed_gpus,
    memory_verdict,
    morphologies_per_hour,
    no_gpu,
    overflow_verdict,
    ppo_verdict,
    report,
    startup_seconds,
    sync_verdict,
    table,
    task_on_device_verdict,
    throughput_verdict,
    utilisation_summary,
    utilisation_verdict,
    workers_verdict,
)
from derl.cli import ArgumentParser
from derl.envs.warp_overflow import Buffers
from derl.evolution.node_size import WARP_MODEL_GPU_BYTES, WARP_WORLD_GPU_BYTES
from derl.paths import evo_preset
from tests.envs.test_envs_tasks import ROOT

# Run before the tool: warp made unimportable (as on a machine without requirements-gpu.txt).
NO_WARP = "import sys\nsys.modules['warp'] = sys.modules['mujoco_warp'] = None\n"
# Run before the tool: torch says there is a GPU (the fake's only effect: the check never gets that far).
A_GPU = "import torch\ntorch.cuda.is_available = lambda: True\n"


def _tool(*args: str, env: dict | None = None, prelude: str = "") -> subprocess.CompletedProcess:
    """``tools/gpu_check.py ARGS``; with ``prelude``, that code runs first in the tool's process."""
    command = [sys.executable, "tools/gpu_check.py", *args]
    if prelude:
        command = [sys.executable, "-c", f"{prelude}import runpy, sys\nsys.argv = {command[1:]!r}\n"
                                         "sys.path.insert(0, 'tools')\n"  # as Python runs a script: its folder first
                                         "runpy.run_path('tools/gpu_check.py', run_name='__main__')"]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)


def _nvidia_smi(folder: Path, output: str, code: int) -> dict:
    """The environment with a fake ``nvidia-smi`` first on PATH (printing ``output``, exiting ``code``) and
    no CUDA device visible to torch."""
    folder.mkdir()
    (folder / "nvidia-smi").write_text(f"#!/bin/sh\necho '{output}'\nexit {code}\n")
    (folder / "nvidia-smi").chmod(0o755)
    return {**os.environ, "PATH": f"{folder}{os.pathsep}{os.environ['PATH']}", "CUDA_VISIBLE_DEVICES": ""}


# What nvidia-smi prints on a machine without the NVIDIA driver (exit 9), and with one GPU.
NO_DRIVER = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.", 9)
ONE_GPU = ("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-9c6a1b0e-0d3c-4b1f-8f35-2f4d7a6c1e21)", 0)


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


def test_the_host_syncs_row_watches_ft_and_vt_on_a_bank_and_fails_on_either(monkeypatch):
    from benchmarks import gpu_check

    watched = {}
    errors = {"ft": None, "vt": None}

    def syncs_of(name, overrides, device, steps, nworld):
        watched[name] = overrides
        return errors[name]

    monkeypatch.setattr(gpu_check, "_syncs_of", syncs_of)
    assert gpu_check._host_syncs("cuda", 200, 64).verdict == PASS
    assert watched == {"ft": {}, "vt": {}}
    errors["vt"] = "RuntimeError: called a synchronizing CUDA operation"
    failed = gpu_check._host_syncs("cuda", 200, 64)
    assert failed.verdict == FAIL and failed.note == f"vt: {errors['vt']}"
    assert failed.measured == {"env_steps": 200, "tasks": ["ft", "vt"]}


def test_the_table_has_a_row_per_check_and_the_report_fails_on_any_failure():
    checks = [Check("startup", PASS), Check("capture_first_step", FAIL, "Warp error: unknown stream"),
              Check("memory", NOT_RUN, "CUDA only")]
    lines = table(checks).splitlines()
    assert len(lines) == 2 + len(checks) and lines[3].split()[:2] == ["capture_first_step", FAIL]
    assert report(checks, "cuda:0 (H100)", {})["passed"] is False
    assert report([checks[0], checks[2]], "cuda:0", {})["passed"] is True
    json.dumps(report(checks, "cuda:0", {"cuda_driver": (12, 8)}))


def test_no_gpu_is_said_before_a_missing_warp_and_a_gpu_torch_cannot_see_is_told_apart():
    assert no_gpu(False, None, False).startswith("error: no NVIDIA GPU on this machine")
    assert no_gpu(False, 0, True) == no_gpu(False, None, False)
    assert "nvidia-smi lists 2 GPU(s) but torch.cuda sees none" in no_gpu(False, 2, False)
    assert no_gpu(True, None, False).startswith("error: warp and mujoco_warp are not installed")
    assert no_gpu(True, None, True) is None
    assert listed_gpus(ONE_GPU[0] + "\n" + ONE_GPU[0].replace("GPU 0", "GPU 1") + "\n") == 2
    assert listed_gpus(NO_DRIVER[0]) == 0


def _one_error_line(done: subprocess.CompletedProcess, start: str) -> None:
    assert done.returncode == 1 and done.stdout == "", done.stdout + done.stderr
    assert done.stderr.startswith(f"error: {start}") and done.stderr.count("\n") == 1, done.stderr


def test_without_a_gpu_the_tool_says_so_in_one_error_line_and_exits_1_warp_installed_or_not(tmp_path):
    env = _nvidia_smi(tmp_path / "no-driver", *NO_DRIVER)
    out = tmp_path / "never-written.json"
    _one_error_line(_tool("--out", str(out), env=env), "no NVIDIA GPU on this machine")  # warp as installed here
    _one_error_line(_tool("--out", str(out), env=env, prelude=NO_WARP), "no NVIDIA GPU on this machine")
    seen_by_smi = _tool("--out", str(out), env=_nvidia_smi(tmp_path / "one-gpu", *ONE_GPU), prelude=NO_WARP)
    _one_error_line(seen_by_smi, "nvidia-smi lists 1 GPU(s) but torch.cuda sees none")
    assert not out.exists() and _tool("--help").returncode == 0


def test_with_a_gpu_but_without_warp_the_tool_says_what_to_install_in_one_error_line(tmp_path):
    done = _tool("--out", str(tmp_path / "never.json"), prelude=NO_WARP + A_GPU)
    _one_error_line(done, "warp and mujoco_warp are not installed: run `make setup-gpu`")


def test_bad_rows_or_folders_are_refused_in_one_line_with_exit_2(tmp_path):
    for args in (("--skip", "ppo_vs_mujoco,foo"), ("--keep", str(tmp_path)), ("--steps", "0")):
        done = _tool("--device", "cpu", *args, "--out", str(tmp_path / "never.json"))
        assert done.returncode == 2 and done.stderr.startswith("error: ") and len(done.stderr.splitlines()) == 1, \
            done.stderr
        assert not (tmp_path / "never.json").exists()


def _iterations(steps_per_iter: int, seconds: list[float]) -> list[dict]:
    return [{"env_steps": steps_per_iter * (i + 1), "collect_seconds": s * 0.75, "update_seconds": s * 0.25}
            for i, s in enumerate(seconds)]


def test_training_rates_leave_out_the_first_iteration_and_add_up_trainers_that_ran_at_once():
    first_compiles = _iterations(1000, [20.0, 1.0, 1.0])  # the first iteration loads the kernels
    assert loop_rate(first_compiles) == 1000.0 and loop_rate(_iterations(1000, [4.0])) == 250.0
    rates = training_rates([first_compiles, _iterations(1000, [30.0, 2.0, 2.0])], wall_seconds=60.0)
    assert rates["loop_steps_per_sec"] == 1500.0 and rates["loop_steps_per_sec_each"] == [1000.0, 500.0]
    assert rates["wall_steps_per_sec"] == 100.0 and rates["env_steps"] == 6000 and rates["processes"] == 2
    assert rates["update_seconds_per_iteration"] == 0.375


def test_an_unreadable_or_partial_training_or_evolution_record_fails_its_row_naming_the_file(tmp_path):
    path = tmp_path / "metrics.jsonl"
    for text in ("", "not json\n", '{"env_steps": 10}\n'):
        path.write_text(text)
        with pytest.raises(RowError, match="metrics.jsonl"):
            read_iterations(path)
    with pytest.raises(RowError, match="metrics.jsonl"):
        read_iterations(tmp_path / "missing" / "metrics.jsonl")
    summary = tmp_path / "summary.json"
    assert evolution_verdict({"published": 4, "failed": 0, "total": 4, "best": 1.0}, summary) == \
        {"published": 4, "failed": 0, "total": 4}
    with pytest.raises(RowError, match="3/4 published, 1 failed"):
        evolution_verdict({"published": 3, "failed": 1, "total": 4}, summary)
    with pytest.raises(RowError, match="summary.json: no integer"):
        evolution_verdict({"published": "4"}, summary)


def _script(path, text: str) -> list[str]:
    path.write_text(text)
    return [sys.executable, str(path)]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in state


def test_a_row_kills_processes_past_its_time_limit_and_names_a_failed_one(tmp_path):
    sleeper = _script(tmp_path / "sleeper.py", "import time\ntime.sleep(600)\n")
    failing = _script(tmp_path / "failing.py", "import sys\nprint('loading')\nsys.exit('error: no such genome')\n")
    finished = run_at_once([failing, sleeper], timeout=3, log_dir=tmp_path)
    assert finished.returncodes[0] == 1 and finished.returncodes[1] is None  # the sleeper killed, not waited for
    with pytest.raises(RowError, match="process 0 exited 1: error: no such genome"):
        check_finished(finished, 3, "process")
    finished.returncodes[0] = 0
    with pytest.raises(RowError, match="process 1 still running after 3 s: killed"):
        check_finished(finished, 3, "process")
    row = guarded("ft_gpu_evolution", lambda: check_finished(finished, 3, "evo_single_proc.py"))
    assert row.verdict == FAIL and row.note == "evo_single_proc.py 1 still running after 3 s: killed"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's parent-death signal")
def test_a_check_killed_at_its_time_limit_takes_its_trainings_with_it(tmp_path):
    """``timeout -s ABRT`` stops the check, not the trainings in their own process groups: they die with it."""
    pid_file = tmp_path / "pid"
    sleeper = _script(tmp_path / "sleeper.py", f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))"
                                               "\ntime.sleep(600)\n")
    check = subprocess.Popen([sys.executable, "-c", "import sys; from pathlib import Path; "
                              "from benchmarks.gpu_training import run_at_once; "
                              f"run_at_once([{sleeper!r}], 60, Path({str(tmp_path)!r}))"], cwd=ROOT / "tools")
    deadline = time.monotonic() + 120  # generous for a busy machine: a training that outlives its check never dies
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.1)
    training = int(pid_file.read_text())
    assert _alive(training)
    check.send_signal(signal.SIGABRT)
    check.wait(timeout=120)
    while _alive(training) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(training)


def test_the_end_to_end_rows_report_what_was_measured():
    costs = [{"seed": 7, "first_step_seconds": 16.6, "modules_compiled": 5},
             {"seed": 8, "first_step_seconds": 18.0, "modules_compiled": 6}]
    row = compile_verdict(costs)
    assert row.verdict == MEASURED and "16.6-18.0 s" in row.note and "cache" not in row.note
    assert "kernel cache" in compile_verdict([{**costs[0], "modules_compiled": 0}]).note
    warp = {"loop_steps_per_sec": 60000.0, "wall_steps_per_sec": 20000.0}
    mujoco = {"loop_steps_per_sec": 15000.0, "wall_steps_per_sec": 10000.0}
    ppo = ppo_verdict(warp, mujoco, 16)
    assert ppo.measured["loop_speedup_warp_over_mujoco_node"] == 4.0 and "16 MuJoCo C trainers" in ppo.note
    assert ppo.measured["wall_speedup_warp_over_mujoco_node"] == 2.0
    workers = workers_verdict({1: warp, 2: {**warp, "loop_steps_per_sec": 90000.0}})
    assert workers.note.endswith("1: 60,000, 2: 90,000") and set(workers.measured) == {"1", "2"}
    amp = {"off": {"update_seconds_per_iteration": 0.5}, "on": {"update_seconds_per_iteration": 0.3}}
    learner = learner_verdict(amp, ["cuda:0", "cuda:1", "cuda:0", "cuda:1"])
    assert "AMP off 0.500, on 0.300" in learner.note and learner.measured["round_robin"][1] == "cuda:1"
    assert ddp_not_run("cuda", 1).verdict == NOT_RUN and "needs >= 2" in ddp_not_run("cuda", 1).note
    assert ddp_not_run("cpu", 0).verdict == NOT_RUN and ddp_not_run("cuda", 2) is None


def test_a_task_refused_on_the_device_is_not_run_and_one_that_runs_must_stay_finite():
    refused = task_on_device_verdict("vt", "SIM.BACKEND warp ... use SIM.BACKEND mujoco", 0, 0, 0.0)
    assert refused.name == "vt_on_device" and refused.verdict == NOT_RUN and "use SIM.BACKEND mujoco" in refused.note
    assert task_on_device_verdict("mvt", None, 50, 0, 1e5).verdict == PASS
    assert task_on_device_verdict("mvt", None, 50, 3, 1e5).verdict == FAIL


@pytest.mark.slow
def test_the_checks_run_on_warps_cpu_device(tmp_path):
    """Every row on warp's CPU device, tiny (about 5 minutes on 2 cores; preset_fidelity's 12 trainings of
    64 env steps, whose Spearman is noise, pass or fail)."""
    pytest.importorskip("mujoco_warp", reason="the warp backend is an optional install (requirements-gpu.txt)")
    out = tmp_path / "gpu_check.json"
    done = _tool("--device", "cpu", "--nworld", "4", "--steps", "5", "--quick", "--out", str(out))
    checks = {check["name"]: check for check in json.loads(out.read_text())["checks"]}
    failed = [name for name, check in checks.items() if check["verdict"] == FAIL]
    assert failed in ([], ["preset_fidelity"]) and done.returncode == (1 if failed else 0), done.stdout + done.stderr
    assert checks["preset_fidelity"]["measured"]["candidates"]["ft_gpu DEVICE=cpu PPO.NUM_ENVS=4 PPO.TIMESTEPS=8 "
                                                               "PPO.BATCH_SIZE=16"]["env_steps"] == 64
    assert checks["gpu_utilisation"]["verdict"] == NOT_RUN and checks["compile_share"]["verdict"] == MEASURED
    assert len(checks["compile_share"]["measured"]["trainings"]) == 4
    assert set(checks["morphologies_per_hour"]["measured"]["per_hour"]) == {"1", "2", "4"}
    assert checks["capture_first_step"]["verdict"] == PASS and checks["overflow"]["verdict"] == PASS
    assert checks["ft_physics_rate"]["measured"]["4"] > 0 and checks["host_syncs"]["verdict"] == NOT_RUN
    assert checks["new_morphology_compile"]["measured"]["bodies"][0]["first_step_seconds"] > 0
    assert all(checks[f"{name}_on_device"]["verdict"] in (PASS, NOT_RUN) for name in ("vt", "mvt"))
    assert checks["ppo_vs_mujoco"]["measured"]["mujoco"]["loop_steps_per_sec"] > 0
    assert set(checks["workers_per_gpu"]["measured"]) == {"1", "2", "4"}
    assert checks["learner_modes"]["verdict"] == MEASURED and checks["learner_ddp"]["verdict"] == NOT_RUN
    assert checks["ft_gpu_evolution"]["verdict"] == PASS, checks["ft_gpu_evolution"]["note"]
    assert set(checks["derl_shape_per_gpu"]["measured"]["by_trainers"]) == {"1", "2"}


def _make_dry(tmp_path, *args: str, env: dict | None = None) -> str:
    """``make -n`` of a copy of the Makefile and requirements in ``tmp_path`` (nothing is downloaded)."""
    for name in ("Makefile", "requirements.txt", "requirements-gpu.txt", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    # --no-print-directory: under `make test` this make is a sub-make, which would print its directory
    done = subprocess.run(["make", "-n", "--no-print-directory", *args], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.skipif(shutil.which("make") is None, reason="no make here")
def test_make_gpu_check_installs_warp_only_where_nvidia_smi_lists_a_gpu(tmp_path):
    without = _make_dry(tmp_path, "gpu-check", env=_nvidia_smi(tmp_path / "no-driver", *NO_DRIVER))
    assert "-r requirements.txt" in without and "tools/gpu_check.py" in without  # the base venv, then the tool
    assert "requirements-gpu.txt" not in without
    with_gpu = _make_dry(tmp_path, "gpu-check", env=_nvidia_smi(tmp_path / "one-gpu", *ONE_GPU))
    assert "-r requirements-gpu.txt" in with_gpu.split("tools/gpu_check.py")[0]  # installed before the tool runs


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


def _study(candidate_spearman: float) -> dict:
    """bench fidelity's JSON, the fields the row reads: 6 bodies, the reference's seeds agree at 0.8."""
    return {"bodies": [f"b{k}" for k in range(6)], "scale": 1.0,
            "reference": {"config": "ft", "seed_spearman": 0.8, "seed_kendall": 0.6, "fitness": {}},
            "candidates": {"ft_gpu": {"config": "configs/evo/ft_gpu.yml", "spearman": candidate_spearman,
                                      "kendall": 0.5, "tournament_agreement": 0.7, "fitness_ratio": 1.3,
                                      "env_steps": 20_000_000, "seconds_per_training": 95.0, "fitness": {}}}}


def test_preset_fidelity_passes_within_0_1_of_the_references_own_seeds():
    assert fidelity_verdict(_study(0.7)).verdict == PASS  # 0.8 - 0.1, on the line
    row = fidelity_verdict(_study(0.69))
    assert row.verdict == FAIL and row.note.startswith("Spearman below 0.70: ft_gpu")
    assert "6 bodies at 1x budget" in row.note and "20,000,000 env steps, 95 s/training" in row.note
    assert row.measured["margin"] == 0.1 and row.measured["candidates"]["ft_gpu"]["spearman"] == 0.69
    assert fidelity_verdict(_study(math.nan)).verdict == FAIL  # a constant fitness ranks nothing


def test_the_fidelity_row_calls_bench_fidelity_as_its_parser_reads_it(tmp_path):
    from benchmarks import fidelity

    parser = ArgumentParser(prog="tools/bench.py fidelity")
    parser.add_argument("--out", type=Path)
    fidelity.add_arguments(parser)
    for device, candidate in (("cuda", str(evo_preset("ft_gpu"))), ("cuda:1", f"{evo_preset('ft_gpu')}:DEVICE=cuda:1")):
        command = gpu_rows.fidelity_command(device, FULL["fidelity"], 15, tmp_path)
        assert command[1:3] == [str(ROOT / "tools" / "bench.py"), "fidelity"]
        args = parser.parse_args(command[3:])
        assert (args.sample, args.scale, args.jobs, args.seeds) == (6, 1.0, 15, 2)
        assert args.candidate == [candidate] and args.reference == evo_preset("ft") and args.overrides == []
        assert args.out == tmp_path / "fidelity.json" and args.plot == tmp_path / "fidelity.png"
        assert args.cells == fidelity.CELLS  # a GPU's cells join the committed table
    tiny = parser.parse_args(gpu_rows.fidelity_command("cpu", QUICK["fidelity"], 1, tmp_path)[3:])
    assert tiny.scale == 1.0 and ":DEVICE=cpu," in tiny.candidate[0] and "PPO.MAX_STATE_ACTION_PAIRS" in tiny.overrides
    assert tiny.cells == tmp_path / "cells.jsonl"  # never a tiny training in the committed table


# Two trainings of a search, 300k env steps each: 20 s each beyond their loop rate (40 - 300k / 15k, 50 - 300k / 10k).
TRAININGS = [{"id": "a", "wall_seconds": 40.0, "env_steps": 300_000, "loop_steps_per_sec": 15_000.0},
             {"id": "b", "wall_seconds": 50.0, "env_steps": 300_000, "loop_steps_per_sec": 10_000.0}]


def test_compile_share_is_the_start_up_beyond_the_loop_rate_over_the_wall_time():
    assert [startup_seconds(training) for training in TRAININGS] == [20.0, 20.0]
    assert startup_seconds({**TRAININGS[0], "wall_seconds": 10.0}) == 0.0  # faster than its loop: none
    row = compile_share_verdict(TRAININGS, 11, 20_000_000)
    assert row.verdict == MEASURED and row.measured["modules_compiled"] == 11
    assert row.measured["share_of_training_wall"] == round(40 / 90, 4)
    # 20M env steps at the median 12,500/s: 1,600 s, and the median 20 s start-up: 20 / 1,620
    assert row.measured["share_at_budget"] == round(20 / 1620, 4) and row.measured["loop_steps_per_sec_median"] == 12500
    assert "2 morphologies added 11 kernel modules" in row.note and "44% of their trainings' wall" in row.note
    assert [training["startup_seconds"] for training in row.measured["trainings"]] == [20.0, 20.0]


def test_morphologies_per_hour_per_gpu_from_the_loop_rates_and_the_start_up():
    # 20M env steps at 500k/s: 40 s, + 20 s start-up = 60 s a morphology: 60 an hour
    assert morphologies_per_hour([500_000.0], 20.0, 20_000_000) == 60.0
    assert morphologies_per_hour([500_000.0, 0.0], 20.0, 20_000_000) == 60.0  # a trainer that measured nothing
    rates = {1: {"loop_steps_per_sec_each": [500_000.0]}, 2: {"loop_steps_per_sec_each": [400_000.0, 400_000.0]}}
    row = throughput_verdict(rates, TRAININGS, 20_000_000)
    # 2 trainers at 400k/s each: 50 + 20 = 70 s a morphology each, 2 x 3600 / 70 an hour
    assert row.measured["per_hour"] == {"1": 60.0, "2": round(7200 / 70, 2)} and row.measured["best_trainers"] == 2
    assert row.measured["startup_seconds"] == 20.0 and row.note.endswith("morphologies/hour/GPU (best: 2)")


def test_gpu_utilisation_is_read_from_nvidia_smi_lines_and_summarised():
    text = "37, 1200\n[N/A], 1200\n\n 90 , 1300\nWARNING: infoROM is corrupted at gpu 0000:01:00.0\n"
    assert parse_samples(text) == [(37.0, 1200.0), (90.0, 1300.0)]
    samples = [(float(util), 1000.0 + util) for util in range(0, 101, 10)]  # 0, 10, ..., 100 %
    assert utilisation_summary(samples) == {"samples": 11, "mean": 50.0, "p10": 10.0, "p90": 90.0,
                                            "memory_mib_max": 1100.0}
    row = utilisation_verdict({1: samples, 2: samples[5:]})
    assert row.verdict == MEASURED and row.note.endswith("1: 50 (10-90), 2: 75 (55-95)")
    assert set(row.measured) == {"1", "2"} and row.measured["2"]["samples"] == 6
    empty = utilisation_verdict({1: samples, 4: []})
    assert empty.verdict == FAIL and "while 4 trainer(s)" in empty.note
    assert utilisation_verdict({}).verdict == FAIL


def test_the_sampler_is_nvml_where_pynvml_imports_else_nvidia_smi_else_none():
    assert sampler_args("GPU-1", True, "/usr/bin/nvidia-smi") == ["--nvml", "GPU-1"]
    assert sampler_args("GPU-1", False, "/usr/bin/nvidia-smi") == ["/usr/bin/nvidia-smi", *SMI_QUERY, "-i", "GPU-1"]
    assert sampler_args("GPU-1", False, None) is None


def _sampled(args: list[str], path: Path) -> list[tuple[float, float]]:
    """What ``Sampling`` collected until it had 2 samples (120 s at most); its process is gone afterwards."""
    with Sampling(args, path) as sampling:
        deadline = time.monotonic() + 120
        while len(parse_samples(path.read_text())) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
    assert sampling.proc.poll() is not None
    return sampling.samples


def test_sampling_runs_a_fake_nvidia_smi_or_a_fake_pynvml_in_the_background(tmp_path, monkeypatch):
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\necho \"$@\" > {tmp_path / 'args'}\nwhile true; do echo '42, 2048'; echo '[N/A], 2048'; "
                   "sleep 0.2; done\n")
    smi.chmod(0o755)
    assert _sampled(sampler_args("GPU-7", False, str(smi)), tmp_path / "smi.csv")[:2] == [(42.0, 2048.0)] * 2
    assert (tmp_path / "args").read_text().split() == [*SMI_QUERY, "-i", "GPU-7"]
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "pynvml.py").write_text(
        "from types import SimpleNamespace\nimport time\ntime.sleep = lambda seconds: None\n"
        "def nvmlInit(): pass\n"
        "def nvmlDeviceGetHandleByUUID(uuid): assert uuid == b'GPU-7'; return 0\n"
        "def nvmlDeviceGetUtilizationRates(handle): return SimpleNamespace(gpu=55)\n"
        "def nvmlDeviceGetMemoryInfo(handle): return SimpleNamespace(used=3 * 2**30)\n")
    monkeypatch.setenv("PYTHONPATH", f"{fake}{os.pathsep}{os.environ['PYTHONPATH']}")
    assert _sampled(sampler_args("GPU-7", True, None), tmp_path / "nvml.csv")[:2] == [(55.0, 3072.0)] * 2


def _fake_rows(tmp_path, monkeypatch, trainings_at_once) -> gpu_rows.EndToEnd:
    monkeypatch.setattr(gpu_rows, "trainings_at_once", trainings_at_once)
    monkeypatch.setattr(gpu_rows, "ft_xml", lambda folder: folder / "ft.xml")
    return gpu_rows.EndToEnd("cuda", {**QUICK, "row_seconds": 1.0}, tmp_path, None)


def test_rows_that_share_the_trainers_run_them_once_and_fail_alike(tmp_path, monkeypatch):
    started = []

    def trainings_at_once(configs, xml, overrides, timeout, folder):
        started.append(len(overrides))
        if len(overrides) == 4:
            raise RowError("training 3 exited 1: CUDA out of memory")
        return {"loop_steps_per_sec": 1000.0 * len(overrides), "loop_steps_per_sec_each": [1000.0] * len(overrides)}

    rows = _fake_rows(tmp_path, monkeypatch, trainings_at_once)
    failed = [guarded(name, getattr(rows, name)) for name in ("workers_per_gpu", "morphologies_per_hour")]
    assert [row.verdict for row in failed] == [FAIL, FAIL] and all("CUDA out of memory" in row.note for row in failed)
    assert started == [1, 2, 4]  # not again for the second row
    assert rows.gpu_utilisation().note == "neither pynvml nor nvidia-smi on this machine"  # no GPU UUID: no sampler


def test_rows_that_share_the_evolution_run_it_once_and_read_its_trainings(tmp_path, monkeypatch):
    from benchmarks import sim
    from benchmarks.report import build_synthetic_run

    build_synthetic_run(tmp_path / "evolution", morphologies=3, iterations=5, genomes=2)
    # Each synthetic training: 5 iterations of 4,096 env steps, 0.5 s each (8,192/s), 3,600 s of wall time.
    assert gpu_rows.search_trainings(tmp_path / "evolution") == [
        {"id": f"00000{k}", "wall_seconds": 3600.0, "env_steps": 20480, "loop_steps_per_sec": 8192.0} for k in range(3)]
    searches, modules = [], iter([100, 112])

    class Cache:
        def __init__(self, device):
            pass

        def cached_modules(self):
            return next(modules)

    monkeypatch.setattr(sim, "WarpSim", Cache)
    monkeypatch.setattr(gpu_rows, "tiny_evolution", lambda device, overrides, timeout, folder: searches.append(
        folder) or {"published": 3, "failed": 0, "total": 3, "wall_seconds": 60.0})
    rows = _fake_rows(tmp_path, monkeypatch, lambda configs, xml, overrides, timeout, folder: {
        "loop_steps_per_sec": 1000.0, "loop_steps_per_sec_each": [1000.0] * len(overrides)})
    assert rows.ft_gpu_evolution().measured == {"published": 3, "failed": 0, "total": 3, "wall_seconds": 60.0}
    share = rows.compile_share()
    assert share.measured["modules_compiled"] == 12 and share.measured["startup_seconds_median"] == 3597.5
    assert rows.morphologies_per_hour().measured["startup_seconds"] == 3597.5 and searches == [tmp_path]


def _rates(total: float, count: int) -> dict:
    return {"loop_steps_per_sec": total, "loop_steps_per_sec_each": [total / count] * count}


def test_derl_shape_per_gpu_names_the_best_count_and_where_warp_beats_mujoco_c():
    warp = {1: _rates(5000.0, 1), 2: _rates(12000.0, 2), 16: _rates(40000.0, 16)}
    mujoco = {1: _rates(8000.0, 1), 2: _rates(10000.0, 2), 16: _rates(64000.0, 16)}
    samples = {1: [(10.0, 900.0), (20.0, 900.0)], 2: [(30.0, 1800.0)], 16: []}
    row = derl_shape_verdict(warp, mujoco, samples, mps=False)
    assert row.verdict == MEASURED and row.name == "derl_shape_per_gpu"
    assert row.measured["best_trainers"] == 16 and row.measured["warp_ahead_at"] == [2]  # 12k / 10k
    two = row.measured["by_trainers"]["2"]
    assert (two["warp_steps_per_sec_each"], two["mujoco_steps_per_sec_each"], two["warp_over_mujoco"]) == \
        (6000.0, 5000.0, 1.2)
    assert row.measured["by_trainers"]["1"]["gpu_utilisation"]["mean"] == 15.0
    assert row.measured["by_trainers"]["16"]["gpu_utilisation"] == "not sampled"  # the sampler recorded nothing
    assert "K=2 12,000 vs 10,000 (1.20x, GPU 30%)" in row.note and "K=16 40,000 vs 64,000 (0.62x)" in row.note
    assert row.note.endswith("best K on the GPU: 16; warp ahead at K=2; MPS off")
    cpu = derl_shape_verdict({1: _rates(100.0, 1)}, {1: _rates(200.0, 1)}, None, None)
    assert cpu.note.endswith("best K on warp's CPU device: 1; MuJoCo C ahead at every K")  # no MPS there
    assert cpu.note.startswith("K ft_warp.yml trainers on warp's CPU device against") and "one GPU" in row.note
    assert cpu.measured["by_trainers"]["1"]["gpu_utilisation"] == "not sampled"


def test_derl_shape_counts_are_deduplicated_and_capped_by_the_cores_and_the_size():
    assert gpu_rows.trainer_counts(FULL["derl_shape"]["counts"], 16, 32) == (1, 2, 4, 8, 16)
    assert gpu_rows.trainer_counts((1, 2, 4, 8), 8, 32) == (1, 2, 4, 8)  # the cores are 8: once
    assert gpu_rows.trainer_counts((1, 2, 4, 8), 128, 32) == (1, 2, 4, 8, 32)  # 128 cores, at most 32
    assert gpu_rows.trainer_counts((1, 2, 4, 8), 2, 2) == (1, 2)  # warp's CPU device on 2 cores
    assert gpu_rows.trainer_counts((1, 2, 4, 8), 1, 32) == (1,)


def test_derl_shape_per_gpu_runs_ft_warp_and_ft_trainers_on_warps_cpu_device(tmp_path):
    """The row for real, tiny: 1 and 2 ft_warp.yml trainers on warp's CPU device, 1 and 2 ft.yml on MuJoCo C."""
    pytest.importorskip("mujoco_warp", reason="the warp backend is an optional install (requirements-gpu.txt)")
    row = gpu_rows.EndToEnd("cpu", QUICK, tmp_path, None).derl_shape_per_gpu()
    assert row.verdict == MEASURED, row.note
    by_trainers = row.measured["by_trainers"]
    assert set(by_trainers) == {"1", "2"} and row.measured["mps"] is None
    assert all(by_trainers[k]["warp_steps_per_sec"] > 0 and by_trainers[k]["mujoco_steps_per_sec"] > 0 for k in "12")
    assert by_trainers["2"]["gpu_utilisation"] == "not sampled"
    from derl.checked_config import load_run_config

    for preset, backend in (("ft_warp", "warp"), ("ft", "mujoco")):
        training = tmp_path / f"{preset}-2" / "training-1"
        assert load_run_config(training / "config.yaml").SIM.BACKEND == backend
        assert json.loads((training / "metrics.json").read_text())["env_steps"] == 4 * 2 * 8 * 16  # 4 x train_iters
