"""Does a candidate preset select the bodies a reference preset selects?

Trains K bodies under the reference preset (``--reference``, DERL's ``configs/evo/ft.yml`` by
default) with ``--seeds`` seeds, and under each ``--candidate`` with one, each a
``tools/train_ppo.py`` child process, and compares the fitnesses (the reference's first
``EVO.SELECTION_CRITERIA``, DERL's fitness statistic: ``derl.ppo.episodes``) per body and overall:
Spearman's rho and Kendall's tau between the candidate and each reference seed, the share of random
4-body tournaments (``EVO.NUM_PARTICIPANTS``) whose winner agrees, the mean fitness ratio, and the
same agreement between the reference's own seeds: DERL's noise, the ceiling a candidate can reach
(``benchmarks.agreement``). Also env steps and seconds (wall and CPU) per training.

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

Every training is recorded as one cell (``benchmarks.cells``: preset and overrides, budget, the
body's genome hash, seed, simulator; fitness, env steps, seconds; machine, GPU, date, commit) in
``--cells``, the committed ``docs/measurements/fidelity-cells.jsonl`` by default, and a study first
takes every training it needs from there: the cells of earlier runs and other machines combine
(``--cells-only`` trains nothing), and the JSON says where each preset's cells came from. Trainings
are kept in ``--work`` (one folder per preset, budget, body and seed), resumed after a stop and
recorded when a later run finds them finished. Intervals: 95% bootstrap over bodies
(``benchmarks.agreement.bootstrap``). Bodies: ``--genomes DIR`` (genome JSON files, e.g. a
search's ``genomes/``) or ``--sample K`` random genomes of ``--seed``, mutated as many times as
``--mutations`` lists in turn (small to large bodies). Writes the JSON (``--out``) and a scatter plot
of each candidate's fitness against the reference's (``--plot``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.agreement import agreement, bootstrap, seed_agreement
from benchmarks.cases import genome_files
from benchmarks.cells import (
    CELLS,
    Cell,
    CellError,
    CellKey,
    CellTable,
    body_digest,
    gpu_name,
    machine_name,
    sources,
    utc_date,
)
from benchmarks.children import run_command
from derl.analysis import plots
from derl.arguments import any_seed, bounded_int, bounded_ints
from derl.checked_config import DERIVED_KEYS, NODE_LOCAL_KEYS, Config, ConfigError, load_config
from derl.config import flatten
from derl.evolution.search_config import versions
from derl.fileio.reads import read_json
from derl.fileio.writes import atomic_write_text
from derl.morphology.files import InputError, load_genome, sample
from derl.paths import REPO_ROOT, evo_preset

ON_CPU = {"SIM.BACKEND": "mujoco", "DEVICE": "cpu"}
# --scale: at most 1,000 times a preset's budget (DERL's 5M env steps: 5e9 a training).
MAX_SCALE = 1000.0
# Every training: one core, no TensorBoard; the checkpoint every 100 iterations lets a stopped study resume.
EVERY_RUN = {"TORCH_THREADS": 1, "TENSORBOARD.ENABLED": "false"}
# Config keys left out of a cell's key: the simulator, budget and seed are fields of their own, a
# derived key follows the budget, and a node's own keys (device, threads, folders) say where and how a
# training ran, not what it learned.
NOT_IN_KEY = {"SIM.BACKEND", "RNG_SEED", "PPO.MAX_STATE_ACTION_PAIRS", *DERIVED_KEYS, *NODE_LOCAL_KEYS}


# Its output paths (derl.fileio.outputs.check_outputs, before anything trains): the cells table is added to.
OUTPUTS = {"work": "folder", "plot": "file", "cells": "appended"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    bodies = parser.add_mutually_exclusive_group()
    bodies.add_argument("--genomes", type=Path, help="a folder of genome JSON files (every one is trained)")
    bodies.add_argument("--sample", type=bounded_int(1, 10_000), default=8, help="K random bodies (default 8)")
    parser.add_argument("--seed", type=any_seed, default=1, help="seed of the sampled bodies")
    parser.add_argument("--mutations", type=bounded_ints(0, 1000), default=[0, 2, 4, 6],
                        help="mutations of the sampled bodies, in turn (default 0,2,4,6)")
    parser.add_argument("--reference", type=Path, default=evo_preset("ft"))
    parser.add_argument("--candidate", action="append", metavar="FILE[:KEY=VALUE,...]",
                        help="a candidate preset (repeat for several; default configs/evo/ft_gpu.yml)")
    parser.add_argument("--seeds", type=bounded_int(0, 1000), default=2,
                        help="RNG_SEEDs 1..N of the reference (at least 2)")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="factor on every PPO.MAX_STATE_ACTION_PAIRS, in (0, 1000]")
    parser.add_argument("--cpu", action="store_true", help="candidates on SIM.BACKEND mujoco, DEVICE cpu")
    parser.add_argument("--jobs", type=bounded_int(1, 1024), default=os.cpu_count() or 1, help="CPU trainings at once")
    parser.add_argument("--gpu-jobs", type=bounded_int(1, 1024), default=1, help="CUDA trainings at once")
    parser.add_argument("--work", type=Path, default=REPO_ROOT / "output" / "fidelity", help="where trainings are kept")
    parser.add_argument("--plot", type=Path, help="write the scatter plot (PNG) here")
    parser.add_argument("--cells", type=Path, default=CELLS,
                        help="the cells table read first and added to (default docs/measurements/fidelity-cells.jsonl)")
    parser.add_argument("--cells-only", action="store_true", help="train nothing: a study of the cells table alone")
    parser.add_argument("--resamples", type=bounded_int(1, 1_000_000), default=2000,
                        help="bootstrap resamples over bodies (default 2000)")
    parser.add_argument("overrides", nargs="*", metavar="KEY VALUE", help="config overrides for every training")


@dataclass(frozen=True)
class Preset:
    """A preset file with overrides, as one ``--reference`` or ``--candidate`` names it."""

    label: str
    path: Path
    overrides: dict[str, str]
    cfg: Config
    changed: tuple[tuple[str, str], ...]  # the keys whose values differ from the preset file's (the cells' key)

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
        preset = dict(flatten(load_config(path).to_dict()))
    except ConfigError as err:
        raise SystemExit(f"error: {spec}: {err}") from None
    label = path.stem + "".join(f" {key}={value}" for key, value in overrides.items())
    # Resolved, so NUM_ENVS and PPO.NUM_ENVS, or a value equal to the preset's, name the same cells.
    changed = tuple(sorted((key, str(value)) for key, value in flatten(cfg.to_dict())
                           if value != preset.get(key) and key not in NOT_IN_KEY))
    return Preset(label, path, overrides, cfg, changed)


@dataclass(frozen=True)
class Body:
    path: Path
    limbs: int
    digest: str  # body_digest

    @property
    def name(self) -> str:
        return self.path.stem


def _body(path: Path, presets: list[Preset]) -> Body:
    """The genome file ``path``, held to every preset's design space (``load_genome``)."""
    try:
        genomes = [load_genome(path, preset.cfg.unimal) for preset in presets]
    except InputError as err:
        raise SystemExit(f"error: not a genome file: {err}") from None
    return Body(path, genomes[0].num_limbs, body_digest(dataclasses.asdict(genomes[0])))


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", text)


