"""Does a candidate preset select the bodies a reference preset selects?

Trains K bodies under the reference preset (``--reference``, DERL's ``configs/evo/ft.yml`` by
default) with ``--seeds`` seeds, and under each ``--candidate`` with one, each a
``tools/train_ppo.py`` child process, and compares the fitnesses (the reference's first
``EVO.SELECTION_CRITERIA``, DERL's fitness statistic: ``derl.ppo.episodes``) per body and overall:
Spearman's rho and Kendall's tau between the candidate and each reference seed, the share of random
4-body tournaments (``EVO.NUM_PARTICIPANTS``) whose winner agrees, the mean fitness ratio, and the
same agreement between the reference's own seeds: DERL's noise, the ceiling a candidate can reach
(``derl.bench.agreement``). Also env steps and seconds (wall and CPU) per training.

A candidate is a preset file, optionally with overrides: ``FILE`` or ``FILE:KEY=VALUE,KEY=VALUE``
(``configs/evo/ft_gpu.yml:PPO.EPOCHS=3``). Its trainings run where its config says (``DEVICE``,
``SIM.BACKEND``): CUDA trainings in ``--gpu-jobs`` lanes beside the ``--jobs`` CPU lanes, so the
reference trains on the node's cores while a candidate trains on its GPU. ``--cpu`` runs every
candidate on MuJoCo C on the CPU instead: the learner's settings are what is tested, and the two
simulators agree to 1e-5 per step (docs/guides/gpus.md).

``--scale F`` multiplies every preset's ``PPO.MAX_STATE_ACTION_PAIRS`` (a 2-core machine cannot
train DERL's 5M env steps per body many times): each preset keeps its batch shape and learning
rate schedule over F of its iterations, and the fitness still averages the last 409,600 env steps,
so at F < 1 it ranks bodies earlier in learning, on a larger share of each curve.

Trainings are kept in ``--work`` (one folder per preset, budget, body and seed) and resumed or
reused by a later run with the same settings. Bodies: ``--genomes DIR`` (genome JSON files, e.g. a
search's ``genomes/``) or ``--sample K`` random genomes of ``--seed``, mutated as many times as
``--mutations`` lists in turn (small to large bodies). Writes the JSON (``--out``) and a scatter plot
of each candidate's fitness against the reference's (``--plot``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from derl.analysis import plots
from derl.bench.agreement import agreement, seed_agreement
from derl.bench.cases import genome_files
from derl.bench.children import run_command
from derl.checked_config import Config, ConfigError, load_config
from derl.fileio.reads import read_json
from derl.fileio.writes import atomic_write_text
from derl.morphology.files import InputError, load_genome, sample
from derl.paths import REPO_ROOT, evo_preset

ON_CPU = {"SIM.BACKEND": "mujoco", "DEVICE": "cpu"}
# --scale: at most 1,000 times a preset's budget (DERL's 5M env steps: 5e9 a training).
MAX_SCALE = 1000.0
# Every training: one core, no TensorBoard; the checkpoint every 100 iterations lets a stopped study resume.
EVERY_RUN = {"TORCH_THREADS": 1, "TENSORBOARD.ENABLED": "false"}


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    bodies = parser.add_mutually_exclusive_group()
    bodies.add_argument("--genomes", type=Path, help="a folder of genome JSON files (every one is trained)")
    bodies.add_argument("--sample", type=int, default=8, help="K random bodies (default 8)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the sampled bodies")
    parser.add_argument("--mutations", type=_ints, default=[0, 2, 4, 6],
                        help="mutations of the sampled bodies, in turn (default 0,2,4,6)")
    parser.add_argument("--reference", type=Path, default=evo_preset("ft"))
    parser.add_argument("--candidate", action="append", metavar="FILE[:KEY=VALUE,...]",
                        help="a candidate preset (repeat for several; default configs/evo/ft_gpu.yml)")
    parser.add_argument("--seeds", type=int, default=2, help="RNG_SEEDs 1..N of the reference (at least 2)")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="factor on every PPO.MAX_STATE_ACTION_PAIRS, in (0, 1000]")
    parser.add_argument("--cpu", action="store_true", help="candidates on SIM.BACKEND mujoco, DEVICE cpu")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="CPU trainings at once")
    parser.add_argument("--gpu-jobs", type=int, default=1, help="CUDA trainings at once")
    parser.add_argument("--work", type=Path, default=REPO_ROOT / "output" / "fidelity", help="where trainings are kept")
    parser.add_argument("--plot", type=Path, help="write the scatter plot (PNG) here")
    parser.add_argument("overrides", nargs="*", metavar="KEY VALUE", help="config overrides for every training")


@dataclass(frozen=True)
class Preset:
    """A preset file with overrides, as one ``--reference`` or ``--candidate`` names it."""

    label: str
    path: Path
    overrides: dict[str, str]
    cfg: Config

    @property
    def on_gpu(self) -> bool:
        return str(self.cfg.DEVICE).startswith("cuda")


def parse_preset(spec: str, extra: dict[str, str], common: list[str]) -> Preset:
    """``FILE[:KEY=VALUE,...]`` loaded with ``common`` (``KEY VALUE`` pairs) and ``extra`` on top."""
    path_text, _, pairs = spec.partition(":")
    overrides = {}
    for pair in filter(None, pairs.split(",")):
        key, equals, value = pair.partition("=")
        if not equals:
            raise SystemExit(f"error: --candidate {spec}: {pair!r} is not KEY=VALUE")
        overrides[key] = value
    path = Path(path_text).resolve()  # the trainings run from the repository's root
    if not path.is_file():
        raise SystemExit(f"error: preset file not found: {path_text}")
    try:
        cfg = load_config(path, [*common, *(item for kv in {**overrides, **extra}.items() for item in kv)])
    except ConfigError as err:
        raise SystemExit(f"error: {spec}: {err}") from None
    label = path.stem + "".join(f" {key}={value}" for key, value in overrides.items())
    return Preset(label, path, overrides, cfg)


def _limbs(path: Path, presets: list[Preset]) -> int:
    """The limb count of the genome file ``path``, held to every preset's design space (``load_genome``)."""
    try:
        genomes = [load_genome(path, preset.cfg.unimal) for preset in presets]
    except InputError as err:
        raise SystemExit(f"error: not a genome file: {err}") from None
    return genomes[0].num_limbs


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", text)


