"""Typed records of a run's published morphologies, built from ``metadata/`` and ``genomes/``.

Body statistics (limb count, degrees of freedom, mass) come from the genome JSON alone: no
MJCF is built and nothing is compiled, so a run of thousands of morphologies is read in a
second. The mass is MuJoCo's (sphere head, capsule limbs, uniform densities), worked out by hand.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from derl.evolution.record import PublishedRecord


@dataclass(frozen=True)
class BodyStats:
    """Limb count, hinge count and total mass (kg) of a genome; None where the genome has no body."""

    limbs: int | None = None
    dof: int | None = None
    mass: float | None = None


@dataclass(frozen=True)
class Morphology:
    """One published morphology.

    ``publication`` is its rank in publication order (0 = first published): the metadata's
    ``publication`` number where every record has one, else the order of ``published_at``
    (then slot). ``fitness`` holds every numeric result (``return``, ``__reward__*``,
    ``x_pos``, ``metric``, ...); ``lineage`` runs from the initial ancestor to this id.
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

    @property
    def is_initial(self) -> bool:
        return self.parent_id is None


def body_stats(genome: dict[str, Any] | None) -> BodyStats:
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


def publication_order(metadata: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records in publication order: by ``publication`` if all have it, else ``published_at``, slot."""
    if metadata and all(isinstance(m.get("publication"), int) for m in metadata):
        return sorted(metadata, key=lambda m: m["publication"])
    return sorted(metadata, key=lambda m: (m.get("published_at") or 0.0, m.get("slot", 0), m["id"]))


def to_record(metadata: dict[str, Any], genome: dict[str, Any] | None, publication: int) -> Morphology:
    """The morphology of a metadata object that passed its schema (``RunDir.read_metadata``), with the
    body of its genome, ``publication``-th in publication order."""
    published = PublishedRecord.from_json(metadata)
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
        wall_time=_optional_float(published.wall_time),
        iterations=published.iterations,
        env_steps=published.env_steps,
        published_at=_optional_float(published.published_at),
        files=dict(published.files),
    )


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)