@dataclass(frozen=True)
class Training:
    preset: Preset
    body: Body
    seed: int
    budget: int
    work: Path
    cpu: bool

    @property
    def folder(self) -> Path:
        return self.work / _slug(self.preset.label) / f"b{self.budget}" / f"{self.body.name}-seed{self.seed}"

    def key(self) -> CellKey:
        """Its cell's key: the preset and what the study's and the preset's overrides changed in it."""
        sim = ON_CPU["SIM.BACKEND"] if self.cpu else str(self.preset.cfg.SIM.BACKEND)
        return CellKey(self.preset.path.stem, self.preset.changed, self.budget, self.body.digest, self.seed, sim)

    def command(self, common: list[str]) -> list[str]:
        keys = {**EVERY_RUN, **self.preset.overrides, "RNG_SEED": self.seed, "PPO.MAX_STATE_ACTION_PAIRS": self.budget,
                **(ON_CPU if self.cpu else {})}
        pairs = [str(item) for key, value in keys.items() for item in (key, value)]
        return [sys.executable, str(REPO_ROOT / "tools" / "train_ppo.py"), "--cfg", str(self.preset.path),
                "--genome", str(self.body.path), "--out", str(self.folder), "--resume", "--quiet", *common, *pairs]


def train(training: Training, common: list[str], criterion: str, table: CellTable) -> Cell:
    """Runs (or resumes, or finds finished in ``--work``) one training and records its cell in ``table``."""
    timing_path = training.folder / "fidelity_timing.json"
    if not timing_path.is_file():  # the training dies with this process (a stopped study resumes it)
        commit = versions()["commit"]  # of the code that trains it
        ended = run_command(training.command(common), f"training {training.folder}",
                            log=training.folder.parent / f"{training.folder.name}.log", dies_with_parent=True)
        atomic_write_text(timing_path, json.dumps({"wall_seconds": ended.seconds, "cpu_seconds": ended.cpu_seconds,
                                                   "commit": commit}))
    timing, result = read_json(timing_path), read_json(training.folder / "metrics.json")
    summary = result.get("summary") if isinstance(result, dict) else None
    fitness = summary.get(criterion) if isinstance(summary, dict) else None
    if not isinstance(fitness, int | float) or not isinstance(result.get("env_steps"), int):
        raise RuntimeError(f"{training.folder}/metrics.json: no {criterion} or env_steps: not a finished training")
    seconds = ("wall_seconds", "cpu_seconds")
    if not (isinstance(timing, dict) and all(isinstance(timing.get(key), float) for key in seconds)):
        raise RuntimeError(f"{timing_path}: not the timing this benchmark writes (remove it to train again)")
    device = str(result.get("device", "cpu"))
    commit = timing.get("commit")  # the code that trained it (a timing written before cells has none)
    cell = Cell(training.key(), training.body.name, training.body.limbs, criterion, float(fitness),
                result["env_steps"], device, machine_name(), gpu_name(device), utc_date(timing_path.stat().st_mtime),
                commit if isinstance(commit, str) else None, timing["wall_seconds"], timing["cpu_seconds"])
    table.add(cell)
    return cell


