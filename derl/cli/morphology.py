"""What `tools/morphology.py` does: sample, print, mutate and count genome files."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np

from derl.envs.config import WorldCfg
from derl.envs.media import MAX_IMAGE_SIDE, render_body, write_png
from derl.morphology.config import UnimalCfg
from derl.morphology.files import InputError, load_genome, write_genome
from derl.morphology.geometry import rotation_signature
from derl.morphology.mjcf import to_mjcf
from derl.morphology.mutations import mutate
from derl.morphology.population import species_labels

# Every genome file is read with ``load_genome(path, unimal)``: held to the config's design space (LIMB.MAX_LIMBS
# limbs, its ranges) before anything is built from it.


def genome_xml(unimal: UnimalCfg, path: Path) -> str:
    """The MJCF of the genome at ``path``."""
    return to_mjcf(load_genome(path, unimal), unimal)


def image(world: WorldCfg, unimal: UnimalCfg, path: Path, out: Path, size: tuple[int, int] = (480, 360)) -> Path:
    """Writes a PNG picture of the genome at ``path`` (rendered headless in ``world``; see derl.envs.media).

    The MJCF is built with ``world``'s ``XML`` and ``BODY``, the same sections as ``Config.unimal``'s.
    """
    if out.suffix.lower() != ".png" or not 16 <= min(size) <= max(size) <= MAX_IMAGE_SIDE:
        raise InputError(f"--out must be a .png file and --size within 16 .. {MAX_IMAGE_SIDE} pixels a side "
                         f"(got {out}, {size})")
    genome = load_genome(path, unimal)
    out.parent.mkdir(parents=True, exist_ok=True)
    return write_png(render_body(to_mjcf(genome, world), world, size), out)


def mutate_file(unimal: UnimalCfg, path: Path, seed: int, out: Path, overwrite: bool = False) -> Path:
    """Writes one child of the genome at ``path``, with id ``<parent id>-c<seed>`` (``write_genome``)."""
    if seed < 0:
        raise InputError(f"--seed must be >= 0, got {seed}")
    parent = load_genome(path, unimal)
    child = mutate(parent, unimal, np.random.default_rng(seed), f"{parent.id}-c{seed}")
    return write_genome(out, child, unimal, overwrite)


def stats(unimal: UnimalCfg, folder: Path) -> dict:
    """Counts over ``folder/*.json``: limb and DoF histograms, unique genomes and species."""
    if not folder.is_dir():
        raise InputError(f"not a folder: {folder}")
    genomes = [load_genome(p, unimal) for p in sorted(folder.glob("*.json"))]
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