@dataclass(frozen=True)
class Training:
    preset: Preset
    genome: Path
    seed: int
    budget: int
    work: Path
    cpu: bool

    @property
    def folder(self) -> Path:
        return self.work / _slug(self.preset.label) / f"b{self.budget}" / f"{self.genome.stem}-seed{self.seed}"

    def command(self, common: list[str]) -> list[str]:
        keys = {**EVERY_RUN, **self.preset.overrides, "RNG_SEED": self.seed, "PPO.MAX_STATE_ACTION_PAIRS": self.budget,
                **(ON_CPU if self.cpu else {})}
        pairs = [str(item) for key, value in keys.items() for item in (key, value)]
        return [sys.executable, str(REPO_ROOT / "tools" / "train_ppo.py"), "--cfg", str(self.preset.path),
                "--genome", str(self.genome), "--out", str(self.folder), "--resume", "--quiet", *common, *pairs]


def train(training: Training, common: list[str], criterion: str) -> dict:
    """Runs (or resumes, or reuses) one training; returns its fitness, env steps and seconds."""
    timing_path = training.folder / "fidelity_timing.json"
    if not timing_path.is_file():  # the training dies with this process (a stopped study resumes it)
        ended = run_command(training.command(common), f"training {training.folder}",
                            log=training.folder.parent / f"{training.folder.name}.log", dies_with_parent=True)
        atomic_write_text(timing_path, json.dumps({"wall_seconds": ended.seconds, "cpu_seconds": ended.cpu_seconds}))
    timing, result = read_json(timing_path), read_json(training.folder / "metrics.json")
    summary = result.get("summary") if isinstance(result, dict) else None
    fitness = summary.get(criterion) if isinstance(summary, dict) else None
    if not isinstance(fitness, int | float) or not isinstance(result.get("env_steps"), int):
        raise RuntimeError(f"{training.folder}/metrics.json: no {criterion} or env_steps: not a finished training")
    seconds = ("wall_seconds", "cpu_seconds")
    if not (isinstance(timing, dict) and all(isinstance(timing.get(key), float) for key in seconds)):
        raise RuntimeError(f"{timing_path}: not the timing this benchmark writes (remove it to train again)")
    return {"fitness": float(fitness), "env_steps": result["env_steps"], "device": str(result.get("device", "cpu")),
            "wall_seconds": timing["wall_seconds"], "cpu_seconds": timing["cpu_seconds"]}


def _budget(preset: Preset, scale: float) -> int:
    return max(1, round(preset.cfg.PPO.MAX_STATE_ACTION_PAIRS * scale))


def _mean(results: list[dict], key: str) -> float:
    return round(float(np.mean([r[key] for r in results])), 2)


def scatter(reference: dict[str, list[float]], candidates: dict[str, dict[str, float]], criterion: str):
    """Each candidate's fitness against the reference's mean (the bar: the reference's seeds)."""
    figure = plots.new_figure((6.4, 5.6))
    axes = figure.add_subplot()
    ids = list(reference)
    means = np.array([np.mean(reference[i]) for i in ids])
    low = means - np.array([min(reference[i]) for i in ids])
    high = np.array([max(reference[i]) for i in ids]) - means
    for label, fitness in candidates.items():
        axes.errorbar(means, [fitness[i] for i in ids], xerr=[low, high], fmt="o", capsize=2, label=label)
    every = [*means, *(v for f in candidates.values() for v in f.values())]
    line = [min(every), max(every)]
    axes.plot(line, line, color="grey", lw=0.8, ls="--")
    axes.set_xlabel(f"reference {criterion} (mean of its seeds; bar: their range)")
    axes.set_ylabel(f"candidate {criterion}")
    axes.legend(fontsize=7)
    axes.set_title("Fitness per body: candidate against reference")
    figure.tight_layout()
    return figure


