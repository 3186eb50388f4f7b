"""Typed records of a run's published morphologies, built from ``metadata/`` and ``genomes/``.

Body statistics (limb count, degrees of freedom, mass) come from the genome JSON alone: no
MJCF is built and nothing is compiled, so a run of thousands of morphologies is read in a
second. The mass is MuJoCo's (sphere head, capsule limbs, uniform densities), worked out by hand.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from derl.evolution.folder.record import PublishedRecord


@dataclass(frozen=True)
class BodyStats:
    """Limb count, hinge count and total mass (kg) of a genome; None where the genome has no body."""

    limbs: int | None = None
    dof: int | None = None
    mass: float | None = None


@dataclass(frozen=True)
class Morphology:
    """One published morphology: its ``PublishedRecord`` (``metadata/<id>.json``), as a script reads it, and
    the body of its genome. The only form the read side builds from the record (``to_morphology``).

    The results are in ``fitness``, by name: ``m.fitness["__reward__forward"]``, not
    ``m.__reward__forward`` (no attribute has a result's name).

    Attributes:
        id: the morphology id: its slot in 6 digits (``000042``), ``-attempt`` for a replacement.
        parent_id: the parent's id; None in the initial population.
        lineage: ids from the initial ancestor down to this one (``("000003", "000011", id)``).
        mutation: the operator that made it from its parent; None in the initial population.
        publication: its rank in publication order (0 = first published), the order of the records'
            ``publication`` numbers (``PublishedRecord.publication``: unique, with gaps where a worker died).
        slot: its slot (the search's ``SEARCH_SPACE_SIZE`` slots; the first ``INIT_POPULATION_SIZE``
            hold the initial population).
        attempt: 0, or the replacement number of a morphology that failed in this slot.
        seed: its PPO seed.
        fitness: every numeric result of its training, DERL's statistic over the end of the learning
            curve: ``return``, each reward term (``__reward__forward``, ...), ``energy``, ``x_pos``,
            ``metric`` (docs/reference/output-folder.md#metadataidjson).
        body: limb count, degrees of freedom and mass from the genome (also ``limbs``, ``dof``,
            ``mass``); None each where the genome is missing.
        wall_time: seconds its training took.
        iterations: PPO iterations run.
        env_steps: env steps run.
        published_at: Unix time of publication.
        files: ``genome``, ``xml``, ``checkpoint`` and ``metrics`` paths, relative to ``OUT_DIR``.
    """

    id: str
    parent_id: str | None
    lineage: tuple[str, ...]
    mutation: str | None
    publication: int
    slot: int
    attempt: int
    seed: int | None
    fitness: dict[str, float]
    body: BodyStats
    wall_time: float | None
    iterations: int | None
    env_steps: int | None
    published_at: float | None
    files: dict[str, str] = field(default_factory=dict)

    @property
    def limbs(self) -> int | None:
        return self.body.limbs

    @property
    def dof(self) -> int | None:
        return self.body.dof

    @property
    def mass(self) -> float | None:
        return self.body.mass


def body_stats(genome: Mapping[str, Any] | None) -> BodyStats:
    """Limbs, DoF and mass of a genome dict (``derl.morphology`` schema), without MuJoCo.

    Head: a sphere of ``head_radius``. Limb: a capsule whose segment runs ``radius + length``
    from its body origin (``derl.morphology.geometry.PlacedLimb.segment_end``), so its volume
    is ``pi r^2 (r + length) + 4/3 pi r^3``. A mirrored pair counts twice.
    """
    if not genome or "groups" not in genome:
        return BodyStats()
    try:
        head = genome["head_radius"]
        mass = 4.0 / 3.0 * math.pi * head**3 * genome["head_density"]
        limbs = dof = 0
        for group in genome["groups"]:
            copies = len(group["ids"])
            r = group["radius"]
            volume = math.pi * r * r * (r + group["length"]) + 4.0 / 3.0 * math.pi * r**3
            mass += copies * volume * genome["limb_density"]
            limbs += copies
            dof += copies * len(group["joints"])
    except (KeyError, TypeError, ArithmeticError):  # a genome of the wrong shape, or values that overflow
        return BodyStats()
    return BodyStats(limbs=limbs, dof=dof, mass=mass)


def publication_order(records: list[PublishedRecord]) -> list[PublishedRecord]:
    """The records in publication order: by their ``publication`` numbers (unique, gaps allowed)."""
    return sorted(records, key=lambda record: record.publication)


def to_morphology(published: PublishedRecord, genome: Mapping[str, Any] | None, publication: int) -> Morphology:
    """The morphology of a published record (``PublicationStore.read_metadata``), with the body of its genome,
    ``publication``-th in publication order."""
    return Morphology(
        id=published.id,
        parent_id=published.parent_id,
        lineage=tuple(published.lineage.split("/")),
        mutation=published.mutation,
        publication=publication,
        slot=published.slot,
        attempt=published.attempt,
        seed=published.seed,
        fitness=published.fitness,
        body=body_stats(genome),
        wall_time=published.wall_time,
        iterations=published.iterations,
        env_steps=published.env_steps,
        published_at=published.published_at,
        files=dict(published.files),
    )
