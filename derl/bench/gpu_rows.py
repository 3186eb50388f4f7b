"""The GPU check's end-to-end rows: trainings, an evolution and benchmarks, each a process started as a
user starts it (``derl.bench.gpu_training``), on the device the check runs on."""

from __future__ import annotations

import sys
from pathlib import Path

from derl.bench.gpu_training import (
    FT_CONFIG,
    FT_GPU_CONFIG,
    GPU_SERVER_CONFIG,
    ROOT,
    check_finished,
    run_at_once,
    tiny_evolution,
    trainings_at_once,
)
from derl.bench.gpu_verdicts import MEASURED, PASS, Check, ddp_not_run, learner_verdict, ppo_verdict, workers_verdict
from derl.bench.learner import ft_xml
from derl.evolution.coordinator import usable_cores
from derl.fileio import read_json

# Env steps of one iteration of each preset: ft_gpu.yml (4096 x 24), ft.yml (32 x 128), gpu_server.yml (64 x 256).
STEPS_PER_ITER = {"ft_gpu": 4096 * 24, "ft": 32 * 128, "gpu_server": 64 * 256}
# On warp's CPU device (the tests) the trainings shrink to seconds: 8 envs x 16 steps.
CPU_PPO = {"PPO.NUM_ENVS": 8, "PPO.TIMESTEPS": 16, "PPO.BATCH_SIZE": 64}


def _training(preset: str, iters: int, device: str, tiny: bool) -> dict:
    """The overrides of a training of ``iters`` iterations of ``preset`` on ``device`` (``tiny``: ``CPU_PPO``'s)."""
    if tiny:
        return {**CPU_PPO, "DEVICE": device, "PPO.MAX_STATE_ACTION_PAIRS": iters * 8 * 16}
    return {"DEVICE": device, "PPO.MAX_STATE_ACTION_PAIRS": iters * STEPS_PER_ITER[preset]}


class EndToEnd:
    """The end-to-end rows (``derl.bench.gpu_training``): trainings and an evolution in ``folder``."""

    def __init__(self, device: str, sizes: dict, folder: Path):
        self.device, self.sizes, self.folder = device, sizes, folder
        self.tiny = device == "cpu"  # warp's CPU device: the tests
        self.xml = ft_xml(folder)
        self.per_gpu: dict[int, dict] = {}  # trainers sharing the GPU -> their rates

    def _at_once(self, configs: list[Path], overrides: dict, count: int, label: str) -> dict:
        return trainings_at_once(configs, self.xml, [overrides] * count, self.sizes["row_seconds"],
                                 self.folder / label)

    def _warp_trainers(self, count: int) -> dict:
        if count not in self.per_gpu:
            overrides = _training("ft_gpu", self.sizes["train_iters"], self.device, self.tiny)
            self.per_gpu[count] = self._at_once([FT_GPU_CONFIG], overrides, count, f"warp-{count}")
        return self.per_gpu[count]

    def ppo_vs_mujoco(self) -> Check:
        cores = usable_cores()
        # One MuJoCo C trainer per core, as evo_single_proc.py runs them; more iterations: each is short.
        overrides = _training("ft", 4 * self.sizes["train_iters"], "cpu", self.tiny)
        mujoco = self._at_once([FT_CONFIG], overrides, cores, "mujoco")
        return ppo_verdict(self._warp_trainers(1), mujoco, cores)

    def workers_per_gpu(self) -> Check:
        return workers_verdict({count: self._warp_trainers(count) for count in self.sizes["workers"]})

    def learner_modes(self) -> Check:
        from derl.ppo.device import assign_device, visible_gpu_count

        overrides = _training("gpu_server", self.sizes["train_iters"], self.device, self.tiny)
        amp = {mode: self._at_once([FT_CONFIG, GPU_SERVER_CONFIG], {**overrides, "PPO.AMP": mode == "on"}, 1,
                                   f"amp-{mode}") for mode in ("off", "on")}
        gpus = visible_gpu_count() if self.device.startswith("cuda") else 0
        devices = [assign_device("cuda" if gpus else "cpu", worker, gpus) for worker in range(4)]
        return learner_verdict(amp, devices)

    def learner_ddp(self) -> Check:
        from derl.ppo.device import visible_gpu_count

        gpus = visible_gpu_count() if self.device.startswith("cuda") else 0
        not_run = ddp_not_run(self.device, gpus)
        if not_run is not None:
            return not_run
        out = self.folder / "ddp.json"
        command = [sys.executable, str(ROOT / "tools" / "bench.py"), "ddp", "--device", "cuda", "--ranks", "2",
                   "--iters", str(self.sizes["train_iters"]), "--repeats", "1", "--out", str(out)]
        finished = run_at_once([command], self.sizes["row_seconds"], self.folder / "ddp")
        check_finished(finished, self.sizes["row_seconds"], "tools/bench.py ddp")
        return Check("learner_ddp", MEASURED, "tools/bench.py ddp --ranks 2: 2 GPUs against 1", read_json(out))

    def ft_gpu_evolution(self) -> Check:
        overrides = {**CPU_PPO, "PPO.MAX_STATE_ACTION_PAIRS": 256} if self.tiny else {}
        counts = tiny_evolution(self.device, overrides, 2 * self.sizes["row_seconds"], self.folder)
        return Check("ft_gpu_evolution", PASS, f"{counts['published']}/{counts['total']} published", counts)