def run(args: argparse.Namespace) -> dict:
    if args.seeds < 2 or not 0 < args.scale <= MAX_SCALE or args.jobs < 1 or args.gpu_jobs < 1:  # NaN fails too
        raise SystemExit(f"error: need --seeds >= 2, --scale in (0, {MAX_SCALE:g}], --jobs >= 1 and --gpu-jobs >= 1")
    common = list(args.overrides)
    work = args.work.resolve()  # the trainings run from the repository's root
    reference = parse_preset(str(args.reference), {}, common)
    candidates = [parse_preset(spec, ON_CPU if args.cpu else {}, common)
                  for spec in args.candidate or [str(evo_preset("ft_gpu"))]]
    if any(c.on_gpu for c in candidates):
        import torch

        if not torch.cuda.is_available():
            raise SystemExit("error: a candidate trains on cuda (its DEVICE) and this machine has no GPU: add --cpu")
    criterion = reference.cfg.EVO.SELECTION_CRITERIA[0]
    larger_is_better = reference.cfg.EVO.SELECTION_CRITERIA_OBJ[0] == -1
    if args.genomes is not None:
        genomes = genome_files(args.genomes.resolve())
        if len(genomes) < 4:
            raise SystemExit(f"error: {args.genomes}: need at least 4 genome JSON files, found {len(genomes)}")
    else:
        if args.sample < 4 or not args.mutations or min(args.mutations) < 0 or args.seed < 0:
            raise SystemExit("error: need --sample >= 4, --mutations of whole numbers >= 0 and --seed >= 0")
        genomes = sample(reference.cfg.unimal, args.sample, args.seed, work / "bodies", args.mutations)
    limbs = {g.stem: _limbs(g, [reference, *candidates]) for g in genomes}  # every file refused before any training
    ids = [g.stem for g in genomes]

    jobs = [Training(reference, g, seed, _budget(reference, args.scale), work, False)
            for g in genomes for seed in range(1, args.seeds + 1)]
    jobs += [Training(c, g, 1, _budget(c, args.scale), work, args.cpu) for c in candidates for g in genomes]
    with ThreadPoolExecutor(args.jobs) as cpu_lanes, ThreadPoolExecutor(args.gpu_jobs) as gpu_lanes:
        futures = [(gpu_lanes if job.preset.on_gpu and not job.cpu else cpu_lanes).submit(
            train, job, common, criterion) for job in jobs]
        results = [future.result() for future in futures]
    done = list(zip(jobs, results, strict=True))

    ref_runs = {i: [r for j, r in done if j.preset is reference and j.genome.stem == i] for i in ids}
    ref_fitness = {i: [r["fitness"] for r in runs] for i, runs in ref_runs.items()}
    by_seed = [[ref_fitness[i][s] for i in ids] for s in range(args.seeds)]
    size = reference.cfg.EVO.NUM_PARTICIPANTS
    report: dict = {
        "bodies": ids,
        "limbs": limbs,
        "criterion": criterion,
        "scale": args.scale,
        "tournament_size": size,
        "reference": {
            "config": reference.label, "seeds": list(range(1, args.seeds + 1)),
            "env_steps": _budget(reference, args.scale), "fitness": ref_fitness,
            **{k: round(v, 4) for k, v in seed_agreement(by_seed, size, larger_is_better).items()},
            "seconds_per_training": _mean([r for runs in ref_runs.values() for r in runs], "wall_seconds"),
            "cpu_seconds_per_training": _mean([r for runs in ref_runs.values() for r in runs], "cpu_seconds"),
        },
        "candidates": {},
    }
    for candidate in candidates:
        runs = {j.genome.stem: r for j, r in done if j.preset is candidate}
        fitness = {i: runs[i]["fitness"] for i in ids}
        stats = agreement([fitness[i] for i in ids], by_seed, size, larger_is_better)
        report["candidates"][candidate.label] = {
            "config": str(candidate.path), "overrides": candidate.overrides,
            "env_steps": _budget(candidate, args.scale), "device": runs[ids[0]]["device"],
            **{k: round(v, 4) for k, v in stats.items()},
            "spearman_below_ceiling": round(report["reference"]["seed_spearman"] - stats["spearman"], 4),
            "seconds_per_training": _mean(list(runs.values()), "wall_seconds"),
            "cpu_seconds_per_training": _mean(list(runs.values()), "cpu_seconds"),
            "fitness": fitness,
        }
    if args.plot:
        figure = scatter(ref_fitness, {k: v["fitness"] for k, v in report["candidates"].items()}, criterion)
        plots.save_png(figure, args.plot)
    return report
