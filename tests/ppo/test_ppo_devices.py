"""Learner devices: round-robin over visible GPUs, GPU memory limits, CUDA-only paths skip without a GPU."""

import os
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from derl.checked_config import load_config
from derl.evolution import node_size
from derl.evolution.folder.run_dir import RunDir
from derl.evolution.folder.worker_store import WorkerStatus
from derl.evolution.node_size import (
    DEFAULT_WORKER_GPU_BYTES,
    default_worker_gpu_bytes,
    mps_note,
    mps_running,
    worker_count,
    worker_devices,
    worker_memory_estimate,
)
from derl.evolution.process import CUDA_CONTEXT_BYTES, peak_gpu_bytes
from derl.paths import evo_preset
from derl.ppo.device import (
    DeviceError,
    assign_device,
    learner_device,
    max_workers_on_gpus,
    parse_free_memory,
    resolve_device,
)

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
MIB = 2**20

SMI = """0, GPU-aaaa1111, 1000
1, GPU-bbbb2222, 2000
2, GPU-cccc3333, 3000
"""


def test_workers_go_round_robin_over_the_visible_gpus():
    assert [assign_device("cuda", w, 3) for w in range(7)] == [
        "cuda:0", "cuda:1", "cuda:2", "cuda:0", "cuda:1", "cuda:2", "cuda:0"]
    assert [assign_device("auto", w, 2) for w in range(3)] == ["cuda:0", "cuda:1", "cuda:0"]
    assert assign_device("auto", 5, 0) == "cpu"
    assert assign_device("cpu", 5, 4) == "cpu"
    assert assign_device("cuda:1", 5, 4) == "cuda:1"  # an explicit device is kept
    with pytest.raises(ValueError, match="no CUDA device is visible"):
        assign_device("cuda", 0, 0)
    with pytest.raises(ValueError, match="DEVICE must be"):
        assign_device("gpu", 0, 1)


def test_data_parallel_ranks_never_share_a_gpu(monkeypatch):
    monkeypatch.setattr("derl.ppo.device.visible_gpu_count", lambda: 2)
    monkeypatch.setattr("derl.ppo.device.resolve_device", torch.device)  # no GPU here to resolve
    assert [learner_device("cuda", r, 2) for r in range(2)] == [torch.device("cuda:0"), torch.device("cuda:1")]
    assert learner_device("auto", 3, 1) == torch.device("cuda:1")  # one rank alone: round-robin is harmless
    with pytest.raises(DeviceError, match="local rank 2 but 2 GPU"):
        learner_device("cuda", 2, 3)
    with pytest.raises(ValueError, match="use DEVICE cuda"):
        learner_device("cuda:1", 0, 2)
    monkeypatch.setattr("derl.ppo.device.visible_gpu_count", lambda: 0)
    assert learner_device("auto", 5, 8) == torch.device("cpu")  # CPU ranks (gloo)


def test_free_memory_follows_cuda_visible_devices_order():
    assert parse_free_memory(SMI, None) == [1000 * MIB, 2000 * MIB, 3000 * MIB]
    assert parse_free_memory(SMI, "2,0") == [3000 * MIB, 1000 * MIB]  # CUDA renumbers: cuda:0 is GPU 2
    assert parse_free_memory(SMI, "GPU-bbbb") == [2000 * MIB]  # UUID prefixes, as CUDA accepts
    assert parse_free_memory(SMI, "1,7,2") == [2000 * MIB]  # CUDA stops at the first invalid entry
    assert parse_free_memory(SMI, "") == []


def test_workers_fit_the_gpus_free_memory_round_robin():
    # GPU g holds k // n + (g < k % n) of k workers. Free memory for 1, 2 and 3 workers:
    # k=4 puts 2 on GPU 0 (fits 2), 1 on GPU 1, 1 on GPU 2; k=5 puts 2 on GPU 1 (fits 3): fine;
    # k=6 puts 2 on each: fine; k=7 puts 3 on GPU 0, which holds 2: so 6.
    assert max_workers_on_gpus([2 * MIB, 3 * MIB, 3 * MIB], MIB) == 6
    assert max_workers_on_gpus([0, 8 * MIB], MIB) == 0  # worker 0 would not fit GPU 0
    assert max_workers_on_gpus([5 * MIB], MIB) == 5
    assert max_workers_on_gpus([], MIB) == 0


def test_cpu_workers_get_no_device_override_and_import_no_torch(tmp_path):
    """A CPU node loads its config (this_node: DEVICE checked) and sizes its workers without torch, which
    takes seconds and memory a coordinator does not need."""
    cfg = load_config(None, {"OUT_DIR": str(tmp_path)})
    assert worker_devices(cfg.EVO, cfg.trainer, RunDir(tmp_path), 3, node=0, sim_backend="mujoco") == (["cpu"] * 3, 3)
    code = ("import sys; from derl.checked_config import load_config; import derl.evolution.coordinator; "
            "from derl.evolution.node_size import worker_devices; cfg = load_config(this_node=True); "
            "worker_devices(cfg.EVO, cfg.trainer, None, 2, node=0, sim_backend='mujoco'); "
            "print('torch' in sys.modules)")
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root)
    assert out.stdout.strip() == "False"


