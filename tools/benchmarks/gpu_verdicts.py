"""The GPU check's verdicts (``benchmarks.gpu_check``): a row of the table from what a probe measured.

Pure: each function takes measurements (numbers, the JSON a benchmark wrote, a training's rates) and
returns a ``Check``; nothing here touches a device, a process or a file, so every verdict is tested
on the CPU with made-up measurements.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np

from derl.envs.warp_overflow import COUNTED_BITS, Buffers
from derl.envs.warp_overflow import describe as describe_overflow
from derl.evolution.failures import classify, describe
from derl.evolution.node_size import WARP_MODEL_GPU_BYTES, WARP_WORLD_GPU_BYTES

PASS, FAIL, MEASURED, NOT_RUN = "pass", "fail", "measured", "not run"
# The host_syncs row's tasks: FT (nothing drawn per episode) and VT on a bank (entries picked on the device).
SYNC_TASKS = {"ft": {}, "vt": {}}  # VT on warp: a terrain bank (derl.envs.terrain_bank.WARP_BANK_SIZE)
# preset_fidelity passes when each candidate's Spearman is at most this far below the reference's seed-to-seed one.
FIDELITY_MARGIN = 0.1


class RowError(RuntimeError):
    """A row's processes failed, ran past their limit, or wrote what cannot be read: the row's note."""


@dataclass
class Check:
    """One row of the verdict table."""

    name: str
    verdict: str
    note: str = ""
    measured: dict = field(default_factory=dict)


def no_gpu(torch_sees_cuda: bool, listed_gpus: int | None, warp_installed: bool) -> str | None:
    """The one line to print when this machine cannot run the check on ``cuda``, or None.

    No GPU comes first: on a machine without one, installing warp (``make setup-gpu``) would not
    help. ``listed_gpus`` (what ``nvidia-smi -L`` lists, None without nvidia-smi) tells a machine
    without a GPU from one whose GPU torch does not see."""
    if not torch_sees_cuda and not listed_gpus:
        return "error: no NVIDIA GPU on this machine (nvidia-smi / torch.cuda found none): gpu_check needs one"
    if not torch_sees_cuda:
        return (f"error: nvidia-smi lists {listed_gpus} GPU(s) but torch.cuda sees none (CUDA_VISIBLE_DEVICES, "
                "or a CPU-only torch build?): gpu_check needs torch on the GPU")
    if not warp_installed:
        return "error: warp and mujoco_warp are not installed: run `make setup-gpu` on this GPU node"
    return None


def listed_gpus(text: str) -> int:
    """The GPUs in ``nvidia-smi -L``'s output (``GPU 0: NVIDIA H100 ... (UUID: GPU-...)`` per GPU)."""
    return sum(line.startswith("GPU ") for line in text.splitlines())


def guarded(name: str, body: Callable[[], Check]) -> Check:
    """``body()``, or a failed row naming the error and whose it is (``derl.evolution.failures``)."""
    try:
        return body()
    except RowError as err:  # an end-to-end row's processes failed: their own words
        return Check(name, FAIL, str(err))
    except Exception as err:  # noqa: BLE001 - a failed check is a row of the table, not a crash
        return Check(name, FAIL, f"{describe(err)} ({classify(err)})")


def capture_verdict(seconds: float, time_after: float, dt: float, finite: bool) -> Check:
    """The first step: launched, one step on (the warm-up undone), the state finite."""
    ok = finite and abs(time_after - dt) < dt / 100
    note = "" if ok else f"time after the first step {time_after:.6f} s, expected {dt:.6f} s; finite {finite}"
    return Check("capture_first_step", PASS if ok else FAIL, note, {"seconds": round(seconds, 4)})


def sync_verdict(steps: int, error: str | None) -> Check:
    """Zero host syncs: ``set_sync_debug_mode("error")`` raised nothing in ``steps`` env steps of each
    of ``SYNC_TASKS``."""
    return Check("host_syncs", PASS if error is None else FAIL, error or "",
                 {"env_steps": steps, "tasks": list(SYNC_TASKS)})


def overflow_verdict(counts: dict[str, int], steps: int, nworld: int, buffers: Buffers) -> Check:
    """No buffer ran out (``derl.envs.warp_overflow``); solver limits and capped height-field contacts
    are counted, not failed."""
    ran_out = {name: count for name, count in counts.items() if count and name not in COUNTED_BITS}
    return Check("overflow", FAIL if ran_out else PASS, describe_overflow(counts, steps, buffers) or "",
                 {"steps": steps, "nworld": nworld, "world_steps": counts})


