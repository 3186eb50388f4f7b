"""What `tools/morphology.py` does: sample, print, mutate and count genome files."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np

from derl.config import CfgNode
from derl.envs.media import MAX_IMAGE_SIDE, render_body, write_png
from derl.fileio import atomic_write_text
from derl.morphology.genome import Genome, GenomeError
from derl.morphology.geometry import rotation_signature
from derl.morphology.mjcf import to_mjcf
from derl.morphology.mutations import mutate, random_genome
from derl.morphology.population import species_labels


class InputError(ValueError):
    """A bad argument or input file (one-line message for the user)."""


def load_genome(path: Path) -> Genome:
    if not path.is_file():
        raise InputError(f"genome file not found: {path}")
    try:
        return Genome.from_json(path.read_text())
    except (GenomeError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: {err}") from None


def write_genome(out: Path, genome: Genome, cfg: CfgNode) -> Path:
    """Writes ``out/<id>.json`` and ``out/<id>.xml`` atomically; returns the JSON path."""
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / f"{genome.id}.xml", to_mjcf(genome, cfg))
    path = out / f"{genome.id}.json"
    atomic_write_text(path, genome.to_json())
    return path


def sample(cfg: CfgNode, num: int, seed: int, out: Path, mutations: int = 0) -> list[Path]:
    """``num`` random genomes, each mutated ``mutations`` times; genome k uses the k-th
    child of ``SeedSequence(seed)``, so a larger ``num`` keeps the first genomes.

    Ids are ``s<seed>-<k>-m<j>`` after j mutations; only the last of each chain is written.
    """
    if num < 1 or mutations < 0 or seed < 0:
        raise InputError(f"need --num >= 1, --mutations >= 0 and --seed >= 0 (got {num}, {mutations}, {seed})")
    paths = []
    for k, child_seed in enumerate(np.random.SeedSequence(seed).spawn(num)):
        rng = np.random.default_rng(child_seed)
        genome = random_genome(cfg, rng, f"s{seed}-{k:04d}-m0")
        for j in range(1, mutations + 1):
            genome = mutate(genome, cfg, rng, f"s{seed}-{k:04d}-m{j}")
        paths.append(write_genome(out, genome, cfg))
    return paths


def genome_xml(cfg: CfgNode, path: Path) -> str:
    return to_mjcf(load_genome(path), cfg)


def image(cfg: CfgNode, path: Path, out: Path, size: tuple[int, int] = (480, 360)) -> Path:
    """Writes a PNG picture of the genome at ``path`` (rendered headless; see derl.envs.media)."""
    if out.suffix.lower() != ".png" or not 16 <= min(size) <= max(size) <= MAX_IMAGE_SIDE:
        raise InputError(f"--out must be a .png file and --size within 16 .. {MAX_IMAGE_SIDE} pixels a side "
                         f"(got {out}, {size})")
    out.parent.mkdir(parents=True, exist_ok=True)
    return write_png(render_body(to_mjcf(load_genome(path), cfg), cfg, size), out)


def mutate_file(cfg: CfgNode, path: Path, seed: int, out: Path) -> Path:
    """Writes one child of the genome at ``path``, with id ``<parent id>-c<seed>``."""
    if seed < 0:
        raise InputError(f"--seed must be >= 0, got {seed}")
    parent = load_genome(path)
    child = mutate(parent, cfg, np.random.default_rng(seed), f"{parent.id}-c{seed}")
    return write_genome(out, child, cfg)


def stats(folder: Path) -> dict:
    """Counts over ``folder/*.json``: limb and DoF histograms, unique genomes and species."""
    if not folder.is_dir():
        raise InputError(f"not a folder: {folder}")
    genomes = [load_genome(p) for p in sorted(folder.glob("*.json"))]
    labels = species_labels([rotation_signature(g) for g in genomes])
    return {
        "genomes": len(genomes),
        "limbs": _histogram(g.num_limbs for g in genomes),
        "dof": _histogram(g.dof for g in genomes),
        "unique_genomes": len({g.body() for g in genomes}),
        "unique_structures": len(set(labels)),
    }


def _histogram(values) -> dict[str, int]:
    return {str(k): n for k, n in sorted(Counter(values).items())}