def _budget(preset: Preset, scale: float) -> int:
    return max(1, round(preset.cfg.PPO.MAX_STATE_ACTION_PAIRS * scale))


def _mean(cells: list[Cell], key: str) -> float:
    return round(float(np.mean([getattr(cell, key) for cell in cells])), 2)


def _rounded(stats: dict[str, float | list[float]]) -> dict:
    return {k: [round(x, 4) for x in v] if isinstance(v, list) else round(v, 4) for k, v in stats.items()}


def _cells(jobs: list[Training], common: list[str], criterion: str, table: CellTable, args: argparse.Namespace
           ) -> list[Cell]:
    """Each job's cell: from ``table`` where it has one, else trained (in ``--jobs`` CPU and
    ``--gpu-jobs`` CUDA lanes) and recorded there as it finishes."""
    try:
        known = table.by_key()
    except CellError as err:
        raise SystemExit(f"error: {err}") from None
    missing = [job for job in jobs if job.key() not in known]
    if missing and args.cells_only:
        raise SystemExit(f"error: {len(missing)} of {len(jobs)} trainings have no cell in {table.path} "
                         f"(the first: {missing[0].key().describe()}, body {missing[0].body.name}): "
                         "run without --cells-only to train them")
    with ThreadPoolExecutor(args.jobs) as cpu_lanes, ThreadPoolExecutor(args.gpu_jobs) as gpu_lanes:
        futures = {id(job): (gpu_lanes if job.preset.on_gpu and not job.cpu else cpu_lanes).submit(
            train, job, common, criterion, table) for job in missing}
        return [futures[id(job)].result() if id(job) in futures else known[job.key()] for job in jobs]