def memory_verdict(measured_bytes: int, nworld: int) -> Check:
    """The worlds, modules and graphs took no more than the coordinator reserves for them."""
    estimate = nworld * WARP_WORLD_GPU_BYTES + WARP_MODEL_GPU_BYTES
    ok = measured_bytes <= estimate
    note = "" if ok else "raise WARP_WORLD_GPU_BYTES/WARP_MODEL_GPU_BYTES (derl/evolution/coordinator.py)"
    return Check("memory", PASS if ok else FAIL, note,
                 {"nworld": nworld, "measured_mib": round(measured_bytes / 2**20, 1),
                  "estimate_mib": round(estimate / 2**20, 1)})


def compile_verdict(costs: list[dict]) -> Check:
    """What a new morphology's first env step cost (``benchmarks.sim.WarpSim.build_cost`` per body)."""
    seconds = [cost["first_step_seconds"] for cost in costs]
    cached = any(cost["modules_compiled"] == 0 for cost in costs)
    note = (f"a new morphology's first env step: {min(seconds):.1f}-{max(seconds):.1f} s (the kernels MuJoCo Warp "
            f"specialises per model{'; some were in the kernel cache' if cached else ''})")
    return Check("new_morphology_compile", MEASURED, note, {"bodies": costs})


def ppo_verdict(warp: dict, mujoco: dict, cores: int) -> Check:
    """PPO end to end: one trainer on warp against ``cores`` MuJoCo C trainers at once (one per core)."""
    loop = warp["loop_steps_per_sec"] / mujoco["loop_steps_per_sec"]
    wall = warp["wall_steps_per_sec"] / mujoco["wall_steps_per_sec"]
    note = (f"1 warp trainer (ft_gpu.yml) against {cores} MuJoCo C trainers (ft.yml, 1 thread each, all cores): "
            f"{loop:.2f}x in the training loop, {wall:.2f}x wall (start-up and compiles included)")
    return Check("ppo_vs_mujoco", MEASURED, note,
                 {"warp": warp, "mujoco": mujoco, "mujoco_trainers": cores,
                  "loop_speedup_warp_over_mujoco_node": round(loop, 3),
                  "wall_speedup_warp_over_mujoco_node": round(wall, 3)})


def workers_verdict(rates: dict[int, dict]) -> Check:
    """Aggregate env steps/s of 1, 2, 4 trainers sharing the GPU, each with its own worlds."""
    note = "loop env steps/s of all trainers: " + ", ".join(
        f"{count}: {rate['loop_steps_per_sec']:,.0f}" for count, rate in rates.items())
    return Check("workers_per_gpu", MEASURED, note, {str(count): rate for count, rate in rates.items()})


def learner_verdict(amp: dict[str, dict], devices: list[str]) -> Check:
    """gpu_server.yml's learner: AMP off against on, and the round-robin of 4 workers' learners over the GPUs."""
    off, on = amp["off"]["update_seconds_per_iteration"], amp["on"]["update_seconds_per_iteration"]
    note = f"update s/iteration AMP off {off:.3f}, on {on:.3f}; 4 workers' learners on {', '.join(devices)}"
    return Check("learner_modes", MEASURED, note, {"amp": amp, "round_robin": devices})


def ddp_not_run(device: str, gpus: int) -> Check | None:
    """The ``learner_ddp`` row when it cannot run here (DDP over NCCL needs two GPUs), or None."""
    if not device.startswith("cuda"):
        return Check("learner_ddp", NOT_RUN, "CUDA only (NCCL)")
    if gpus < 2:
        return Check("learner_ddp", NOT_RUN, f"{gpus} GPU: DDP over NCCL needs >= 2 (tools/bench.py ddp --device cuda)")
    return None


def task_on_device_verdict(name: str, refusal: str | None, steps: int, nonfinite: int, rate: float) -> Check:
    """A task's env on the warp backend: refused (not run), or stepped with every world finite."""
    row = f"{name}_on_device"
    if refusal is not None:
        return Check(row, NOT_RUN, f"refused: {refusal}")
    ok = nonfinite == 0
    return Check(row, PASS if ok else FAIL, "" if ok else f"{nonfinite} worlds non-finite after {steps} env steps",
                 {"env_steps": steps, "env_steps_per_sec": round(rate, 1)})


def table(checks: list[Check]) -> str:
    """The verdict table: one row per check (name, verdict, note)."""
    width = max(len(check.name) for check in checks)
    rows = [f"{'check':<{width}}  {'verdict':<8}  note", f"{'-' * width}  {'-' * 8}  ----"]
    rows += [f"{check.name:<{width}}  {check.verdict:<8}  {check.note}".rstrip() for check in checks]
    return "\n".join(rows)


def passed(checks: list[Check]) -> bool:
    return all(check.verdict != FAIL for check in checks)