def test_a_warp_worker_reserves_gpu_memory_for_its_worlds_until_measured():
    assert default_worker_gpu_bytes("mujoco", 4096) == DEFAULT_WORKER_GPU_BYTES  # its envs stay on the CPU
    # +1 GiB of worlds, and the modules and captured graphs of a morphology
    assert default_worker_gpu_bytes("warp", 4096) == DEFAULT_WORKER_GPU_BYTES + 4096 * 256 * 2**10 + 192 * 2**20
    assert default_worker_gpu_bytes("warp", 32) < default_worker_gpu_bytes("warp", 64)


def test_the_gpu_peak_adds_warps_memory_pool_to_torchs(monkeypatch):
    queried = []
    cuda = SimpleNamespace(is_initialized=lambda: True, current_device=lambda: 1, max_memory_reserved=lambda: 300)
    warp = SimpleNamespace(is_mempool_enabled=lambda device: queried.append(device) or True,
                           get_mempool_used_mem_high=lambda device: 5000)
    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(cuda=cuda))
    monkeypatch.delitem(sys.modules, "warp", raising=False)
    assert peak_gpu_bytes() == 300 + CUDA_CONTEXT_BYTES  # a torch-only worker (SIM.BACKEND mujoco)
    monkeypatch.setitem(sys.modules, "warp", warp)
    assert peak_gpu_bytes() == 300 + 5000 + CUDA_CONTEXT_BYTES and queried == ["cuda:1"]  # the learner's device
    warp.is_mempool_enabled = lambda device: False  # allocations outside a pool are not counted
    assert peak_gpu_bytes() == 300 + CUDA_CONTEXT_BYTES
    cuda.is_initialized = lambda: False  # warp on its CPU device, learner on the CPU
    assert peak_gpu_bytes() == 0


def test_ft_warp_workers_one_per_core_round_robin_over_the_gpus_bounded_by_their_memory(tmp_path, monkeypatch):
    """ft_warp.yml (warp, 32 worlds, DEVICE cuda) on an 8-GPU node with 128 cores: the cores bound the count,
    not 141 GB of free memory per GPU (109 workers of 1,224 MiB each); 2 GiB free per GPU holds one each."""
    cfg = load_config(evo_preset("ft_warp"), {"OUT_DIR": str(tmp_path)})
    assert default_worker_gpu_bytes(cfg.SIM.BACKEND, cfg.PPO.NUM_ENVS) == 1224 * MIB  # 1 GiB + 32 x 256 KiB + 192 MiB
    monkeypatch.setattr(node_size, "usable_cores", lambda: 128)
    monkeypatch.setattr(node_size.psutil, "virtual_memory", lambda: SimpleNamespace(available=2**40, total=2**40))
    monkeypatch.setattr("derl.ppo.device.visible_gpu_count", lambda: 8)
    run = RunDir(tmp_path)
    num = worker_count(cfg.EVO, run, node=0, vecenv_threads=cfg.VECENV.THREADS)
    monkeypatch.setattr("derl.ppo.device.gpu_free_memory", lambda: [141 * 10**9] * 8)
    devices, fitted = worker_devices(cfg.EVO, cfg.trainer, run, num, node=0, sim_backend=cfg.SIM.BACKEND)
    assert num == fitted == 128 and devices == [f"cuda:{w % 8}" for w in range(128)]
    monkeypatch.setattr("derl.ppo.device.gpu_free_memory", lambda: [2 * 2**30] * 8)
    devices, fitted = worker_devices(cfg.EVO, cfg.trainer, run, num, node=0, sim_backend=cfg.SIM.BACKEND)
    assert fitted == 8 and devices == [f"cuda:{g}" for g in range(8)]


def test_mps_is_on_when_its_pipe_folder_holds_the_control_pipe(tmp_path, monkeypatch):
    env = {"CUDA_MPS_PIPE_DIRECTORY": str(tmp_path)}
    assert not mps_running(env)  # no daemon
    (tmp_path / "control").write_text("")
    assert not mps_running(env)  # a plain file is no daemon's pipe
    (tmp_path / "control").unlink()
    os.mkfifo(tmp_path / "control")  # older drivers: a named pipe
    assert mps_running(env)
    (tmp_path / "control").unlink()
    with socket.socket(socket.AF_UNIX) as listening:  # newer drivers: a UNIX socket
        listening.bind(str(tmp_path / "control"))
        assert mps_running(env)
        monkeypatch.setattr(node_size, "MPS_PIPE_DIRECTORY", str(tmp_path))
        assert mps_running({}) and mps_running({"CUDA_MPS_PIPE_DIRECTORY": ""})  # the default folder
        assert mps_note(["cuda:0", "cuda:1"], env) == "; MPS: on"
    (tmp_path / "control").unlink()  # the daemon stopped (its socket's file stays until it is removed)
    assert mps_note(["cpu", "cpu"], env) == ""  # no worker on a GPU: nothing said
    off = mps_note(["cuda:0"], env)
    assert off.startswith("; MPS: off") and "nvidia-cuda-mps-control -d" in off