def run(args: argparse.Namespace) -> dict:
    if (args.seeds < 2 or not 0 < args.scale <= MAX_SCALE or args.jobs < 1 or args.gpu_jobs < 1
            or args.resamples < 100):  # NaN fails too
        raise SystemExit(f"error: need --seeds >= 2, --scale in (0, {MAX_SCALE:g}], --jobs >= 1, --gpu-jobs >= 1 "
                         "and --resamples >= 100")
    common = list(args.overrides)
    work = args.work.resolve()  # the trainings run from the repository's root
    reference = parse_preset(str(args.reference), {}, common)
    candidates = [parse_preset(spec, ON_CPU if args.cpu else {}, common)
                  for spec in args.candidate or [str(evo_preset("ft_gpu"))]]
    if any(c.on_gpu for c in candidates) and not args.cells_only:
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
    bodies = [_body(g, [reference, *candidates]) for g in genomes]  # every file refused before any training
    twice = {b.digest for b in bodies if sum(o.digest == b.digest for o in bodies) > 1}
    if twice:
        raise SystemExit(f"error: the same body twice: {', '.join(b.name for b in bodies if b.digest in twice)}")
    ids = [b.name for b in bodies]

    # Body by body (its reference seeds, then its candidates): a stopped study has whole bodies done.
    jobs = [job for body in bodies for job in (
        *(Training(reference, body, seed, _budget(reference, args.scale), work, False)
          for seed in range(1, args.seeds + 1)),
        *(Training(c, body, 1, _budget(c, args.scale), work, args.cpu) for c in candidates))]
    done = list(zip(jobs, _cells(jobs, common, criterion, CellTable(args.cells.resolve()), args), strict=True))

    ref_cells = [cell for job, cell in done if job.preset is reference]
    ref_fitness = {b.name: [c.fitness for j, c in done if j.preset is reference and j.body is b] for b in bodies}
    by_seed = [[ref_fitness[i][s] for i in ids] for s in range(args.seeds)]
    size = reference.cfg.EVO.NUM_PARTICIPANTS
    seeds = seed_agreement(by_seed, size, larger_is_better)
    report: dict = {
        "bodies": ids,
        "limbs": {b.name: b.limbs for b in bodies},
        "body_sha256": {b.name: b.digest for b in bodies},
        "criterion": criterion,
        "scale": args.scale,
        "tournament_size": size,
        "intervals": f"95% bootstrap over bodies, {args.resamples} resamples",
        "reference": {
            "config": reference.label, "seeds": list(range(1, args.seeds + 1)),
            "env_steps": _budget(reference, args.scale), "fitness": ref_fitness,
            **_rounded({**seeds, **bootstrap(by_seed, size, larger_is_better, args.resamples)}),
            "seconds_per_training": _mean(ref_cells, "wall_seconds"),
            "cpu_seconds_per_training": _mean(ref_cells, "cpu_seconds"),
            "sources": sources(ref_cells),
        },
        "candidates": {},
    }
    for candidate in candidates:
        cells = {j.body.name: c for j, c in done if j.preset is candidate}
        fitness = [cells[i].fitness for i in ids]
        stats = agreement(fitness, by_seed, size, larger_is_better)
        intervals = bootstrap(by_seed, size, larger_is_better, args.resamples, candidate=fitness)
        report["candidates"][candidate.label] = {
            "config": str(candidate.path), "overrides": candidate.overrides,
            "env_steps": _budget(candidate, args.scale), "device": cells[ids[0]].device,
            **_rounded({**stats, **{k: v for k, v in intervals.items() if not k.startswith("seed_")}}),
            "spearman_below_ceiling": round(seeds["seed_spearman"] - stats["spearman"], 4),
            # DERL's own interval: is the candidate's tournament agreement as high as DERL's noise allows?
            "tournament_agreement_within_derl": bool(
                stats["tournament_agreement"] >= intervals["seed_tournament_agreement_ci"][0]),
            "seconds_per_training": _mean(list(cells.values()), "wall_seconds"),
            "cpu_seconds_per_training": _mean(list(cells.values()), "cpu_seconds"),
            "sources": sources(cells.values()),
            "fitness": dict(zip(ids, fitness, strict=True)),
        }
    if args.plot:
        fitness = {label: found["fitness"] for label, found in report["candidates"].items()}
        plots.save_png(plots.fidelity_scatter(ref_fitness, fitness, criterion), args.plot)
    return report
