"""The GPU check's end-to-end rows: trainings, an evolution and benchmarks, each a process started as a
user starts it (``benchmarks.gpu_training``), on the device the check runs on.

Rows that share a measurement run it once (``EndToEnd._once``): the ``ft_gpu.yml`` trainers sharing the
GPU (``ppo_vs_mujoco``, ``workers_per_gpu``, ``gpu_utilisation``, ``morphologies_per_hour``), sampled
for utilisation while they run, the ``ft.yml`` trainers on MuJoCo C (``ppo_vs_mujoco``,
``derl_shape_per_gpu``), and the tiny evolution (``ft_gpu_evolution``, ``compile_share``,
``morphologies_per_hour``), with the kernel modules it added to warp's cache.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

from benchmarks.cases import ft_xml
from benchmarks.gpu_training import (
    check_finished,
    loop_rate,
    read_iterations,
    run_at_once,
    tiny_evolution,
    trainings_at_once,
)
from benchmarks.gpu_utilisation import Sampling, sampler_here
from benchmarks.gpu_verdicts import (
    MEASURED,
    NOT_RUN,
    PASS,
    Check,
    compile_share_verdict,
    ddp_not_run,
    derl_shape_verdict,
    fidelity_verdict,
    learner_verdict,
    ppo_verdict,
    throughput_verdict,
    utilisation_verdict,
    workers_verdict,
)
from derl.checked_config import load_config
from derl.evolution.node_size import mps_running, usable_cores
from derl.fileio.reads import read_json
from derl.paths import GPU_SERVER_PRESET, REPO_ROOT, evo_preset

# Env steps of one iteration of each preset: ft_gpu.yml (4096 x 24), ft.yml and ft_warp.yml (32 x 128),
# gpu_server.yml (64 x 256).
STEPS_PER_ITER = {"ft_gpu": 4096 * 24, "ft": 32 * 128, "ft_warp": 32 * 128, "gpu_server": 64 * 256}
# Iterations of a row's trainings of each preset, in the size's train_iters: DERL's are short, 4x as many.
ITERS_SCALE = {"ft_gpu": 1, "ft": 4, "ft_warp": 4}
# On warp's CPU device (the tests) the trainings shrink to seconds: 8 envs x 16 steps.
CPU_PPO = {"PPO.NUM_ENVS": 8, "PPO.TIMESTEPS": 16, "PPO.BATCH_SIZE": 64}
# bench fidelity on warp's CPU device: bench fidelity's own tiny study (tests/benchmarks/test_bench_fidelity.py), the
# candidate's overrides and those of every training.
CPU_FIDELITY = ("PPO.NUM_ENVS=4,PPO.TIMESTEPS=8,PPO.BATCH_SIZE=16",
                ["PPO.NUM_ENVS", "2", "PPO.TIMESTEPS", "16", "PPO.MAX_STATE_ACTION_PAIRS", "64", "ENV.EPISODE_LENGTH",
                 "20"])


def _training(preset: str, iters: int, device: str, tiny: bool) -> dict:
    """The overrides of a training of ``iters`` iterations of ``preset`` on ``device`` (``tiny``: ``CPU_PPO``'s)."""
    if tiny:
        return {**CPU_PPO, "DEVICE": device, "PPO.MAX_STATE_ACTION_PAIRS": iters * 8 * 16}
    return {"DEVICE": device, "PPO.MAX_STATE_ACTION_PAIRS": iters * STEPS_PER_ITER[preset]}


def trainer_counts(counts: tuple[int, ...], cores: int, most: int) -> tuple[int, ...]:
    """The trainer counts K of ``derl_shape_per_gpu``: ``counts`` and the node's ``cores``, none above the
    cores (MuJoCo C runs a trainer per core) or ``most``; the cap itself included."""
    cap = min(cores, most)
    return tuple(sorted({count for count in (*counts, cap) if count <= cap}))


def fidelity_command(device: str, size: dict, jobs: int, folder: Path) -> list[str]:
    """``tools/bench.py fidelity`` on ``size["sample"]`` bodies at ``size["scale"]`` of each preset's budget:
    DERL's ``ft.yml`` (two seeds, MuJoCo C on ``jobs`` CPU lanes) and, at the same time, ``ft_gpu.yml`` on
    ``device`` (its own lane); its JSON, plot and trainings in ``folder``. On warp's CPU device (the tests)
    every training is tiny: ``CPU_FIDELITY``'s, at scale 1, and its cells stay in ``folder``; on a GPU they
    join the committed cells table (``benchmarks.cells``), where later studies find them."""
    candidate, common, scale = str(evo_preset("ft_gpu")), [], size["scale"]
    if device == "cpu":
        candidate, common, scale = f"{candidate}:DEVICE=cpu,{CPU_FIDELITY[0]}", CPU_FIDELITY[1], 1.0
        common = ["--cells", str(folder / "cells.jsonl"), *common]
    elif device != "cuda":
        candidate = f"{candidate}:DEVICE={device}"
    return [sys.executable, str(REPO_ROOT / "tools" / "bench.py"), "fidelity", "--sample", str(size["sample"]),
            "--seed", "1", "--mutations", "0,2,4,6", "--reference", str(evo_preset("ft")), "--candidate", candidate,
            "--scale", str(scale), "--jobs", str(jobs), "--work", str(folder / "work"),
            "--out", str(folder / "fidelity.json"), "--plot", str(folder / "fidelity.png"), *common]


def search_trainings(out: Path) -> list[dict]:
    """Each published morphology of the search in ``out``: its training's wall seconds, env steps and loop
    rate (``loop_rate`` of its ``metrics/<id>.jsonl``)."""
    from derl.analysis.run import RunView

    view = RunView(out)
    return [{"id": record.id, "wall_seconds": record.wall_time, "env_steps": record.env_steps,
             "loop_steps_per_sec": round(loop_rate(read_iterations(view.run.metrics_path(record.id))), 1)}
            for record in view.records]


class EndToEnd:
    """The end-to-end rows (``benchmarks.gpu_training``): trainings and an evolution in ``folder``;
    ``gpu_uuid``: the GPU whose utilisation is sampled (None on warp's CPU device)."""

    def __init__(self, device: str, sizes: dict, folder: Path, gpu_uuid: str | None):
        self.device, self.sizes, self.folder = device, sizes, folder
        self.tiny = device == "cpu"  # warp's CPU device: the tests
        self.xml = ft_xml(folder)
        self.sampler = sampler_here(gpu_uuid) if gpu_uuid is not None else None
        self.utilisation: dict[str, dict[int, list[tuple[float, float]]]] = {}  # preset -> K trainers -> samples
        self._done: dict[str, tuple[object, Exception | None]] = {}

    def _once(self, key: str, measure: Callable[[], dict]) -> dict:
        """``measure()``, or the error it raised, once: the rows that read it fail alike if it failed."""
        if key not in self._done:
            try:
                self._done[key] = (measure(), None)
            except Exception as err:  # noqa: BLE001 - raised again to each row that reads it
                self._done[key] = (None, err)
        value, error = self._done[key]
        if error is not None:
            raise error
        return value

    @property
    def budget(self) -> int:
        """``ft_gpu.yml``'s env steps per morphology (20M): what the projections assume."""
        return int(load_config(evo_preset("ft_gpu")).PPO.MAX_STATE_ACTION_PAIRS)

    def _at_once(self, configs: list[Path], overrides: dict, count: int, label: str) -> dict:
        return trainings_at_once(configs, self.xml, [overrides] * count, self.sizes["row_seconds"],
                                 self.folder / label)

    def _trainers(self, preset: str, count: int) -> dict:
        return self._once(f"{preset}-{count}", lambda: self._sampled_trainers(preset, count))

    def _sampled_trainers(self, preset: str, count: int) -> dict:
        """``count`` trainers of ``preset`` at once: ``ft`` on MuJoCo C (one per core), the others on the
        check's device with the GPU sampled meanwhile where a sampler is at hand."""
        device = "cpu" if preset == "ft" else self.device
        overrides = _training(preset, ITERS_SCALE[preset] * self.sizes["train_iters"], device, self.tiny)
        label = f"{preset}-{count}"
        if self.sampler is None or preset == "ft":
            return self._at_once([evo_preset(preset)], overrides, count, label)
        with Sampling(self.sampler, self.folder / f"utilisation-{label}.csv") as sampling:
            rates = self._at_once([evo_preset(preset)], overrides, count, label)
        self.utilisation.setdefault(preset, {})[count] = sampling.samples
        return rates

    def _search(self) -> dict:
        """The tiny ``ft_gpu.yml`` evolution: its counts, the modules it added to warp's kernel cache (the
        cache this process and its children share) and its ``search_trainings``."""
        from benchmarks.sim import WarpSim

        def search() -> dict:
            cache = WarpSim(self.device)
            before = cache.cached_modules()
            overrides = {**CPU_PPO, "PPO.MAX_STATE_ACTION_PAIRS": 256} if self.tiny else {}
            counts = tiny_evolution(self.device, overrides, 2 * self.sizes["row_seconds"], self.folder)
            return {**counts, "modules_compiled": cache.cached_modules() - before,
                    "trainings": search_trainings(self.folder / "evolution")}  # tiny_evolution's OUT_DIR

        return self._once("search", search)

    def ppo_vs_mujoco(self) -> Check:
        cores = usable_cores()  # one MuJoCo C trainer per core, as evo_single_proc.py runs them
        return ppo_verdict(self._trainers("ft_gpu", 1), self._trainers("ft", cores), cores)

    def workers_per_gpu(self) -> Check:
        return workers_verdict({count: self._trainers("ft_gpu", count) for count in self.sizes["workers"]})

    def gpu_utilisation(self) -> Check:
        if self.tiny:
            return Check("gpu_utilisation", NOT_RUN, "CUDA only (NVML)")
        if self.sampler is None:
            return Check("gpu_utilisation", NOT_RUN, "neither pynvml nor nvidia-smi on this machine")
        self._trainers("ft_gpu", 1)  # ppo_vs_mujoco's trainer, if that row was skipped
        return utilisation_verdict(self.utilisation.get("ft_gpu", {}))

    def ft_gpu_evolution(self) -> Check:
        search = self._search()
        counts = {key: search[key] for key in ("published", "failed", "total", "wall_seconds")}
        return Check("ft_gpu_evolution", PASS, f"{counts['published']}/{counts['total']} published", counts)

    def compile_share(self) -> Check:
        search = self._search()
        return compile_share_verdict(search["trainings"], search["modules_compiled"], self.budget)

    def morphologies_per_hour(self) -> Check:
        rates = {count: self._trainers("ft_gpu", count) for count in self.sizes["workers"]}
        return throughput_verdict(rates, self._search()["trainings"], self.budget)

    def derl_shape_per_gpu(self) -> Check:
        """K ``ft_warp.yml`` trainers on the GPU (DERL's learner, the physics there) against K ``ft.yml``
        trainers on MuJoCo C, for each K of ``trainer_counts`` (on warp's CPU device: 1 and 2)."""
        size = self.sizes["derl_shape"]
        counts = trainer_counts(size["counts"], usable_cores(), 2 if self.tiny else size["most"])
        warp = {count: self._trainers("ft_warp", count) for count in counts}
        mujoco = {count: self._trainers("ft", count) for count in counts}
        samples = None if self.sampler is None else self.utilisation.get("ft_warp", {})
        return derl_shape_verdict(warp, mujoco, samples, None if self.tiny else mps_running(os.environ))

    def learner_modes(self) -> Check:
        from derl.ppo.device import assign_device, visible_gpu_count

        overrides = _training("gpu_server", self.sizes["train_iters"], self.device, self.tiny)
        amp = {mode: self._at_once([evo_preset("ft"), GPU_SERVER_PRESET], {**overrides, "PPO.AMP": mode == "on"}, 1,
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
        command = [sys.executable, str(REPO_ROOT / "tools" / "bench.py"), "ddp", "--device", "cuda", "--ranks", "2",
                   "--iters", str(self.sizes["train_iters"]), "--repeats", "1", "--out", str(out)]
        finished = run_at_once([command], self.sizes["row_seconds"], self.folder / "ddp")
        check_finished(finished, self.sizes["row_seconds"], "tools/bench.py ddp")
        return Check("learner_ddp", MEASURED, "tools/bench.py ddp --ranks 2: 2 GPUs against 1", read_json(out))

    def preset_fidelity(self) -> Check:
        size, folder = self.sizes["fidelity"], self.folder / "fidelity"
        jobs = max(1, usable_cores() - 1)  # a core for the GPU's trainer
        finished = run_at_once([fidelity_command(self.device, size, jobs, folder)], size["seconds"], folder / "logs")
        check_finished(finished, size["seconds"], "tools/bench.py fidelity")
        return fidelity_verdict(read_json(folder / "fidelity.json"))