def test_gpu_memory_estimate_uses_measured_gpu_peaks(tmp_path):
    run = RunDir(tmp_path)
    run.create()
    assert worker_memory_estimate(run, 0, "peak_gpu_bytes", DEFAULT_WORKER_GPU_BYTES)[0] == DEFAULT_WORKER_GPU_BYTES
    run.workers.write_state(WorkerStatus(node=0, worker=0, peak_rss_bytes=10, peak_gpu_bytes=1000))
    assert worker_memory_estimate(run, 0, "peak_gpu_bytes", DEFAULT_WORKER_GPU_BYTES)[0] == 1200


@needs_cuda
def test_cuda_workers_get_round_robin_devices(tmp_path):
    cfg = load_config(None, {"OUT_DIR": str(tmp_path), "DEVICE": "cuda", "EVO.NUM_PROCESSES": 3})
    devices, num = worker_devices(cfg.EVO, cfg.trainer, RunDir(tmp_path), 3, node=0, sim_backend=cfg.SIM.BACKEND)
    count = torch.cuda.device_count()
    assert num == 3 and devices == [f"cuda:{w % count}" for w in range(3)]
    assert resolve_device(devices[-1]).type == "cuda"


def test_gpu_server_preset_layers_over_a_task_preset():
    root = Path(__file__).resolve().parents[2]
    cfg = load_config([root / "configs" / "evo" / "ft.yml", root / "configs" / "gpu_server.yml"])
    assert cfg.ENV.MODULES == ("Agent", "Terrain")  # from ft.yml
    assert (cfg.PPO.NUM_ENVS, cfg.PPO.LR_SCALING, cfg.PPO.AMP, cfg.DEVICE) == (64, "sqrt", True, "cuda")
    assert cfg.PPO.MAX_ITERS == 20_000_000 // (64 * 256)


def test_amp_is_ignored_on_the_cpu_with_a_note(caplog):
    from derl.ppo.trainer import PPO
    from derl.training.envs import GymEnvFactory

    cfg = load_config(None, {"PPO.AMP": True, "PPO.NUM_ENVS": 1, "PPO.TIMESTEPS": 4})
    ppo = PPO(cfg.trainer, GymEnvFactory("Pendulum-v1"), seed=0)
    ppo.pool.close()
    assert not ppo.learner.amp and "PPO.AMP is ignored on cpu" in caplog.text


@needs_cuda
def test_cuda_training_with_and_without_amp_learns_the_same_shapes(tmp_path):
    from derl.ppo import train
    from derl.training.envs import GymEnvFactory

    for amp in (False, True):
        cfg = load_config(None, {"DEVICE": "cuda", "PPO.AMP": amp, "PPO.NUM_ENVS": 2, "PPO.TIMESTEPS": 16,
                                 "PPO.BATCH_SIZE": 16, "PPO.MAX_STATE_ACTION_PAIRS": 64})
        result = train(cfg.trainer, GymEnvFactory("Pendulum-v1"), seed=0, checkpoint_path=tmp_path / f"{amp}.pt")
        assert result.completed and result.device == "cuda:0" and result.iterations == 2


@needs_cuda
def test_gpu_free_memory_is_read_for_every_visible_gpu():
    from derl.ppo.device import gpu_free_memory, visible_gpu_count

    free = gpu_free_memory()
    assert free is not None and len(free) == visible_gpu_count() and all(f > 0 for f in free)


@needs_cuda
def test_two_worker_evolution_with_device_cuda_records_devices_and_gpu_peaks(tmp_path):
    import json

    from tests.evolution.test_evolution_run import tiny_search

    out = tmp_path / "run"
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "evo_single_proc.py", *tiny_search(out, 4, 1024, "DEVICE", "cuda")],
                          cwd=root, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    records = [json.loads(p.read_text()) for p in (out / "metadata").glob("*.json")]
    count = torch.cuda.device_count()
    assert len(records) == 4
    assert all(r["device"] == f"cuda:{r['worker'] % count}" for r in records)
    states = [json.loads(p.read_text()) for p in (out / "workers").glob("*.json")]
    assert states and all(s["peak_gpu_bytes"] > 0 for s in states)