def report(checks: list[Check], device: str, versions: dict) -> dict:
    """The JSON the tool writes: the device, the versions, every check."""
    return {"device": device, "versions": versions, "passed": passed(checks),
            "checks": [asdict(check) for check in checks]}


def utilisation_summary(samples: list[tuple[float, float]]) -> dict:
    """Mean, 10th and 90th percentiles of the utilisation % of ``(utilisation %, memory MiB)`` samples, and
    the most memory used."""
    utilisation = np.array([sample[0] for sample in samples])
    return {"samples": len(samples), "mean": round(float(utilisation.mean()), 1),
            "p10": round(float(np.percentile(utilisation, 10)), 1),
            "p90": round(float(np.percentile(utilisation, 90)), 1),
            "memory_mib_max": max(sample[1] for sample in samples)}


def utilisation_verdict(samples: dict[int, list[tuple[float, float]]]) -> Check:
    """The GPU's utilisation while 1, 2, 4 ``ft_gpu.yml`` trainers shared it (``samples`` by trainer count,
    one a second: ``benchmarks.gpu_utilisation``); fails when the sampler recorded nothing."""
    empty = [str(count) for count, taken in samples.items() if not taken]
    if empty or not samples:
        return Check("gpu_utilisation", FAIL, f"the sampler recorded nothing while {', '.join(empty) or 'no'} "
                                              "trainer(s) ran")
    summaries = {count: utilisation_summary(taken) for count, taken in sorted(samples.items())}
    note = "GPU utilisation % while trainers ran, mean (p10-p90): " + ", ".join(
        f"{count}: {row['mean']:.0f} ({row['p10']:.0f}-{row['p90']:.0f})" for count, row in summaries.items())
    return Check("gpu_utilisation", MEASURED, note, {str(count): row for count, row in summaries.items()})


def derl_shape_verdict(warp: dict[int, dict], mujoco: dict[int, dict],
                       samples: dict[int, list[tuple[float, float]]] | None, mps: bool | None) -> Check:
    """K ``ft_warp.yml`` trainers sharing one GPU against K ``ft.yml`` trainers on MuJoCo C (one per core),
    for each K of ``warp`` (``training_rates`` by K, as ``mujoco``): loop env steps/s in all and per
    trainer, warp's over MuJoCo C's, and the GPU's utilisation meanwhile (``samples`` by K; None: not
    sampled). ``mps``: whether CUDA MPS ran (None: not a GPU)."""
    rows = {}
    for count in sorted(warp):
        on_gpu, on_cores = warp[count]["loop_steps_per_sec"], mujoco[count]["loop_steps_per_sec"]
        taken = (samples or {}).get(count)
        rows[count] = {"warp_steps_per_sec": on_gpu, "warp_steps_per_sec_each": round(on_gpu / count, 1),
                       "mujoco_steps_per_sec": on_cores, "mujoco_steps_per_sec_each": round(on_cores / count, 1),
                       "warp_over_mujoco": round(on_gpu / on_cores, 3) if on_cores > 0 else None,
                       "gpu_utilisation": utilisation_summary(taken) if taken else "not sampled"}
    best = max(rows, key=lambda count: rows[count]["warp_steps_per_sec"])
    ahead = [count for count, row in rows.items() if (row["warp_over_mujoco"] or 0) > 1]
    parts = [f"K={count} {row['warp_steps_per_sec']:,.0f} vs {row['mujoco_steps_per_sec']:,.0f} "
             f"({row['warp_over_mujoco'] or 0:.2f}x" +
             (f", GPU {row['gpu_utilisation']['mean']:.0f}%)" if isinstance(row["gpu_utilisation"], dict) else ")")
             for count, row in rows.items()]
    verdict = (f"warp ahead at K={', '.join(map(str, ahead))}" if ahead else "MuJoCo C ahead at every K")
    device, of_it = ("warp's CPU device", "warp's CPU device") if mps is None else ("one GPU", "the GPU")
    note = (f"K ft_warp.yml trainers on {device} against K ft.yml trainers on MuJoCo C, loop env steps/s in all: "
            f"{'; '.join(parts)}; best K on {of_it}: {best}; {verdict}" +
            ("" if mps is None else f"; MPS {'on' if mps else 'off'}"))
    return Check("derl_shape_per_gpu", MEASURED, note,
                 {"best_trainers": best, "warp_ahead_at": ahead, "mps": mps,
                  "by_trainers": {str(count): row for count, row in rows.items()}})


def startup_seconds(training: dict) -> float:
    """A training's seconds beyond its env steps at its loop rate (``benchmarks.gpu_training.loop_rate``):
    its env built, warp's kernels compiled or loaded, its graphs captured, the first iteration's extra."""
    rate = training["loop_steps_per_sec"]
    if rate <= 0:
        return training["wall_seconds"]
    return max(0.0, training["wall_seconds"] - training["env_steps"] / rate)


