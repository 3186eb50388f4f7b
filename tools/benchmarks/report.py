"""Report speed: ``tools/report.py`` on a synthetic finished run of 4,000 morphologies (no trainings).

The synthetic run folder has what a real one has, minus trained checkpoints (each is a placeholder
file, so the records pass the run's schema): ``config.yaml`` (the FT preset), a claim, a
publication number, a genome (real UNIMAL bodies, drawn from a pool of random genomes), an MJCF
and a metadata file per slot, and a learning curve per morphology with ``--iterations`` records
of the trainer's fields (1,220: the paper's budget). Parents are drawn from the newest
``AGING_WINDOW_SIZE`` morphologies, so lineages are as deep as an aging search makes them.
The timing covers opening the run and writing the whole report (plots, the top-K pictures; no
videos, as there are no checkpoints).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from derl.analysis.report import ReportOptions, write_report
from derl.analysis.run import RunView
from derl.arguments import bounded_int
from derl.checked_config import load_preset
from derl.config import dump_config
from derl.evolution.folder.record import PublishedRecord
from derl.evolution.folder.run_dir import RunDir
from derl.evolution.population import slot_id
from derl.fileio.writes import atomic_write_text, write_json
from derl.morphology import random_genome, to_mjcf

TARGET_SECONDS = 30.0
MUTATIONS = ("grow_limb", "joint_angle", "limb_params", "dof", "density", "gear", "delete_limb")


# Its output paths (derl.fileio.outputs.check_outputs): --dir holds the synthetic search it builds.
OUTPUTS = {"dir": "search"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--morphologies", type=bounded_int(1, 100_000), default=4000, help="published morphologies")
    parser.add_argument("--iterations", type=bounded_int(1, 100_000), default=1220, help="records per learning curve")
    parser.add_argument("--genomes", type=bounded_int(1, 100_000), default=64, help="distinct bodies in the pool")
    parser.add_argument("--dir", type=Path, help="build the run here and keep it (reused if it holds one)")
    parser.add_argument("--top", type=bounded_int(1, 1000), default=10)


def _curve_lines(final: float, iterations: int, speed: float, rng: np.random.Generator) -> str:
    """Trainer-like records rising to ``final``: ``final (1 - exp(-speed t))`` plus noise."""
    t = np.arange(1, iterations + 1) / iterations
    forward = final * (1 - np.exp(-speed * t)) + rng.normal(0, 0.02 * abs(final) + 0.1, iterations)
    lines = []
    for k in range(iterations):
        fwd = float(forward[k])
        record = {"iteration": k + 1, "env_steps": (k + 1) * 4096, "steps_per_sec": 5000.0, "episodes": 4 * k,
                  "__reward__ctrl": -0.1, "energy": 80.0, "__reward__forward": fwd, "__reward__stand": 0.0,
                  "metric": fwd / 100, "return": fwd - 0.1, "x_pos": fwd / 100, "loss": 1.0, "policy_loss": -0.01,
                  "value_loss": 2.0, "entropy": 1.4, "approx_kl": 0.01, "clip_fraction": 0.1, "kl_early_stop": 0.0,
                  "lr": 3e-4, "collect_seconds": 0.3, "update_seconds": 0.2}
        lines.append(json.dumps(record))
    return "\n".join(lines) + "\n"


def build_synthetic_run(out: Path, morphologies: int, iterations: int, genomes: int, seed: int = 0) -> None:
    """Writes a finished synthetic run of ``morphologies`` into ``out`` (see the module docstring)."""
    rng = np.random.default_rng(seed)
    init = min(576, morphologies)
    cfg = load_preset("ft", {"OUT_DIR": str(out), "EVO.SEARCH_SPACE_SIZE": morphologies,
                             "EVO.INIT_POPULATION_SIZE": init, "EVO.AGING_WINDOW_SIZE": init, "NUM_NODES": 1})
    run = RunDir(out)
    run.create()
    run.write_config(dump_config(cfg))
    pool = []
    for k in range(genomes):
        genome = random_genome(cfg.unimal, np.random.default_rng([seed, k]), "pool")
        pool.append((dataclasses.asdict(genome), to_mjcf(genome, cfg.unimal)))
    lineage: dict[str, str] = {}
    quality = rng.normal(0, 1, genomes)
    started = 1.7e9
    for slot in range(morphologies):
        morphology_id = slot_id(slot)
        body = slot % genomes
        parent = None if slot < init else slot_id(int(rng.integers(max(0, slot - init), slot)))
        mutation = None if parent is None else str(rng.choice(MUTATIONS))
        genome, mjcf = pool[body]
        run.genomes.write_genome(morphology_id, json.dumps({**genome, "id": morphology_id, "parent_id": parent,
                                                     "mutation": mutation}), mjcf)
        lineage[morphology_id] = morphology_id if parent is None else f"{lineage[parent]}/{morphology_id}"
        progress = slot / morphologies
        final = 100 + 60 * progress + 25 * quality[body] + float(rng.normal(0, 10))
        speed = 3 + 4 * progress + float(rng.normal(0, 0.5))  # later morphologies learn faster
        atomic_write_text(run.metrics_path(morphology_id), _curve_lines(final, iterations, speed, rng))
        atomic_write_text(run.checkpoint_path(morphology_id), "a synthetic run has no trained checkpoint\n")
        run.slots.claim(slot, node=0, worker=slot % 16)
        publication = run.publications.take_publication_number(morphology_id, 0, slot % 16)
        run.publications.publish(PublishedRecord.from_json({
            "id": morphology_id, "parent_id": parent, "lineage": lineage[morphology_id], "mutation": mutation,
            "slot": slot, "attempt": 0, "seed": slot, "node": 0, "worker": slot % 16, "return": final - 0.1,
            "__reward__forward": final, "__reward__ctrl": -0.1, "energy": 80.0, "__reward__stand": 0.0,
            "x_pos": final / 100, "metric": final / 100, "env_steps": iterations * 4096, "iterations": iterations,
            "wall_time": 3600.0, "steps_per_sec": 1400.0,
            "files": {name: run.relative(path) for name, path in (
                ("genome", run.genomes.genome_path(morphology_id)), ("xml", run.genomes.xml_path(morphology_id)),
                ("checkpoint", run.checkpoint_path(morphology_id)), ("metrics", run.metrics_path(morphology_id)))},
            "published_at": started + 10.0 * slot, "publication": publication,
        }))
    run.mark_init_population([slot_id(s) for s in range(init)])
    write_json(out / "summary.json", {"published": morphologies, "total": morphologies})


def run(args: argparse.Namespace) -> dict:
    scratch = None
    out = args.dir
    if out is None:
        scratch = tempfile.mkdtemp(prefix="derl-bench-report-")
        out = Path(scratch) / "run"
    built = 0.0
    try:
        if not (out / "metadata").is_dir():
            started = time.perf_counter()
            build_synthetic_run(out, args.morphologies, args.iterations, args.genomes)
            built = time.perf_counter() - started
        started = time.perf_counter()
        view = RunView(out)
        opened = time.perf_counter() - started
        report = write_report(view, out / "report", ReportOptions(top_k=args.top))
        total = time.perf_counter() - started
        return {
            "morphologies": len(view), "iterations_per_curve": args.iterations, "build_seconds": round(built, 1),
            "open_seconds": round(opened, 2), "report_seconds": round(total, 2),
            "target_seconds": TARGET_SECONDS, "within_target": total < TARGET_SECONDS,
            "sections": report.seconds, "plots": len(report.plots), "media": len(report.media),
            "problems": report.problems,
            "baldwin_slope": None if report.baldwin_slope is None or not math.isfinite(report.baldwin_slope)
            else round(report.baldwin_slope, 5),
        }
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
