"""Genome files: read one, write one with its MJCF, sample many (tools/morphology.py, tools/bench.py compile)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from derl.fileio.writes import atomic_write_text
from derl.morphology.config import UnimalCfg
from derl.morphology.genome import Genome, GenomeError
from derl.morphology.mjcf import to_mjcf
from derl.morphology.mutations import mutate, random_genome


class InputError(ValueError):
    """A bad argument or input file (one-line message for the user)."""


def load_genome(path: Path) -> Genome:
    if not path.is_file():
        raise InputError(f"genome file not found: {path}")
    try:
        return Genome.from_json(path.read_text())
    except (GenomeError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: {err}") from None


def write_genome(out: Path, genome: Genome, unimal: UnimalCfg) -> Path:
    """Writes ``out/<id>.json`` and ``out/<id>.xml`` atomically; returns the JSON path."""
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / f"{genome.id}.xml", to_mjcf(genome, unimal))
    path = out / f"{genome.id}.json"
    atomic_write_text(path, genome.to_json())
    return path


def sample(unimal: UnimalCfg, num: int, seed: int, out: Path, mutations: int | Sequence[int] = 0) -> list[Path]:
    """``num`` random genomes, each mutated ``mutations`` times (a list: genome k ``mutations[k % len]``
    times, small to large bodies in turn); genome k uses the k-th child of ``SeedSequence(seed)``, so
    a larger ``num`` keeps the first genomes.

    Ids are ``s<seed>-<k>-m<j>`` after j mutations; only the last of each chain is written.
    """
    counts = [mutations] if isinstance(mutations, int) else list(mutations)
    if num < 1 or not counts or min(counts) < 0 or seed < 0:
        raise InputError(f"need --num >= 1, --mutations >= 0 and --seed >= 0 (got {num}, {mutations}, {seed})")
    paths = []
    for k, child_seed in enumerate(np.random.SeedSequence(seed).spawn(num)):
        rng = np.random.default_rng(child_seed)
        genome = random_genome(unimal, rng, f"s{seed}-{k:04d}-m0")
        for j in range(1, counts[k % len(counts)] + 1):
            genome = mutate(genome, unimal, rng, f"s{seed}-{k:04d}-m{j}")
        paths.append(write_genome(out, genome, unimal))
    return paths
