"""Genome files: read one, write one with its MJCF, sample many (tools/morphology.py, tools/bench.py compile)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from derl.fileio.reads import MAX_JSON_BYTES, JsonFileError, read_bytes, read_json
from derl.fileio.writes import atomic_write_text
from derl.morphology.config import UnimalCfg
from derl.morphology.genome import Genome
from derl.morphology.genome_checks import GenomeError, json_problem, max_genome_bytes
from derl.morphology.mjcf import to_mjcf
from derl.morphology.mutations import mutate, random_genome


class InputError(ValueError):
    """A bad argument or input file (one-line message for the user)."""


def load_genome(path: Path, unimal: UnimalCfg | None = None) -> Genome:
    """The genome file ``path``, held to ``unimal``'s design space (``Genome.from_dict``) if given.

    Read as every file from outside (``derl.fileio.reads.read_json``): a regular file only, never through
    a symbolic link nor blocking on a FIFO, refused unparsed past ``max_genome_bytes(unimal)`` (16 MiB
    without ``unimal``).

    Raises:
        InputError: missing, not a regular file, too large, not a genome, or outside the design space
            (one line naming ``path``).
    """
    try:
        data = read_json(path, MAX_JSON_BYTES if unimal is None else max_genome_bytes(unimal))
    except FileNotFoundError:
        raise InputError(f"genome file not found: {path}") from None
    except JsonFileError as err:
        raise InputError(json_problem(err, unimal)) from None
    except OSError as err:
        raise InputError(f"{path}: cannot be read ({err.strerror or err})") from None
    try:
        return Genome.from_dict(data, unimal)
    except GenomeError as err:
        raise InputError(f"{path}: {err}") from None


def write_genome(out: Path, genome: Genome, unimal: UnimalCfg, overwrite: bool = False) -> Path:
    """Writes ``out/<id>.xml`` and ``out/<id>.json`` atomically; returns the JSON path.

    A file already there with these bytes is kept; one that holds anything else (another body under
    this id: another config, a file of the user's) is replaced only with ``overwrite``, as no tool writes
    over a file unasked (derl.fileio.outputs). Both files are checked before either is written.

    Raises:
        InputError: ``<id>.xml`` or ``<id>.json`` holds something else and ``overwrite`` is false.
    """
    files = {out / f"{genome.id}.xml": to_mjcf(genome, unimal), out / f"{genome.id}.json": genome.to_json()}
    changed = {path: text for path, text in files.items() if not _holds(path, text)}
    taken = [path for path in changed if os.path.lexists(path)]
    if taken and not overwrite:
        raise InputError(f"{taken[0]}: exists and holds another body than {genome.id}; give --overwrite to "
                         "replace it, or another --out")
    out.mkdir(parents=True, exist_ok=True)
    for path, text in changed.items():
        atomic_write_text(path, text)
    return out / f"{genome.id}.json"


def _holds(path: Path, text: str) -> bool:
    """Whether ``path`` is a regular file that holds exactly ``text`` (False when missing or anything else)."""
    try:
        return read_bytes(path, len(text.encode())) == text.encode()
    except OSError:  # missing; NotRegularFile (a link, a FIFO, a folder, longer); unreadable
        return False


def sample(unimal: UnimalCfg, num: int, seed: int, out: Path, mutations: int | Sequence[int] = 0,
           overwrite: bool = False) -> list[Path]:
    """``num`` random genomes, each mutated ``mutations`` times (a list: genome k ``mutations[k % len]``
    times, small to large bodies in turn); genome k uses the k-th child of ``SeedSequence(seed)``, so
    a larger ``num`` keeps the first genomes.

    Ids are ``s<seed>-<k>-m<j>`` after j mutations; only the last of each chain is written
    (``write_genome``, ``overwrite`` as there: a refusal leaves the genomes written before it).
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
        paths.append(write_genome(out, genome, unimal, overwrite))
    return paths