def compile_share_verdict(trainings: list[dict], modules: int, budget: int) -> Check:
    """What a search's new morphologies paid before training at speed: the kernel modules the search added
    to warp's cache, each training's ``startup_seconds`` (compiling included: an upper bound on it), their
    share of the trainings' wall time at the search's budget, and projected at ``budget`` env steps
    (the median start-up over the median start-up plus ``budget`` at the median loop rate)."""
    startups = [startup_seconds(training) for training in trainings]
    share = sum(startups) / sum(training["wall_seconds"] for training in trainings)
    startup = float(np.median(startups))
    rate = float(np.median([training["loop_steps_per_sec"] for training in trainings]))
    at_budget = startup / (startup + budget / rate)
    steps = max(training["env_steps"] for training in trainings)
    note = (f"{len(trainings)} morphologies added {modules} kernel modules; start-up (compiles included) "
            f"{min(startups):.1f}-{max(startups):.1f} s each, {share:.0%} of their trainings' wall time at "
            f"{steps:,} env steps; at {budget:,} env steps ({rate:,.0f}/s) {at_budget:.1%}")
    return Check("compile_share", MEASURED, note, {
        "modules_compiled": modules, "startup_seconds_median": round(startup, 2),
        "share_of_training_wall": round(share, 4), "budget_env_steps": budget,
        "loop_steps_per_sec_median": round(rate, 1), "share_at_budget": round(at_budget, 4),
        "trainings": [{**training, "startup_seconds": round(seconds, 2)}
                      for training, seconds in zip(trainings, startups, strict=True)]})


def morphologies_per_hour(rates: list[float], startup: float, budget: int) -> float:
    """Morphologies a GPU trains per hour when ``len(rates)`` trainers share it, trainer i at ``rates[i]``
    env steps/s in its loop: each morphology takes ``budget / rate + startup`` seconds. An estimate: it
    charges every start-up in full, though the other trainers go on meanwhile."""
    return sum(3600 / (budget / rate + startup) for rate in rates if rate > 0)


def throughput_verdict(rates: dict[int, dict], trainings: list[dict], budget: int) -> Check:
    """``morphologies_per_hour`` for each count of trainers sharing the GPU (``rates``: their
    ``training_rates``), with the median ``startup_seconds`` of a search's ``trainings``."""
    startup = float(np.median([startup_seconds(training) for training in trainings]))
    per_hour = {count: morphologies_per_hour(rate["loop_steps_per_sec_each"], startup, budget)
                for count, rate in sorted(rates.items())}
    best = max(per_hour, key=per_hour.get)
    note = (f"ft_gpu.yml at {budget:,} env steps, {startup:.0f} s start-up each: " +
            ", ".join(f"{count} trainer(s) {value:.1f}" for count, value in per_hour.items()) +
            f" morphologies/hour/GPU (best: {best})")
    return Check("morphologies_per_hour", MEASURED, note,
                 {"budget_env_steps": budget, "startup_seconds": round(startup, 2), "best_trainers": best,
                  "per_hour": {str(count): round(value, 2) for count, value in per_hour.items()}})


def fidelity_verdict(study: dict, margin: float = FIDELITY_MARGIN) -> Check:
    """``tools/bench.py fidelity``'s study: each candidate ranks the bodies (Spearman against each reference
    seed) no worse than ``margin`` below the reference's own seeds (the ceiling: DERL's noise); a NaN
    (a constant fitness) fails."""
    reference = study["reference"]
    floor = round(reference["seed_spearman"] - margin, 4)  # the study's figures have 4 decimals: 0.8 - 0.1 is 0.7
    low = [name for name, candidate in study["candidates"].items() if not candidate["spearman"] >= floor]
    parts = [f"{name} Spearman {c['spearman']:.2f}, Kendall {c['kendall']:.2f}, tournaments "
             f"{c['tournament_agreement']:.0%}, fitness x{c['fitness_ratio']:.2f}, {c['env_steps']:,} env steps, "
             f"{c['seconds_per_training']:.0f} s/training" for name, c in study["candidates"].items()]
    note = (f"{len(study['bodies'])} bodies at {study['scale']:g}x budget; {reference['config']} seed against seed: "
            f"Spearman {reference['seed_spearman']:.2f}, Kendall {reference['seed_kendall']:.2f}; " + "; ".join(parts))
    if low:
        note = f"Spearman below {floor:.2f}: {', '.join(low)}; {note}"
    return Check("preset_fidelity", FAIL if low else PASS, note, {"margin": margin, **study})
